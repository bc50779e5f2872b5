/*
 * linear_impl.h - fully connected layer kernels for element type T
 * (FN(name) suffix), instantiated by linear.c. x [rows, in], w [out, in];
 * nt threads for the bias loops, gt for the GEMMs.
 */

/* This type's GEMM wrapper (gemm.c). */
#define GEMM FN(mgo_gemm)

/* y = (or += when y_add) x w^T + b */
static void FN(linear_fwd)(const T *x, const T *w, const T *b, T *y, bool y_add,
			   int64_t rows, int64_t in, int64_t out, int nt,
			   int gt)
{
	GEMM(gt, false, true, rows, out, in, 1, x, in, w, in, y_add ? 1 : 0, y,
	     out);
	if (!b)
		return;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < rows; r++)
		for (int64_t o = 0; o < out; o++)
			y[r * out + o] += b[o];
}

static void FN(linear_bwd)(const T *x, const T *w, const T *dy, T *dx,
			   bool dx_add, T *dw, T *db, int64_t rows, int64_t in,
			   int64_t out, int nt, int gt)
{
	if (dx) /* dx [rows, in] = (or +=) dy [rows, out] w [out, in] */
		GEMM(gt, false, false, rows, in, out, 1, dy, out, w, in,
		     dx_add ? 1 : 0, dx, in);
	if (dw) /* dw [out, in] += dy^T x */
		GEMM(gt, true, false, out, in, rows, 1, dy, out, x, in, 1, dw,
		     in);
	if (!db)
		return;
		/* Column sums of dy: each output feature summed over rows in order
	 * by one thread. */
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t o = 0; o < out; o++) {
		double s = 0;
		for (int64_t r = 0; r < rows; r++)
			s += dy[r * out + o];
		db[o] += (T)s;
	}
}

#undef GEMM
#undef T
#undef FN
