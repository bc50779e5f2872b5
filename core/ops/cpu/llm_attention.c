/*
 * llm_attention.c - CPU causal grouped-query attention over packed
 * documents (ops_llm.h; checks in core/ops/llm.c), scores soft-capped
 * when the options say (Gemma 2): the reference the CUDA kernels are
 * tested against. Direct loops, one query (forward, dq) or
 * one key (dk, dv) per OpenMP iteration; backward recomputes the
 * probabilities from the saved log-sum-exp.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_llm.h"
#include "cpu_ops.h"

struct llm_attn_geom {
	int64_t N, S, Hq, Hkv, hd; /* S: sequence length */
	int64_t window;		   /* sliding window, 0: none */
	double cap;		   /* score soft-capping, 0: none */
};

/* A scaled score soft-capped (cap * tanh(s / cap)) when there is a cap;
 * *dcap (when given) the derivative of the cap at s. */
static inline double llm_cap(const struct llm_attn_geom *g, double s,
			     double *dcap)
{
	if (!(g->cap > 0)) {
		if (dcap)
			*dcap = 1;
		return s;
	}
	const double th = tanh(s / g->cap);
	if (dcap)
		*dcap = 1 - th * th;
	return g->cap * th;
}

/* First key query t attends: t - pos, clamped to [0, t], and within the
 * sliding window (t - window + 1) when there is one. */
static inline int64_t llm_lo(const struct llm_attn_geom *g, int64_t t,
			     int32_t pos)
{
	int64_t lo = t - (int64_t)pos;
	lo = lo < 0 ? 0 : (lo > t ? t : lo);
	return g->window > 0 && t - g->window + 1 > lo ? t - g->window + 1 : lo;
}

#define T float
#define FN(n) n##_f32
#include "llm_attention_impl.h"
#define T double
#define FN(n) n##_f64
#include "llm_attention_impl.h"

static struct llm_attn_geom geom(const struct mg_tensor *q,
				 const struct mg_tensor *k,
				 const struct mg_attn_opts *a)
{
	struct llm_attn_geom g = {q->shape[0], q->shape[1], q->shape[2],
				  k->shape[2], q->shape[3], a->window,
				  a->softcap};
	return g;
}

int mg_cpu_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
		     const struct mg_tensor *k, const struct mg_tensor *v,
		     const struct mg_tensor *positions,
		     const struct mg_attn_opts *a, struct mg_tensor *o,
		     struct mg_tensor *lse)
{
	const struct llm_attn_geom g = geom(q, k, a);
	const double scale = a->scale;
	if (mg_tensor_numel(q) == 0)
		return 0;
	const int nt = mgo_threads_for(ctx, g.N * g.Hq * g.S * g.S * g.hd);
	if (q->dtype == MG_F32)
		attn_fwd_f32(&g, q->data, k->data, v->data, positions->data,
			     scale, o->data, lse ? lse->data : NULL, nt);
	else
		attn_fwd_f64(&g, q->data, k->data, v->data, positions->data,
			     scale, o->data, lse ? lse->data : NULL, nt);
	return 0;
}

int mg_cpu_attention_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *a,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv)
{
	const struct llm_attn_geom g = geom(q, k, a);
	const double scale = a->scale;
	if (mg_tensor_numel(q) == 0)
		return 0;
	const int nt = mgo_threads_for(ctx, g.N * g.Hq * g.S * g.S * g.hd);
	struct mgo_scratch sc;
	double *Dt = mgo_scratch_get(ctx, &sc, NULL,
				     (size_t)(g.N * g.Hq * g.S) * sizeof *Dt);
	if (!Dt)
		return -1;
	if (q->dtype == MG_F32)
		attn_bwd_f32(&g, q->data, k->data, v->data, positions->data,
			     scale, o->data, lse->data, dout->data,
			     dq ? dq->data : NULL, dk ? dk->data : NULL,
			     dv ? dv->data : NULL, Dt, nt);
	else
		attn_bwd_f64(&g, q->data, k->data, v->data, positions->data,
			     scale, o->data, lse->data, dout->data,
			     dq ? dq->data : NULL, dk ? dk->data : NULL,
			     dv ? dv->data : NULL, Dt, nt);
	mgo_scratch_done(ctx, &sc);
	return 0;
}
