/*
 * ops_quant.h - ops on quantized storage: decoding the NF4 blobs of
 * QLoRA's frozen weights (mg/nf4.h) into a float dtype, which runs before
 * every frozen GEMM of the forward and backward passes.
 */
#ifndef MG_OPS_QUANT_H
#define MG_OPS_QUANT_H

#include "abi.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * out = the values of w. w is an MG_NF4 tensor (data: its blob,
 * mg_nf4_layout(numel) bytes, 4-byte aligned; shape: the logical shape);
 * out is F32, F16 or BF16 with the same number of elements (any shape),
 * on the same device. Every device computes the same f32 values (nf4.h's formula),
 * rounded to out's dtype to nearest even, so results are bitwise equal
 * across devices. Queued on the context's stream, no allocation.
 */
MG_EXPORT int mg_op_nf4_dequantize(struct mg_ctx *ctx,
				   const struct mg_tensor *w,
				   struct mg_tensor *out);

/*
 * w = x quantized to NF4, the bytes mg_nf4_quantize_host writes for the
 * f32 values of x (its whole blob, padding 0). x is F32, F16 or BF16;
 * w an MG_NF4 tensor of the same number of elements (blob 4-byte
 * aligned), on the same device. x must be finite: the CPU refuses NaN
 * and infinity, the CUDA kernels do not look (their codes are then
 * unspecified). On CUDA it uses the ops' scratch workspace (5 bytes per
 * 64 elements), queued on the context's stream.
 */
MG_EXPORT int mg_op_nf4_quantize(struct mg_ctx *ctx, const struct mg_tensor *x,
				 struct mg_tensor *w);

#ifdef __cplusplus
}
#endif
#endif
