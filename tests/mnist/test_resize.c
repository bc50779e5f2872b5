/*
 * test_resize.c - mg_op_resize_normalize_u8 on the CPU against values
 * derived by hand from PyTorch's align_corners=False formula
 * (src = (d + 0.5) * in / out - 0.5, clamped at 0; second tap clamped at
 * the border), plus identity, downscale, fp32/fp64 agreement,
 * normalisation and argument errors.
 */
#include <math.h>

#include "mg/ctx.h"
#include "mg/ops.h"
#include "mg/rng.h"
#include "testutil.h"

static struct mg_device dev = {.kind = MG_DEV_CPU, .threads = 2};
static struct mg_ctx ctx = {.struct_size = sizeof(struct mg_ctx), .dev = &dev};

static struct mg_tensor t4(void *data, enum mg_dtype dt, int64_t n, int64_t c,
			   int64_t h, int64_t w)
{
	const int64_t shape[4] = {n, c, h, w};
	return mg_tensor_make(data, dt, MG_DEV_CPU, 4, shape);
}

/* Run the op into F64 with mean 0, std 1 and return values * 255 (the
 * interpolated pixel values). */
static int run64(const uint8_t *src, int64_t n, int64_t c, int64_t h, int64_t w,
		 double *out, int64_t oh, int64_t ow)
{
	struct mg_tensor s = t4((void *)src, MG_U8, n, c, h, w);
	struct mg_tensor d = t4(out, MG_F64, n, c, oh, ow);
	int rc = mg_op_resize_normalize_u8(&ctx, &s, &d, 0.0f, 1.0f);
	for (int64_t i = 0; rc == 0 && i < n * c * oh * ow; i++)
		out[i] *= 255.0;
	return rc;
}

static int close_to(const double *a, const double *b, int n, double tol)
{
	int ok = 1;
	for (int i = 0; i < n; i++) {
		if (fabs(a[i] - b[i]) > tol) {
			fprintf(stderr, "  [%d] %.9g != %.9g\n", i, a[i], b[i]);
			ok = 0;
		}
	}
	return ok;
}

/*
 * 2x2 -> 4x4: scale 0.5, src = 0.5 d - 0.25 for d = 0..3:
 *   d=0: -0.25 -> 0 (taps 0,1 weights 1,0)
 *   d=1:  0.25 -> taps 0,1 weights 0.75,0.25
 *   d=2:  0.75 -> taps 0,1 weights 0.25,0.75
 *   d=3:  1.25 -> i0 = 1, second tap clamped to 1: the last pixel.
 * With [[0, 64], [128, 255]] the rows 0 and 3 are
 *   [0, 16, 48, 64] and [128, 159.75, 223.25, 255],
 * row 1 = 0.75 row0 + 0.25 row3, row 2 = 0.25 row0 + 0.75 row3.
 */
static void test_upscale_by_hand(void)
{
	const uint8_t src[4] = {0, 64, 128, 255};
	const double want[16] = {
		0,   16,       48,	 64,	 /* row 0 */
		32,  51.9375,  91.8125,	 111.75, /* row 1 */
		96,  123.8125, 179.4375, 207.25, /* row 2 */
		128, 159.75,   223.25,	 255,	 /* row 3 */
	};
	double out[16];

	CHECK(run64(src, 1, 1, 2, 2, out, 4, 4) == 0);
	CHECK(close_to(out, want, 16, 1e-9));
}

/*
 * Downscale 4x4 -> 2x2: scale 2, src = 2 d + 0.5: taps (0, 1) and (2, 3)
 * with weights 0.5 / 0.5, i.e. the mean of each 2x2 block.
 * 1x3 -> 1x2: scale 1.5, src = 1.5 d + 0.25: d=0 -> taps 0,1 weights
 * 0.75,0.25; d=1 -> 1.75: taps 1,2 weights 0.25,0.75; height 1 -> 1 is
 * exact.
 */
static void test_downscale_by_hand(void)
{
	const uint8_t src[16] = {0,  10, 20,  30,  40,	50,  60,  70,
				 80, 90, 100, 110, 120, 130, 140, 150};
	const double want[4] = {
		(0 + 10 + 40 + 50) / 4.0, (20 + 30 + 60 + 70) / 4.0,
		(80 + 90 + 120 + 130) / 4.0, (100 + 110 + 140 + 150) / 4.0};
	double out[5];

	CHECK(run64(src, 1, 1, 4, 4, out, 2, 2) == 0);
	CHECK(close_to(out, want, 4, 1e-9));

	const uint8_t row[3] = {0, 100, 200};
	const double want_row[2] = {25, 175};
	CHECK(run64(row, 1, 1, 1, 3, out, 1, 2) == 0);
	CHECK(close_to(out, want_row, 2, 1e-9));

	/* 3 -> 5 on one axis: scale 0.6, src = 0.6 d - 0.2:
	 * -0.2 -> 0; 0.4; 1.0; 1.6; 2.2 -> i0 = 2, clamped. */
	const double want_up[5] = {0, 40, 100, 160, 200};
	CHECK(run64(row, 1, 1, 1, 3, out, 1, 5) == 0);
	CHECK(close_to(out, want_up, 5, 1e-9));
}

/* Same size: no resampling, exactly (x / 255 - mean) / std. */
static void test_identity(void)
{
	enum { NN = 3, CC = 2, H = 28, W = 28, T = NN * CC * H * W };
	static uint8_t src[T];
	static double o64[T];
	static float o32[T];
	const float mean = 0.28604f, std = 0.35302f;

	for (int i = 0; i < T; i++)
		src[i] = (uint8_t)mg_rng_u64(1, (uint64_t)i);
	struct mg_tensor s = t4(src, MG_U8, NN, CC, H, W);
	struct mg_tensor d64 = t4(o64, MG_F64, NN, CC, H, W);
	struct mg_tensor d32 = t4(o32, MG_F32, NN, CC, H, W);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &d64, mean, std) == 0);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &d32, mean, std) == 0);
	int bad = 0;
	for (int i = 0; i < T; i++) {
		double e =
			((double)src[i] / 255.0 - (double)mean) / (double)std;
		bad += o64[i] != e || o32[i] != (float)e;
	}
	CHECK(bad == 0);
}

/* Several planes, large enough for the threaded path; fp32 agrees with
 * fp64; a constant plane stays constant; values stay within the plane's
 * range (bilinear is a convex combination). */
static void test_batch_f32_f64(void)
{
	enum { NN = 8, CC = 3, H = 28, W = 28, OH = 100, OW = 100 };
	enum { TI = NN * CC * H * W, TO = NN * CC * OH * OW };
	uint8_t *src = malloc(TI);
	double *o64 = malloc(TO * sizeof(double));
	float *o32 = malloc(TO * sizeof(float));

	for (int i = 0; i < TI; i++)
		src[i] = (uint8_t)mg_rng_u64(2, (uint64_t)i);
	memset(src + 5 * H * W, 77, H * W); /* plane 5: constant 77 */
	struct mg_tensor s = t4(src, MG_U8, NN, CC, H, W);
	struct mg_tensor d64 = t4(o64, MG_F64, NN, CC, OH, OW);
	struct mg_tensor d32 = t4(o32, MG_F32, NN, CC, OH, OW);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &d64, 0.5f, 0.25f) == 0);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &d32, 0.5f, 0.25f) == 0);
	double maxd = 0;
	int out_of_range = 0;
	for (int i = 0; i < TO; i++) {
		double d = fabs((double)o32[i] - o64[i]);
		maxd = d > maxd ? d : maxd;
		const double lo = (0 / 255.0 - 0.5) / 0.25,
			     hi = (255 / 255.0 - 0.5) / 0.25;
		out_of_range += o64[i] < lo - 1e-12 || o64[i] > hi + 1e-12;
	}
	CHECK(maxd < 1e-6);
	CHECK(out_of_range == 0);
	const double c77 = (77 / 255.0 - 0.5) / 0.25;
	int nonconst = 0;
	for (int i = 0; i < OH * OW; i++)
		nonconst += fabs(o64[5 * OH * OW + i] - c77) > 1e-12;
	CHECK(nonconst == 0);
	/* Plane independence: plane 4's output equals resizing it alone. */
	double *alone = malloc(OH * OW * sizeof(double));
	struct mg_tensor s1 = t4(src + 4 * H * W, MG_U8, 1, 1, H, W);
	struct mg_tensor d1 = t4(alone, MG_F64, 1, 1, OH, OW);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s1, &d1, 0.5f, 0.25f) == 0);
	CHECK(memcmp(alone, o64 + 4 * OH * OW, OH * OW * sizeof(double)) == 0);
	/* One thread gives the same bits as two. */
	dev.threads = 1;
	double *o1 = malloc(TO * sizeof(double));
	struct mg_tensor e64 = t4(o1, MG_F64, NN, CC, OH, OW);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &e64, 0.5f, 0.25f) == 0);
	CHECK(memcmp(o1, o64, TO * sizeof(double)) == 0);
	dev.threads = 2;
	free(o1);
	free(alone);
	free(src);
	free(o64);
	free(o32);
}

static void test_normalise(void)
{
	const uint8_t src[4] = {0, 51, 255, 255};
	double o[4];
	struct mg_tensor s = t4((void *)src, MG_U8, 1, 1, 2, 2);
	struct mg_tensor d = t4(o, MG_F64, 1, 1, 2, 2);

	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &d, 0.5f, 0.25f) == 0);
	CHECK(fabs(o[0] - -2.0) < 1e-12);
	CHECK(fabs(o[1] - (0.2 - 0.5) / 0.25) < 1e-7);
	CHECK(fabs(o[2] - 2.0) < 1e-12);
	/* mean 0, std 1: plain x / 255. */
	CHECK(mg_op_resize_normalize_u8(&ctx, &s, &d, 0.0f, 1.0f) == 0);
	CHECK(o[0] == 0.0 && o[1] == 0.2 && o[2] == 1.0);
}

static void test_errors(void)
{
	uint8_t src[16] = {0};
	double o[64];
	int32_t oi[16];
	struct mg_tensor s = t4(src, MG_U8, 1, 1, 4, 4);
	struct mg_tensor d = t4(o, MG_F64, 1, 1, 8, 8);

	struct mg_tensor bad = t4(oi, MG_I32, 1, 1, 4, 4);
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s, &bad, 0, 1), "dst dtype",
		  "expected f32 or f64");
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &d, &d, 0, 1), "src dtype");
	struct mg_tensor dc = t4(o, MG_F64, 1, 2, 4, 4);
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s, &dc, 0, 1),
		  "differ in batch or channels");
	const int64_t sh3[3] = {1, 4, 4};
	struct mg_tensor s3 = mg_tensor_make(src, MG_U8, MG_DEV_CPU, 3, sh3);
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s3, &d, 0, 1),
		  "src must have 4 dims");
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s, &d, 0, 0), "std");
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s, &d, NAN, 1), "mean");
	CHECK_ERR(mg_op_resize_normalize_u8(NULL, &s, &d, 0, 1), "context");
	struct mg_tensor dn = t4(NULL, MG_F64, 1, 1, 8, 8);
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s, &dn, 0, 1),
		  "dst has no data");
	struct mg_tensor dg = d;
	dg.device = MG_DEV_CUDA;
	CHECK_ERR(mg_op_resize_normalize_u8(&ctx, &s, &dg, 0, 1),
		  "context's device");
	/* An empty batch is fine and touches nothing. */
	struct mg_tensor s0 = t4(NULL, MG_U8, 0, 1, 4, 4);
	struct mg_tensor d0 = t4(NULL, MG_F32, 0, 1, 8, 8);
	CHECK(mg_op_resize_normalize_u8(&ctx, &s0, &d0, 0, 1) == 0);
}

int main(void)
{
	test_upscale_by_hand();
	test_downscale_by_hand();
	test_identity();
	test_batch_f32_f64();
	test_normalise();
	test_errors();
	return t_done("test_resize");
}
