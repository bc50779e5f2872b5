/*
 * llm_fused_impl.h - the fused LLM kernels for element type T (FN(name)
 * suffix), instantiated by llm_fused.c: residual add + RMSNorm, RMSNorm's
 * input gradient + residual gradient, and the per-row pass of the
 * chunked linear + cross-entropy. Each rounds where the unfused ops
 * round (the add's sum, the norm's gradient before the residual's is
 * added), so fused and unfused agree to the last bit on the CPU.
 */

/* w is T, or float (wf32) when T is double. */
#define LLM_W(w, wf32, i)                                                      \
	((wf32) ? (T)((const float *)(w))[i] : ((const T *)(w))[i])

/* s = x + r; y = w * s * rstd (as llm_pointwise_impl.h's rms_fwd). */
static void FN(add_rms_fwd)(const T *x, const T *r, const void *w, bool wf32,
			    double eps, T *s, T *y, T *rstd, int64_t R,
			    int64_t D, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < R; i++) {
		const T *xr = x + i * D, *rr = r + i * D;
		T *sr = s + i * D, *yr = y + i * D;
		double ss = 0;
		for (int64_t d = 0; d < D; d++) {
			const T v = xr[d] + rr[d];
			sr[d] = v;
			ss += (double)v * (double)v;
		}
		const T rs = (T)(1 / sqrt((T)(ss / (double)D) + (T)eps));
		if (rstd)
			rstd[i] = rs;
		for (int64_t d = 0; d < D; d++)
			yr[d] = LLM_W(w, wf32, d) * (sr[d] * rs);
	}
}

/* dx = dres + (rs * (w dy) - x rs^3 / D * sum(w dy x)), the norm's part
 * rounded to T first as rms_bwd writes it. */
static void FN(rms_bwd_add)(const T *x, const void *w, bool wf32, const T *rstd,
			    const T *dy, const T *dres, T *dx, int64_t R,
			    int64_t D, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < R; r++) {
		const T *xr = x + r * D, *gr = dy + r * D, *er = dres + r * D;
		const double rs = (double)rstd[r];
		double s = 0;
		for (int64_t i = 0; i < D; i++)
			s += (double)LLM_W(w, wf32, i) * (double)gr[i] *
			     (double)xr[i];
		const double c = s * rs * rs * rs / (double)D;
		T *o = dx + r * D;
		for (int64_t i = 0; i < D; i++)
			o[i] = er[i] + (T)(rs * (double)LLM_W(w, wf32, i) *
						   (double)gr[i] -
					   (double)xr[i] * c);
	}
}
#undef LLM_W

/*
 * One chunk of rows of logits [n, V]: per row the loss (log-sum-exp in
 * double with the row maximum subtracted, minus the label's logit), the
 * first arg-max and the count into acc[3 r..3 r + 2]; with grad, the row
 * becomes (softmax - onehot) * scale in place (zero for an ignored row).
 */
static void FN(lxent_rows)(T *logits, const int32_t *labels, int64_t n,
			   int64_t V, bool grad, double scale, double *acc,
			   int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < n; r++) {
		T *row = logits + r * V;
		const int32_t lab = labels[r];
		double *a = acc + 3 * r;
		a[0] = a[1] = a[2] = 0;
		if (lab < 0) {
			if (grad)
				for (int64_t k = 0; k < V; k++)
					row[k] = 0;
			continue;
		}
		int64_t am = 0;
		T mx = row[0];
		for (int64_t k = 1; k < V; k++)
			if (row[k] > mx) {
				mx = row[k];
				am = k;
			}
		double se = 0;
		for (int64_t k = 0; k < V; k++)
			se += exp((double)row[k] - (double)mx);
		const double lse = (double)mx + log(se);
		a[0] = lse - (double)row[lab];
		a[1] = am == lab;
		a[2] = 1;
		if (!grad)
			continue;
		for (int64_t k = 0; k < V; k++) {
			const double p = exp((double)row[k] - lse);
			row[k] = (T)((p - (k == lab ? 1.0 : 0.0)) * scale);
		}
	}
}

#undef T
#undef FN
