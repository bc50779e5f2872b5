/*
 * llm.c - the decoder-only transformer's ops (include/mg/ops_llm.h):
 * argument checks with errors naming the op and the argument, then the
 * CPU kernels (cpu/llm_*.c) or their CUDA twins (cuda/llm.cu).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "ops/cpu/cpu_llm.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_llm.h"
#endif

/* A float tensor of a dtype the context's device computes in: F32 or F64
 * on the CPU, F32, BF16 or F16 on CUDA. Then the shared checks. */
static int fcheck(const char *op, const char *name, const struct mg_ctx *ctx,
		  const struct mg_tensor *t, int ndim)
{
	if (!t)
		return mg_error("%s: %s is missing", op, name);
	const bool cuda = ctx->dev->kind == MG_DEV_CUDA;
	const enum mg_dtype d = t->dtype;
	const bool ok = cuda ? (d == MG_F32 || d == MG_BF16 || d == MG_F16)
			     : (d == MG_F32 || d == MG_F64);
	if (!ok)
		return mg_error("%s: %s is %s; this op supports %s", op, name,
				mg_dtype_name(d),
				cuda ? "F32, BF16 and F16 on CUDA"
				     : "F32 and F64 on the CPU (F32, BF16 and "
				       "F16 on CUDA)");
	return mgo_check(op, name, ctx, t, (int)d, ndim);
}

/* Saved statistics' dtype for data of dtype d. */
static enum mg_dtype stat_dt(enum mg_dtype d)
{
	return d == MG_F64 ? MG_F64 : MG_F32;
}

static int numel_is(const char *op, const char *name, const struct mg_tensor *t,
		    int64_t n)
{
	if (mg_tensor_numel(t) != n) {
		char s[96];
		return mg_error("%s: %s must have %lld elements, has shape %s",
				op, name, (long long)n,
				mgo_shape_str(t, s, sizeof s));
	}
	return 0;
}

/* t is [d0, d1, ...] exactly (n dims). */
static int shape_is(const char *op, const char *name, const struct mg_tensor *t,
		    int n, const int64_t *dims)
{
	bool same = t->ndim == n;
	for (int i = 0; same && i < n; i++)
		same = t->shape[i] == dims[i];
	if (!same) {
		struct mg_tensor want = *t;
		want.ndim = n;
		for (int i = 0; i < n; i++)
			want.shape[i] = dims[i];
		char a[96], b[96];
		return mg_error("%s: %s has shape %s, expected %s", op, name,
				mgo_shape_str(t, a, sizeof a),
				mgo_shape_str(&want, b, sizeof b));
	}
	return 0;
}

/* ---- embedding ---------------------------------------------------- */

/* rows [...ids, D] of dtype dt. */
static int embed_rows(const char *op, const char *name, struct mg_ctx *ctx,
		      const struct mg_tensor *ids, const struct mg_tensor *t,
		      enum mg_dtype dt, int64_t D)
{
	if (ids->ndim + 1 > MG_MAX_DIMS)
		return mg_error("%s: ids has too many dimensions", op);
	int64_t dims[MG_MAX_DIMS];
	for (int i = 0; i < ids->ndim; i++)
		dims[i] = ids->shape[i];
	dims[ids->ndim] = D;
	if (mgo_check(op, name, ctx, t, (int)dt, -1))
		return -1;
	return shape_is(op, name, t, ids->ndim + 1, dims);
}

int mg_op_embedding(struct mg_ctx *ctx, const struct mg_tensor *ids,
		    const struct mg_tensor *table, struct mg_tensor *y)
{
	static const char op[] = "embedding";
	if (mgo_check_ctx(op, ctx) ||
	    mgo_check(op, "ids", ctx, ids, MG_I32, -1) ||
	    fcheck(op, "table", ctx, table, 2) ||
	    embed_rows(op, "y", ctx, ids, y, table->dtype, table->shape[1]))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_embedding(ctx, ids, table, y);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_embedding(ctx, ids, table, y);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

int mg_op_embedding_backward(struct mg_ctx *ctx, const struct mg_tensor *ids,
			     const struct mg_tensor *dy,
			     struct mg_tensor *dtable)
{
	static const char op[] = "embedding_backward";
	if (mgo_check_ctx(op, ctx) ||
	    mgo_check(op, "ids", ctx, ids, MG_I32, -1) ||
	    fcheck(op, "dtable", ctx, dtable, 2) ||
	    embed_rows(op, "dy", ctx, ids, dy, dtable->dtype, dtable->shape[1]))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_embedding_backward(ctx, ids, dy, dtable);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_embedding_backward(ctx, ids, dy, dtable);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

/* ---- rmsnorm ------------------------------------------------------ */

/* x [..., D] and w [D] (x's dtype or F32); *R rows. */
static int rms_xw(const char *op, struct mg_ctx *ctx, const struct mg_tensor *x,
		  const struct mg_tensor *w, int64_t *R)
{
	if (fcheck(op, "x", ctx, x, -1))
		return -1;
	if (x->ndim < 1)
		return mg_error("%s: x must have at least one dimension", op);
	const int64_t D = x->shape[x->ndim - 1];
	if (!w)
		return mg_error("%s: w is missing", op);
	if (mgo_check(op, "w", ctx, w, w->dtype == MG_F32 ? MG_F32 : x->dtype,
		      1) ||
	    mgo_check_vec(op, "w", w, D))
		return -1;
	*R = D ? mg_tensor_numel(x) / D : 0;
	return 0;
}

int mg_op_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
		  const struct mg_tensor *w, double eps, struct mg_tensor *y,
		  struct mg_tensor *rstd)
{
	static const char op[] = "rmsnorm";
	int64_t R = 0;
	if (mgo_check_ctx(op, ctx) || rms_xw(op, ctx, x, w, &R) ||
	    mgo_check(op, "y", ctx, y, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "y", y) ||
	    mgo_check_opt(op, "rstd", ctx, rstd, stat_dt(x->dtype), -1) ||
	    (rstd && numel_is(op, "rstd", rstd, R)))
		return -1;
	if (!(eps >= 0))
		return mg_error("%s: eps must be >= 0, is %g", op, eps);
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_rmsnorm(ctx, x, w, eps, y, rstd);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_rmsnorm(ctx, x, w, eps, y, rstd);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

int mg_op_rmsnorm_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			   const struct mg_tensor *w,
			   const struct mg_tensor *rstd,
			   const struct mg_tensor *dy, struct mg_tensor *dx,
			   struct mg_tensor *dw)
{
	static const char op[] = "rmsnorm_backward";
	int64_t R = 0;
	if (mgo_check_ctx(op, ctx) || rms_xw(op, ctx, x, w, &R) ||
	    mgo_check(op, "rstd", ctx, rstd, stat_dt(x->dtype), -1) ||
	    numel_is(op, "rstd", rstd, R) ||
	    mgo_check(op, "dy", ctx, dy, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "dy", dy) ||
	    mgo_check_opt(op, "dx", ctx, dx, x->dtype, -1) ||
	    (dx && mgo_same_shape(op, "x", x, "dx", dx)) ||
	    mgo_check_opt(op, "dw", ctx, dw, w->dtype, -1) ||
	    (dw && mgo_same_shape(op, "w", w, "dw", dw)))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_rmsnorm_backward(ctx, x, w, rstd, dy, dx, dw);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_rmsnorm_backward(ctx, x, w, rstd, dy, dx, dw);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

/* ---- rope --------------------------------------------------------- */

static int rope_run(const char *op, struct mg_ctx *ctx, const char *xn,
		    struct mg_tensor *x, const struct mg_tensor *positions,
		    const struct mg_tensor *inv_freq, int sign, double scale)
{
	if (!isfinite(scale) || !(scale > 0))
		return mg_error("%s: scale %g is not a positive number", op,
				scale);
	if (mgo_check_ctx(op, ctx) || fcheck(op, xn, ctx, x, 4) ||
	    mgo_check(op, "positions", ctx, positions, MG_I32, -1) ||
	    shape_is(op, "positions", positions, 2, x->shape) ||
	    mgo_check(op, "inv_freq", ctx, inv_freq, MG_F32, 1))
		return -1;
	/* partial rotary: inv_freq's length h <= hd / 2 turns the first 2h
	 * dims of each head, the rest pass */
	if (inv_freq->shape[0] < 1 || 2 * inv_freq->shape[0] > x->shape[3])
		return mg_error("%s: inv_freq has %lld frequencies, a head of "
				"%lld (%s's last dimension) holds 1 to %lld "
				"rotary pairs",
				op, (long long)inv_freq->shape[0],
				(long long)x->shape[3], xn,
				(long long)x->shape[3] / 2);
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_rope(ctx, x, positions, inv_freq, sign, scale);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_rope(ctx, x, positions, inv_freq, sign, scale);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

int mg_op_rope(struct mg_ctx *ctx, struct mg_tensor *x,
	       const struct mg_tensor *positions,
	       const struct mg_tensor *inv_freq)
{
	return rope_run("rope", ctx, "x", x, positions, inv_freq, 1, 1);
}

int mg_op_rope_scaled(struct mg_ctx *ctx, struct mg_tensor *x,
		      const struct mg_tensor *positions,
		      const struct mg_tensor *inv_freq, double scale)
{
	return rope_run("rope_scaled", ctx, "x", x, positions, inv_freq, 1,
			scale);
}

int mg_op_rope_scaled_backward(struct mg_ctx *ctx, struct mg_tensor *dx,
			       const struct mg_tensor *positions,
			       const struct mg_tensor *inv_freq, double scale)
{
	return rope_run("rope_scaled_backward", ctx, "dx", dx, positions,
			inv_freq, -1, scale);
}

int mg_op_rope_backward(struct mg_ctx *ctx, struct mg_tensor *dx,
			const struct mg_tensor *positions,
			const struct mg_tensor *inv_freq)
{
	return rope_run("rope_backward", ctx, "dx", dx, positions, inv_freq, -1,
			1);
}

/* ---- attention ---------------------------------------------------- */

/* q [N, T, Hq, hd], k and v [N, T, Hkv, hd], positions [N, T]. */
static int attn_qkv(const char *op, struct mg_ctx *ctx,
		    const struct mg_tensor *q, const struct mg_tensor *k,
		    const struct mg_tensor *v,
		    const struct mg_tensor *positions)
{
	if (fcheck(op, "q", ctx, q, 4) ||
	    mgo_check(op, "k", ctx, k, q->dtype, 4) ||
	    mgo_check(op, "v", ctx, v, q->dtype, 4))
		return -1;
	const int64_t kd[4] = {q->shape[0], q->shape[1], k->shape[2],
			       q->shape[3]};
	if (shape_is(op, "k", k, 4, kd) || mgo_same_shape(op, "k", k, "v", v))
		return -1;
	if (k->shape[2] < 1 || q->shape[2] % k->shape[2])
		return mg_error("%s: the query heads (%lld) must be a multiple "
				"of the key/value heads (%lld)",
				op, (long long)q->shape[2],
				(long long)k->shape[2]);
	if (mgo_check(op, "positions", ctx, positions, MG_I32, -1) ||
	    shape_is(op, "positions", positions, 2, q->shape))
		return -1;
	return 0;
}

static int attn_lse(const char *op, struct mg_ctx *ctx,
		    const struct mg_tensor *q, const struct mg_tensor *lse)
{
	const int64_t ld[3] = {q->shape[0], q->shape[2], q->shape[1]};
	if (mgo_check(op, "lse", ctx, lse, stat_dt(q->dtype), -1))
		return -1;
	return shape_is(op, "lse", lse, 3, ld);
}

/* The caller's options over the defaults (the fields its size covers),
 * checked. */
static int attn_opts(const char *op, const struct mg_attn_opts *in,
		     struct mg_attn_opts *a)
{
	*a = MG_ATTN_OPTS(0, 0);
	if (!in || in->size < offsetof(struct mg_attn_opts, window) +
				      sizeof in->window)
		return mg_error("%s: no options, or options of %u bytes "
				"(initialise them with MG_ATTN_OPTS)",
				op, in ? in->size : 0);
	memcpy(a, in, in->size < sizeof *a ? in->size : sizeof *a);
	a->size = sizeof *a;
	if (!isfinite(a->scale) || a->window < 0 || !isfinite(a->softcap) ||
	    a->softcap < 0)
		return mg_error("%s: scale %g, window %lld and softcap %g "
				"(need a finite scale, window >= 0 and a "
				"finite softcap >= 0)",
				op, a->scale, (long long)a->window, a->softcap);
	return 0;
}

int mg_op_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
		    const struct mg_tensor *k, const struct mg_tensor *v,
		    const struct mg_tensor *positions, double scale,
		    struct mg_tensor *o, struct mg_tensor *lse)
{
	const struct mg_attn_opts a = MG_ATTN_OPTS(scale, 0);
	return mg_op_attention_opts(ctx, q, k, v, positions, &a, o, lse);
}

int mg_op_attention_opts(struct mg_ctx *ctx, const struct mg_tensor *q,
			 const struct mg_tensor *k, const struct mg_tensor *v,
			 const struct mg_tensor *positions,
			 const struct mg_attn_opts *opts, struct mg_tensor *o,
			 struct mg_tensor *lse)
{
	static const char op[] = "attention";
	struct mg_attn_opts a;
	if (mgo_check_ctx(op, ctx) || attn_opts(op, opts, &a) ||
	    attn_qkv(op, ctx, q, k, v, positions) ||
	    mgo_check(op, "o", ctx, o, q->dtype, 4) ||
	    mgo_same_shape(op, "q", q, "o", o) ||
	    (lse && attn_lse(op, ctx, q, lse)))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_attention(ctx, q, k, v, positions, &a, o, lse);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_attention(ctx, q, k, v, positions, &a, o, lse);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

int mg_op_attention_backward(struct mg_ctx *ctx, const struct mg_tensor *q,
			     const struct mg_tensor *k,
			     const struct mg_tensor *v,
			     const struct mg_tensor *positions, double scale,
			     const struct mg_tensor *o,
			     const struct mg_tensor *lse,
			     const struct mg_tensor *dout, struct mg_tensor *dq,
			     struct mg_tensor *dk, struct mg_tensor *dv)
{
	const struct mg_attn_opts a = MG_ATTN_OPTS(scale, 0);
	return mg_op_attention_opts_backward(ctx, q, k, v, positions, &a, o,
					     lse, dout, dq, dk, dv);
}

int mg_op_attention_opts_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *opts,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv)
{
	static const char op[] = "attention_backward";
	struct mg_attn_opts a;
	if (mgo_check_ctx(op, ctx) || attn_opts(op, opts, &a) ||
	    attn_qkv(op, ctx, q, k, v, positions) ||
	    mgo_check(op, "o", ctx, o, q->dtype, 4) ||
	    mgo_same_shape(op, "q", q, "o", o) || attn_lse(op, ctx, q, lse) ||
	    mgo_check(op, "dout", ctx, dout, q->dtype, 4) ||
	    mgo_same_shape(op, "q", q, "dout", dout) ||
	    mgo_check_opt(op, "dq", ctx, dq, q->dtype, 4) ||
	    (dq && mgo_same_shape(op, "q", q, "dq", dq)) ||
	    mgo_check_opt(op, "dk", ctx, dk, q->dtype, 4) ||
	    (dk && mgo_same_shape(op, "k", k, "dk", dk)) ||
	    mgo_check_opt(op, "dv", ctx, dv, q->dtype, 4) ||
	    (dv && mgo_same_shape(op, "v", v, "dv", dv)))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_attention_backward(ctx, q, k, v, positions, &a, o,
						 lse, dout, dq, dk, dv);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_attention_backward(ctx, q, k, v, positions, &a,
						  o, lse, dout, dq, dk, dv);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

/* ---- attention over a key/value cache (decoding) ------------------ */

int mg_op_attention_decode(struct mg_ctx *ctx, const struct mg_tensor *q,
			   const struct mg_tensor *k_cache,
			   const struct mg_tensor *v_cache, int64_t pos,
			   double scale, struct mg_tensor *o)
{
	const struct mg_attn_opts a = MG_ATTN_OPTS(scale, 0);
	return mg_op_attention_decode_opts(ctx, q, k_cache, v_cache, pos, &a,
					   o);
}

int mg_op_attention_decode_opts(struct mg_ctx *ctx, const struct mg_tensor *q,
				const struct mg_tensor *k_cache,
				const struct mg_tensor *v_cache, int64_t pos,
				const struct mg_attn_opts *opts,
				struct mg_tensor *o)
{
	static const char op[] = "attention_decode";
	struct mg_attn_opts a;
	if (mgo_check_ctx(op, ctx) || attn_opts(op, opts, &a) ||
	    fcheck(op, "q", ctx, q, 3) ||
	    mgo_check(op, "k_cache", ctx, k_cache, q->dtype, 3) ||
	    mgo_check(op, "v_cache", ctx, v_cache, q->dtype, 3) ||
	    mgo_same_shape(op, "k_cache", k_cache, "v_cache", v_cache) ||
	    mgo_check(op, "o", ctx, o, q->dtype, 3) ||
	    mgo_same_shape(op, "q", q, "o", o))
		return -1;
	if (k_cache->shape[2] != q->shape[2]) {
		char a[96], b[96];
		return mg_error("%s: k_cache %s and q %s differ in the head "
				"dimension",
				op, mgo_shape_str(k_cache, a, sizeof a),
				mgo_shape_str(q, b, sizeof b));
	}
	if (k_cache->shape[1] < 1 || q->shape[1] % k_cache->shape[1])
		return mg_error("%s: the query heads (%lld) must be a multiple "
				"of the key/value heads (%lld)",
				op, (long long)q->shape[1],
				(long long)k_cache->shape[1]);
	const int64_t n = q->shape[0], max_len = k_cache->shape[0];
	if (pos < 0 || pos > max_len - n)
		return mg_error("%s: %lld new tokens at position %lld do not "
				"fit the cache of %lld rows",
				op, (long long)n, (long long)pos,
				(long long)max_len);
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_attention_decode(ctx, q, k_cache, v_cache, pos,
					       &a, o);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_attention_decode(ctx, q, k_cache, v_cache, pos,
						&a, o);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

/* ---- swiglu ------------------------------------------------------- */

/* b of a's dtype and element count (element-wise: shapes may differ). */
static int ew_like(const char *op, struct mg_ctx *ctx, const char *an,
		   const struct mg_tensor *a, const char *bn,
		   const struct mg_tensor *b)
{
	if (mgo_check(op, bn, ctx, b, a->dtype, -1))
		return -1;
	if (mg_tensor_numel(a) != mg_tensor_numel(b))
		return mgo_same_shape(op, an, a, bn, b);
	return 0;
}

int mg_op_swiglu(struct mg_ctx *ctx, const struct mg_tensor *g,
		 const struct mg_tensor *u, struct mg_tensor *h)
{
	static const char op[] = "swiglu";
	if (mgo_check_ctx(op, ctx) || fcheck(op, "g", ctx, g, -1) ||
	    ew_like(op, ctx, "g", g, "u", u) ||
	    ew_like(op, ctx, "g", g, "h", h))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_swiglu(ctx, g, u, h);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_swiglu(ctx, g, u, h);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}

int mg_op_swiglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			  const struct mg_tensor *u, const struct mg_tensor *dh,
			  struct mg_tensor *dg, struct mg_tensor *du)
{
	static const char op[] = "swiglu_backward";
	if (mgo_check_ctx(op, ctx) || fcheck(op, "g", ctx, g, -1) ||
	    ew_like(op, ctx, "g", g, "u", u) ||
	    ew_like(op, ctx, "g", g, "dh", dh) ||
	    (dg && ew_like(op, ctx, "g", g, "dg", dg)) ||
	    (du && ew_like(op, ctx, "g", g, "du", du)))
		return -1;
	switch (ctx->dev->kind) {
	case MG_DEV_CPU:
		return mg_cpu_swiglu_backward(ctx, g, u, dh, dg, du);
#ifdef MG_HAVE_CUDA
	case MG_DEV_CUDA:
		return mg_cuda_swiglu_backward(ctx, g, u, dh, dg, du);
#endif
	default:
		return mgo_no_device(op, ctx);
	}
}
