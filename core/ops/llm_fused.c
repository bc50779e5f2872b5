/*
 * llm_fused.c - the fused LLM ops (include/mg/ops_llm.h, ABI 1.5):
 * residual add + RMSNorm, RMSNorm backward + residual gradient, and the
 * chunked linear + cross-entropy of the output head. Argument checks
 * with errors naming the op and the argument, then the CPU reference
 * (cpu/llm_fused.c) or its CUDA twin (cuda/llm_fused.cu). The unfused
 * ops stay the reference these are tested against.
 */
#include "ops/cpu/cpu_llm.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_llm.h"
#endif

/* A float tensor of a dtype the device computes in (as in llm.c). */
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

int mg_op_add_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
		      const struct mg_tensor *r, const struct mg_tensor *w,
		      double eps, struct mg_tensor *s, struct mg_tensor *y,
		      struct mg_tensor *rstd)
{
	static const char op[] = "add_rmsnorm";
	int64_t R = 0;
	if (mgo_check_ctx(op, ctx) || rms_xw(op, ctx, x, w, &R) ||
	    mgo_check(op, "r", ctx, r, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "r", r) ||
	    mgo_check(op, "s", ctx, s, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "s", s) ||
	    mgo_check(op, "y", ctx, y, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "y", y) ||
	    mgo_check_opt(op, "rstd", ctx, rstd, stat_dt(x->dtype), -1) ||
	    (rstd && numel_is(op, "rstd", rstd, R)))
		return -1;
	if (y->data && y->data == s->data)
		return mg_error("%s: y must not alias s", op);
	if (!(eps >= 0))
		return mg_error("%s: eps must be >= 0, is %g", op, eps);
	MGO_DISPATCH(op, ctx, mg_cpu_add_rmsnorm(ctx, x, r, w, eps, s, y, rstd),
		     mg_cuda_add_rmsnorm(ctx, x, r, w, eps, s, y, rstd));
}

int mg_op_rmsnorm_backward_add(struct mg_ctx *ctx, const struct mg_tensor *x,
			       const struct mg_tensor *w,
			       const struct mg_tensor *rstd,
			       const struct mg_tensor *dy,
			       const struct mg_tensor *dres,
			       struct mg_tensor *dx, struct mg_tensor *dw)
{
	static const char op[] = "rmsnorm_backward_add";
	int64_t R = 0;
	if (mgo_check_ctx(op, ctx) || rms_xw(op, ctx, x, w, &R) ||
	    mgo_check(op, "rstd", ctx, rstd, stat_dt(x->dtype), -1) ||
	    numel_is(op, "rstd", rstd, R) ||
	    mgo_check(op, "dy", ctx, dy, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "dy", dy) ||
	    mgo_check(op, "dres", ctx, dres, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "dres", dres) ||
	    mgo_check(op, "dx", ctx, dx, x->dtype, -1) ||
	    mgo_same_shape(op, "x", x, "dx", dx) ||
	    mgo_check_opt(op, "dw", ctx, dw, w->dtype, -1) ||
	    (dw && mgo_same_shape(op, "w", w, "dw", dw)))
		return -1;
	if (dx->data && (dx->data == dy->data || dx->data == x->data))
		return mg_error("%s: dx must not alias dy or x", op);
	MGO_DISPATCH(
		op, ctx,
		mg_cpu_rmsnorm_backward_add(ctx, x, w, rstd, dy, dres, dx, dw),
		mg_cuda_rmsnorm_backward_add(ctx, x, w, rstd, dy, dres, dx,
					     dw));
}

/* The low-rank term's operands: x2 [R, r], w2 [V, r], r >= 1, dx2 and dw2
 * shaped as x2 and w2. */
static int lowrank_check(const char *op, struct mg_ctx *ctx,
			 const struct mg_tensor *x, const struct mg_lowrank *lr,
			 int64_t R, int64_t V)
{
	if (mgo_check(op, "x2", ctx, lr->x2, x->dtype, 2) ||
	    mgo_check(op, "w2", ctx, lr->w2, x->dtype, 2) ||
	    mgo_check_opt(op, "dx2", ctx, lr->dx2, x->dtype, -1) ||
	    (lr->dx2 && mgo_same_shape(op, "x2", lr->x2, "dx2", lr->dx2)) ||
	    mgo_check_opt(op, "dw2", ctx, lr->dw2, x->dtype, -1) ||
	    (lr->dw2 && mgo_same_shape(op, "w2", lr->w2, "dw2", lr->dw2)))
		return -1;
	const int64_t r = lr->x2->shape[1];
	if (lr->x2->shape[0] != R || r < 1 || lr->w2->shape[0] != V ||
	    lr->w2->shape[1] != r) {
		char a[96], b[96];
		return mg_error("%s: x2 %s and w2 %s must be [%lld, r] and "
				"[%lld, r], r >= 1",
				op, mgo_shape_str(lr->x2, a, sizeof a),
				mgo_shape_str(lr->w2, b, sizeof b),
				(long long)R, (long long)V);
	}
	if (lr->dx2 && lr->dx2->data == lr->x2->data)
		return mg_error("%s: dx2 must not alias x2", op);
	return 0;
}

static int linear_xent(const char *op, struct mg_ctx *ctx,
		       const struct mg_tensor *x, const struct mg_tensor *w,
		       const struct mg_lowrank *lr,
		       const struct mg_tensor *labels,
		       const struct mg_tensor *scale, struct mg_tensor *work,
		       struct mg_tensor *metrics, struct mg_tensor *dx,
		       struct mg_tensor *dw)
{
	if (mgo_check_ctx(op, ctx) || fcheck(op, "x", ctx, x, -1) ||
	    mgo_check(op, "w", ctx, w, x->dtype, 2) ||
	    mgo_check(op, "labels", ctx, labels, MG_I32, -1) ||
	    mgo_check(op, "work", ctx, work, x->dtype, 2) ||
	    mgo_check_opt(op, "scale", ctx, scale, MG_F32, -1) ||
	    mgo_check_opt(op, "metrics", ctx, metrics, -1, -1) ||
	    mgo_check_opt(op, "dx", ctx, dx, x->dtype, -1) ||
	    (dx && mgo_same_shape(op, "x", x, "dx", dx)) ||
	    mgo_check_opt(op, "dw", ctx, dw, x->dtype, -1) ||
	    (dw && mgo_same_shape(op, "w", w, "dw", dw)))
		return -1;
	const int64_t V = w->shape[0], D = w->shape[1];
	if (x->ndim < 1 || x->shape[x->ndim - 1] != D) {
		char a[96], b[96];
		return mg_error("%s: x %s does not end in w %s's width %lld",
				op, mgo_shape_str(x, a, sizeof a),
				mgo_shape_str(w, b, sizeof b), (long long)D);
	}
	const int64_t R = D ? mg_tensor_numel(x) / D : 0;
	if (V < 1)
		return mg_error("%s: w has no rows (classes)", op);
	if (numel_is(op, "labels", labels, R))
		return -1;
	if (work->shape[0] < 1 || work->shape[1] != V) {
		char a[96];
		return mg_error("%s: work %s must be [C >= 1, %lld] (a chunk "
				"of rows by the %lld classes)",
				op, mgo_shape_str(work, a, sizeof a),
				(long long)V, (long long)V);
	}
	if (scale && mg_tensor_numel(scale) != 1)
		return mg_error("%s: scale must be one value, has %lld", op,
				(long long)mg_tensor_numel(scale));
	if (metrics && mg_tensor_numel(metrics) < MG_METRIC_N)
		return mg_error("%s: metrics hold %lld values, need %d", op,
				(long long)mg_tensor_numel(metrics),
				MG_METRIC_N);
	if (dx && (dx->data == x->data || dx->data == work->data))
		return mg_error("%s: dx must not alias x or work", op);
	if (lr && lowrank_check(op, ctx, x, lr, R, V))
		return -1;
	MGO_DISPATCH(op, ctx,
		     mg_cpu_linear_xent(ctx, x, w, lr, labels, scale, work,
					metrics, dx, dw),
		     mg_cuda_linear_xent(ctx, x, w, lr, labels, scale, work,
					 metrics, dx, dw));
}

int mg_op_linear_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
		      const struct mg_tensor *w, const struct mg_tensor *labels,
		      const struct mg_tensor *scale, struct mg_tensor *work,
		      struct mg_tensor *metrics, struct mg_tensor *dx,
		      struct mg_tensor *dw)
{
	return linear_xent("linear_xent", ctx, x, w, NULL, labels, scale, work,
			   metrics, dx, dw);
}

int mg_op_linear_lora_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
			   const struct mg_tensor *w,
			   const struct mg_lowrank *lr,
			   const struct mg_tensor *labels,
			   const struct mg_tensor *scale,
			   struct mg_tensor *work, struct mg_tensor *metrics,
			   struct mg_tensor *dx, struct mg_tensor *dw)
{
	return linear_xent("linear_lora_xent", ctx, x, w, lr, labels, scale,
			   work, metrics, dx, dw);
}
