/*
 * qat.cu - the CUDA twins of the fake-quantization ops (mg/ops_quant.h,
 * mg/int4.h's formulas): int4 weights, one warp per group, and int8
 * activations, one block per token (row), each with the straight-through
 * estimator's backward (the mask recomputed from the input).
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
		/* mg_int8_token_qparams */
		const float lo = mn < 0.0f ? mn : 0.0f,
			    hi = mx > 0.0f ? mx : 0.0f;
		float s = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
		s = s < FLT_EPSILON ? FLT_EPSILON : s;
		const float dlo = __fdiv_rn(lo, s), dhi = __fdiv_rn(hi, s);
		const float a = __fadd_rn(-128.0f, dlo),
			    b = __fadd_rn(127.0f, dhi);
		float zp = __fadd_rn(a, b) > 0.0f ? __fsub_rn(-128.0f, dlo)
						  : __fsub_rn(127.0f, dhi);
		zp = rintf(clampf(zp, -128.0f, 127.0f));
		const float inv = __fdiv_rn(1.0f, s);
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

template <typename T>
void launch_int4(struct mg_ctx *ctx, const struct mg_tensor *w, int64_t group,
		 const struct mg_tensor *dy, struct mg_tensor *out)
{
	const int64_t ng = mg_tensor_numel(w) / group;
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
