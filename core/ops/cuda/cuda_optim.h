/*
 * cuda_optim.h - CUDA twins of the optimizer ops in include/mg/optim.h
 * (gradient sum of squares, norm/clip/skip finalisation, SGD and AdamW
 * updates with optional low-precision copies). Written by the lead
 * alongside the graph-capturable optimizer API; other CUDA ops live in
 * the files next to it.
 */
#ifndef MG_CUDA_OPTIM_H
#define MG_CUDA_OPTIM_H

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

int mg_cuda_optim_sumsq(struct mg_ctx *ctx, struct mg_optim_vals *vals,
			enum mg_dtype dt, const void *grad, int64_t n);
int mg_cuda_optim_finalize(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
			   struct mg_optim_vals *vals);
int mg_cuda_optim_update(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
			 const struct mg_optim_vals *vals,
			 const struct mg_optim_slice *s);
/* Convert n elements between float dtypes (F32/F64/F16/BF16). */
int mg_cuda_convert(struct mg_ctx *ctx, void *dst, enum mg_dtype dt,
		    const void *src, enum mg_dtype st, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
