/*
 * resize.c - the CPU mg_op_resize_normalize_u8 (the reference): bilinear
 * resize of 8-bit images with PyTorch's align_corners=False semantics,
 * then /255 and (x - mean) / std. ops/resize.c checks the arguments.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mg/ctx.h"
#include "mg/log.h"
#include "mg/tensor.h"

#include "cpu_ops.h"

#define OP "mg_op_resize_normalize_u8"

/* One output coordinate along an axis: two source indices and weights. */
struct axis_tap {
	int64_t i0, i1;
	double l0, l1;
};

/*
 * PyTorch's area_pixel_compute_source_index (align_corners=False, no
 * explicit scale factor) and guard_index_and_lambda: src = (d + 0.5) *
 * in / out - 0.5, clamped at 0; i0 = floor(src) clamped to in - 1; the
 * second tap is i0 + 1 except at the last row/column.
 */
static void axis_taps(int64_t in, int64_t out, struct axis_tap *t)
{
	double scale = (double)in / (double)out;

	for (int64_t d = 0; d < out; d++) {
		double src = ((double)d + 0.5) * scale - 0.5;
		if (src < 0)
			src = 0;
		int64_t i0 = (int64_t)floor(src);
		if (i0 > in - 1)
			i0 = in - 1;
		double l1 = src - (double)i0;
		if (l1 < 0)
			l1 = 0;
		if (l1 > 1)
			l1 = 1;
		t[d].i0 = i0;
		t[d].i1 = i0 < in - 1 ? i0 + 1 : i0;
		t[d].l1 = l1;
		t[d].l0 = 1.0 - l1;
	}
}

/* Store one value into row-major dst of dtype F32 or F64. */
static inline void store(void *dst, int is_f64, int64_t i, double v)
{
	if (is_f64)
		((double *)dst)[i] = v;
	else
		((float *)dst)[i] = (float)v;
}

int mg_cpu_resize_normalize_u8(struct mg_ctx *ctx, const struct mg_tensor *src,
			       struct mg_tensor *dst, double mean, double std)
{
	const int64_t planes = src->shape[0] * src->shape[1];
	const int64_t h = src->shape[2], w = src->shape[3];
	const int64_t oh = dst->shape[2], ow = dst->shape[3];
	const uint8_t *in = src->data;
	void *out = dst->data;
	const int is_f64 = dst->dtype == MG_F64;
	const int64_t rows = planes * oh;
	int threads = ctx->dev->threads;
#ifdef _OPENMP
	if (threads <= 0)
		threads = omp_get_max_threads();
#else
	(void)threads;
#endif

	if (planes == 0 || oh == 0 || ow == 0)
		return 0;

	/* No resampling: every output pixel is its own source pixel. */
	if (h == oh && w == ow) {
		const int64_t total = planes * h * w;
#pragma omp parallel for num_threads(threads) if (total > (1 << 16))
		for (int64_t i = 0; i < total; i++)
			store(out, is_f64, i,
			      ((double)in[i] / 255.0 - mean) / std);
		return 0;
	}

	struct axis_tap *ty = malloc((size_t)oh * sizeof(*ty));
	struct axis_tap *tx = malloc((size_t)ow * sizeof(*tx));
	if (!ty || !tx) {
		free(ty);
		free(tx);
		return mg_error(OP ": out of memory for %lld + %lld taps",
				(long long)oh, (long long)ow);
	}
	axis_taps(h, oh, ty);
	axis_taps(w, ow, tx);

#pragma omp parallel for num_threads(threads) if (rows * ow > (1 << 16))
	for (int64_t r = 0; r < rows; r++) {
		const int64_t p = r / oh, oy = r % oh;
		const uint8_t *plane = in + p * h * w;
		const uint8_t *row0 = plane + ty[oy].i0 * w;
		const uint8_t *row1 = plane + ty[oy].i1 * w;
		const double ly0 = ty[oy].l0, ly1 = ty[oy].l1;
		const int64_t base = r * ow;

		for (int64_t ox = 0; ox < ow; ox++) {
			const struct axis_tap *t = &tx[ox];
			double v = ly0 * (t->l0 * row0[t->i0] +
					  t->l1 * row0[t->i1]) +
				   ly1 * (t->l0 * row1[t->i0] +
					  t->l1 * row1[t->i1]);
			store(out, is_f64, base + ox, (v / 255.0 - mean) / std);
		}
	}

	free(ty);
	free(tx);
	return 0;
}
