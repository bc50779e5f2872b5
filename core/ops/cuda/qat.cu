/*
 * qat.cu - the CUDA twins of the fake-quantization ops (mg/ops_quant.h,
 * mg/int4.h's formulas): int4 weights and int8 activations (per token,
 * i.e. row), each with the straight-through estimator's backward (the
 * mask recomputed from the input). 16-byte vectors where the dtype and
 * shape allow (a group a few threads, a row a warp); otherwise the
 * scalar kernels (a group a warp, a row a block).
 *
 * The arithmetic is the CPU twin's, rounding for rounding: f32 with
 * explicit round-to-nearest intrinsics (__fdiv_rn, __fmul_rn, __fadd_rn,
 * __fsub_rn: no fused multiply-add), rintf for torch.round's ties to
 * even; min, max and absmax are exact whatever the reduction order. So
 * the CPU twin is a bitwise oracle for every dtype.
 */
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_quant.h"

namespace
{

constexpr int THREADS = 256;

__device__ __forceinline__ float clampf(float q, float lo, float hi)
{
	return q < lo ? lo : q > hi ? hi : q;
}

/* mg_int8_token_qparams of a row's min and max: scale s, zero point zp
 * and 1 / s, rounding for rounding as the CPU twin. */
__device__ __forceinline__ void int8_qparams(float mn, float mx, float *s,
					     float *zp, float *inv)
{
	const float lo = mn < 0.0f ? mn : 0.0f, hi = mx > 0.0f ? mx : 0.0f;
	float sc = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
	sc = sc < FLT_EPSILON ? FLT_EPSILON : sc;
	const float dlo = __fdiv_rn(lo, sc), dhi = __fdiv_rn(hi, sc);
	const float a = __fadd_rn(-128.0f, dlo), b = __fadd_rn(127.0f, dhi);
	const float z = __fadd_rn(a, b) > 0.0f ? __fsub_rn(-128.0f, dlo)
					       : __fsub_rn(127.0f, dhi);
	*zp = rintf(clampf(z, -128.0f, 127.0f));
	*s = sc;
	*inv = __fdiv_rn(1.0f, sc);
}

/* out[i] = the fake-quantized v, or (dy given) dy[i] where keep, else 0 */
template <typename T>
__device__ __forceinline__ void put(T *out, const T *dy, int64_t i, float v,
				    bool keep)
{
	if (dy)
		out[i] = keep ? dy[i] : mgc_t<T>::from(0.0f);
	else
		out[i] = mgc_t<T>::from(v);
}

template <typename T>
__global__ void fq_int4(const T *__restrict__ x, const T *dy, T *out,
			int64_t ngroups, int64_t group)
{
	const int lane = threadIdx.x & 31;
	const int64_t warp =
		((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
	for (int64_t gi = warp; gi < ngroups; gi += nwarps) {
		const int64_t e0 = gi * group;
		float amax = 0.0f;
		for (int64_t i = lane; i < group; i += 32)
			amax = fmaxf(amax, fabsf((float)mgc_ld(x, e0 + i)));
		for (int o = 16; o > 0; o >>= 1)
			amax = fmaxf(amax,
				     __shfl_xor_sync(0xffffffffu, amax, o));
		float s = __fdiv_rn(amax, 7.5f);
		s = s < FLT_EPSILON ? FLT_EPSILON : s;
		const float inv = __fdiv_rn(1.0f, s);
		for (int64_t i = lane; i < group; i += 32) {
			const float v = (float)mgc_ld(x, e0 + i);
			/* + 0: round's -0 becomes +0, as torch's add of
			 * the zero point does (and the CPU twin) */
			const float q =
				__fadd_rn(rintf(__fmul_rn(v, inv)), 0.0f);
			put(out, dy, e0 + i,
			    __fmul_rn(clampf(q, -8.0f, 7.0f), s),
			    q >= -8.0f && q <= 7.0f);
		}
	}
}

template <typename T>
__global__ void fq_int8(const T *__restrict__ x, const T *dy, T *out,
			int64_t rows, int64_t cols)
{
	__shared__ float smn[THREADS / 32], smx[THREADS / 32];
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const int64_t e0 = r * cols;
		float mn = (float)mgc_ld(x, e0), mx = mn;
		for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
			const float v = (float)mgc_ld(x, e0 + i);
			mn = fminf(mn, v);
			mx = fmaxf(mx, v);
		}
		for (int o = 16; o > 0; o >>= 1) {
			mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
		}
		if (lane == 0) {
			smn[wid] = mn;
			smx[wid] = mx;
		}
		__syncthreads();
		mn = smn[0];
		mx = smx[0];
		for (int k = 1; k < (int)(blockDim.x >> 5); k++) {
			mn = fminf(mn, smn[k]);
			mx = fmaxf(mx, smx[k]);
		}
		__syncthreads(); /* smn/smx reused by the next row */
		float s, zp, inv;
		int8_qparams(mn, mx, &s, &zp, &inv);
		for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
			const float v = (float)mgc_ld(x, e0 + i);
			const float q = __fadd_rn(rintf(__fmul_rn(v, inv)), zp);
			put(out, dy, e0 + i,
			    __fmul_rn(__fsub_rn(clampf(q, -128.0f, 127.0f), zp),
				      s),
			    q >= -128.0f && q <= 127.0f);
		}
	}
}

/*
 * The same two ops on 16-byte vectors (F16, BF16, F32 whose rows or
 * groups are whole vectors): one load and one store per 8 (4) elements
 * instead of a 2-byte access per thread. The arithmetic per element is
 * the scalar kernels', min / max / absmax still exact, so the results are
 * bitwise the same. dy may alias out (the in-place backward): each
 * thread reads its vector of dy before writing the same vector of out.
 */

/* int4 weights: a group is tpg = group / MGC_VEC(T) consecutive threads
 * (a power of two up to 32), its absmax a shuffle within them. */
template <typename T>
__global__ void fq_int4_vec(const T *__restrict__ x, const T *dy, T *out,
			    int64_t nvec, int tpg)
{
	constexpr int V = MGC_VEC(T);
	using A = typename mgc_t<T>::acc; /* float (double: never launched) */
	const int64_t stride = (int64_t)gridDim.x * blockDim.x;
	/* block-uniform trip count: every lane reaches the shuffles */
	for (int64_t b = (int64_t)blockIdx.x * blockDim.x; b < nvec;
	     b += stride) {
		const int64_t v = b + threadIdx.x;
		const bool ok = v < nvec;
		A e[V];
		float amax = 0.0f;
		if (ok) {
			mgc_ldv(x, v, e);
#pragma unroll
			for (int k = 0; k < V; k++)
				amax = fmaxf(amax, fabsf((float)e[k]));
		}
		for (int o = 1; o < tpg; o <<= 1)
			amax = fmaxf(amax,
				     __shfl_xor_sync(0xffffffffu, amax, o));
		if (!ok)
			continue;
		float s = __fdiv_rn(amax, 7.5f);
		s = s < FLT_EPSILON ? FLT_EPSILON : s;
		const float inv = __fdiv_rn(1.0f, s);
		A d[V];
		if (dy)
			mgc_ldv(dy, v, d);
#pragma unroll
		for (int k = 0; k < V; k++) {
			const float q = __fadd_rn(
				rintf(__fmul_rn((float)e[k], inv)), 0.0f);
			e[k] = dy ? (q >= -8.0f && q <= 7.0f ? d[k] : (A)0)
				  : (A)__fmul_rn(clampf(q, -8.0f, 7.0f), s);
		}
		mgc_stv(out, v, e);
	}
}

/* int8 tokens: a warp per row of vpr vectors (min and max in a first
 * pass, the second reads the row again, from cache). */
template <typename T>
__global__ void fq_int8_vec(const T *__restrict__ x, const T *dy, T *out,
			    int64_t rows, int64_t vpr)
{
	constexpr int V = MGC_VEC(T);
	using A = typename mgc_t<T>::acc; /* float (double: never launched) */
	const int lane = threadIdx.x & 31;
	const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
	for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	     r < rows; r += nw) {
		const int64_t v0 = r * vpr;
		/* from the row's first element, as the scalar kernel */
		float mn = (float)mgc_ld(x, v0 * V), mx = mn;
		for (int64_t i = lane; i < vpr; i += 32) {
			A e[V];
			mgc_ldv(x, v0 + i, e);
#pragma unroll
			for (int k = 0; k < V; k++) {
				mn = fminf(mn, (float)e[k]);
				mx = fmaxf(mx, (float)e[k]);
			}
		}
		for (int o = 16; o > 0; o >>= 1) {
			mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
		}
		float s, zp, inv;
		int8_qparams(mn, mx, &s, &zp, &inv);
		for (int64_t i = lane; i < vpr; i += 32) {
			A e[V], d[V];
			mgc_ldv(x, v0 + i, e);
			if (dy)
				mgc_ldv(dy, v0 + i, d);
#pragma unroll
			for (int k = 0; k < V; k++) {
				const float q = __fadd_rn(
					rintf(__fmul_rn((float)e[k], inv)), zp);
				e[k] = dy ? (q >= -128.0f && q <= 127.0f ? d[k]
									 : 0.0f)
					  : __fmul_rn(
						    __fsub_rn(clampf(q, -128.0f,
								     127.0f),
							      zp),
						    s);
			}
			mgc_stv(out, v0 + i, e);
		}
	}
}

/* The vector kernels take F16, BF16 and F32 with every pointer 16-byte
 * aligned and `unit` elements (a group, a row) a whole number of
 * vectors. */
template <typename T>
bool vec_ok(const struct mg_tensor *x, const struct mg_tensor *dy,
	    const struct mg_tensor *out, int64_t unit)
{
	return sizeof(T) <= 4 && unit % MGC_VEC(T) == 0 &&
	       mgc_aligned16(x->data) && mgc_aligned16(out->data) &&
	       (!dy || mgc_aligned16(dy->data));
}

template <typename T>
void launch_int4(struct mg_ctx *ctx, const struct mg_tensor *w, int64_t group,
		 const struct mg_tensor *dy, struct mg_tensor *out)
{
	const int64_t n = mg_tensor_numel(w), ng = n / group;
	const int64_t tpg = group / MGC_VEC(T);
	if (vec_ok<T>(w, dy, out, group) && tpg <= 32 && !(tpg & (tpg - 1))) {
		const int64_t nvec = n / MGC_VEC(T);
		fq_int4_vec<T><<<mgc_blocks(nvec, THREADS), THREADS, 0,
				 mgc_stream(ctx)>>>(
			static_cast<const T *>(w->data),
			dy ? static_cast<const T *>(dy->data) : nullptr,
			static_cast<T *>(out->data), nvec, (int)tpg);
		return;
	}
	fq_int4<T>
		<<<mgc_blocks(ng, THREADS / 32), THREADS, 0, mgc_stream(ctx)>>>(
			static_cast<const T *>(w->data),
			dy ? static_cast<const T *>(dy->data) : nullptr,
			static_cast<T *>(out->data), ng, group);
}

template <typename T>
void launch_int8(struct mg_ctx *ctx, const struct mg_tensor *x,
		 const struct mg_tensor *dy, struct mg_tensor *out)
{
	const int64_t cols = x->shape[x->ndim - 1],
		      rows = mg_tensor_numel(x) / cols;
	if (vec_ok<T>(x, dy, out, cols)) {
		fq_int8_vec<T><<<mgc_blocks(rows, THREADS / 32), THREADS, 0,
				 mgc_stream(ctx)>>>(
			static_cast<const T *>(x->data),
			dy ? static_cast<const T *>(dy->data) : nullptr,
			static_cast<T *>(out->data), rows, cols / MGC_VEC(T));
		return;
	}
	fq_int8<T><<<mgc_blocks(rows, 1), THREADS, 0, mgc_stream(ctx)>>>(
		static_cast<const T *>(x->data),
		dy ? static_cast<const T *>(dy->data) : nullptr,
		static_cast<T *>(out->data), rows, cols);
}

} // namespace

extern "C" int mg_cuda_fq_int4_weight(struct mg_ctx *ctx,
				      const struct mg_tensor *w, int64_t group,
				      const struct mg_tensor *dy,
				      struct mg_tensor *out)
{
	MGC_DISPATCH("fq_int4_weight", w->dtype, launch_int4, ctx, w, group, dy,
		     out);
	return mgc_check_launch("fq_int4_weight");
}

extern "C" int mg_cuda_fq_int8_token(struct mg_ctx *ctx,
				     const struct mg_tensor *x,
				     const struct mg_tensor *dy,
				     struct mg_tensor *out)
{
	MGC_DISPATCH("fq_int8_token", x->dtype, launch_int8, ctx, x, dy, out);
	return mgc_check_launch("fq_int8_token");
}
