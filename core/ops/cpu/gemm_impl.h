/*
 * gemm_impl.h - the GEMM wrapper for element type T (FN(name) suffix) and
 * its OpenBLAS routine BLAS, instantiated by gemm.c.
 */

void FN(mgo_gemm)(int nt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
		  T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,
		  T beta, T *c, int64_t ldc)
{
	const enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
	const enum CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
	const int dim = split_dim(nt, m, n, k);
	if (!dim) {
		BLAS(CblasRowMajor, TA, TB, (blasint)m, (blasint)n, (blasint)k,
		     alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
		     (blasint)ldc);
		return;
	}
	const int64_t len = dim == 'n' ? n : m;
	const int64_t nblk = (len + GEMM_BLOCK - 1) / GEMM_BLOCK;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t bi = 0; bi < nblk; bi++) {
		const int64_t o = bi * GEMM_BLOCK;
		const int64_t l = len - o < GEMM_BLOCK ? len - o : GEMM_BLOCK;
		if (dim == 'n') /* columns o.. of op(B) and of C */
			BLAS(CblasRowMajor, TA, TB, (blasint)m, (blasint)l,
			     (blasint)k, alpha, a, (blasint)lda,
			     tb ? b + o * ldb : b + o, (blasint)ldb, beta,
			     c + o, (blasint)ldc);
		else /* rows o.. of op(A) and of C */
			BLAS(CblasRowMajor, TA, TB, (blasint)l, (blasint)n,
			     (blasint)k, alpha, ta ? a + o : a + o * lda,
			     (blasint)lda, b, (blasint)ldb, beta, c + o * ldc,
			     (blasint)ldc);
	}
}

#undef T
#undef FN
#undef BLAS
