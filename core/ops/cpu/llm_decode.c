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
	int64_t window; /* sliding window, 0: none */
	double cap;	/* score soft-capping, 0: none */
};

#define T float
#define FN(n) n##_f32
#include "llm_decode_impl.h"
#define T double
#define FN(n) n##_f64
#include "llm_decode_impl.h"

int mg_cpu_attention_decode(struct mg_ctx *ctx, const struct mg_tensor *q,
			    const struct mg_tensor *k_cache,
			    const struct mg_tensor *v_cache, int64_t pos,
			    const struct mg_attn_opts *a, struct mg_tensor *o)
{
	const struct dec_geom g = {q->shape[0], q->shape[1], k_cache->shape[1],
				   q->shape[2], pos,	     a->window,
				   a->softcap};
	const double scale = a->scale;
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
