/*
 * llm_pointwise_impl.h - the row-wise and element-wise LLM kernels
 * (embedding, RMSNorm, rotary embedding, SwiGLU) for element type T
 * (FN(name) suffix), instantiated by llm_pointwise.c. Every output has one
 * fixed reduction order, whatever the thread count.
 */

static void FN(embed_fwd)(const int32_t *ids, const T *table, T *y, int64_t R,
			  int64_t D, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < R; r++)
		memcpy(y + r * D, table + (int64_t)ids[r] * D,
		       (size_t)D * sizeof(T));
}

/* dtable[ids[r], :] += dy[r, :]: threads own blocks of columns, rows are
 * added in order. */
static void FN(embed_bwd)(const int32_t *ids, const T *dy, T *dt, int64_t R,
			  int64_t D, int nt)
{
	const int64_t CB = 64, nb = (D + CB - 1) / CB;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t b = 0; b < nb; b++) {
		const int64_t c0 = b * CB, c1 = c0 + CB < D ? c0 + CB : D;
		for (int64_t r = 0; r < R; r++) {
			T *d = dt + (int64_t)ids[r] * D;
			const T *g = dy + r * D;
			for (int64_t c = c0; c < c1; c++)
				d[c] += g[c];
		}
	}
}

/* w is T, or float (wf32) when T is double. */
#define LLM_W(w, wf32, i)                                                      \
	((wf32) ? (T)((const float *)(w))[i] : ((const T *)(w))[i])

static void FN(rms_fwd)(const T *x, const void *w, bool wf32, double eps, T *y,
			T *rstd, int64_t R, int64_t D, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < R; r++) {
		const T *xr = x + r * D;
		T *yr = y + r * D;
		double ss = 0;
		for (int64_t i = 0; i < D; i++)
			ss += (double)xr[i] * (double)xr[i];
		/* HF: torch.rsqrt(variance + eps) in the compute dtype */
		const T rs = (T)(1 / sqrt((T)(ss / (double)D) + (T)eps));
		if (rstd)
			rstd[r] = rs;
		for (int64_t i = 0; i < D; i++)
			yr[i] = LLM_W(w, wf32, i) * (xr[i] * rs);
	}
}

/*
 * dx = rs * (w dy) - x rs^3 / D * sum(w dy x); dw += sum over rows of
 * dy x rs (rows in order, threads own column blocks).
 */
static void FN(rms_bwd)(const T *x, const void *w, bool wf32, const T *rstd,
			const T *dy, T *dx, void *dw, int64_t R, int64_t D,
			int nt)
{
	if (dx) {
#pragma omp parallel for num_threads(nt) schedule(static)
		for (int64_t r = 0; r < R; r++) {
			const T *xr = x + r * D, *gr = dy + r * D;
			const double rs = (double)rstd[r];
			double s = 0;
			for (int64_t i = 0; i < D; i++)
				s += (double)LLM_W(w, wf32, i) * (double)gr[i] *
				     (double)xr[i];
			const double c = s * rs * rs * rs / (double)D;
			T *o = dx + r * D;
			for (int64_t i = 0; i < D; i++)
				o[i] = (T)(rs * (double)LLM_W(w, wf32, i) *
						   (double)gr[i] -
					   (double)xr[i] * c);
		}
	}
	if (dw) {
		const int64_t CB = 64, nb = (D + CB - 1) / CB;
#pragma omp parallel for num_threads(nt) schedule(static)
		for (int64_t b = 0; b < nb; b++) {
			const int64_t c0 = b * CB,
				      c1 = c0 + CB < D ? c0 + CB : D;
			double acc[64] = {0};
			for (int64_t r = 0; r < R; r++) {
				const T *xr = x + r * D, *gr = dy + r * D;
				const double rs = (double)rstd[r];
				for (int64_t c = c0; c < c1; c++)
					acc[c - c0] += (double)gr[c] *
						       ((double)xr[c] * rs);
			}
			for (int64_t c = c0; c < c1; c++) {
				if (wf32)
					((float *)dw)[c] += (float)acc[c - c0];
				else
					((T *)dw)[c] += (T)acc[c - c0];
			}
		}
	}
}
#undef LLM_W

/* x [NT, H, hd] rotated in place by sign * positions[nt] * inv_freq[j]
 * and scaled by scale (angle, cos and sin in float, as Hugging Face
 * computes them): pairs
 * (j, j + h2) for j < h2 <= hd / 2, dims 2 h2.. untouched (partial
 * rotary). */
static void FN(rope)(T *x, const int32_t *pos, const float *invf, int sign,
		     float scale, int64_t NT, int64_t H, int64_t hd, int64_t h2,
		     int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < NT; r++) {
		for (int64_t j = 0; j < h2; j++) {
			const float a = (float)pos[r] * invf[j];
			/* cos and sin times the scale in float, as HF's
			 * attention_scaling */
			const T c = (T)(cosf(a) * scale),
				s = (T)(sign * (sinf(a) * scale));
			for (int64_t h = 0; h < H; h++) {
				T *p = x + (r * H + h) * hd;
				const T x1 = p[j], x2 = p[j + h2];
				p[j] = x1 * c - x2 * s;
				p[j + h2] = x2 * c + x1 * s;
			}
		}
	}
}

static void FN(swiglu_fwd)(const T *g, const T *u, T *h, int64_t n, int nt)
{
#pragma omp parallel for simd num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const T gv = g[i];
		h[i] = gv / (1 + exp(-gv)) * u[i];
	}
}

/* sig = 1 / (1 + e^-g): dg = dh u sig (1 + g (1 - sig)), du = dh g sig.
 * dg or du may alias dh: all reads happen before the writes. */
static void FN(swiglu_bwd)(const T *g, const T *u, const T *dh, T *dg, T *du,
			   int64_t n, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const T gv = g[i], uv = u[i], d = dh[i];
		const T sg = 1 / (1 + exp(-gv));
		if (dg)
			dg[i] = d * uv * sg * (1 + gv * (1 - sg));
		if (du)
			du[i] = d * gv * sg;
	}
}

#undef T
#undef FN
