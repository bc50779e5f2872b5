/*
 * batchnorm_impl.h - batch-norm kernels for element type T (FN(name)
 * suffix), instantiated by batchnorm.c.
 *
 * Layout: a sample's channels are contiguous planes of HW elements, and
 * MobileNet's planes are often tiny (7x7 ... 1x1 at 28 px input), so a
 * loop per (channel, sample) plane would be all overhead. Work is split
 * into tiles of whole channels (bn_tiling); within a tile, segments of at
 * most BN_SEG contiguous elements are swept sample by sample with
 * per-element accumulators (vectorised over the contiguous elements,
 * whatever HW is), and the accumulators are then summed per channel in
 * double. Every sum has a fixed order that depends only on the shapes, so
 * results are the same run to run and for any thread count.
 */

/* Per-element values of a segment from per-channel ones: element i of a
 * segment starting qoff elements into its first channel belongs to local
 * channel (qoff + i) / HW. */
static void FN(bn_expand)(T *dst, const T *perc, int64_t L, int64_t HW,
			  int64_t qoff)
{
	int64_t i = 0;
	for (int64_t lc = 0; i < L; lc++) {
		int64_t end = (lc + 1) * HW - qoff;
		if (end > L)
			end = L;
		for (; i < end; i++)
			dst[i] = perc[lc];
	}
}

/* s[lc] += sum of acc over local channel lc's elements (in order). */
static void FN(bn_reduce)(double *s, const T *acc, int64_t L, int64_t HW,
			  int64_t qoff)
{
	int64_t i = 0;
	for (int64_t lc = 0; i < L; lc++) {
		int64_t end = (lc + 1) * HW - qoff;
		if (end > L)
			end = L;
		double v = 0;
		for (; i < end; i++)
			v += acc[i];
		s[lc] += v;
	}
}

static void FN(bn_fwd)(const struct mg_bn_args *a, int64_t N, int64_t C,
		       int64_t HW, const T *x, const T *gamma, const T *beta,
		       struct mg_tensor *rm, struct mg_tensor *rv, T *save_mean,
		       T *save_invstd, T *y, int nt)
{
	const double m = (double)(N * HW);
	const int64_t S = C * HW;
	int64_t cpt, ntiles;
	bn_tiling(C, HW, &cpt, &ntiles);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t t = 0; t < ntiles; t++) {
		const int64_t c0 = t * cpt, c1 = c0 + cpt < C ? c0 + cpt : C;
		double s1[BN_SEG], s2[BN_SEG];
		T shift[BN_SEG], mc[BN_SEG], sc[BN_SEG], bc[BN_SEG];
		T e1[BN_SEG], e2[BN_SEG], e3[BN_SEG];
		for (int64_t c = c0; c < c1; c++) {
			/* The channel's first value as origin keeps the
			 * one-pass variance accurate when |mean| >> std. */
			shift[c - c0] = a->training ? x[c * HW] : (T)0;
			s1[c - c0] = s2[c - c0] = 0;
		}
		if (a->training) {
			for (int64_t sg = 0, j0, L, qoff;
			     bn_segment(c0, c1, HW, sg, &j0, &L, &qoff); sg++) {
				T *acc1 = e2, *acc2 = e3;
				FN(bn_expand)(e1, shift, L, HW, qoff);
				for (int64_t i = 0; i < L; i++)
					acc1[i] = acc2[i] = 0;
				for (int64_t n = 0; n < N; n++) {
					const T *xp = x + n * S + j0;
#pragma omp simd
					for (int64_t i = 0; i < L; i++) {
						T d = xp[i] - e1[i];
						acc1[i] += d;
						acc2[i] += d * d;
					}
				}
				FN(bn_reduce)
				(s1 + (j0 / HW - c0), acc1, L, HW, qoff);
				FN(bn_reduce)
				(s2 + (j0 / HW - c0), acc2, L, HW, qoff);
			}
		}
		for (int64_t c = c0; c < c1; c++) {
			const int64_t k = c - c0;
			double mean, invstd;
			if (a->training) {
				double dm = s1[k] / m,
				       var = s2[k] / m - dm * dm;
				if (var < 0)
					var = 0;
				mean = shift[k] + dm;
				invstd = 1.0 / sqrt(var + a->eps);
				if (rm)
					mgo_set(rm, c,
						(1 - a->momentum) *
								mgo_get(rm, c) +
							a->momentum * mean);
				if (rv)
					mgo_set(rv, c,
						(1 - a->momentum) *
								mgo_get(rv, c) +
							a->momentum * var * m /
								(m - 1));
			} else {
				mean = mgo_get(rm, c);
				invstd = 1.0 / sqrt(mgo_get(rv, c) + a->eps);
			}
			if (save_mean)
				save_mean[c] = (T)mean;
			if (save_invstd)
				save_invstd[c] = (T)invstd;
			/* (x - mean) * scale + beta, not x * scale + shift:
			 * no cancellation when |mean| >> std. */
			mc[k] = (T)mean;
			sc[k] = (T)(gamma[c] * invstd);
			bc[k] = beta[c];
		}
		const bool relu6 = a->act == MG_ACT_RELU6;
		for (int64_t sg = 0, j0, L, qoff;
		     bn_segment(c0, c1, HW, sg, &j0, &L, &qoff); sg++) {
			const int64_t k0 = j0 / HW - c0;
			FN(bn_expand)(e1, mc + k0, L, HW, qoff);
			FN(bn_expand)(e2, sc + k0, L, HW, qoff);
			FN(bn_expand)(e3, bc + k0, L, HW, qoff);
			for (int64_t n = 0; n < N; n++) {
				const T *xp = x + n * S + j0;
				T *yp = y + n * S + j0;
				if (relu6) {
#pragma omp simd
					for (int64_t i = 0; i < L; i++) {
						T v = (xp[i] - e1[i]) * e2[i] +
						      e3[i];
						yp[i] = MGO_RELU6(v);
					}
				} else {
#pragma omp simd
					for (int64_t i = 0; i < L; i++)
						yp[i] = (xp[i] - e1[i]) *
								e2[i] +
							e3[i];
				}
			}
		}
	}
}

/*
 * Backward: dz = dy masked by ReLU6's pass-through region (from y); per
 * channel sum(dz) and sum(dz * (x - mean)); then
 * training: dx = g*invstd * (dz - mean(dz) - xhat * mean(dz * xhat)),
 * frozen statistics: dx = g*invstd * dz.
 */
static void FN(bn_bwd)(const struct mg_bn_args *a, int64_t N, int64_t C,
		       int64_t HW, const T *x, const T *y, const T *dy,
		       const T *gamma, const T *save_mean, const T *save_invstd,
		       T *dx, T *dgamma, T *dbeta, int nt)
{
	const double m = (double)(N * HW);
	const bool relu6 = a->act == MG_ACT_RELU6;
	const int64_t S = C * HW;
	int64_t cpt, ntiles;
	bn_tiling(C, HW, &cpt, &ntiles);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t t = 0; t < ntiles; t++) {
		const int64_t c0 = t * cpt, c1 = c0 + cpt < C ? c0 + cpt : C;
		double sdz[BN_SEG], sdzx[BN_SEG];
		T k1c[BN_SEG], k2c[BN_SEG], k3c[BN_SEG];
		T e1[BN_SEG], e2[BN_SEG], e3[BN_SEG], e4[BN_SEG];
		for (int64_t k = 0; k < c1 - c0; k++)
			sdz[k] = sdzx[k] = 0;
		for (int64_t sg = 0, j0, L, qoff;
		     bn_segment(c0, c1, HW, sg, &j0, &L, &qoff); sg++) {
			T *acc1 = e2, *acc2 = e3;
			FN(bn_expand)(e1, save_mean + j0 / HW, L, HW, qoff);
			for (int64_t i = 0; i < L; i++)
				acc1[i] = acc2[i] = 0;
			for (int64_t n = 0; n < N; n++) {
				const T *xp = x + n * S + j0;
				const T *dyp = dy + n * S + j0;
				if (relu6) {
					const T *yp = y + n * S + j0;
#pragma omp simd
					for (int64_t i = 0; i < L; i++) {
						const T d = dyp[i];
						T dz = MGO_RELU6_PASS(yp[i])
							       ? d
							       : (T)0;
						acc1[i] += dz;
						acc2[i] += dz * (xp[i] - e1[i]);
					}
				} else {
#pragma omp simd
					for (int64_t i = 0; i < L; i++) {
						acc1[i] += dyp[i];
						acc2[i] += dyp[i] *
							   (xp[i] - e1[i]);
					}
				}
			}
			FN(bn_reduce)(sdz + (j0 / HW - c0), acc1, L, HW, qoff);
			FN(bn_reduce)(sdzx + (j0 / HW - c0), acc2, L, HW, qoff);
		}
		for (int64_t c = c0; c < c1; c++) {
			const int64_t k = c - c0;
			const double invstd = save_invstd[c];
			if (dgamma)
				dgamma[c] += (T)(sdzx[k] * invstd);
			if (dbeta)
				dbeta[c] += (T)sdz[k];
			const double g = gamma[c] * invstd;
			k1c[k] = (T)g;
			k2c[k] = a->training ? (T)(g * sdz[k] / m) : (T)0;
			k3c[k] =
				a->training
					? (T)(g * sdzx[k] * invstd * invstd / m)
					: (T)0;
		}
		if (!dx)
			continue;
		for (int64_t sg = 0, j0, L, qoff;
		     bn_segment(c0, c1, HW, sg, &j0, &L, &qoff); sg++) {
			const int64_t k0 = j0 / HW - c0;
			FN(bn_expand)(e1, save_mean + j0 / HW, L, HW, qoff);
			FN(bn_expand)(e2, k1c + k0, L, HW, qoff);
			FN(bn_expand)(e3, k2c + k0, L, HW, qoff);
			FN(bn_expand)(e4, k3c + k0, L, HW, qoff);
			for (int64_t n = 0; n < N; n++) {
				const T *xp = x + n * S + j0;
				const T *dyp = dy + n * S + j0;
				T *dxp = dx + n * S + j0;
				if (relu6) {
					const T *yp = y + n * S + j0;
#pragma omp simd
					for (int64_t i = 0; i < L; i++) {
						const T d = dyp[i];
						T dz = MGO_RELU6_PASS(yp[i])
							       ? d
							       : (T)0;
						dxp[i] =
							e2[i] * dz - e3[i] -
							(xp[i] - e1[i]) * e4[i];
					}
				} else {
#pragma omp simd
					for (int64_t i = 0; i < L; i++)
						dxp[i] =
							e2[i] * dyp[i] - e3[i] -
							(xp[i] - e1[i]) * e4[i];
				}
			}
		}
	}
}

#undef T
#undef FN
