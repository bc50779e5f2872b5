/*
 * cuda_reduce.cuh - deterministic per-channel reductions over NCHW
 * tensors (batch-norm statistics, bias and depthwise weight gradients).
 *
 * Stage 1: grid (S, C); block (s, c) sums NV values of an element functor
 * over the s-th fixed slice of channel c's N*HW elements, each thread in
 * a fixed strided order, then a fixed-order block tree, into
 * part[(c * S + s) * NV + v] (double). Stage 2 (the caller's kernel) adds
 * the S partials of a channel in order. S depends on the shape alone, so
 * results are bitwise reproducible run to run; no float atomics.
 *
 * mgc_chan_partial_vec is the same reduction for large planes with
 * 16-byte loads: a slice is walked plane segment by plane segment, the
 * segment's aligned middle as vectors and its ends element by element.
 * A vector's elements are summed in the functor's arithmetic type (F32
 * for F16/BF16/F32) before entering the double accumulator, which keeps
 * double conversions off the critical path; the order is still fixed by
 * the shape.
 */
#ifndef MG_CUDA_REDUCE_CUH
#define MG_CUDA_REDUCE_CUH

#include "ops/cuda/cuda_common.cuh"

#define MGC_RED_THREADS 256
#define MGC_RED_SLICE 8192 /* elements a block aims for */
#define MGC_RED_MAX_SPLIT 64

/* Splits of one channel of M elements. */
static inline int mgc_red_splits(int64_t M)
{
	int64_t s = (M + MGC_RED_SLICE - 1) / MGC_RED_SLICE;
	if (s > MGC_RED_MAX_SPLIT)
		s = MGC_RED_MAX_SPLIT;
	return (int)(s > 0 ? s : 1);
}

/*
 * F is a functor: f(n, q, c, acc) adds the element at sample n, spatial
 * position q of channel c (flat NCHW index (n * C + c) * HW + q) into
 * double acc[NV].
 *
 * With I32 (a channel's N * HW elements below 2^31) the thread's (n, q)
 * comes from a multiply-shift division of the flat index each step; the
 * general path carries (n, q) along, which divides by HW in 64 bits on
 * every step once HW < blockDim (7 x 7 planes: most of the kernel).
 */
template <int NV, typename F, bool I32>
__global__ void __launch_bounds__(MGC_RED_THREADS)
	mgc_chan_partial(F f, int64_t N, int64_t C, int64_t HW, mgc_fdiv hwd,
			 int64_t chunk, double *part)
{
	__shared__ double sh[32];
	const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
	const int64_t M = N * HW, j0 = s * chunk;
	const int64_t j1 = j0 + chunk < M ? j0 + chunk : M;
	double acc[NV];
#pragma unroll
	for (int v = 0; v < NV; v++)
		acc[v] = 0;
	int64_t j = j0 + threadIdx.x;
	if (I32) {
		for (; j < j1; j += blockDim.x) {
			const uint32_t n = mgc_div(hwd, (uint32_t)j);
			f((int64_t)n, j - (int64_t)n * HW, c, acc);
		}
	} else if (j < j1) {
		int64_t n = j / HW, q = j - n * HW;
		for (; j < j1; j += blockDim.x) {
			f(n, q, c, acc);
			q += blockDim.x;
			if (q >= HW) {
				n += q / HW;
				q %= HW;
			}
		}
	}
#pragma unroll
	for (int v = 0; v < NV; v++) {
		double r = mgc_block_sum(acc[v], sh);
		if (threadIdx.x == 0)
			part[(c * S + s) * NV + v] = r;
	}
}

/* Launch stage 1 on stream st; returns S (the splits) through *S. */
template <int NV, typename F>
static void mgc_chan_reduce(cudaStream_t st, F f, int64_t N, int64_t C,
			    int64_t HW, double *part, int *S)
{
	const int64_t M = N * HW;
	const int s = mgc_red_splits(M);
	const int64_t chunk = (M + s - 1) / s;
	const dim3 grid((unsigned)s, (unsigned)C);
	*S = s;
	if (M < ((int64_t)1 << 31))
		mgc_chan_partial<NV, F, true><<<grid, MGC_RED_THREADS, 0, st>>>(
			f, N, C, HW, mgc_fdiv_make((uint32_t)HW), chunk, part);
	else
		mgc_chan_partial<NV, F, false>
			<<<grid, MGC_RED_THREADS, 0, st>>>(
				f, N, C, HW, mgc_fdiv(), chunk, part);
}

/*
 * F has: typedef S (per-channel state); S begin(c) const;
 * void one(const S &, int64_t i, double *acc) const for the element at
 * flat index i; void vec(const S &, int64_t v, double *acc) const for
 * the VEC elements from flat index v * VEC (16-byte aligned).
 */
template <int NV, int VEC, typename F>
__global__ void __launch_bounds__(MGC_RED_THREADS)
	mgc_chan_partial_vec(F f, int64_t N, int64_t C, int64_t HW,
			     int64_t chunk, double *part)
{
	__shared__ double sh[32];
	const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
	const int64_t M = N * HW, j0 = s * chunk;
	const int64_t j1 = j0 + chunk < M ? j0 + chunk : M;
	const typename F::S fs = f.begin(c);
	const int t = threadIdx.x;
	double acc[NV];
#pragma unroll
	for (int v = 0; v < NV; v++)
		acc[v] = 0;
	for (int64_t j = j0; j < j1;) {
		const int64_t n = j / HW, q = j - n * HW;
		const int64_t len = HW - q < j1 - j ? HW - q : j1 - j;
		const int64_t lo = (n * C + c) * HW + q, hi = lo + len;
		int64_t a0 = (lo + VEC - 1) / VEC * VEC;
		if (a0 > hi)
			a0 = hi;
		int64_t a1 = hi / VEC * VEC;
		if (a1 < a0)
			a1 = a0;
		if (t < a0 - lo)
			f.one(fs, lo + t, acc);
		if (t < hi - a1)
			f.one(fs, a1 + t, acc);
		for (int64_t v = a0 / VEC + t; v < a1 / VEC; v += blockDim.x)
			f.vec(fs, v, acc);
		j += len;
	}
#pragma unroll
	for (int v = 0; v < NV; v++) {
		double r = mgc_block_sum(acc[v], sh);
		if (t == 0)
			part[(c * S + s) * NV + v] = r;
	}
}

/* Planes at least this long take the vector path. */
#define MGC_VEC_MIN_HW 512

/* Launch stage 1 of the vector path; returns S through *S. */
template <int NV, int VEC, typename F>
static void mgc_chan_reduce_vec(cudaStream_t st, F f, int64_t N, int64_t C,
				int64_t HW, double *part, int *S)
{
	const int64_t M = N * HW;
	const int s = mgc_red_splits(M);
	const int64_t chunk = (M + s - 1) / s;
	*S = s;
	mgc_chan_partial_vec<NV, VEC, F>
		<<<dim3((unsigned)s, (unsigned)C), MGC_RED_THREADS, 0, st>>>(
			f, N, C, HW, chunk, part);
}

#endif
