/*
 * llama_model.c - the decoder's forward and backward through the core's
 * ops (mg_op_*), a unit at a time between mg_acquire and mg_release.
 *
 * Per layer, forward keeps what backward needs: the layer input x (the
 * residual stream), the normed inputs h1 and h2 with their rstd, q and k
 * after the rotation, v, the attention output o with its log-sum-exp,
 * the mid-layer residual xm, and the gate, up and SwiGLU products. The
 * loss is a sum over label tokens; backward seeds it with ctx->grad_scale
 * (loss scale / the step's label tokens over every rank and micro-batch),
 * so N ranks and one rank train the same model.
 *
 * With activation_checkpointing only the residual stream inputs are
 * kept per layer; one layer block is shared and backward recomputes each
 * layer's forward into it just before that layer's backward.
 *
 * With LoRA (llama_lora.c) each targeted projection writes its
 * adapter's term s B A drop(x) first and the frozen GEMM adds onto it
 * in its epilogue (one pass over the output for the adapter, where a
 * product in scratch and an add took four), and saves only
 * s * A drop(x) [R, r]; backward takes no weight gradient of a frozen
 * tensor (the strategy lends it without one), adds the adapter's input
 * gradient in its GEMM, and draws the dropout mask again.
 *
 * The `kernels` option (llama_kernels.c) swaps in fused ops: rmsnorm
 * adds each residual inside the RMSNorm that reads it (a layer leaves
 * its MLP output beside the residual; the next layer's input norm, or
 * the final norm, adds them) and the residual gradient inside the norm's
 * backward; flce computes the head's loss and gradients a chunk of
 * tokens at a time (llama_head.c), the arena's logits slot one chunk.
 *
 * Every base GEMM reads its weight and input through the run's
 * projection kind (llama_proj.c): with quant = nf4 the weight is
 * dequantized just before, forward and again in backward, into one
 * scratch; nothing dequantized is kept.
 *
 * The family's features (llama_family.c) are data here, not branches:
 * a projection's bias is its GEMM's bias argument (NULL without one),
 * a sliding window is the attention's option, partial rotary is the
 * length of the RoPE op's frequency table, Phi-3's fused projections
 * are split ones here (a fused LoRA module's targets share one A and
 * take rows of one B: llama_lora_b), and with q/k norms the
 * projections write q and k raw (kept, qr and kr) and a per-head RMSNorm
 * over [rows * heads, head_dim] views makes the q and k that RoPE turns.
 * Gemma's features (llama_arch.c) the same way: each layer's attention
 * options and rotary table, the gate op, the norm weight (1 + w made
 * just before each norm), the embedding scale; with sandwich norms the
 * o and down projections write a and f (kept) whose norms make the
 * residual branches; final logit soft-capping keeps the uncapped logits
 * (lraw) for its backward.
 *
 * With qat = 8da4w (llama_qat.c) each layer projection's base GEMM reads
 * fq8(x) (rebuilt in the arena's qx slot, forward and again in backward)
 * and fq4(W); backward masks the input and weight gradients by the
 * straight-through estimator. quant = int4 fake-quantizes x only.
 */
#include <math.h>
#include <string.h>

#include "llama.h"

/* Byte offsets of the activation arena for a batch of R = n x T rows. */
struct lay {
	size_t x;     /* [layers + 1] residual stream inputs, [R, D] each */
	size_t layer; /* first layer's saved block */
	size_t per;   /* bytes of one layer's saved block */
	size_t h1, q, k, v, o, xm, h2, g, u, s; /* within a layer block */
	size_t rstd1, rstd2, lse;		/* stats, within the block */
	size_t qr, kr, rstdq, rstdk; /* q/k norms: raw q, k and their rstd */
	size_t a, f, rstd3, rstd4;   /* sandwich norms: their inputs, rstd */
	size_t lraw;		     /* final soft-cap: the uncapped logits */
	size_t la[LT_COUNT];	     /* LoRA s A x, per target */
	size_t hn, rstdn, logits;    /* the head's */
	size_t lxd, ltmp;	     /* LoRA scratch */
	size_t qx; /* QAT: a projection input fake-quantized */
	size_t total;
	/* the backward work buffer */
	size_t dx, dxm, dh, dt, ds, du, dq, dk, dv, dout;
	size_t dqr, dkr; /* q/k norms: the raw q and k's gradients */
	size_t ldas, lda, ldt3, ldxd; /* LoRA's */
	size_t wtotal;
};

static void layout(const struct llama *m, int64_t n, int64_t T, struct lay *L)
{
	const struct llama_cfg *c = &m->c;
	const size_t es = mg_dtype_size(m->ctx->compute_dtype);
	const size_t ss = m->ctx->compute_dtype == MG_F64 ? 8 : 4;
	const size_t R = (size_t)(n * T), D = (size_t)c->dim,
		     qd = (size_t)(c->heads * c->head_dim),
		     kvd = (size_t)(c->kv_heads * c->head_dim),
		     I = (size_t)c->ffn, H = (size_t)c->heads;
	size_t o = 0;
	memset(L, 0, sizeof *L);
	/* every layer's input and the final norm's, each a slot (the stride
	 * layer_tensors uses) */
	L->x = o;
	o += llama_al(R * D * es) * (size_t)(c->layers + 1);
	L->layer = o;
	size_t p = 0;
	L->h1 = llama_slot(&p, R * D * es);
	L->q = llama_slot(&p, R * qd * es);
	L->k = llama_slot(&p, R * kvd * es);
	L->v = llama_slot(&p, R * kvd * es);
	L->o = llama_slot(&p, R * qd * es);
	L->xm = llama_slot(&p, R * D * es);
	L->h2 = llama_slot(&p, R * D * es);
	L->g = llama_slot(&p, R * I * es);
	L->u = llama_slot(&p, R * I * es);
	L->s = llama_slot(&p, R * I * es);
	L->rstd1 = llama_slot(&p, R * ss);
	L->rstd2 = llama_slot(&p, R * ss);
	L->lse = llama_slot(&p, R * H * ss);
	if (c->sandwich) {
		L->a = llama_slot(&p, R * D * es);
		L->f = llama_slot(&p, R * D * es);
		L->rstd3 = llama_slot(&p, R * ss);
		L->rstd4 = llama_slot(&p, R * ss);
	}
	if (c->qk_norm) {
		const size_t Hkv = (size_t)c->kv_heads;
		L->qr = llama_slot(&p, R * qd * es);
		L->kr = llama_slot(&p, R * kvd * es);
		L->rstdq = llama_slot(&p, R * H * ss);
		L->rstdk = llama_slot(&p, R * Hkv * ss);
	}
	const struct llama_lora *lo = &m->lora;
	const size_t r = (size_t)lo->rank;
	/* ltmp holds A x [R, r], or a fused group's [R, 3 r] (llama_lora.c):
	 * B's product goes straight to the projection's output */
	size_t max_in = 0;
	const size_t max_out = 3 * r;
	for (int t = 0; t < LT_COUNT; t++) {
		if (lo->ia[t] < 0)
			continue;
		int64_t in, out;
		llama_lora_dims(c, t, &in, &out);
		max_in = (size_t)in > max_in ? (size_t)in : max_in;
		if (t != LT_HEAD)
			L->la[t] = llama_slot(&p, R * r * es);
	}
	L->per = p;
	/* With activation checkpointing one block serves every layer. */
	o += p * (size_t)(m->recompute ? 1 : c->layers);
	L->hn = llama_slot(&o, R * D * es);
	L->rstdn = llama_slot(&o, R * ss);
	L->logits = llama_slot(
		&o,
		(m->kern & LK_FLCE ? (size_t)llama_flce_chunk(m, n * T) : R) *
			(size_t)c->vocab * es);
	if (c->final_softcap > 0)
		L->lraw = llama_slot(&o, R * (size_t)c->vocab * es);
	if (lo->ia[LT_HEAD] >= 0)
		L->la[LT_HEAD] = llama_slot(&o, R * r * es);
	L->lxd = llama_slot(&o, R * max_in * es);
	L->ltmp = o;
	o += r ? llama_al(R * max_out * es) : 0;
	L->qx = o;
	if (m->proj->fq_input) {
		size_t w = D > qd ? D : qd;
		w = I > w ? I : w;
		o += llama_al(R * w * es);
	}
	L->total = o;
	p = 0;
	L->dx = llama_slot(&p, R * D * es);
	L->dxm = llama_slot(&p, R * D * es);
	L->dh = llama_slot(&p, R * D * es);
	L->dt = llama_slot(&p, R * D * es);
	L->ds = llama_slot(&p, R * I * es);
	L->du = llama_slot(&p, R * I * es);
	L->dq = llama_slot(&p, R * qd * es);
	L->dk = llama_slot(&p, R * kvd * es);
	L->dv = llama_slot(&p, R * kvd * es);
	L->dout = llama_slot(&p, R * qd * es);
	if (c->qk_norm) {
		L->dqr = llama_slot(&p, R * qd * es);
		L->dkr = llama_slot(&p, R * kvd * es);
	}
	L->ldas = llama_slot(&p, R * r * es);
	L->lda = llama_slot(&p, R * 3 * r * es);
	L->ldt3 = llama_slot(&p, R * 3 * r * es);
	L->ldxd = llama_slot(&p, R * max_in * es);
	L->wtotal = p;
}

/* A tensor of compute dtype (or `dt`) at byte offset off of base. */
static struct mg_tensor at(const struct llama *m, void *base, size_t off,
			   enum mg_dtype dt, int ndim, int64_t a, int64_t b,
			   int64_t c, int64_t d)
{
	int64_t shape[4] = {a, b, c, d};
	return mg_tensor_make((char *)base + off, dt, m->ctx->dev->kind, ndim,
			      shape);
}

/* Everything one layer's forward and backward see. */
struct lt {
	struct mg_tensor x, xn; /* layer input and output (residual) */
	struct mg_tensor h1, q, k, v, o, xm, h2, g, u, s;
	struct mg_tensor q4, k4, v4, o4; /* [n, T, heads, head_dim] views */
	struct mg_tensor rstd1, rstd2, lse;
	/* q/k norms: raw q and k as [R, width] and as [R * heads,
	 * head_dim] with the normed q and k in that view, and their rstd */
	struct mg_tensor qr, kr, qrh, krh, qh, kh, rstdq, rstdk;
	/* sandwich norms: the o and down projections' outputs, rstd */
	struct mg_tensor a, f, rstd3, rstd4;
};

static void layer_tensors(const struct llama *m, const struct lay *L, int l,
			  struct lt *t)
{
	const struct llama_cfg *c = &m->c;
	const enum mg_dtype dt = m->ctx->compute_dtype;
	const enum mg_dtype st = dt == MG_F64 ? MG_F64 : MG_F32;
	const int64_t n = m->n, T = m->T, R = n * T, D = c->dim,
		      qd = c->heads * c->head_dim,
		      kvd = c->kv_heads * c->head_dim, I = c->ffn;
	void *A = m->arena.ptr;
	const size_t xs = llama_al((size_t)(R * D) * mg_dtype_size(dt));
	const size_t b = L->layer + L->per * (size_t)(m->recompute ? 0 : l);
	t->x = at(m, A, L->x + xs * (size_t)l, dt, 2, R, D, 0, 0);
	t->xn = at(m, A, L->x + xs * (size_t)(l + 1), dt, 2, R, D, 0, 0);
	t->h1 = at(m, A, b + L->h1, dt, 2, R, D, 0, 0);
	t->q = at(m, A, b + L->q, dt, 2, R, qd, 0, 0);
	t->k = at(m, A, b + L->k, dt, 2, R, kvd, 0, 0);
	t->v = at(m, A, b + L->v, dt, 2, R, kvd, 0, 0);
	t->o = at(m, A, b + L->o, dt, 2, R, qd, 0, 0);
	t->q4 = at(m, A, b + L->q, dt, 4, n, T, c->heads, c->head_dim);
	t->k4 = at(m, A, b + L->k, dt, 4, n, T, c->kv_heads, c->head_dim);
	t->v4 = at(m, A, b + L->v, dt, 4, n, T, c->kv_heads, c->head_dim);
	t->o4 = at(m, A, b + L->o, dt, 4, n, T, c->heads, c->head_dim);
	t->xm = at(m, A, b + L->xm, dt, 2, R, D, 0, 0);
	t->h2 = at(m, A, b + L->h2, dt, 2, R, D, 0, 0);
	t->g = at(m, A, b + L->g, dt, 2, R, I, 0, 0);
	t->u = at(m, A, b + L->u, dt, 2, R, I, 0, 0);
	t->s = at(m, A, b + L->s, dt, 2, R, I, 0, 0);
	t->rstd1 = at(m, A, b + L->rstd1, st, 1, R, 0, 0, 0);
	t->rstd2 = at(m, A, b + L->rstd2, st, 1, R, 0, 0, 0);
	t->lse = at(m, A, b + L->lse, st, 3, n, c->heads, T, 0);
	if (c->sandwich) {
		t->a = at(m, A, b + L->a, dt, 2, R, D, 0, 0);
		t->f = at(m, A, b + L->f, dt, 2, R, D, 0, 0);
		t->rstd3 = at(m, A, b + L->rstd3, st, 1, R, 0, 0, 0);
		t->rstd4 = at(m, A, b + L->rstd4, st, 1, R, 0, 0, 0);
	}
	if (c->qk_norm) {
		const int64_t hd = c->head_dim, H = c->heads, Hk = c->kv_heads;
		t->qr = at(m, A, b + L->qr, dt, 2, R, qd, 0, 0);
		t->kr = at(m, A, b + L->kr, dt, 2, R, kvd, 0, 0);
		t->qrh = at(m, A, b + L->qr, dt, 2, R * H, hd, 0, 0);
		t->krh = at(m, A, b + L->kr, dt, 2, R * Hk, hd, 0, 0);
		t->qh = at(m, A, b + L->q, dt, 2, R * H, hd, 0, 0);
		t->kh = at(m, A, b + L->k, dt, 2, R * Hk, hd, 0, 0);
		t->rstdq = at(m, A, b + L->rstdq, st, 1, R * H, 0, 0, 0);
		t->rstdk = at(m, A, b + L->rstdk, st, 1, R * Hk, 0, 0, 0);
	}
}

/* Target tg's bias in the unit's tensors P (or their gradients), or
 * NULL when its projection has none (the layer targets' biases follow
 * LT_* order from LP_Q_BIAS). */
static struct mg_tensor *bias_of(const struct llama *m, struct mg_tensor *P,
				 int tg)
{
	if (tg >= LT_HEAD || !(m->c.bias & (1u << tg)))
		return NULL;
	return &P[m->lp[LP_Q_BIAS + tg]];
}

/* Target tg's saved s A x [R, r]: in layer l's block, or the head's
 * (l == layers). */
static struct mg_tensor lora_saved(const struct llama *m, const struct lay *L,
				   int l, int tg)
{
	size_t blk = m->recompute ? 0 : (size_t)l;
	size_t off =
		tg == LT_HEAD ? L->la[tg] : L->layer + L->per * blk + L->la[tg];
	return at(m, m->arena.ptr, off, m->ctx->compute_dtype, 2, m->n * m->T,
		  m->lora.rank, 0, 0);
}

/* Whether a base GEMM of target tg reads fq8(x) (so its input gradient
 * takes the straight-through mask). */
static bool fq_in(const struct llama *m, int tg)
{
	return llama_base_fq_input(m, tg);
}

/* The input a base GEMM of target tg reads: x, or with QAT (not the
 * head) x fake-quantized to int8 per token in the arena's qx slot. */
static const struct mg_tensor *base_in(struct llama *m, struct mg_ctx *ctx,
				       const struct lay *L, int tg,
				       const struct mg_tensor *x,
				       struct mg_tensor *buf)
{
	if (!fq_in(m, tg))
		return x;
	*buf = *x;
	buf->data = (char *)m->arena.ptr + L->qx;
	if (mg_op_fq_int8_token(ctx, x, buf)) {
		mg_error_prefix("llama: qat");
		return NULL;
	}
	return buf;
}

/* The weight a base GEMM reads: NF4 dequantized, or fake-quantized. */
static const struct mg_tensor *base_w(struct llama *m, struct mg_ctx *ctx,
				      int tg, const struct mg_tensor *P, int w)
{
	return llama_base_weight(m, ctx, tg, &P[w]);
}

/* The frozen (or trained) base GEMM of target tg: y = xb W^T + b, or
 * added onto y (the adapter's term already there) when add. */
static int base_gemm(struct llama *m, struct mg_ctx *ctx, int tg,
		     const struct mg_tensor *P, int w,
		     const struct mg_tensor *xb, bool add, struct mg_tensor *y)
{
	const struct mg_tensor *W = base_w(m, ctx, tg, P, w);
	const struct mg_tensor *b = bias_of(m, (struct mg_tensor *)P, tg);
	if (!W)
		return -1;
	return add ? mg_op_linear_add(ctx, xb, W, b, y)
		   : mg_op_linear(ctx, xb, W, b, y);
}

/* y = x W^T of a projection (parameter w of the unit), plus target tg's
 * adapter path when it has one: the adapter's term written first, the
 * base GEMM adding onto it (llama_lora_forward says why). xb: the base
 * GEMM's input when the caller made it (a group's shared fq8(x)), else
 * NULL. */
static int proj_fwd(struct llama *m, struct mg_ctx *ctx, const struct lay *L,
		    int l, int tg, const struct mg_tensor *P, int w,
		    const struct mg_tensor *x, const struct mg_tensor *xb,
		    struct mg_tensor *y)
{
	const struct llama_lora *lo = &m->lora;
	const bool ad = lo->ia[tg] >= 0;
	if (ad) {
		/* a fused module's targets: t's rows of the one B */
		struct mg_tensor as = lora_saved(m, L, l, tg),
				 Bt = llama_lora_b(m, P, tg);
		char *A = m->arena.ptr;
		if (llama_lora_forward(m, ctx, l, tg, &P[lo->ia[tg]], &Bt, x,
				       &as, A + L->lxd, A + L->ltmp, y))
			return -1;
	}
	struct mg_tensor qb;
	if (!xb)
		xb = base_in(m, ctx, L, tg, x, &qb);
	return !xb || base_gemm(m, ctx, tg, P, w, xb, ad, y);
}

/* The projections ws[j] (targets ts[j]) of one input x: the adapters
 * of those targeted as one fused group when they can be
 * (llama_lora_fusable), else each on its own. */
static int group_fwd(struct llama *m, struct mg_ctx *ctx, const struct lay *L,
		     int l, const int *ts, const int *ws, int n,
		     const struct mg_tensor *P, const struct mg_tensor *x,
		     struct mg_tensor *const *ys)
{
	int ft[3], nf = 0;
	for (int j = 0; j < n; j++)
		if (m->lora.ia[ts[j]] >= 0)
			ft[nf++] = ts[j];
	struct mg_tensor qb;
	const struct mg_tensor *xb = base_in(m, ctx, L, ts[0], x, &qb);
	if (!xb)
		return -1;
	if (!llama_lora_fusable(m, ctx, ft, nf, P, NULL)) {
		for (int j = 0; j < n; j++)
			if (proj_fwd(m, ctx, L, l, ts[j], P, ws[j], x, xb,
				     ys[j]))
				return -1;
		return 0;
	}
	/* the adapters' terms first, then each base GEMM adds onto its own */
	struct mg_tensor as[3], *asp[3], *yf[3];
	for (int j = 0, k = 0; j < n; j++) {
		if (m->lora.ia[ts[j]] < 0)
			continue;
		as[k] = lora_saved(m, L, l, ts[j]);
		asp[k] = &as[k];
		yf[k++] = ys[j];
	}
	if (llama_lora_forward_group(m, ctx, ft, nf, P, x, asp, yf,
				     (char *)m->arena.ptr + L->ltmp))
		return -1;
	for (int j = 0; j < n; j++)
		if (base_gemm(m, ctx, ts[j], P, ws[j], xb,
			      m->lora.ia[ts[j]] >= 0, ys[j]))
			return -1;
	return 0;
}

static const int QKV_T[3] = {LT_Q, LT_K, LT_V}, QKV_W[3] = {LP_Q, LP_K, LP_V},
		 GU_T[2] = {LT_GATE, LT_UP}, GU_W[2] = {LP_GATE, LP_UP};

/* y = rmsnorm(x) w, or with kernels rmsnorm and a residual res still to
 * add: x = res + x, then y, in one op. */
static int norm_fwd(struct llama *m, struct mg_ctx *ctx,
		    const struct mg_tensor *res, struct mg_tensor *x,
		    const struct mg_tensor *w, struct mg_tensor *y,
		    struct mg_tensor *rstd)
{
	if (res)
		return mg_op_add_rmsnorm(ctx, res, x, w, m->c.norm_eps, x, y,
					 rstd);
	return mg_op_rmsnorm(ctx, x, w, m->c.norm_eps, y, rstd);
}

/* The residual a fused layer left unadded to x_{l}: layer l - 1's xm. */
static const struct mg_tensor *pending(const struct llama *m,
				       const struct lay *L, int l,
				       struct mg_tensor *buf)
{
	if (!(m->kern & LK_RMSNORM) || l == 0)
		return NULL;
	struct lt p;
	layer_tensors(m, L, l - 1, &p);
	*buf = p.xm;
	return buf;
}

/* Layer l forward. again: the recomputation before its backward
 * (activation checkpointing), whose kept input x already holds the sum
 * the fused path added in the first pass: the residual pending then is
 * not layer l - 1's (the shared block holds another layer's by now) and
 * must not be added twice. */
static int layer_forward(struct llama *m, struct mg_ctx *ctx,
			 const struct mg_tensor *W, struct lt *t,
			 const struct mg_tensor *pos, const struct lay *L,
			 int l, bool again)
{
	struct mg_tensor f = llama_inv_freq_of(m, l), pb;
	const double eps = m->c.norm_eps, rs = llama_rope_scale(&m->c);
	const bool fused = m->kern & LK_RMSNORM, qkn = m->c.qk_norm,
		   sw = m->c.sandwich;
	const struct mg_attn_opts ao = llama_attn_opts(m, l);
	const struct mg_tensor *nw[NW_N];
	return llama_norm_ws(m, ctx, W, nw) ||
	       norm_fwd(m, ctx, again ? NULL : pending(m, L, l, &pb), &t->x,
			nw[NW_IN], &t->h1, &t->rstd1) ||
	       group_fwd(m, ctx, L, l, QKV_T, QKV_W, 3, W, &t->h1,
			 (struct mg_tensor *const[]){qkn ? &t->qr : &t->q,
						     qkn ? &t->kr : &t->k,
						     &t->v}) ||
	       (qkn && (mg_op_rmsnorm(ctx, &t->qrh, nw[NW_Q], eps, &t->qh,
				      &t->rstdq) ||
			mg_op_rmsnorm(ctx, &t->krh, nw[NW_K], eps, &t->kh,
				      &t->rstdk))) ||
	       mg_op_rope_scaled(ctx, &t->q4, pos, &f, rs) ||
	       mg_op_rope_scaled(ctx, &t->k4, pos, &f, rs) ||
	       mg_op_attention_opts(ctx, &t->q4, &t->k4, &t->v4, pos, &ao,
				    &t->o4, &t->lse) ||
	       /* xm = x + o W_o^T, through xn as scratch (sandwich: x +
		* norm(a), a = o W_o^T kept) */
	       proj_fwd(m, ctx, L, l, LT_O, W, LP_O, &t->o, NULL,
			sw ? &t->a : &t->xn) ||
	       (sw &&
		mg_op_rmsnorm(ctx, &t->a, nw[NW_AO], eps, &t->xn, &t->rstd3)) ||
	       (fused ? mg_op_add_rmsnorm(ctx, &t->x, &t->xn, nw[NW_POST], eps,
					  &t->xm, &t->h2, &t->rstd2)
		      : mg_op_add(ctx, &t->x, &t->xn, &t->xm) ||
				mg_op_rmsnorm(ctx, &t->xm, nw[NW_POST], eps,
					      &t->h2, &t->rstd2)) ||
	       group_fwd(m, ctx, L, l, GU_T, GU_W, 2, W, &t->h2,
			 (struct mg_tensor *const[]){&t->g, &t->u}) ||
	       m->glu(ctx, &t->g, &t->u, &t->s) ||
	       proj_fwd(m, ctx, L, l, LT_DOWN, W, LP_DOWN, &t->s, NULL,
			sw ? &t->f : &t->xn) ||
	       (sw &&
		mg_op_rmsnorm(ctx, &t->f, nw[NW_MO], eps, &t->xn, &t->rstd4)) ||
	       /* fused: the next norm adds xm (pending()) */
	       (!fused && mg_op_add(ctx, &t->xm, &t->xn, &t->xn));
}

/* The head adapter's buffers for the fused head, or NULL without one. */
static struct llama_head_lora *head_lora(struct llama *m, const struct lay *L,
					 struct llama_head_lora *hl)
{
	if (m->lora.ia[LT_HEAD] < 0)
		return NULL;
	char *A = m->arena.ptr, *B = m->work.ptr;
	hl->as = lora_saved(m, L, (int)m->c.layers, LT_HEAD);
	hl->xd = A + L->lxd;
	hl->tmp = A + L->ltmp;
	hl->das = B ? B + L->ldas : NULL;
	hl->da = B ? B + L->lda : NULL;
	hl->dxd = B ? B + L->ldxd : NULL;
	return hl;
}

static int check_batch(struct llama *m, const struct mg_batch *b)
{
	const struct mg_tensor *in = &b->input;
	if (in->dtype != MG_I32 || in->ndim != 2 || b->positions.ndim != 2 ||
	    !b->positions.data || b->seq < 1 || in->shape[1] != b->seq ||
	    in->shape[0] != b->n || b->n < 1)
		return mg_error("llama: the input is not a token batch (I32 "
				"ids [n, T] with positions); use a token "
				"dataset such as random_tokens");
	/* longrope: transformers takes the long factors once a position
	 * reaches original_max_position_embeddings; rows that long are
	 * refused rather than run with the short ones */
	if (m->c.lr_n && b->seq > m->c.lr_orig_max)
		return mg_error("llama: rows of %lld tokens exceed "
				"original_max_position_embeddings %lld of "
				"rope_scaling longrope, whose long factors "
				"are not run (shorten dataset.seq_len)",
				(long long)b->seq, (long long)m->c.lr_orig_max);
	if (b->seq > m->c.max_positions && !m->warned_len) {
		mg_warn("llama: rows of %lld tokens exceed "
			"max_position_embeddings %lld",
			(long long)b->seq, (long long)m->c.max_positions);
		m->warned_len = true;
	}
	return 0;
}

int llama_forward(struct llama *m, struct mg_ctx *ctx, const struct mg_batch *b,
		  struct mg_tensor *metrics)
{
	const struct llama_cfg *c = &m->c;
	m->have_fwd = false;
	if (check_batch(m, b))
		return -1;
	const int64_t n = b->n, T = b->seq, R = n * T;
	struct lay L;
	layout(m, n, T, &L);
	if (mg_buf_reserve(ctx, &m->arena, L.total, MG_MEM_ACTIVATIONS))
		return mg_error_prefix("llama activations");
	m->n = n;
	m->T = T;
	m->goff = b->global_offset;
	const enum mg_phase ph =
		ctx->training ? MG_PHASE_FORWARD : MG_PHASE_EVAL;
	const enum mg_dtype dt = ctx->compute_dtype;
	struct mg_tensor x0 = at(m, m->arena.ptr, L.x, dt, 2, R, c->dim, 0, 0);
	/* (a full fine-tune's DPO reference pass reads its frozen copy) */
	const int ue = llama_dpo_unit(m, LLAMA_UNIT_EMBED);
	struct mg_unit_view *v = mg_acquire(ctx, ue, ph);
	if (!v)
		return -1;
	struct mg_tensor ids =
		mg_tensor_make(b->input.data, MG_I32, ctx->dev->kind, 1, &R);
	int rc = mg_op_embedding(ctx, &ids, &v->params[0], &x0) ||
		 llama_embed_scale(m, ctx, &x0);
	mg_release(ctx, ue, ph);
	if (rc)
		return mg_error_prefix("llama embedding");
	for (int l = 0; l < c->layers; l++) {
		struct lt t;
		layer_tensors(m, &L, l, &t);
		const int ul = llama_dpo_unit(m, LLAMA_UNIT_LAYER(l));
		v = mg_acquire(ctx, ul, ph);
		if (!v)
			return -1;
		rc = layer_forward(m, ctx, v->params, &t, &b->positions, &L, l,
				   false);
		mg_release(ctx, ul, ph);
		if (rc)
			return mg_error_prefix("llama layer %d", l);
	}
	/* Final norm, output head (the embedding's matrix when tied), and
	 * the summed token loss. */
	const int head = llama_dpo_unit(m, LLAMA_UNIT_HEAD(c));
	struct lt last;
	layer_tensors(m, &L, (int)c->layers - 1, &last);
	struct mg_tensor hn = at(m, m->arena.ptr, L.hn, dt, 2, R, c->dim, 0, 0);
	struct mg_tensor rstdn =
		at(m, m->arena.ptr, L.rstdn, dt == MG_F64 ? MG_F64 : MG_F32, 1,
		   R, 0, 0, 0);
	struct mg_tensor logits =
		at(m, m->arena.ptr, L.logits, dt, 2, R, c->vocab, 0, 0);
	/* final logit soft-capping: the head writes lraw, capped into
	 * logits */
	const bool cap = c->final_softcap > 0;
	struct mg_tensor lraw =
		at(m, m->arena.ptr, L.lraw, dt, 2, R, c->vocab, 0, 0);
	struct mg_tensor *lout = cap ? &lraw : &logits;
	v = mg_acquire(ctx, head, ph);
	if (!v)
		return -1;
	struct mg_tensor pb;
	const struct mg_tensor *nwf =
		llama_norm_w(m, ctx, &v->params[0], NW_FINAL);
	rc = !nwf || norm_fwd(m, ctx, pending(m, &L, (int)c->layers, &pb),
			      &last.xn, nwf, &hn, &rstdn);
	if (!rc && (m->kern & LK_FLCE)) {
		struct llama_head_lora hl;
		rc = llama_head_flce_forward(m, ctx, ph, v, &hn, &b->labels,
					     (char *)m->arena.ptr + L.logits,
					     head_lora(m, &L, &hl), metrics);
	} else if (!rc && c->tie_embeddings) {
		struct mg_unit_view *e = mg_acquire(ctx, ue, ph);
		rc = !e || mg_op_linear(ctx, &hn, &e->params[0], NULL, lout);
		if (e)
			mg_release(ctx, ue, ph);
	} else if (!rc) {
		rc = proj_fwd(m, ctx, &L, (int)c->layers, LT_HEAD, v->params, 1,
			      &hn, NULL, lout);
	}
	if (!rc && cap && !(m->kern & LK_FLCE))
		rc = mg_op_softcap(ctx, &lraw, c->final_softcap, &logits);
	mg_release(ctx, head, ph);
	if (!rc && !(m->kern & LK_FLCE))
		rc = m->obj->head(m, ctx, &logits, b, metrics);
	if (rc)
		return mg_error_prefix("llama head");
	if (ctx->training) {
		m->ids = b->input;
		m->labels = b->labels;
		m->positions = b->positions;
		m->have_fwd = true;
	}
	return 0;
}

/* A weight gradient the strategy lent, or NULL for a frozen weight. */
static struct mg_tensor *gw(struct mg_tensor *g)
{
	return g->data ? g : NULL;
}

/* dx = dy W, or dx += dy W when add (the GEMM's epilogue sums them: no
 * separate pass), and the weight's gradient if it trains. */
static int lin_bwd(struct mg_ctx *ctx, const struct mg_tensor *x,
		   const struct mg_tensor *W, const struct mg_tensor *dy,
		   struct mg_tensor *dx, bool add, struct mg_tensor *dw,
		   struct mg_tensor *db)
{
	return add ? mg_op_linear_backward_add(ctx, x, W, dy, dx, dw, db)
		   : mg_op_linear_backward(ctx, x, W, dy, dx, dw, db);
}

/* The gradient of target tg's bias if it has one that trains. */
static struct mg_tensor *gb(const struct llama *m, struct mg_tensor *G, int tg)
{
	struct mg_tensor *b = bias_of(m, G, tg);
	return b ? gw(b) : NULL;
}

/* The adapter's share of a projection's backward (nothing without an
 * adapter on tg): its gradients, and its input gradient added to dx. */
static int proj_lora_bwd(struct llama *m, struct mg_ctx *ctx,
			 const struct lay *L, int l, int tg,
			 const struct mg_tensor *P, struct mg_tensor *G,
			 const struct mg_tensor *x, const struct mg_tensor *dy,
			 struct mg_tensor *dx)
{
	const struct llama_lora *lo = &m->lora;
	const int a = lo->ia[tg];
	if (a < 0)
		return 0;
	/* a fused module's targets: t's rows of the one B, dA summed */
	struct mg_tensor as = lora_saved(m, L, l, tg),
			 Bt = llama_lora_b(m, P, tg),
			 dBt = llama_lora_b(m, G, tg);
	char *B = m->work.ptr;
	return llama_lora_backward(m, ctx, l, tg, &P[a], &Bt, gw(&G[a]),
				   gw(&dBt), x, &as, dy, dx, B + L->ldas,
				   B + L->lda, (char *)m->arena.ptr + L->lxd,
				   B + L->ldxd);
}

/* Backward of proj_fwd from dy: the input gradient written to dx, the
 * base weight's gradient if it trains, the adapter's if there is one.
 * QAT: the straight-through masks on the base's input gradient (before
 * the adapter, whose input is not quantized, adds its own) and, in
 * place (llama_qat.c), on its weight gradient. */
static int proj_bwd(struct llama *m, struct mg_ctx *ctx, const struct lay *L,
		    int l, int tg, const struct mg_tensor *P,
		    struct mg_tensor *G, int w, const struct mg_tensor *x,
		    const struct mg_tensor *dy, struct mg_tensor *dx)
{
	struct mg_tensor qb, *dw = gw(&G[w]);
	/* fq8(x) again only for the weight gradient: a frozen base's input
	 * gradient is dy fq4(W), masked by x's own range */
	const struct mg_tensor *xb = dw ? base_in(m, ctx, L, tg, x, &qb) : x;
	const struct mg_tensor *W = xb ? base_w(m, ctx, tg, P, w) : NULL;
	if (!W || lin_bwd(ctx, xb, W, dy, dx, false, dw, gb(m, G, tg)) ||
	    (fq_in(m, tg) && mg_op_fq_int8_token_backward(ctx, x, dx, dx)) ||
	    llama_base_weight_grad(m, ctx, tg, &P[w], dw))
		return -1;
	return proj_lora_bwd(m, ctx, L, l, tg, P, G, x, dy, dx);
}

/* Backward of group_fwd from dys[j]: the base projections' input
 * gradients summed into dx by the GEMMs (the first written, the others
 * added), one QAT mask for that sum (they share the input), then the
 * adapters' shares (their input is not quantized) one by one or as one
 * fused group; the gradients of what trains. */
static int group_bwd(struct llama *m, struct mg_ctx *ctx, const struct lay *L,
		     int l, const int *ts, const int *ws, int n,
		     const struct mg_tensor *P, struct mg_tensor *G,
		     const struct mg_tensor *x, struct mg_tensor *const *dys,
		     struct mg_tensor *dx)
{
	int ft[3], nf = 0;
	for (int j = 0; j < n; j++)
		if (m->lora.ia[ts[j]] >= 0)
			ft[nf++] = ts[j];
	/* fq8(x) again only if a base weight trains (proj_bwd says why) */
	bool trains = false;
	for (int j = 0; j < n; j++)
		trains = trains || gw(&G[ws[j]]);
	struct mg_tensor qb;
	const struct mg_tensor *xb =
		trains ? base_in(m, ctx, L, ts[0], x, &qb) : x;
	if (!xb)
		return -1;
	for (int j = 0; j < n; j++) {
		const struct mg_tensor *W = base_w(m, ctx, ts[j], P, ws[j]);
		if (!W ||
		    lin_bwd(ctx, xb, W, dys[j], dx, j > 0, gw(&G[ws[j]]),
			    gb(m, G, ts[j])) ||
		    llama_base_weight_grad(m, ctx, ts[j], &P[ws[j]],
					   gw(&G[ws[j]])))
			return -1;
	}
	if (fq_in(m, ts[0]) && mg_op_fq_int8_token_backward(ctx, x, dx, dx))
		return -1;
	if (!nf)
		return 0;
	if (!llama_lora_fusable(m, ctx, ft, nf, P, G)) {
		for (int j = 0; j < n; j++)
			if (proj_lora_bwd(m, ctx, L, l, ts[j], P, G, x, dys[j],
					  dx))
				return -1;
		return 0;
	}
	struct mg_tensor as[3], *asp[3], *dyf[3];
	for (int j = 0, k = 0; j < n; j++) {
		if (m->lora.ia[ts[j]] < 0)
			continue;
		as[k] = lora_saved(m, L, l, ts[j]);
		asp[k] = &as[k];
		dyf[k++] = dys[j];
	}
	char *B = m->work.ptr;
	return llama_lora_backward_group(m, ctx, ft, nf, P, G, x, asp, dyf, dx,
					 B + L->ldas, B + L->lda, B + L->ldt3);
}

/* out = dres + the norm's input gradient from dy (tmp: scratch of the
 * unfused path), dw += the norm weight's. */
static int norm_bwd(struct llama *m, struct mg_ctx *ctx,
		    const struct mg_tensor *x, const struct mg_tensor *w,
		    const struct mg_tensor *rstd, const struct mg_tensor *dy,
		    const struct mg_tensor *dres, struct mg_tensor *out,
		    struct mg_tensor *tmp, struct mg_tensor *dw)
{
	if (m->kern & LK_RMSNORM)
		return mg_op_rmsnorm_backward_add(ctx, x, w, rstd, dy, dres,
						  out, dw);
	return mg_op_rmsnorm_backward(ctx, x, w, rstd, dy, tmp, dw) ||
	       mg_op_add(ctx, dres, tmp, out);
}

/* Backward through one layer: dx holds d(loss)/d(layer output) and
 * receives d(loss)/d(layer input). */
static int layer_backward(struct llama *m, struct mg_ctx *ctx,
			  const struct mg_tensor *W, struct mg_tensor *G,
			  struct lt *t, const struct lay *L, int l,
			  struct mg_tensor *dx)
{
	const struct llama_cfg *c = &m->c;
	const enum mg_dtype dt = ctx->compute_dtype;
	const int64_t n = m->n, T = m->T, R = n * T, D = c->dim,
		      qd = c->heads * c->head_dim,
		      kvd = c->kv_heads * c->head_dim, I = c->ffn;
	void *B = m->work.ptr;
	struct mg_tensor dxm = at(m, B, L->dxm, dt, 2, R, D, 0, 0),
			 dh = at(m, B, L->dh, dt, 2, R, D, 0, 0),
			 dtmp = at(m, B, L->dt, dt, 2, R, D, 0, 0),
			 ds = at(m, B, L->ds, dt, 2, R, I, 0, 0),
			 du = at(m, B, L->du, dt, 2, R, I, 0, 0),
			 dq = at(m, B, L->dq, dt, 2, R, qd, 0, 0),
			 dk = at(m, B, L->dk, dt, 2, R, kvd, 0, 0),
			 dv = at(m, B, L->dv, dt, 2, R, kvd, 0, 0),
			 dout = at(m, B, L->dout, dt, 2, R, qd, 0, 0),
			 dq4 = at(m, B, L->dq, dt, 4, n, T, c->heads,
				  c->head_dim),
			 dk4 = at(m, B, L->dk, dt, 4, n, T, c->kv_heads,
				  c->head_dim),
			 dv4 = at(m, B, L->dv, dt, 4, n, T, c->kv_heads,
				  c->head_dim),
			 do4 = at(m, B, L->dout, dt, 4, n, T, c->heads,
				  c->head_dim);
	struct mg_tensor f = llama_inv_freq_of(m, l);
	const double rs = llama_rope_scale(c);
	const struct mg_attn_opts ao = llama_attn_opts(m, l);
	const bool sw = c->sandwich;
	const struct mg_tensor *nw[NW_N];
	if (llama_norm_ws(m, ctx, W, nw))
		return -1;
	/* q/k norms: the raw q and k's gradients, in [R, width] for the
	 * projections and [R * heads, head_dim] for the norms */
	const bool qkn = c->qk_norm;
	const int64_t hd = c->head_dim;
	struct mg_tensor dqr = at(m, B, L->dqr, dt, 2, R, qd, 0, 0),
			 dkr = at(m, B, L->dkr, dt, 2, R, kvd, 0, 0),
			 dqrh = at(m, B, L->dqr, dt, 2, R * c->heads, hd, 0, 0),
			 dkrh = at(m, B, L->dkr, dt, 2, R * c->kv_heads, hd, 0,
				   0),
			 dqh = at(m, B, L->dq, dt, 2, R * c->heads, hd, 0, 0),
			 dkh = at(m, B, L->dk, dt, 2, R * c->kv_heads, hd, 0,
				  0);
	/* MLP: xn = xm + down(glu(gate(h2), up(h2))) (sandwich: xm +
	 * norm(f), f the down projection's; its gradient through dtmp) */
	const int mo = m->lp[LP_MLP_OUT_NORM], aon = m->lp[LP_ATTN_OUT_NORM];
	return (sw && mg_op_rmsnorm_backward(ctx, &t->f, nw[NW_MO], &t->rstd4,
					     dx, &dtmp, gw(&G[mo]))) ||
	       proj_bwd(m, ctx, L, l, LT_DOWN, W, G, LP_DOWN, &t->s,
			sw ? &dtmp : dx, &ds) ||
	       m->glu_backward(ctx, &t->g, &t->u, &ds, &ds, &du) ||
	       group_bwd(m, ctx, L, l, GU_T, GU_W, 2, W, G, &t->h2,
			 (struct mg_tensor *const[]){&ds, &du}, &dh) ||
	       norm_bwd(m, ctx, &t->xm, nw[NW_POST], &t->rstd2, &dh, dx, &dxm,
			&dtmp, gw(&G[LP_POST_NORM])) ||
	       /* attention: xm = x + o_proj(attn(rope(q), rope(k), v)) */
	       (sw && mg_op_rmsnorm_backward(ctx, &t->a, nw[NW_AO], &t->rstd3,
					     &dxm, &dtmp, gw(&G[aon]))) ||
	       proj_bwd(m, ctx, L, l, LT_O, W, G, LP_O, &t->o,
			sw ? &dtmp : &dxm, &dout) ||
	       mg_op_attention_opts_backward(ctx, &t->q4, &t->k4, &t->v4,
					     &m->positions, &ao, &t->o4,
					     &t->lse, &do4, &dq4, &dk4, &dv4) ||
	       mg_op_rope_scaled_backward(ctx, &dq4, &m->positions, &f, rs) ||
	       mg_op_rope_scaled_backward(ctx, &dk4, &m->positions, &f, rs) ||
	       (qkn &&
		(mg_op_rmsnorm_backward(ctx, &t->qrh, nw[NW_Q], &t->rstdq, &dqh,
					&dqrh, gw(&G[m->lp[LP_Q_NORM]])) ||
		 mg_op_rmsnorm_backward(ctx, &t->krh, nw[NW_K], &t->rstdk, &dkh,
					&dkrh, gw(&G[m->lp[LP_K_NORM]])))) ||
	       group_bwd(m, ctx, L, l, QKV_T, QKV_W, 3, W, G, &t->h1,
			 (struct mg_tensor *const[]){qkn ? &dqr : &dq,
						     qkn ? &dkr : &dk, &dv},
			 &dh) ||
	       norm_bwd(m, ctx, &t->x, nw[NW_IN], &t->rstd1, &dh, &dxm, dx,
			&dtmp, gw(&G[LP_IN_NORM]));
}

int llama_backward(struct llama *m, struct mg_ctx *ctx)
{
	const struct llama_cfg *c = &m->c;
	if (!m->have_fwd)
		return mg_error("llama: backward() needs a training forward()");
	m->have_fwd = false;
	struct lay L;
	layout(m, m->n, m->T, &L);
	if (mg_buf_reserve(ctx, &m->work, L.wtotal, MG_MEM_ACTIVATIONS))
		return mg_error_prefix("llama gradient buffers");
	const enum mg_dtype dt = ctx->compute_dtype;
	const int64_t R = m->n * m->T;
	const int head = LLAMA_UNIT_HEAD(c);
	struct mg_tensor dx = at(m, m->work.ptr, L.dx, dt, 2, R, c->dim, 0, 0);
	struct mg_tensor dhn = at(m, m->work.ptr, L.dh, dt, 2, R, c->dim, 0, 0);
	struct mg_tensor hn = at(m, m->arena.ptr, L.hn, dt, 2, R, c->dim, 0, 0);
	struct mg_tensor rstdn =
		at(m, m->arena.ptr, L.rstdn, dt == MG_F64 ? MG_F64 : MG_F32, 1,
		   R, 0, 0, 0);
	struct mg_tensor logits =
		at(m, m->arena.ptr, L.logits, dt, 2, R, c->vocab, 0, 0);
	struct lt last;
	layer_tensors(m, &L, (int)c->layers - 1, &last);
	/* d(loss)/d(logits), in place (flce: per chunk, below), through
	 * the final soft-cap from the uncapped logits */
	struct mg_tensor lraw =
		at(m, m->arena.ptr, L.lraw, dt, 2, R, c->vocab, 0, 0);
	if (!(m->kern & LK_FLCE) &&
	    (m->obj->head_backward(m, ctx, &logits) ||
	     (c->final_softcap > 0 &&
	      mg_op_softcap_backward(ctx, &lraw, c->final_softcap, &logits,
				     &logits))))
		return mg_error_prefix("llama loss backward");
	struct mg_unit_view *v = mg_acquire(ctx, head, MG_PHASE_BACKWARD);
	if (!v)
		return -1;
	int rc;
	if (m->kern & LK_FLCE) {
		struct llama_head_lora hl;
		rc = llama_head_flce_backward(m, ctx, v, &hn, &m->labels,
					      (char *)m->arena.ptr + L.logits,
					      head_lora(m, &L, &hl), &dhn);
	} else if (c->tie_embeddings) {
		struct mg_unit_view *e =
			mg_acquire(ctx, LLAMA_UNIT_EMBED, MG_PHASE_BACKWARD);
		rc = !e ||
		     mg_op_linear_backward(ctx, &hn, &e->params[0], &logits,
					   &dhn, gw(&e->grads[0]), NULL);
		if (e)
			mg_release(ctx, LLAMA_UNIT_EMBED, MG_PHASE_BACKWARD);
	} else {
		rc = proj_bwd(m, ctx, &L, (int)c->layers, LT_HEAD, v->params,
			      v->grads, 1, &hn, &logits, &dhn);
	}
	const struct mg_tensor *nwf =
		rc ? NULL : llama_norm_w(m, ctx, &v->params[0], NW_FINAL);
	if (!rc)
		rc = !nwf ||
		     mg_op_rmsnorm_backward(ctx, &last.xn, nwf, &rstdn, &dhn,
					    &dx, gw(&v->grads[0]));
	if (!rc)
		rc = mg_grads_ready(ctx, head);
	mg_release(ctx, head, MG_PHASE_BACKWARD);
	if (rc)
		return mg_error_prefix("llama head backward");
	for (int l = (int)c->layers - 1; l >= 0; l--) {
		struct lt t;
		layer_tensors(m, &L, l, &t);
		v = mg_acquire(ctx, LLAMA_UNIT_LAYER(l), MG_PHASE_BACKWARD);
		if (!v)
			return -1;
		/* Activation checkpointing: refill the layer block from the
		 * kept input. Dropout masks are keyed on (layer, target,
		 * sample), so the recomputation draws the forward's. */
		rc = m->recompute ? layer_forward(m, ctx, v->params, &t,
						  &m->positions, &L, l, true)
				  : 0;
		if (!rc)
			rc = layer_backward(m, ctx, v->params, v->grads, &t, &L,
					    l, &dx);
		if (!rc)
			rc = mg_grads_ready(ctx, LLAMA_UNIT_LAYER(l));
		mg_release(ctx, LLAMA_UNIT_LAYER(l), MG_PHASE_BACKWARD);
		if (rc)
			return mg_error_prefix("llama layer %d backward", l);
	}
	v = mg_acquire(ctx, LLAMA_UNIT_EMBED, MG_PHASE_BACKWARD);
	if (!v)
		return -1;
	struct mg_tensor ids =
		mg_tensor_make(m->ids.data, MG_I32, ctx->dev->kind, 1, &R);
	/* A frozen embedding (LoRA) takes no gradient. */
	rc = v->grads[0].data ? llama_embed_scale(m, ctx, &dx) ||
					mg_op_embedding_backward(ctx, &ids, &dx,
								 &v->grads[0])
			      : 0;
	if (!rc)
		rc = mg_grads_ready(ctx, LLAMA_UNIT_EMBED);
	mg_release(ctx, LLAMA_UNIT_EMBED, MG_PHASE_BACKWARD);
	if (rc)
		return mg_error_prefix("llama embedding backward");
	return 0;
}
