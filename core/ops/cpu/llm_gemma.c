/*
 * llm_gemma.c - CPU reference of Gemma's element-wise ops (ops_llm.h,
 * ABI 1.13; checks in core/ops/gemma.c): the tanh-GELU gate, logit
 * soft-capping and y = a x + b. Arithmetic in double, one element per
 * iteration, so the CUDA twins are tested against these.
 */
#include <math.h>

#include "cpu_llm.h"
#include "cpu_ops.h"

#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */

/* gelu_tanh(x) and its derivative. */
static double gelu_t(double x, double *d)
{
	const double x2 = x * x, in = GELU_C * (x + 0.044715 * x2 * x);
	const double th = tanh(in);
	if (d)
		*d = 0.5 * (1 + th) +
		     0.5 * x * (1 - th * th) * GELU_C * (1 + 3 * 0.044715 * x2);
	return 0.5 * x * (1 + th);
}

/* Element i of an F32 or F64 tensor as a double, and back. */
static inline double ld(const struct mg_tensor *t, int64_t i)
{
	return t->dtype == MG_F32 ? (double)((const float *)t->data)[i]
				  : ((const double *)t->data)[i];
}

static inline void st(const struct mg_tensor *t, int64_t i, double v)
{
	if (t->dtype == MG_F32)
		((float *)t->data)[i] = (float)v;
	else
		((double *)t->data)[i] = v;
}

int mg_cpu_geglu(struct mg_ctx *ctx, const struct mg_tensor *g,
		 const struct mg_tensor *u, struct mg_tensor *h)
{
	const int64_t n = mg_tensor_numel(g);
	const int nt = mgo_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		st(h, i, gelu_t(ld(g, i), NULL) * ld(u, i));
	return 0;
}

/* dg = dh u gelu'(g), du = dh gelu(g); dg or du may alias dh (each
 * element read before it is written). */
int mg_cpu_geglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			  const struct mg_tensor *u, const struct mg_tensor *dh,
			  struct mg_tensor *dg, struct mg_tensor *du)
{
	const int64_t n = mg_tensor_numel(g);
	const int nt = mgo_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		double d1;
		const double gl = gelu_t(ld(g, i), &d1), dv = ld(dh, i),
			     uv = ld(u, i);
		if (dg)
			st(dg, i, dv * uv * d1);
		if (du)
			st(du, i, dv * gl);
	}
	return 0;
}

/* dy NULL: y = cap tanh(x / cap); else y = dy (1 - tanh^2(x / cap)). */
int mg_cpu_softcap(struct mg_ctx *ctx, const struct mg_tensor *x, double cap,
		   const struct mg_tensor *dy, struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(x);
	const int nt = mgo_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const double th = tanh(ld(x, i) / cap);
		st(y, i, dy ? ld(dy, i) * (1 - th * th) : cap * th);
	}
	return 0;
}

int mg_cpu_scale_shift(struct mg_ctx *ctx, const struct mg_tensor *x, double a,
		       double b, struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(x);
	const int nt = mgo_threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		st(y, i, a * ld(x, i) + b);
	return 0;
}
