/*
 * llm_pointwise.c - CPU kernels of the LLM ops that work row by row or
 * element by element: token embedding, RMSNorm, rotary position
 * embedding, SwiGLU (ops_llm.h; checks in core/ops/llm.c).
 */
#include <math.h>
#include <string.h>

#include "cpu_llm.h"
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "llm_pointwise_impl.h"
#define T double
#define FN(n) n##_f64
#include "llm_pointwise_impl.h"

/* Rows of a [..., D] tensor. */
static int64_t rows_of(const struct mg_tensor *t)
{
	const int64_t D = t->ndim ? t->shape[t->ndim - 1] : 1;
	return D ? mg_tensor_numel(t) / D : 0;
}

static int ids_in_range(const char *op, const struct mg_tensor *ids, int64_t V)
{
	const int32_t *id = ids->data;
	const int64_t R = mg_tensor_numel(ids);
	for (int64_t r = 0; r < R; r++)
		if (id[r] < 0 || id[r] >= V)
			return mg_error("%s: ids[%lld] = %d is outside the "
					"table's [0, %lld)",
					op, (long long)r, (int)id[r],
					(long long)V);
	return 0;
}

int mg_cpu_embedding(struct mg_ctx *ctx, const struct mg_tensor *ids,
		     const struct mg_tensor *table, struct mg_tensor *y)
{
	const int64_t V = table->shape[0], D = table->shape[1];
	const int64_t R = mg_tensor_numel(ids);
	if (ids_in_range("embedding", ids, V))
		return -1;
	const int nt = mgo_threads_for(ctx, R * D);
	if (table->dtype == MG_F32)
		embed_fwd_f32(ids->data, table->data, y->data, R, D, nt);
	else
		embed_fwd_f64(ids->data, table->data, y->data, R, D, nt);
	return 0;
}

int mg_cpu_embedding_backward(struct mg_ctx *ctx, const struct mg_tensor *ids,
			      const struct mg_tensor *dy,
			      struct mg_tensor *dtable)
{
	const int64_t V = dtable->shape[0], D = dtable->shape[1];
	const int64_t R = mg_tensor_numel(ids);
	if (ids_in_range("embedding_backward", ids, V))
		return -1;
	const int nt = mgo_threads_for(ctx, R * D);
	if (dy->dtype == MG_F32)
		embed_bwd_f32(ids->data, dy->data, dtable->data, R, D, nt);
	else
		embed_bwd_f64(ids->data, dy->data, dtable->data, R, D, nt);
	return 0;
}

int mg_cpu_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
		   const struct mg_tensor *w, double eps, struct mg_tensor *y,
		   struct mg_tensor *rstd)
{
	const int64_t R = rows_of(x), D = x->shape[x->ndim - 1];
	const int nt = mgo_threads_for(ctx, R * D);
	const bool wf32 = w->dtype != x->dtype;
	if (x->dtype == MG_F32)
		rms_fwd_f32(x->data, w->data, false, eps, y->data,
			    rstd ? rstd->data : NULL, R, D, nt);
	else
		rms_fwd_f64(x->data, w->data, wf32, eps, y->data,
			    rstd ? rstd->data : NULL, R, D, nt);
	return 0;
}

int mg_cpu_rmsnorm_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			    const struct mg_tensor *w,
			    const struct mg_tensor *rstd,
			    const struct mg_tensor *dy, struct mg_tensor *dx,
			    struct mg_tensor *dw)
{
	const int64_t R = rows_of(x), D = x->shape[x->ndim - 1];
	const int nt = mgo_threads_for(ctx, R * D);
	const bool wf32 = w->dtype != x->dtype;
	if (x->dtype == MG_F32)
		rms_bwd_f32(x->data, w->data, false, rstd->data, dy->data,
			    dx ? dx->data : NULL, dw ? dw->data : NULL, R, D,
			    nt);
	else
		rms_bwd_f64(x->data, w->data, wf32, rstd->data, dy->data,
			    dx ? dx->data : NULL, dw ? dw->data : NULL, R, D,
			    nt);
	return 0;
}

int mg_cpu_rope(struct mg_ctx *ctx, struct mg_tensor *x,
		const struct mg_tensor *positions,
		const struct mg_tensor *inv_freq, int sign, double scale)
{
	const int64_t NT = x->shape[0] * x->shape[1], H = x->shape[2],
		      hd = x->shape[3];
	const int nt = mgo_threads_for(ctx, mg_tensor_numel(x));
	const int64_t h2 = inv_freq->shape[0]; /* rotary pairs a head */
	if (x->dtype == MG_F32)
		rope_f32(x->data, positions->data, inv_freq->data, sign,
			 (float)scale, NT, H, hd, h2, nt);
	else
		rope_f64(x->data, positions->data, inv_freq->data, sign,
			 (float)scale, NT, H, hd, h2, nt);
	return 0;
}

int mg_cpu_swiglu(struct mg_ctx *ctx, const struct mg_tensor *g,
		  const struct mg_tensor *u, struct mg_tensor *h)
{
	const int64_t n = mg_tensor_numel(g);
	const int nt = mgo_threads_for(ctx, n);
	if (g->dtype == MG_F32)
		swiglu_fwd_f32(g->data, u->data, h->data, n, nt);
	else
		swiglu_fwd_f64(g->data, u->data, h->data, n, nt);
	return 0;
}

int mg_cpu_swiglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			   const struct mg_tensor *u,
			   const struct mg_tensor *dh, struct mg_tensor *dg,
			   struct mg_tensor *du)
{
	const int64_t n = mg_tensor_numel(g);
	const int nt = mgo_threads_for(ctx, n);
	if (g->dtype == MG_F32)
		swiglu_bwd_f32(g->data, u->data, dh->data, dg ? dg->data : NULL,
			       du ? du->data : NULL, n, nt);
	else
		swiglu_bwd_f64(g->data, u->data, dh->data, dg ? dg->data : NULL,
			       du ? du->data : NULL, n, nt);
	return 0;
}
