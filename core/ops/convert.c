/*
 * convert.c - mg_op_convert, n elements between float dtypes (F32, F64,
 * F16, BF16): checks, then the CUDA backend on a CUDA context, else the
 * CPU one (which also holds the scalar conversions).
 */
#include "ops/cpu/cpu_ops.h"
#include "runtime/runtime.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_optim.h"
#endif

static bool is_float(enum mg_dtype t)
{
	return t == MG_F32 || t == MG_F64 || t == MG_F16 || t == MG_BF16;
}

int mg_op_convert(struct mg_ctx *ctx, void *dst, enum mg_dtype dt,
		  const void *src, enum mg_dtype st, int64_t n)
{
	if (!is_float(dt) || !is_float(st))
		return mg_error("convert: %s -> %s is not a float conversion",
				mg_dtype_name(st), mg_dtype_name(dt));
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_convert(ctx, dst, dt, src, st, n);
#endif
	return mg_cpu_convert(ctx, dst, dt, src, st, n);
}
