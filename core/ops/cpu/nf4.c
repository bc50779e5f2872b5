/*
 * nf4.c - the CPU twin of mg_op_nf4_dequantize: the host decoder of
 * runtime/nf4.c one block at a time, each value rounded to the output
 * dtype to nearest even (the oracle of the CUDA kernel, bit for bit).
 */
#include "runtime/runtime.h"

#include "cpu_quant.h"

int mg_cpu_nf4_dequantize(struct mg_ctx *ctx, const struct mg_tensor *w,
			  struct mg_tensor *out)
{
	const int64_t n = mg_tensor_numel(w);
	const int64_t nblocks = mg_nf4_layout(n).nblocks;
	const enum mg_dtype dt = out->dtype;
	const int threads = ctx->dev->threads > 0 ? ctx->dev->threads : 1;
	(void)mg_nf4_nested_map(); /* built before the threads start */
#pragma omp parallel for schedule(static)                                      \
	num_threads(threads) if (nblocks > 256)
	for (int64_t b = 0; b < nblocks; b++) {
		float v[MG_NF4_BLOCK];
		const int64_t i0 = b * MG_NF4_BLOCK;
		const int len = mg_nf4_decode_block(v, w->data, n, b);
		if (dt == MG_F32) {
			float *o = (float *)out->data + i0;
			for (int i = 0; i < len; i++)
				o[i] = v[i];
		} else {
			uint16_t *o = (uint16_t *)out->data + i0;
			for (int i = 0; i < len; i++)
				o[i] = dt == MG_F16 ? mg_float_to_half(v[i])
						    : mg_float_to_bf16(v[i]);
		}
	}
	return 0;
}
