/*
 * cuda_gemm.h - the one cublasGemmEx call the CUDA ops share (linear.cu
 * defines it): the linear ops' products and the 1x1 convolutions'
 * (pointwise.cu), so the scalars, the operation flags and the error
 * message are written once.
 */
#ifndef MG_CUDA_GEMM_H
#define MG_CUDA_GEMM_H

#include <cublas_v2.h>
#include <stdbool.h>
#include <stdint.h>

struct mg_ctx;

/* Column-major C = op(A) op(B) + beta C, every operand of type data (C
 * too), computed as compute (F64 scalars when f64); 0, or -1 after
 * mg_error() naming op and the sizes. */
#ifdef __cplusplus
extern "C"
#endif
	int
	mgc_gemm(struct mg_ctx *ctx, const char *op, cudaDataType_t data,
		 cublasComputeType_t compute, bool f64, bool ta, bool tb,
		 int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
		 const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

#endif
