/*
 * pool.c - global average pooling [N, C, H, W] -> [N, C] and its backward
 * (the gradient spread evenly over each plane): MobileNetV2's head.
 */
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "pool_impl.h"
#define T double
#define FN(n) n##_f64
#include "pool_impl.h"

/* x is [N, C, H, W]; y is [N, C] or [N, C, 1, 1]. */
static int gap_shapes(const char *op, const char *yn, const struct mg_tensor *x,
		      const struct mg_tensor *y)
{
	bool ok = (y->ndim == 2 ||
		   (y->ndim == 4 && y->shape[2] == 1 && y->shape[3] == 1)) &&
		  y->shape[0] == x->shape[0] && y->shape[1] == x->shape[1];
	if (!ok) {
		char sx[96], sy[96];
		return mg_error("%s: %s is %s, expected [%lld, %lld] for input "
				"%s",
				op, yn, mgo_shape_str(y, sy, sizeof sy),
				(long long)x->shape[0], (long long)x->shape[1],
				mgo_shape_str(x, sx, sizeof sx));
	}
	if (x->shape[2] * x->shape[3] == 0)
		return mg_error("%s: empty spatial extent", op);
	return 0;
}

int mg_op_global_avgpool(struct mg_ctx *ctx, const struct mg_tensor *x,
			 struct mg_tensor *y)
{
	static const char op[] = "global_avgpool";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "x", ctx, x, -1, 4) ||
	    mgo_check(op, "y", ctx, y, x->dtype, -1) ||
	    gap_shapes(op, "y", x, y))
		return -1;
	MGO_CUDA(ctx, mg_cuda_global_avgpool(ctx, x, y));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int64_t planes = x->shape[0] * x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	const int nt = mgo_threads_for(ctx, planes * HW);
	if (x->dtype == MG_F32)
		gap_fwd_f32(x->data, y->data, planes, HW, nt);
	else
		gap_fwd_f64(x->data, y->data, planes, HW, nt);
	return 0;
}

int mg_op_global_avgpool_backward(struct mg_ctx *ctx,
				  const struct mg_tensor *dy,
				  struct mg_tensor *dx)
{
	static const char op[] = "global_avgpool_backward";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "dx", ctx, dx, -1, 4) ||
	    mgo_check(op, "dy", ctx, dy, dx->dtype, -1) ||
	    gap_shapes(op, "dy", dx, dy))
		return -1;
	MGO_CUDA(ctx, mg_cuda_global_avgpool_backward(ctx, dy, dx));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int64_t planes = dx->shape[0] * dx->shape[1],
		      HW = dx->shape[2] * dx->shape[3];
	const int nt = mgo_threads_for(ctx, planes * HW);
	if (dx->dtype == MG_F32)
		gap_bwd_f32(dy->data, dx->data, planes, HW, nt);
	else
		gap_bwd_f64(dy->data, dx->data, planes, HW, nt);
	return 0;
}
