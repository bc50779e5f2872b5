/*
 * convert.c - float dtype conversions (F32, F64, F16, BF16) with
 * round-to-nearest-even: the public scalar conversions and the CPU
 * backend of mg_op_convert, the twin of the CUDA conversion kernels and
 * the oracle GPU tests use for half-precision results.
 */
#include <math.h>
#include <string.h>

#include "runtime/runtime.h"

#include "cpu_ops.h"

float mg_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	int exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff, bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (mant << 13); /* inf / nan */
	} else if (exp == 0) {
		if (mant == 0) {
			bits = sign;
		} else { /* subnormal: normalise */
			float f = ldexpf((float)mant, -24);
			memcpy(&bits, &f, 4);
			bits |= sign;
		}
	} else {
		bits = sign | ((uint32_t)(exp - 15 + 127) << 23) | (mant << 13);
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t mg_float_to_half(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffffu;
	if (ax >= 0x7f800000u) /* inf or nan */
		return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
	if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
		return sign | 0x7c00;
	if (ax < 0x38800000u) { /* below the smallest normal: subnormal */
		float a;
		memcpy(&a, &ax, 4);
		/* a * 2^24 rounded to nearest even is the subnormal count */
		float m = nearbyintf(a * 16777216.0f);
		return sign | (uint16_t)m;
	}
	uint32_t exp = (ax >> 23) - 127 + 15, mant = ax & 0x7fffff;
	uint32_t h = (exp << 10) | (mant >> 13);
	uint32_t rest = mant & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++; /* carries into the exponent correctly */
	return sign | (uint16_t)h;
}

float mg_bf16_to_float(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

uint16_t mg_float_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

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
