/*
 * llama_decode.c - incremental decoding for `mgrun generate` (the model
 * op decode of ABI 1.4): the decoder run over a sequence's new tokens
 * only, with every layer's keys and values of the earlier tokens kept in
 * a cache, so generating N tokens costs N small passes rather than N
 * passes over the whole growing sequence.
 *
 * The cache is [layers][max_len, kv_heads, head_dim] for keys and the
 * same for values, in the compute dtype on the device, sized at pos 0
 * for the max_len the caller promises. A call's k and v projections are
 * written straight into their cache rows pos..pos+n-1 and rotated there;
 * mg_op_attention_decode then lets the new queries attend rows
 * 0..pos+t. The computation is the training forward's, op for op, so its
 * log-probabilities equal the forward's loss (tests/llama: decode).
 *
 * The family's features as in training (llama_model.c): projection
 * biases, q and k normed per head in place before RoPE (the k rows in
 * the cache), the sliding window as the cache attention's option (the
 * cache still holds every position); Gemma's (llama_arch.c): each
 * layer's attention options and rotary table, (1 + w) norms, the
 * sandwich norms on the attention and MLP outputs (in place), the GeGLU
 * gate, the embedding scale and the final logit soft-cap.
 *
 * With qat = 8da4w (or quant = int4) each layer projection reads its
 * input fake-quantized to int8 per token (into the qx slot) and, under
 * qat, its weight fake-quantized to int4 (llama_qat_weight's scratch),
 * as the training forward does; per-token scales make a token's codes
 * independent of the other tokens of the call, so the cache, a prefill
 * and token-by-token decoding agree with the forward. The LoRA path reads
 * the unquantized input, the head is never quantized.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

/* Byte offsets in the per-call work buffer for n new tokens. */
struct dlay {
	size_t x, h, q, o, t, g, u, hn, logits, lf32, total;
	size_t la, ltmp; /* LoRA: s A x [n, r] and the adapter's scratch */
	size_t qx;	 /* qat / int4: a projection input fake-quantized */
};

static void dlayout(const struct llama *m, int64_t n, struct dlay *L)
{
	const struct llama_cfg *c = &m->c;
	const size_t es = mg_dtype_size(m->ctx->compute_dtype);
	const size_t N = (size_t)n, D = (size_t)c->dim,
		     qd = (size_t)(c->heads * c->head_dim), I = (size_t)c->ffn,
		     V = (size_t)c->vocab;
	size_t o = 0;
	L->x = llama_slot(&o, N * D * es);
	L->h = llama_slot(&o, N * D * es);
	L->q = llama_slot(&o, N * qd * es);
	L->o = llama_slot(&o, N * qd * es);
	L->t = llama_slot(&o, N * D * es);
	L->g = llama_slot(&o, N * I * es);
	L->u = llama_slot(&o, N * I * es);
	L->hn = llama_slot(&o, D * es);
	L->logits = llama_slot(&o, V * es);
	L->lf32 = llama_slot(&o, V * sizeof(float));
	if (m->lora.rank > 0) {
		/* llama_lora_forward's scratch holds A x [n, r]; B's
		 * product goes to the projection's output */
		const size_t r = (size_t)m->lora.rank;
		L->la = llama_slot(&o, N * r * es);
		L->ltmp = llama_slot(&o, N * r * es);
	}
	if (m->proj->fq_input) {
		size_t w = D > qd ? D : qd;
		L->qx = llama_slot(&o, N * (w > I ? w : I) * es);
	}
	L->total = o;
}

/* A tensor of dtype dt at byte offset off of base, on the model's
 * device. */
static struct mg_tensor tat(const struct llama *m, void *base, size_t off,
			    enum mg_dtype dt, int ndim, int64_t a, int64_t b,
			    int64_t c, int64_t d)
{
	int64_t shape[4] = {a, b, c, d};
	return mg_tensor_make((char *)base + off, dt, m->ctx->dev->kind, ndim,
			      shape);
}

/* Bytes of one layer's key (or value) cache. */
static size_t cache_layer_bytes(const struct llama *m, int64_t max_len)
{
	return llama_al((size_t)(max_len * m->c.kv_heads * m->c.head_dim) *
			mg_dtype_size(m->ctx->compute_dtype));
}

/* Start a sequence: the caches for max_len positions. */
static int cache_begin(struct llama *m, struct mg_ctx *ctx, int64_t max_len)
{
	const struct llama_cfg *c = &m->c;
	if (max_len > c->max_positions)
		return mg_error("llama decode: a sequence of up to %lld tokens "
				"exceeds max_position_embeddings = %lld "
				"(shorten the prompt or the tokens to "
				"generate)",
				(long long)max_len,
				(long long)c->max_positions);
	if (c->lr_n && max_len > c->lr_orig_max)
		return mg_error("llama decode: a sequence of up to %lld tokens "
				"exceeds original_max_position_embeddings = "
				"%lld of rope_scaling longrope, whose long "
				"factors are not run",
				(long long)max_len, (long long)c->lr_orig_max);
	const size_t per = cache_layer_bytes(m, max_len);
	if (mg_buf_reserve(ctx, &m->kcache, per * (size_t)c->layers,
			   MG_MEM_ACTIVATIONS) ||
	    mg_buf_reserve(ctx, &m->vcache, per * (size_t)c->layers,
			   MG_MEM_ACTIVATIONS))
		return mg_error_prefix("llama decode: key/value cache of %lld "
				       "positions",
				       (long long)max_len);
	m->dec_max = max_len;
	m->dec_len = 0;
	return 0;
}

/* Layer l's cache as [max_len, kv_heads, head_dim] (key or value). */
static struct mg_tensor cache_of(const struct llama *m, struct mg_buf *b, int l)
{
	const size_t per = cache_layer_bytes(m, m->dec_max);
	return tat(m, b->ptr, per * (size_t)l, m->ctx->compute_dtype, 3,
		   m->dec_max, m->c.kv_heads, m->c.head_dim, 0);
}

/* Rows pos..pos+n-1 of a layer's cache, as [n, kv_dim] (the projection's
 * output) and [1, n, kv_heads, head_dim] (rope's view). */
static void cache_rows(const struct llama *m, struct mg_buf *b, int l,
		       int64_t pos, int64_t n, struct mg_tensor *flat,
		       struct mg_tensor *r4)
{
	const struct llama_cfg *c = &m->c;
	const enum mg_dtype dt = m->ctx->compute_dtype;
	const int64_t kvd = c->kv_heads * c->head_dim;
	const size_t off = cache_layer_bytes(m, m->dec_max) * (size_t)l +
			   (size_t)(pos * kvd) * mg_dtype_size(dt);
	*flat = tat(m, b->ptr, off, dt, 2, n, kvd, 0, 0);
	*r4 = tat(m, b->ptr, off, dt, 4, 1, n, c->kv_heads, c->head_dim);
}

/* y = x W^T, plus target tg's LoRA adapter when it has one, through the
 * training forward's llama_lora_forward: generation sees exactly what
 * training learned (no dropout: ctx->training is false). W are the
 * unit's lent tensors, w the base weight's index in them. */
static int dproj(struct llama *m, struct mg_ctx *ctx, const struct dlay *L,
		 int layer, const struct mg_tensor *W, int w, int tg,
		 const struct mg_tensor *x, struct mg_tensor *y)
{
	/* quant = nf4: dequantized into llama_quant.c's scratch first;
	 * qat: fake-quantized to int4 (the head never) */
	const struct mg_tensor *Wd = llama_base_weight(m, ctx, tg, &W[w]);
	/* qat, quant = int4: the base GEMM's input fake-quantized to int8
	 * per token, as base_in does in training */
	struct mg_tensor xq = *x;
	if (llama_base_fq_input(m, tg)) {
		xq.data = (char *)m->dec_work.ptr + L->qx;
		if (mg_op_fq_int8_token(ctx, x, &xq))
			return mg_error_prefix("llama decode: qat");
	}
	/* the projection's bias (llama_model.c's bias_of) */
	const struct mg_tensor *b = tg < LT_HEAD && (m->c.bias & (1u << tg))
					    ? &W[m->lp[LP_Q_BIAS + tg]]
					    : NULL;
	if (!Wd)
		return -1;
	if (m->lora.rank == 0 || m->lora.ia[tg] < 0)
		return mg_op_linear(ctx, &xq, Wd, b, y);
	/* the adapter's term written, the base GEMM adding onto it: the
	 * training forward's order, so the same roundings */
	char *B = m->dec_work.ptr;
	struct mg_tensor as = tat(m, B, L->la, ctx->compute_dtype, 2,
				  x->shape[0], m->lora.rank, 0, 0);
	struct mg_tensor Bt = llama_lora_b(m, W, tg);
	return llama_lora_forward(m, ctx, layer, tg, &W[m->lora.ia[tg]], &Bt, x,
				  &as, NULL, B + L->ltmp, y) ||
	       mg_op_linear_add(ctx, &xq, Wd, b, y);
}

/* One decoder layer over the n new tokens in x (updated in place). */
static int layer_decode(struct llama *m, struct mg_ctx *ctx,
			const struct mg_tensor *W, int l, const struct dlay *L,
			int64_t n, int64_t pos,
			const struct mg_tensor *positions)
{
	const struct llama_cfg *c = &m->c;
	const enum mg_dtype dt = ctx->compute_dtype;
	const int64_t D = c->dim, qd = c->heads * c->head_dim, I = c->ffn;
	void *B = m->dec_work.ptr;
	struct mg_tensor x = tat(m, B, L->x, dt, 2, n, D, 0, 0),
			 h = tat(m, B, L->h, dt, 2, n, D, 0, 0),
			 q = tat(m, B, L->q, dt, 2, n, qd, 0, 0),
			 q4 = tat(m, B, L->q, dt, 4, 1, n, c->heads,
				  c->head_dim),
			 q3 = tat(m, B, L->q, dt, 3, n, c->heads, c->head_dim,
				  0),
			 o = tat(m, B, L->o, dt, 2, n, qd, 0, 0),
			 o3 = tat(m, B, L->o, dt, 3, n, c->heads, c->head_dim,
				  0),
			 t = tat(m, B, L->t, dt, 2, n, D, 0, 0),
			 g = tat(m, B, L->g, dt, 2, n, I, 0, 0),
			 u = tat(m, B, L->u, dt, 2, n, I, 0, 0);
	struct mg_tensor kf, k4, vf, v4;
	cache_rows(m, &m->kcache, l, pos, n, &kf, &k4);
	cache_rows(m, &m->vcache, l, pos, n, &vf, &v4);
	struct mg_tensor kc = cache_of(m, &m->kcache, l),
			 vc = cache_of(m, &m->vcache, l);
	struct mg_tensor f = llama_inv_freq_of(m, l);
	const double eps = c->norm_eps;
	const struct mg_attn_opts ao = llama_attn_opts(m, l);
	const struct mg_tensor *nw[NW_N];
	const bool sw = c->sandwich;
	/* q/k norms: per head, in place ([rows * heads, head_dim] views) */
	struct mg_tensor qh = tat(m, B, L->q, dt, 2, n * c->heads, c->head_dim,
				  0, 0),
			 kh = kf;
	kh.ndim = 2;
	kh.shape[0] = n * c->kv_heads;
	kh.shape[1] = c->head_dim;
	const bool qkn = c->qk_norm;
	return llama_norm_ws(m, ctx, W, nw) ||
	       mg_op_rmsnorm(ctx, &x, nw[NW_IN], eps, &h, NULL) ||
	       dproj(m, ctx, L, l, W, LP_Q, LT_Q, &h, &q) ||
	       dproj(m, ctx, L, l, W, LP_K, LT_K, &h, &kf) ||
	       dproj(m, ctx, L, l, W, LP_V, LT_V, &h, &vf) ||
	       (qkn && (mg_op_rmsnorm(ctx, &qh, nw[NW_Q], eps, &qh, NULL) ||
			mg_op_rmsnorm(ctx, &kh, nw[NW_K], eps, &kh, NULL))) ||
	       mg_op_rope_scaled(ctx, &q4, positions, &f,
				 llama_rope_scale(c)) ||
	       mg_op_rope_scaled(ctx, &k4, positions, &f,
				 llama_rope_scale(c)) ||
	       mg_op_attention_decode_opts(ctx, &q3, &kc, &vc, pos, &ao, &o3) ||
	       dproj(m, ctx, L, l, W, LP_O, LT_O, &o, &t) ||
	       (sw && mg_op_rmsnorm(ctx, &t, nw[NW_AO], eps, &t, NULL)) ||
	       mg_op_add(ctx, &x, &t, &x) ||
	       mg_op_rmsnorm(ctx, &x, nw[NW_POST], eps, &h, NULL) ||
	       dproj(m, ctx, L, l, W, LP_GATE, LT_GATE, &h, &g) ||
	       dproj(m, ctx, L, l, W, LP_UP, LT_UP, &h, &u) ||
	       m->glu(ctx, &g, &u, &g) ||
	       dproj(m, ctx, L, l, W, LP_DOWN, LT_DOWN, &g, &t) ||
	       (sw && mg_op_rmsnorm(ctx, &t, nw[NW_MO], eps, &t, NULL)) ||
	       mg_op_add(ctx, &x, &t, &x);
}

/* Final norm and head on the last token; F32 logits to the host. */
static int head_decode(struct llama *m, struct mg_ctx *ctx,
		       const struct dlay *L, int64_t n, float *logits)
{
	const struct llama_cfg *c = &m->c;
	const enum mg_dtype dt = ctx->compute_dtype;
	const enum mg_phase ph = MG_PHASE_FORWARD;
	void *B = m->dec_work.ptr;
	const size_t es = mg_dtype_size(dt);
	struct mg_tensor xl = tat(m, B, L->x + (size_t)((n - 1) * c->dim) * es,
				  dt, 2, 1, c->dim, 0, 0),
			 hn = tat(m, B, L->hn, dt, 2, 1, c->dim, 0, 0),
			 lg = tat(m, B, L->logits, dt, 2, 1, c->vocab, 0, 0);
	const int head = LLAMA_UNIT_HEAD(c);
	struct mg_unit_view *v = mg_acquire(ctx, head, ph);
	if (!v)
		return -1;
	const struct mg_tensor *nwf =
		llama_norm_w(m, ctx, &v->params[0], NW_FINAL);
	int rc = !nwf || mg_op_rmsnorm(ctx, &xl, nwf, c->norm_eps, &hn, NULL);
	if (!rc && c->tie_embeddings) {
		struct mg_unit_view *e = mg_acquire(ctx, LLAMA_UNIT_EMBED, ph);
		rc = !e || mg_op_linear(ctx, &hn, &e->params[0], NULL, &lg);
		if (e)
			mg_release(ctx, LLAMA_UNIT_EMBED, ph);
	} else if (!rc) {
		rc = dproj(m, ctx, L, (int)c->layers, v->params, 1, LT_HEAD,
			   &hn, &lg);
	}
	if (!rc && c->final_softcap > 0)
		rc = mg_op_softcap(ctx, &lg, c->final_softcap, &lg);
	mg_release(ctx, head, ph);
	if (rc)
		return mg_error_prefix("llama decode head");
	const void *src = lg.data;
	if (dt != MG_F32) {
		void *f32 = (char *)B + L->lf32;
		if (mg_op_convert(ctx, f32, MG_F32, lg.data, dt, c->vocab))
			return mg_error_prefix("llama decode logits");
		src = f32;
	}
	return mg_copy_d2h(ctx, logits, src, (size_t)c->vocab * sizeof(float));
}

int llama_decode(struct llama *m, struct mg_ctx *ctx, const int32_t *ids,
		 int64_t n, int64_t pos, int64_t max_len, float *logits)
{
	const struct llama_cfg *c = &m->c;
	if (!ids || !logits || n < 1 || pos < 0 || max_len < 1 ||
	    pos > max_len - n)
		return mg_error("llama decode: %lld tokens at position %lld "
				"with max_len %lld (need n >= 1, 0 <= pos, "
				"pos + n <= max_len, ids and logits)",
				(long long)n, (long long)pos,
				(long long)max_len);
	if (pos == 0) {
		if (cache_begin(m, ctx, max_len))
			return -1;
	} else if (pos != m->dec_len || max_len != m->dec_max) {
		return mg_error("llama decode: position %lld with max_len %lld "
				"does not continue the sequence (at %lld of "
				"%lld); start a new one at position 0",
				(long long)pos, (long long)max_len,
				(long long)m->dec_len, (long long)m->dec_max);
	}
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= c->vocab)
			return mg_error("llama decode: token id %d (at %lld) "
					"outside the vocabulary of %lld",
					(int)ids[i], (long long)(pos + i),
					(long long)c->vocab);
	/* ids and positions (I32) on the device */
	struct dlay L;
	dlayout(m, n, &L);
	if (mg_buf_reserve(ctx, &m->dec_work, L.total, MG_MEM_ACTIVATIONS) ||
	    mg_buf_reserve(ctx, &m->dec_io, (size_t)(2 * n) * sizeof(int32_t),
			   MG_MEM_INPUT))
		return mg_error_prefix("llama decode buffers");
	int32_t *host = malloc((size_t)(2 * n) * sizeof *host);
	if (!host)
		return mg_error("llama decode: out of memory");
	memcpy(host, ids, (size_t)n * sizeof *host);
	for (int64_t i = 0; i < n; i++)
		host[n + i] = (int32_t)(pos + i);
	int rc = mg_copy_h2d(ctx, m->dec_io.ptr, host,
			     (size_t)(2 * n) * sizeof *host);
	free(host);
	if (rc)
		return -1;
	const enum mg_phase ph = MG_PHASE_FORWARD;
	const enum mg_dtype dt = ctx->compute_dtype;
	struct mg_tensor idt = tat(m, m->dec_io.ptr, 0, MG_I32, 1, n, 0, 0, 0),
			 post = tat(m, m->dec_io.ptr,
				    (size_t)n * sizeof(int32_t), MG_I32, 2, 1,
				    n, 0, 0),
			 x = tat(m, m->dec_work.ptr, L.x, dt, 2, n, c->dim, 0,
				 0);
	struct mg_unit_view *v = mg_acquire(ctx, LLAMA_UNIT_EMBED, ph);
	if (!v)
		return -1;
	rc = mg_op_embedding(ctx, &idt, &v->params[0], &x) ||
	     llama_embed_scale(m, ctx, &x);
	mg_release(ctx, LLAMA_UNIT_EMBED, ph);
	if (rc)
		return mg_error_prefix("llama decode embedding");
	for (int l = 0; l < c->layers; l++) {
		v = mg_acquire(ctx, LLAMA_UNIT_LAYER(l), ph);
		if (!v)
			return -1;
		rc = layer_decode(m, ctx, v->params, l, &L, n, pos, &post);
		mg_release(ctx, LLAMA_UNIT_LAYER(l), ph);
		if (rc)
			return mg_error_prefix("llama decode layer %d", l);
	}
	if (head_decode(m, ctx, &L, n, logits))
		return -1;
	m->dec_len = pos + n;
	return 0;
}

void llama_decode_free(struct llama *m)
{
	mg_buf_free(m->ctx, &m->kcache);
	mg_buf_free(m->ctx, &m->vcache);
	mg_buf_free(m->ctx, &m->dec_work);
	mg_buf_free(m->ctx, &m->dec_io);
}
