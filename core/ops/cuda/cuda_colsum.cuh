/*
 * cuda_colsum.cuh - dw[d] += sum over k < S of part[k, d]: the second
 * stage of the RMSNorm weight gradients (llm.cu, llm_fused.cu), whose
 * first stage leaves one F32 partial row per segment of rows.
 *
 * A block takes 32 columns; its warps take every nw-th partial row
 * (coalesced 128-byte rows), then warp 0 adds the warps' sums in order:
 * a fixed order for a given shape, so the result is bitwise
 * reproducible. A thread per column left a 2048-wide norm to 8 blocks
 * walking 1024 partial rows each (61 us a call at Llama 3.2 1B).
 */
#ifndef MG_CUDA_COLSUM_CUH
#define MG_CUDA_COLSUM_CUH

#include "ops/cuda/cuda_common.cuh"

template <typename W>
__global__ void mgc_colsum_add_k(const float *part, W *dw, int64_t S, int64_t D)
{
	__shared__ float sh[32][33];
	const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5,
		  nw = blockDim.x >> 5;
	const int64_t d = (int64_t)blockIdx.x * 32 + lane;
	float s = 0;
	if (d < D)
		for (int64_t k = wp; k < S; k += nw)
			s += part[k * D + d];
	sh[wp][lane] = s;
	__syncthreads();
	if (wp == 0 && d < D) {
		float t = 0;
		for (int j = 0; j < nw; j++)
			t += sh[j][lane];
		dw[d] = mgc_t<W>::from(mgc_ld(dw, d) + t);
	}
}

/* Launch mgc_colsum_add_k for D columns of S partial rows on st. */
template <typename W>
static void mgc_colsum_add(cudaStream_t st, const float *part, W *dw, int64_t S,
			   int64_t D)
{
	const int th = S >= 256 ? 1024 : S >= 64 ? 256 : 64;
	mgc_colsum_add_k<W>
		<<<(unsigned)((D + 31) / 32), th, 0, st>>>(part, dw, S, D);
}

#endif
