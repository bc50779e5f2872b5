/*
 * dropout.c - the public dropout ops: checks, then the device's backend.
 * The mask is a pure function of (key, step, global element index), so
 * the backward regenerates it and nothing is stored in between.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

/* Forward and backward are the same masked scale: one body, bwd selects
 * the name in errors and the backend function. */
static int dropout_run(bool bwd, struct mg_ctx *ctx, const struct mg_tensor *in,
		       struct mg_tensor *out, double p, uint64_t key,
		       int64_t offset)
{
	const char *op = bwd ? "dropout_backward" : "dropout";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "input", ctx, in, -1, -1) ||
	    mgo_check(op, "output", ctx, out, in->dtype, -1))
		return -1;
	if (mg_tensor_numel(in) != mg_tensor_numel(out))
		return mgo_same_shape(op, "input", in, "output", out);
	if (!(p >= 0 && p <= 1))
		return mg_error("%s: probability %g outside [0, 1]", op, p);
	if (offset < 0)
		return mg_error("%s: negative element offset %lld", op,
				(long long)offset);
	MGO_DISPATCH(
		op, ctx,
		bwd ? mg_cpu_dropout_backward(ctx, in, out, p, key, offset)
		    : mg_cpu_dropout(ctx, in, out, p, key, offset),
		bwd ? mg_cuda_dropout_backward(ctx, in, out, p, key, offset)
		    : mg_cuda_dropout(ctx, in, out, p, key, offset));
}

int mg_op_dropout(struct mg_ctx *ctx, const struct mg_tensor *x,
		  struct mg_tensor *y, double p, uint64_t key, int64_t offset)
{
	return dropout_run(false, ctx, x, y, p, key, offset);
}

int mg_op_dropout_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
			   struct mg_tensor *dx, double p, uint64_t key,
			   int64_t offset)
{
	return dropout_run(true, ctx, dy, dx, p, key, offset);
}
