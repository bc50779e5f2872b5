/*
 * cpu_quant.h - the CPU reference kernels of the quantized-storage ops
 * (include/mg/ops_quant.h), called by core/ops/quant.c after its argument
 * checks with the public ops' arguments.
 */
#ifndef MG_CPU_QUANT_H
#define MG_CPU_QUANT_H

#include "mg/mg.h"

/* out (F32, F16 or BF16) = the values of the NF4 tensor w. */
int mg_cpu_nf4_dequantize(struct mg_ctx *ctx, const struct mg_tensor *w,
			  struct mg_tensor *out);
/* w (NF4) = x (F32, F16 or BF16) quantized on the host. */
int mg_cpu_nf4_quantize(struct mg_ctx *ctx, const struct mg_tensor *x,
			struct mg_tensor *w);
/* Fake quantization (mg/int4.h): dy NULL writes the fake-quantized
 * values of x to out; else out = dy times the straight-through mask. */
int mg_cpu_fq_int4_weight(struct mg_ctx *ctx, const struct mg_tensor *w,
			  int64_t group, const struct mg_tensor *dy,
			  struct mg_tensor *out);
int mg_cpu_fq_int8_token(struct mg_ctx *ctx, const struct mg_tensor *x,
			 const struct mg_tensor *dy, struct mg_tensor *out);

#endif
