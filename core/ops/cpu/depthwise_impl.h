/*
 * depthwise_impl.h - direct depthwise convolution kernels, instantiated by
 * depthwise.c for each element type T with names FN(name).
 *
 * One (sample, channel) plane per task. Large planes: each kernel tap
 * sweeps the output rows it reaches (mgo_tap_range gives the in-bounds
 * range, so the inner loop has no branches and vectorises for stride 1).
 * Small planes (MobileNet's 7x7 ... 1x1 maps at small inputs), where that
 * per-tap set-up would dominate: a precomputed list of the plane's valid
 * (output, input, tap) triples, the same for every plane (dw_map).
 */

/*
 * Small-plane forward. A task is one channel of up to DW_NB samples: the
 * planes share the weights and the map, and their DW_NB accumulations are
 * independent chains the CPU overlaps. Each output sums its triples in a
 * register (the map is grouped by output).
 */
static void FN(dw_fwd_map)(const struct mgo_conv_geom *g, const T *x,
			   const T *w, const T *bias, T *y,
			   const struct dw_map *mp, int nt)
{
	const int64_t taps = g->kh * g->kw, S = g->C * g->HW,
		      OS = g->C * g->OHW;
	const int64_t nblk = (g->N + DW_NB - 1) / DW_NB;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
	for (int64_t c = 0; c < g->C; c++) {
		for (int64_t bk = 0; bk < nblk; bk++) {
			const int64_t n0 = bk * DW_NB;
			const int nb =
				(int)(g->N - n0 < DW_NB ? g->N - n0 : DW_NB);
			const T *wc = w + c * taps;
			const T *xb[DW_NB];
			T *yb[DW_NB];

#pragma GCC unroll 8
			for (int b = 0; b < DW_NB; b++) {
				/* Lanes past the batch repeat the last plane
				 * and are not stored. */
				const int64_t n = n0 + (b < nb ? b : nb - 1);
				xb[b] = x + n * S + c * g->HW;
				yb[b] = y + n * OS + c * g->OHW;
			}
			const T bv = bias ? bias[c] : (T)0;
			for (int64_t o = 0; o < g->OHW; o++) {
				T acc[DW_NB];

#pragma GCC unroll 8
				for (int b = 0; b < DW_NB; b++)
					acc[b] = bv;
				for (int k = mp->start[o]; k < mp->start[o + 1];
				     k++) {
					const T wv = wc[mp->t[k]];
					const int32_t ii = mp->i[k];

#pragma GCC unroll 8
					for (int b = 0; b < DW_NB; b++)
						acc[b] += wv * xb[b][ii];
				}
				for (int b = 0; b < nb; b++)
					yb[b][o] = acc[b];
			}
		}
	}
}

/*
 * Small-plane backward, tasks as in the forward. dx gathers, for each
 * input, its (output, tap) pairs from the input-grouped map into a
 * register; the weight-gradient partial sums, per plane and tap in T over
 * the tap-grouped map, go to dwp in double for dw_reduce.
 */
static void FN(dw_bwd_map)(const struct mgo_conv_geom *g, const T *x,
			   const T *w, const T *dy, T *dx, double *dwp,
			   double *dbp, const struct dw_map *mp, int nt)
{
	const int64_t taps = g->kh * g->kw, S = g->C * g->HW,
		      OS = g->C * g->OHW;
	const int64_t nblk = (g->N + DW_NB - 1) / DW_NB;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
	for (int64_t c = 0; c < g->C; c++) {
		for (int64_t bk = 0; bk < nblk; bk++) {
			const int64_t n0 = bk * DW_NB;
			const int nb =
				(int)(g->N - n0 < DW_NB ? g->N - n0 : DW_NB);
			const T *wc = w + c * taps;
			const T *xb[DW_NB], *dyb[DW_NB];

#pragma GCC unroll 8
			for (int b = 0; b < DW_NB; b++) {
				const int64_t n = n0 + (b < nb ? b : nb - 1);
				xb[b] = x + n * S + c * g->HW;
				dyb[b] = dy + n * OS + c * g->OHW;
			}
			if (dx) {
				for (int64_t q = 0; q < g->HW; q++) {
					T acc[DW_NB] = {0};
					for (int k = mp->istart[q];
					     k < mp->istart[q + 1]; k++) {
						const T wv = wc[mp->it[k]];
						const int32_t oo = mp->io[k];
						_Pragma("GCC unroll 8") for (
							int b = 0; b < DW_NB;
							b++) acc[b] +=
							wv * dyb[b][oo];
					}
					for (int b = 0; b < nb; b++)
						dx[(n0 + b) * S + c * g->HW +
						   q] = acc[b];
				}
			}
			if (dwp) {
				/* Tap by tap over the tap-grouped map: each
				 * partial sum stays in a register. */
				for (int64_t t = 0; t < taps; t++) {
					T acc[DW_NB] = {0};
					for (int k = mp->tstart[t];
					     k < mp->tstart[t + 1]; k++) {
						const int32_t ii = mp->ti[k],
							      oo = mp->to[k];
						_Pragma("GCC unroll 8") for (
							int b = 0; b < DW_NB;
							b++) acc[b] +=
							dyb[b][oo] * xb[b][ii];
					}
					for (int b = 0; b < nb; b++)
						dwp[((n0 + b) * g->C + c) *
							    taps +
						    t] = acc[b];
				}
			}
			if (dbp) {
				for (int b = 0; b < nb; b++) {
					double sum = 0;
					for (int64_t q = 0; q < g->OHW; q++)
						sum += dyb[b][q];
					dbp[(n0 + b) * g->C + c] = sum;
				}
			}
		}
	}
}

static void FN(dw_fwd)(const struct mgo_conv_geom *g, const T *x, const T *w,
		       const T *bias, T *y, int nt)
{
	const int64_t taps = g->kh * g->kw;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t p = 0; p < g->N * g->C; p++) {
		const int64_t c = p % g->C;
		const T *xp = x + p * g->HW;
		const T *wc = w + c * taps;
		T *yp = y + p * g->OHW;
		const T b = bias ? bias[c] : (T)0;
		for (int64_t q = 0; q < g->OHW; q++)
			yp[q] = b;
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ohl, ohh;
			mgo_tap_range(g->OH, g->H, g->sh, g->ph, i, &ohl, &ohh);
			for (int64_t j = 0; j < g->kw; j++) {
				int64_t owl, owh;
				mgo_tap_range(g->OW, g->W, g->sw, g->pw, j,
					      &owl, &owh);
				const T wv = wc[i * g->kw + j];
				for (int64_t oh = ohl; oh < ohh; oh++) {
					T *yr = yp + oh * g->OW;
					const int64_t base =
						(oh * g->sh - g->ph + i) *
							g->W -
						g->pw + j;
					const T *xr = xp + base;
					if (g->sw == 1) {
#pragma omp simd
						for (int64_t ow = owl; ow < owh;
						     ow++)
							yr[ow] += wv * xr[ow];
					} else {
						const int64_t sw = g->sw;
#pragma omp simd
						for (int64_t ow = owl; ow < owh;
						     ow++)
							yr[ow] += wv *
								  xr[ow * sw];
					}
				}
			}
		}
	}
}

/*
 * Backward per plane: dx (zeroed, then scattered tap by tap: one thread
 * owns the plane, so the order is fixed), and the plane's weight-gradient
 * and bias-gradient partial sums in double, which dw_reduce adds over the
 * samples in order.
 */
static void FN(dw_bwd)(const struct mgo_conv_geom *g, const T *x, const T *w,
		       const T *dy, T *dx, double *dwp, double *dbp, int nt)
{
	const int64_t taps = g->kh * g->kw;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t p = 0; p < g->N * g->C; p++) {
		const int64_t c = p % g->C;
		const T *xp = x + p * g->HW;
		const T *wc = w + c * taps;
		const T *dyp = dy + p * g->OHW;
		T *dxp = dx ? dx + p * g->HW : NULL;
		if (dxp)
			for (int64_t q = 0; q < g->HW; q++)
				dxp[q] = 0;
		if (dbp) {
			double s = 0;
#pragma omp simd reduction(+ : s)
			for (int64_t q = 0; q < g->OHW; q++)
				s += dyp[q];
			dbp[p] = s;
		}
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ohl, ohh;
			mgo_tap_range(g->OH, g->H, g->sh, g->ph, i, &ohl, &ohh);
			for (int64_t j = 0; j < g->kw; j++) {
				int64_t owl, owh;
				mgo_tap_range(g->OW, g->W, g->sw, g->pw, j,
					      &owl, &owh);
				const T wv = wc[i * g->kw + j];
				double acc = 0;
				for (int64_t oh = ohl; oh < ohh; oh++) {
					const T *dr = dyp + oh * g->OW;
					const int64_t base =
						(oh * g->sh - g->ph + i) *
							g->W -
						g->pw + j;
					const int64_t sw = g->sw;
					if (dxp) {
						T *dr2 = dxp + base;
#pragma omp simd
						for (int64_t ow = owl; ow < owh;
						     ow++)
							dr2[ow * sw] +=
								wv * dr[ow];
					}
					if (dwp) {
						const T *xr = xp + base;
						T r = 0;
#pragma omp simd reduction(+ : r)
						for (int64_t ow = owl; ow < owh;
						     ow++)
							r += dr[ow] *
							     xr[ow * sw];
						acc += r;
					}
				}
				if (dwp)
					dwp[p * taps + i * g->kw + j] = acc;
			}
		}
	}
}

/* dw[c] += sum over samples of dwp[n, c] (fixed order); same for db. */
static void FN(dw_reduce)(const struct mgo_conv_geom *g, const double *dwp,
			  const double *dbp, T *dw, T *db, int nt)
{
	const int64_t taps = g->kh * g->kw;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t c = 0; c < g->C; c++) {
		if (dw) {
			for (int64_t t = 0; t < taps; t++) {
				double s = 0;
				for (int64_t n = 0; n < g->N; n++)
					s += dwp[(n * g->C + c) * taps + t];
				dw[c * taps + t] += (T)s;
			}
		}
		if (db) {
			double s = 0;
			for (int64_t n = 0; n < g->N; n++)
				s += dbp[n * g->C + c];
			db[c] += (T)s;
		}
	}
}

#undef T
#undef FN
