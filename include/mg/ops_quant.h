/*
 * ops_quant.h - ops on quantized storage: decoding the NF4 blobs of
 * QLoRA's frozen weights (mg/nf4.h) into a float dtype, which runs before
 * every frozen GEMM of the forward and backward passes; and the fake
 * quantization of quantization-aware training (ABI 1.6), torchao's
 * int8-dynamic-activation / int4-weight scheme (mg/int4.h has the
 * formulas and the reference).
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

/*
 * Fake quantization (ABI 1.6), mg/int4.h's formulas, f32 arithmetic on
 * every device (so CPU and CUDA agree bit for bit). Tensors are F32, F64,
 * F16 or BF16 on ctx's device; outputs have the input's dtype and shape.
 * Queued on the context's stream, no allocation.
 *
 * mg_op_fq_int4_weight: out = w fake-quantized to int4, symmetric, one
 * scale per group of `group` elements of the last dimension (which
 * `group` must divide). out may alias w.
 */
MG_EXPORT int mg_op_fq_int4_weight(struct mg_ctx *ctx,
				   const struct mg_tensor *w, int64_t group,
				   struct mg_tensor *out);
/* The straight-through estimator of mg_op_fq_int4_weight: dw = dy where
 * w's code was inside [-8, 7] before clamping, 0 where it was clamped
 * (recomputed from w). dy and dw have w's shape and dtype; dw may alias
 * dy. */
MG_EXPORT int mg_op_fq_int4_weight_backward(struct mg_ctx *ctx,
					    const struct mg_tensor *w,
					    int64_t group,
					    const struct mg_tensor *dy,
					    struct mg_tensor *dw);
/* out = x fake-quantized to int8, asymmetric, one scale and zero point
 * per row (token) of the last dimension. out may alias x. */
MG_EXPORT int mg_op_fq_int8_token(struct mg_ctx *ctx, const struct mg_tensor *x,
				  struct mg_tensor *out);
/* Its straight-through estimator: dx = dy where x's code was inside
 * [-128, 127], else 0. dx may alias dy (not x). */
MG_EXPORT int mg_op_fq_int8_token_backward(struct mg_ctx *ctx,
					   const struct mg_tensor *x,
					   const struct mg_tensor *dy,
					   struct mg_tensor *dx);

#ifdef __cplusplus
}
#endif
#endif
