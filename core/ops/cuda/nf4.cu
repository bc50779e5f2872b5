/*
 * nf4.cu - the CUDA twin of mg_op_nf4_dequantize: decode an NF4 blob
 * (mg/nf4.h) into F32, F16 or BF16. It runs before every frozen GEMM of a
 * QLoRA step, so it is written to be memory-bound: one thread per 16 bytes
 * of codes (32 elements, half an absmax block, so one scale per thread),
 * one 128-bit load, then 128-bit stores; the code table and the nested map
 * sit in shared memory, copied from a __grid_constant__ kernel parameter
 * (no allocation, no symbol upload: graph-capturable on any device).
 *
 * The arithmetic is the host's, rounding for rounding: the block absmax
 * map[q] * nested + offset with two roundings (__fmul_rn, __fadd_rn: no
 * fused multiply-add), then code * absmax, then the output dtype's
 * round-to-nearest-even. So the CPU twin is a bitwise oracle.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_quant.h"

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

} // namespace

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
