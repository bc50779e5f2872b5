/*
 * llama_init.c - a unit's initial values. Random weights follow
 * transformers' LlamaPreTrainedModel: linear and embedding weights
 * normal(0, initializer_range), RMSNorm weights one (Gemma's (1 + w)
 * norms zero), biases zero. Each value is a pure
 * function of (seed, parameter, element), so every rank count and shard
 * layout starts from the same model. With model.hf_dir the values come
 * from the folder's safetensors instead (llama_hf.c). A sharded strategy
 * may ask for element ranges only (init_unit_part): random values are
 * drawn for those, checkpoint and NF4 tensors are made whole (reading a
 * tensor costs little beside drawing 4e8 normals). LoRA adapters come
 * after a unit's base parameters, so the base (its keys and its HF
 * names) is the same whatever the adapter options. With quant = nf4 the
 * layers' projections are those values quantized (llama_quant.c).
 */
#include <stdio.h>
#include <string.h>

#include "llama.h"

/* Elements [lo, hi) of t. Each value depends only on (key, j), so the
 * loop runs on every core (an 8B model draws 8e9 normals), the result
 * does not depend on the thread count, and a shard's values are the
 * whole tensor's. */
static void fill(struct mg_tensor *t, uint64_t key, double std, double c,
		 int64_t lo, int64_t hi)
{
	/* a pure function of j: the same values on any thread count */
#pragma omp parallel for schedule(static) if (hi - lo > 65536)
	for (int64_t j = lo; j < hi; j++) {
		double x = std > 0 ? std * mg_rng_normal(key, (uint64_t)j) : c;
		if (t->dtype == MG_F64)
			((double *)t->data)[j] = x;
		else
			((float *)t->data)[j] = (float)x;
	}
}

int llama_init_unit(struct llama *m, int unit, struct mg_tensor *params,
		    uint64_t seed, const int64_t *lo, const int64_t *hi)
{
	const struct llama_cfg *c = &m->c;
	const struct llama_lora *L = &m->lora;
	int np, nall;
	if (unit == LLAMA_UNIT_EMBED)
		np = nall = 1;
	else if (unit == LLAMA_UNIT_HEAD(c)) {
		np = c->tie_embeddings ? 1 : 2;
		nall = L->head_params;
	} else if (unit > 0 && unit <= c->layers) {
		np = m->nlp;
		nall = L->layer_params;
	} else
		return mg_error("llama: no unit %d", unit);
	for (int t = 0; t < LT_COUNT; t++) {
		bool here = unit == LLAMA_UNIT_HEAD(c) ? t == LT_HEAD
						       : t != LT_HEAD;
		/* a fused module's adapter once, by its first target */
		if (L->ia[t] < 0 || !here || unit == LLAMA_UNIT_EMBED ||
		    L->own[t] != t)
			continue;
		if (L->ia[t] >= nall || L->ib[t] >= nall)
			return mg_error("llama: adapter index out of range");
		if (llama_lora_init(m, unit - 1, t, &params[L->ia[t]],
				    &params[L->ib[t]],
				    mg_rng_key(seed, (uint64_t)(64 + t))))
			return -1;
	}
	for (int i = 0; i < np; i++) {
		const bool layer = unit > 0 && unit <= c->layers;
		/* the parameter's kind: LP_* in a layer, else -1 */
		const int kind = layer ? m->kind[i] : -1;
		if (layer && llama_quant_param(m, kind)) {
			/* quant = nf4: the blob from this tensor's f32
			 * values, the same ones a float run starts from */
			char name[160];
			snprintf(name, sizeof name, "model.layers.%d.%s",
				 unit - 1, llama_lp_name(c, kind));
			if (llama_quant_fill(m, &params[i], name,
					     mg_rng_key(seed, (uint64_t)i)))
				return -1;
			continue;
		}
		if (params[i].dtype != MG_F32 && params[i].dtype != MG_F64)
			return mg_error(
				"llama: storage dtype %s is not f32/f64",
				mg_dtype_name(params[i].dtype));
		if (m->hf) {
			/* The HF name: the unit's prefix and the parameter. */
			char name[160];
			if (unit == LLAMA_UNIT_EMBED)
				snprintf(name, sizeof name,
					 "model.embed_tokens.weight");
			else if (unit == LLAMA_UNIT_HEAD(c))
				snprintf(name, sizeof name, "%s",
					 i ? "lm_head.weight"
					   : "model.norm.weight");
			else
				snprintf(name, sizeof name,
					 "model.layers.%d.%s", unit - 1,
					 llama_lp_name(c, kind));
			/* quant = int4: each projection from its int4 form */
			if (m->int4 && layer && llama_lp_proj(kind)) {
				int rc =
					llama_hf_load_int4(m, name, &params[i]);
				if (rc < 0)
					return -1;
				if (rc == 0)
					return mg_error(
						"llama: quant = int4: %s holds "
						"no '%s_int4' (write the "
						"folder "
						"with mgrun export --dtype "
						"int4)",
						m->hf_dir, name);
				continue;
			}
			if (llama_hf_load(m, name, &params[i]))
				return -1;
			continue;
		}
		/* norms one, biases zero; the head unit's norm is its
		 * only 1-D parameter */
		const bool norm =
			layer ? llama_lp_norm(kind) : params[i].ndim == 1;
		const bool bias = layer && !norm && params[i].ndim == 1;
		const int64_t n = mg_tensor_numel(&params[i]);
		int64_t a = lo ? lo[i] : 0, b = hi ? hi[i] : n;
		if (a < 0 || b > n || a > b)
			return mg_error("llama: init range [%lld, %lld) of a "
					"tensor of %lld elements",
					(long long)a, (long long)b,
					(long long)n);
		/* (1 + w) norms (Gemma) start from w = 0 */
		fill(&params[i], mg_rng_key(seed, (uint64_t)i),
		     norm || bias ? 0 : c->init_std,
		     norm && !c->norm_offset ? 1 : 0, a, b);
	}
	return 0;
}
