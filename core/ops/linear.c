/*
 * linear.c - the public fully connected ops y = x w^T + b and backward:
 * checks, then the device's backend. Leading dims of x are flattened into
 * rows, so a classifier head [N, C] and a token projection [N, T, d] use
 * one op.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

/* t is [lead..., last] with the leading dims of ref and the given last. */
static int lin_shape(const char *op, const char *name,
		     const struct mg_tensor *t, const struct mg_tensor *ref,
		     int64_t last)
{
	bool ok = t->ndim == ref->ndim && t->shape[t->ndim - 1] == last;
	for (int i = 0; ok && i < t->ndim - 1; i++)
		ok = t->shape[i] == ref->shape[i];
	if (!ok) {
		char st[96], sr[96];
		return mg_error("%s: %s is %s; expected the leading dims of x "
				"%s and last dim %lld",
				op, name, mgo_shape_str(t, st, sizeof st),
				mgo_shape_str(ref, sr, sizeof sr),
				(long long)last);
	}
	return 0;
}

/* Check x and w; rows, in, out from them. */
static int lin_check(const char *op, struct mg_ctx *ctx,
		     const struct mg_tensor *x, const struct mg_tensor *w,
		     int64_t *rows, int64_t *in, int64_t *out)
{
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "x", ctx, x, -1, -1) ||
	    mgo_check(op, "w", ctx, w, x->dtype, 2))
		return -1;
	*out = w->shape[0];
	*in = w->shape[1];
	if (x->ndim < 1 || x->shape[x->ndim - 1] != *in) {
		char sx[96], sw[96];
		return mg_error("%s: x %s does not match weight %s (last dim "
				"must be %lld)",
				op, mgo_shape_str(x, sx, sizeof sx),
				mgo_shape_str(w, sw, sizeof sw),
				(long long)*in);
	}
	*rows = *in ? mg_tensor_numel(x) / *in : 0;
	return 0;
}

/* Both forward ops: y written, or added to when y_add. */
static int lin_forward(const char *op, struct mg_ctx *ctx,
		       const struct mg_tensor *x, const struct mg_tensor *w,
		       const struct mg_tensor *b, struct mg_tensor *y,
		       bool y_add)
{
	int64_t rows, in, out;
	if (lin_check(op, ctx, x, w, &rows, &in, &out) ||
	    mgo_check(op, "y", ctx, y, x->dtype, -1) ||
	    lin_shape(op, "y", y, x, out) ||
	    mgo_check_opt(op, "b", ctx, b, x->dtype, 1) ||
	    (b && mgo_check_vec(op, "b", b, out)))
		return -1;
	if (y_add)
		MGO_DISPATCH(op, ctx, mg_cpu_linear_add(ctx, x, w, b, y),
			     mg_cuda_linear_add(ctx, x, w, b, y));
	MGO_DISPATCH(op, ctx, mg_cpu_linear(ctx, x, w, b, y),
		     mg_cuda_linear(ctx, x, w, b, y));
}

int mg_op_linear(struct mg_ctx *ctx, const struct mg_tensor *x,
		 const struct mg_tensor *w, const struct mg_tensor *b,
		 struct mg_tensor *y)
{
	return lin_forward("linear", ctx, x, w, b, y, false);
}

int mg_op_linear_add(struct mg_ctx *ctx, const struct mg_tensor *x,
		     const struct mg_tensor *w, const struct mg_tensor *b,
		     struct mg_tensor *y)
{
	return lin_forward("linear_add", ctx, x, w, b, y, true);
}

/* Both backward ops: dx written, or added to when dx_add. */
static int lin_backward(const char *op, struct mg_ctx *ctx,
			const struct mg_tensor *x, const struct mg_tensor *w,
			const struct mg_tensor *dy, struct mg_tensor *dx,
			bool dx_add, struct mg_tensor *dw, struct mg_tensor *db)
{
	int64_t rows, in, out;
	if (lin_check(op, ctx, x, w, &rows, &in, &out) ||
	    mgo_check(op, "dy", ctx, dy, x->dtype, -1) ||
	    lin_shape(op, "dy", dy, x, out) ||
	    mgo_check_opt(op, "dx", ctx, dx, x->dtype, -1) ||
	    (dx && mgo_same_shape(op, "dx", dx, "x", x)) ||
	    mgo_check_opt(op, "dw", ctx, dw, x->dtype, 2) ||
	    (dw && mgo_same_shape(op, "dw", dw, "w", w)) ||
	    mgo_check_opt(op, "db", ctx, db, x->dtype, 1) ||
	    (db && mgo_check_vec(op, "db", db, out)))
		return -1;
	MGO_DISPATCH(
		op, ctx,
		mg_cpu_linear_backward(ctx, x, w, dy, dx, dx_add, dw, db),
		mg_cuda_linear_backward(ctx, x, w, dy, dx, dx_add, dw, db));
}

int mg_op_linear_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			  const struct mg_tensor *w, const struct mg_tensor *dy,
			  struct mg_tensor *dx, struct mg_tensor *dw,
			  struct mg_tensor *db)
{
	return lin_backward("linear_backward", ctx, x, w, dy, dx, false, dw,
			    db);
}

int mg_op_linear_backward_add(struct mg_ctx *ctx, const struct mg_tensor *x,
			      const struct mg_tensor *w,
			      const struct mg_tensor *dy, struct mg_tensor *dx,
			      struct mg_tensor *dw, struct mg_tensor *db)
{
	if (!dx)
		return mg_error("linear_backward_add: dx is required");
	return lin_backward("linear_backward_add", ctx, x, w, dy, dx, true, dw,
			    db);
}
