/*
 * conv.c - CPU 2-D convolution forward and backward: the GEMM path
 * (im2col + OpenBLAS, conv_impl.h) on the geometry ops/conv.c validated.
 * Depthwise convolutions go to the direct kernel in depthwise.c, where a
 * GEMM per channel would be all overhead.
 */
#include <string.h>

#include "cpu_ops.h"

/* Columns (samples x output pixels) one GEMM chunk aims for: wide enough
 * for OpenBLAS to run near peak, small enough to keep the im2col scratch
 * modest (K x 16384 elements). */
#define CONV_CHUNK_COLS 16384

#define T float
#define FN(n) n##_f32
#include "conv_impl.h"
#define T double
#define FN(n) n##_f64
#include "conv_impl.h"

/* Samples per GEMM chunk: one when a pointwise conv's maps are large (the
 * GEMM reads x and writes y in place), else as many as fit the target. */
static int64_t conv_chunk(const struct mgo_conv_geom *g)
{
	if (g->pointwise && g->OHW >= 1024)
		return 1;
	int64_t nb = CONV_CHUNK_COLS / (g->OHW > 0 ? g->OHW : 1);
	if (nb < 1)
		nb = 1;
	if (nb > g->N)
		nb = g->N > 0 ? g->N : 1;
	return nb;
}

static bool is_depthwise(const struct mgo_conv_geom *g)
{
	return g->groups == g->C && g->K == g->C && g->groups > 1;
}

int mg_cpu_conv2d(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		  const struct mg_tensor *x, const struct mg_tensor *w,
		  const struct mg_tensor *bias, struct mg_tensor *y,
		  struct mg_buf *ws)
{
	if (g->N == 0 || g->K == 0 || g->OHW == 0)
		return 0;
	if (is_depthwise(g))
		return mgo_depthwise_fwd(ctx, g, x, w, bias, y);
	const int64_t nb = conv_chunk(g);
	if (x->dtype == MG_F32)
		return conv_fwd_f32(ctx, g, nb, x->data, w->data,
				    bias ? bias->data : NULL, y->data, ws);
	return conv_fwd_f64(ctx, g, nb, x->data, w->data,
			    bias ? bias->data : NULL, y->data, ws);
}

int mg_cpu_conv2d_backward(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
			   const struct mg_tensor *x, const struct mg_tensor *w,
			   const struct mg_tensor *dy, struct mg_tensor *dx,
			   struct mg_tensor *dw, struct mg_tensor *dbias,
			   struct mg_buf *ws)
{
	if (dx && (g->K == 0 || g->OHW == 0))
		memset(dx->data, 0, mg_tensor_bytes(dx));
	if (g->N == 0 || g->K == 0 || g->OHW == 0)
		return 0;
	if (is_depthwise(g))
		return mgo_depthwise_bwd(ctx, g, x, w, dy, dx, dw, dbias, ws);
	const int64_t nb = conv_chunk(g);
	if (x->dtype == MG_F32)
		return conv_bwd_f32(ctx, g, nb, x->data, w->data, dy->data,
				    dx ? dx->data : NULL, dw ? dw->data : NULL,
				    dbias ? dbias->data : NULL, ws);
	return conv_bwd_f64(ctx, g, nb, x->data, w->data, dy->data,
			    dx ? dx->data : NULL, dw ? dw->data : NULL,
			    dbias ? dbias->data : NULL, ws);
}
