/*
 * ops_llm.h - the decoder-only transformer's ops (LLaMA and its kin):
 * token embedding, RMSNorm, rotary position embedding, causal grouped-
 * query attention over packed documents, the SwiGLU gate, and the
 * preference-pair (DPO) log-probabilities and loss. GEMMs are
 * mg_op_linear, the token loss mg_op_softmax_xent (ops_nn.h).
 *
 * The conventions of ops_nn.h hold: contiguous tensors on ctx's device,
 * one float dtype per call (F32 or F64 on the CPU; F32, BF16 or F16 on
 * CUDA, accumulating in F32), backward writes activation gradients (=)
 * and accumulates parameter gradients (+=), NULL gradient outputs are
 * not computed, results are deterministic. Saved statistics (rstd, lse)
 * are F32, or F64 when the data is F64. Token ids and positions are I32.
 */
#ifndef MG_OPS_LLM_H
#define MG_OPS_LLM_H

#include "abi.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_ctx;

/* y[r, :] = table[ids[r], :]. ids I32 [...] (R values), table [V, D],
 * y [..., D] (R rows). An id outside [0, V) is an error on the CPU and a
 * zero row on CUDA (checked when the batch is read). */
MG_EXPORT int mg_op_embedding(struct mg_ctx *ctx, const struct mg_tensor *ids,
			      const struct mg_tensor *table,
			      struct mg_tensor *y);
/* dtable[ids[r], :] += dy[r, :], rows in a fixed order per id. */
MG_EXPORT int mg_op_embedding_backward(struct mg_ctx *ctx,
				       const struct mg_tensor *ids,
				       const struct mg_tensor *dy,
				       struct mg_tensor *dtable);

/* y = x / sqrt(mean(x^2) + eps) * w over the last dim. x, y [..., D]
 * (R rows), w [D] in x's dtype or F32 (a norm weight kept in fp32),
 * rstd [R] saved for backward (NULL: not saved). y may alias x. */
MG_EXPORT int mg_op_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
			    const struct mg_tensor *w, double eps,
			    struct mg_tensor *y, struct mg_tensor *rstd);
/* dx written, dw += (dw in w's dtype). */
MG_EXPORT int
mg_op_rmsnorm_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
		       const struct mg_tensor *w, const struct mg_tensor *rstd,
		       const struct mg_tensor *dy, struct mg_tensor *dx,
		       struct mg_tensor *dw);

/*
 * Rotary position embedding in place, Hugging Face's rotate-half layout:
 * for pair j < h of each head, (x[j], x[j + h]) is rotated by angle
 * positions[n, t] * inv_freq[j] (angle, cos and sin in F32, as HF
 * computes them). x [N, T, H, hd], positions I32 [N, T], inv_freq F32
 * [h] (the model folds rope scaling such as llama3's into it). h is
 * hd/2, or fewer for partial rotary (ABI 1.13; Phi-3's
 * partial_rotary_factor): the first 2h dims of each head turn, as
 * transformers' rotate_half of x[..., :2h], and dims 2h.. pass as they
 * are. rope_backward rotates a gradient back (by minus the angle), in
 * place.
 */
MG_EXPORT int mg_op_rope(struct mg_ctx *ctx, struct mg_tensor *x,
			 const struct mg_tensor *positions,
			 const struct mg_tensor *inv_freq);
MG_EXPORT int mg_op_rope_backward(struct mg_ctx *ctx, struct mg_tensor *dx,
				  const struct mg_tensor *positions,
				  const struct mg_tensor *inv_freq);
/* The same with cos and sin scaled by `scale` (ABI 1.13; transformers'
 * attention_scaling, longrope's attention factor: cos * scale and
 * sin * scale in F32, then x's dtype); the dims past 2h pass unscaled.
 * Backward is the adjoint, scale R(-angle). scale 1: mg_op_rope. */
MG_EXPORT int mg_op_rope_scaled(struct mg_ctx *ctx, struct mg_tensor *x,
				const struct mg_tensor *positions,
				const struct mg_tensor *inv_freq, double scale);
MG_EXPORT int mg_op_rope_scaled_backward(struct mg_ctx *ctx,
					 struct mg_tensor *dx,
					 const struct mg_tensor *positions,
					 const struct mg_tensor *inv_freq,
					 double scale);

/*
 * What differs between decoder families' attention, beyond the shapes
 * (ABI 1.12): the score scale (1 / sqrt(hd), or Gemma's
 * query_pre_attn_scalar) and a sliding window (Mistral, Gemma's local
 * layers): with window W > 0 query t also needs t - s < W, so it sees
 * at most W keys, itself included (transformers' sliding_window). size
 * is sizeof the caller's struct, as MG_ATTN_OPTS sets it, so a later
 * minor can append fields that older callers leave at their defaults.
 */
struct mg_attn_opts {
	uint32_t size;
	double scale;
	int64_t window; /* 0: no window */
	/* ABI 1.13: logit soft-capping (Gemma 2's attn_logit_softcapping):
	 * each scaled score s becomes softcap * tanh(s / softcap) before the
	 * mask and the softmax; 0: none (what a 1.12 caller's size leaves) */
	double softcap;
};
#define MG_ATTN_OPTS(scale_, window_)                                          \
	((struct mg_attn_opts){sizeof(struct mg_attn_opts), (scale_),          \
			       (window_), 0})
#define MG_ATTN_OPTS_CAP(scale_, window_, softcap_)                            \
	((struct mg_attn_opts){sizeof(struct mg_attn_opts), (scale_),          \
			       (window_), (softcap_)})

/*
 * Causal self-attention with grouped-query heads over packed documents:
 * q [N, T, Hq, hd], k and v [N, T, Hkv, hd] with Hq a multiple of Hkv
 * (query head h reads key/value head h / (Hq / Hkv), never a repeated
 * copy). Query t attends keys s with t - positions[n, t] <= s <= t: its
 * own document up to itself (positions restart at 0 where a packed
 * document begins; padding rows, position 0, attend only themselves).
 * o [N, T, Hq, hd] = softmax(scale * q k^T) v; lse [N, Hq, T] saves the
 * log-sum-exp of the scaled scores for backward (NULL: not saved).
 */
MG_EXPORT int mg_op_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
			      const struct mg_tensor *k,
			      const struct mg_tensor *v,
			      const struct mg_tensor *positions, double scale,
			      struct mg_tensor *o, struct mg_tensor *lse);
/* dq, dk, dv written (GQA: a key/value head sums the gradients of its
 * query heads). o and lse are the forward's. */
MG_EXPORT int
mg_op_attention_backward(struct mg_ctx *ctx, const struct mg_tensor *q,
			 const struct mg_tensor *k, const struct mg_tensor *v,
			 const struct mg_tensor *positions, double scale,
			 const struct mg_tensor *o, const struct mg_tensor *lse,
			 const struct mg_tensor *dout, struct mg_tensor *dq,
			 struct mg_tensor *dk, struct mg_tensor *dv);
/* The same two ops with a family's options (ABI 1.12); mg_op_attention
 * and its backward are these with MG_ATTN_OPTS(scale, 0). */
MG_EXPORT int mg_op_attention_opts(struct mg_ctx *ctx,
				   const struct mg_tensor *q,
				   const struct mg_tensor *k,
				   const struct mg_tensor *v,
				   const struct mg_tensor *positions,
				   const struct mg_attn_opts *opts,
				   struct mg_tensor *o, struct mg_tensor *lse);
MG_EXPORT int mg_op_attention_opts_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *opts,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv);

/*
 * Attention of new tokens over a key/value cache, for incremental
 * decoding (`mgrun generate`): q [n, Hq, hd] are the queries of one
 * sequence's tokens at positions pos..pos+n-1; k_cache and v_cache
 * [max_len, Hkv, hd] hold the keys and values of positions 0..pos+n-1
 * (rows from pos + n on are not read). Query t attends cache rows
 * 0..pos+t, grouped-query heads as in mg_op_attention; o [n, Hq, hd] =
 * softmax(scale * q k^T) v. Needs 0 <= pos and pos + n <= max_len. For
 * a single document it equals the last n rows of mg_op_attention over
 * the pos + n tokens. No backward: inference only.
 */
MG_EXPORT int mg_op_attention_decode(struct mg_ctx *ctx,
				     const struct mg_tensor *q,
				     const struct mg_tensor *k_cache,
				     const struct mg_tensor *v_cache,
				     int64_t pos, double scale,
				     struct mg_tensor *o);
/* The same with a family's options (ABI 1.12): with a window, query t
 * attends cache rows pos + t - window + 1 .. pos + t only; a softcap
 * (1.13) caps the scores as in mg_op_attention_opts. */
MG_EXPORT int mg_op_attention_decode_opts(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k_cache, const struct mg_tensor *v_cache,
	int64_t pos, const struct mg_attn_opts *opts, struct mg_tensor *o);

/* SwiGLU: h = silu(g) * u, element-wise (silu(g) = g / (1 + e^-g)).
 * g, u, h of equal numel; h may alias g or u. */
MG_EXPORT int mg_op_swiglu(struct mg_ctx *ctx, const struct mg_tensor *g,
			   const struct mg_tensor *u, struct mg_tensor *h);
/* dg, du written from dh; either may alias dh. */
MG_EXPORT int mg_op_swiglu_backward(struct mg_ctx *ctx,
				    const struct mg_tensor *g,
				    const struct mg_tensor *u,
				    const struct mg_tensor *dh,
				    struct mg_tensor *dg, struct mg_tensor *du);

/*
 * Gemma's pieces (ABI 1.13), element-wise over tensors of equal numel:
 *
 * geglu: h = gelu_tanh(g) * u with gelu_tanh(x) = x / 2 (1 + tanh(
 * sqrt(2 / pi) (x + 0.044715 x^3))) (transformers' gelu_pytorch_tanh);
 * h may alias g or u. Backward writes dg and du (either may alias dh).
 */
MG_EXPORT int mg_op_geglu(struct mg_ctx *ctx, const struct mg_tensor *g,
			  const struct mg_tensor *u, struct mg_tensor *h);
MG_EXPORT int mg_op_geglu_backward(struct mg_ctx *ctx,
				   const struct mg_tensor *g,
				   const struct mg_tensor *u,
				   const struct mg_tensor *dh,
				   struct mg_tensor *dg, struct mg_tensor *du);
/* Soft-capping: y = cap * tanh(x / cap), cap > 0 (Gemma 2's
 * final_logit_softcapping); y may alias x. Backward from the forward's
 * input x: dx = dy (1 - tanh^2(x / cap)); dx may alias dy. */
MG_EXPORT int mg_op_softcap(struct mg_ctx *ctx, const struct mg_tensor *x,
			    double cap, struct mg_tensor *y);
MG_EXPORT int mg_op_softcap_backward(struct mg_ctx *ctx,
				     const struct mg_tensor *x, double cap,
				     const struct mg_tensor *dy,
				     struct mg_tensor *dx);
/* y = a x + b (in F32, F64 for F64 data; y may alias x): the embedding
 * scale sqrt(hidden) forward and back, the (1 + w) of Gemma's RMSNorm
 * weights. */
MG_EXPORT int mg_op_scale_shift(struct mg_ctx *ctx, const struct mg_tensor *x,
				double a, double b, struct mg_tensor *y);

/*
 * Fused kernels (ABI 1.5), each the exact composition of the ops above
 * in one pass, kept beside them as the reference (the llama model's
 * `kernels` option picks per run):
 *
 * add_rmsnorm: s = x + r (rounded to the dtype, as mg_op_add writes it),
 * then y = rmsnorm(s) * w with rstd saved, as mg_op_add followed by
 * mg_op_rmsnorm, reading x and r once. s may alias x or r; y must not
 * alias s.
 */
MG_EXPORT int mg_op_add_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
				const struct mg_tensor *r,
				const struct mg_tensor *w, double eps,
				struct mg_tensor *s, struct mg_tensor *y,
				struct mg_tensor *rstd);
/* rmsnorm_backward whose input gradient also carries a residual's:
 * dx = dres + d(rmsnorm)/dx (mg_op_rmsnorm_backward then mg_op_add), dw
 * += as there (NULL: not computed). dx may alias dres. */
MG_EXPORT int mg_op_rmsnorm_backward_add(
	struct mg_ctx *ctx, const struct mg_tensor *x,
	const struct mg_tensor *w, const struct mg_tensor *rstd,
	const struct mg_tensor *dy, const struct mg_tensor *dres,
	struct mg_tensor *dx, struct mg_tensor *dw);

/*
 * Linear + cross-entropy without the [R, V] logits: x [..., D] (R rows),
 * w [V, D] (the output head), labels I32 (R values, MG_IGNORE_INDEX or
 * any negative label: no loss). The rows go through in chunks of C, the
 * rows of work [C, V] (x's dtype): logits = x_c w^T into work, then one
 * pass per row computes the loss, the first arg-max and, when gradients
 * are asked for, (softmax - onehot) * scale in place (scale: F32 device
 * scalar such as ctx->grad_scale, NULL for 1; ignored rows zero), and
 * dx_c = work w (written), dw += work^T x_c. metrics (F32 or F64, at
 * least MG_METRIC_N values; NULL: not written) receive the loss sum,
 * correct and counted rows (=) as mg_op_softmax_xent does. Peak extra
 * memory is work, C x V, instead of R x V. Equal to mg_op_linear,
 * mg_op_softmax_xent, mg_op_softmax_xent_backward and
 * mg_op_linear_backward in sequence, up to the rounding of chunked
 * sums.
 */
MG_EXPORT int mg_op_linear_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
				const struct mg_tensor *w,
				const struct mg_tensor *labels,
				const struct mg_tensor *scale,
				struct mg_tensor *work,
				struct mg_tensor *metrics, struct mg_tensor *dx,
				struct mg_tensor *dw);
/*
 * A low-rank term of the head (a LoRA adapter on it): logits += x2 w2^T
 * with x2 [R, r] (the adapter's s A drop(x)) and w2 [V, r] (its B), one
 * more GEMM a chunk; with gradients dx2 = dlogits w2 (written) and dw2
 * += dlogits^T x2, each NULL when not wanted.
 */
struct mg_lowrank {
	const struct mg_tensor *x2, *w2;
	struct mg_tensor *dx2, *dw2;
};
/* mg_op_linear_xent with the low-rank term lr (NULL: none). */
MG_EXPORT int
mg_op_linear_lora_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
		       const struct mg_tensor *w, const struct mg_lowrank *lr,
		       const struct mg_tensor *labels,
		       const struct mg_tensor *scale, struct mg_tensor *work,
		       struct mg_tensor *metrics, struct mg_tensor *dx,
		       struct mg_tensor *dw);

/*
 * Preference pairs (DPO). A row of labels/positions [N, T] holds two
 * packed documents: the chosen response's (the document starting at
 * t = 0) and the rejected one's (positions restart at 0 where it
 * starts), then padding. logits [N * T, K] or [N, T, K] as for the loss.
 * logp [N, 2] (F32, or F64 for F64 logits) gets, for each row, the sums
 * of log softmax(logits[n, t])[labels[n, t]] over the label tokens of its
 * first document (t - positions[n, t] == 0) and over the rest of the
 * row's label tokens; ignored labels (< 0) count nothing. A label >= K
 * is an error on the CPU and NaN on CUDA, as for the loss.
 */
MG_EXPORT int mg_op_pair_logprob(struct mg_ctx *ctx,
				 const struct mg_tensor *logits,
				 const struct mg_tensor *labels,
				 const struct mg_tensor *positions,
				 struct mg_tensor *logp);
/* dlogits = dlogp[n, d] * (onehot(label) - softmax(logits)) on each label
 * token of document d (0 or 1) of row n, zero rows elsewhere (written).
 * dlogp [N, 2] in logp's dtype. dlogits may alias logits. */
MG_EXPORT int mg_op_pair_logprob_backward(struct mg_ctx *ctx,
					  const struct mg_tensor *logits,
					  const struct mg_tensor *labels,
					  const struct mg_tensor *positions,
					  const struct mg_tensor *dlogp,
					  struct mg_tensor *dlogits);

/* Sums the DPO loss writes after the MG_METRIC_N of model.h. */
enum {
	MG_DPO_REWARD_CHOSEN = 3, /* beta (pi_c - ref_c) */
	MG_DPO_REWARD_REJECTED,	  /* beta (pi_r - ref_r) */
	MG_DPO_MARGIN,		  /* their difference */
	MG_DPO_LOGP_CHOSEN,	  /* pi_c */
	MG_DPO_LOGP_REJECTED,	  /* pi_r */
	MG_DPO_NSUMS,
};

/*
 * The DPO loss of N pairs (Rafailov et al. 2023): logp and ref [N, 2]
 * (F32 or F64, one dtype) hold the policy's and the reference's sequence
 * log-probabilities of (chosen, rejected). With h = (pi_c - ref_c) -
 * (pi_r - ref_r) a pair's loss is -(1 - eps) log sigmoid(beta h) - eps
 * log sigmoid(-beta h) (eps = label_smoothing: 0 the sigmoid loss, > 0
 * the conservative cDPO). Writes (=) metrics [MG_DPO_NSUMS], F32 or F64:
 * the loss sum, the pairs whose chosen reward beats the rejected one,
 * N, then the sums of MG_DPO_*.
 */
MG_EXPORT int mg_op_dpo_loss(struct mg_ctx *ctx, const struct mg_tensor *logp,
			     const struct mg_tensor *ref, double beta,
			     double label_smoothing, struct mg_tensor *metrics);
/* dlogp = d(pair loss) / d logp * scale (written; scale an F32 device
 * scalar such as ctx->grad_scale, or NULL for 1). ref gets none. */
MG_EXPORT int mg_op_dpo_loss_backward(struct mg_ctx *ctx,
				      const struct mg_tensor *logp,
				      const struct mg_tensor *ref, double beta,
				      double label_smoothing,
				      const struct mg_tensor *scale,
				      struct mg_tensor *dlogp);

#ifdef __cplusplus
}
#endif
#endif
