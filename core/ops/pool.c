/*
 * pool.c - the public global average pooling ops [N, C, H, W] -> [N, C]
 * and back: checks, then the device's backend.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

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
	MGO_DISPATCH(op, ctx, mg_cpu_global_avgpool(ctx, x, y),
		     mg_cuda_global_avgpool(ctx, x, y));
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
	MGO_DISPATCH(op, ctx, mg_cpu_global_avgpool_backward(ctx, dy, dx),
		     mg_cuda_global_avgpool_backward(ctx, dy, dx));
}
