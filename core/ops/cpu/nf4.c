/*
 * nf4.c - the CPU twins of mg_op_nf4_dequantize (the host decoder of
 * runtime/nf4.c one block at a time, each value rounded to the output
 * dtype to nearest even) and mg_op_nf4_quantize (the host quantizer):
 * the oracles of the CUDA kernels, bit for bit.
 */
#include <stdlib.h>

#include "runtime/nf4_impl.h"
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
	const int64_t per = 16;	   /* blocks per task: 1024 elements */
#pragma omp parallel for schedule(static)                                      \
	num_threads(threads) if (nblocks > 256)
	for (int64_t t = 0; t < (nblocks + per - 1) / per; t++) {
		const int64_t i0 = t * per * MG_NF4_BLOCK;
		if (dt == MG_F32) {
			mg_nf4_decode_blocks((float *)out->data + i0, w->data,
					     n, t * per, per);
			continue;
		}
		float v[16 * MG_NF4_BLOCK];
		const int64_t len =
			mg_nf4_decode_blocks(v, w->data, n, t * per, per);
		uint16_t *o = (uint16_t *)out->data + i0;
		for (int64_t i = 0; i < len; i++)
			o[i] = dt == MG_F16 ? mg_float_to_half(v[i])
					    : mg_float_to_bf16(v[i]);
	}
	return 0;
}

int mg_cpu_nf4_quantize(struct mg_ctx *ctx, const struct mg_tensor *x,
			struct mg_tensor *w)
{
	(void)ctx;
	const int64_t n = mg_tensor_numel(x);
	if (x->dtype == MG_F32)
		return mg_nf4_quantize_host(w->data, x->data, n);
	float *f = malloc((size_t)n * sizeof *f);
	if (!f)
		return mg_error("nf4_quantize: out of memory (%lld values)",
				(long long)n);
	const uint16_t *h = x->data;
	for (int64_t i = 0; i < n; i++)
		f[i] = x->dtype == MG_F16 ? mg_half_to_float(h[i])
					  : mg_bf16_to_float(h[i]);
	int rc = mg_nf4_quantize_host(w->data, f, n);
	free(f);
	return rc;
}
