/*
 * llm_decode_impl.h - attention of new tokens over a key/value cache for
 * element type T (FN(name) suffix), instantiated by llm_decode.c.
 * Arithmetic in double; each output is computed by one thread, keys in
 * order, so results do not depend on the thread count.
 *
 * Layouts: q, o [n, Hq, hd]; k, v [max_len, Hkv, hd]. Query t of head h
 * attends cache rows 0..pos+t of head h / (Hq / Hkv) (the last window of
 * them with a sliding window): a max pass, then
 * exp-weighted values, then the normalisation. Returns -1 when a
 * thread's scratch could not be allocated.
 */

static int FN(decode)(const struct dec_geom *g, const T *q, const T *k,
		      const T *v, double scale, T *o, int nt)
{
	const int64_t hd = g->hd, G = g->Hq / g->Hkv, rows = g->pos + g->n;
	int bad = 0;
#pragma omp parallel num_threads(nt)
	{
		double *p = malloc((size_t)(rows + hd) * sizeof *p);
		if (!p) {
#pragma omp atomic write
			bad = 1;
		}
#pragma omp for schedule(static)
		for (int64_t i = 0; i < g->n * g->Hq; i++) {
			if (!p)
				continue;
			double *acc = p + rows;
			const int64_t t = i / g->Hq, h = i % g->Hq, kh = h / G;
			const T *qt = q + i * hd;
			const int64_t last = g->pos + t;
			const int64_t first =
				g->window > 0 && last - g->window + 1 > 0
					? last - g->window + 1
					: 0;
			double m = -INFINITY, l = 0;
			for (int64_t s = first; s <= last; s++) {
				const T *ks = k + (s * g->Hkv + kh) * hd;
				double d = 0;
				for (int64_t e = 0; e < hd; e++)
					d += (double)qt[e] * (double)ks[e];
				p[s] = g->cap > 0 ? g->cap * tanh(scale * d /
								  g->cap)
						  : scale * d;
				m = fmax(m, p[s]);
			}
			for (int64_t e = 0; e < hd; e++)
				acc[e] = 0;
			for (int64_t s = first; s <= last; s++) {
				const double w = exp(p[s] - m);
				const T *vs = v + (s * g->Hkv + kh) * hd;
				l += w;
				for (int64_t e = 0; e < hd; e++)
					acc[e] += w * (double)vs[e];
			}
			for (int64_t e = 0; e < hd; e++)
				o[i * hd + e] = (T)(acc[e] / l);
		}
		free(p);
	}
	return bad ? -1 : 0;
}

#undef T
#undef FN
