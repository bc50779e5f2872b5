/*
 * llama.h - the llama model plugin's shared state: the architecture, the
 * activation arena's layout, and what each file provides.
 */
#ifndef MG_LLAMA_H
#define MG_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mg/mg.h"

/* The most layers a model has (num_hidden_layers' bound). */
#define LLAMA_MAX_LAYERS 4096

/* longrope factors a config may hold (rotary dims / 2): 256 covers
 * heads of 512 rotary dims, Phi's are 48. */
#define LLAMA_LR_MAX 256

/* The architecture, as Hugging Face's LlamaConfig names it. */
struct llama_cfg {
	int64_t vocab;	     /* vocab_size */
	int64_t dim;	     /* hidden_size */
	int64_t ffn;	     /* intermediate_size */
	int64_t layers;	     /* num_hidden_layers */
	int64_t heads;	     /* num_attention_heads */
	int64_t kv_heads;    /* num_key_value_heads */
	int64_t head_dim;    /* head_dim (hidden_size / heads by default) */
	double norm_eps;     /* rms_norm_eps */
	double rope_theta;   /* rope_theta */
	bool tie_embeddings; /* tie_word_embeddings */
	double init_std;     /* initializer_range */
	/* rope_scaling (rope_type "llama3"); factor 0: none */
	double rs_factor, rs_low, rs_high;
	int64_t rs_orig_max;
	int64_t max_positions; /* max_position_embeddings */
	/* What the decoder families change, resolved once from config.json
	 * or the family option (llama_family.c); the forward reads these
	 * features, never a family name. */
	int family;	/* index in llama_families[] */
	unsigned bias;	/* projections with a bias: bits 1u << LT_* */
	bool qk_norm;	/* per-head RMSNorm of q and k before RoPE */
	int64_t window; /* sliding-window attention (keys), 0: none */
	/* Gemma 2 / 3 (llama_family.c); zero for the other families */
	bool norm_offset;	 /* RMSNorms scale by (1 + w), w stored */
	bool sandwich;		 /* norms on the attention and MLP outputs */
	bool geglu;		 /* gelu_tanh gate instead of SiLU */
	double embed_scale;	 /* embeddings times this, 0: none */
	double attn_scale;	 /* score scale, 0: 1 / sqrt(head_dim) */
	double attn_softcap;	 /* attention logit soft-capping, 0: none */
	double final_softcap;	 /* output logit soft-capping, 0: none */
	double rope_local_theta; /* sliding layers' RoPE base, 0: theta's */
	double rs_linear;	 /* rope_scaling linear factor, 0: none */
	/* layers that attend in full despite a window (bit l of word l /
	 * 64): transformers' layer_types mixing sliding and full layers */
	uint64_t full[LLAMA_MAX_LAYERS / 64];
	/* Phi-3's fused projections: HF folders (and PEFT adapters) hold
	 * q, k, v as one qkv_proj and gate, up as one gate_up_proj; the
	 * model keeps them apart (split at load, fused at export) */
	unsigned fused;	 /* LLAMA_FUSE_* */
	int64_t rot_dim; /* rotary dims of each head (partial_rotary_factor:
			  * the first rot_dim turn, the rest pass), 0: all */
	/* rope type "longrope" (Phi-3-128k, Phi-4-mini), lr_n 0: none:
	 * inv_freq divided by short_factor, cos and sin scaled by the
	 * attention factor lr_attn; rows longer than lr_orig_max would take
	 * long_factor instead (transformers switches by the longest
	 * position), which is refused, not run */
	int lr_n;
	double lr_short[LLAMA_LR_MAX], lr_long[LLAMA_LR_MAX];
	double lr_attn;	    /* attention factor (1: none) */
	bool lr_attn_given; /* config.json named it (written back so) */
	int64_t lr_orig_max;
};
#define LLAMA_FUSE_QKV 1u /* q, k, v: self_attn.qkv_proj */
#define LLAMA_FUSE_GU 2u  /* gate, up: mlp.gate_up_proj */

/* cos and sin's scale (longrope's attention factor), 1 without. */
static inline double llama_rope_scale(const struct llama_cfg *c)
{
	return c->lr_n ? c->lr_attn : 1.0;
}

/* The rotary dims of a head: rot_dim, or the whole head_dim. */
static inline int64_t llama_rot_dim(const struct llama_cfg *c)
{
	return c->rot_dim ? c->rot_dim : c->head_dim;
}

/* Whether layer l attends through the sliding window. */
static inline bool llama_slides(const struct llama_cfg *c, int64_t l)
{
	return c->window > 0 && !(c->full[l / 64] >> (l % 64) & 1);
}

/* A decoder family: config.json's model_type and architecture, the keys
 * it adds to LlamaConfig's (read: features into c, errors naming path
 * and key; write: the same keys back for export). */
struct llama_family {
	const char *model_type, *arch;
	int (*read)(struct llama_cfg *c, const void *json, const char *path);
	void (*write)(const struct llama_cfg *c, void *json);
};
extern const struct llama_family llama_families[];
/* The family of model_type, or -1. */
int llama_family_find(const char *model_type);
/* The model types, "llama|mistral|...", for messages and the option. */
const char *llama_family_names(void);

/* The work buffers' slots (the training arena, llama_model.c; the decode
 * buffer, llama_decode.c): sizes rounded to 256 bytes so every slot starts
 * where cuBLAS and the 16-byte vector kernels want it, and a slot of
 * `bytes` taken at *at, which moves past it. */
static inline size_t llama_al(size_t bytes)
{
	return (bytes + 255) & ~(size_t)255;
}

static inline size_t llama_slot(size_t *at, size_t bytes)
{
	const size_t o = *at;
	*at += llama_al(bytes);
	return o;
}

struct llama;
/* The layer unit's parameter list of m->c into m->lp, kind and nlp. */
void llama_layer_params(struct llama *m);
/* The [rows, cols] (cols 0: 1-D) of layer parameter kind p. */
void llama_lp_shape(const struct llama_cfg *c, int p, int64_t shape[2]);
/* Where kind p lies in a Hugging Face folder: the tensor's name within
 * "model.layers.N.", and p's rows [*row0, *row0 + rows) of its *total
 * rows (the whole tensor, unless the family fuses p with others). */
const char *llama_lp_hf(const struct llama_cfg *c, int p, int64_t *row0,
			int64_t *total);

/* Fill cfg from the plugin's options: a preset's shape, overridden by
 * explicit options, or an HF folder's config.json (hf_dir). */
int llama_cfg_from_opts(struct llama_cfg *c, const struct mg_opts *o,
			char *hf_dir, size_t hf_len);
/* Parse a Hugging Face config.json (transformers 4 rope_theta /
 * rope_scaling and transformers 5 rope_parameters). */
int llama_cfg_from_hf(struct llama_cfg *c, const char *path);
/* Elements of a layer's largest projection (q and o, or gate, up and
 * down; k and v are no larger): what a per-projection scratch holds. */
static inline int64_t llama_max_proj(const struct llama_cfg *c)
{
	const int64_t q = c->heads * c->head_dim * c->dim, f = c->ffn * c->dim;
	return q > f ? q : f;
}
/* inv_freq[j] for j < llama_rot_dim / 2, rope scaling applied. */
void llama_inv_freq(const struct llama_cfg *c, float *out);
/* A regular text file of at most cap bytes (mg_file_read) holding no 0
 * byte, NUL-terminated (free it); NULL after mg_error() named the file
 * and the reason. */
char *llama_read_file(const char *path, size_t cap);
/* Check a configuration's consistency; errors name the field. */
int llama_cfg_check(const struct llama_cfg *c);

/* Unit indices: 0 the embedding, 1..layers the decoder layers, then the
 * final norm with the output head. */
#define LLAMA_UNIT_EMBED 0
#define LLAMA_UNIT_LAYER(l) (1 + (l))
#define LLAMA_UNIT_HEAD(c) (1 + (int)(c)->layers)

/* Parameter kinds of a decoder layer. Every family has the first nine,
 * at these indices of the unit; the optional ones (biases, q/k norms)
 * follow in this order when the family has them (llama_layer_params:
 * struct llama's lp[] maps a kind to its index). */
enum {
	LP_IN_NORM = 0,
	LP_Q,
	LP_K,
	LP_V,
	LP_O,
	LP_POST_NORM,
	LP_GATE,
	LP_UP,
	LP_DOWN,
	LP_Q_BIAS, /* the seven biases, in LT_* order */
	LP_K_BIAS,
	LP_V_BIAS,
	LP_O_BIAS,
	LP_GATE_BIAS,
	LP_UP_BIAS,
	LP_DOWN_BIAS,
	LP_Q_NORM, /* per-head RMSNorm weights [head_dim] */
	LP_K_NORM,
	LP_ATTN_OUT_NORM, /* sandwich norms: of the attention output */
	LP_MLP_OUT_NORM,  /* and of the MLP output, before the residuals */
	LP_COUNT,
};
#define LP_ALWAYS (LP_DOWN + 1)

/* Their Hugging Face names within "model.layers.N.", by LP_*. */
extern const char *const llama_layer_param[LP_COUNT];
/* Kind p's name in c's family: llama_layer_param's, except that with
 * sandwich norms (Gemma) the pre-MLP norm is pre_feedforward_layernorm
 * and post_attention_layernorm the attention output's. */
const char *llama_lp_name(const struct llama_cfg *c, int p);
/* Whether kind p is a projection's weight (q .. down): what NF4, int4
 * and QAT store or fake-quantize. */
static inline bool llama_lp_proj(int p)
{
	return p >= LP_Q && p <= LP_DOWN && p != LP_POST_NORM;
}
/* Whether kind p is an RMSNorm weight (ones at init, fp32). */
static inline bool llama_lp_norm(int p)
{
	return p == LP_IN_NORM || p == LP_POST_NORM || p == LP_Q_NORM ||
	       p == LP_K_NORM || p == LP_ATTN_OUT_NORM || p == LP_MLP_OUT_NORM;
}

/* LoRA targets: a layer's seven projections, then the output head. */
enum {
	LT_Q = 0,
	LT_K,
	LT_V,
	LT_O,
	LT_GATE,
	LT_UP,
	LT_DOWN,
	LT_HEAD,
	LT_COUNT,
};
/* The names PEFT's target_modules use, by LT_* (llama_adapter.c). */
extern const char *const llama_lora_module[LT_COUNT];
/* Target t's module name in model c: llama_lora_module[t], or the fused
 * module (qkv_proj, gate_up_proj) that holds it. */
const char *llama_lora_mod(const struct llama_cfg *c, int t);
/* "q_proj, v_proj" of target bits (bit LT_*). */
void llama_lora_modules_of(unsigned bits, char *out, size_t cap);
/* adapter_config.json at path checked against the options: r, lora_alpha
 * and use_rslora equal to rank, alpha and rslora, target_modules (when
 * given) naming exactly the targets. 0, or -1 after mg_error() naming the
 * file and the field. */
int llama_adapter_config(const char *path, int rank, double alpha, bool rslora,
			 unsigned targets);

/* Low-rank adapters (llama_lora.c): y = W x + scale * B (A dropout(x))
 * on each targeted projection, W frozen. */
struct llama_lora {
	int rank; /* 0: off (full fine-tuning) */
	double alpha, dropout, scale;
	bool rslora;
	unsigned targets; /* bit LT_* */
	/* Index of the target's lora_A and lora_B within its unit, or -1. */
	int ia[LT_COUNT], ib[LT_COUNT];
	/* A fused module (Phi-3's qkv_proj, gate_up_proj) is one PEFT
	 * adapter: one A and one B over the fused output. Its targets share
	 * the A of own[t], the first of them, and their B's are rows
	 * [brow[t], brow[t] + out) of that one B (llama_lora_b). Otherwise
	 * own[t] = t and brow[t] = 0. */
	int own[LT_COUNT];
	int64_t brow[LT_COUNT];
	int layer_params, head_params; /* parameters per unit */
	/* lora_adapter: a PEFT adapter to start from, or NULL. */
	struct mg_tensor_file *from;
	struct mg_buf S;    /* [rank, rank] scale * I, compute dtype */
	enum mg_dtype S_dt; /* S's dtype, once S_built */
	bool S_built;
	unsigned said_fused; /* fused groups announced (once each) */
};

/* Fused kernels a run may swap in (llama_kernels.c): bits of kern. */
enum {
	LK_RMSNORM = 1u << 0, /* residual add + RMSNorm, forward and back */
	LK_FLCE = 1u << 1,    /* chunked linear + cross-entropy head */
	LK_ALL = LK_RMSNORM | LK_FLCE,
};

/* The DPO objective (llama_dpo.c): objective = dpo. */
struct llama_dpo {
	bool on;
	bool ref_pass; /* the forward under way is the reference's */
	/* Full fine-tuning: the reference is a frozen copy of the initial
	 * weights, units of their own after the model's ("ref." + the unit's
	 * name), acquired only by the reference pass. */
	bool copy;
	double beta, eps;
	struct mg_buf buf; /* logp, ref and dlogp [n, 2] of the last forward */
	int64_t n;
	bool checked[2]; /* rows seen to be pairs: eval, training */
};

struct llama;

/* How a layer projection's base GEMM reads its weight and input, one
 * kind per run (llama_proj.c). weight: what the GEMM reads for stored
 * weight w (valid until the next call; NULL after mg_error); fq_input:
 * the input fake-quantized to int8 per token first; weight_grad: the
 * straight-through mask on a trained weight's gradient, in place (NULL:
 * none); describe: what the kind does, logged once at declaration. */
struct llama_proj_kind {
	const char *name;
	bool fq_input;
	const struct mg_tensor *(*weight)(struct llama *m, struct mg_ctx *ctx,
					  const struct mg_tensor *w);
	int (*weight_grad)(struct llama *m, struct mg_ctx *ctx,
			   const struct mg_tensor *w, struct mg_tensor *g);
	void (*describe)(const struct llama *m);
};
extern const struct llama_proj_kind llama_proj_dense, llama_proj_nf4,
	llama_proj_qat, llama_proj_int4;
/* m->proj from the quant and qat options (after their setup). */
void llama_proj_select(struct llama *m);

struct llama {
	struct llama_cfg c;
	/* a layer unit's parameters: lp[kind] its index or -1, kind[i] the
	 * kind of index i < nlp (llama_layer_params) */
	int lp[LP_COUNT], kind[LP_COUNT], nlp;
	struct llama_lora lora;
	unsigned kern;	    /* LK_* of the `kernels` option */
	int64_t flce_chunk; /* flce_chunk option: tokens a chunk, 0 auto */
	/* quant = nf4 (llama_quant.c): the layers' projections are frozen
	 * NF4; qbuf holds the one being used, dequantized (qw) */
	bool nf4;
	struct mg_buf qbuf;
	struct mg_tensor qw;
	/* qat = 8da4w / quant = int4 (llama_qat.c): fake-quantized
	 * projections; qatbuf holds the weight being used (qatw) */
	bool qat, int4;
	/* the projection kind these options make (llama_proj.c) */
	const struct llama_proj_kind *proj;
	int64_t qat_group;
	struct mg_buf qatbuf;
	struct mg_tensor qatw;
	struct llama_dpo dpo;
	const struct llama_objective *obj; /* from the objective option */
	int64_t goff; /* global_offset of the last training forward */
	struct mg_ctx *ctx;
	char hf_dir[4096];   /* weights to start from, or "" */
	struct llama_hf *hf; /* its open files (llama_hf.c) */
	/* F32 [rot_dim / 2] on the device: the global layers' rotary
	 * frequencies, then the sliding layers' (rope_local_theta) */
	struct mg_buf inv_freq;
	/* the gate of the MLP: swiglu, or geglu (tanh GELU), by c.geglu */
	int (*glu)(struct mg_ctx *ctx, const struct mg_tensor *g,
		   const struct mg_tensor *u, struct mg_tensor *h);
	int (*glu_backward)(struct mg_ctx *ctx, const struct mg_tensor *g,
			    const struct mg_tensor *u,
			    const struct mg_tensor *dh, struct mg_tensor *dg,
			    struct mg_tensor *du);
	/* norm_offset: (1 + w) of the norms in use, LLAMA_NORM_SLOTS
	 * slots of max(hidden, head_dim) values in the weights' dtype */
	struct mg_buf normw;
	struct mg_tensor normw_t[8];
	struct mg_buf arena; /* activations kept for backward */
	struct mg_buf work;  /* backward's gradient buffers */
	int64_t n, T;	     /* batch the arena is laid out for */
	/* activation_checkpointing: one layer block in the arena, refilled
	 * by recomputing each layer's forward in backward */
	bool recompute;
	bool have_fwd;
	bool warned_len; /* rows longer than max_position_embeddings */
	struct mg_tensor ids, labels, positions; /* of the last forward */
	/* decoding (llama_decode.c): key and value caches, [layers]
	 * [dec_max, kv_heads, head_dim] each; dec_len positions filled */
	struct mg_buf kcache, vcache, dec_work, dec_io;
	int64_t dec_max, dec_len;
};

/* The base GEMM of target tg (the head: always as stored) through the
 * run's projection kind. */
static inline const struct mg_tensor *
llama_base_weight(struct llama *m, struct mg_ctx *ctx, int tg,
		  const struct mg_tensor *w)
{
	return tg == LT_HEAD ? w : m->proj->weight(m, ctx, w);
}
static inline bool llama_base_fq_input(const struct llama *m, int tg)
{
	return m->proj->fq_input && tg != LT_HEAD;
}
static inline int llama_base_weight_grad(struct llama *m, struct mg_ctx *ctx,
					 int tg, const struct mg_tensor *w,
					 struct mg_tensor *g)
{
	return tg == LT_HEAD || !g || !m->proj->weight_grad
		       ? 0
		       : m->proj->weight_grad(m, ctx, w, g);
}

/* The training objective, one per run (llama_objective.c): forward
 * over a batch; head, the loss metrics from the logits (the fused flce
 * head computes the token loss itself); head_backward, the logits'
 * gradient in place; metrics, what the run declares. */
struct llama_objective {
	const char *name;
	int (*forward)(struct llama *m, struct mg_ctx *ctx,
		       const struct mg_batch *b, struct mg_tensor *metrics);
	int (*head)(struct llama *m, struct mg_ctx *ctx,
		    const struct mg_tensor *logits, const struct mg_batch *b,
		    struct mg_tensor *metrics);
	int (*head_backward)(struct llama *m, struct mg_ctx *ctx,
			     struct mg_tensor *logits);
	int (*metrics)(struct mg_metric_spec *ms);
};
extern const struct llama_objective llama_objective_sft, llama_objective_dpo;

/* llama_init.c: a unit's initial values (HF's initialisation: normal
 * with initializer_range, norms one) or the HF checkpoint's; with lo/hi
 * (NULL: everything) the random values of params[i] only for elements
 * [lo[i], hi[i]). */
int llama_init_unit(struct llama *m, int unit, struct mg_tensor *params,
		    uint64_t seed, const int64_t *lo, const int64_t *hi);

/* llama_hf.c: the HF folder's safetensors (open at create when hf_dir
 * is set); load converts tensor `name` into a host tensor of equal shape
 * (errors name the file and the tensor). */
struct llama_hf;
int llama_hf_open(struct llama *m);
void llama_hf_close(struct llama *m);
int llama_hf_load(struct llama *m, const char *name, struct mg_tensor *dst);
/* The NF4 blob of weight `name` when the folder holds it in
 * bitsandbytes' 4-bit form (llama_bnb.c): copied, not re-quantized.
 * 1 done, 0 the folder has it as floats (quantize those), -1 error
 * (naming the file and the tensor). llama_hf_load dequantizes such a
 * weight into a float tensor. */
int llama_hf_load_nf4(struct llama *m, const char *name,
		      struct mg_tensor *blob);

/* llama_lora.c: parse the lora_* options (after the architecture);
 * in/out width of target t. */
int llama_lora_setup(struct llama *m, const struct mg_opts *o);
void llama_lora_dims(const struct llama_cfg *c, int t, int64_t *in,
		     int64_t *out);
/* Target t's lora_B [out, r] among a unit's tensors T (its parameters or
 * gradients): T[ib[t]], or t's rows of a fused module's B. A NULL
 * tensor (a gradient not lent) stays NULL. */
struct mg_tensor llama_lora_b(const struct llama *m, const struct mg_tensor *T,
			      int t);
/* Target t's adapter of layer `layer` (layers: the head): from the
 * lora_adapter folder, else A [rank, in] kaiming-uniform(a = sqrt(5)) as
 * PEFT (uniform within +-1/sqrt(in)) and B zero. */
int llama_lora_init(const struct llama *m, int layer, int t,
		    struct mg_tensor *A, struct mg_tensor *B, uint64_t key);
/*
 * The adapter path of one projection, reusable by training and decode.
 * Forward: y = scale * B (A drop(x)), x [R, in], y [R, out], WRITTEN:
 * the caller adds the frozen projection's x W^T onto it with
 * mg_op_linear_add, whose GEMM reads y in its epilogue (the adapter's
 * product then costs one pass over y, not a product in scratch and an
 * add: three more). Saves as = scale * A drop(x) [R, rank] for backward
 * (as may be scratch when no backward follows). Dropout only when
 * ctx->training, keyed on (layer, target) and each row's global sample
 * index so N ranks draw what one rank would. xd [R, in] and tmp
 * [R, rank] are scratch.
 */
int llama_lora_forward(struct llama *m, struct mg_ctx *ctx, int layer, int t,
		       const struct mg_tensor *A, const struct mg_tensor *B,
		       const struct mg_tensor *x, struct mg_tensor *as,
		       void *xd, void *tmp, struct mg_tensor *y);
/* The first half of llama_lora_forward: as = scale * A drop(x) [R, r]
 * (tmp [R, r] scratch), for a caller that multiplies by B itself (the
 * fused head). */
int llama_lora_down(struct llama *m, struct mg_ctx *ctx, int layer, int t,
		    const struct mg_tensor *A, const struct mg_tensor *x,
		    struct mg_tensor *as, void *xd, void *tmp);
/* The second half of llama_lora_backward, from das = dy B [R, r]: dA +=
 * (NULL: not computed), dx += the adapter's input gradient (added by
 * the GEMM itself without dropout; through dxd [R, in] with it). */
int llama_lora_down_backward(struct llama *m, struct mg_ctx *ctx, int layer,
			     int t, const struct mg_tensor *A,
			     struct mg_tensor *dA, const struct mg_tensor *x,
			     const struct mg_tensor *das, struct mg_tensor *dx,
			     void *da, void *xd, void *dxd);
/* Backward from dy [R, out]: dA, dB += (NULL: not computed), dx [R, in]
 * += the adapter's input gradient. Scratch: das, da [R, rank], xd and
 * dxd [R, in]. */
int llama_lora_backward(struct llama *m, struct mg_ctx *ctx, int layer, int t,
			const struct mg_tensor *A, const struct mg_tensor *B,
			struct mg_tensor *dA, struct mg_tensor *dB,
			const struct mg_tensor *x, const struct mg_tensor *as,
			const struct mg_tensor *dy, struct mg_tensor *dx,
			void *das, void *da, void *xd, void *dxd);
/*
 * Fused groups: targets ts[0..n) (n 2 or 3: q, k, v or gate, up) that
 * read the same input x. When their lora_A's lie back to back in the
 * lent storage (and in G's gradients when G is given: replicated storage
 * declares them so) and no dropout draws a mask per target, one GEMM by
 * the [n r, in] stack of A's reads x once for all of them, forward and
 * backward; selection matrices split its [R, n r] product into each
 * target's saved s A x. Same results as the per-target path.
 */
bool llama_lora_fusable(const struct llama *m, const struct mg_ctx *ctx,
			const int *ts, int n, const struct mg_tensor *P,
			const struct mg_tensor *G);
/* y[j] = s B_j A_j x written (the frozen projections add theirs with
 * mg_op_linear_add), as[j] saved; tmp [R, n rank]. */
int llama_lora_forward_group(struct llama *m, struct mg_ctx *ctx, const int *ts,
			     int n, const struct mg_tensor *P,
			     const struct mg_tensor *x,
			     struct mg_tensor *const *as,
			     struct mg_tensor *const *y, void *tmp);
/* From dy[j]: the adapters' gradients (+=), dx += their input gradient
 * (in the GEMM). Scratch: das [R, rank], da3 and dt3 [R, n rank]. */
int llama_lora_backward_group(struct llama *m, struct mg_ctx *ctx,
			      const int *ts, int n, const struct mg_tensor *P,
			      struct mg_tensor *G, const struct mg_tensor *x,
			      struct mg_tensor *const *as,
			      struct mg_tensor *const *dy, struct mg_tensor *dx,
			      void *das, void *da3, void *dt3);
void llama_lora_free(struct llama *m);

/* llama_kernels.c: the `kernels` option ("rmsnorm,flce", "fused" or
 * "all", "none") into LK_* bits, errors naming unknown kernels; str
 * names the bits; setup parses the options at create. */
int llama_kernels_parse(const char *s, unsigned *bits);
void llama_kernels_str(unsigned bits, char *buf, size_t len);
int llama_kernels_setup(struct llama *m, const struct mg_opts *o);

/* llama_head.c: the fused output head (kernels flce). chunk: tokens per
 * chunk of logits for R rows. forward writes the loss metrics (training
 * and evaluation); backward recomputes each chunk's logits and takes
 * dhn (written) and the head weight's gradient (+=, the embedding's
 * when tied), scaled by ctx->grad_scale. head is the head unit's view,
 * work the [chunk, vocab] logits buffer; lora the head adapter's saved
 * s A drop(hn) and scratch (llama_lora_forward / _backward's), or NULL
 * without one. */
struct llama_head_lora {
	struct mg_tensor as;  /* [R, r], saved by forward */
	void *xd, *tmp;	      /* [R, D], [R, r] */
	void *das, *da, *dxd; /* backward: [R, r], [R, r], [R, D] */
};
int64_t llama_flce_chunk(const struct llama *m, int64_t R);
int llama_head_flce_forward(struct llama *m, struct mg_ctx *ctx,
			    enum mg_phase ph, struct mg_unit_view *head,
			    const struct mg_tensor *hn,
			    const struct mg_tensor *labels, void *work,
			    struct llama_head_lora *lora,
			    struct mg_tensor *metrics);
int llama_head_flce_backward(struct llama *m, struct mg_ctx *ctx,
			     struct mg_unit_view *head,
			     const struct mg_tensor *hn,
			     const struct mg_tensor *labels, void *work,
			     struct llama_head_lora *lora,
			     struct mg_tensor *dhn);
/* llama_quant.c: QLoRA's NF4 base. setup parses `quant` (after the
 * LoRA options: nf4 needs lora_rank > 0); quant_param says whether
 * layer parameter lp (LP_*) is declared MG_NF4; fill makes an NF4
 * parameter's blob from the HF tensor hf_name (with hf_dir) or the
 * random init keyed on key, through one tensor's f32 values;
 * llama_weight returns w itself, or for an NF4 w its dequantized values
 * in the compute dtype (valid until the next call; NULL after
 * mg_error); describe logs what is NF4, once. */
int llama_quant_setup(struct llama *m, const struct mg_opts *o);
bool llama_quant_param(const struct llama *m, int lp);
int llama_quant_fill(struct llama *m, struct mg_tensor *blob,
		     const char *hf_name, uint64_t key);
const struct mg_tensor *llama_weight(struct llama *m, struct mg_ctx *ctx,
				     const struct mg_tensor *w);
void llama_quant_describe(const struct llama *m);
void llama_quant_free(struct llama *m);

/* llama_qat.c: QAT (qat = 8da4w) and int4 evaluation (quant = int4).
 * setup parses qat, qat_group and quant's int4 (after llama_quant_setup);
 * weight returns w fake-quantized to int4 (valid until the next call;
 * NULL after mg_error); weight_grad masks g in place by w's
 * straight-through mask: the qat projection kind (llama_proj.c), which
 * keeps them off the head. */
int llama_qat_setup(struct llama *m, const struct mg_opts *o);
const struct mg_tensor *llama_qat_weight(struct llama *m, struct mg_ctx *ctx,
					 const struct mg_tensor *w);
int llama_qat_weight_grad(struct llama *m, struct mg_ctx *ctx,
			  const struct mg_tensor *w, struct mg_tensor *g);
void llama_qat_describe(const struct llama *m);
void llama_qat_free(struct llama *m);
/* llama_hf.c: weight `name` from its packed int4 form (`name`_int4 and
 * `name`_scales, mgrun export --dtype int4), dequantized into dst. 1
 * done, 0 the folder has no int4 form, -1 error. */
int llama_hf_load_int4(struct llama *m, const char *name,
		       struct mg_tensor *dst);

/* llama_arch.c: the family's features as ops, shared by the forward,
 * the backward and decoding. arch_setup picks the gate; attn_opts and
 * inv_freq are layer l's (window, soft-cap, scale; the sliding layers'
 * RoPE base); norm_w is the weight an RMSNorm multiplies by: w, or with
 * norm_offset 1 + w written to slot `slot` (< 8; valid until that slot
 * is used again); embed_scale multiplies x by the embedding scale (by
 * it again in backward: linear), rounded to x's dtype as transformers
 * rounds its normalizer; logit_cap soft-caps logits (forward: x into y;
 * backward: x the uncapped logits, dy into dy). */
void llama_arch_setup(struct llama *m);
struct mg_attn_opts llama_attn_opts(const struct llama *m, int64_t l);
struct mg_tensor llama_inv_freq_of(const struct llama *m, int64_t l);
const struct mg_tensor *llama_norm_w(struct llama *m, struct mg_ctx *ctx,
				     const struct mg_tensor *w, int slot);
int llama_embed_scale(const struct llama *m, struct mg_ctx *ctx,
		      struct mg_tensor *x);
/* A layer's norm weights as its norms multiply by (llama_norm_w's, in
 * slots NW_*; NULL where the layer has no such norm); the head's final
 * norm takes slot NW_FINAL. */
enum { NW_IN, NW_POST, NW_Q, NW_K, NW_AO, NW_MO, NW_N, NW_FINAL = NW_N };
int llama_norm_ws(struct llama *m, struct mg_ctx *ctx,
		  const struct mg_tensor *W, const struct mg_tensor **nw);
/* rope_local_theta's frequencies (rope_theta's without one), unscaled,
 * [llama_rot_dim / 2]. */
void llama_inv_freq_local(const struct llama_cfg *c, float *out);

/* llama_model.c */
int llama_forward(struct llama *m, struct mg_ctx *ctx, const struct mg_batch *b,
		  struct mg_tensor *metrics);
int llama_backward(struct llama *m, struct mg_ctx *ctx);

/* llama_dpo.c: DPO (Rafailov et al. 2023) on rows of preference pairs
 * [prompt + chosen | prompt + rejected], the reference being the same
 * weights with the LoRA adapters off. setup parses the objective and
 * dpo_* options (after llama_lora_setup: it needs adapters); metrics
 * declares TRL's; forward runs the reference pass then the policy's;
 * head and head_backward replace the token loss in llama_forward and
 * llama_backward when dpo.on. */
int llama_dpo_setup(struct llama *m, const struct mg_opts *o);
void llama_dpo_free(struct llama *m);
int llama_dpo_metrics(struct mg_metric_spec *ms);
/* The unit a forward acquires for model unit u: its frozen reference
 * copy during a full fine-tune's reference pass, else u itself. */
int llama_dpo_unit(const struct llama *m, int u);
int llama_dpo_forward(struct llama *m, struct mg_ctx *ctx,
		      const struct mg_batch *b, struct mg_tensor *metrics);
int llama_dpo_head(struct llama *m, struct mg_ctx *ctx,
		   const struct mg_tensor *logits, const struct mg_batch *b,
		   struct mg_tensor *metrics);
int llama_dpo_head_backward(struct llama *m, struct mg_ctx *ctx,
			    struct mg_tensor *logits);

/* llama_decode.c: the model op decode (model.h) with a key/value
 * cache; decode_free releases the cache (destroy). */
int llama_decode(struct llama *m, struct mg_ctx *ctx, const int32_t *ids,
		 int64_t n, int64_t pos, int64_t max_len, float *logits);
void llama_decode_free(struct llama *m);

/* llama_hf_save.c: the model ops save_hf and save_hf_sharded (model.h):
 * config.json and model.safetensors (or its shards of at most
 * max_shard_bytes and the index) into dir, in dt, LoRA adapters merged. */
int llama_save_hf(struct llama *m, struct mg_ctx *ctx, const char *dir,
		  enum mg_dtype dt, uint64_t max_shard_bytes);

#endif
