/*
 * activation.c - the element-wise ops' public entry points: ReLU6 forward
 * and backward and the residual add (forward, and its backward, which
 * passes the gradient to both inputs). Checks, then the device's backend.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

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
	MGO_DISPATCH(op, ctx, mg_cpu_relu6(ctx, x, y),
		     mg_cuda_relu6(ctx, x, y));
}

int mg_op_relu6_backward(struct mg_ctx *ctx, const struct mg_tensor *y,
			 const struct mg_tensor *dy, struct mg_tensor *dx)
{
	static const char op[] = "relu6_backward";
	if (mgo_check_ctx(op, ctx) || ew_pair(op, ctx, "y", y, "dy", dy) ||
	    ew_pair(op, ctx, "y", y, "dx", dx))
		return -1;
	MGO_DISPATCH(op, ctx, mg_cpu_relu6_backward(ctx, y, dy, dx),
		     mg_cuda_relu6_backward(ctx, y, dy, dx));
}

int mg_op_add(struct mg_ctx *ctx, const struct mg_tensor *a,
	      const struct mg_tensor *b, struct mg_tensor *y)
{
	static const char op[] = "add";
	if (mgo_check_ctx(op, ctx) || ew_pair(op, ctx, "a", a, "b", b) ||
	    ew_pair(op, ctx, "a", a, "y", y))
		return -1;
	MGO_DISPATCH(op, ctx, mg_cpu_add(ctx, a, b, y),
		     mg_cuda_add(ctx, a, b, y));
}

int mg_op_add_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
		       struct mg_tensor *da, struct mg_tensor *db)
{
	static const char op[] = "add_backward";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "dy", ctx, dy, -1, -1) ||
	    (da && ew_pair(op, ctx, "dy", dy, "da", da)) ||
	    (db && ew_pair(op, ctx, "dy", dy, "db", db)))
		return -1;
	MGO_DISPATCH(op, ctx, mg_cpu_add_backward(ctx, dy, da, db),
		     mg_cuda_add_backward(ctx, dy, da, db));
}
