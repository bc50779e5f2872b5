/*
 * activation.c - CPU kernels of the element-wise ops: ReLU6 forward and
 * backward and the residual add (and its backward). Memory-bound loops,
 * parallelised when large enough to pay.
 */
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "activation_impl.h"
#define T double
#define FN(n) n##_f64
#include "activation_impl.h"

int mg_cpu_relu6(struct mg_ctx *ctx, const struct mg_tensor *x,
		 struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(x);
	const int nt = mgo_threads_for(ctx, n);
	if (x->dtype == MG_F32)
		relu6_fwd_f32(x->data, y->data, n, nt);
	else
		relu6_fwd_f64(x->data, y->data, n, nt);
	return 0;
}

int mg_cpu_relu6_backward(struct mg_ctx *ctx, const struct mg_tensor *y,
			  const struct mg_tensor *dy, struct mg_tensor *dx)
{
	const int64_t n = mg_tensor_numel(y);
	const int nt = mgo_threads_for(ctx, n);
	if (y->dtype == MG_F32)
		relu6_bwd_f32(y->data, dy->data, dx->data, n, nt);
	else
		relu6_bwd_f64(y->data, dy->data, dx->data, n, nt);
	return 0;
}

int mg_cpu_add(struct mg_ctx *ctx, const struct mg_tensor *a,
	       const struct mg_tensor *b, struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(a);
	const int nt = mgo_threads_for(ctx, n);
	if (a->dtype == MG_F32)
		add_f32(a->data, b->data, y->data, n, nt);
	else
		add_f64(a->data, b->data, y->data, n, nt);
	return 0;
}

int mg_cpu_add_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
			struct mg_tensor *da, struct mg_tensor *db)
{
	const int64_t n = mg_tensor_numel(dy);
	const int nt = mgo_threads_for(ctx, n);
	struct mg_tensor *g[2] = {da, db};
	for (int k = 0; k < 2; k++) {
		if (!g[k])
			continue;
		if (dy->dtype == MG_F32)
			add_f32(g[k]->data, dy->data, g[k]->data, n, nt);
		else
			add_f64(g[k]->data, dy->data, g[k]->data, n, nt);
	}
	return 0;
}
