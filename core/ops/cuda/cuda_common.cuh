/*
 * cuda_common.cuh - device-side helpers shared by the CUDA op kernels:
 * per-dtype load/store with F32 accumulation for F16/BF16 (F64 stays
 * F64), deterministic block reductions, and the host-side dtype dispatch.
 */
#ifndef MG_CUDA_COMMON_CUH
#define MG_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops/cuda/cuda_ops.h"

typedef __half mgc_f16;
typedef __nv_bfloat16 mgc_bf16;

/* Element traits: acc is the arithmetic type, from() converts back. */
template <typename T> struct mgc_t;
template <> struct mgc_t<float> {
	typedef float acc;
	static __device__ __forceinline__ float load(float v)
	{
		return v;
	}
	static __device__ __forceinline__ float from(float v)
	{
		return v;
	}
	static __device__ __forceinline__ float from(double v)
	{
		return (float)v;
	}
};
template <> struct mgc_t<double> {
	typedef double acc;
	static __device__ __forceinline__ double load(double v)
	{
		return v;
	}
	static __device__ __forceinline__ double from(double v)
	{
		return v;
	}
	static __device__ __forceinline__ double from(float v)
	{
		return v;
	}
};
template <> struct mgc_t<mgc_f16> {
	typedef float acc;
	static __device__ __forceinline__ float load(mgc_f16 v)
	{
		return __half2float(v);
	}
	static __device__ __forceinline__ mgc_f16 from(float v)
	{
		return __float2half_rn(v);
	}
	static __device__ __forceinline__ mgc_f16 from(double v)
	{
		return __float2half_rn((float)v);
	}
};
template <> struct mgc_t<mgc_bf16> {
	typedef float acc;
	static __device__ __forceinline__ float load(mgc_bf16 v)
	{
		return __bfloat162float(v);
	}
	static __device__ __forceinline__ mgc_bf16 from(float v)
	{
		return __float2bfloat16_rn(v);
	}
	static __device__ __forceinline__ mgc_bf16 from(double v)
	{
		return __float2bfloat16_rn((float)v);
	}
};

/* Load element i of T as its accumulation type. */
template <typename T>
__device__ __forceinline__ typename mgc_t<T>::acc mgc_ld(const T *p, int64_t i)
{
	return mgc_t<T>::load(p[i]);
}

/*
 * 16-byte vectors of T for memory-bound kernels: MGC_VEC(T) elements
 * (8 F16/BF16, 4 F32, 2 F64) moved by one 128-bit load or store. v is a
 * vector index (element v * MGC_VEC(T)); the base pointer must be 16-byte
 * aligned (mgc_aligned16).
 */
#define MGC_VEC(T) ((int)(16 / sizeof(T)))

template <typename T>
__device__ __forceinline__ void mgc_ldv(const T *p, int64_t v,
					typename mgc_t<T>::acc *out)
{
	const uint4 raw = reinterpret_cast<const uint4 *>(p)[v];
	const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
	for (int k = 0; k < MGC_VEC(T); k++)
		out[k] = mgc_t<T>::load(e[k]);
}

template <typename T>
__device__ __forceinline__ void mgc_stv(T *p, int64_t v,
					const typename mgc_t<T>::acc *in)
{
	uint4 raw;
	T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
	for (int k = 0; k < MGC_VEC(T); k++)
		e[k] = mgc_t<T>::from(in[k]);
	reinterpret_cast<uint4 *>(p)[v] = raw;
}

static inline bool mgc_aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* Parameter type paired with activations T: F64 for F64, else F32. */
template <typename T> struct mgc_param {
	typedef float type;
};
template <> struct mgc_param<double> {
	typedef double type;
};

/*
 * Sum of v over the block (blockDim.x a multiple of 32, <= 1024):
 * butterfly within warps, then warp sums in order. Fixed order, so the
 * result is bitwise reproducible. sh needs 32 elements. The result is
 * valid in every thread.
 */
template <typename A> __device__ __forceinline__ A mgc_block_sum(A v, A *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int nw = blockDim.x >> 5;
	__syncthreads(); /* sh may be in use by a previous call */
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	A s = lane < nw ? sh[lane] : (A)0;
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	return s;
}

/*
 * Division by a run-time constant d (1 <= d < 2^31) of n < 2^31 with a
 * multiply-high and a shift (Granlund-Montgomery, as PyTorch's
 * IntDivider): index arithmetic in memory-bound kernels without the
 * ~20-instruction integer division.
 */
struct mgc_fdiv {
	uint32_t d, m, s;
};

static inline struct mgc_fdiv mgc_fdiv_make(uint32_t d)
{
	struct mgc_fdiv f;
	f.d = d;
	f.s = 0;
	while (f.s < 32 && (1ull << f.s) < d)
		f.s++;
	f.m = (uint32_t)(((1ull << 32) * ((1ull << f.s) - d)) / d + 1);
	return f;
}

__device__ __forceinline__ uint32_t mgc_div(const mgc_fdiv &f, uint32_t n)
{
	return (__umulhi(n, f.m) + n) >> f.s;
}

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned mgc_blocks(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads;
	if (b > 65536)
		b = 65536;
	return (unsigned)(b > 0 ? b : 1);
}

static inline cudaStream_t mgc_stream(struct mg_ctx *ctx)
{
	return (cudaStream_t)ctx->dev->stream;
}

/* Call FN<T>(args...) for the runtime dtype dt (F32/F64/F16/BF16);
 * other dtypes return an error naming op. */
#define MGC_DISPATCH(op, dt, FN, ...)                                          \
	do {                                                                   \
		switch (dt) {                                                  \
		case MG_F32:                                                   \
			FN<float>(__VA_ARGS__);                                \
			break;                                                 \
		case MG_F64:                                                   \
			FN<double>(__VA_ARGS__);                               \
			break;                                                 \
		case MG_F16:                                                   \
			FN<mgc_f16>(__VA_ARGS__);                              \
			break;                                                 \
		case MG_BF16:                                                  \
			FN<mgc_bf16>(__VA_ARGS__);                             \
			break;                                                 \
		default:                                                       \
			return mgc_bad_dtype(op, dt);                          \
		}                                                              \
	} while (0)

#endif
