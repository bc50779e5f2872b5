/*
 * test_bnb.c - llama_bnb.c, bitsandbytes' 4-bit NF4 tensors to and from
 * NF4 blobs, on files written to WORKDIR.
 *
 *   test_bnb WORKDIR TEST
 *
 * Tests: roundtrip (random weights of several shapes, odd sizes and more
 * than one nested block: blob -> bitsandbytes tensors in a safetensors
 * file -> blob is byte-identical; the tensors' dtypes, shapes, tables
 * and quant_state JSON are bitsandbytes'; dequantize equals the blob's),
 * hostile (wrong quant_type, blocksize, shapes, dtypes, tables, JSON,
 * unnested statistics, a truncated file: each refused naming the file
 * and the tensor, never a crash), config (quantization_config accepted
 * or refused by name).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/test_util.h"
#include "llama_bnb.h"
#include "mg/nf4.h"

static const char *dir;

static int file_get(void *ctx, const char *name, struct mg_tensor *view,
		    const char **path)
{
	struct mg_tensor_file *f = ctx;
	*path = mg_tensor_file_path(f);
	return mg_tensor_file_get(f, name, view);
}

static float *randn(int64_t n, uint64_t seed, double scale)
{
	float *x = malloc((size_t)n * sizeof *x);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(scale * mg_rng_normal(seed, (uint64_t)i));
	return x;
}

/* The blob of a random [out, in] weight. */
static void *make_blob(int64_t out, int64_t in, uint64_t seed)
{
	const int64_t n = out * in;
	float *x = randn(n, seed, 0.02 * (1 + (double)(seed % 5)));
	/* a few outliers, as real weights have */
	for (int64_t i = 0; i < n; i += 997)
		x[i] *= 40;
	void *blob = calloc(1, mg_nf4_layout(n).bytes);
	if (mg_nf4_quantize_host(blob, x, n))
		fail("quantize: %s", mg_last_error());
	free(x);
	return blob;
}

static const char W[] = "model.layers.0.mlp.down_proj.weight";

static void test_roundtrip(void)
{
	static const int64_t shapes[][2] = {{3, 7},    {1, 1},	   {64, 64},
					    {96, 640}, {257, 513}, {5, 64}};
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
		const int64_t out = shapes[s][0], in = shapes[s][1],
			      n = out * in;
		const struct mg_nf4_layout l = mg_nf4_layout(n);
		void *blob = make_blob(out, in, 11 + s);
		char path[4200];
		snprintf(path, sizeof path, "%s/rt%zu.safetensors", dir, s);
		struct mg_tensor_writer *w = mg_tensor_writer_new();
		CHECK(bnb_write(w, W, blob, out, in, "bfloat16") == 0);
		CHECK(mg_tensor_writer_save(w, path) == 0);
		mg_tensor_writer_free(w);
		struct mg_tensor_file *f = mg_tensor_file_open(path);
		if (!f) {
			fail("open %s: %s", path, mg_last_error());
			free(blob);
			continue;
		}
		CHECK(bnb_probe(file_get, f, W) == 1);
		CHECK(bnb_probe(file_get, f, "model.norm.weight") == 0);
		/* what bitsandbytes' as_dict(packed=True) holds */
		struct mg_tensor v;
		char key[256];
		snprintf(key, sizeof key, "%s", W);
		CHECK(mg_tensor_file_get(f, key, &v) == 1 && v.dtype == MG_U8 &&
		      v.ndim == 2 && v.shape[0] == (n + 1) / 2 &&
		      v.shape[1] == 1);
		snprintf(key, sizeof key, "%s.absmax", W);
		CHECK(mg_tensor_file_get(f, key, &v) == 1 && v.dtype == MG_U8 &&
		      v.ndim == 1 && v.shape[0] == l.nblocks);
		snprintf(key, sizeof key, "%s.quant_map", W);
		CHECK(mg_tensor_file_get(f, key, &v) == 1 &&
		      v.dtype == MG_F32 && v.shape[0] == 16 &&
		      !memcmp(v.data, mg_nf4_code, 64));
		snprintf(key, sizeof key, "%s.nested_absmax", W);
		CHECK(mg_tensor_file_get(f, key, &v) == 1 &&
		      v.dtype == MG_F32 && v.shape[0] == l.nnested);
		snprintf(key, sizeof key, "%s.nested_quant_map", W);
		CHECK(mg_tensor_file_get(f, key, &v) == 1 &&
		      v.dtype == MG_F32 && v.shape[0] == 256 &&
		      !memcmp(v.data, mg_nf4_nested_map(), 1024));
		snprintf(key, sizeof key, "%s.quant_state.bitsandbytes__nf4",
			 W);
		if (mg_tensor_file_get(f, key, &v) == 1 && v.dtype == MG_U8) {
			cJSON *j = cJSON_ParseWithLength(v.data,
							 (size_t)v.shape[0]);
			char *t = cJSON_PrintUnformatted(j);
			char want[256];
			snprintf(want, sizeof want, "\"shape\":[%lld,%lld]",
				 (long long)out, (long long)in);
			CHECK_HAS(t, "\"quant_type\":\"nf4\"");
			CHECK_HAS(t, "\"blocksize\":64");
			CHECK_HAS(t, "\"dtype\":\"bfloat16\"");
			CHECK_HAS(t, want);
			CHECK_HAS(t, "\"nested_blocksize\":256");
			CHECK_HAS(t, "\"nested_dtype\":\"float32\"");
			float off;
			memcpy(&off, (char *)blob + l.offset, 4);
			const cJSON *o =
				cJSON_GetObjectItem(j, "nested_offset");
			CHECK(cJSON_IsNumber(o) &&
			      (float)o->valuedouble == off);
			free(t);
			cJSON_Delete(j);
		} else {
			fail("%s: no packed quant_state", path);
		}
		struct bnb_weight bw;
		void *back = malloc(l.bytes);
		memset(back, 0xAB, l.bytes);
		if (bnb_read(file_get, f, W, out, in, &bw) ||
		    bnb_to_blob(&bw, back))
			fail("read back %s: %s", path, mg_last_error());
		else if (memcmp(blob, back, l.bytes))
			fail("[%lld, %lld]: blob -> bitsandbytes -> blob is "
			     "not "
			     "byte-identical",
			     (long long)out, (long long)in);
		float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
		CHECK(mg_nf4_dequantize_host(a, blob, n) == 0);
		CHECK(bnb_dequantize(&bw, b) == 0);
		CHECK(!memcmp(a, b, (size_t)n * 4));
		free(a);
		free(b);
		free(back);
		free(blob);
		mg_tensor_file_close(f);
	}
}

/* Ways to spoil the tensors of one weight. */
enum spoil {
	OK = 0,
	QT_FP4,	      /* quant_type fp4 in the JSON */
	FP4_KEY,      /* the packed key is bitsandbytes__fp4 */
	BLOCK_128,    /* blocksize 128 */
	NESTED_512,   /* nested_blocksize 512 */
	SHAPE_JSON,   /* JSON shape of another weight */
	CODES_SHAPE,  /* W of the wrong length */
	CODES_F32,    /* W stored as F32 */
	ABSMAX_SHORT, /* absmax one short */
	QMAP_FP4,     /* quant_map not the NF4 table */
	NMAP_OFF,     /* nested_quant_map off by 1e-6 */
	NMAP_CLOSE,   /* nested_quant_map off by 5e-8: accepted */
	JSON_BAD,     /* quant_state not JSON */
	NO_STATE,     /* no quant_state at all */
	NO_NESTED,    /* nested_absmax missing */
	OFFSET_STR,   /* nested_offset a string */
	UNNESTED,     /* absmax F32, no nested_*: readable, not a blob */
	NSPOIL,
};

static const char *const spoil_name[NSPOIL] = {
	"ok",	      "qt_fp4",	     "fp4_key",	  "block_128",	  "nested_512",
	"shape_json", "codes_shape", "codes_f32", "absmax_short", "qmap_fp4",
	"nmap_off",   "nmap_close",  "json_bad",  "no_state",	  "no_nested",
	"offset_str", "unnested"};

/* What the error must say (after the file and the tensor). */
static const char *const spoil_says[NSPOIL] = {
	NULL,
	"quant_type fp4",
	"quant_type fp4",
	"blocksize 128",
	"nested_blocksize 512",
	"shape is not [32, 96]",
	".weight' is U8 [1535, 1]",
	"packed in uint8",
	".absmax' is U8 [47]",
	"not the NF4 table",
	"not bitsandbytes' dynamic 8-bit map",
	NULL,
	"not a JSON object",
	"no '" /* ...quant_state */,
	"has no tensor",
	"nested_offset is not",
	"no double quantization",
};

static void add_t(struct mg_tensor_writer *w, const char *suffix,
		  const void *data, enum mg_dtype dt, int ndim, int64_t a,
		  int64_t b)
{
	char key[256];
	snprintf(key, sizeof key, "%s%s", W, suffix);
	const int64_t shape[2] = {a, b};
	struct mg_tensor t =
		mg_tensor_make((void *)data, dt, MG_DEV_CPU, ndim, shape);
	if (mg_tensor_writer_add(w, key, &t))
		fail("writer: %s", mg_last_error());
}

/* The weight's tensors written by hand (not by bnb_write), spoiled. */
static void write_spoiled(const char *path, const void *blob, int64_t out,
			  int64_t in, enum spoil sp, const float *x)
{
	const int64_t n = out * in;
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	const unsigned char *b = blob;
	float offset, nested[8], qmap[16], nmap[256];
	memcpy(&offset, b + l.offset, 4);
	memcpy(nested, b + l.nested_absmax, 4 * (size_t)l.nnested);
	memcpy(qmap, mg_nf4_code, sizeof qmap);
	memcpy(nmap, mg_nf4_nested_map(), sizeof nmap);
	struct mg_tensor_writer *w = mg_tensor_writer_new();
	float *codes_f = calloc((size_t)n, 4);
	if (sp == CODES_F32)
		add_t(w, "", codes_f, MG_F32, 2, (n + 1) / 2, 1);
	else
		add_t(w, "", b + l.codes, MG_U8, 2,
		      (n + 1) / 2 - (sp == CODES_SHAPE), 1);
	float absf[64];
	if (sp == UNNESTED) {
		/* the blocks' true absmax in f32, as quantize_4bit without
		 * compress_statistics keeps them */
		for (int64_t k = 0; k < l.nblocks; k++) {
			float m = 0;
			for (int64_t i = k * 64; i < n && i < (k + 1) * 64; i++)
				m = fmaxf(m, fabsf(x[i]));
			absf[k] = m;
		}
		add_t(w, ".absmax", absf, MG_F32, 1, l.nblocks, 0);
	} else {
		add_t(w, ".absmax", b + l.absmax, MG_U8, 1,
		      l.nblocks - (sp == ABSMAX_SHORT), 0);
	}
	if (sp == QMAP_FP4)
		qmap[3] = 0.25f;
	add_t(w, ".quant_map", qmap, MG_F32, 1, 16, 0);
	if (sp != NO_NESTED && sp != UNNESTED)
		add_t(w, ".nested_absmax", nested, MG_F32, 1, l.nnested, 0);
	if (sp == NMAP_OFF)
		nmap[200] += 1e-6f;
	if (sp == NMAP_CLOSE)
		nmap[200] += 5e-8f;
	if (sp != UNNESTED)
		add_t(w, ".nested_quant_map", nmap, MG_F32, 1, 256, 0);
	char json[512];
	if (sp == UNNESTED)
		snprintf(json, sizeof json,
			 "{\"quant_type\": \"nf4\", "
			 "\"blocksize\": 64, \"dtype\": \"float16\", "
			 "\"shape\": [%lld, %lld]}",
			 (long long)out, (long long)in);
	else
		snprintf(json, sizeof json,
			 "{\"quant_type\": \"%s\", \"blocksize\": %d, "
			 "\"dtype\": \"bfloat16\", \"shape\": [%lld, %lld], "
			 "\"nested_blocksize\": %d, \"nested_dtype\": "
			 "\"float32\", \"nested_offset\": %s%.9g%s}",
			 sp == QT_FP4 ? "fp4" : "nf4",
			 sp == BLOCK_128 ? 128 : 64,
			 (long long)(sp == SHAPE_JSON ? in : out),
			 (long long)(sp == SHAPE_JSON ? out : in),
			 sp == NESTED_512 ? 512 : 256,
			 sp == OFFSET_STR ? "\"" : "", (double)offset,
			 sp == OFFSET_STR ? "\"" : "");
	if (sp == JSON_BAD)
		snprintf(json, sizeof json, "{\"quant_type\": \"nf4\", ");
	if (sp != NO_STATE)
		add_t(w,
		      sp == FP4_KEY ? ".quant_state.bitsandbytes__fp4"
				    : ".quant_state.bitsandbytes__nf4",
		      json, MG_U8, 1, (int64_t)strlen(json), 0);
	if (mg_tensor_writer_save(w, path))
		fail("save %s: %s", path, mg_last_error());
	mg_tensor_writer_free(w);
	free(codes_f);
}

static void test_hostile(void)
{
	const int64_t out = 32, in = 96, n = out * in;
	float *x = randn(n, 5, 0.05);
	void *blob = calloc(1, mg_nf4_layout(n).bytes);
	CHECK(mg_nf4_quantize_host(blob, x, n) == 0);
	const size_t bytes = mg_nf4_layout(n).bytes;
	void *back = malloc(bytes);
	float *y = malloc((size_t)n * 4);
	for (int sp = 0; sp < NSPOIL; sp++) {
		char path[4200];
		snprintf(path, sizeof path, "%s/%s.safetensors", dir,
			 spoil_name[sp]);
		write_spoiled(path, blob, out, in, sp, x);
		struct mg_tensor_file *f = mg_tensor_file_open(path);
		if (!f) {
			fail("%s: %s", spoil_name[sp], mg_last_error());
			continue;
		}
		struct bnb_weight w;
		mg_error("(none)");
		int rc = bnb_read(file_get, f, W, out, in, &w);
		if (!rc && sp != UNNESTED)
			rc = bnb_to_blob(&w, back);
		const char *e = mg_last_error();
		if (sp == OK || sp == NMAP_CLOSE) {
			if (rc)
				fail("%s refused: %s", spoil_name[sp], e);
			else
				CHECK(!memcmp(back, blob, bytes));
		} else if (sp == UNNESTED) {
			/* readable and dequantized as bitsandbytes does
			 * (code * absmax), but no blob */
			if (rc) {
				fail("unnested refused: %s", e);
			} else {
				CHECK(bnb_dequantize(&w, y) == 0);
				int bad = 0;
				for (int64_t i = 0; i < n; i++)
					bad += !(fabsf(y[i] - x[i]) <=
						 0.2f * fabsf(x[i]) + 0.02f);
				CHECK_INT(bad, 0);
				CHECK(bnb_to_blob(&w, back) != 0);
				e = mg_last_error();
				CHECK_HAS(e, spoil_says[sp]);
				CHECK_HAS(e, path);
				CHECK_HAS(e, W);
			}
		} else if (!rc) {
			fail("%s accepted", spoil_name[sp]);
		} else {
			printf("%-12s %s\n", spoil_name[sp], e);
			CHECK_HAS(e, spoil_says[sp]);
			CHECK_HAS(e, W);
			CHECK_HAS(e, path);
		}
		mg_tensor_file_close(f);
	}
	/* a truncated file: refused when opened, naming it */
	char path[4200], cut[4300];
	snprintf(path, sizeof path, "%s/ok.safetensors", dir);
	snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
	FILE *in_f = fopen(path, "rb"), *out_f = fopen(cut, "wb");
	if (in_f && out_f) {
		char buf[4096];
		size_t got = fread(buf, 1, sizeof buf, in_f);
		fwrite(buf, 1, got > 100 ? got - 100 : got / 2, out_f);
	}
	if (in_f)
		fclose(in_f);
	if (out_f)
		fclose(out_f);
	struct mg_tensor_file *f = mg_tensor_file_open(cut);
	CHECK(f == NULL);
	if (!f)
		CHECK_HAS(mg_last_error(), cut);
	mg_tensor_file_close(f);
	free(x);
	free(y);
	free(blob);
	free(back);
}

static void test_config(void)
{
	static const struct {
		const char *json;
		int rc;
		const char *says;
	} cases[] = {
		{"{\"hidden_size\": 64}", 0, NULL},
		{"{\"quantization_config\": null}", 0, NULL},
		{"{\"quantization_config\": {\"quant_method\": "
		 "\"bitsandbytes\", \"load_in_4bit\": true, "
		 "\"bnb_4bit_quant_type\": \"nf4\"}}",
		 1, NULL},
		{"{\"quantization_config\": {\"quant_method\": \"gptq\"}}", -1,
		 "quant_method gptq"},
		{"{\"quantization_config\": {\"quant_method\": "
		 "\"bitsandbytes\", \"load_in_8bit\": true}}",
		 -1, "8-bit"},
		{"{\"quantization_config\": {\"quant_method\": "
		 "\"bitsandbytes\", \"load_in_4bit\": true, "
		 "\"bnb_4bit_quant_type\": \"fp4\"}}",
		 -1, "bnb_4bit_quant_type fp4"},
		{"{\"quantization_config\": 7}", -1, "quant_method"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int rc = bnb_check_config("cfg/config.json", cases[i].json);
		CHECK_INT(rc, cases[i].rc);
		if (cases[i].says && rc < 0) {
			CHECK_HAS(mg_last_error(), cases[i].says);
			CHECK_HAS(mg_last_error(), "cfg/config.json");
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: test_bnb WORKDIR roundtrip|hostile|"
				"config\n");
		return 2;
	}
	dir = argv[1];
	if (mg_mkdir_p(dir)) {
		fprintf(stderr, "%s\n", mg_last_error());
		return 1;
	}
	if (!strcmp(argv[2], "roundtrip"))
		test_roundtrip();
	else if (!strcmp(argv[2], "hostile"))
		test_hostile();
	else if (!strcmp(argv[2], "config"))
		test_config();
	else {
		fprintf(stderr, "test_bnb: unknown test %s\n", argv[2]);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
