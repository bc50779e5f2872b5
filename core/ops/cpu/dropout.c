/*
 * dropout.c - CPU dropout whose mask is a pure function of (key, step,
 * global element index) through the counter-based generator of rng.h:
 * nothing is stored between forward and backward (the backward
 * regenerates the mask), and splitting a batch over ranks draws the same
 * mask one rank would.
 */
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "dropout_impl.h"
#define T double
#define FN(n) n##_f64
#include "dropout_impl.h"

/* Forward and backward are the same masked scale. */
static int dropout_apply(struct mg_ctx *ctx, const struct mg_tensor *in,
			 struct mg_tensor *out, double p, uint64_t key,
			 int64_t offset)
{
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

int mg_cpu_dropout(struct mg_ctx *ctx, const struct mg_tensor *x,
		   struct mg_tensor *y, double p, uint64_t key, int64_t offset)
{
	return dropout_apply(ctx, x, y, p, key, offset);
}

int mg_cpu_dropout_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
			    struct mg_tensor *dx, double p, uint64_t key,
			    int64_t offset)
{
	return dropout_apply(ctx, dy, dx, p, key, offset);
}
