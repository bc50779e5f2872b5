/*
 * llm_decode.cu - CUDA attention of new tokens over a key/value cache
 * (mg_op_attention_decode_opts, ops_llm.h; the CPU twin is
 * cpu/llm_decode.c). Decoding has one to a few hundred queries against
 * up to max_len keys, so the work is a block per (query, query head)
 * walking the cache in chunks of DK keys with an online softmax: each
 * warp scores keys (lanes split the head dimension, so K rows are read
 * coalesced), the block takes the chunk's maximum, rescales its running
 * sums and accumulates p * v with one output element per thread. F32
 * accumulation; keys in a fixed order, so results are deterministic.
 * Correctness first: no split over keys (a long context with few
 * queries leaves most of the GPU idle).
 */
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_llm.h"

namespace
{
const int DT = 128; /* threads per block */
const int DK = 128; /* keys per chunk */
const int DNDL = 2; /* output elements per thread: hd <= 256 */
const int DWARPS = DT / 32;

__device__ __forceinline__ float dwarp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float dwarp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Block-wide reduction of one value per thread (max or sum), every
 * thread gets the result. red holds DWARPS floats. */
template <bool MAX> __device__ float block_reduce(float v, float *red)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	v = MAX ? dwarp_max(v) : dwarp_sum(v);
	__syncthreads();
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	float r = red[0];
	for (int w = 1; w < DWARPS; w++)
		r = MAX ? fmaxf(r, red[w]) : r + red[w];
	return r;
}

struct dec_dims {
	int n, Hq, Hkv, hd;
	int64_t pos;
	float scale;
	int64_t window; /* sliding window, 0: none */
	float cap;	/* score soft-capping, 0: none */
};

template <typename T>
__global__ void __launch_bounds__(DT)
	decode_k(dec_dims a, const T *q, const T *k, const T *v, T *o)
{
	extern __shared__ float dsm[];
	float *qs = dsm, *ps = qs + a.hd;
	__shared__ float red[DWARPS];
	const int t = blockIdx.x, h = blockIdx.y;
	const int kh = h / (a.Hq / a.Hkv);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int64_t qat = ((int64_t)t * a.Hq + h) * a.hd;
	for (int d = threadIdx.x; d < a.hd; d += DT)
		qs[d] = mgc_ld(q, qat + d);
	__syncthreads();
	/* cache rows first..pos+t: the window's last ones, or all */
	const int64_t rows = a.pos + t + 1;
	const int64_t first =
		a.window > 0 && rows > a.window ? rows - a.window : 0;
	float m = -INFINITY, l = 0, acc[DNDL];
#pragma unroll
	for (int e = 0; e < DNDL; e++)
		acc[e] = 0;
	for (int64_t kb = first; kb < rows; kb += DK) {
		const int nk = (int)min((int64_t)DK, rows - kb);
		/* scores: warp w scores keys w, w + DWARPS, ... */
		for (int j = warp; j < nk; j += DWARPS) {
			const int64_t at = ((kb + j) * a.Hkv + kh) * a.hd;
			float s = 0;
			for (int d = lane; d < a.hd; d += 32)
				s += qs[d] * mgc_ld(k, at + d);
			s = dwarp_sum(s);
			if (lane == 0)
				ps[j] = a.cap > 0 ? a.cap * tanhf(s * a.scale /
								  a.cap)
						  : s * a.scale;
		}
		__syncthreads();
		const float mine =
			threadIdx.x < nk ? ps[threadIdx.x] : -INFINITY;
		const float mn = fmaxf(m, block_reduce<true>(mine, red));
		const float pe = threadIdx.x < nk ? expf(mine - mn) : 0.0f;
		const float al = expf(m - mn); /* 0 on the first chunk */
		__syncthreads();
		if (threadIdx.x < nk)
			ps[threadIdx.x] = pe;
		l = l * al + block_reduce<false>(pe, red);
		m = mn;
		/* block_reduce synchronised: every p of the chunk is in ps */
#pragma unroll
		for (int e = 0; e < DNDL; e++) {
			const int d = threadIdx.x + DT * e;
			acc[e] *= al;
			if (d >= a.hd)
				continue;
			float s = 0;
			for (int j = 0; j < nk; j++)
				s += ps[j] *
				     mgc_ld(v,
					    ((kb + j) * a.Hkv + kh) * a.hd + d);
			acc[e] += s;
		}
		__syncthreads(); /* ps is rewritten by the next chunk */
	}
#pragma unroll
	for (int e = 0; e < DNDL; e++) {
		const int d = threadIdx.x + DT * e;
		if (d < a.hd)
			o[qat + d] = mgc_t<T>::from(acc[e] / l);
	}
}

template <typename T>
void decode_run(cudaStream_t st, const dec_dims &a, const void *q,
		const void *k, const void *v, void *o)
{
	const size_t sm = (size_t)(a.hd + DK) * sizeof(float);
	const dim3 grid((unsigned)a.n, (unsigned)a.Hq);
	decode_k<T><<<grid, DT, sm, st>>>(a, (const T *)q, (const T *)k,
					  (const T *)v, (T *)o);
}
} // namespace

extern "C" int
mg_cuda_attention_decode(struct mg_ctx *ctx, const struct mg_tensor *q,
			 const struct mg_tensor *k_cache,
			 const struct mg_tensor *v_cache, int64_t pos,
			 const struct mg_attn_opts *opts, struct mg_tensor *o)
{
	static const char op[] = "attention_decode";
	dec_dims a;
	a.n = (int)q->shape[0];
	a.Hq = (int)q->shape[1];
	a.Hkv = (int)k_cache->shape[1];
	a.hd = (int)q->shape[2];
	a.pos = pos;
	a.scale = (float)opts->scale;
	a.window = opts->window;
	a.cap = (float)opts->softcap;
	if (a.hd > DT * DNDL)
		return mg_error("%s: head dimension %d > %d is not supported "
				"on CUDA",
				op, a.hd, DT * DNDL);
	if (q->shape[0] > (1u << 31) - 1 || q->shape[1] > 65535)
		return mg_error("%s: shape too large for the CUDA kernel", op);
	if (mg_tensor_numel(q) == 0)
		return 0;
	cudaStream_t st = mgc_stream(ctx);
	switch (q->dtype) {
	case MG_F32:
		decode_run<float>(st, a, q->data, k_cache->data, v_cache->data,
				  o->data);
		break;
	case MG_F16:
		decode_run<mgc_f16>(st, a, q->data, k_cache->data,
				    v_cache->data, o->data);
		break;
	case MG_BF16:
		decode_run<mgc_bf16>(st, a, q->data, k_cache->data,
				     v_cache->data, o->data);
		break;
	default:
		return mgc_bad_dtype(op, q->dtype);
	}
	return mgc_check_launch(op);
}
