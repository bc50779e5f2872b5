/*
 * test_ops.c - checks of the CPU NN ops (ops_nn.h).
 *
 *   test_ops conv|depthwise|batchnorm|elementwise|pool|linear|dropout|
 *            loss|precision|errors|determinism
 *
 * Backward ops are checked against central finite differences in fp64 of
 * L = sum(y * R) for a fixed random R, on small random shapes; forwards
 * against naive loops; fp32 against fp64. Parameter gradients are checked
 * to accumulate (the buffers start with random values) and activation
 * gradients to be written (they start as NaN). Inputs are random from a
 * seed that MG_TEST_SEED overrides; failures print it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MG_OP_TEST_SEED 20240611
#include "../common/op_test_util.h"
#include "../common/test_util.h"
#include "mg/mg.h"

/* ------------------------------------------------------------------ */
/* Convolution.                                                        */

struct conv_case {
	int64_t N, C, H, W, K, kh, kw;
	int sh, sw, ph, pw, groups;
	bool bias;
};

static void ref_conv(const struct conv_case *c, const double *x,
		     const double *w, const double *b, double *y, int64_t OH,
		     int64_t OW)
{
	int64_t Cg = c->C / c->groups, Kg = c->K / c->groups;
	for (int64_t n = 0; n < c->N; n++)
		for (int64_t k = 0; k < c->K; k++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					double s = b ? b[k] : 0;
					int64_t gr = k / Kg;
					for (int64_t cg = 0; cg < Cg; cg++)
						for (int64_t i = 0; i < c->kh;
						     i++)
							for (int64_t j = 0;
							     j < c->kw; j++) {
								int64_t ih = oh * c->sh -
									     c->ph +
									     i,
									iw = ow * c->sw -
									     c->pw +
									     j;
								if (ih < 0 ||
								    ih >= c->H ||
								    iw < 0 ||
								    iw >= c->W)
									continue;
								int64_t ci =
									gr * Cg +
									cg;
								s += w[((k * Cg +
									 cg) * c->kh +
									i) * c->kw +
								       j] *
								     x[((n * c->C +
									 ci) * c->H +
									ih) * c->W +
								       iw];
							}
					y[((n * c->K + k) * OH + oh) * OW +
					  ow] = s;
				}
}

/* The exact backward by the same loops (adjoint of ref_conv). */
static void ref_conv_bwd(const struct conv_case *c, const double *x,
			 const double *w, const double *dy, double *dx,
			 double *dw, double *db, int64_t OH, int64_t OW)
{
	int64_t Cg = c->C / c->groups, Kg = c->K / c->groups;
	memset(dx, 0, sizeof(double) * (size_t)(c->N * c->C * c->H * c->W));
	memset(dw, 0, sizeof(double) * (size_t)(c->K * Cg * c->kh * c->kw));
	memset(db, 0, sizeof(double) * (size_t)c->K);
	for (int64_t n = 0; n < c->N; n++)
		for (int64_t k = 0; k < c->K; k++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					double g = dy[((n * c->K + k) * OH +
						       oh) * OW +
						      ow];
					db[k] += g;
					int64_t gr = k / Kg;
					for (int64_t cg = 0; cg < Cg; cg++)
						for (int64_t i = 0; i < c->kh;
						     i++)
							for (int64_t j = 0;
							     j < c->kw; j++) {
								int64_t ih = oh * c->sh -
									     c->ph +
									     i,
									iw = ow * c->sw -
									     c->pw +
									     j;
								if (ih < 0 ||
								    ih >= c->H ||
								    iw < 0 ||
								    iw >= c->W)
									continue;
								int64_t ci =
									gr * Cg +
									cg;
								int64_t wi =
									((k * Cg +
									  cg) *
										 c->kh +
									 i) * c->kw +
									j;
								int64_t xi =
									((n * c->C +
									  ci) *
										 c->H +
									 ih) * c->W +
									iw;
								dw[wi] += g *
									  x[xi];
								dx[xi] += g *
									  w[wi];
							}
				}
}

struct conv_fd {
	const struct conv_case *c;
	struct mg_conv2d_args a;
	struct mg_tensor *x, *w, *b, *y, *r;
	struct mg_buf *ws;
};

static double conv_loss(void *arg)
{
	struct conv_fd *f = arg;
	if (mg_op_conv2d(&ctx, &f->a, f->x, f->w, f->b, f->y, f->ws))
		fail("conv2d in loss: %s", mg_last_error());
	return dot(f->y, f->r);
}

static void conv_case_run(const struct conv_case *c, bool fd)
{
	char name[200];
	snprintf(name, sizeof name,
		 "conv N%lld C%lld %lldx%lld K%lld k%lldx%lld s%d,%d p%d,%d "
		 "g%d%s",
		 (long long)c->N, (long long)c->C, (long long)c->H,
		 (long long)c->W, (long long)c->K, (long long)c->kh,
		 (long long)c->kw, c->sh, c->sw, c->ph, c->pw, c->groups,
		 c->bias ? " bias" : "");
	struct mg_conv2d_args a = {c->sh, c->sw, c->ph, c->pw, c->groups};
	int64_t OH = mg_conv_out_dim(c->H, c->kh, c->sh, c->ph);
	int64_t OW = mg_conv_out_dim(c->W, c->kw, c->sw, c->pw);
	struct mg_tensor x = mk(MG_F64, 4, c->N, c->C, c->H, c->W);
	struct mg_tensor w =
		mk(MG_F64, 4, c->K, c->C / c->groups, c->kh, c->kw);
	struct mg_tensor b = mk(MG_F64, 1, c->K, 0, 0, 0);
	struct mg_tensor y = mk(MG_F64, 4, c->N, c->K, OH, OW);
	struct mg_tensor yr = mk(MG_F64, 4, c->N, c->K, OH, OW);
	struct mg_tensor r = mk(MG_F64, 4, c->N, c->K, OH, OW);
	fill_rand(&x, 1);
	fill_rand(&w, 1);
	fill_rand(&b, 1);
	fill_rand(&r, 1);
	fill_const(&y, NAN);
	struct mg_buf ws = {0};
	struct mg_tensor *bp = c->bias ? &b : NULL;
	char what[260];

	/* Forward against the naive loop. */
	if (mg_op_conv2d(&ctx, &a, &x, &w, bp, &y, &ws)) {
		fail("%s: %s", name, mg_last_error());
		goto out;
	}
	ref_conv(c, D(&x), D(&w), c->bias ? D(&b) : NULL, D(&yr), OH, OW);
	snprintf(what, sizeof what, "%s forward", name);
	expect_close(what, D(&y), D(&yr), N_(&y), 1e-12);

	/* Backward: dx written over NaN, dw and db accumulated onto random
	 * starting values; compared with the exact adjoint loops. */
	struct mg_tensor dx = mk(MG_F64, 4, c->N, c->C, c->H, c->W);
	struct mg_tensor dw = clone(&w), db = clone(&b);
	struct mg_tensor dw0 = clone(&w), db0 = clone(&b);
	fill_const(&dx, NAN);
	fill_rand(&dw, 1);
	fill_rand(&db, 1);
	memcpy(dw0.data, dw.data, mg_tensor_bytes(&dw));
	memcpy(db0.data, db.data, mg_tensor_bytes(&db));
	if (mg_op_conv2d_backward(&ctx, &a, &x, &w, &r, &dx, &dw,
				  c->bias ? &db : NULL, &ws)) {
		fail("%s backward: %s", name, mg_last_error());
		goto out2;
	}
	for (int64_t i = 0; i < N_(&dw); i++)
		D(&dw)[i] -= D(&dw0)[i];
	for (int64_t i = 0; i < N_(&db); i++)
		D(&db)[i] -= D(&db0)[i];
	struct mg_tensor rdx = clone(&dx), rdw = clone(&dw), rdb = clone(&db);
	ref_conv_bwd(c, D(&x), D(&w), D(&r), D(&rdx), D(&rdw), D(&rdb), OH, OW);
	snprintf(what, sizeof what, "%s dx vs adjoint", name);
	expect_close(what, D(&dx), D(&rdx), N_(&dx), 1e-11);
	snprintf(what, sizeof what, "%s dw (accumulated) vs adjoint", name);
	expect_close(what, D(&dw), D(&rdw), N_(&dw), 1e-11);
	if (c->bias) {
		snprintf(what, sizeof what, "%s dbias vs adjoint", name);
		expect_close(what, D(&db), D(&rdb), N_(&db), 1e-11);
	}
	if (fd) {
		struct conv_fd f = {c, a, &x, &w, bp, &y, &r, &ws};
		snprintf(what, sizeof what, "%s dx", name);
		fd_check(what, &x, D(&dx), conv_loss, &f, 60, 1e-6);
		snprintf(what, sizeof what, "%s dw", name);
		fd_check(what, &w, D(&dw), conv_loss, &f, 60, 1e-6);
		if (c->bias) {
			snprintf(what, sizeof what, "%s dbias", name);
			fd_check(what, &b, D(&db), conv_loss, &f, 0, 1e-6);
		}
	}
	/* Only some gradients requested. */
	fill_const(&dx, NAN);
	if (mg_op_conv2d_backward(&ctx, &a, &x, &w, &r, &dx, NULL, NULL,
				  NULL)) {
		fail("%s backward dx only: %s", name, mg_last_error());
	} else {
		snprintf(what, sizeof what, "%s dx only", name);
		expect_close(what, D(&dx), D(&rdx), N_(&dx), 1e-11);
	}
	memset(dw.data, 0, mg_tensor_bytes(&dw));
	if (mg_op_conv2d_backward(&ctx, &a, &x, &w, &r, NULL, &dw, NULL, NULL))
		fail("%s backward dw only: %s", name, mg_last_error());
	else {
		snprintf(what, sizeof what, "%s dw only", name);
		expect_close(what, D(&dw), D(&rdw), N_(&dw), 1e-11);
	}

	/* f32 forward and backward agree with f64. */
	{
		struct mg_tensor x32 = to_f32(&x), w32 = to_f32(&w),
				 b32 = to_f32(&b), r32 = to_f32(&r);
		struct mg_tensor y32 = to_f32(&y), dx32 = to_f32(&dx);
		struct mg_tensor dw32 = to_f32(&dw);
		memset(dw32.data, 0, mg_tensor_bytes(&dw32));
		if (mg_op_conv2d(&ctx, &a, &x32, &w32, c->bias ? &b32 : NULL,
				 &y32, &ws) ||
		    mg_op_conv2d_backward(&ctx, &a, &x32, &w32, &r32, &dx32,
					  &dw32, NULL, &ws)) {
			fail("%s f32: %s", name, mg_last_error());
		} else {
			snprintf(what, sizeof what, "%s f32 forward", name);
			expect_close32(what, &y32, &yr, 1e-5);
			snprintf(what, sizeof what, "%s f32 dx", name);
			expect_close32(what, &dx32, &rdx, 1e-5);
			snprintf(what, sizeof what, "%s f32 dw", name);
			expect_close32(what, &dw32, &rdw, 1e-5);
		}
		del(&x32), del(&w32), del(&b32), del(&r32), del(&y32);
		del(&dx32), del(&dw32);
	}
	del(&rdx), del(&rdw), del(&rdb);
out2:
	del(&dx), del(&dw), del(&db), del(&dw0), del(&db0);
out:
	mg_buf_free(&ctx, &ws);
	del(&x), del(&w), del(&b), del(&y), del(&yr), del(&r);
}

static void test_conv(void)
{
	static const struct conv_case small[] = {
		/* N  C  H  W  K kh kw sh sw ph pw g bias */
		{2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1, false},
		{2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1, 1, true},
		{2, 4, 5, 5, 6, 1, 1, 1, 1, 0, 0, 1, false}, /* pointwise */
		{3, 4, 1, 1, 5, 1, 1, 1, 1, 0, 0, 1, true},  /* 1x1 maps */
		{2, 4, 6, 6, 6, 3, 3, 1, 2, 0, 1, 2, true},  /* groups 2 */
		{2, 2, 8, 9, 3, 5, 3, 2, 1, 2, 0, 1, false},
		{1, 4, 6, 6, 4, 1, 1, 2, 2, 0, 0, 1, false}, /* 1x1 stride 2 */
		{2, 6, 5, 5, 6, 3, 3, 1, 1, 1, 1, 3, false},
		{2, 3, 4, 4, 6, 3, 3, 1, 1, 1, 1, 3, true}, /* multiplier 2 */
	};
	for (size_t i = 0; i < sizeof small / sizeof *small; i++)
		conv_case_run(&small[i], true);
	/* Larger: several GEMM chunks with a partial last one, the
	 * one-sample pointwise path (H*W >= 1024), the stem shape. */
	static const struct conv_case big[] = {
		{5, 3, 64, 64, 8, 3, 3, 1, 1, 1, 1, 1, true},
		{3, 8, 40, 40, 12, 1, 1, 1, 1, 0, 0, 1, true},
		{70, 6, 14, 14, 10, 1, 1, 1, 1, 0, 0, 1, false},
		{9, 1, 28, 28, 32, 3, 3, 2, 2, 1, 1, 1, false},
	};
	for (size_t i = 0; i < sizeof big / sizeof *big; i++)
		conv_case_run(&big[i], false);
}

static void test_depthwise(void)
{
	static const struct conv_case cs[] = {
		{2, 4, 7, 7, 4, 3, 3, 1, 1, 1, 1, 4, false},
		{2, 4, 7, 8, 4, 3, 3, 2, 2, 1, 1, 4, true},
		{3, 3, 5, 5, 3, 3, 3, 1, 1, 0, 0, 3, true},
		{2, 5, 9, 6, 5, 5, 3, 2, 1, 2, 1, 5, false},
		{2, 3, 1, 1, 3, 3, 3, 1, 1, 1, 1, 3, false}, /* 1x1 maps */
		{2, 3, 2, 2, 3, 3, 3, 2, 2, 1, 1, 3, true},
		/* > 64 outputs per plane: the tap-sweep kernel */
		{2, 3, 10, 9, 3, 3, 3, 1, 1, 1, 1, 3, true},
		{2, 2, 17, 18, 2, 3, 3, 2, 2, 1, 1, 2, false},
	};
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
		conv_case_run(&cs[i], true);
	static const struct conv_case big = {4, 16, 56, 56, 16, 3,   3,
					     2, 2,  1,	1,  16, true};
	conv_case_run(&big, false);
}

/* ------------------------------------------------------------------ */
/* Batch norm.                                                         */

struct bn_fd {
	struct mg_bn_args a;
	struct mg_tensor *x, *g, *b, *rm, *rv, *y, *r;
};

static double bn_loss(void *arg)
{
	struct bn_fd *f = arg;
	/* Running stats are copies so the loss does not move them. */
	struct mg_tensor rm = clone(f->rm), rv = clone(f->rv);
	if (mg_op_batchnorm2d(&ctx, &f->a, f->x, f->g, f->b, &rm, &rv, NULL,
			      NULL, f->y))
		fail("batchnorm in loss: %s", mg_last_error());
	del(&rm), del(&rv);
	return dot(f->y, f->r);
}

/* Smallest distance of BN's pre-activation to ReLU6's kinks (0 and 6). */
static double kink_distance(const struct bn_fd *f)
{
	struct mg_bn_args a = f->a;
	a.act = MG_ACT_NONE;
	struct mg_tensor z = clone(f->y), rm = clone(f->rm), rv = clone(f->rv);
	double d = INFINITY;
	if (mg_op_batchnorm2d(&ctx, &a, f->x, f->g, f->b, &rm, &rv, NULL, NULL,
			      &z) == 0)
		for (int64_t i = 0; i < N_(&z); i++)
			d = fmin(d, fmin(fabs(D(&z)[i]), fabs(D(&z)[i] - 6)));
	del(&z), del(&rm), del(&rv);
	return d;
}

static void bn_case(int64_t N, int64_t C, int64_t H, int64_t W, bool training,
		    enum mg_act act)
{
	char name[128];
	snprintf(name, sizeof name, "batchnorm [%lld,%lld,%lld,%lld] %s%s",
		 (long long)N, (long long)C, (long long)H, (long long)W,
		 training ? "train" : "eval", act ? " relu6" : "");
	struct mg_tensor x = mk(MG_F64, 4, N, C, H, W);
	struct mg_tensor y = mk(MG_F64, 4, N, C, H, W);
	struct mg_tensor r = mk(MG_F64, 4, N, C, H, W);
	struct mg_tensor g = mk(MG_F64, 1, C, 0, 0, 0);
	struct mg_tensor b = mk(MG_F64, 1, C, 0, 0, 0);
	struct mg_tensor rm = mk(MG_F64, 1, C, 0, 0, 0);
	struct mg_tensor rv = mk(MG_F64, 1, C, 0, 0, 0);
	struct mg_tensor sm = mk(MG_F64, 1, C, 0, 0, 0);
	struct mg_tensor si = mk(MG_F64, 1, C, 0, 0, 0);
	struct mg_bn_args a = {1e-5, 0.1, training, act};
	struct bn_fd f = {a, &x, &g, &b, &rm, &rv, &y, &r};
	char what[200];
	/* Random data with an offset and scale per channel; with ReLU6,
	 * redraw until no value sits near a kink (finite differences would
	 * straddle it). */
	for (int tries = 0; tries < 50; tries++) {
		for (int64_t c = 0; c < C; c++) {
			/* Values off-centre, at some scale, and not nearly
			 * equal (a tiny variance makes BN ill-conditioned and
			 * finite differences inaccurate). */
			double off = 3 * srand1(), sc = 0.5 + 2 * urand(), sd;
			do {
				double s1 = 0, s2 = 0;
				for (int64_t n = 0; n < N; n++)
					for (int64_t q = 0; q < H * W; q++) {
						double v = srand1();
						D(&x)
						[(n * C + c) * H * W + q] =
							off + sc * v;
						s1 += v;
						s2 += v * v;
					}
				double M = (double)(N * H * W);
				sd = sqrt(fmax(s2 / M - s1 * s1 / (M * M), 0));
			} while (sd < 0.3);
		}
		/* Large tensors with ReLU6 always have values near a kink;
		 * keep them inside (0, 6) there (the small cases cover the
		 * clamped regions). */
		const bool inside = act && N * C * H * W > 2000;
		for (int64_t c = 0; c < C; c++) {
			D(&g)
			[c] = inside ? 0.3 + 0.3 * urand() : 0.5 + 2 * urand();
			D(&b)
			[c] = inside ? 2.5 + urand()
			      : act  ? 1 + 3 * urand()
				     : srand1();
			D(&rm)[c] = srand1();
			D(&rv)[c] = 0.5 + urand();
		}
		if (!act || kink_distance(&f) > 1e-3)
			break;
	}
	fill_rand(&r, 1);

	/* Forward against the definition. */
	struct mg_tensor rm1 = clone(&rm), rv1 = clone(&rv);
	CHECK_OK(mg_op_batchnorm2d(&ctx, &a, &x, &g, &b, &rm1, &rv1, &sm, &si,
				   &y));
	const double M = (double)(N * H * W);
	double maxerr = 0;
	for (int64_t c = 0; c < C; c++) {
		double s = 0, ss = 0;
		for (int64_t n = 0; n < N; n++)
			for (int64_t q = 0; q < H * W; q++)
				s += D(&x)[(n * C + c) * H * W + q];
		double mean = s / M;
		for (int64_t n = 0; n < N; n++)
			for (int64_t q = 0; q < H * W; q++) {
				double d =
					D(&x)[(n * C + c) * H * W + q] - mean;
				ss += d * d;
			}
		double var = ss / M;
		double um = training ? mean : D(&rm)[c];
		double uv = training ? var : D(&rv)[c];
		double is = 1 / sqrt(uv + a.eps);
		for (int64_t n = 0; n < N; n++)
			for (int64_t q = 0; q < H * W; q++) {
				int64_t i = (n * C + c) * H * W + q;
				double v = (D(&x)[i] - um) * is * D(&g)[c] +
					   D(&b)[c];
				if (act)
					v = fmin(fmax(v, 0), 6);
				maxerr = fmax(maxerr, fabs(v - D(&y)[i]));
			}
		if (fabs(D(&sm)[c] - um) > 1e-12 || fabs(D(&si)[c] - is) > 1e-9)
			fail("%s: saved mean/invstd of channel %lld", name,
			     (long long)c);
		double wm = training ? 0.9 * D(&rm)[c] + 0.1 * mean : D(&rm)[c];
		double wv = training ? 0.9 * D(&rv)[c] + 0.1 * var * M / (M - 1)
				     : D(&rv)[c];
		if (fabs(D(&rm1)[c] - wm) > 1e-12 ||
		    fabs(D(&rv1)[c] - wv) > 1e-12)
			fail("%s: running stats of channel %lld: %g %g, want "
			     "%g %g",
			     name, (long long)c, D(&rm1)[c], D(&rv1)[c], wm,
			     wv);
	}
	if (maxerr > 1e-10)
		fail("%s forward: max error %g", name, maxerr);

	/* Backward with accumulation, then finite differences. */
	struct mg_tensor dx = clone(&x), dg = clone(&g), db = clone(&b);
	struct mg_tensor dg0 = clone(&g), db0 = clone(&b);
	fill_const(&dx, NAN);
	fill_rand(&dg, 1);
	fill_rand(&db, 1);
	memcpy(dg0.data, dg.data, mg_tensor_bytes(&dg));
	memcpy(db0.data, db.data, mg_tensor_bytes(&db));
	CHECK_OK(mg_op_batchnorm2d_backward(&ctx, &a, &x, &y, &r, &g, &sm, &si,
					    &dx, &dg, &db));
	for (int64_t c = 0; c < C; c++) {
		D(&dg)[c] -= D(&dg0)[c];
		D(&db)[c] -= D(&db0)[c];
	}
	snprintf(what, sizeof what, "%s dx", name);
	fd_check(what, &x, D(&dx), bn_loss, &f, 80, 1e-6);
	snprintf(what, sizeof what, "%s dgamma", name);
	fd_check(what, &g, D(&dg), bn_loss, &f, 0, 1e-6);
	snprintf(what, sizeof what, "%s dbeta", name);
	fd_check(what, &b, D(&db), bn_loss, &f, 0, 1e-6);

	/* In place (dx aliasing dy) gives the same dx. */
	struct mg_tensor inpl = clone(&r);
	CHECK_OK(mg_op_batchnorm2d_backward(&ctx, &a, &x, &y, &inpl, &g, &sm,
					    &si, &inpl, NULL, NULL));
	snprintf(what, sizeof what, "%s in-place dx", name);
	expect_close(what, D(&inpl), D(&dx), N_(&dx), 1e-14);

	/* f32 agrees with f64 (running stats stay f64: mixed dtypes). The
	 * finite differences left y from a perturbed input: recompute. */
	{
		struct mg_tensor rm3 = clone(&rm), rv3 = clone(&rv);
		CHECK_OK(mg_op_batchnorm2d(&ctx, &a, &x, &g, &b, &rm3, &rv3,
					   NULL, NULL, &y));
		del(&rm3), del(&rv3);
		struct mg_tensor x32 = to_f32(&x), g32 = to_f32(&g),
				 b32 = to_f32(&b), y32 = to_f32(&y),
				 sm32 = to_f32(&sm), si32 = to_f32(&si),
				 r32 = to_f32(&r), dx32 = to_f32(&dx);
		struct mg_tensor rm2 = clone(&rm), rv2 = clone(&rv);
		if (mg_op_batchnorm2d(&ctx, &a, &x32, &g32, &b32, &rm2, &rv2,
				      &sm32, &si32, &y32) ||
		    mg_op_batchnorm2d_backward(&ctx, &a, &x32, &y32, &r32, &g32,
					       &sm32, &si32, &dx32, NULL,
					       NULL)) {
			fail("%s f32: %s", name, mg_last_error());
		} else {
			snprintf(what, sizeof what, "%s f32 forward", name);
			expect_close32(what, &y32, &y, 1e-5);
			snprintf(what, sizeof what, "%s f32 dx", name);
			expect_close32(what, &dx32, &dx, 1e-5);
			snprintf(what, sizeof what, "%s f32 running var", name);
			expect_close(what, D(&rv2), D(&rv1), C, 1e-6);
		}
		del(&x32), del(&g32), del(&b32), del(&y32), del(&sm32);
		del(&si32), del(&r32), del(&dx32), del(&rm2), del(&rv2);
	}
	del(&inpl), del(&dx), del(&dg), del(&db), del(&dg0), del(&db0);
	del(&rm1), del(&rv1);
	del(&x), del(&y), del(&r), del(&g), del(&b), del(&rm), del(&rv);
	del(&sm), del(&si);
}

static void test_batchnorm(void)
{
	bn_case(3, 4, 5, 5, true, MG_ACT_NONE);
	bn_case(3, 4, 5, 5, true, MG_ACT_RELU6);
	bn_case(4, 3, 1, 1, true, MG_ACT_NONE); /* 1x1 maps: stats over N */
	bn_case(2, 3, 3, 7, false, MG_ACT_NONE);
	bn_case(2, 3, 4, 4, false, MG_ACT_RELU6);
	bn_case(2, 5, 9, 9, true, MG_ACT_RELU6);
	/* Tiling: planes split in pieces (HW > 1024), many 1x1 channels per
	 * tile with a partial last tile, and in eval mode. */
	bn_case(2, 3, 40, 41, true, MG_ACT_RELU6);
	bn_case(3, 37, 1, 1, true, MG_ACT_NONE);
	bn_case(3, 50, 3, 3, true, MG_ACT_RELU6);
	bn_case(2, 3, 33, 33, false, MG_ACT_RELU6);
	/* f32 running statistics with f64 activations. */
	struct mg_tensor x = mk(MG_F64, 4, 2, 2, 3, 3), y = clone(&x);
	struct mg_tensor g = mk(MG_F64, 1, 2, 0, 0, 0), b = clone(&g);
	struct mg_tensor rm = mk(MG_F32, 1, 2, 0, 0, 0), rv = clone(&rm);
	fill_rand(&x, 1);
	fill_const(&g, 1);
	fill_const(&b, 0);
	fill_const(&rm, 0);
	fill_const(&rv, 1);
	struct mg_bn_args a = {1e-5, 0.5, true, MG_ACT_NONE};
	CHECK_OK(mg_op_batchnorm2d(&ctx, &a, &x, &g, &b, &rm, &rv, NULL, NULL,
				   &y));
	double s = 0;
	for (int n = 0; n < 2; n++)
		for (int q = 0; q < 9; q++)
			s += D(&x)[n * 18 + q];
	if (fabs(((float *)rm.data)[0] - 0.5 * s / 18) > 1e-6)
		fail("batchnorm: f32 running mean %g, want %g",
		     ((float *)rm.data)[0], 0.5 * s / 18);
	/* One value per channel cannot be normalised in training. */
	struct mg_tensor x1 = mk(MG_F64, 4, 1, 2, 1, 1), y1 = clone(&x1);
	if (mg_op_batchnorm2d(&ctx, &a, &x1, &g, &b, &rm, &rv, NULL, NULL,
			      &y1) == 0)
		fail("batchnorm: training on one value per channel accepted");
	del(&x), del(&y), del(&g), del(&b), del(&rm), del(&rv), del(&x1);
	del(&y1);
}

/* ------------------------------------------------------------------ */
/* Element-wise, pooling, linear.                                      */

struct ew_fd {
	struct mg_tensor *x, *y, *r, *b;
	int op; /* 0 relu6, 1 add, 2 pool */
};

static double ew_loss(void *arg)
{
	struct ew_fd *f = arg;
	int rc = f->op == 0   ? mg_op_relu6(&ctx, f->x, f->y)
		 : f->op == 1 ? mg_op_add(&ctx, f->x, f->b, f->y)
			      : mg_op_global_avgpool(&ctx, f->x, f->y);
	if (rc)
		fail("element-wise op in loss: %s", mg_last_error());
	return dot(f->y, f->r);
}

static void test_elementwise(void)
{
	struct mg_tensor x = mk(MG_F64, 4, 2, 3, 4, 5), y = clone(&x),
			 r = clone(&x), dx = clone(&x), b = clone(&x);
	/* Values spread over [-2, 8], away from the kinks at 0 and 6. */
	for (int64_t i = 0; i < N_(&x); i++) {
		double v;
		do
			v = -2 + 10 * urand();
		while (fabs(v) < 1e-3 || fabs(v - 6) < 1e-3);
		D(&x)[i] = v;
	}
	fill_rand(&r, 1);
	fill_rand(&b, 1);
	struct ew_fd f = {&x, &y, &r, &b, 0};
	CHECK_OK(mg_op_relu6(&ctx, &x, &y));
	for (int64_t i = 0; i < N_(&x); i++)
		if (D(&y)[i] != fmin(fmax(D(&x)[i], 0), 6))
			fail("relu6 forward at %lld", (long long)i);
	fill_const(&dx, NAN);
	CHECK_OK(mg_op_relu6_backward(&ctx, &y, &r, &dx));
	fd_check("relu6 dx", &x, D(&dx), ew_loss, &f, 0, 1e-6);
	CHECK_OK(mg_op_relu6(&ctx, &x, &y)); /* fd_check left y perturbed */
	/* In place forward and backward. */
	struct mg_tensor z = clone(&x), dz = clone(&r);
	CHECK_OK(mg_op_relu6(&ctx, &z, &z));
	expect_close("relu6 in place", D(&z), D(&y), N_(&y), 0);
	CHECK_OK(mg_op_relu6_backward(&ctx, &y, &dz, &dz));
	expect_close("relu6 backward in place", D(&dz), D(&dx), N_(&dx), 0);

	/* add: forward, FD, backward accumulates into both. */
	f.op = 1;
	CHECK_OK(mg_op_add(&ctx, &x, &b, &y));
	for (int64_t i = 0; i < N_(&x); i++)
		if (D(&y)[i] != D(&x)[i] + D(&b)[i])
			fail("add forward at %lld", (long long)i);
	struct mg_tensor da = clone(&x), db = clone(&x), da0, db0;
	fill_rand(&da, 1);
	fill_rand(&db, 1);
	da0 = clone(&da);
	db0 = clone(&db);
	CHECK_OK(mg_op_add_backward(&ctx, &r, &da, &db));
	for (int64_t i = 0; i < N_(&x); i++) {
		D(&da)[i] -= D(&da0)[i];
		D(&db)[i] -= D(&db0)[i];
	}
	fd_check("add da", &x, D(&da), ew_loss, &f, 0, 1e-6);
	fd_check("add db", &b, D(&db), ew_loss, &f, 0, 1e-6);
	CHECK_OK(mg_op_add_backward(&ctx, &r, NULL, &db));

	/* f32 */
	struct mg_tensor x32 = to_f32(&x), y32 = to_f32(&y);
	CHECK_OK(mg_op_relu6(&ctx, &x32, &y32));
	CHECK_OK(mg_op_relu6(&ctx, &x, &y));
	expect_close32("relu6 f32", &y32, &y, 1e-7);
	del(&x32), del(&y32);
	del(&x), del(&y), del(&r), del(&dx), del(&b), del(&z), del(&dz);
	del(&da), del(&db), del(&da0), del(&db0);
}

static void test_pool(void)
{
	const int64_t N = 3, C = 4, H = 5, W = 3;
	struct mg_tensor x = mk(MG_F64, 4, N, C, H, W), dx = clone(&x);
	struct mg_tensor y = mk(MG_F64, 2, N, C, 0, 0), r = clone(&y);
	fill_rand(&x, 2);
	fill_rand(&r, 1);
	CHECK_OK(mg_op_global_avgpool(&ctx, &x, &y));
	for (int64_t p = 0; p < N * C; p++) {
		double s = 0;
		for (int64_t q = 0; q < H * W; q++)
			s += D(&x)[p * H * W + q];
		if (fabs(s / (H * W) - D(&y)[p]) > 1e-14)
			fail("avgpool forward plane %lld", (long long)p);
	}
	fill_const(&dx, NAN);
	CHECK_OK(mg_op_global_avgpool_backward(&ctx, &r, &dx));
	struct ew_fd f = {&x, &y, &r, NULL, 2};
	fd_check("avgpool dx", &x, D(&dx), ew_loss, &f, 0, 1e-6);
	CHECK_OK(mg_op_global_avgpool(&ctx, &x, &y));
	/* [N, C, 1, 1] output works too; a wrong shape is refused. */
	struct mg_tensor y4 = mk(MG_F64, 4, N, C, 1, 1);
	CHECK_OK(mg_op_global_avgpool(&ctx, &x, &y4));
	expect_close("avgpool 4-d output", D(&y4), D(&y), N * C, 0);
	struct mg_tensor bad = mk(MG_F64, 2, N, C + 1, 0, 0);
	if (mg_op_global_avgpool(&ctx, &x, &bad) == 0)
		fail("avgpool accepted a wrong output shape");
	struct mg_tensor x32 = to_f32(&x), y32 = to_f32(&y);
	CHECK_OK(mg_op_global_avgpool(&ctx, &x32, &y32));
	expect_close32("avgpool f32", &y32, &y, 1e-6);
	del(&x32), del(&y32), del(&bad), del(&y4);
	del(&x), del(&dx), del(&y), del(&r);
}

struct lin_fd {
	struct mg_tensor *x, *w, *b, *y, *r;
};

static double lin_loss(void *arg)
{
	struct lin_fd *f = arg;
	if (mg_op_linear(&ctx, f->x, f->w, f->b, f->y))
		fail("linear in loss: %s", mg_last_error());
	return dot(f->y, f->r);
}

static void linear_case(int ndim, int64_t d0, int64_t d1, int64_t in,
			int64_t out)
{
	char name[96];
	snprintf(name, sizeof name, "linear %dd rows %lld in %lld out %lld",
		 ndim, (long long)(ndim == 3 ? d0 * d1 : d0), (long long)in,
		 (long long)out);
	struct mg_tensor x = ndim == 3 ? mk(MG_F64, 3, d0, d1, in, 0)
				       : mk(MG_F64, 2, d0, in, 0, 0);
	struct mg_tensor y = ndim == 3 ? mk(MG_F64, 3, d0, d1, out, 0)
				       : mk(MG_F64, 2, d0, out, 0, 0);
	struct mg_tensor w = mk(MG_F64, 2, out, in, 0, 0);
	struct mg_tensor b = mk(MG_F64, 1, out, 0, 0, 0);
	struct mg_tensor r = clone(&y), yr = clone(&y);
	fill_rand(&x, 1);
	fill_rand(&w, 1);
	fill_rand(&b, 1);
	fill_rand(&r, 1);
	const int64_t rows = N_(&x) / in;
	CHECK_OK(mg_op_linear(&ctx, &x, &w, &b, &y));
	for (int64_t i = 0; i < rows; i++)
		for (int64_t o = 0; o < out; o++) {
			double s = D(&b)[o];
			for (int64_t k = 0; k < in; k++)
				s += D(&x)[i * in + k] * D(&w)[o * in + k];
			D(&yr)[i * out + o] = s;
		}
	char what[160];
	snprintf(what, sizeof what, "%s forward", name);
	expect_close(what, D(&y), D(&yr), N_(&y), 1e-12);
	struct mg_tensor dx = clone(&x), dw = clone(&w), db = clone(&b);
	struct mg_tensor dw0, db0;
	fill_const(&dx, NAN);
	fill_rand(&dw, 1);
	fill_rand(&db, 1);
	dw0 = clone(&dw);
	db0 = clone(&db);
	CHECK_OK(mg_op_linear_backward(&ctx, &x, &w, &r, &dx, &dw, &db));
	for (int64_t i = 0; i < N_(&dw); i++)
		D(&dw)[i] -= D(&dw0)[i];
	for (int64_t i = 0; i < N_(&db); i++)
		D(&db)[i] -= D(&db0)[i];
	struct lin_fd f = {&x, &w, &b, &y, &r};
	snprintf(what, sizeof what, "%s dx", name);
	fd_check(what, &x, D(&dx), lin_loss, &f, 0, 1e-6);
	snprintf(what, sizeof what, "%s dw", name);
	fd_check(what, &w, D(&dw), lin_loss, &f, 0, 1e-6);
	snprintf(what, sizeof what, "%s db", name);
	fd_check(what, &b, D(&db), lin_loss, &f, 0, 1e-6);
	/* linear_backward_add: dx += the same input gradient (dw too) */
	{
		struct mg_tensor dxa = clone(&x), dxa0, dwa = clone(&w);
		fill_rand(&dxa, 1);
		fill_const(&dwa, 0);
		dxa0 = clone(&dxa);
		CHECK_OK(mg_op_linear_backward_add(&ctx, &x, &w, &r, &dxa, &dwa,
						   NULL));
		for (int64_t i = 0; i < N_(&dxa); i++)
			D(&dxa)[i] -= D(&dxa0)[i];
		snprintf(what, sizeof what, "%s dx added", name);
		expect_close(what, D(&dxa), D(&dx), N_(&dx), 1e-12);
		snprintf(what, sizeof what, "%s dw (add)", name);
		expect_close(what, D(&dwa), D(&dw), N_(&dw), 1e-12);
		if (mg_op_linear_backward_add(&ctx, &x, &w, &r, NULL, &dwa,
					      NULL) == 0)
			fail("%s: linear_backward_add without dx accepted",
			     name);
		del(&dxa), del(&dxa0), del(&dwa);
	}
	/* linear_add: y0 + x w^T + b onto random y0, with and without the
	 * bias (LoRA's adapter term first, the base GEMM adding) */
	{
		struct mg_tensor ya = clone(&y), ya0;
		fill_rand(&ya, 1);
		ya0 = clone(&ya);
		CHECK_OK(mg_op_linear_add(&ctx, &x, &w, &b, &ya));
		for (int64_t i = 0; i < N_(&ya); i++)
			D(&ya)[i] -= D(&ya0)[i];
		snprintf(what, sizeof what, "%s linear_add", name);
		expect_close(what, D(&ya), D(&yr), N_(&y), 1e-12);
		memcpy(ya.data, ya0.data, mg_tensor_bytes(&ya));
		CHECK_OK(mg_op_linear_add(&ctx, &x, &w, NULL, &ya));
		for (int64_t i = 0; i < rows; i++)
			for (int64_t o = 0; o < out; o++)
				D(&ya)
		[i * out + o] += D(&b)[o] - D(&ya0)[i * out + o];
		snprintf(what, sizeof what, "%s linear_add without bias", name);
		expect_close(what, D(&ya), D(&yr), N_(&y), 1e-12);
		/* w's shape is never y's in these cases */
		struct mg_tensor yw = clone(&w);
		if (mg_op_linear_add(&ctx, &x, &w, NULL, &yw) == 0)
			fail("%s: linear_add into a y of the wrong shape "
			     "accepted",
			     name);
		del(&ya), del(&ya0), del(&yw);
	}
	struct mg_tensor x32 = to_f32(&x), w32 = to_f32(&w), b32 = to_f32(&b),
			 y32 = to_f32(&y);
	CHECK_OK(mg_op_linear(&ctx, &x32, &w32, &b32, &y32));
	snprintf(what, sizeof what, "%s f32", name);
	expect_close32(what, &y32, &yr, 1e-5);
	{
		/* linear_add in f32: y32 already holds x w^T + b; adding once
		 * more gives twice that */
		struct mg_tensor y2 = clone(&yr);
		for (int64_t i = 0; i < N_(&y2); i++)
			D(&y2)[i] *= 2;
		CHECK_OK(mg_op_linear_add(&ctx, &x32, &w32, &b32, &y32));
		snprintf(what, sizeof what, "%s linear_add f32", name);
		expect_close32(what, &y32, &y2, 1e-5);
		del(&y2);
	}
	/* No bias. */
	CHECK_OK(mg_op_linear(&ctx, &x, &w, NULL, &y));
	for (int64_t i = 0; i < rows; i++)
		for (int64_t o = 0; o < out; o++)
			D(&yr)[i * out + o] -= D(&b)[o];
	snprintf(what, sizeof what, "%s without bias", name);
	expect_close(what, D(&y), D(&yr), N_(&y), 1e-12);
	del(&x32), del(&w32), del(&b32), del(&y32);
	del(&x), del(&y), del(&w), del(&b), del(&r), del(&yr), del(&dx);
	del(&dw), del(&db), del(&dw0), del(&db0);
}

static void test_linear(void)
{
	linear_case(2, 5, 0, 7, 4);
	linear_case(3, 2, 3, 6, 5);
	linear_case(2, 1, 0, 3, 1);
}

/* ------------------------------------------------------------------ */
/* Dropout and loss.                                                   */

struct drop_fd {
	struct mg_tensor *x, *y, *r;
	double p;
	uint64_t key;
};

static double drop_loss(void *arg)
{
	struct drop_fd *f = arg;
	if (mg_op_dropout(&ctx, f->x, f->y, f->p, f->key, 5))
		fail("dropout in loss: %s", mg_last_error());
	return dot(f->y, f->r);
}

static void test_dropout(void)
{
	/* Backward against finite differences on a small tensor. */
	{
		struct mg_tensor x = mk(MG_F64, 2, 6, 7, 0, 0), y = clone(&x),
				 r = clone(&x), dx = clone(&x);
		fill_rand(&x, 1);
		fill_rand(&r, 1);
		fill_const(&dx, NAN);
		struct drop_fd f = {&x, &y, &r, 0.4, mg_rng_key(seed, 5)};
		CHECK_OK(mg_op_dropout_backward(&ctx, &r, &dx, f.p, f.key, 5));
		fd_check("dropout dx", &x, D(&dx), drop_loss, &f, 0, 1e-6);
		del(&x), del(&y), del(&r), del(&dx);
	}
	const int64_t n = 4096;
	const double p = 0.3;
	struct mg_tensor x = mk(MG_F64, 2, 8, n / 8, 0, 0), y = clone(&x),
			 dy = clone(&x), dx = clone(&x);
	fill_rand(&x, 1);
	for (int64_t i = 0; i < n; i++)
		if (D(&x)[i] == 0)
			D(&x)[i] = 0.5;
	fill_rand(&dy, 1);
	const uint64_t key = mg_rng_key(seed, 77);
	CHECK_OK(mg_op_dropout(&ctx, &x, &y, p, key, 1000));
	CHECK_OK(mg_op_dropout_backward(&ctx, &dy, &dx, p, key, 1000));
	int64_t kept = 0;
	for (int64_t i = 0; i < n; i++) {
		bool keep = D(&y)[i] != 0;
		kept += keep;
		double want = keep ? D(&x)[i] / (1 - p) : 0;
		if (fabs(D(&y)[i] - want) > 1e-15)
			fail("dropout scale at %lld", (long long)i);
		/* The backward uses the same mask. */
		if (fabs(D(&dx)[i] - (keep ? D(&dy)[i] / (1 - p) : 0)) > 1e-15)
			fail("dropout backward mask at %lld", (long long)i);
	}
	/* Binomial(4096, 0.7): sd ~ 29; allow 5 sd. */
	if (fabs((double)kept - 0.7 * n) > 5 * sqrt(n * p * (1 - p)))
		fail("dropout kept %lld of %lld at p = %g", (long long)kept,
		     (long long)n, p);
	/* Split in two halves at their global offsets: same mask. */
	struct mg_tensor h1 = x, h2 = x, o1 = y, o2 = y;
	struct mg_tensor y2 = clone(&y);
	h1.shape[0] = h2.shape[0] = o1.shape[0] = o2.shape[0] = 4;
	o1.data = y2.data;
	o2.data = D(&y2) + n / 2;
	h2.data = D(&x) + n / 2;
	CHECK_OK(mg_op_dropout(&ctx, &h1, &o1, p, key, 1000));
	CHECK_OK(mg_op_dropout(&ctx, &h2, &o2, p, key, 1000 + n / 2));
	expect_close("dropout split at offsets", D(&y2), D(&y), n, 0);
	/* Another key gives another mask; p = 0 copies; p = 1 zeroes. */
	/* The next step draws another mask with the same key. */
	ctx.step++;
	CHECK_OK(mg_op_dropout(&ctx, &x, &y2, p, key, 1000));
	if (!memcmp(y2.data, y.data, (size_t)n * sizeof(double)))
		fail("dropout: same mask at the next step");
	ctx.step--;
	CHECK_OK(mg_op_dropout(&ctx, &x, &y2, p, key + 1, 1000));
	int64_t same = 0;
	for (int64_t i = 0; i < n; i++)
		same += (D(&y2)[i] != 0) == (D(&y)[i] != 0);
	if (same == n)
		fail("dropout: a different key gave the same mask");
	CHECK_OK(mg_op_dropout(&ctx, &x, &y2, 0, key, 0));
	expect_close("dropout p=0", D(&y2), D(&x), n, 0);
	CHECK_OK(mg_op_dropout(&ctx, &x, &y2, 1, key, 0));
	for (int64_t i = 0; i < n; i++)
		if (D(&y2)[i] != 0)
			fail("dropout p=1 left a value");
	/* f32 uses the same mask. */
	struct mg_tensor x32 = to_f32(&x), y32 = to_f32(&y);
	CHECK_OK(mg_op_dropout(&ctx, &x32, &y32, p, key, 1000));
	expect_close32("dropout f32", &y32, &y, 1e-6);
	if (mg_op_dropout(&ctx, &x, &y, 1.5, key, 0) == 0)
		fail("dropout accepted p = 1.5");
	del(&x32), del(&y32);
	del(&x), del(&y), del(&dy), del(&dx), del(&y2);
}

struct xent_fd {
	struct mg_tensor *logits, *labels, *metrics;
	double scale;
};

static double xent_loss(void *arg)
{
	struct xent_fd *f = arg;
	if (mg_op_softmax_xent(&ctx, f->logits, f->labels, f->metrics))
		fail("softmax_xent in loss: %s", mg_last_error());
	return f->scale * D(f->metrics)[MG_METRIC_LOSS_SUM];
}

static void test_loss(void)
{
	const int64_t R = 6, K = 5;
	struct mg_tensor lg = mk(MG_F64, 2, R, K, 0, 0), dl = clone(&lg);
	struct mg_tensor lab = mk(MG_I32, 1, R, 0, 0, 0);
	struct mg_tensor met = mk(MG_F64, 1, MG_METRIC_N, 0, 0, 0);
	struct mg_tensor met32 = mk(MG_F32, 1, MG_METRIC_N, 0, 0, 0);
	struct mg_tensor sc = mk(MG_F32, 1, 1, 0, 0, 0);
	fill_rand(&lg, 3);
	int32_t *L = lab.data;
	for (int64_t r = 0; r < R; r++)
		L[r] = (int32_t)(urand() * K);
	L[2] = -1; /* ignored */
	/* Make row 0 predict its label, row 1 predict another class. */
	D(&lg)[0 * K + L[0]] = 10;
	D(&lg)[1 * K + (L[1] + 1) % K] = 10;
	CHECK_OK(mg_op_softmax_xent(&ctx, &lg, &lab, &met));
	double loss = 0, corr = 0, cnt = 0;
	for (int64_t r = 0; r < R; r++) {
		if (L[r] < 0)
			continue;
		double mx = -INFINITY, s = 0;
		int64_t am = 0;
		for (int64_t k = 0; k < K; k++)
			if (D(&lg)[r * K + k] > mx) {
				mx = D(&lg)[r * K + k];
				am = k;
			}
		for (int64_t k = 0; k < K; k++)
			s += exp(D(&lg)[r * K + k]);
		loss += log(s) - D(&lg)[r * K + L[r]];
		corr += am == L[r];
		cnt++;
	}
	if (fabs(D(&met)[MG_METRIC_LOSS_SUM] - loss) > 1e-12 * loss ||
	    D(&met)[MG_METRIC_CORRECT] != corr ||
	    D(&met)[MG_METRIC_COUNT] != cnt || corr < 1 || cnt != R - 1)
		fail("softmax_xent metrics %g %g %g, want %g %g %g", D(&met)[0],
		     D(&met)[1], D(&met)[2], loss, corr, cnt);
	CHECK_OK(mg_op_softmax_xent(&ctx, &lg, &lab, &met32));
	if (fabs(((float *)met32.data)[0] - loss) > 1e-5 * loss)
		fail("softmax_xent f32 metrics");
	/* Backward with a scale, against finite differences. */
	((float *)sc.data)[0] = 0.25f;
	fill_const(&dl, NAN);
	CHECK_OK(mg_op_softmax_xent_backward(&ctx, &lg, &lab, &sc, &dl));
	for (int64_t k = 0; k < K; k++)
		if (D(&dl)[2 * K + k] != 0)
			fail("softmax_xent: ignored row has a gradient");
	struct xent_fd f = {&lg, &lab, &met, 0.25};
	fd_check("softmax_xent dlogits", &lg, D(&dl), xent_loss, &f, 0, 1e-6);
	/* dlogits may alias logits; NULL scale is 1. */
	struct mg_tensor in = clone(&lg), d1 = clone(&lg);
	CHECK_OK(mg_op_softmax_xent_backward(&ctx, &in, &lab, NULL, &in));
	CHECK_OK(mg_op_softmax_xent_backward(&ctx, &lg, &lab, NULL, &d1));
	expect_close("softmax_xent in place", D(&in), D(&d1), R * K, 0);
	/* Large logits do not overflow. */
	for (int64_t i = 0; i < K; i++)
		D(&lg)[i] = 1000 + i;
	CHECK_OK(mg_op_softmax_xent(&ctx, &lg, &lab, &met));
	if (!isfinite(D(&met)[0]))
		fail("softmax_xent overflowed on logits near 1000");
	/* A label out of range is an error naming it. */
	L[3] = (int32_t)K;
	if (mg_op_softmax_xent(&ctx, &lg, &lab, &met) == 0 ||
	    !strstr(mg_last_error(), "label"))
		fail("softmax_xent accepted label %lld of %lld classes",
		     (long long)K, (long long)K);
	del(&lg), del(&dl), del(&lab), del(&met), del(&met32), del(&sc);
	del(&in), del(&d1);
}

/* ------------------------------------------------------------------ */
/* Argument errors and determinism.                                    */

static void expect_error(const char *what, int rc, const char *needle)
{
	if (rc == 0)
		fail("%s: accepted", what);
	else if (!strstr(mg_last_error(), needle))
		fail("%s: error '%s' does not mention '%s'", what,
		     mg_last_error(), needle);
}

static void test_errors(void)
{
	struct mg_tensor x = mk(MG_F64, 4, 2, 4, 5, 5);
	struct mg_tensor w = mk(MG_F64, 4, 6, 4, 3, 3);
	struct mg_tensor y = mk(MG_F64, 4, 2, 6, 5, 5);
	struct mg_tensor y32 = mk(MG_F32, 4, 2, 6, 5, 5);
	struct mg_tensor wbad = mk(MG_F64, 4, 6, 3, 3, 3);
	struct mg_conv2d_args a = {1, 1, 1, 1, 1};
	expect_error("conv wrong weight",
		     mg_op_conv2d(&ctx, &a, &x, &wbad, NULL, &y, NULL),
		     "weight");
	expect_error("conv mixed dtypes",
		     mg_op_conv2d(&ctx, &a, &x, &w, NULL, &y32, NULL), "F32");
	struct mg_conv2d_args a2 = {2, 2, 1, 1, 1};
	expect_error("conv wrong output",
		     mg_op_conv2d(&ctx, &a2, &x, &w, NULL, &y, NULL),
		     "expected");
	struct mg_conv2d_args a3 = {1, 1, 1, 1, 3};
	expect_error("conv bad groups",
		     mg_op_conv2d(&ctx, &a3, &x, &w, NULL, &y, NULL), "groups");
	struct mg_tensor xi = mk(MG_I32, 4, 2, 4, 5, 5);
	expect_error("conv int input",
		     mg_op_conv2d(&ctx, &a, &xi, &w, NULL, &y, NULL), "I32");
	struct mg_tensor xg = x;
	xg.device = MG_DEV_CUDA;
	expect_error("conv tensor on another device",
		     mg_op_conv2d(&ctx, &a, &xg, &w, NULL, &y, NULL), "device");
	struct mg_tensor g = mk(MG_F64, 1, 3, 0, 0, 0);
	struct mg_bn_args ba = {1e-5, 0.1, true, MG_ACT_NONE};
	expect_error("batchnorm gamma size",
		     mg_op_batchnorm2d(&ctx, &ba, &x, &g, &g, NULL, NULL, NULL,
				       NULL, &x),
		     "gamma");
	struct mg_tensor xl = mk(MG_F64, 2, 3, 7, 0, 0);
	struct mg_tensor wl = mk(MG_F64, 2, 4, 6, 0, 0);
	struct mg_tensor yl = mk(MG_F64, 2, 3, 4, 0, 0);
	expect_error("linear in mismatch",
		     mg_op_linear(&ctx, &xl, &wl, NULL, &yl), "does not match");
	struct mg_tensor lab = mk(MG_I32, 1, 4, 0, 0, 0);
	struct mg_tensor met = mk(MG_F32, 1, MG_METRIC_N, 0, 0, 0);
	expect_error("xent label count",
		     mg_op_softmax_xent(&ctx, &yl, &lab, &met), "label");
	/* A device kind this build has no ops for (CUDA ones dispatch to
	 * core/ops/cuda when the build has them). */
	const enum mg_device_kind other = (enum mg_device_kind)7;
	struct mg_device odev = {.kind = other};
	struct mg_ctx c2 = ctx;
	c2.dev = &odev;
	struct mg_tensor xc = x, wc = w, yc = y;
	xc.device = wc.device = yc.device = other;
	expect_error("conv on a device without an implementation",
		     mg_op_conv2d(&c2, &a, &xc, &wc, NULL, &yc, NULL),
		     "no implementation");
	del(&x), del(&w), del(&y), del(&y32), del(&wbad), del(&xi), del(&g);
	del(&xl), del(&wl), del(&yl), del(&lab), del(&met);
}

/* Two runs give bit-identical results (reductions have a fixed order);
 * the run with one op thread too. */
static void test_determinism(void)
{
	const int64_t N = 16, C = 24, H = 14, W = 14, K = 32;
	struct mg_tensor x = mk(MG_F32, 4, N, C, H, W),
			 dy = mk(MG_F32, 4, N, K, H, W);
	struct mg_tensor w = mk(MG_F32, 4, K, C, 1, 1);
	struct mg_tensor wd = mk(MG_F32, 4, C, 1, 3, 3);
	struct mg_tensor dyd = mk(MG_F32, 4, N, C, H, W);
	struct mg_tensor g = mk(MG_F32, 1, C, 0, 0, 0), bb = clone(&g);
	fill_rand(&x, 1), fill_rand(&dy, 1), fill_rand(&w, 1);
	fill_rand(&wd, 1), fill_rand(&dyd, 1), fill_rand(&g, 1);
	fill_rand(&bb, 1);
	struct mg_conv2d_args a = {1, 1, 0, 0, 1}, ad = {1, 1, 1, 1, (int)C};
	struct mg_bn_args ba = {1e-5, 0.1, true, MG_ACT_RELU6};
	struct mg_tensor out[2][6];
	for (int run = 0; run < 2; run++) {
		dev.threads = run == 0 ? 0 : 1;
		struct mg_tensor *o = out[run];
		o[0] = mk(MG_F32, 4, N, C, H, W); /* conv dx */
		o[1] = mk(MG_F32, 4, K, C, 1, 1); /* conv dw */
		o[2] = mk(MG_F32, 4, C, 1, 3, 3); /* depthwise dw */
		o[3] = mk(MG_F32, 4, N, C, H, W); /* depthwise dx */
		o[4] = mk(MG_F32, 1, C, 0, 0, 0); /* bn dgamma */
		o[5] = mk(MG_F32, 4, N, C, H, W); /* bn dx */
		struct mg_tensor y = mk(MG_F32, 4, N, C, H, W);
		struct mg_tensor sm = mk(MG_F32, 1, C, 0, 0, 0),
				 si = clone(&sm);
		CHECK_OK(mg_op_conv2d_backward(&ctx, &a, &x, &w, &dy, &o[0],
					       &o[1], NULL, NULL));
		CHECK_OK(mg_op_conv2d_backward(&ctx, &ad, &x, &wd, &dyd, &o[3],
					       &o[2], NULL, NULL));
		CHECK_OK(mg_op_batchnorm2d(&ctx, &ba, &x, &g, &bb, NULL, NULL,
					   &sm, &si, &y));
		CHECK_OK(mg_op_batchnorm2d_backward(&ctx, &ba, &x, &y, &dyd, &g,
						    &sm, &si, &o[5], &o[4],
						    NULL));
		del(&y), del(&sm), del(&si);
	}
	dev.threads = 0;
	static const char *names[6] = {"conv dx",      "conv dw",
				       "depthwise dw", "depthwise dx",
				       "bn dgamma",    "bn dx"};
	for (int k = 0; k < 6; k++) {
		if (memcmp(out[0][k].data, out[1][k].data,
			   mg_tensor_bytes(&out[0][k])))
			fail("determinism: %s differs between runs", names[k]);
		del(&out[0][k]), del(&out[1][k]);
	}
	del(&x), del(&dy), del(&w), del(&wd), del(&dyd), del(&g), del(&bb);
}

/* fp32 and fp64 agree on a small network-like chain. */
static void test_precision(void)
{
	const int64_t N = 4, C = 8, H = 9, W = 9, K = 16;
	struct mg_tensor x = mk(MG_F64, 4, N, C, H, W);
	struct mg_tensor w1 = mk(MG_F64, 4, K, C, 1, 1);
	struct mg_tensor wd = mk(MG_F64, 4, K, 1, 3, 3);
	struct mg_tensor g = mk(MG_F64, 1, K, 0, 0, 0), b = clone(&g);
	fill_rand(&x, 1), fill_rand(&w1, 0.5), fill_rand(&wd, 0.5);
	fill_const(&g, 1), fill_rand(&b, 1);
	struct mg_tensor x32 = to_f32(&x), w132 = to_f32(&w1),
			 wd32 = to_f32(&wd), g32 = to_f32(&g), b32 = to_f32(&b);
	struct mg_tensor t1 = mk(MG_F64, 4, N, K, H, W), t2 = clone(&t1),
			 t3 = mk(MG_F64, 4, N, K, 5, 5);
	struct mg_tensor u1 = to_f32(&t1), u2 = to_f32(&t2), u3 = to_f32(&t3);
	struct mg_conv2d_args a1 = {1, 1, 0, 0, 1}, ad = {2, 2, 1, 1, (int)K};
	struct mg_bn_args ba = {1e-5, 0.1, true, MG_ACT_RELU6};
	CHECK_OK(mg_op_conv2d(&ctx, &a1, &x, &w1, NULL, &t1, NULL));
	CHECK_OK(mg_op_batchnorm2d(&ctx, &ba, &t1, &g, &b, NULL, NULL, NULL,
				   NULL, &t2));
	CHECK_OK(mg_op_conv2d(&ctx, &ad, &t2, &wd, NULL, &t3, NULL));
	CHECK_OK(mg_op_conv2d(&ctx, &a1, &x32, &w132, NULL, &u1, NULL));
	CHECK_OK(mg_op_batchnorm2d(&ctx, &ba, &u1, &g32, &b32, NULL, NULL, NULL,
				   NULL, &u2));
	CHECK_OK(mg_op_conv2d(&ctx, &ad, &u2, &wd32, NULL, &u3, NULL));
	expect_close32("f32 vs f64 conv", &u1, &t1, 1e-5);
	expect_close32("f32 vs f64 conv+bn+relu6", &u2, &t2, 1e-5);
	expect_close32("f32 vs f64 conv+bn+relu6+depthwise", &u3, &t3, 1e-5);
	del(&x), del(&w1), del(&wd), del(&g), del(&b), del(&x32), del(&w132);
	del(&wd32), del(&g32), del(&b32), del(&t1), del(&t2), del(&t3);
	del(&u1), del(&u2), del(&u3);
}

int main(int argc, char **argv)
{
	fail_context = op_test_context;
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"conv", test_conv},
		{"depthwise", test_depthwise},
		{"batchnorm", test_batchnorm},
		{"elementwise", test_elementwise},
		{"pool", test_pool},
		{"linear", test_linear},
		{"dropout", test_dropout},
		{"loss", test_loss},
		{"errors", test_errors},
		{"determinism", test_determinism},
		{"precision", test_precision},
	};
	const char *env = getenv("MG_TEST_SEED");
	if (env)
		seed = strtoull(env, NULL, 0);
	int ran = 0;
	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
		if (argc > 1 && strcmp(argv[1], tests[i].name))
			continue;
		draw = 0;
		int before = failures;
		tests[i].fn();
		printf("%s: %s\n", tests[i].name,
		       failures == before ? "ok" : "FAILED");
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "unknown test '%s'\n", argv[1]);
		return 2;
	}
	return failures ? 1 : 0;
}
