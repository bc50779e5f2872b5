/*
 * scalar.c - device scalar ops the trainer needs between collectives:
 * checks, then the device's backend.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

int mg_op_reciprocal_scale(struct mg_ctx *ctx, const struct mg_tensor *x,
			   double s, struct mg_tensor *y)
{
	static const char op[] = "reciprocal_scale";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "x", ctx, x, MG_F32, -1) ||
	    mgo_check(op, "y", ctx, y, MG_F32, -1))
		return -1;
	if (mg_tensor_numel(x) != 1 || mg_tensor_numel(y) != 1)
		return mg_error("%s: x and y must be scalars", op);
	MGO_DISPATCH(op, ctx, mg_cpu_reciprocal_scale(x->data, s, y->data),
		     mg_cuda_reciprocal_scale(ctx, x->data, s, y->data));
}
