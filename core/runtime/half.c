/*
 * half.c - the scalar F16 and BF16 conversions (round to nearest even,
 * NaN kept quiet, F16 overflow to infinity and subnormals exact): public
 * (mg/tensor.h) and used below the ops, by the safetensors writer and
 * the CPU conversion op alike, so the runtime never calls into ops/.
 */
#include <math.h>
#include <string.h>

#include "runtime/runtime.h"

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
