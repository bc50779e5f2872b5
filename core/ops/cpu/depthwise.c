/*
 * depthwise.c - depthwise convolution (groups == Cin == Cout, MobileNet's
 * 3x3 layers) on the CPU: a direct loop per (sample, channel) plane. A
 * GEMM per channel would be a 1 x 9 by 9 x OH*OW product, all overhead;
 * the direct loop reads each plane from cache. ops/conv.c validates the
 * arguments and cpu/conv.c calls in here.
 */
#include <string.h>

#include "cpu_ops.h"

/* Small planes use a list of valid (output, input, tap) triples. */
#define DW_MAP_MAX 2048
#define DW_MAP_TAPS 64

/* Samples of one channel a small-plane task handles together. */
#define DW_NB 4

/* Planes with at most this many outputs and inputs take the map path. */
#define DW_MAP_OHW 64
#define DW_MAP_IN 256

struct dw_map {
	int n;
	int32_t o[DW_MAP_MAX], i[DW_MAP_MAX], t[DW_MAP_MAX];
	int32_t start[DW_MAP_OHW + 1]; /* triples of output q: [start[q],
					  start[q + 1]) */
	/* The same triples grouped by input (for the dx gather): input q's
	 * are [istart[q], istart[q + 1]) of io (outputs) and it (taps). */
	int32_t io[DW_MAP_MAX], it[DW_MAP_MAX];
	int32_t istart[DW_MAP_IN + 1];
	/* And grouped by tap (weight gradient): outputs to, inputs ti. */
	int32_t to[DW_MAP_MAX], ti[DW_MAP_MAX];
	int32_t tstart[DW_MAP_TAPS + 1];
};

/* Fill the triples of g's plane in output-then-tap order; false when the
 * plane or the kernel is too large for a map. */
static bool dw_map_build(const struct mgo_conv_geom *g, struct dw_map *mp)
{
	if (g->OHW > DW_MAP_OHW || g->HW > DW_MAP_IN ||
	    g->kh * g->kw > DW_MAP_TAPS || g->OHW * g->kh * g->kw > DW_MAP_MAX)
		return false;
	mp->n = 0;
	for (int64_t oh = 0; oh < g->OH; oh++)
		for (int64_t ow = 0; ow < g->OW; ow++) {
			mp->start[oh * g->OW + ow] = mp->n;
			for (int64_t i = 0; i < g->kh; i++)
				for (int64_t j = 0; j < g->kw; j++) {
					int64_t ih = oh * g->sh - g->ph + i;
					int64_t iw = ow * g->sw - g->pw + j;
					if (ih < 0 || ih >= g->H || iw < 0 ||
					    iw >= g->W)
						continue;
					mp->o[mp->n] =
						(int32_t)(oh * g->OW + ow);
					mp->i[mp->n] =
						(int32_t)(ih * g->W + iw);
					mp->t[mp->n] = (int32_t)(i * g->kw + j);
					mp->n++;
				}
		}
	mp->start[g->OHW] = mp->n;
	/* Group by input, keeping output order within an input. */
	for (int64_t q = 0; q <= g->HW; q++)
		mp->istart[q] = 0;
	for (int k = 0; k < mp->n; k++)
		mp->istart[mp->i[k] + 1]++;
	for (int64_t q = 0; q < g->HW; q++)
		mp->istart[q + 1] += mp->istart[q];
	int32_t fill[DW_MAP_IN];
	for (int64_t q = 0; q < g->HW; q++)
		fill[q] = mp->istart[q];
	for (int k = 0; k < mp->n; k++) {
		const int32_t at = fill[mp->i[k]]++;
		mp->io[at] = mp->o[k];
		mp->it[at] = mp->t[k];
	}
	/* Group by tap, keeping output order within a tap. */
	const int64_t taps = g->kh * g->kw;
	for (int64_t t = 0; t <= taps; t++)
		mp->tstart[t] = 0;
	for (int k = 0; k < mp->n; k++)
		mp->tstart[mp->t[k] + 1]++;
	for (int64_t t = 0; t < taps; t++)
		mp->tstart[t + 1] += mp->tstart[t];
	int32_t tfill[DW_MAP_TAPS];
	for (int64_t t = 0; t < taps; t++)
		tfill[t] = mp->tstart[t];
	for (int k = 0; k < mp->n; k++) {
		const int32_t at = tfill[mp->t[k]]++;
		mp->to[at] = mp->o[k];
		mp->ti[at] = mp->i[k];
	}
	return true;
}

#define T float
#define FN(n) n##_f32
#include "depthwise_impl.h"
#define T double
#define FN(n) n##_f64
#include "depthwise_impl.h"

int mgo_depthwise_fwd(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		      const struct mg_tensor *x, const struct mg_tensor *w,
		      const struct mg_tensor *bias, struct mg_tensor *y)
{
	const int nt = mgo_threads_for(ctx, g->N * g->C * g->OHW * g->kh * 4);
	static _Thread_local struct dw_map mp;
	const bool map = dw_map_build(g, &mp);
	const void *b = bias ? bias->data : NULL;
	if (x->dtype == MG_F32 && map)
		dw_fwd_map_f32(g, x->data, w->data, b, y->data, &mp, nt);
	else if (x->dtype == MG_F32)
		dw_fwd_f32(g, x->data, w->data, b, y->data, nt);
	else if (map)
		dw_fwd_map_f64(g, x->data, w->data, b, y->data, &mp, nt);
	else
		dw_fwd_f64(g, x->data, w->data, b, y->data, nt);
	return 0;
}

int mgo_depthwise_bwd(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		      const struct mg_tensor *x, const struct mg_tensor *w,
		      const struct mg_tensor *dy, struct mg_tensor *dx,
		      struct mg_tensor *dw, struct mg_tensor *dbias,
		      struct mg_buf *ws)
{
	const int nt = mgo_threads_for(ctx, g->N * g->C * g->OHW * g->kh * 4);
	const int64_t planes = g->N * g->C;
	const int64_t ndwp = dw ? planes * g->kh * g->kw : 0;
	const int64_t ndbp = dbias ? planes : 0;
	struct mgo_scratch sc;
	double *dwp = NULL, *dbp = NULL;
	if (ndwp + ndbp > 0) {
		dwp = mgo_scratch_get(ctx, &sc, ws,
				      (size_t)(ndwp + ndbp) * sizeof(double));
		if (!dwp)
			return mg_error_prefix("depthwise conv workspace: ");
		dbp = dbias ? dwp + ndwp : NULL;
		if (!dw)
			dwp = NULL;
	}
	static _Thread_local struct dw_map mp;
	const bool map = dw_map_build(g, &mp);
	if (x->dtype == MG_F32 && map) {
		dw_bwd_map_f32(g, x->data, w->data, dy->data,
			       dx ? dx->data : NULL, dwp, dbp, &mp, nt);
		if (dw || dbias)
			dw_reduce_f32(g, dwp, dbp, dw ? dw->data : NULL,
				      dbias ? dbias->data : NULL, nt);
	} else if (map) {
		dw_bwd_map_f64(g, x->data, w->data, dy->data,
			       dx ? dx->data : NULL, dwp, dbp, &mp, nt);
		if (dw || dbias)
			dw_reduce_f64(g, dwp, dbp, dw ? dw->data : NULL,
				      dbias ? dbias->data : NULL, nt);
	} else if (x->dtype == MG_F32) {
		dw_bwd_f32(g, x->data, w->data, dy->data, dx ? dx->data : NULL,
			   dwp, dbp, nt);
		if (dw || dbias)
			dw_reduce_f32(g, dwp, dbp, dw ? dw->data : NULL,
				      dbias ? dbias->data : NULL, nt);
	} else {
		dw_bwd_f64(g, x->data, w->data, dy->data, dx ? dx->data : NULL,
			   dwp, dbp, nt);
		if (dw || dbias)
			dw_reduce_f64(g, dwp, dbp, dw ? dw->data : NULL,
				      dbias ? dbias->data : NULL, nt);
	}
	if (ndwp + ndbp > 0)
		mgo_scratch_done(ctx, &sc);
	return 0;
}
