/*
 * llm_attention_impl.h - causal grouped-query attention over packed
 * documents for element type T (FN(name) suffix), instantiated by
 * llm_attention.c. Arithmetic in double; every output is reduced by one
 * thread in a fixed order, so results do not depend on the thread count.
 *
 * Layouts: q, o, dq [N, T, Hq, hd]; k, v, dk, dv [N, T, Hkv, hd];
 * pos [N, T]; lse [N, Hq, T]. Query t sees keys [llm_lo(t), t] (its
 * document, within the sliding window).
 */

static double FN(dotd)(const T *a, const T *b, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += (double)a[i] * (double)b[i];
	return s;
}

static void FN(attn_fwd)(const struct llm_attn_geom *g, const T *q, const T *k,
			 const T *v, const int32_t *pos, double scale, T *o,
			 T *lse, int nt)
{
	const int64_t hd = g->hd, G = g->Hq / g->Hkv;
#pragma omp parallel num_threads(nt)
	{
		double *p = malloc((size_t)(g->S + 1) * sizeof *p);
		double *acc = malloc((size_t)(hd + 1) * sizeof *acc);
#pragma omp for schedule(static) collapse(2)
		for (int64_t n = 0; n < g->N; n++)
			for (int64_t h = 0; h < g->Hq; h++) {
				const int64_t kh = h / G;
				for (int64_t t = 0; t < g->S; t++) {
					const T *qt =
						q + ((n * g->S + t) * g->Hq +
						     h) * hd;
					const int64_t lo =
						llm_lo(g, t, pos[n * g->S + t]);
					double m = -INFINITY, l = 0;
					for (int64_t s = lo; s <= t; s++) {
						const T *ks =
							k + ((n * g->S + s) *
								     g->Hkv +
							     kh) * hd;
						p[s - lo] = llm_cap(
							g,
							scale * FN(dotd)(qt, ks,
									 hd),
							NULL);
						m = fmax(m, p[s - lo]);
					}
					for (int64_t d = 0; d < hd; d++)
						acc[d] = 0;
					for (int64_t s = lo; s <= t; s++) {
						const double e =
							exp(p[s - lo] - m);
						const T *vs =
							v + ((n * g->S + s) *
								     g->Hkv +
							     kh) * hd;
						l += e;
						for (int64_t d = 0; d < hd; d++)
							acc[d] += e *
								  (double)vs[d];
					}
					T *ot = o + ((n * g->S + t) * g->Hq +
						     h) * hd;
					for (int64_t d = 0; d < hd; d++)
						ot[d] = (T)(acc[d] / l);
					if (lse)
						lse[(n * g->Hq + h) * g->S +
						    t] = (T)(m + log(l));
				}
			}
		free(p);
		free(acc);
	}
}

/*
 * p = exp(cap(scale q.k) - lse), dp = dout.v, ds = cap' p (dp - Dt) with
 * Dt = dout.o: dq_t = scale sum_s ds k_s (over s in order), and per key s
 * (over the group's query heads, then t, in order) dv_s = sum p dout_t,
 * dk_s = scale sum ds q_t.
 */
static void FN(attn_bwd)(const struct llm_attn_geom *g, const T *q, const T *k,
			 const T *v, const int32_t *pos, double scale,
			 const T *o, const T *lse, const T *dout, T *dq, T *dk,
			 T *dv, double *Dt, int nt)
{
	const int64_t hd = g->hd, G = g->Hq / g->Hkv, TT = g->S;
	const int64_t NHT = g->N * g->Hq * TT;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < NHT; i++) {
		const int64_t t = i % TT, h = (i / TT) % g->Hq,
			      n = i / (TT * g->Hq);
		const int64_t at = ((n * TT + t) * g->Hq + h) * hd;
		Dt[i] = FN(dotd)(dout + at, o + at, hd);
	}
	if (dq) {
#pragma omp parallel num_threads(nt)
		{
			double *acc = malloc((size_t)(hd + 1) * sizeof *acc);
#pragma omp for schedule(static)
			for (int64_t i = 0; i < NHT; i++) {
				const int64_t t = i % TT, h = (i / TT) % g->Hq,
					      n = i / (TT * g->Hq), kh = h / G;
				const int64_t at =
					((n * TT + t) * g->Hq + h) * hd;
				const int64_t lo =
					llm_lo(g, t, pos[n * TT + t]);
				const double L = (double)lse[i];
				for (int64_t d = 0; d < hd; d++)
					acc[d] = 0;
				for (int64_t s = lo; s <= t; s++) {
					const int64_t as =
						((n * TT + s) * g->Hkv + kh) *
						hd;
					double dc;
					const double p = exp(
						llm_cap(g,
							scale * FN(dotd)(q + at,
									 k + as,
									 hd),
							&dc) -
						L);
					const double ds =
						dc * p *
						(FN(dotd)(dout + at, v + as,
							  hd) -
						 Dt[i]);
					for (int64_t d = 0; d < hd; d++)
						acc[d] +=
							ds * (double)k[as + d];
				}
				for (int64_t d = 0; d < hd; d++)
					dq[at + d] = (T)(scale * acc[d]);
			}
			free(acc);
		}
	}
	if (!dk && !dv)
		return;
	const int64_t NKS = g->N * g->Hkv * TT;
#pragma omp parallel num_threads(nt)
	{
		double *ak = malloc((size_t)(2 * hd + 1) * sizeof *ak);
		double *av = ak + hd;
#pragma omp for schedule(static)
		for (int64_t i = 0; i < NKS; i++) {
			const int64_t s = i % TT, kh = (i / TT) % g->Hkv,
				      n = i / (TT * g->Hkv);
			const int64_t as = ((n * TT + s) * g->Hkv + kh) * hd;
			for (int64_t d = 0; d < 2 * hd; d++)
				ak[d] = 0;
			for (int64_t h = kh * G; h < (kh + 1) * G; h++)
				for (int64_t t = s; t < TT; t++) {
					if (llm_lo(g, t, pos[n * TT + t]) > s)
						continue;
					const int64_t at =
						((n * TT + t) * g->Hq + h) * hd;
					const int64_t it =
						(n * g->Hq + h) * TT + t;
					double dc;
					const double p = exp(
						llm_cap(g,
							scale * FN(dotd)(q + at,
									 k + as,
									 hd),
							&dc) -
						(double)lse[it]);
					const double ds =
						dc * p *
						(FN(dotd)(dout + at, v + as,
							  hd) -
						 Dt[it]);
					for (int64_t d = 0; d < hd; d++) {
						av[d] += p *
							 (double)dout[at + d];
						ak[d] += ds * (double)q[at + d];
					}
				}
			for (int64_t d = 0; d < hd; d++) {
				if (dk)
					dk[as + d] = (T)(scale * ak[d]);
				if (dv)
					dv[as + d] = (T)av[d];
			}
		}
		free(ak);
	}
}

#undef T
#undef FN
