/*
 * gemm.c - the GEMM wrapper every CPU op uses (cpu_ops.h).
 *
 * OpenBLAS's pthread build keeps its own threads; they spin between calls
 * and compete with the ops' OpenMP threads for the cores. When OpenBLAS is
 * set to one thread, this wrapper parallelises a large GEMM itself: C is
 * cut into fixed blocks of rows or columns (a partition that depends only
 * on the shape, so results do not depend on the thread count) and the
 * OpenMP threads run one single-threaded OpenBLAS call per block.
 */
#include "cpu_ops.h"

/* Rows or columns of C per block, and the least work worth splitting. */
#define GEMM_BLOCK 128
#define GEMM_SPLIT_MIN (1 << 20)

/* Split along n (columns of C) or m (rows)? 0: do not split. */
static int split_dim(int nt, int64_t m, int64_t n, int64_t k)
{
	if (nt < 2 || m * n * k < GEMM_SPLIT_MIN ||
	    openblas_get_num_threads() != 1)
		return 0;
	if (n >= 2 * GEMM_BLOCK && n >= m)
		return 'n';
	if (m >= 2 * GEMM_BLOCK)
		return 'm';
	if (n >= 2 * GEMM_BLOCK)
		return 'n';
	return 0;
}

#define T float
#define FN(n) n##_f32
#define BLAS cblas_sgemm
#include "gemm_impl.h"
#define T double
#define FN(n) n##_f64
#define BLAS cblas_dgemm
#include "gemm_impl.h"
