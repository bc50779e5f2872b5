/*
 * loss.c - the public softmax cross-entropy ops with integer labels:
 * checks, then the device's backend. The forward writes the step's
 * metrics (loss sum, correct, count; model.h), the backward seeds
 * backpropagation with (softmax - onehot) * scale.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

/* Validate logits/labels (descriptors only); rows and classes K. */
static int xent_check(const char *op, struct mg_ctx *ctx,
		      const struct mg_tensor *logits,
		      const struct mg_tensor *labels, int64_t *rows, int64_t *K)
{
	if (mgo_check_ctx(op, ctx) ||
	    mgo_check(op, "logits", ctx, logits, -1, -1) ||
	    mgo_check(op, "labels", ctx, labels, MG_I32, -1))
		return -1;
	if (logits->ndim < 1 || logits->shape[logits->ndim - 1] < 1)
		return mg_error("%s: logits need a class dimension", op);
	*K = logits->shape[logits->ndim - 1];
	*rows = mg_tensor_numel(logits) / *K;
	if (mg_tensor_numel(labels) != *rows) {
		char sl[96], sb[96];
		return mg_error(
			"%s: %lld label(s) %s for %lld row(s) of logits "
			"%s",
			op, (long long)mg_tensor_numel(labels),
			mgo_shape_str(labels, sb, sizeof sb), (long long)*rows,
			mgo_shape_str(logits, sl, sizeof sl));
	}
	return 0;
}

int mg_op_softmax_xent(struct mg_ctx *ctx, const struct mg_tensor *logits,
		       const struct mg_tensor *labels,
		       struct mg_tensor *metrics)
{
	static const char op[] = "softmax_xent";
	int64_t rows, K;
	if (xent_check(op, ctx, logits, labels, &rows, &K) ||
	    mgo_check(op, "metrics", ctx, metrics, -1, -1))
		return -1;
	if (mg_tensor_numel(metrics) < MG_METRIC_N)
		return mg_error("%s: metrics hold %lld values, need %d", op,
				(long long)mg_tensor_numel(metrics),
				MG_METRIC_N);
	MGO_DISPATCH(op, ctx, mg_cpu_softmax_xent(ctx, logits, labels, metrics),
		     mg_cuda_softmax_xent(ctx, logits, labels, metrics));
}

int mg_op_softmax_xent_backward(struct mg_ctx *ctx,
				const struct mg_tensor *logits,
				const struct mg_tensor *labels,
				const struct mg_tensor *scale,
				struct mg_tensor *dlogits)
{
	static const char op[] = "softmax_xent_backward";
	int64_t rows, K;
	if (xent_check(op, ctx, logits, labels, &rows, &K) ||
	    mgo_check(op, "dlogits", ctx, dlogits, logits->dtype, -1) ||
	    mgo_same_shape(op, "dlogits", dlogits, "logits", logits) ||
	    mgo_check_opt(op, "scale", ctx, scale, MG_F32, -1))
		return -1;
	if (scale && mg_tensor_numel(scale) != 1)
		return mg_error("%s: scale must be one value, has %lld", op,
				(long long)mg_tensor_numel(scale));
	MGO_DISPATCH(op, ctx,
		     mg_cpu_softmax_xent_backward(ctx, logits, labels, scale,
						  dlogits),
		     mg_cuda_softmax_xent_backward(ctx, logits, labels, scale,
						   dlogits));
}
