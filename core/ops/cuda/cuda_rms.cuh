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

#endif
