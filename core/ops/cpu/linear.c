/*
 * linear.c - CPU fully connected layer y = x w^T + b and its backward, as two
 * or three OpenBLAS GEMMs. Leading dims of x are flattened into rows, so a
 * classifier head [N, C] and a token projection [N, T, d] use one op.
 */
#include <string.h>

#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "linear_impl.h"
#define T double
#define FN(n) n##_f64
#include "linear_impl.h"

/* Rows (leading dims of x flattened), in and out features, from the
 * checked x [rows..., in] and w [out, in]. */
static void lin_sizes(const struct mg_tensor *x, const struct mg_tensor *w,
		      int64_t *rows, int64_t *in, int64_t *out)
{
	*out = w->shape[0];
	*in = w->shape[1];
	*rows = *in ? mg_tensor_numel(x) / *in : 0;
}

/* y = (or += when y_add) x w^T + b. */
static int lin_fwd(struct mg_ctx *ctx, const struct mg_tensor *x,
		   const struct mg_tensor *w, const struct mg_tensor *b,
		   struct mg_tensor *y, bool y_add)
{
	int64_t rows, in, out;
	lin_sizes(x, w, &rows, &in, &out);
	if (rows == 0 || out == 0)
		return 0;
	const int nt = mgo_threads_for(ctx, rows * out), gt = mgo_threads(ctx);
	if (x->dtype == MG_F32)
		linear_fwd_f32(x->data, w->data, b ? b->data : NULL, y->data,
			       y_add, rows, in, out, nt, gt);
	else
		linear_fwd_f64(x->data, w->data, b ? b->data : NULL, y->data,
			       y_add, rows, in, out, nt, gt);
	return 0;
}

int mg_cpu_linear(struct mg_ctx *ctx, const struct mg_tensor *x,
		  const struct mg_tensor *w, const struct mg_tensor *b,
		  struct mg_tensor *y)
{
	return lin_fwd(ctx, x, w, b, y, false);
}

int mg_cpu_linear_add(struct mg_ctx *ctx, const struct mg_tensor *x,
		      const struct mg_tensor *w, const struct mg_tensor *b,
		      struct mg_tensor *y)
{
	return lin_fwd(ctx, x, w, b, y, true);
}

int mg_cpu_linear_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			   const struct mg_tensor *w,
			   const struct mg_tensor *dy, struct mg_tensor *dx,
			   bool dx_add, struct mg_tensor *dw,
			   struct mg_tensor *db)
{
	int64_t rows, in, out;
	lin_sizes(x, w, &rows, &in, &out);
	if (rows == 0 || out == 0 || in == 0) {
		if (dx && !dx_add && mg_tensor_numel(dx) > 0)
			memset(dx->data, 0, mg_tensor_bytes(dx));
		return 0;
	}
	const int nt = mgo_threads_for(ctx, rows * out), gt = mgo_threads(ctx);
	if (x->dtype == MG_F32)
		linear_bwd_f32(x->data, w->data, dy->data, dx ? dx->data : NULL,
			       dx_add, dw ? dw->data : NULL,
			       db ? db->data : NULL, rows, in, out, nt, gt);
	else
		linear_bwd_f64(x->data, w->data, dy->data, dx ? dx->data : NULL,
			       dx_add, dw ? dw->data : NULL,
			       db ? db->data : NULL, rows, in, out, nt, gt);
	return 0;
}
