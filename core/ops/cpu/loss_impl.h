/*
 * loss_impl.h - softmax cross-entropy kernels for element type T
 * (FN(name) suffix), instantiated by loss.c. Per-row log-sum-exp in double
 * with the row maximum subtracted.
 */

/* log(sum(exp(row))) and the first arg-max of one row. */
static double FN(row_lse)(const T *row, int64_t K, int64_t *argmax)
{
	int64_t am = 0;
	T mx = row[0];
	for (int64_t k = 1; k < K; k++)
		if (row[k] > mx) {
			mx = row[k];
			am = k;
		}
	double s = 0;
	for (int64_t k = 0; k < K; k++)
		s += exp((double)row[k] - (double)mx);
	*argmax = am;
	return (double)mx + log(s);
}

/*
 * Loss sum, correct and counted rows. Rows are split into MGO_XENT_BLOCKS
 * fixed blocks whose partial sums are added in block order, so the result
 * is the same whatever the thread count.
 */
#define MGO_XENT_BLOCKS 64
static void FN(xent_fwd)(const T *logits, const int32_t *labels, int64_t rows,
			 int64_t K, double out[3], int nt)
{
	double loss[MGO_XENT_BLOCKS] = {0}, corr[MGO_XENT_BLOCKS] = {0},
	       cnt[MGO_XENT_BLOCKS] = {0};
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int b = 0; b < MGO_XENT_BLOCKS; b++) {
		const int64_t r0 = rows * b / MGO_XENT_BLOCKS,
			      r1 = rows * (b + 1) / MGO_XENT_BLOCKS;
		for (int64_t r = r0; r < r1; r++) {
			const int32_t lab = labels[r];
			if (lab < 0)
				continue;
			int64_t am;
			const T *row = logits + r * K;
			const double lse = FN(row_lse)(row, K, &am);
			loss[b] += lse - (double)row[lab];
			corr[b] += am == lab;
			cnt[b] += 1;
		}
	}
	out[0] = out[1] = out[2] = 0;
	for (int b = 0; b < MGO_XENT_BLOCKS; b++) {
		out[0] += loss[b];
		out[1] += corr[b];
		out[2] += cnt[b];
	}
}

static void FN(xent_bwd)(const T *logits, const int32_t *labels, int64_t rows,
			 int64_t K, double scale, T *dl, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const int32_t lab = labels[r];
		const T *row = logits + r * K;
		T *d = dl + r * K;
		if (lab < 0) {
			for (int64_t k = 0; k < K; k++)
				d[k] = 0;
			continue;
		}
		int64_t am;
		const double lse = FN(row_lse)(row, K, &am);
		for (int64_t k = 0; k < K; k++) {
			double p = exp((double)row[k] - lse);
			d[k] = (T)((p - (k == lab ? 1.0 : 0.0)) * scale);
		}
	}
}

#undef T
#undef FN
