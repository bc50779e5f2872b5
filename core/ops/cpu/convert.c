/*
 * convert.c - the CPU backend of mg_op_convert between F32, F64, F16 and
 * BF16 (round to nearest even, with the runtime's scalar conversions,
 * runtime/half.c): the twin of the CUDA conversion kernels and the
 * oracle GPU tests use for half-precision results.
 */
#include <math.h>
#include <string.h>

#include "runtime/runtime.h"

#include "cpu_ops.h"

static double load(const void *p, enum mg_dtype t, int64_t i)
{
	switch (t) {
	case MG_F32:
		return ((const float *)p)[i];
	case MG_F64:
		return ((const double *)p)[i];
	case MG_F16:
		return mg_half_to_float(((const uint16_t *)p)[i]);
	default:
		return mg_bf16_to_float(((const uint16_t *)p)[i]);
	}
}

static void store(void *p, enum mg_dtype t, int64_t i, double v)
{
	switch (t) {
	case MG_F32:
		((float *)p)[i] = (float)v;
		break;
	case MG_F64:
		((double *)p)[i] = v;
		break;
	case MG_F16:
		((uint16_t *)p)[i] = mg_float_to_half((float)v);
		break;
	default:
		((uint16_t *)p)[i] = mg_float_to_bf16((float)v);
		break;
	}
}

int mg_cpu_convert(struct mg_ctx *ctx, void *dst, enum mg_dtype dt,
		   const void *src, enum mg_dtype st, int64_t n)
{
	(void)ctx;
	if (dt == st) {
		memcpy(dst, src, (size_t)n * mg_dtype_size(dt));
		return 0;
	}
	/* F64 -> F16/BF16 rounds twice (via F32), as the GPU kernel does. */
#pragma omp parallel for schedule(static) if (n > 65536)
	for (int64_t i = 0; i < n; i++)
		store(dst, dt, i, load(src, st, i));
	return 0;
}
