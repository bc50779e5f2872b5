/*
 * conv_impl.h - GEMM convolution kernels, instantiated by conv.c for each
 * element type T with names FN(name). Not a normal header: it is included
 * once per type and undefines T and FN at its end.
 *
 * Samples are processed in chunks of nb: the chunk's im2col matrix
 * col [C*kh*kw, nb*OH*OW] (row (c, i, j), column (sample, oh, ow)) is
 * multiplied by each group's weights into [K, nb*OH*OW] and scattered to
 * NCHW. Batching samples into one GEMM keeps GEMMs wide when images are
 * small (7x7 maps have 49 columns per sample). When a chunk is one sample
 * the GEMM writes y directly and a 1x1 stride-1 conv reads x directly (no
 * im2col); on 1x1 maps the conv is a linear layer over the batch.
 */

/* This type's GEMM wrapper (gemm.c). */
#define GEMM FN(mgo_gemm)

/* col <- im2col of samples [s0, s0 + nb) of x; cols = nb * OHW. For a
 * pointwise conv that is a transpose of [nb, C, HW] into [C, nb * HW]. */
static void FN(im2col)(const struct mgo_conv_geom *g, const T *x, int64_t s0,
		       int64_t nb, T *col, int nt)
{
	const int64_t cols = nb * g->OHW;
	if (g->pointwise) {
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
		for (int64_t c = 0; c < g->C; c++)
			for (int64_t s = 0; s < nb; s++)
				memcpy(col + c * cols + s * g->HW,
				       x + ((s0 + s) * g->C + c) * g->HW,
				       (size_t)g->HW * sizeof(T));
		return;
	}
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
	for (int64_t s = 0; s < nb; s++) {
		for (int64_t c = 0; c < g->C; c++) {
			const T *xp = x + ((s0 + s) * g->C + c) * g->HW;
			for (int64_t i = 0; i < g->kh; i++) {
				int64_t ohl, ohh;
				mgo_tap_range(g->OH, g->H, g->sh, g->ph, i,
					      &ohl, &ohh);
				for (int64_t j = 0; j < g->kw; j++) {
					int64_t owl, owh;
					mgo_tap_range(g->OW, g->W, g->sw, g->pw,
						      j, &owl, &owh);
					T *d = col +
					       ((c * g->kh + i) * g->kw + j) *
						       cols +
					       s * g->OHW;
					for (int64_t oh = 0; oh < g->OH;
					     oh++, d += g->OW) {
						if (oh < ohl || oh >= ohh) {
							for (int64_t ow = 0;
							     ow < g->OW; ow++)
								d[ow] = 0;
							continue;
						}
						int64_t base =
							(oh * g->sh - g->ph +
							 i) * g->W -
							g->pw + j;
						for (int64_t ow = 0; ow < owl;
						     ow++)
							d[ow] = 0;
						if (g->sw == 1)
							for (int64_t ow = owl;
							     ow < owh; ow++)
								d[ow] = xp
									[base +
									 ow];
						else
							for (int64_t ow = owl;
							     ow < owh; ow++)
								d[ow] = xp
									[base +
									 ow * g->sw];
						for (int64_t ow = owh;
						     ow < g->OW; ow++)
							d[ow] = 0;
					}
				}
			}
		}
	}
}

/* dx[s0 .. s0 + nb) <- col2im(col): each input plane is zeroed and then
 * summed over the taps in a fixed order by one thread (deterministic). */
static void FN(col2im)(const struct mgo_conv_geom *g, const T *col, int64_t s0,
		       int64_t nb, T *dx, int nt)
{
	const int64_t cols = nb * g->OHW;
	if (g->pointwise) { /* the inverse transpose */
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
		for (int64_t s = 0; s < nb; s++)
			for (int64_t c = 0; c < g->C; c++)
				memcpy(dx + ((s0 + s) * g->C + c) * g->HW,
				       col + c * cols + s * g->HW,
				       (size_t)g->HW * sizeof(T));
		return;
	}
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
	for (int64_t s = 0; s < nb; s++) {
		for (int64_t c = 0; c < g->C; c++) {
			T *xp = dx + ((s0 + s) * g->C + c) * g->HW;
			for (int64_t q = 0; q < g->HW; q++)
				xp[q] = 0;
			for (int64_t i = 0; i < g->kh; i++) {
				int64_t ohl, ohh;
				mgo_tap_range(g->OH, g->H, g->sh, g->ph, i,
					      &ohl, &ohh);
				for (int64_t j = 0; j < g->kw; j++) {
					int64_t owl, owh;
					mgo_tap_range(g->OW, g->W, g->sw, g->pw,
						      j, &owl, &owh);
					const T *src =
						col +
						((c * g->kh + i) * g->kw + j) *
							cols +
						s * g->OHW;
					for (int64_t oh = ohl; oh < ohh; oh++) {
						const T *sr = src + oh * g->OW;
						int64_t base =
							(oh * g->sh - g->ph +
							 i) * g->W -
							g->pw + j;
						for (int64_t ow = owl; ow < owh;
						     ow++)
							xp[base + ow * g->sw] +=
								sr[ow];
					}
				}
			}
		}
	}
}

/* dst [K, nb*OHW] <- samples [s0, s0 + nb) of src [N, K, OHW]. */
static void FN(pack_rows)(const struct mgo_conv_geom *g, const T *src,
			  int64_t s0, int64_t nb, T *dst, int nt)
{
	const int64_t cols = nb * g->OHW;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
	for (int64_t k = 0; k < g->K; k++)
		for (int64_t s = 0; s < nb; s++)
			memcpy(dst + k * cols + s * g->OHW,
			       src + ((s0 + s) * g->K + k) * g->OHW,
			       (size_t)g->OHW * sizeof(T));
}

/* y[s0 .. s0 + nb) [K, OHW] <- tmp [K, nb*OHW] + bias. */
static void FN(unpack_rows)(const struct mgo_conv_geom *g, const T *tmp,
			    const T *bias, int64_t s0, int64_t nb, T *y, int nt)
{
	const int64_t cols = nb * g->OHW;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
	for (int64_t s = 0; s < nb; s++) {
		for (int64_t k = 0; k < g->K; k++) {
			const T *src = tmp + k * cols + s * g->OHW;
			T *dst = y + ((s0 + s) * g->K + k) * g->OHW;
			T b = bias ? bias[k] : (T)0;
#pragma omp simd
			for (int64_t q = 0; q < g->OHW; q++)
				dst[q] = src[q] + b;
		}
	}
}

/* Rows r of m [rows, ld] get v[r] added over their first n entries. */
static void FN(add_row_bias)(T *m, int64_t rows, int64_t n, int64_t ld,
			     const T *v, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < rows; r++)
		for (int64_t q = 0; q < n; q++)
			m[r * ld + q] += v[r];
}

/* acc[r] += sum of the first n entries of row r of m [rows, ld] (one
 * thread per row: a fixed order). */
static void FN(row_sums)(const T *m, int64_t rows, int64_t n, int64_t ld,
			 T *acc, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const T *p = m + r * ld;
		double s = 0;
#pragma omp simd reduction(+ : s)
		for (int64_t q = 0; q < n; q++)
			s += p[q];
		acc[r] += (T)s;
	}
}

static int FN(conv_fwd)(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
			int64_t nb, const T *x, const T *w, const T *bias, T *y,
			struct mg_buf *ws)
{
	const int nt = mgo_threads(ctx);
	if (g->pointwise && g->HW == 1 && g->groups == 1) {
		/* 1x1 maps: the conv is a linear layer, y [N, K] = x w^T. */
		GEMM(nt, false, true, g->N, g->K, g->C, 1, x, g->C, w, g->C, 0,
		     y, g->K);
		if (bias) {
			for (int64_t n = 0; n < g->N; n++)
				for (int64_t k = 0; k < g->K; k++)
					y[n * g->K + k] += bias[k];
		}
		return 0;
	}
	const bool need_col = !(g->pointwise && nb == 1);
	const bool need_tmp = nb > 1;
	const int64_t cols = nb * g->OHW;
	const int64_t ncol = need_col ? g->C * g->kh * g->kw * cols : 0;
	const int64_t ntmp = need_tmp ? g->K * cols : 0;
	struct mgo_scratch sc;
	T *col = NULL, *tmp = NULL;
	if (ncol + ntmp > 0) {
		col = mgo_scratch_get(ctx, &sc, ws,
				      (size_t)(ncol + ntmp) * sizeof(T));
		if (!col)
			return mg_error_prefix("conv2d workspace: ");
		tmp = col + ncol;
	}
	for (int64_t s0 = 0; s0 < g->N; s0 += nb) {
		const int64_t n = s0 + nb <= g->N ? nb : g->N - s0;
		const int64_t c = n * g->OHW;
		const T *B = x + s0 * g->C * g->HW;
		int64_t ldb = g->HW;
		if (need_col) {
			FN(im2col)(g, x, s0, n, col, nt);
			B = col;
			ldb = c;
		}
		T *C = need_tmp ? tmp : y + s0 * g->K * g->OHW;
		const int64_t ldc = need_tmp ? c : g->OHW;
		for (int64_t gr = 0; gr < g->groups; gr++)
			GEMM(nt, false, false, g->Kg, c, g->krow, 1,
			     w + gr * g->Kg * g->krow, g->krow,
			     B + gr * g->krow * ldb, ldb, 0,
			     C + gr * g->Kg * ldc, ldc);
		if (need_tmp)
			FN(unpack_rows)(g, tmp, bias, s0, n, y, nt);
		else if (bias)
			FN(add_row_bias)(C, g->K, g->OHW, g->OHW, bias, nt);
	}
	if (ncol + ntmp > 0)
		mgo_scratch_done(ctx, &sc);
	return 0;
}

static int FN(conv_bwd)(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
			int64_t nb, const T *x, const T *w, const T *dy, T *dx,
			T *dw, T *db, struct mg_buf *ws)
{
	const int nt = mgo_threads(ctx);
	if (g->pointwise && g->HW == 1 && g->groups == 1) {
		/* Linear-layer form: dy [N, K], x [N, C], w [K, C]. */
		if (dw)
			GEMM(nt, true, false, g->K, g->C, g->N, 1, dy, g->K, x,
			     g->C, 1, dw, g->C);
		if (db) {
			for (int64_t k = 0; k < g->K; k++) {
				double s = 0;
				for (int64_t n = 0; n < g->N; n++)
					s += dy[n * g->K + k];
				db[k] += (T)s;
			}
		}
		if (dx)
			GEMM(nt, false, false, g->N, g->C, g->K, 1, dy, g->K, w,
			     g->C, 0, dx, g->C);
		return 0;
	}
	/* col holds im2col(x) for dw, then is reused for dcol for dx. */
	const bool need_col = !(g->pointwise && nb == 1);
	const bool need_dyp = nb > 1;
	const int64_t cols = nb * g->OHW;
	const int64_t ncol = need_col ? g->C * g->kh * g->kw * cols : 0;
	const int64_t ndyp = need_dyp ? g->K * cols : 0;
	struct mgo_scratch sc;
	T *col = NULL, *dyp = NULL;
	if (ncol + ndyp > 0) {
		col = mgo_scratch_get(ctx, &sc, ws,
				      (size_t)(ncol + ndyp) * sizeof(T));
		if (!col)
			return mg_error_prefix("conv2d backward workspace: ");
		dyp = col + ncol;
	}
	for (int64_t s0 = 0; s0 < g->N; s0 += nb) {
		const int64_t n = s0 + nb <= g->N ? nb : g->N - s0;
		const int64_t c = n * g->OHW;
		const T *D = dy + s0 * g->K * g->OHW;
		int64_t ldd = g->OHW;
		if (need_dyp) {
			FN(pack_rows)(g, dy, s0, n, dyp, nt);
			D = dyp;
			ldd = c;
		}
		if (dw) {
			const T *B = x + s0 * g->C * g->HW;
			int64_t ldb = g->HW;
			if (need_col) {
				FN(im2col)(g, x, s0, n, col, nt);
				B = col;
				ldb = c;
			}
			for (int64_t gr = 0; gr < g->groups; gr++)
				GEMM(nt, false, true, g->Kg, g->krow, c, 1,
				     D + gr * g->Kg * ldd, ldd,
				     B + gr * g->krow * ldb, ldb, 1,
				     dw + gr * g->Kg * g->krow, g->krow);
		}
		if (db)
			FN(row_sums)(D, g->K, c, ldd, db, nt);
		if (dx) {
			T *C = need_col ? col : dx + s0 * g->C * g->HW;
			const int64_t ldc = need_col ? c : g->HW;
			for (int64_t gr = 0; gr < g->groups; gr++)
				GEMM(nt, true, false, g->krow, c, g->Kg, 1,
				     w + gr * g->Kg * g->krow, g->krow,
				     D + gr * g->Kg * ldd, ldd, 0,
				     C + gr * g->krow * ldc, ldc);
			if (need_col)
				FN(col2im)(g, col, s0, n, dx, nt);
		}
	}
	if (ncol + ndyp > 0)
		mgo_scratch_done(ctx, &sc);
	return 0;
}

#undef GEMM
#undef T
#undef FN
