/*
 * activation.c - element-wise ops: ReLU6 forward/backward and the residual
 * add (forward, and its backward, which passes the gradient to both
 * inputs). Memory-bound loops, parallelised when large enough to pay.
 */
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "activation_impl.h"
#define T double
#define FN(n) n##_f64
#include "activation_impl.h"

/* Two tensors of one float dtype with equal numel (shapes may differ:
 * these ops are element-wise). */
static int ew_pair(const char *op, struct mg_ctx *ctx, const char *an,
		   const struct mg_tensor *a, const char *bn,
		   const struct mg_tensor *b)
{
	if (mgo_check(op, an, ctx, a, -1, -1) ||
	    mgo_check(op, bn, ctx, b, a->dtype, -1))
		return -1;
	if (mg_tensor_numel(a) != mg_tensor_numel(b))
		return mgo_same_shape(op, an, a, bn, b);
	return 0;
}

int mg_op_relu6(struct mg_ctx *ctx, const struct mg_tensor *x,
		struct mg_tensor *y)
{
	static const char op[] = "relu6";
	if (mgo_check_ctx(op, ctx) || ew_pair(op, ctx, "x", x, "y", y))
		return -1;
	MGO_CUDA(ctx, mg_cuda_relu6(ctx, x, y));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int64_t n = mg_tensor_numel(x);
	const int nt = mgo_threads_for(ctx, n);
	if (x->dtype == MG_F32)
		relu6_fwd_f32(x->data, y->data, n, nt);
	else
		relu6_fwd_f64(x->data, y->data, n, nt);
	return 0;
}

int mg_op_relu6_backward(struct mg_ctx *ctx, const struct mg_tensor *y,
			 const struct mg_tensor *dy, struct mg_tensor *dx)
{
	static const char op[] = "relu6_backward";
	if (mgo_check_ctx(op, ctx) || ew_pair(op, ctx, "y", y, "dy", dy) ||
	    ew_pair(op, ctx, "y", y, "dx", dx))
		return -1;
	MGO_CUDA(ctx, mg_cuda_relu6_backward(ctx, y, dy, dx));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int64_t n = mg_tensor_numel(y);
	const int nt = mgo_threads_for(ctx, n);
	if (y->dtype == MG_F32)
		relu6_bwd_f32(y->data, dy->data, dx->data, n, nt);
	else
		relu6_bwd_f64(y->data, dy->data, dx->data, n, nt);
	return 0;
}

int mg_op_add(struct mg_ctx *ctx, const struct mg_tensor *a,
	      const struct mg_tensor *b, struct mg_tensor *y)
{
	static const char op[] = "add";
	if (mgo_check_ctx(op, ctx) || ew_pair(op, ctx, "a", a, "b", b) ||
	    ew_pair(op, ctx, "a", a, "y", y))
		return -1;
	MGO_CUDA(ctx, mg_cuda_add(ctx, a, b, y));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int64_t n = mg_tensor_numel(a);
	const int nt = mgo_threads_for(ctx, n);
	if (a->dtype == MG_F32)
		add_f32(a->data, b->data, y->data, n, nt);
	else
		add_f64(a->data, b->data, y->data, n, nt);
	return 0;
}

int mg_op_add_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
		       struct mg_tensor *da, struct mg_tensor *db)
{
	static const char op[] = "add_backward";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "dy", ctx, dy, -1, -1) ||
	    (da && ew_pair(op, ctx, "dy", dy, "da", da)) ||
	    (db && ew_pair(op, ctx, "dy", dy, "db", db)))
		return -1;
	MGO_CUDA(ctx, mg_cuda_add_backward(ctx, dy, da, db));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
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
