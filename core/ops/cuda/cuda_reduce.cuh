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
 *
 * The _fin launchers fold stage 2 into stage 1: each block counts itself
 * done on its channel's counter (cnt[c], zero before and after), and the
 * channel's last block runs the functor fin(c, partials, S, t) in its
 * first FIN::threads threads t, which add the partials in the same fixed
 * order as a separate kernel would. Where fin.post_on and the channel is
 * one slice (S == 1: its block saw every element), the whole block then
 * runs fin.post(c) (batch norm's element-wise pass over that channel). That saves a launch per reduction (batch norm's
 * finalise: 104 launches of MobileNetV2's step, latency-bound at 28 px)
 * and gives the same bits.
 */
#ifndef MG_CUDA_REDUCE_CUH
#define MG_CUDA_REDUCE_CUH

#include "ops/cuda/cuda_common.cuh"

#define MGC_RED_THREADS 256
#define MGC_RED_SLICE 8192 /* elements a block aims for */
#define MGC_RED_MAX_SPLIT 64

/* Stage 1 alone: the caller's own kernel reads the partials. */
struct mgc_no_fin {
	static const bool on = false;
	static const int threads = 0;
	static const bool post_on = false;
	__device__ void operator()(int64_t, const double *, int, int) const
	{
	}
	__device__ void post(int64_t) const
	{
	}
};

/*
 * After a block has written its NV partials of channel c (thread 0 wrote
 * them): the channel's last block to finish runs fin on them (threads
 * t < FIN::threads). The fence before the count publishes this block's
 * partials; the one after it orders the reads of the others' (fin must
 * read them with __ldcg, past the incoherent L1). The counter is reset
 * for the next launch.
 */
template <int NV, typename FIN>
__device__ __forceinline__ void mgc_chan_finish(const FIN &fin, double *part,
						unsigned *cnt, int64_t c,
						int64_t S)
{
	__shared__ bool last;
	if (threadIdx.x == 0) {
		__threadfence();
		last = atomicAdd(&cnt[c], 1u) == (unsigned)(S - 1);
	}
	__syncthreads();
	if (last && (int)threadIdx.x < FIN::threads) {
		__threadfence();
		if (threadIdx.x == 0)
			cnt[c] = 0;
		fin(c, part + c * S * NV, (int)S, (int)threadIdx.x);
	}
	if (last && S == 1 && fin.post_on) { /* uniform over the block */
		__syncthreads(); /* fin's global writes, block-wide */
		fin.post(c);
	}
}

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
template <int NV, typename F, bool I32, typename FIN>
__global__ void __launch_bounds__(MGC_RED_THREADS)
	mgc_chan_partial(F f, int64_t N, int64_t C, int64_t HW, mgc_fdiv hwd,
			 int64_t chunk, double *part, FIN fin, unsigned *cnt)
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
	if (FIN::on)
		mgc_chan_finish<NV>(fin, part, cnt, c, S);
}

/* Launch stage 1 on stream st, with stage 2 folded in as fin (cnt: C
 * zeroed counters); returns S (the splits) through *S. */
template <int NV, typename F, typename FIN>
static void mgc_chan_reduce_fin(cudaStream_t st, F f, int64_t N, int64_t C,
				int64_t HW, double *part, int *S, FIN fin,
				unsigned *cnt)
{
	const int64_t M = N * HW;
	const int s = mgc_red_splits(M);
	const int64_t chunk = (M + s - 1) / s;
	const dim3 grid((unsigned)s, (unsigned)C);
	*S = s;
	if (M < ((int64_t)1 << 31))
		mgc_chan_partial<NV, F, true, FIN>
			<<<grid, MGC_RED_THREADS, 0, st>>>(
				f, N, C, HW, mgc_fdiv_make((uint32_t)HW), chunk,
				part, fin, cnt);
	else
		mgc_chan_partial<NV, F, false, FIN>
			<<<grid, MGC_RED_THREADS, 0, st>>>(
				f, N, C, HW, mgc_fdiv(), chunk, part, fin, cnt);
}

/* Launch stage 1 on stream st; returns S (the splits) through *S. */
template <int NV, typename F>
static void mgc_chan_reduce(cudaStream_t st, F f, int64_t N, int64_t C,
			    int64_t HW, double *part, int *S)
{
	mgc_chan_reduce_fin<NV>(st, f, N, C, HW, part, S, mgc_no_fin(),
				(unsigned *)0);
}

/*
 * F has: typedef S (per-channel state); S begin(c) const;
 * void one(const S &, int64_t i, double *acc) const for the element at
 * flat index i; void vec(const S &, int64_t v, double *acc) const for
 * the VEC elements from flat index v * VEC (16-byte aligned).
 */
template <int NV, int VEC, typename F, typename FIN>
__global__ void __launch_bounds__(MGC_RED_THREADS)
	mgc_chan_partial_vec(F f, int64_t N, int64_t C, int64_t HW,
			     int64_t chunk, double *part, FIN fin,
			     unsigned *cnt)
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
	if (FIN::on)
		mgc_chan_finish<NV>(fin, part, cnt, c, S);
}

/* Planes at least this long take the vector path. */
#define MGC_VEC_MIN_HW 512

/* Launch stage 1 of the vector path with stage 2 folded in as fin (cnt:
 * C zeroed counters); returns S through *S. */
template <int NV, int VEC, typename F, typename FIN>
static void mgc_chan_reduce_vec_fin(cudaStream_t st, F f, int64_t N, int64_t C,
				    int64_t HW, double *part, int *S, FIN fin,
				    unsigned *cnt)
{
	const int64_t M = N * HW;
	const int s = mgc_red_splits(M);
	const int64_t chunk = (M + s - 1) / s;
	*S = s;
	mgc_chan_partial_vec<NV, VEC, F, FIN>
		<<<dim3((unsigned)s, (unsigned)C), MGC_RED_THREADS, 0, st>>>(
			f, N, C, HW, chunk, part, fin, cnt);
}

/* Launch stage 1 of the vector path; returns S through *S. */
template <int NV, int VEC, typename F>
static void mgc_chan_reduce_vec(cudaStream_t st, F f, int64_t N, int64_t C,
				int64_t HW, double *part, int *S)
{
	mgc_chan_reduce_vec_fin<NV, VEC>(st, f, N, C, HW, part, S, mgc_no_fin(),
					 (unsigned *)0);
}

#endif
