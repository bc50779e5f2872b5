/*
 * cuda_quant.h - CUDA twins of the quantized-storage ops
 * (include/mg/ops_quant.h), called by core/ops/quant.c after its argument
 * checks with the public ops' arguments. Queued on dev->stream, no host
 * synchronisation, no allocation (graph-capturable).
 */
#ifndef MG_CUDA_QUANT_H
#define MG_CUDA_QUANT_H

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (F32, F16 or BF16) = the values of the NF4 tensor w. */
MG_EXPORT int mg_cuda_nf4_dequantize(struct mg_ctx *ctx,
				     const struct mg_tensor *w,
				     struct mg_tensor *out);
/* w (NF4) = x (F32, F16 or BF16) quantized, bytes as the host's. */
MG_EXPORT int mg_cuda_nf4_quantize(struct mg_ctx *ctx,
				   const struct mg_tensor *x,
				   struct mg_tensor *w);
MG_EXPORT int mg_cuda_fq_int4_weight(struct mg_ctx *ctx,
				     const struct mg_tensor *w, int64_t group,
				     const struct mg_tensor *dy,
				     struct mg_tensor *out);
MG_EXPORT int mg_cuda_fq_int8_token(struct mg_ctx *ctx,
				    const struct mg_tensor *x,
				    const struct mg_tensor *dy,
				    struct mg_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
