/*
 * llm_decode.c - CPU attention of new tokens over a key/value cache
 * (mg_op_attention_decode in ops_llm.h; checks in core/ops/llm.c): the
 * reference the CUDA kernel is tested against, and what `mgrun generate`
 * runs on the CPU. Direct loops in double, one (query, head) per OpenMP
 * iteration, keys in order, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_llm.h"
#include "cpu_ops.h"

struct dec_geom {
	int64_t n, Hq, Hkv, hd, pos;
};

/* Query t of head h attends cache rows 0..pos+t of head h / (Hq / Hkv):
 * a max pass, then exp-weighted values, then the normalisation. */
#define DECODE_FN(NAME, T)                                                     \
	static int NAME(const struct dec_geom *g, const T *q, const T *k,      \
			const T *v, double scale, T *o, int nt)                \
	{                                                                      \
		const int64_t hd = g->hd, G = g->Hq / g->Hkv,                  \
			      rows = g->pos + g->n;                            \
		int bad = 0;                                                   \
		_Pragma("omp parallel num_threads(nt)")                        \
		{                                                              \
			double *p = malloc((size_t)(rows + hd) * sizeof *p);   \
			double *acc = p + rows;                                \
			if (!p) {                                              \
				_Pragma("omp atomic write") bad = 1;           \
			}                                                      \
			_Pragma("omp for schedule(static)") for (int64_t i =   \
									 0;    \
								 i <           \
								 g->n * g->Hq; \
								 i++)          \
			{                                                      \
				if (!p)                                        \
					continue;                              \
				const int64_t t = i / g->Hq, h = i % g->Hq,    \
					      kh = h / G;                      \
				const T *qt = q + i * hd;                      \
				const int64_t last = g->pos + t;               \
				double m = -INFINITY, l = 0;                   \
				for (int64_t s = 0; s <= last; s++) {          \
					const T *ks =                          \
						k + (s * g->Hkv + kh) * hd;    \
					double d = 0;                          \
					for (int64_t e = 0; e < hd; e++)       \
						d += (double)qt[e] *           \
						     (double)ks[e];            \
					p[s] = scale * d;                      \
					m = fmax(m, p[s]);                     \
				}                                              \
				for (int64_t e = 0; e < hd; e++)               \
					acc[e] = 0;                            \
				for (int64_t s = 0; s <= last; s++) {          \
					const double w = exp(p[s] - m);        \
					const T *vs =                          \
						v + (s * g->Hkv + kh) * hd;    \
					l += w;                                \
					for (int64_t e = 0; e < hd; e++)       \
						acc[e] += w * (double)vs[e];   \
				}                                              \
				for (int64_t e = 0; e < hd; e++)               \
					o[i * hd + e] = (T)(acc[e] / l);       \
			}                                                      \
			free(p);                                               \
		}                                                              \
		return bad;                                                    \
	}

DECODE_FN(decode_f32, float)
DECODE_FN(decode_f64, double)

int mg_cpu_attention_decode(struct mg_ctx *ctx, const struct mg_tensor *q,
			    const struct mg_tensor *k_cache,
			    const struct mg_tensor *v_cache, int64_t pos,
			    double scale, struct mg_tensor *o)
{
	const struct dec_geom g = {q->shape[0], q->shape[1], k_cache->shape[1],
				   q->shape[2], pos};
	if (mg_tensor_numel(q) == 0)
		return 0;
	const int nt = mgo_threads_for(ctx, g.n * g.Hq * (pos + g.n) * g.hd);
	const int bad = q->dtype == MG_F32
				? decode_f32(&g, q->data, k_cache->data,
					     v_cache->data, scale, o->data, nt)
				: decode_f64(&g, q->data, k_cache->data,
					     v_cache->data, scale, o->data, nt);
	return bad ? mg_error("attention_decode: out of memory") : 0;
}
