/*
 * llama_hf_save.c - the model op save_hf (`mgrun export`): the model as a
 * Hugging Face folder that transformers (and llama.hf_dir) load as is:
 * config.json with every LlamaConfig field and model.safetensors under
 * the HF names, or past the shard size (save_hf_sharded, ABI 1.6;
 * `export --max-shard-size`) model-0000k-of-0000N.safetensors and
 * model.safetensors.index.json as save_pretrained shards them (the core's
 * mg_shard_writer: each tensor, or a bitsandbytes weight with its
 * companion tensors, one group that is never split; the host holds one
 * shard at most). LoRA adapters are merged into the weights they adapt
 * (W + s B A, in fp32 on the host), so the folder is a plain full model
 * (an NF4 base, quant = nf4, is dequantized first);
 * a tied output head is the embedding, written once as HF writes it;
 * a family that fuses projections in its folders (Phi-3) gets them
 * fused back (qkv_proj, gate_up_proj: the parts' rows in order).
 * With dtype MG_NF4 (`export --dtype nf4`) the folder is a bitsandbytes
 * 4-bit one, as transformers saves a model loaded with
 * BitsAndBytesConfig(load_in_4bit, nf4, double quant, bf16 compute): the
 * seven projections of each layer in bitsandbytes' form (llama_bnb.c;
 * an NF4 base no adapter changes is written as it is, anything else
 * quantized after the merge), the rest in bf16, quantization_config in
 * config.json.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "llama_bnb.h"
#include "mg/int4.h"
#include "mg/nf4.h"
#include "mg/tensor_file.h"

static const char *torch_dtype(enum mg_dtype dt)
{
	return dt == MG_BF16 || dt == MG_NF4 || dt == MG_INT4 ? "bfloat16"
	       : dt == MG_F16				      ? "float16"
							      : "float32";
}

/* transformers' BitsAndBytesConfig.to_dict() for NF4 with double
 * quantization and bf16 compute (its post_init wants the threshold a
 * float: 6.0, not 6). */
static void add_bnb_config(cJSON *j)
{
	cJSON *q = cJSON_AddObjectToObject(j, "quantization_config");
	cJSON_AddBoolToObject(q, "_load_in_4bit", true);
	cJSON_AddBoolToObject(q, "_load_in_8bit", false);
	cJSON_AddStringToObject(q, "bnb_4bit_compute_dtype", "bfloat16");
	cJSON_AddStringToObject(q, "bnb_4bit_quant_storage", "uint8");
	cJSON_AddStringToObject(q, "bnb_4bit_quant_type", "nf4");
	cJSON_AddBoolToObject(q, "bnb_4bit_use_double_quant", true);
	cJSON_AddBoolToObject(q, "llm_int8_enable_fp32_cpu_offload", false);
	cJSON_AddBoolToObject(q, "llm_int8_has_fp16_weight", false);
	cJSON_AddNullToObject(q, "llm_int8_skip_modules");
	cJSON_AddRawToObject(q, "llm_int8_threshold", "6.0");
	cJSON_AddBoolToObject(q, "load_in_4bit", true);
	cJSON_AddBoolToObject(q, "load_in_8bit", false);
	cJSON_AddStringToObject(q, "quant_method", "bitsandbytes");
}

/* config.json: what the family's config class reads, in transformers
 * 4's form (rope_theta, rope_scaling), which transformers 5 still
 * reads; the family's own keys from llama_family.c. */
static int write_config(const struct llama_cfg *c, const char *dir,
			enum mg_dtype dt)
{
	const struct llama_family *f = &llama_families[c->family];
	cJSON *j = cJSON_CreateObject(), *a = cJSON_CreateArray();
	cJSON_AddItemToArray(a, cJSON_CreateString(f->arch));
	cJSON_AddItemToObject(j, "architectures", a);
	cJSON_AddStringToObject(j, "model_type", f->model_type);
	cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab);
	cJSON_AddNumberToObject(j, "hidden_size", (double)c->dim);
	cJSON_AddNumberToObject(j, "intermediate_size", (double)c->ffn);
	cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->layers);
	cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->heads);
	cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->kv_heads);
	cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
	cJSON_AddNumberToObject(j, "max_position_embeddings",
				(double)c->max_positions);
	cJSON_AddNumberToObject(j, "rms_norm_eps", c->norm_eps);
	cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
	if (c->rs_factor > 0) {
		cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
		cJSON_AddStringToObject(r, "rope_type", "llama3");
		cJSON_AddNumberToObject(r, "factor", c->rs_factor);
		cJSON_AddNumberToObject(r, "low_freq_factor", c->rs_low);
		cJSON_AddNumberToObject(r, "high_freq_factor", c->rs_high);
		cJSON_AddNumberToObject(r, "original_max_position_embeddings",
					(double)c->rs_orig_max);
	} else if (c->lr_n) {
		/* longrope, as Phi3Config writes it */
		cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
		cJSON_AddStringToObject(r, "type", "longrope");
		cJSON_AddItemToObject(
			r, "short_factor",
			cJSON_CreateDoubleArray(c->lr_short, c->lr_n));
		cJSON_AddItemToObject(
			r, "long_factor",
			cJSON_CreateDoubleArray(c->lr_long, c->lr_n));
		if (c->lr_attn_given)
			cJSON_AddNumberToObject(r, "attention_factor",
						c->lr_attn);
		cJSON_AddNumberToObject(j, "original_max_position_embeddings",
					(double)c->lr_orig_max);
	} else {
		cJSON_AddNullToObject(j, "rope_scaling");
	}
	cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_embeddings);
	cJSON_AddNumberToObject(j, "initializer_range", c->init_std);
	cJSON_AddStringToObject(j, "hidden_act", "silu");
	cJSON_AddNumberToObject(j, "attention_dropout", 0);
	f->write(c, j);
	cJSON_AddBoolToObject(j, "use_cache", true);
	cJSON_AddStringToObject(j, "torch_dtype", torch_dtype(dt));
	if (dt == MG_NF4)
		add_bnb_config(j);
	char *text = cJSON_Print(j);
	cJSON_Delete(j);
	const size_t n = text ? strlen(text) : 0;
	char *nl = text ? realloc(text, n + 2) : NULL;
	if (!nl) {
		free(text);
		return mg_error("llama export: out of memory");
	}
	memcpy(nl + n, "\n", 2);
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", dir);
	int rc = mg_file_write_atomic(path, nl, n + 1);
	free(nl);
	return rc;
}

/* Device tensor t as fp32 host values (malloc'd; NULL after mg_error);
 * an NF4 blob dequantized (quant = nf4). */
static float *to_host_f32(struct mg_ctx *ctx, const struct mg_tensor *t)
{
	const size_t bytes = mg_tensor_bytes(t);
	const int64_t n = mg_tensor_numel(t);
	void *raw = malloc(bytes ? bytes : 1);
	float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
	int rc = !raw || !f ? mg_error("llama export: out of memory")
			    : mg_copy_d2h(ctx, raw, t->data, bytes);
	if (!rc && t->dtype == MG_NF4) {
		rc = mg_nf4_dequantize_host(f, raw, n);
	} else if (!rc) {
		struct mg_tensor src = mg_tensor_make(raw, t->dtype, MG_DEV_CPU,
						      t->ndim, t->shape),
				 dst = mg_tensor_make(f, MG_F32, MG_DEV_CPU,
						      t->ndim, t->shape);
		rc = mg_tensor_convert_host(&dst, &src);
	}
	free(raw);
	if (rc) {
		free(f);
		return NULL;
	}
	return f;
}

/* W [out, in] += s B [out, r] A [r, in], all fp32 host: the adapter
 * folded into its base, as PEFT's merge_and_unload does. */
static void merge(float *W, const float *A, const float *B, int64_t out,
		  int64_t in, int64_t r, double s)
{
	for (int64_t o = 0; o < out; o++)
		for (int64_t k = 0; k < r; k++) {
			const float b = (float)(s * B[o * r + k]);
			if (b == 0)
				continue;
			const float *a = A + k * in;
			float *w = W + o * in;
			for (int64_t i = 0; i < in; i++)
				w[i] += b * a[i];
		}
}

/* An NF4 parameter's blob as it is, in bitsandbytes' form. */
static int put_blob(struct mg_ctx *ctx, struct mg_tensor_writer *w,
		    const struct mg_tensor *W, const char *name)
{
	const size_t bytes = mg_tensor_bytes(W);
	void *blob = malloc(bytes);
	int rc = !blob ? mg_error("llama export: out of memory")
		       : mg_copy_d2h(ctx, blob, W->data, bytes);
	if (!rc)
		rc = bnb_write(w, name, blob, W->shape[0], W->shape[1],
			       "bfloat16");
	free(blob);
	return rc ? mg_error_prefix("llama export: %s", name) : 0;
}

/* f32 values f of weight W quantized to NF4, in bitsandbytes' form. */
static int put_quantized(struct mg_tensor_writer *w, const float *f,
			 const struct mg_tensor *W, const char *name)
{
	const int64_t n = mg_tensor_numel(W);
	void *blob = malloc(mg_nf4_layout(n).bytes);
	int rc = !blob ? mg_error("llama export: out of memory")
		       : mg_nf4_quantize_host(blob, f, n);
	if (!rc)
		rc = bnb_write(w, name, blob, W->shape[0], W->shape[1],
			       "bfloat16");
	free(blob);
	return rc ? mg_error_prefix("llama export: %s", name) : 0;
}

/*
 * f32 values f of weight W [out, in] as packed int4 (mg/int4.h: element
 * 2j in the low nibble of byte j of its row, two's complement) under
 * name + "_int4" (U8 [out, in / 2]) and f32 scales under name +
 * "_scales" ([out, in / group]), group = qat_group: the fake-quantized
 * weights of a QAT run exactly (an f32 run's; a bf16 run's compute copy
 * is the master rounded, so its scales may differ in the last bits).
 */
static int put_int4(const struct llama *m, struct mg_tensor_writer *w,
		    const float *f, const struct mg_tensor *W, const char *name)
{
	const int64_t rows = W->shape[0], cols = W->shape[1], g = m->qat_group;
	uint8_t *p = malloc((size_t)(rows * cols / 2) + 1);
	float *s = malloc((size_t)(rows * (cols / g)) * sizeof *s + 1);
	int rc = !p || !s ? mg_error("llama export: out of memory")
			  : mg_int4_quantize_host(f, rows, cols, g, p, s);
	char qn[200], sn[200];
	snprintf(qn, sizeof qn, "%s_int4", name);
	snprintf(sn, sizeof sn, "%s_scales", name);
	if (!rc) {
		const int64_t qs[2] = {rows, cols / 2},
			      ss[2] = {rows, cols / g};
		struct mg_tensor qt = mg_tensor_make(p, MG_U8, MG_DEV_CPU, 2,
						     qs),
				 st = mg_tensor_make(s, MG_F32, MG_DEV_CPU, 2,
						     ss);
		rc = mg_tensor_writer_add(w, qn, &qt) ||
		     mg_tensor_writer_add(w, sn, &st);
	}
	free(p);
	free(s);
	return rc ? mg_error_prefix("llama export: %s", name) : 0;
}

/* Parameter p of an acquired unit as fp32 host values (malloc'd; NULL
 * after mg_error), target t's adapter merged in (t < 0: none; a fused
 * module's target: its rows of the one B, with the shared A). */
static float *merged_f32(struct mg_ctx *ctx, const struct llama *m,
			 const struct mg_unit_view *v, int p, int t,
			 const char *name)
{
	const struct mg_tensor *W = &v->params[p];
	const struct llama_lora *L = &m->lora;
	const bool merged = t >= 0 && L->rank && (L->targets & (1u << t));
	float *f = to_host_f32(ctx, W);
	if (!f) {
		mg_error_prefix("llama export: %s", name);
		return NULL;
	}
	if (!merged)
		return f;
	const struct mg_tensor Bt = llama_lora_b(m, v->params, t);
	float *a = to_host_f32(ctx, &v->params[L->ia[t]]),
	      *b = to_host_f32(ctx, &Bt);
	if (a && b)
		merge(f, a, b, W->shape[0], W->shape[1], L->rank, L->scale);
	free(a);
	free(b);
	if (!a || !b) {
		free(f);
		mg_error_prefix("llama export: %s's adapter", name);
		return NULL;
	}
	return f;
}

/* fp32 values f of shape (ndim, shape) into the writer under name, in
 * dt; proj: one of a layer's projections, which NF4 and int4 exports
 * quantize (the rest of a 4-bit export is bf16). */
static int emit(const struct llama *m, struct mg_tensor_writer *w, float *f,
		int ndim, const int64_t *shape, const char *name,
		enum mg_dtype dt, bool proj)
{
	const struct mg_tensor W =
		mg_tensor_make(f, MG_F32, MG_DEV_CPU, ndim, shape);
	if (dt == MG_NF4 && proj)
		return put_quantized(w, f, &W, name);
	if (dt == MG_INT4 && proj)
		return put_int4(m, w, f, &W, name);
	if (dt == MG_NF4 || dt == MG_INT4)
		dt = MG_BF16; /* the rest of a 4-bit export */
	void *out = NULL;
	int rc = 0;
	if (dt != MG_F32) {
		out = malloc((size_t)mg_tensor_numel(&W) * mg_dtype_size(dt));
		struct mg_tensor dst =
			mg_tensor_make(out, dt, MG_DEV_CPU, ndim, shape);
		rc = !out ? mg_error("llama export: out of memory")
			  : mg_tensor_convert_host(&dst, &W);
	}
	if (!rc) {
		struct mg_tensor h = mg_tensor_make(out ? out : f, dt,
						    MG_DEV_CPU, ndim, shape);
		rc = mg_tensor_writer_add(w, name, &h);
	}
	free(out);
	return rc;
}

/* Parameter p of an acquired unit into the writer under name, in dt,
 * with target t's adapter merged in (t < 0: none). */
static int put(struct mg_ctx *ctx, const struct llama *m,
	       struct mg_tensor_writer *w, const struct mg_unit_view *v, int p,
	       int t, const char *name, enum mg_dtype dt)
{
	/* NF4 exports quantize the layers' seven projections */
	const bool nf4_here = t >= 0 && t < LT_HEAD;
	const struct mg_tensor *W = &v->params[p];
	const struct llama_lora *L = &m->lora;
	const bool merged = t >= 0 && L->rank && (L->targets & (1u << t));
	if (dt == MG_NF4 && W->dtype == MG_NF4 && !merged)
		return put_blob(ctx, w, W, name);
	float *f = merged_f32(ctx, m, v, p, t, name);
	if (!f)
		return -1;
	int rc = emit(m, w, f, W->ndim, W->shape, name, dt, nf4_here);
	free(f);
	return rc;
}

/* Projections ps[0..n) (targets ts) of an acquired unit, merged, as one
 * fused tensor of their rows in order (Phi-3's qkv_proj, gate_up_proj)
 * under name. */
static int put_fused(struct mg_ctx *ctx, const struct llama *m,
		     struct mg_tensor_writer *w, const struct mg_unit_view *v,
		     const int *ps, const int *ts, int n, const char *name,
		     enum mg_dtype dt)
{
	if (n < 1)
		return mg_error("llama export: %s has no parts", name);
	int64_t shape[2] = {0, v->params[ps[0]].shape[1]};
	for (int j = 0; j < n; j++)
		shape[0] += v->params[ps[j]].shape[0];
	float *all = malloc((size_t)(shape[0] * shape[1]) * sizeof *all);
	if (!all)
		return mg_error("llama export: out of memory for %s", name);
	int rc = 0;
	for (int j = 0, row = 0; j < n && !rc; j++) {
		const int64_t rows = v->params[ps[j]].shape[0];
		float *f = merged_f32(ctx, m, v, ps[j], ts[j], name);
		if (!f) {
			rc = -1;
			break;
		}
		memcpy(all + row * shape[1], f,
		       (size_t)(rows * shape[1]) * sizeof *f);
		row += (int)rows;
		free(f);
	}
	if (!rc)
		rc = emit(m, w, all, 2, shape, name, dt, true);
	free(all);
	return rc;
}

/* The layer projection each LoRA target adapts (LT_* -> LP_*). */
static const int lp_of[LT_HEAD] = {LP_Q,    LP_K,  LP_V,   LP_O,
				   LP_GATE, LP_UP, LP_DOWN};

/* put() of one tensor (with an NF4 weight's companions) into group g,
 * then g moved into the shard writer as one group. */
static int put_group(struct mg_ctx *ctx, const struct llama *m,
		     struct mg_shard_writer *sw, struct mg_tensor_writer *g,
		     const struct mg_unit_view *v, int p, int t,
		     const char *name, enum mg_dtype dt)
{
	if (put(ctx, m, g, v, p, t, name, dt))
		return -1;
	return mg_shard_writer_take(sw, g)
		       ? mg_error_prefix("llama export: %s", name)
		       : 0;
}

/* Unit u's tensors into the shard writer (acquired for forward,
 * released). */
static int put_unit(struct llama *m, struct mg_ctx *ctx,
		    struct mg_shard_writer *sw, struct mg_tensor_writer *w,
		    int u, enum mg_dtype dt)
{
	const struct llama_cfg *c = &m->c;
	const enum mg_phase ph = MG_PHASE_FORWARD;
	struct mg_unit_view *v = mg_acquire(ctx, u, ph);
	if (!v)
		return -1;
	char name[160];
	int rc = 0;
	if (u == LLAMA_UNIT_EMBED) {
		rc = put_group(ctx, m, sw, w, v, 0, -1,
			       "model.embed_tokens.weight", dt);
	} else if (u == LLAMA_UNIT_HEAD(c)) {
		rc = put_group(ctx, m, sw, w, v, 0, -1, "model.norm.weight",
			       dt);
		if (!rc && !c->tie_embeddings)
			rc = put_group(ctx, m, sw, w, v, 1, LT_HEAD,
				       "lm_head.weight", dt);
	} else {
		for (int i = 0; i < m->nlp && !rc; i++) {
			const int p = m->kind[i];
			int t = -1;
			for (int k = 0; k < LT_HEAD; k++)
				if (lp_of[k] == p)
					t = k;
			int64_t row0, total, sh[2];
			const char *hn = llama_lp_hf(c, p, &row0, &total);
			llama_lp_shape(c, p, sh);
			snprintf(name, sizeof name, "model.layers.%d.%s",
				 u - LLAMA_UNIT_LAYER(0), hn);
			if (total == sh[0]) {
				rc = put_group(ctx, m, sw, w, v, i, t, name,
					       dt);
				continue;
			}
			if (row0)
				continue; /* written with its first part */
			/* the parts of this fused tensor, in row order */
			int ps[LT_HEAD] = {0}, ts[LT_HEAD] = {0}, n = 0;
			for (int64_t r = 0; r < total && n < LT_HEAD;) {
				int k = 0;
				int64_t r0 = -1, tot;
				for (; k < LT_HEAD; k++)
					if (!strcmp(llama_lp_hf(c, lp_of[k],
								&r0, &tot),
						    hn) &&
					    r0 == r)
						break;
				if (k == LT_HEAD)
					break;
				ps[n] = m->lp[lp_of[k]];
				ts[n++] = k;
				llama_lp_shape(c, lp_of[k], sh);
				r += sh[0];
			}
			rc = put_fused(ctx, m, w, v, ps, ts, n, name, dt) ||
			     mg_shard_writer_take(sw, w);
		}
	}
	mg_release(ctx, u, ph);
	return rc;
}

int llama_save_hf(struct llama *m, struct mg_ctx *ctx, const char *dir,
		  enum mg_dtype dt, uint64_t max_shard_bytes)
{
	if (dt != MG_F32 && dt != MG_F16 && dt != MG_BF16 && dt != MG_NF4 &&
	    dt != MG_INT4)
		return mg_error("llama export: dtype %s (fp32, fp16, bf16, nf4 "
				"or int4)",
				mg_dtype_name(dt));
	if (dt == MG_INT4 &&
	    (m->c.dim % m->qat_group || m->c.ffn % m->qat_group ||
	     (m->c.heads * m->c.head_dim) % m->qat_group))
		return mg_error("llama export: int4 groups of qat_group = %lld "
				"do not divide the projections' input widths",
				(long long)m->qat_group);
	struct mg_shard_writer *sw =
		mg_shard_writer_new(dir, "model", max_shard_bytes);
	struct mg_tensor_writer *w = sw ? mg_tensor_writer_new() : NULL;
	char gs[32];
	snprintf(gs, sizeof gs, "%lld", (long long)m->qat_group);
	int rc = !w || mg_shard_writer_meta(sw, "format", "pt") ||
				 (dt == MG_INT4 &&
				  (mg_shard_writer_meta(sw, "quantization",
							"8da4w") ||
				   mg_shard_writer_meta(sw, "int4_group_size",
							gs) ||
				   mg_shard_writer_meta(
					   sw, "int4_packing",
					   "two's complement, element 2j in "
					   "the low "
					   "nibble of byte j, 2j+1 high; "
					   "weight = q * "
					   "scale, f32 scales per group")))
			 ? -1
			 : 0;
	for (int u = 0; u <= LLAMA_UNIT_HEAD(&m->c) && !rc; u++)
		rc = put_unit(m, ctx, sw, w, u, dt);
	if (!rc && mg_shard_writer_finish(sw) < 0)
		rc = -1;
	mg_tensor_writer_free(w);
	mg_shard_writer_free(sw);
	if (!rc)
		rc = write_config(&m->c, dir, dt);
	return rc;
}
