/*
 * int4.c - packed int4 weights on the host (include/mg/int4.h): the
 * group-wise symmetric quantization of torchao's 8da4w scheme, written
 * by `mgrun export --dtype int4` and read back by the llama plugin's
 * `quant = int4`. The arithmetic is int4.h's inline f32 functions, the
 * same the fake-quantization ops use, so dequantized weights equal the
 * fake-quantized ones bit for bit.
 */
#include <stdint.h>

#include "mg/int4.h"
#include "runtime/runtime.h"

static int check(int64_t rows, int64_t cols, int64_t group)
{
	if (rows < 1 || cols < 2 || group < 2 || cols % 2 || cols % group)
		return mg_error("int4: a [%lld, %lld] weight does not split "
				"into groups of %lld (the input dimension must "
				"be even and a multiple of the group size)",
				(long long)rows, (long long)cols,
				(long long)group);
	return 0;
}

int mg_int4_quantize_host(const float *w, int64_t rows, int64_t cols,
			  int64_t group, uint8_t *packed, float *scales)
{
	if (check(rows, cols, group))
		return -1;
	if (!w || !packed || !scales)
		return mg_error("int4: NULL buffer");
	const int64_t ng = rows * (cols / group);
	for (int64_t gi = 0; gi < ng; gi++) {
		const float *x = w + gi * group;
		float amax = 0.0f;
		for (int64_t i = 0; i < group; i++) {
			const float a = x[i] < 0.0f ? -x[i] : x[i];
			if (!(a <= 3.4e38f))
				return mg_error("int4: non-finite weight at "
						"element %lld",
						(long long)(gi * group + i));
			amax = a > amax ? a : amax;
		}
		const float s = mg_int4_scale(amax), inv = 1.0f / s;
		scales[gi] = s;
		for (int64_t i = 0; i < group; i++) {
			float q = mg_fq_code(x[i], inv, 0.0f);
			q = q < -8.0f ? -8.0f : q > 7.0f ? 7.0f : q;
			const unsigned nib = (unsigned)((int)q & 15);
			const int64_t e = gi * group + i;
			uint8_t *b = packed + e / 2;
			if (e % 2 == 0)
				*b = (uint8_t)((*b & 0xf0u) | nib);
			else
				*b = (uint8_t)((*b & 0x0fu) | (nib << 4));
		}
	}
	return 0;
}

int mg_int4_dequantize_host(const uint8_t *packed, const float *scales,
			    int64_t rows, int64_t cols, int64_t group,
			    float *out)
{
	if (check(rows, cols, group))
		return -1;
	const int64_t n = rows * cols;
	for (int64_t e = 0; e < n; e++) {
		const unsigned b = packed[e / 2];
		const int nib = (int)(e % 2 ? b >> 4 : b & 15u);
		const float q = (float)(nib >= 8 ? nib - 16 : nib);
		out[e] = q * scales[e / group];
	}
	return 0;
}
