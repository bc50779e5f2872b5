/*
 * scalar.c - device scalar ops the trainer needs between collectives
 * (dispatcher: checks, then the CPU or CUDA twin).
 */
#include "runtime/runtime.h"

int mg_cpu_reciprocal_scale(const float *x, double s, float *y);
#ifdef MG_HAVE_CUDA
int mg_cuda_reciprocal_scale(struct mg_ctx *ctx, const float *x, double s,
			     float *y);
#endif

int mg_op_reciprocal_scale(struct mg_ctx *ctx, const struct mg_tensor *x,
			   double s, struct mg_tensor *y)
{
	if (!ctx || !ctx->dev || !x || !y || !x->data || !y->data ||
	    x->dtype != MG_F32 || y->dtype != MG_F32 ||
	    mg_tensor_numel(x) != 1 || mg_tensor_numel(y) != 1)
		return mg_error("reciprocal_scale: x and y must be F32 scalars "
				"on the context's device");
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_reciprocal_scale(x->data, s, y->data);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_reciprocal_scale(ctx, x->data, s, y->data);
#endif
	default:
		return mg_error("reciprocal_scale: no implementation for this "
				"device");
	}
}
