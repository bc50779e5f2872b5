/*
 * pool_impl.h - global average pooling kernels for element type T
 * (FN(name) suffix), instantiated by pool.c.
 */

static void FN(gap_fwd)(const T *x, T *y, int64_t planes, int64_t HW, int nt)
{
	const double inv = 1.0 / (double)HW;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t p = 0; p < planes; p++) {
		const T *xp = x + p * HW;
		double s = 0;
#pragma omp simd reduction(+ : s)
		for (int64_t q = 0; q < HW; q++)
			s += xp[q];
		y[p] = (T)(s * inv);
	}
}

static void FN(gap_bwd)(const T *dy, T *dx, int64_t planes, int64_t HW, int nt)
{
	const double inv = 1.0 / (double)HW;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t p = 0; p < planes; p++) {
		const T v = (T)(dy[p] * inv);
		T *dxp = dx + p * HW;
#pragma omp simd
		for (int64_t q = 0; q < HW; q++)
			dxp[q] = v;
	}
}

#undef T
#undef FN
