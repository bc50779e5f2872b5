/*
 * llama_bnb.c - a Linear4bit weight as bitsandbytes and transformers
 * store it, to and from mgrun's NF4 blob (llama_bnb.h), so a model is
 * quantized once: a bitsandbytes folder loads with quant = nf4 by copying
 * its bytes into the blobs, and `mgrun export --dtype nf4` writes one
 * that transformers + bitsandbytes load as is.
 *
 * Why in the llama plugin and not the core: llama is the only model with
 * NF4 weights, and a core API would freeze a format-specific interface
 * in the ABI; the file has no llama dependency (tensors through a getter,
 * the public mg/nf4.h and mg/tensor_file.h), so moving it is a rename.
 *
 * The format, checked against the sources (bitsandbytes 95f9af3,
 * 2026-08-19; transformers main):
 *  - bitsandbytes/nn/modules.py Linear4bit._save_to_state_dict: the
 *    weight W (the packed uint8 data) and, for each item of
 *    quant_state.as_dict(packed=True), "W." + key.
 *  - bitsandbytes/functional.py QuantState.as_dict: tensors absmax,
 *    quant_map (the code), and when nested nested_absmax,
 *    nested_quant_map; everything else (quant_type, blocksize, dtype as
 *    str(torch dtype) without "torch.", shape as a tuple, and nested
 *    nested_blocksize, nested_dtype, nested_offset = offset.item()) is
 *    packed by utils.pack_dict_to_tensor as the uint8 bytes of
 *    json.dumps under "quant_state.bitsandbytes__" + quant_type.
 *    QuantState.from_dict reads them back the same way.
 *  - functional.py quantize_4bit(compress_statistics=True): blocksize
 *    64, offset = absmax.mean(), the absmax minus offset quantized by
 *    quantize_blockwise(blocksize=256) with the dynamic map
 *    (create_dynamic_map()), nested_dtype float32; dequantize_4bit:
 *    absmax = nested_map[qabsmax] * nested_absmax[b / 256] + offset.
 *  - backends/default/ops.py quantize_4bit: codes packed two per byte,
 *    element 2j in the high nibble, the packed tensor shaped
 *    [(n + 1) / 2, 1]; get_4bit_type("nf4") the 16-entry table.
 *  - transformers quantizers/quantizer_bnb_4bit.py: a pre-quantized
 *    weight needs "W.quant_state.bitsandbytes__nf4" (or __fp4) in the
 *    state dict, and every "W." key goes to Params4bit.from_prequantized.
 * These are the bytes of mgrun's blob (mg/nf4.h) part for part, so both
 * directions copy; only a weight without double quantization (absmax
 * F32) has no blob form, and is dequantized or refused by name.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_bnb.h"
#include "mg/nf4.h"

/* The tolerance on the tables (quant_map, nested_quant_map) a file
 * carries against ours: other writers may round them differently. */
#define TABLE_TOL 1e-7

static const char qs_nf4[] = ".quant_state.bitsandbytes__nf4";
static const char qs_fp4[] = ".quant_state.bitsandbytes__fp4";

int bnb_check_config(const char *path, const char *text)
{
	cJSON *j = cJSON_Parse(text);
	const cJSON *q =
		cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
	int rc = 0;
	if (q && !cJSON_IsNull(q)) {
		const cJSON *qm = cJSON_GetObjectItemCaseSensitive(
				    q, "quant_method"),
			    *l4 = cJSON_GetObjectItemCaseSensitive(
				    q, "load_in_4bit"),
			    *l8 = cJSON_GetObjectItemCaseSensitive(
				    q, "load_in_8bit"),
			    *qt = cJSON_GetObjectItemCaseSensitive(
				    q, "bnb_4bit_quant_type");
		rc = 1;
		if (!cJSON_IsObject(q) || !cJSON_IsString(qm) ||
		    strcmp(qm->valuestring, "bitsandbytes"))
			rc = mg_error("%s: quantization_config: quant_method "
				      "%s; mgrun reads bitsandbytes 4-bit "
				      "(nf4) folders only",
				      path,
				      cJSON_IsString(qm) ? qm->valuestring
							 : "(missing)");
		else if (cJSON_IsTrue(l8) || !cJSON_IsTrue(l4))
			rc = mg_error("%s: quantization_config: bitsandbytes "
				      "%s; mgrun reads 4-bit (load_in_4bit, "
				      "nf4) folders only",
				      path,
				      cJSON_IsTrue(l8)
					      ? "8-bit (load_in_8bit)"
					      : "without load_in_4bit");
		else if (qt && !(cJSON_IsString(qt) &&
				 !strcmp(qt->valuestring, "nf4")))
			rc = mg_error("%s: quantization_config: "
				      "bnb_4bit_quant_type %s; mgrun reads "
				      "nf4 only",
				      path,
				      cJSON_IsString(qt) ? qt->valuestring
							 : "(not a string)");
	}
	cJSON_Delete(j);
	return rc;
}

static int get_sub(bnb_get_fn get, void *ctx, const char *name,
		   const char *suffix, struct mg_tensor *v, const char **path)
{
	char key[512];
	if (snprintf(key, sizeof key, "%s%s", name, suffix) >= (int)sizeof key)
		return mg_error("bitsandbytes: tensor name '%s' too long",
				name);
	return get(ctx, key, v, path);
}

int bnb_probe(bnb_get_fn get, void *ctx, const char *name)
{
	static const char *const sub[] = {qs_nf4, qs_fp4, ".absmax"};
	for (size_t i = 0; i < sizeof sub / sizeof *sub; i++) {
		struct mg_tensor v;
		const char *path;
		int rc = get_sub(get, ctx, name, sub[i], &v, &path);
		if (rc)
			return rc;
	}
	return 0;
}

static void shape_str(const struct mg_tensor *t, char *s, size_t cap)
{
	s[0] = 0;
	for (int i = 0; i < t->ndim; i++)
		snprintf(s + strlen(s), cap - strlen(s), "%s%lld",
			 i ? ", " : "", (long long)t->shape[i]);
}

/* Tensor name+suffix, which must exist with dtype dt and shape
 * [a] (b < 0) or [a, b]. */
static int want(bnb_get_fn get, void *ctx, const struct bnb_weight *w,
		const char *suffix, enum mg_dtype dt, int64_t a, int64_t b,
		struct mg_tensor *v)
{
	const char *name = w->name, *path = w->path;
	int rc = get_sub(get, ctx, name, suffix, v, &path);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return mg_error("%s: bitsandbytes weight '%s' has no tensor "
				"'%s%s'",
				w->path, name, name, suffix);
	const int nd = b < 0 ? 1 : 2;
	if (v->dtype != dt || v->ndim != nd || v->shape[0] != a ||
	    (nd == 2 && v->shape[1] != b)) {
		char got[96];
		shape_str(v, got, sizeof got);
		if (nd == 1)
			return mg_error("%s: tensor '%s%s' is %s [%s], "
					"bitsandbytes NF4 of this weight has "
					"%s [%lld]",
					path, name, suffix,
					mg_dtype_name(v->dtype), got,
					mg_dtype_name(dt), (long long)a);
		return mg_error("%s: tensor '%s%s' is %s [%s], bitsandbytes "
				"NF4 of this weight has %s [%lld, %lld]",
				path, name, suffix, mg_dtype_name(v->dtype),
				got, mg_dtype_name(dt), (long long)a,
				(long long)b);
	}
	return 0;
}

static float f32_at(const void *p, int64_t i)
{
	float f;
	memcpy(&f, (const unsigned char *)p + 4 * i, 4);
	return f;
}

/* A float table in the file against ours, within TABLE_TOL. */
static int same_table(const char *path, const char *name, const char *suffix,
		      const void *data, const float *ours, int n,
		      const char *what)
{
	for (int i = 0; i < n; i++) {
		const float f = f32_at(data, i);
		if (!(fabs((double)f - (double)ours[i]) <= TABLE_TOL))
			return mg_error("%s: tensor '%s%s' is not %s: entry %d "
					"is %.9g, expected %.9g",
					path, name, suffix, what, i, (double)f,
					(double)ours[i]);
	}
	return 0;
}

/* The JSON of the packed quant_state: quant_type, blocksize, dtype,
 * shape and (nested) nested_blocksize, nested_dtype, nested_offset. */
static int parse_state(const char *path, const char *name,
		       const struct mg_tensor *qs, struct bnb_weight *w,
		       bool *nested)
{
	const char *key = qs_nf4;
	const int64_t len = mg_tensor_numel(qs);
	if (qs->dtype != MG_U8 || qs->ndim != 1 || len < 2 || len > 65536)
		return mg_error("%s: tensor '%s%s' is not the bytes of a JSON "
				"object (U8 [2..65536])",
				path, name, key);
	cJSON *j = cJSON_ParseWithLength(qs->data, (size_t)len);
	int rc = 0;
	const cJSON *qt = cJSON_GetObjectItemCaseSensitive(j, "quant_type"),
		    *bs = cJSON_GetObjectItemCaseSensitive(j, "blocksize"),
		    *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype"),
		    *sh = cJSON_GetObjectItemCaseSensitive(j, "shape"),
		    *nb = cJSON_GetObjectItemCaseSensitive(j,
							   "nested_blocksize"),
		    *nd = cJSON_GetObjectItemCaseSensitive(j, "nested_dtype"),
		    *no = cJSON_GetObjectItemCaseSensitive(j, "nested_offset");
	if (!cJSON_IsObject(j))
		rc = mg_error("%s: tensor '%s%s' is not a JSON object", path,
			      name, key);
	else if (!cJSON_IsString(qt) || strcmp(qt->valuestring, "nf4"))
		rc = mg_error("%s: tensor '%s%s': quant_type %s, mgrun reads "
			      "nf4 only",
			      path, name, key,
			      cJSON_IsString(qt) ? qt->valuestring
						 : "(missing)");
	else if (!cJSON_IsNumber(bs) || bs->valuedouble != MG_NF4_BLOCK)
		rc = mg_error("%s: tensor '%s%s': blocksize %g, mgrun's NF4 "
			      "has blocks of %d",
			      path, name, key,
			      cJSON_IsNumber(bs) ? bs->valuedouble : -1.0,
			      MG_NF4_BLOCK);
	else if (!cJSON_IsString(dt) || (strcmp(dt->valuestring, "bfloat16") &&
					 strcmp(dt->valuestring, "float16") &&
					 strcmp(dt->valuestring, "float32")))
		rc = mg_error("%s: tensor '%s%s': dtype %s is not bfloat16, "
			      "float16 or float32",
			      path, name, key,
			      cJSON_IsString(dt) ? dt->valuestring
						 : "(missing)");
	else if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != 2 ||
		 !cJSON_IsNumber(cJSON_GetArrayItem(sh, 0)) ||
		 !cJSON_IsNumber(cJSON_GetArrayItem(sh, 1)) ||
		 cJSON_GetArrayItem(sh, 0)->valuedouble != (double)w->out ||
		 cJSON_GetArrayItem(sh, 1)->valuedouble != (double)w->in)
		rc = mg_error("%s: tensor '%s%s': shape is not [%lld, %lld], "
			      "the weight's shape in config.json",
			      path, name, key, (long long)w->out,
			      (long long)w->in);
	if (!rc)
		snprintf(w->dtype, sizeof w->dtype, "%s", dt->valuestring);
	*nested = no || nb || nd;
	if (!rc && *nested) {
		if (!cJSON_IsNumber(nb) ||
		    nb->valuedouble != MG_NF4_NESTED_BLOCK)
			rc = mg_error("%s: tensor '%s%s': nested_blocksize %g, "
				      "mgrun's NF4 has %d",
				      path, name, key,
				      cJSON_IsNumber(nb) ? nb->valuedouble
							 : -1.0,
				      MG_NF4_NESTED_BLOCK);
		else if (!cJSON_IsString(nd) ||
			 strcmp(nd->valuestring, "float32"))
			rc = mg_error("%s: tensor '%s%s': nested_dtype %s, not "
				      "float32",
				      path, name, key,
				      cJSON_IsString(nd) ? nd->valuestring
							 : "(missing)");
		else if (!cJSON_IsNumber(no) || !isfinite(no->valuedouble) ||
			 fabs(no->valuedouble) > 3e38)
			rc = mg_error("%s: tensor '%s%s': nested_offset is not "
				      "a finite f32 number",
				      path, name, key);
		else
			w->offset = (float)no->valuedouble;
	}
	cJSON_Delete(j);
	return rc;
}

int bnb_read(bnb_get_fn get, void *ctx, const char *name, int64_t out,
	     int64_t in, struct bnb_weight *w)
{
	memset(w, 0, sizeof *w);
	w->path = "?";
	if (snprintf(w->name, sizeof w->name, "%s", name) >=
	    (int)sizeof w->name)
		return mg_error("bitsandbytes: tensor name '%s' too long",
				name);
	if (out < 1 || in < 1 || out > ((int64_t)1 << 40) / in)
		return mg_error("bitsandbytes: '%s': bad shape", name);
	w->out = out;
	w->in = in;
	w->n = out * in;
	struct mg_nf4_layout l = mg_nf4_layout(w->n);
	w->nblocks = l.nblocks;
	w->nnested = l.nnested;
	struct mg_tensor v;
	const char *path = "?";
	int rc = get_sub(get, ctx, name, qs_fp4, &v, &path);
	if (rc > 0)
		return mg_error("%s: tensor '%s%s': quant_type fp4, mgrun "
				"reads nf4 only",
				path, name, qs_fp4);
	if (rc < 0)
		return -1;
	rc = get(ctx, name, &v, &path);
	if (rc <= 0)
		return rc ? -1 : mg_error("bitsandbytes: no tensor '%s'", name);
	w->path = path;
	if (v.dtype != MG_U8)
		return mg_error("%s: tensor '%s' is %s: bitsandbytes NF4 "
				"weights are packed in uint8 "
				"(bnb_4bit_quant_storage uint8)",
				path, name, mg_dtype_name(v.dtype));
	if (want(get, ctx, w, "", MG_U8, (w->n + 1) / 2, 1, &v))
		return -1;
	w->codes = v.data;
	struct mg_tensor qs;
	const char *qpath = path;
	rc = get_sub(get, ctx, name, qs_nf4, &qs, &qpath);
	if (rc <= 0)
		return rc ? -1
			  : mg_error("%s: weight '%s' is uint8 but has no "
				     "'%s%s' (not a bitsandbytes 4-bit "
				     "weight?)",
				     path, name, name, qs_nf4);
	if (parse_state(qpath, name, &qs, w, &w->nested))
		return -1;
	if (!w->nested) {
		/* absmax in f32 per block: readable, not a blob */
		if (want(get, ctx, w, ".absmax", MG_F32, w->nblocks, -1, &v))
			return -1;
		w->absmax = v.data;
	} else {
		if (want(get, ctx, w, ".absmax", MG_U8, w->nblocks, -1, &v))
			return -1;
		w->absmax = v.data;
		if (want(get, ctx, w, ".nested_absmax", MG_F32, w->nnested, -1,
			 &v))
			return -1;
		w->nested_absmax = v.data;
		for (int64_t i = 0; i < w->nnested; i++)
			if (!isfinite(f32_at(v.data, i)))
				return mg_error("%s: tensor '%s.nested_absmax' "
						"holds a non-finite value",
						path, name);
		if (want(get, ctx, w, ".nested_quant_map", MG_F32, 256, -1,
			 &v) ||
		    same_table(path, name, ".nested_quant_map", v.data,
			       mg_nf4_nested_map(), 256,
			       "bitsandbytes' dynamic 8-bit map"))
			return -1;
	}
	if (want(get, ctx, w, ".quant_map", MG_F32, 16, -1, &v) ||
	    same_table(path, name, ".quant_map", v.data, mg_nf4_code, 16,
		       "the NF4 table"))
		return -1;
	if (!w->nested)
		for (int64_t i = 0; i < w->nblocks; i++)
			if (!isfinite(f32_at(w->absmax, i)))
				return mg_error("%s: tensor '%s.absmax' holds "
						"a non-finite value",
						path, name);
	return 0;
}

int bnb_to_blob(const struct bnb_weight *w, void *blob)
{
	if (!w->nested)
		return mg_error("%s: weight '%s' has no double quantization "
				"(absmax is float32; "
				"bnb_4bit_use_double_quant false): "
				"mgrun's NF4 blob holds double-quantized "
				"scales only, so it cannot be stored "
				"as is; load it without quant = nf4 "
				"(dequantized) or quantize the float "
				"model with quant = nf4",
				w->path, w->name);
	const struct mg_nf4_layout l = mg_nf4_layout(w->n);
	unsigned char *b = blob;
	memset(b, 0, l.bytes);
	memcpy(b + l.codes, w->codes, (size_t)(w->n + 1) / 2);
	if (w->n % 2) /* the pad nibble, which bitsandbytes fills */
		b[l.codes + (size_t)w->n / 2] &= 0xF0;
	memcpy(b + l.absmax, w->absmax, (size_t)w->nblocks);
	memcpy(b + l.nested_absmax, w->nested_absmax, 4 * (size_t)w->nnested);
	memcpy(b + l.offset, &w->offset, 4);
	return 0;
}

int bnb_dequantize(const struct bnb_weight *w, float *out)
{
	if (w->nested) {
		const struct mg_nf4_layout l = mg_nf4_layout(w->n);
		void *blob = malloc(l.bytes);
		if (!blob)
			return mg_error("bitsandbytes: out of memory for '%s'",
					w->name);
		int rc = bnb_to_blob(w, blob) ||
			 mg_nf4_dequantize_host(out, blob, w->n);
		free(blob);
		return rc ? -1 : 0;
	}
	for (int64_t i = 0; i < w->n; i++) {
		const int q = (w->codes[i / 2] >> (i % 2 ? 0 : 4)) & 15;
		out[i] = mg_nf4_code[q] * f32_at(w->absmax, i / MG_NF4_BLOCK);
	}
	return 0;
}

static int add(struct mg_tensor_writer *w, const char *name, const char *suffix,
	       const void *data, enum mg_dtype dt, int ndim, int64_t a,
	       int64_t b)
{
	char key[512];
	if (snprintf(key, sizeof key, "%s%s", name, suffix) >= (int)sizeof key)
		return mg_error("bitsandbytes: tensor name '%s' too long",
				name);
	const int64_t shape[2] = {a, b};
	struct mg_tensor t =
		mg_tensor_make((void *)data, dt, MG_DEV_CPU, ndim, shape);
	return mg_tensor_writer_add(w, key, &t);
}

int bnb_write(struct mg_tensor_writer *w, const char *name, const void *blob,
	      int64_t out, int64_t in, const char *dtype)
{
	const int64_t n = out * in;
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	const unsigned char *b = blob;
	float offset, *nested = malloc(4 * (size_t)l.nnested);
	if (!nested)
		return mg_error("bitsandbytes: out of memory");
	memcpy(nested, b + l.nested_absmax, 4 * (size_t)l.nnested);
	memcpy(&offset, b + l.offset, 4);
	/* the packed quant_state, as pack_dict_to_tensor writes it */
	cJSON *j = cJSON_CreateObject(), *sh = cJSON_CreateArray();
	cJSON_AddStringToObject(j, "quant_type", "nf4");
	cJSON_AddNumberToObject(j, "blocksize", MG_NF4_BLOCK);
	cJSON_AddStringToObject(j, "dtype", dtype);
	cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)out));
	cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)in));
	cJSON_AddItemToObject(j, "shape", sh);
	cJSON_AddNumberToObject(j, "nested_blocksize", MG_NF4_NESTED_BLOCK);
	cJSON_AddStringToObject(j, "nested_dtype", "float32");
	cJSON_AddNumberToObject(j, "nested_offset", (double)offset);
	char *text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	int rc = !text ? mg_error("bitsandbytes: out of memory")
		       : add(w, name, "", b + l.codes, MG_U8, 2, (n + 1) / 2,
			     1) ||
				 add(w, name, ".absmax", b + l.absmax, MG_U8, 1,
				     l.nblocks, 0) ||
				 add(w, name, ".quant_map", mg_nf4_code, MG_F32,
				     1, 16, 0) ||
				 add(w, name, ".nested_absmax", nested, MG_F32,
				     1, l.nnested, 0) ||
				 add(w, name, ".nested_quant_map",
				     mg_nf4_nested_map(), MG_F32, 1, 256, 0) ||
				 add(w, name, qs_nf4, text, MG_U8, 1,
				     (int64_t)strlen(text), 0);
	free(text);
	free(nested);
	return rc ? -1 : 0;
}
