/*
 * int4.h - the numerics of torchao's int8-dynamic-activation /
 * int4-weight scheme ("8da4w", Int8DynActInt4WeightQATQuantizer), used by
 * quantization-aware training (mg_op_fq_* in mg/ops_quant.h) and by the
 * packed int4 weights `mgrun export --dtype int4` writes.
 *
 * Weights, symmetric int4 per group of g elements along the input (last)
 * dimension: torchao's get_group_qparams_symmetric (choose_qparams_affine,
 * MappingType.SYMMETRIC, quant_min -8, quant_max 7) and
 * _GenericFakeQuantize (torchao/quantization/qat/utils.py):
 *   absmax = max |w| over the group
 *   scale  = max(absmax / 7.5, FLT_EPSILON)     7.5 = (qmax - qmin) / 2
 *   q      = round(w * (1 / scale))             unclamped, ties to even
 *   w_fq   = clamp(q, -8, 7) * scale
 * Activations, asymmetric int8 per token (per row), torchao's
 * _choose_qparams_per_token_asymmetric (XNNPACK's rule):
 *   lo = min(min(row), 0), hi = max(max(row), 0)
 *   scale = max((hi - lo) / 255, FLT_EPSILON)
 *   dlo = lo / scale, dhi = hi / scale
 *   zp = (-128 + dlo) + (127 + dhi) > 0 ? -128 - dlo : 127 - dhi
 *   zp = round(clamp(zp, -128, 127))
 *   q  = round(x * (1 / scale)) + zp            unclamped
 *   x_fq = (clamp(q, -128, 127) - zp) * scale
 * Every operation is one f32 rounding (no fused multiply-add), round is
 * to nearest even (torch.round, rintf); inputs of other dtypes are read
 * as f32 first (F64 rounded to f32). The straight-through estimator
 * passes the gradient where qmin <= q <= qmax (q unclamped) and gives 0
 * where q was clamped, as _GenericFakeQuantize's mask does. Note that
 * w = +absmax gives q = round(7.5) = 8, clamped to 7 (no gradient);
 * -absmax gives -8.
 *
 * Packed int4 (export): each row of W [out, in] is in / 2 bytes, element
 * 2j in the LOW nibble of byte j and 2j + 1 in the HIGH nibble, each
 * nibble the two's complement of q in [-8, 7]; scales f32 [out, in / g].
 * Dequantizing (q * scale in f32) gives the fake-quantized weight bit for
 * bit.
 */
#ifndef MG_INT4_H
#define MG_INT4_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_INT4_QMIN (-8)
#define MG_INT4_QMAX 7
#define MG_INT8_QMIN (-128)
#define MG_INT8_QMAX 127

/* A weight group's scale from its absmax (f32). */
static inline float mg_int4_scale(float absmax)
{
	const float s = absmax / 7.5f;
	return s < FLT_EPSILON ? FLT_EPSILON : s;
}

/* A token's scale and zero point from its min and max (f32). */
static inline void mg_int8_token_qparams(float mn, float mx, float *scale,
					 float *zp)
{
	const float lo = mn < 0.0f ? mn : 0.0f, hi = mx > 0.0f ? mx : 0.0f;
	float s = (hi - lo) / 255.0f;
	if (s < FLT_EPSILON)
		s = FLT_EPSILON;
	const float dlo = lo / s, dhi = hi / s;
	const float a = -128.0f + dlo, b = 127.0f + dhi;
	float z = a + b > 0.0f ? -128.0f - dlo : 127.0f - dhi;
	z = z < -128.0f ? -128.0f : z > 127.0f ? 127.0f : z;
	*scale = s;
	*zp = rintf(z);
}

/* The unclamped code of v: round(v * inv) + zp (inv = 1 / scale). */
static inline float mg_fq_code(float v, float inv, float zp)
{
	const float p = v * inv;
	return rintf(p) + zp;
}

/* The fake-quantized value of code q (unclamped) in [qmin, qmax]. */
static inline float mg_fq_value(float q, float qmin, float qmax, float zp,
				float scale)
{
	const float c = q < qmin ? qmin : q > qmax ? qmax : q;
	return (c - zp) * scale;
}

/*
 * Quantize w [rows, cols] (f32) into packed int4 (rows * cols / 2 bytes,
 * the nibble order above) and f32 scales [rows, cols / group]. cols must
 * be even and a multiple of group (>= 2). Returns 0, or -1 after
 * mg_error().
 */
MG_EXPORT int mg_int4_quantize_host(const float *w, int64_t rows, int64_t cols,
				    int64_t group, uint8_t *packed,
				    float *scales);
/* out [rows, cols] = q * scale (f32) of packed int4 and its scales. */
MG_EXPORT int mg_int4_dequantize_host(const uint8_t *packed,
				      const float *scales, int64_t rows,
				      int64_t cols, int64_t group, float *out);

#ifdef __cplusplus
}
#endif
#endif
