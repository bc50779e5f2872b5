/*
 * cpu_llm.h - the CPU reference kernels of the decoder-only transformer's
 * ops (include/mg/ops_llm.h), called by the dispatcher core/ops/llm.c
 * after its argument checks, with the public ops' arguments. F32 and F64.
 */
#ifndef MG_CPU_LLM_H
#define MG_CPU_LLM_H

#include "mg/mg.h"

int mg_cpu_embedding(struct mg_ctx *ctx, const struct mg_tensor *ids,
		     const struct mg_tensor *table, struct mg_tensor *y);
int mg_cpu_embedding_backward(struct mg_ctx *ctx, const struct mg_tensor *ids,
			      const struct mg_tensor *dy,
			      struct mg_tensor *dtable);
int mg_cpu_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
		   const struct mg_tensor *w, double eps, struct mg_tensor *y,
		   struct mg_tensor *rstd);
int mg_cpu_rmsnorm_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			    const struct mg_tensor *w,
			    const struct mg_tensor *rstd,
			    const struct mg_tensor *dy, struct mg_tensor *dx,
			    struct mg_tensor *dw);
/* sign +1: forward rotation, -1: backward. */
int mg_cpu_rope(struct mg_ctx *ctx, struct mg_tensor *x,
		const struct mg_tensor *positions,
		const struct mg_tensor *inv_freq, int sign, double scale);
int mg_cpu_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
		     const struct mg_tensor *k, const struct mg_tensor *v,
		     const struct mg_tensor *positions,
		     const struct mg_attn_opts *a, struct mg_tensor *o,
		     struct mg_tensor *lse);
int mg_cpu_attention_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *a,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv);
/* q [n, Hq, hd] over cache rows 0..pos+t, the window's last ones
 * (llm_decode.c). */
int mg_cpu_attention_decode(struct mg_ctx *ctx, const struct mg_tensor *q,
			    const struct mg_tensor *k_cache,
			    const struct mg_tensor *v_cache, int64_t pos,
			    const struct mg_attn_opts *a, struct mg_tensor *o);
int mg_cpu_swiglu(struct mg_ctx *ctx, const struct mg_tensor *g,
		  const struct mg_tensor *u, struct mg_tensor *h);
int mg_cpu_swiglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			   const struct mg_tensor *u,
			   const struct mg_tensor *dh, struct mg_tensor *dg,
			   struct mg_tensor *du);
/* Gemma's element-wise ops (llm_gemma.c); softcap with dy computes the
 * backward dx = dy (1 - tanh^2(x / cap)) into y. */
int mg_cpu_geglu(struct mg_ctx *ctx, const struct mg_tensor *g,
		 const struct mg_tensor *u, struct mg_tensor *h);
int mg_cpu_geglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			  const struct mg_tensor *u, const struct mg_tensor *dh,
			  struct mg_tensor *dg, struct mg_tensor *du);
int mg_cpu_softcap(struct mg_ctx *ctx, const struct mg_tensor *x, double cap,
		   const struct mg_tensor *dy, struct mg_tensor *y);
int mg_cpu_scale_shift(struct mg_ctx *ctx, const struct mg_tensor *x, double a,
		       double b, struct mg_tensor *y);
/* Fused ops (llm_fused.c): the same results as the unfused ones. */
int mg_cpu_add_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
		       const struct mg_tensor *r, const struct mg_tensor *w,
		       double eps, struct mg_tensor *s, struct mg_tensor *y,
		       struct mg_tensor *rstd);
int mg_cpu_rmsnorm_backward_add(struct mg_ctx *ctx, const struct mg_tensor *x,
				const struct mg_tensor *w,
				const struct mg_tensor *rstd,
				const struct mg_tensor *dy,
				const struct mg_tensor *dres,
				struct mg_tensor *dx, struct mg_tensor *dw);
int mg_cpu_linear_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
		       const struct mg_tensor *w, const struct mg_lowrank *lr,
		       const struct mg_tensor *labels,
		       const struct mg_tensor *scale, struct mg_tensor *work,
		       struct mg_tensor *metrics, struct mg_tensor *dx,
		       struct mg_tensor *dw);

#endif
