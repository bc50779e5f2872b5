/*
 * qat.c - the CPU twins of the fake-quantization ops of mg/ops_quant.h
 * (quantization-aware training, torchao's 8da4w): int4 weights per group,
 * int8 activations per token, and their straight-through estimators.
 * The arithmetic is mg/int4.h's inline f32 functions, one rounding per
 * operation (C11 without extensions: no contraction into fused
 * multiply-adds), so the CUDA kernels match bit for bit.
 */
#include <stdint.h>

#include "mg/int4.h"
#include "runtime/runtime.h"

#include "cpu_quant.h"

static inline float ld(const void *p, enum mg_dtype dt, int64_t i)
{
	switch (dt) {
	case MG_F64:
		return (float)((const double *)p)[i];
	case MG_F16:
		return mg_half_to_float(((const uint16_t *)p)[i]);
	case MG_BF16:
		return mg_bf16_to_float(((const uint16_t *)p)[i]);
	default:
		return ((const float *)p)[i];
	}
}

/* out[i] = v (a fake-quantized value), or dy[i] * keep for backward. */
static inline void st(void *out, enum mg_dtype dt, int64_t i, float v,
		      const void *dy, int keep)
{
	if (dy) {
		/* The gradient keeps its own precision: copy or zero. */
		switch (dt) {
		case MG_F64:
			((double *)out)[i] =
				keep ? ((const double *)dy)[i] : 0.0;
			return;
		case MG_F16:
		case MG_BF16:
			((uint16_t *)out)[i] =
				keep ? ((const uint16_t *)dy)[i] : 0;
			return;
		default:
			((float *)out)[i] =
				keep ? ((const float *)dy)[i] : 0.0f;
			return;
		}
	}
	switch (dt) {
	case MG_F64:
		((double *)out)[i] = v;
		return;
	case MG_F16:
		((uint16_t *)out)[i] = mg_float_to_half(v);
		return;
	case MG_BF16:
		((uint16_t *)out)[i] = mg_float_to_bf16(v);
		return;
	default:
		((float *)out)[i] = v;
		return;
	}
}

int mg_cpu_fq_int4_weight(struct mg_ctx *ctx, const struct mg_tensor *w,
			  int64_t group, const struct mg_tensor *dy,
			  struct mg_tensor *out)
{
	const int64_t n = mg_tensor_numel(w), ng = n / group;
	const enum mg_dtype dt = w->dtype;
	const int threads = ctx->dev->threads > 0 ? ctx->dev->threads : 1;
	const void *x = w->data, *g = dy ? dy->data : NULL;
	void *o = out->data;
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 65536)
	for (int64_t gi = 0; gi < ng; gi++) {
		const int64_t e0 = gi * group;
		float amax = 0.0f;
		for (int64_t i = 0; i < group; i++) {
			const float v = ld(x, dt, e0 + i);
			const float a = v < 0.0f ? -v : v;
			amax = a > amax ? a : amax;
		}
		const float s = mg_int4_scale(amax), inv = 1.0f / s;
		for (int64_t i = 0; i < group; i++) {
			const float q =
				mg_fq_code(ld(x, dt, e0 + i), inv, 0.0f);
			st(o, dt, e0 + i, mg_fq_value(q, -8.0f, 7.0f, 0.0f, s),
			   g, q >= -8.0f && q <= 7.0f);
		}
	}
	return 0;
}

int mg_cpu_fq_int8_token(struct mg_ctx *ctx, const struct mg_tensor *x,
			 const struct mg_tensor *dy, struct mg_tensor *out)
{
	const int64_t n = mg_tensor_numel(x), cols = x->shape[x->ndim - 1],
		      rows = n / cols;
	const enum mg_dtype dt = x->dtype;
	const int threads = ctx->dev->threads > 0 ? ctx->dev->threads : 1;
	const void *xp = x->data, *g = dy ? dy->data : NULL;
	void *o = out->data;
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 65536)
	for (int64_t r = 0; r < rows; r++) {
		const int64_t e0 = r * cols;
		float mn = ld(xp, dt, e0), mx = mn;
		for (int64_t i = 1; i < cols; i++) {
			const float v = ld(xp, dt, e0 + i);
			mn = v < mn ? v : mn;
			mx = v > mx ? v : mx;
		}
		float s, zp;
		mg_int8_token_qparams(mn, mx, &s, &zp);
		const float inv = 1.0f / s;
		for (int64_t i = 0; i < cols; i++) {
			const float q = mg_fq_code(ld(xp, dt, e0 + i), inv, zp);
			st(o, dt, e0 + i,
			   mg_fq_value(q, -128.0f, 127.0f, zp, s), g,
			   q >= -128.0f && q <= 127.0f);
		}
	}
	return 0;
}
