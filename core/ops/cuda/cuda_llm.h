/*
 * cuda_llm.h - CUDA twins of the LLM ops (include/mg/ops_llm.h), called
 * by core/ops/llm.c after its argument checks with the public ops'
 * arguments. F32, BF16 and F16 (F32 accumulation; saved statistics F32).
 * All work is queued on dev->stream, no host synchronisation.
 */
#ifndef MG_CUDA_LLM_H
#define MG_CUDA_LLM_H

#include <stdbool.h>

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

MG_EXPORT int mg_cuda_embedding(struct mg_ctx *ctx, const struct mg_tensor *ids,
				const struct mg_tensor *table,
				struct mg_tensor *y);
MG_EXPORT int mg_cuda_embedding_backward(struct mg_ctx *ctx,
					 const struct mg_tensor *ids,
					 const struct mg_tensor *dy,
					 struct mg_tensor *dtable);
MG_EXPORT int mg_cuda_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
			      const struct mg_tensor *w, double eps,
			      struct mg_tensor *y, struct mg_tensor *rstd);
MG_EXPORT int mg_cuda_rmsnorm_backward(
	struct mg_ctx *ctx, const struct mg_tensor *x,
	const struct mg_tensor *w, const struct mg_tensor *rstd,
	const struct mg_tensor *dy, struct mg_tensor *dx, struct mg_tensor *dw);
/* sign +1: forward rotation, -1: backward. */
MG_EXPORT int mg_cuda_rope(struct mg_ctx *ctx, struct mg_tensor *x,
			   const struct mg_tensor *positions,
			   const struct mg_tensor *inv_freq, int sign,
			   double scale);
MG_EXPORT int mg_cuda_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
				const struct mg_tensor *k,
				const struct mg_tensor *v,
				const struct mg_tensor *positions,
				const struct mg_attn_opts *opts,
				struct mg_tensor *o, struct mg_tensor *lse);
MG_EXPORT int mg_cuda_attention_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *opts,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv);
/*
 * Tensor-core flash attention (attention_flash.cu), called by the two
 * entry points above when it fits: F16/BF16, head dimension 64 or 128,
 * every tensor 16-byte aligned (t: nt tensors, NULL entries skipped), a
 * finite scale > 0, and MG_CUDA_OPT_ATTN_FLASH on. Same arguments and
 * results as they have.
 */
bool mgc_flash_attention_fits(const struct mg_tensor *q, double scale,
			      const struct mg_tensor *const *t, int nt);
int mgc_flash_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
			const struct mg_tensor *k, const struct mg_tensor *v,
			const struct mg_tensor *positions,
			const struct mg_attn_opts *opts, struct mg_tensor *o,
			struct mg_tensor *lse);
int mgc_flash_attention_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *opts,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv);
/* q [n, Hq, hd] over cache rows 0..pos+t, the window's last ones
 * (llm_decode.cu). */
MG_EXPORT int
mg_cuda_attention_decode(struct mg_ctx *ctx, const struct mg_tensor *q,
			 const struct mg_tensor *k_cache,
			 const struct mg_tensor *v_cache, int64_t pos,
			 const struct mg_attn_opts *opts, struct mg_tensor *o);
MG_EXPORT int mg_cuda_swiglu(struct mg_ctx *ctx, const struct mg_tensor *g,
			     const struct mg_tensor *u, struct mg_tensor *h);
MG_EXPORT int
mg_cuda_swiglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			const struct mg_tensor *u, const struct mg_tensor *dh,
			struct mg_tensor *dg, struct mg_tensor *du);

/* Gemma's element-wise ops (llm_gemma.cu); softcap with dy computes
 * the backward into y, as the CPU's. */
MG_EXPORT int mg_cuda_geglu(struct mg_ctx *ctx, const struct mg_tensor *g,
			    const struct mg_tensor *u, struct mg_tensor *h);
MG_EXPORT int
mg_cuda_geglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
		       const struct mg_tensor *u, const struct mg_tensor *dh,
		       struct mg_tensor *dg, struct mg_tensor *du);
MG_EXPORT int mg_cuda_softcap(struct mg_ctx *ctx, const struct mg_tensor *x,
			      double cap, const struct mg_tensor *dy,
			      struct mg_tensor *y);
MG_EXPORT int mg_cuda_scale_shift(struct mg_ctx *ctx, const struct mg_tensor *x,
				  double a, double b, struct mg_tensor *y);

/* Fused ops (llm_fused.cu). */
MG_EXPORT int mg_cuda_add_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
				  const struct mg_tensor *r,
				  const struct mg_tensor *w, double eps,
				  struct mg_tensor *s, struct mg_tensor *y,
				  struct mg_tensor *rstd);
MG_EXPORT int mg_cuda_rmsnorm_backward_add(
	struct mg_ctx *ctx, const struct mg_tensor *x,
	const struct mg_tensor *w, const struct mg_tensor *rstd,
	const struct mg_tensor *dy, const struct mg_tensor *dres,
	struct mg_tensor *dx, struct mg_tensor *dw);
MG_EXPORT int mg_cuda_linear_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
				  const struct mg_tensor *w,
				  const struct mg_lowrank *lr,
				  const struct mg_tensor *labels,
				  const struct mg_tensor *scale,
				  struct mg_tensor *work,
				  struct mg_tensor *metrics,
				  struct mg_tensor *dx, struct mg_tensor *dw);

#ifdef __cplusplus
}
#endif
#endif
