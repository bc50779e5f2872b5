/*
 * nf4.cu - the CUDA twins of mg_op_nf4_dequantize and mg_op_nf4_quantize.
 *
 * Dequantize: decode an NF4 blob (mg/nf4.h) into F32, F16 or BF16. It
 * runs before every frozen GEMM of a QLoRA step, so it is written to be
 * memory-bound: one thread per 16 bytes of codes (32 elements, half an
 * absmax block, so one scale per thread), one 128-bit load, then 128-bit
 * stores; the code table and the nested map sit in shared memory, copied
 * from a __grid_constant__ kernel parameter (no allocation, no symbol
 * upload: graph-capturable on any device).
 *
 * The arithmetic is the host's, rounding for rounding: the block absmax
 * map[q] * nested + offset with two roundings (__fmul_rn, __fadd_rn: no
 * fused multiply-add), then code * absmax, then the output dtype's
 * round-to-nearest-even. So the CPU twin is a bitwise oracle.
 *
 * Quantize: the host's decisions in three kernels, so the bytes equal
 * mg_nf4_quantize_host's: one warp per 64-element block (absmax by warp
 * max, codes by the same threshold search, absmax to scratch); the f64
 * partial sums of the offset in nf4_impl.h's order; one 256-thread block
 * per nested block (offset, nested absmax, bitsandbytes' 8-bit search).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_quant.h"
#include "runtime/nf4_impl.h"

namespace
{

/* The two lookup tables, passed by value with each launch (1088 bytes). */
struct nf4_tables {
	float map[256];
	float code[16];
};

/* Elements per thread: 16 bytes of codes. */
constexpr int CHUNK = 32;
constexpr int THREADS = 256;

/* Store the 32 decoded values v of chunk c: 128-bit stores when the chunk
 * is whole and out 16-byte aligned, else element by element up to n. */
template <typename T>
__device__ __forceinline__ void store_chunk(T *out, int64_t c, int64_t n,
					    const float *v, bool vec)
{
	const int64_t e0 = c * CHUNK;
	if (vec && e0 + CHUNK <= n) {
		constexpr int per = 16 / sizeof(T);
		uint4 *dst = reinterpret_cast<uint4 *>(out + e0);
#pragma unroll
		for (int s = 0; s < CHUNK / per; s++) {
			uint4 raw;
			T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
			for (int k = 0; k < per; k++)
				e[k] = mgc_t<T>::from(v[s * per + k]);
			dst[s] = raw;
		}
		return;
	}
	for (int k = 0; k < CHUNK && e0 + k < n; k++)
		out[e0 + k] = mgc_t<T>::from(v[k]);
}

/*
 * Grid-stride over chunks. vec: blob and out are 16-byte aligned, so the
 * codes are read as one uint4 (for the last chunk too: the blob extends
 * past the codes to a multiple of 256 bytes) and whole chunks are stored
 * as vectors; otherwise bytes are read one by one within the codes.
 */
template <typename T>
__global__ void __launch_bounds__(THREADS)
	nf4_dequant(const __grid_constant__ nf4_tables tab,
		    const unsigned char *__restrict__ blob, T *__restrict__ out,
		    int64_t n, int64_t nchunks, int64_t codes_bytes,
		    int64_t off_absmax, int64_t off_nested, int64_t off_offset,
		    bool vec)
{
	__shared__ float smap[256];
	__shared__ float scode[16];
	for (int i = threadIdx.x; i < 256; i += blockDim.x)
		smap[i] = tab.map[i];
	if (threadIdx.x < 16)
		scode[threadIdx.x] = tab.code[threadIdx.x];
	__syncthreads();

	const float offset =
		__ldg(reinterpret_cast<const float *>(blob + off_offset));
	const float *nested =
		reinterpret_cast<const float *>(blob + off_nested);
	for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     c < nchunks; c += (int64_t)gridDim.x * blockDim.x) {
		const int64_t b = c >> 1; /* absmax block: 64 elements */
		const float a =
			__fadd_rn(__fmul_rn(smap[__ldg(blob + off_absmax + b)],
					    __ldg(nested + (b >> 8))),
				  offset);
		uint4 raw;
		if (vec) {
			raw = __ldg(reinterpret_cast<const uint4 *>(blob) + c);
		} else {
			unsigned char *r =
				reinterpret_cast<unsigned char *>(&raw);
			for (int k = 0; k < 16; k++)
				r[k] = c * 16 + k < codes_bytes
					       ? __ldg(blob + c * 16 + k)
					       : 0;
		}
		const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
		float v[CHUNK];
#pragma unroll
		for (int k = 0; k < 16; k++) {
			/* byte k of the chunk: little-endian within words */
			const uint32_t byte =
				(w[k >> 2] >> (8 * (k & 3))) & 0xffu;
			v[2 * k] = __fmul_rn(scode[byte >> 4], a);
			v[2 * k + 1] = __fmul_rn(scode[byte & 15u], a);
		}
		store_chunk(out, c, n, v, vec);
	}
}

template <typename T>
int launch(struct mg_ctx *ctx, const nf4_tables &tab, const struct mg_tensor *w,
	   struct mg_tensor *out)
{
	const int64_t n = mg_tensor_numel(w);
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	const int64_t nchunks = (n + CHUNK - 1) / CHUNK;
	const bool vec = mgc_aligned16(w->data) && mgc_aligned16(out->data);
	nf4_dequant<T>
		<<<mgc_blocks(nchunks, THREADS), THREADS, 0, mgc_stream(ctx)>>>(
			tab, static_cast<const unsigned char *>(w->data),
			static_cast<T *>(out->data), n, nchunks, (n + 1) / 2,
			(int64_t)l.absmax, (int64_t)l.nested_absmax,
			(int64_t)l.offset, vec);
	return mgc_check_launch("nf4_dequantize");
}

/* ---- quantize ---- */

struct nf4_qtables {
	float map[256];
	float thr[16]; /* 15 used */
};

/* The NF4 code of x: thresholds strictly below it (runtime/nf4.c). */
__device__ __forceinline__ unsigned nf4_code(const float *thr, float x)
{
	unsigned c = (unsigned)(x > thr[7]) << 3;
	c += (unsigned)(x > thr[c + 3]) << 2;
	c += (unsigned)(x > thr[c + 1]) << 1;
	c += (unsigned)(x > thr[c]);
	return c;
}

/* bitsandbytes' 8-bit search over the sorted map (runtime/nf4.c's
 * nested_quant, the same steps). */
__device__ __forceinline__ unsigned nested_index(const float *map, float x)
{
	int p = 127, lo_p = 0, hi_p = 255;
	float lo = -1.0f, hi = 1.0f, v = map[p];
	for (int i = 64; i > 0; i >>= 1) {
		if (x > v) {
			lo_p = p;
			lo = v;
			p += i;
		} else {
			hi_p = p;
			hi = v;
			p -= i;
		}
		v = map[p];
	}
	if (hi_p == 255)
		hi = map[255];
	if (lo_p == 0)
		lo = map[0];
	if (x > v)
		return x > __fmul_rn(__fadd_rn(hi, v), 0.5f) ? (unsigned)hi_p
							     : (unsigned)p;
	return x < __fmul_rn(__fadd_rn(lo, v), 0.5f) ? (unsigned)lo_p
						     : (unsigned)p;
}

/* One warp per NF4 block: lane l takes elements 2l and 2l + 1, writes
 * their code byte; lane 0 the block's absmax to scratch. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
	nf4_quant_blocks(const __grid_constant__ nf4_qtables tab,
			 const T *__restrict__ x,
			 unsigned char *__restrict__ codes,
			 float *__restrict__ absmax, int64_t n, int64_t nblocks)
{
	__shared__ float thr[16];
	if (threadIdx.x < 16)
		thr[threadIdx.x] = tab.thr[threadIdx.x];
	__syncthreads();
	const int lane = threadIdx.x & 31;
	const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
	for (int64_t b = (int64_t)blockIdx.x * (blockDim.x >> 5) +
			 (threadIdx.x >> 5);
	     b < nblocks; b += warps) {
		const int64_t e = b * MG_NF4_BLOCK + 2 * lane;
		const bool h0 = e < n, h1 = e + 1 < n;
		const float x0 = h0 ? mgc_ld(x, e) : 0.0f;
		const float x1 = h1 ? mgc_ld(x, e + 1) : 0.0f;
		float m = fmaxf(fabsf(x0), fabsf(x1));
		for (int o = 16; o > 0; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		unsigned c0 = 7, c1 = 7; /* a zero block: code 7 (0.0) */
		if (m > 0) {
			const float r = __fdiv_rn(1.0f, m);
			c0 = nf4_code(thr, __fmul_rn(x0, r));
			c1 = nf4_code(thr, __fmul_rn(x1, r));
		}
		if (!h1)
			c1 = 0; /* odd n: the last low nibble */
		if (h0)
			codes[b * (MG_NF4_BLOCK / 2) + lane] =
				(unsigned char)(c0 << 4 | c1);
		if (lane == 0)
			absmax[b] = m;
	}
}

/* The offset's partial sums: thread c adds run c of MG_NF4_SUM_CHUNK
 * absmax values in order, in f64. */
__global__ void nf4_sum_runs(const float *__restrict__ absmax, int64_t nblocks,
			     double *__restrict__ part, int64_t nruns)
{
	const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= nruns)
		return;
	const int64_t b0 = c * MG_NF4_SUM_CHUNK;
	const int64_t b1 = b0 + MG_NF4_SUM_CHUNK < nblocks
				   ? b0 + MG_NF4_SUM_CHUNK
				   : nblocks;
	double s = 0;
	for (int64_t b = b0; b < b1; b++)
		s = __dadd_rn(s, (double)absmax[b]);
	part[c] = s;
}

/* One 256-thread block per nested block: the offset (every block adds the
 * partial sums in order), nested absmax = block max of |absmax - offset|,
 * each index by the 8-bit search of (absmax - offset) * (1 / nested). */
__global__ void __launch_bounds__(MG_NF4_NESTED_BLOCK)
	nf4_quant_nested(const __grid_constant__ nf4_qtables tab,
			 const float *__restrict__ absmax,
			 const double *__restrict__ part, int64_t nruns,
			 int64_t nblocks, unsigned char *__restrict__ qabs,
			 float *__restrict__ nested, float *__restrict__ offset)
{
	__shared__ float map[256];
	__shared__ float red[MG_NF4_NESTED_BLOCK / 32];
	__shared__ float s_off;
	map[threadIdx.x] = tab.map[threadIdx.x];
	if (threadIdx.x == 0) {
		double t = 0;
		for (int64_t c = 0; c < nruns; c++)
			t = __dadd_rn(t, part[c]);
		s_off = __double2float_rn(__ddiv_rn(t, (double)nblocks));
	}
	__syncthreads();
	const float off = s_off;
	const int64_t b =
		(int64_t)blockIdx.x * MG_NF4_NESTED_BLOCK + threadIdx.x;
	const bool have = b < nblocks;
	const float v = have ? __fsub_rn(absmax[b], off) : 0.0f;
	float m = fabsf(v);
	for (int o = 16; o > 0; o >>= 1)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = m;
	__syncthreads();
	m = red[0];
	for (int w = 1; w < MG_NF4_NESTED_BLOCK / 32; w++)
		m = fmaxf(m, red[w]);
	/* m = 0: the reciprocal is inf, 0 * inf NaN, index 0 (as the host) */
	const float r = __fdiv_rn(1.0f, m);
	if (have)
		qabs[b] = (unsigned char)nested_index(map, __fmul_rn(v, r));
	if (threadIdx.x == 0) {
		nested[blockIdx.x] = m;
		if (blockIdx.x == 0)
			*offset = off;
	}
}

template <typename T>
int quantize(struct mg_ctx *ctx, const nf4_qtables &tab,
	     const struct mg_tensor *x, struct mg_tensor *w)
{
	const int64_t n = mg_tensor_numel(x);
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	const int64_t nruns =
		(l.nblocks + MG_NF4_SUM_CHUNK - 1) / MG_NF4_SUM_CHUNK;
	const size_t abytes = ((size_t)l.nblocks * 4 + 15) / 16 * 16;
	char *ws = (char *)mgc_scratch(ctx, abytes + (size_t)nruns * 8);
	if (!ws)
		return -1;
	float *absmax = reinterpret_cast<float *>(ws);
	double *part = reinterpret_cast<double *>(ws + abytes);
	unsigned char *blob = static_cast<unsigned char *>(w->data);
	cudaStream_t st = mgc_stream(ctx);
	/* the gap after the absmax bytes, nested, offset and padding */
	const size_t tail = l.absmax + (size_t)l.nblocks;
	if (cudaMemsetAsync(blob + tail, 0, l.bytes - tail, st) != cudaSuccess)
		return mgc_check_launch("nf4_quantize");
	const int64_t warps = THREADS / 32;
	nf4_quant_blocks<T>
		<<<mgc_blocks(l.nblocks, (int)warps), THREADS, 0, st>>>(
			tab, static_cast<const T *>(x->data), blob + l.codes,
			absmax, n, l.nblocks);
	nf4_sum_runs<<<(unsigned)((nruns + 127) / 128), 128, 0, st>>>(
		absmax, l.nblocks, part, nruns);
	nf4_quant_nested<<<(unsigned)l.nnested, MG_NF4_NESTED_BLOCK, 0, st>>>(
		tab, absmax, part, nruns, l.nblocks, blob + l.absmax,
		reinterpret_cast<float *>(blob + l.nested_absmax),
		reinterpret_cast<float *>(blob + l.offset));
	return mgc_check_launch("nf4_quantize");
}

} // namespace

extern "C" int mg_cuda_nf4_quantize(struct mg_ctx *ctx,
				    const struct mg_tensor *x,
				    struct mg_tensor *w)
{
	nf4_qtables tab;
	const float *map = mg_nf4_nested_map();
	for (int i = 0; i < 256; i++)
		tab.map[i] = map[i];
	for (int i = 0; i < 15; i++)
		tab.thr[i] = mg_nf4_threshold[i];
	tab.thr[15] = 2.0f; /* never indexed */
	switch (x->dtype) {
	case MG_F32:
		return quantize<float>(ctx, tab, x, w);
	case MG_F16:
		return quantize<mgc_f16>(ctx, tab, x, w);
	case MG_BF16:
		return quantize<mgc_bf16>(ctx, tab, x, w);
	default:
		return mgc_bad_dtype("nf4_quantize", x->dtype);
	}
}

extern "C" int mg_cuda_nf4_dequantize(struct mg_ctx *ctx,
				      const struct mg_tensor *w,
				      struct mg_tensor *out)
{
	nf4_tables tab;
	const float *map = mg_nf4_nested_map();
	for (int i = 0; i < 256; i++)
		tab.map[i] = map[i];
	for (int i = 0; i < 16; i++)
		tab.code[i] = mg_nf4_code[i];
	switch (out->dtype) {
	case MG_F32:
		return launch<float>(ctx, tab, w, out);
	case MG_F16:
		return launch<mgc_f16>(ctx, tab, w, out);
	case MG_BF16:
		return launch<mgc_bf16>(ctx, tab, w, out);
	default:
		return mgc_bad_dtype("nf4_dequantize", out->dtype);
	}
}
