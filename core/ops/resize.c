/*
 * resize.c - mg_op_resize_normalize_u8 (bilinear resize of 8-bit images,
 * then /255 and (x - mean) / std): checks the arguments and dispatches on
 * the context's device; the CPU backend is the reference.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "mg/ctx.h"
#include "mg/log.h"
#include "mg/ops_image.h"
#include "mg/tensor.h"
#include "ops/cpu/cpu_ops.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

#define OP "mg_op_resize_normalize_u8"

static int check_shape(const struct mg_tensor *t, const char *what)
{
	if (t->ndim != 4)
		return mg_error(OP ": %s must have 4 dims [n, c, h, w], got %d",
				what, t->ndim);
	for (int i = 0; i < 4; i++) {
		/* Bounded so that products of dims cannot overflow. */
		if (t->shape[i] < 0 || t->shape[i] > INT32_MAX)
			return mg_error(OP ": %s dim %d is %lld, outside "
					   "[0, %d]",
					what, i, (long long)t->shape[i],
					INT32_MAX);
	}
	return 0;
}

int mg_op_resize_normalize_u8(struct mg_ctx *ctx, const struct mg_tensor *src,
			      struct mg_tensor *dst, float mean, float std)
{
	if (!ctx || !ctx->dev)
		return mg_error(OP ": no context or device");
	if (!src || !dst)
		return mg_error(OP ": NULL tensor");
	if (src->dtype != MG_U8)
		return mg_error(OP ": src dtype is %s, expected u8",
				mg_dtype_name(src->dtype));
	bool half = dst->dtype == MG_F16 || dst->dtype == MG_BF16;
	if (dst->dtype != MG_F32 && dst->dtype != MG_F64 &&
	    !(half && ctx->dev->kind == MG_DEV_CUDA))
		return mg_error(OP ": dst dtype is %s, expected f32 or f64%s",
				mg_dtype_name(dst->dtype),
				half ? " (f16/bf16 on CUDA)" : "");
	if (check_shape(src, "src") || check_shape(dst, "dst"))
		return -1;
	if (src->shape[0] != dst->shape[0] || src->shape[1] != dst->shape[1])
		return mg_error(
			OP ": src [%lld, %lld, ...] and dst [%lld, "
			   "%lld, ...] differ in batch or channels",
			(long long)src->shape[0], (long long)src->shape[1],
			(long long)dst->shape[0], (long long)dst->shape[1]);
	const int64_t planes = src->shape[0] * src->shape[1];
	if (planes > 0 && dst->shape[2] * dst->shape[3] > 0 &&
	    src->shape[2] * src->shape[3] == 0)
		return mg_error(
			OP ": src images are empty (%lld x %lld) but "
			   "dst is %lld x %lld",
			(long long)src->shape[2], (long long)src->shape[3],
			(long long)dst->shape[2], (long long)dst->shape[3]);
	if (mg_tensor_numel(src) > 0 && !src->data)
		return mg_error(OP ": src has no data");
	if (mg_tensor_numel(dst) > 0 && !dst->data)
		return mg_error(OP ": dst has no data");
	if (!isfinite(mean) || !isfinite(std) || std == 0.0f)
		return mg_error(OP ": mean %g and std %g must be finite, std "
				   "non-zero",
				(double)mean, (double)std);
	if (src->device != ctx->dev->kind || dst->device != ctx->dev->kind)
		return mg_error(OP ": tensors must be on the context's device");

	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_resize_normalize_u8(ctx, src, dst, mean, std);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_resize_normalize_u8(ctx, src, dst, mean, std);
#endif
	default:
		return mg_error(OP ": no implementation for device kind %d in "
				   "this build",
				(int)ctx->dev->kind);
	}
}
