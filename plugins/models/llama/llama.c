/*
 * llama.c - the llama model plugin: Llama 2 / 3 / 3.x decoders (and the
 * families of llama_family.c: Mistral, Qwen2 / 3, Gemma 2 / 3, Phi-3) from a
 * preset shape, explicit options or a Hugging Face folder, declared as
 * one unit for the embedding, one per decoder layer and one for the
 * final norm with the output head (FSDP wraps a layer at a time).
 * Parameter names are the Hugging Face ones ("model.layers.3" +
 * "self_attn.q_proj.weight"), so checkpoints map one to one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static const struct mg_option llama_options[] = {
	MG_OPT_E("preset", "tiny",
		 "tiny|llama2-7b|llama3-8b|llama3.2-1b|llama3.2-3b|mistral-7b|"
		 "qwen2.5-1.5b|qwen3-1.7b|gemma-2-2b|gemma-3-1b|phi-3-mini|"
		 "phi-4-mini",
		 "architecture to start from (published shapes; tiny: 2 "
		 "layers of 64 for tests); the size options below override "
		 "it"),
	MG_OPT_P("hf_dir", "",
		 "Hugging Face model folder (config.json, model.safetensors "
		 "or its sharded index) to take the architecture and weights "
		 "from, of model_type llama, mistral, qwen2, qwen3, gemma2, "
		 "gemma3_text or phi3; empty: "
		 "random weights of the preset"),
	MG_OPT_E("family", "auto",
		 "auto|llama|mistral|qwen2|qwen3|gemma2|gemma3_text|phi3",
		 "decoder family of the preset's shape (auto: the preset's; "
		 "with hf_dir, config.json's model_type): llama, mistral "
		 "(sliding-window attention), qwen2 (q, k, v biases), qwen3 "
		 "(per-head q and k RMSNorm), gemma2 ((1 + w) and sandwich "
		 "norms, GeGLU, soft-capping, sliding and full layers), "
		 "gemma3_text (gemma2's with q/k norms and a local RoPE "
		 "base, no soft-capping), phi3 (fused qkv_proj and "
		 "gate_up_proj, partial rotary)"),
	MG_OPT_I("sliding_window", "0", 0, 1 << 30,
		 "family mistral or phi3: keys each query sees, itself "
		 "included (0: the preset's, none for tiny); gemma2 / "
		 "gemma3_text: their sliding layers' (0: the preset's, else "
		 "4096)"),
	MG_OPT_I("sliding_window_pattern", "0", 0, 4096,
		 "gemma2 / gemma3_text: layer l attends in full when (l + 1) "
		 "is a multiple of this (0: the family's, 2 and 6)"),
	MG_OPT_F("attn_logit_softcapping", "-1", -1, 1e6,
		 "gemma2 / gemma3_text: attention scores capped to +-this "
		 "(-1: the family's, 50 and none; 0: none)"),
	MG_OPT_F("final_logit_softcapping", "-1", -1, 1e6,
		 "gemma2 / gemma3_text: output logits capped to +-this (-1: "
		 "the family's, 30 and none; 0: none)"),
	MG_OPT_F("rope_local_base_freq", "0", 0, 1e12,
		 "gemma3_text: the sliding layers' RoPE base (0: 10000)"),
	MG_OPT_F("partial_rotary_factor", "0", 0, 1,
		 "family phi3: the share of each head RoPE turns, the first "
		 "int(head_dim * factor) dims (0: the preset's, all for "
		 "tiny)"),
	MG_OPT_I("vocab_size", "0", 0, 1 << 24, "vocabulary (0: preset's)"),
	MG_OPT_I("hidden_size", "0", 0, 1 << 20, "model width (0: preset's)"),
	MG_OPT_I("intermediate_size", "0", 0, 1 << 22,
		 "SwiGLU width (0: preset's)"),
	MG_OPT_I("num_layers", "0", 0, 4096, "decoder layers (0: preset's)"),
	MG_OPT_I("num_heads", "0", 0, 4096, "query heads (0: preset's)"),
	MG_OPT_I("num_kv_heads", "0", 0, 4096,
		 "key/value heads, a divisor of num_heads (0: preset's)"),
	MG_OPT_I("head_dim", "0", 0, 4096,
		 "per-head width (0: preset's, or hidden_size / num_heads "
		 "when those are set)"),
	MG_OPT_F("rope_theta", "0", 0, 1e12, "rotary base (0: preset's)"),
	MG_OPT_F("rms_norm_eps", "0", 0, 1, "RMSNorm epsilon (0: preset's)"),
	MG_OPT_E("tie_embeddings", "auto", "auto|yes|no",
		 "output head shares the embedding matrix (auto: preset's)"),
	MG_OPT_I("lora_rank", "0", 0, 65536,
		 "LoRA adapter rank r; 0: full fine-tuning. With r > 0 the "
		 "base weights are frozen (kept in the compute dtype only) and "
		 "only the adapters train"),
	MG_OPT_F("lora_alpha", "16", 0, 1e9,
		 "LoRA alpha: the adapter path is scaled by alpha / r"),
	MG_OPT_F("lora_dropout", "0", 0, 1,
		 "dropout on the adapters' input (training only)"),
	MG_OPT_S("lora_targets", "q,v",
		 "projections given adapters: any of q, k, v, o, gate, up, "
		 "down, head (untied output head), or all (the seven layer "
		 "projections); PEFT's names (q_proj, ...) also work"),
	MG_OPT_B("rslora", "false",
		 "rank-stabilised LoRA: scale alpha / sqrt(r) instead of "
		 "alpha / r"),
	MG_OPT_P("lora_adapter", "",
		 "PEFT adapter folder (adapter_config.json, "
		 "adapter_model.safetensors; a run's adapter/) to start the "
		 "adapters from, to continue training or evaluate it; its r, "
		 "lora_alpha and use_rslora must equal the options above and "
		 "it must hold every targeted module"),
	MG_OPT_B("activation_checkpointing", "false",
		 "keep only each layer's input for backward and recompute "
		 "the layer there (one extra layer forward; activation memory "
		 "of one layer instead of all)"),
	MG_OPT_S("kernels", "rmsnorm",
		 "fused kernels instead of the unfused reference path: any of "
		 "rmsnorm (residual add + RMSNorm in one pass, forward and "
		 "backward), flce (linear + cross-entropy of the output head "
		 "in chunks of tokens, without [tokens, vocab] logits), or "
		 "fused / all, or none (the unfused reference); same losses "
		 "within rounding (rmsnorm: bitwise on the CPU). Default "
		 "rmsnorm: 1-2% faster than none at Llama 3.2 1B and 3B on "
		 "the H100 (bench/RESULTS.md); flce trades ~4 ms a 1B step "
		 "for the [tokens, vocab] logits' memory"),
	MG_OPT_I("flce_chunk", "0", 0, 1 << 24,
		 "tokens per chunk of logits with kernels flce (0: as many as "
		 "fit 256 MiB, at least 256)"),
	MG_OPT_E("quant", "none", "none|nf4|int4",
		 "storage of the layers' frozen base projections: none (the "
		 "compute dtype) or nf4 (QLoRA: 4-bit NormalFloat blocks of "
		 "64 with double-quantized scales, dequantized before each "
		 "GEMM; needs lora_rank > 0); int4: run the int4 weights of "
		 "an `mgrun export --dtype int4` folder (hf_dir) with int8 "
		 "per-token fake-quantized activations, the 8da4w model QAT "
		 "trains for"),
	MG_OPT_E("qat", "none", "none|8da4w",
		 "quantization-aware training of q, k, v, o, gate, up, down "
		 "(not the embedding or head), torchao's "
		 "Int8DynActInt4WeightQATQuantizer: int8 asymmetric per-token "
		 "activations and int4 symmetric per-group weights "
		 "fake-quantized in forward, straight-through gradients; with "
		 "LoRA the frozen base is fake-quantized, the adapters not"),
	MG_OPT_I("qat_group", "32", 2, 1 << 20,
		 "qat: inputs per int4 weight scale (must divide every "
		 "projection's input width)"),
	MG_OPT_E("objective", "sft", "sft|dpo",
		 "sft: next-token loss on the label tokens; dpo: Direct "
		 "Preference Optimization on preference rows (dataset "
		 "format = preference); the reference is the model with its "
		 "LoRA adapters off, or with full fine-tuning (lora_rank = 0) "
		 "a frozen copy of the starting weights"),
	MG_OPT_F("dpo_beta", "0.1", 1e-6, 1e6,
		 "DPO beta: the strength of the implicit KL penalty towards "
		 "the reference"),
	MG_OPT_F("dpo_label_smoothing", "0", 0, 0.5,
		 "DPO label smoothing eps: 0 the sigmoid loss, > 0 the "
		 "conservative cDPO (preferences assumed flipped with "
		 "probability eps)"),
	MG_OPT_END,
};

static int llama_create(const struct mg_opts *o, struct mg_ctx *ctx,
			void **self)
{
	struct llama *m = calloc(1, sizeof *m);
	if (!m)
		return mg_error("llama: out of memory");
	m->ctx = ctx;
	m->recompute = mg_opt_bool(o, "activation_checkpointing");
	if (llama_cfg_from_opts(&m->c, o, m->hf_dir, sizeof m->hf_dir) ||
	    (llama_layer_params(m), llama_lora_setup(m, o)) ||
	    llama_kernels_setup(m, o) || llama_quant_setup(m, o) ||
	    llama_qat_setup(m, o) ||
	    (llama_proj_select(m), llama_dpo_setup(m, o))) {
		llama_lora_free(m);
		free(m);
		return -1;
	}
	llama_arch_setup(m);
	/* Rotary frequencies live on the device, computed once: the global
	 * layers' then the sliding layers' (llama_inv_freq_of), each
	 * [rot_dim / 2] (partial rotary: fewer than head_dim / 2). */
	int64_t half = llama_rot_dim(&m->c) / 2;
	float *f = malloc((size_t)(2 * half) * sizeof *f);
	if (!f || mg_buf_alloc(ctx, &m->inv_freq,
			       (size_t)(2 * half) * sizeof *f, MG_MEM_PARAMS)) {
		free(f);
		llama_lora_free(m);
		free(m);
		return mg_error_prefix("llama: rotary table");
	}
	llama_inv_freq(&m->c, f);
	llama_inv_freq_local(&m->c, f + half);
	if (m->hf_dir[0] && llama_hf_open(m)) {
		free(f);
		llama_hf_close(m);
		mg_buf_free(ctx, &m->inv_freq);
		llama_lora_free(m);
		free(m);
		return -1;
	}
	int rc = mg_copy_h2d(ctx, m->inv_freq.ptr, f,
			     (size_t)(2 * half) * sizeof *f);
	free(f);
	if (rc) {
		llama_hf_close(m);
		mg_buf_free(ctx, &m->inv_freq);
		llama_lora_free(m);
		free(m);
		return -1;
	}
	*self = m;
	return 0;
}

static void llama_destroy(void *self)
{
	struct llama *m = self;
	if (!m)
		return;
	llama_hf_close(m);
	llama_lora_free(m);
	llama_quant_free(m);
	llama_qat_free(m);
	llama_dpo_free(m);
	mg_buf_free(m->ctx, &m->inv_freq);
	mg_buf_free(m->ctx, &m->normw);
	mg_buf_free(m->ctx, &m->arena);
	mg_buf_free(m->ctx, &m->work);
	llama_decode_free(m);
	free(m);
}

const char *const llama_layer_param[LP_COUNT] = {
	[LP_IN_NORM] = "input_layernorm.weight",
	[LP_Q] = "self_attn.q_proj.weight",
	[LP_K] = "self_attn.k_proj.weight",
	[LP_V] = "self_attn.v_proj.weight",
	[LP_O] = "self_attn.o_proj.weight",
	[LP_POST_NORM] = "post_attention_layernorm.weight",
	[LP_GATE] = "mlp.gate_proj.weight",
	[LP_UP] = "mlp.up_proj.weight",
	[LP_DOWN] = "mlp.down_proj.weight",
	[LP_Q_BIAS] = "self_attn.q_proj.bias",
	[LP_K_BIAS] = "self_attn.k_proj.bias",
	[LP_V_BIAS] = "self_attn.v_proj.bias",
	[LP_O_BIAS] = "self_attn.o_proj.bias",
	[LP_GATE_BIAS] = "mlp.gate_proj.bias",
	[LP_UP_BIAS] = "mlp.up_proj.bias",
	[LP_DOWN_BIAS] = "mlp.down_proj.bias",
	[LP_Q_NORM] = "self_attn.q_norm.weight",
	[LP_K_NORM] = "self_attn.k_norm.weight",
	[LP_ATTN_OUT_NORM] = "post_attention_layernorm.weight",
	[LP_MLP_OUT_NORM] = "post_feedforward_layernorm.weight",
};

const char *llama_lp_name(const struct llama_cfg *c, int p)
{
	if (c->sandwich && p == LP_POST_NORM)
		return "pre_feedforward_layernorm.weight";
	return llama_layer_param[p];
}

void llama_lp_shape(const struct llama_cfg *c, int p, int64_t shape[2])
{
	const int64_t D = c->dim, q = c->heads * c->head_dim,
		      kv = c->kv_heads * c->head_dim, I = c->ffn;
	/* [out, in] of each projection, by LT_* (the biases' order) */
	const int64_t io[LT_HEAD][2] = {{q, D}, {kv, D}, {kv, D}, {D, q},
					{I, D}, {I, D},	 {D, I}};
	static const int lt[LP_COUNT] = {
		[LP_Q] = LT_Q,	     [LP_K] = LT_K,	  [LP_V] = LT_V,
		[LP_O] = LT_O,	     [LP_GATE] = LT_GATE, [LP_UP] = LT_UP,
		[LP_DOWN] = LT_DOWN,
	};
	shape[1] = 0;
	if (p == LP_IN_NORM || p == LP_POST_NORM || p == LP_ATTN_OUT_NORM ||
	    p == LP_MLP_OUT_NORM)
		shape[0] = D;
	else if (p == LP_Q_NORM || p == LP_K_NORM)
		shape[0] = c->head_dim;
	else if (p >= LP_Q_BIAS && p <= LP_DOWN_BIAS)
		shape[0] = io[p - LP_Q_BIAS][0];
	else
		shape[0] = io[lt[p]][0], shape[1] = io[lt[p]][1];
}

const char *llama_lp_hf(const struct llama_cfg *c, int p, int64_t *row0,
			int64_t *total)
{
	const int64_t q = c->heads * c->head_dim,
		      kv = c->kv_heads * c->head_dim, I = c->ffn;
	int64_t sh[2];
	llama_lp_shape(c, p, sh);
	*row0 = 0;
	*total = sh[0];
	if ((c->fused & LLAMA_FUSE_QKV) && p >= LP_Q && p <= LP_V) {
		*row0 = p == LP_Q ? 0 : p == LP_K ? q : q + kv;
		*total = q + 2 * kv;
		return "self_attn.qkv_proj.weight";
	}
	if ((c->fused & LLAMA_FUSE_GU) && (p == LP_GATE || p == LP_UP)) {
		*row0 = p == LP_GATE ? 0 : I;
		*total = 2 * I;
		return "mlp.gate_up_proj.weight";
	}
	return llama_lp_name(c, p);
}

void llama_layer_params(struct llama *m)
{
	const struct llama_cfg *c = &m->c;
	m->nlp = 0;
	for (int p = 0; p < LP_COUNT; p++) {
		const bool has =
			p < LP_ALWAYS ||
			(p <= LP_DOWN_BIAS &&
			 (c->bias & (1u << (p - LP_Q_BIAS)))) ||
			((p == LP_Q_NORM || p == LP_K_NORM) && c->qk_norm) ||
			((p == LP_ATTN_OUT_NORM || p == LP_MLP_OUT_NORM) &&
			 c->sandwich);
		m->lp[p] = has ? m->nlp : -1;
		if (has)
			m->kind[m->nlp++] = p;
	}
}

static int add_dt(struct mg_model_spec *s, const char *name, enum mg_dtype dt,
		  int flags, int64_t a, int64_t b)
{
	int64_t shape[2] = {a, b};
	return mg_spec_add_param(s, name, dt, flags, b ? 2 : 1, shape) < 0;
}

static int add(struct mg_model_spec *s, const char *name, int flags, int64_t a,
	       int64_t b)
{
	return add_dt(s, name, MG_DTYPE_AUTO, flags, a, b);
}

/* A unit's adapters, lora_A's of every target then lora_B's (the order
 * llama_lora_setup gave their indices); a fused module's targets are one
 * adapter, declared by the first, its B over their outputs. */
static int add_adapters(struct mg_model_spec *s, const struct llama *m,
			int first, int last)
{
	const struct llama_lora *L = &m->lora;
	for (int pass = 0; pass < 2; pass++)
		for (int t = first; t <= last; t++) {
			if (!(L->targets & (1u << t)) || L->own[t] != t)
				continue;
			int64_t in = 0, out = 0;
			for (int k = t; k <= last; k++) {
				int64_t ik, ok;
				llama_lora_dims(&m->c, k, &ik, &ok);
				if (L->own[k] == t &&
				    (L->targets & (1u << k))) {
					in = ik;
					out += ok;
				}
			}
			char name[64];
			snprintf(name, sizeof name, "%s%s.lora_%c.weight",
				 t <= LT_O	? "self_attn."
				 : t == LT_HEAD ? ""
						: "mlp.",
				 llama_lora_mod(&m->c, t), pass ? 'B' : 'A');
			if (pass ? add(s, name, MG_P_TRAIN, out, L->rank)
				 : add(s, name, MG_P_TRAIN, L->rank, in))
				return -1;
		}
	return 0;
}

/* DPO with full fine-tuning: every unit of the model again, frozen, as
 * "ref." + its name (llama_dpo.c: the reference model). Norm weights
 * stay F32 as the policy's; the rest is kept in the compute dtype. */
static int add_ref_units(struct mg_model_spec *s, const struct llama *m)
{
	const int n = s->nunits;
	for (int u = 0; m->dpo.copy && u < n; u++) {
		char name[MG_NAME_MAX];
		if (snprintf(name, sizeof name, "ref.%s", s->units[u].name) >=
			    (int)sizeof name ||
		    mg_spec_add_unit(s, name) < 0) {
			mg_error("llama: no reference unit for %s",
				 s->units[u].name);
			return -1;
		}
		const int first = s->units[u].first_param,
			  np = s->units[u].nparams;
		for (int i = 0; i < np; i++) {
			/* by value: adding may move s->params */
			const struct mg_param_decl p = s->params[first + i];
			if (mg_spec_add_param(s, p.name, p.dtype,
					      p.flags & MG_P_FP32, p.ndim,
					      p.shape) < 0)
				return -1;
		}
	}
	return 0;
}

static int llama_declare(void *self, struct mg_model_spec *s)
{
	const struct llama *m = self;
	const struct llama_cfg *c = &m->c;
	const int64_t D = c->dim;
	/* Norm weights stay fp32 under mixed precision, as HF's autocast
	 * keeps them; they and the biases skip weight decay (as the HF
	 * Trainer's default groups do). With LoRA the whole base is frozen:
	 * no MG_P_TRAIN. */
	const int tr = m->lora.rank ? 0 : MG_P_TRAIN;
	const int W = tr, N = tr | MG_P_NO_DECAY | MG_P_FP32,
		  B = tr | MG_P_NO_DECAY;
	if (mg_spec_add_unit(s, "model.embed_tokens") < 0 ||
	    add(s, "weight", W, c->vocab, D))
		return -1;
	for (int64_t l = 0; l < c->layers; l++) {
		char name[64];
		snprintf(name, sizeof name, "model.layers.%lld", (long long)l);
		if (mg_spec_add_unit(s, name) < 0)
			return -1;
		for (int i = 0; i < m->nlp; i++) {
			const int p = m->kind[i];
			int64_t sh[2];
			llama_lp_shape(c, p, sh);
			/* quant = nf4: the projections are frozen NF4 blobs */
			const enum mg_dtype dt = llama_quant_param(m, p)
							 ? MG_NF4
							 : MG_DTYPE_AUTO;
			const int fl = llama_lp_norm(p)	  ? N
				       : llama_lp_proj(p) ? W
							  : B;
			if (add_dt(s, llama_lp_name(c, p), dt, fl, sh[0],
				   sh[1]))
				return -1;
		}
		if (add_adapters(s, m, LT_Q, LT_DOWN))
			return -1;
	}
	if (mg_spec_add_unit(s, "head") < 0 ||
	    add(s, "model.norm.weight", N, D, 0) ||
	    (!c->tie_embeddings && add(s, "lm_head.weight", W, c->vocab, D)) ||
	    add_adapters(s, m, LT_HEAD, LT_HEAD) || add_ref_units(s, m))
		return -1;
	m->proj->describe(m);
	return 0;
}

static int llama_metrics(void *self, struct mg_metric_spec *ms)
{
	return ((struct llama *)self)->obj->metrics(ms);
}

static int llama_init_part(void *self, int unit, struct mg_tensor *params,
			   uint64_t seed, const int64_t *lo, const int64_t *hi)
{
	struct llama *m = self;
	const int n = LLAMA_UNIT_HEAD(&m->c) + 1;
	/* a DPO reference unit: its model unit's values, from the seed the
	 * core gives that unit (model.h: the run seed mixed with the unit
	 * index, mg_rng_key) */
	if (m->dpo.copy && unit >= n)
		return llama_init_unit(
			m, unit - n, params,
			mg_rng_key(m->ctx->seed, (uint64_t)(unit - n)), lo, hi);
	return llama_init_unit(m, unit, params, seed, lo, hi);
}

static int llama_init(void *self, int unit, struct mg_tensor *params,
		      uint64_t seed)
{
	return llama_init_part(self, unit, params, seed, NULL, NULL);
}

static int llama_fwd(void *self, struct mg_ctx *ctx, const struct mg_batch *b,
		     struct mg_tensor *metrics)
{
	struct llama *m = self;
	return m->obj->forward(m, ctx, b, metrics);
}

static int llama_bwd(void *self, struct mg_ctx *ctx)
{
	return llama_backward(self, ctx);
}

static int llama_dec(void *self, struct mg_ctx *ctx, const int32_t *ids,
		     int64_t n, int64_t pos, int64_t max_len, float *logits)
{
	return llama_decode(self, ctx, ids, n, pos, max_len, logits);
}

static int llama_save(void *self, struct mg_ctx *ctx, const char *dir,
		      enum mg_dtype dt)
{
	return llama_save_hf(self, ctx, dir, dt, UINT64_MAX);
}

static int llama_save_sharded(void *self, struct mg_ctx *ctx, const char *dir,
			      enum mg_dtype dt, uint64_t max_shard_bytes)
{
	return llama_save_hf(self, ctx, dir, dt, max_shard_bytes);
}

static const struct mg_model_ops llama_ops = {
	.declare = llama_declare,
	.init_unit = llama_init,
	.forward = llama_fwd,
	.backward = llama_bwd,
	.metrics = llama_metrics,
	.decode = llama_dec,
	.save_hf = llama_save,
	.save_hf_sharded = llama_save_sharded,
	.init_unit_part = llama_init_part,
};

static const struct mg_plugin llama_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_MODEL,
	.name = "llama",
	.version = "0.1",
	.description = "Llama 2 / 3 / 3.x, Mistral, Qwen2 / 2.5, Qwen3, "
		       "Gemma 2, Gemma 3 (text) and Phi-3 / Phi-4-mini "
		       "decoders (RMSNorm, RoPE with llama3 scaling, longrope "
		       "or partial, GQA, SwiGLU / GeGLU; biases, q/k norms, "
		       "sliding windows, soft-capping, fused projections), "
		       "per-token loss; presets or a Hugging Face folder",
	.options = llama_options,
	.create = llama_create,
	.destroy = llama_destroy,
	.ops = &llama_ops,
};

MG_PLUGIN_DEFINE(llama_plugin)
