/*
 * activation_impl.h - element-wise kernels (ReLU6, residual add) for
 * element type T (FN(name) suffix), instantiated by activation.c.
 */

static void FN(relu6_fwd)(const T *x, T *y, int64_t n, int nt)
{
#pragma omp parallel for simd num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		y[i] = MGO_RELU6(x[i]);
}

static void FN(relu6_bwd)(const T *y, const T *dy, T *dx, int64_t n, int nt)
{
#pragma omp parallel for simd num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const T d = dy[i];
		dx[i] = MGO_RELU6_PASS(y[i]) ? d : (T)0;
	}
}

static void FN(add)(const T *a, const T *b, T *y, int64_t n, int nt)
{
#pragma omp parallel for simd num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

#undef T
#undef FN
