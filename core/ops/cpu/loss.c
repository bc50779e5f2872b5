/*
 * loss.c - CPU softmax cross-entropy with integer labels: the forward writes
 * the step's metrics (loss sum, correct, count; model.h) and the backward
 * seeds backpropagation with (softmax - onehot) * scale, where scale is
 * the F32 device scalar ctx->grad_scale (loss scale / global count). Rows
 * with negative labels are ignored (padding tokens).
 */
#include <math.h>

#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "loss_impl.h"
#define T double
#define FN(n) n##_f64
#include "loss_impl.h"

/* CPU: every label must be below K (the CUDA twin cannot report it
 * without a host sync; its loss turns NaN instead). */
static int xent_labels(const char *op, const struct mg_tensor *labels,
		       int64_t rows, int64_t K)
{
	const int32_t *lab = labels->data;
	for (int64_t r = 0; r < rows; r++)
		if (lab[r] >= K)
			return mg_error("%s: label %d of row %lld is not below "
					"the %lld classes",
					op, lab[r], (long long)r, (long long)K);
	return 0;
}

/* Rows and classes K of the checked logits [rows..., K]. */
static void xent_sizes(const struct mg_tensor *logits, int64_t *rows,
		       int64_t *K)
{
	*K = logits->shape[logits->ndim - 1];
	*rows = mg_tensor_numel(logits) / *K;
}

int mg_cpu_softmax_xent(struct mg_ctx *ctx, const struct mg_tensor *logits,
			const struct mg_tensor *labels,
			struct mg_tensor *metrics)
{
	static const char op[] = "softmax_xent";
	int64_t rows, K;
	xent_sizes(logits, &rows, &K);
	if (xent_labels(op, labels, rows, K))
		return -1;
	double m[3];
	const int nt = mgo_threads_for(ctx, rows * K * 4);
	if (logits->dtype == MG_F32)
		xent_fwd_f32(logits->data, labels->data, rows, K, m, nt);
	else
		xent_fwd_f64(logits->data, labels->data, rows, K, m, nt);
	mgo_set(metrics, MG_METRIC_LOSS_SUM, m[0]);
	mgo_set(metrics, MG_METRIC_CORRECT, m[1]);
	mgo_set(metrics, MG_METRIC_COUNT, m[2]);
	return 0;
}

int mg_cpu_softmax_xent_backward(struct mg_ctx *ctx,
				 const struct mg_tensor *logits,
				 const struct mg_tensor *labels,
				 const struct mg_tensor *scale,
				 struct mg_tensor *dlogits)
{
	static const char op[] = "softmax_xent_backward";
	int64_t rows, K;
	xent_sizes(logits, &rows, &K);
	if (xent_labels(op, labels, rows, K))
		return -1;
	const double s = scale ? (double)*(const float *)scale->data : 1.0;
	const int nt = mgo_threads_for(ctx, rows * K * 4);
	if (logits->dtype == MG_F32)
		xent_bwd_f32(logits->data, labels->data, rows, K, s,
			     dlogits->data, nt);
	else
		xent_bwd_f64(logits->data, labels->data, rows, K, s,
			     dlogits->data, nt);
	return 0;
}
