/*
 * conv.c - 2-D convolution forward and backward (mg_op_conv2d*): argument
 * validation, the geometry the CPU backend uses, and device dispatch.
 */
#include <string.h>

#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#include "ops/ops_geom.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

/* Check x, w and the args; fill g with the sizes. */
static int conv_geom(const char *op, struct mg_ctx *ctx,
		     const struct mg_conv2d_args *a, const struct mg_tensor *x,
		     const struct mg_tensor *w, struct mgo_conv_geom *g)
{
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "x", ctx, x, -1, 4) ||
	    mgo_check(op, "w", ctx, w, x->dtype, 4))
		return -1;
	if (!a)
		return mg_error("%s: no convolution arguments", op);
	if (a->stride_h < 1 || a->stride_w < 1 || a->pad_h < 0 ||
	    a->pad_w < 0 || a->groups < 1)
		return mg_error("%s: invalid stride (%d, %d), padding (%d, %d) "
				"or groups %d",
				op, a->stride_h, a->stride_w, a->pad_h,
				a->pad_w, a->groups);
	memset(g, 0, sizeof *g);
	g->N = x->shape[0];
	g->C = x->shape[1];
	g->H = x->shape[2];
	g->W = x->shape[3];
	g->K = w->shape[0];
	g->kh = w->shape[2];
	g->kw = w->shape[3];
	g->sh = a->stride_h;
	g->sw = a->stride_w;
	g->ph = a->pad_h;
	g->pw = a->pad_w;
	g->groups = a->groups;
	char sx[96], sw[96];
	if (g->C % g->groups || g->K % g->groups)
		return mg_error("%s: groups %lld must divide input channels "
				"%lld and output channels %lld",
				op, (long long)g->groups, (long long)g->C,
				(long long)g->K);
	g->Cg = g->C / g->groups;
	g->Kg = g->K / g->groups;
	if (w->shape[1] != g->Cg || g->kh < 1 || g->kw < 1)
		return mg_error("%s: weight %s does not fit input %s with %lld "
				"groups (expected [Cout, %lld, kh, kw])",
				op, mgo_shape_str(w, sw, sizeof sw),
				mgo_shape_str(x, sx, sizeof sx),
				(long long)g->groups, (long long)g->Cg);
	g->OH = mg_conv_out_dim(g->H, g->kh, a->stride_h, a->pad_h);
	g->OW = mg_conv_out_dim(g->W, g->kw, a->stride_w, a->pad_w);
	if (g->H + 2 * g->ph < g->kh || g->W + 2 * g->pw < g->kw)
		return mg_error("%s: %lldx%lld window larger than the padded "
				"input %s",
				op, (long long)g->kh, (long long)g->kw,
				mgo_shape_str(x, sx, sizeof sx));
	g->krow = g->Cg * g->kh * g->kw;
	g->HW = g->H * g->W;
	g->OHW = g->OH * g->OW;
	g->pointwise = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
		       g->ph == 0 && g->pw == 0;
	return 0;
}

/* t must be [N, K, OH, OW] for the output side of g. */
static int check_out(const char *op, const char *name,
		     const struct mgo_conv_geom *g, const struct mg_tensor *t)
{
	if (t->shape[0] != g->N || t->shape[1] != g->K ||
	    t->shape[2] != g->OH || t->shape[3] != g->OW) {
		char s[96];
		return mg_error("%s: %s is %s, expected [%lld, %lld, %lld, "
				"%lld]",
				op, name, mgo_shape_str(t, s, sizeof s),
				(long long)g->N, (long long)g->K,
				(long long)g->OH, (long long)g->OW);
	}
	return 0;
}

int mg_op_conv2d(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
		 const struct mg_tensor *x, const struct mg_tensor *w,
		 const struct mg_tensor *bias, struct mg_tensor *y,
		 struct mg_buf *ws)
{
	static const char op[] = "conv2d";
	struct mgo_conv_geom g;
	if (conv_geom(op, ctx, a, x, w, &g) ||
	    mgo_check(op, "y", ctx, y, x->dtype, 4) ||
	    check_out(op, "y", &g, y) ||
	    mgo_check_opt(op, "bias", ctx, bias, x->dtype, 1) ||
	    (bias && mgo_check_vec(op, "bias", bias, g.K)))
		return -1;
	if (y->data == x->data && mg_tensor_numel(y) > 0)
		return mg_error("%s: y must not alias x", op);
	MGO_DISPATCH(op, ctx, mg_cpu_conv2d(ctx, &g, x, w, bias, y, ws),
		     mg_cuda_conv2d(ctx, a, x, w, bias, y, ws));
}

int mg_op_conv2d_backward(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
			  const struct mg_tensor *x, const struct mg_tensor *w,
			  const struct mg_tensor *dy, struct mg_tensor *dx,
			  struct mg_tensor *dw, struct mg_tensor *dbias,
			  struct mg_buf *ws)
{
	static const char op[] = "conv2d_backward";
	struct mgo_conv_geom g;
	if (conv_geom(op, ctx, a, x, w, &g) ||
	    mgo_check(op, "dy", ctx, dy, x->dtype, 4) ||
	    check_out(op, "dy", &g, dy) ||
	    mgo_check_opt(op, "dx", ctx, dx, x->dtype, 4) ||
	    (dx && mgo_same_shape(op, "dx", dx, "x", x)) ||
	    mgo_check_opt(op, "dw", ctx, dw, x->dtype, 4) ||
	    (dw && mgo_same_shape(op, "dw", dw, "w", w)) ||
	    mgo_check_opt(op, "dbias", ctx, dbias, x->dtype, 1) ||
	    (dbias && mgo_check_vec(op, "dbias", dbias, g.K)))
		return -1;
	if (dx && dx->data == dy->data && mg_tensor_numel(dx) > 0)
		return mg_error("%s: dx must not alias dy", op);
	MGO_DISPATCH(
		op, ctx,
		mg_cpu_conv2d_backward(ctx, &g, x, w, dy, dx, dw, dbias, ws),
		mg_cuda_conv2d_backward(ctx, a, x, w, dy, dx, dw, dbias, ws));
}
