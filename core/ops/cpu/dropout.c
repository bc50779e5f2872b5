/*
 * dropout.c - dropout whose mask is a pure function of (key, step, global
 * element index) through the counter-based generator of rng.h: nothing is stored
 * between forward and backward (the backward regenerates the mask), and
 * splitting a batch over ranks draws the same mask one rank would.
 */
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "dropout_impl.h"
#define T double
#define FN(n) n##_f64
#include "dropout_impl.h"

/* Forward and backward are the same masked scale: one body, bwd selects
 * the name in errors and the CUDA twin. */
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
	MGO_CUDA(ctx,
		 bwd ? mg_cuda_dropout_backward(ctx, in, out, p, key, offset)
		     : mg_cuda_dropout(ctx, in, out, p, key, offset));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int64_t n = mg_tensor_numel(in);
	/* A fresh mask every step (the CUDA twin reads the step from device
	 * memory: see ops_nn.h). */
	key = mg_rng_key(key, (uint64_t)ctx->step);
	/* Hashing costs about ten element-wise ops per element. */
	const int nt = mgo_threads_for(ctx, n * 10);
	if (in->dtype == MG_F32)
		dropout_apply_f32(in->data, out->data, n, p, key, offset, nt);
	else
		dropout_apply_f64(in->data, out->data, n, p, key, offset, nt);
	return 0;
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
