/*
 * cuda_rms.cuh - what the unfused RMSNorm kernels (llm.cu) and the fused
 * ones (llm_fused.cu) must share to agree bitwise: the threads a row
 * gets, and which elements each thread sums in which order. A row of D
 * elements is either walked one element at a time (thread t takes t,
 * t + th, ...) or, when every row starts 16-byte aligned, in 16-byte
 * vectors (thread t takes vectors t, t + th, ..., each element of a
 * vector in turn): one 128-bit load instead of eight 16-bit ones, which
 * at 7B widths is most of the kernels' instructions. Both kinds of
 * kernel pick the walk with rms_vec_ok on the same shape and pointers.
 */
#ifndef MG_CUDA_RMS_CUH
#define MG_CUDA_RMS_CUH

#include "ops/cuda/cuda_common.cuh"

/* Threads a row for the element walk: a multiple of 32, up to 256, about
 * four elements each. */
static inline int rms_row_threads(int64_t D)
{
	int th = 32;
	while (th < 256 && th * 4 < D)
		th *= 2;
	return th;
}

/* Threads a row for the vector walk of nv vectors: up to 256, at least
 * two vectors each where the row has them. */
static inline int rms_vec_threads(int64_t nv)
{
	int th = 32;
	while (th < 256 && th * 2 < nv)
		th *= 2;
	return th;
}

/* Whether rows of D elements of T (2 or 4 bytes) at these bases can be
 * walked in vectors: D a whole number of vectors and every base 16-byte
 * aligned (NULL bases are not used and do not count). */
template <typename T>
static inline bool rms_vec_ok(int64_t D, const void *a, const void *b,
			      const void *c, const void *d, const void *e)
{
	const void *p[] = {a, b, c, d, e};
	if (sizeof(T) > 4 || D % MGC_VEC(T))
		return false;
	for (int i = 0; i < 5; i++)
		if (p[i] && !mgc_aligned16(p[i]))
			return false;
	return true;
}

/* The MGC_VEC(T) weights of row vector v as floats: W is T, or float
 * beside a 16-bit T (two 16-byte loads). */
template <typename T, typename W>
__device__ __forceinline__ void rms_ldw(const W *w, int64_t v, float *out)
{
	constexpr int n = MGC_VEC(T) * (int)sizeof(W) / 16;
#pragma unroll
	for (int k = 0; k < n; k++)
		mgc_ldv(w, v * n + k, out + k * MGC_VEC(W));
}

/* Vector v of a row's x, its dy and the weights, as floats: what every
 * backward pass of the vector walk reads. */
template <typename T, typename W>
__device__ __forceinline__ void rms_vec_ld3(const T *xr, const T *gr,
					    const W *w, int64_t v, float *a,
					    float *g, float *wv)
{
	mgc_ldv(xr, v, a);
	mgc_ldv(gr, v, g);
	rms_ldw<T>(w, v, wv);
}

/* This thread's part of sum(w dy x) over a row in the vector walk: the
 * backward's per-row reduction, the same for rms_bwd_dx_vk and the fused
 * rms_bwd_add_vk. */
template <typename T, typename W>
__device__ __forceinline__ float rms_vec_dot(const T *xr, const T *gr,
					     const W *w, int64_t nv)
{
	constexpr int V = MGC_VEC(T);
	float s = 0;
	for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
		float a[V], g[V], wv[V];
		rms_vec_ld3(xr, gr, w, v, a, g, wv);
#pragma unroll
		for (int k = 0; k < V; k++)
			s += wv[k] * g[k] * a[k];
	}
	return s;
}

/* The forward's second half in the vector walk, for rms_fwd_vk and the
 * fused add_rms_vk: the block's sum of squares from this thread's ss,
 * rstd (stored through rstd_out when given), then yr = w * T(src *
 * rstd), T(.) rounding as the unfused ops' stores do. */
template <typename T, typename W>
__device__ __forceinline__ void rms_vec_scale(const T *src, const W *w, T *yr,
					      float ss, float eps, int64_t nv,
					      float *rstd_out, float *sh)
{
	constexpr int V = MGC_VEC(T);
	ss = mgc_block_sum(ss, sh);
	const float rs = 1.0f / sqrtf(ss / (float)(nv * V) + eps);
	if (rstd_out && threadIdx.x == 0)
		*rstd_out = rs;
	for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
		float a[V], wv[V];
		mgc_ldv(src, v, a);
		rms_ldw<T>(w, v, wv);
#pragma unroll
		for (int k = 0; k < V; k++)
			a[k] = wv[k] *
			       mgc_t<T>::load(mgc_t<T>::from(a[k] * rs));
		mgc_stv(yr, v, a);
	}
}

#endif
