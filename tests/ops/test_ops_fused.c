/*
 * test_ops_fused.c - checks of the CPU fused LLM ops (ops_llm.h, ABI
 * 1.5) against the unfused compositions they replace:
 *
 *   test_ops_fused add_rmsnorm|rmsnorm_backward_add|linear_xent|errors
 *
 * add + RMSNorm and its backward equal mg_op_add / mg_op_rmsnorm /
 * mg_op_rmsnorm_backward to the last bit in F32 and F64 (the fused
 * kernels round where the unfused ones do), and their gradients pass a
 * finite-difference check in fp64. linear + cross-entropy equals
 * linear, softmax_xent, its backward and linear_backward for every chunk
 * size (1e-12 in fp64, 1e-4 in fp32: chunked GEMM sums), ignored labels
 * included, and its gradients pass finite differences of its own loss;
 * with a low-rank term (LoRA on the head) too.
 * MG_TEST_SEED reruns on other random inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MG_OP_TEST_SEED 20261124
#include "../common/op_test_util.h"
#include "mg/mg.h"

#define FD_TOL 1e-6

static void fill_nan(struct mg_tensor *t)
{
	for (int64_t i = 0; i < N_(t); i++)
		D(t)[i] = NAN;
}

/* Element i of an F32 or F64 tensor. */
static double val(const struct mg_tensor *t, int64_t i)
{
	return t->dtype == MG_F64 ? ((const double *)t->data)[i]
				  : (double)((const float *)t->data)[i];
}

/* Bit-identical F32 or F64 tensors. */
static void expect_same(const char *what, const struct mg_tensor *a,
			const struct mg_tensor *b)
{
	if (memcmp(a->data, b->data, mg_tensor_bytes(a)))
		for (int64_t i = 0; i < N_(a); i++)
			if (val(a, i) != val(b, i)) {
				fail("%s: element %lld differs: %.17g vs %.17g",
				     what, (long long)i, val(a, i), val(b, i));
				return;
			}
}

/* Relative error of two F32 or F64 tensors (as rel_err). */
static void expect_near(const char *what, const struct mg_tensor *got,
			const struct mg_tensor *want, double tol)
{
	const int64_t n = N_(want);
	double *g = malloc((size_t)(n ? n : 1) * sizeof *g),
	       *w = malloc((size_t)(n ? n : 1) * sizeof *w);
	for (int64_t i = 0; i < n; i++)
		g[i] = val(got, i), w[i] = val(want, i);
	expect_close(what, g, w, n, tol);
	free(g), free(w);
}

static struct mg_tensor as_dt(const struct mg_tensor *t, enum mg_dtype dt)
{
	return dt == MG_F64 ? clone(t) : to_f32(t);
}

/* ------------------------------------------------------------------ */
/* add + RMSNorm against add then RMSNorm, and their gradients.        */

struct arms_fd {
	struct mg_tensor *x, *r, *w, *s, *y, *R, *R2;
	double eps;
};

/* L = sum(y * R) + sum(s * R2): the norm's output and the residual. */
static double arms_loss(void *arg)
{
	struct arms_fd *f = arg;
	if (mg_op_add_rmsnorm(&ctx, f->x, f->r, f->w, f->eps, f->s, f->y, NULL))
		return NAN;
	return dot(f->y, f->R) + dot(f->s, f->R2);
}

static void arms_case(enum mg_dtype dt, int64_t A, int64_t Dm, double eps)
{
	char name[96], buf[160];
	snprintf(name, sizeof name, "add_rmsnorm %s [%lld, %lld]",
		 mg_dtype_name(dt), (long long)A, (long long)Dm);
	struct mg_tensor x64 = mk(MG_F64, 2, A, Dm, 0, 0), r64 = clone(&x64),
			 w64 = mk(MG_F64, 1, Dm, 0, 0, 0);
	fill_rand(&x64, 2), fill_rand(&r64, 1);
	for (int64_t i = 0; i < Dm; i++)
		D(&w64)[i] = 1 + 0.5 * srand1();
	struct mg_tensor x = as_dt(&x64, dt), r = as_dt(&r64, dt),
			 w = as_dt(&w64, dt);
	struct mg_tensor s1 = as_dt(&x64, dt), y1 = as_dt(&x64, dt),
			 s2 = as_dt(&x64, dt), y2 = as_dt(&x64, dt);
	struct mg_tensor rs1 = mk(dt, 1, A, 0, 0, 0),
			 rs2 = mk(dt, 1, A, 0, 0, 0);
	CHECK_OK(mg_op_add(&ctx, &x, &r, &s1));
	CHECK_OK(mg_op_rmsnorm(&ctx, &s1, &w, eps, &y1, &rs1));
	CHECK_OK(mg_op_add_rmsnorm(&ctx, &x, &r, &w, eps, &s2, &y2, &rs2));
	snprintf(buf, sizeof buf, "%s sum", name);
	expect_same(buf, &s2, &s1);
	snprintf(buf, sizeof buf, "%s output", name);
	expect_same(buf, &y2, &y1);
	snprintf(buf, sizeof buf, "%s rstd", name);
	expect_same(buf, &rs2, &rs1);
	/* s aliasing x, then r */
	struct mg_tensor xa = as_dt(&x64, dt), ra = as_dt(&r64, dt);
	CHECK_OK(mg_op_add_rmsnorm(&ctx, &xa, &r, &w, eps, &xa, &y2, NULL));
	CHECK_OK(mg_op_add_rmsnorm(&ctx, &x, &ra, &w, eps, &ra, &y2, NULL));
	snprintf(buf, sizeof buf, "%s s aliasing x", name);
	expect_same(buf, &xa, &s1);
	snprintf(buf, sizeof buf, "%s s aliasing r", name);
	expect_same(buf, &ra, &s1);
	if (dt == MG_F64) {
		/* d L / d x = d L / d r = R2 + rmsnorm's gradient of R */
		struct mg_tensor R = clone(&x64), R2 = clone(&x64),
				 dx = clone(&x64), dw = clone(&w64);
		fill_rand(&R, 1), fill_rand(&R2, 1), fill_nan(&dx);
		fill_const(&dw, 0);
		CHECK_OK(mg_op_rmsnorm_backward_add(&ctx, &s1, &w, &rs1, &R,
						    &R2, &dx, &dw));
		struct arms_fd f = {&x, &r, &w, &s2, &y2, &R, &R2, eps};
		snprintf(buf, sizeof buf, "%s dx", name);
		fd_check(buf, &x, D(&dx), arms_loss, &f, 0, FD_TOL);
		snprintf(buf, sizeof buf, "%s dr", name);
		fd_check(buf, &r, D(&dx), arms_loss, &f, 0, FD_TOL);
		snprintf(buf, sizeof buf, "%s dw", name);
		fd_check(buf, &w, D(&dw), arms_loss, &f, 0, FD_TOL);
		del(&R), del(&R2), del(&dx), del(&dw);
	}
	del(&x64), del(&r64), del(&w64), del(&x), del(&r), del(&w);
	del(&s1), del(&y1), del(&s2), del(&y2), del(&rs1), del(&rs2);
	del(&xa), del(&ra);
}

static void test_add_rmsnorm(void)
{
	arms_case(MG_F64, 5, 16, 1e-6);
	arms_case(MG_F64, 3, 7, 0.1);
	arms_case(MG_F32, 6, 33, 1e-5);
}

/* rmsnorm_backward_add against rmsnorm_backward then add. */
static void rba_case(enum mg_dtype dt, bool w32, int64_t A, int64_t Dm)
{
	char name[96], buf[160];
	snprintf(name, sizeof name, "rmsnorm_backward_add %s%s [%lld, %lld]",
		 mg_dtype_name(dt), w32 ? " (F32 weight)" : "", (long long)A,
		 (long long)Dm);
	struct mg_tensor x64 = mk(MG_F64, 2, A, Dm, 0, 0),
			 w64 = mk(MG_F64, 1, Dm, 0, 0, 0);
	fill_rand(&x64, 2);
	for (int64_t i = 0; i < Dm; i++)
		D(&w64)[i] = 1 + 0.5 * srand1();
	struct mg_tensor x = as_dt(&x64, dt), dy = as_dt(&x64, dt),
			 dres = as_dt(&x64, dt),
			 w = as_dt(&w64, w32 ? MG_F32 : dt);
	fill_rand(&x64, 1);
	struct mg_tensor t = as_dt(&x64, dt);
	memcpy(dy.data, t.data, mg_tensor_bytes(&t));
	fill_rand(&x64, 1);
	del(&t);
	t = as_dt(&x64, dt);
	memcpy(dres.data, t.data, mg_tensor_bytes(&t));
	struct mg_tensor y = as_dt(&x64, dt), rs = mk(dt, 1, A, 0, 0, 0);
	CHECK_OK(mg_op_rmsnorm(&ctx, &x, &w, 1e-5, &y, &rs));
	struct mg_tensor d1 = as_dt(&x64, dt), d2 = as_dt(&x64, dt),
			 dw1 = as_dt(&w64, w.dtype), dw2 = as_dt(&w64, w.dtype);
	CHECK_OK(mg_op_rmsnorm_backward(&ctx, &x, &w, &rs, &dy, &t, &dw1));
	CHECK_OK(mg_op_add(&ctx, &dres, &t, &d1));
	CHECK_OK(mg_op_rmsnorm_backward_add(&ctx, &x, &w, &rs, &dy, &dres, &d2,
					    &dw2));
	snprintf(buf, sizeof buf, "%s dx", name);
	expect_same(buf, &d2, &d1);
	snprintf(buf, sizeof buf, "%s dw", name);
	expect_same(buf, &dw2, &dw1);
	/* dx aliasing dres, no dw */
	CHECK_OK(mg_op_rmsnorm_backward_add(&ctx, &x, &w, &rs, &dy, &dres,
					    &dres, NULL));
	snprintf(buf, sizeof buf, "%s dx aliasing dres", name);
	expect_same(buf, &dres, &d1);
	del(&x64), del(&w64), del(&x), del(&dy), del(&dres), del(&w);
	del(&t), del(&y), del(&rs), del(&d1), del(&d2), del(&dw1), del(&dw2);
}

static void test_rmsnorm_backward_add(void)
{
	rba_case(MG_F64, false, 4, 12);
	rba_case(MG_F64, true, 3, 9);
	rba_case(MG_F32, false, 7, 40);
}

/* ------------------------------------------------------------------ */
/* Linear + cross-entropy against the four unfused ops.                */

struct lx_fd {
	struct mg_tensor *x, *w, *lab, *work, *met;
	double scale;
};

/* scale * (summed token loss), from the fused op's metrics. */
static double lx_loss(void *arg)
{
	struct lx_fd *f = arg;
	if (mg_op_linear_xent(&ctx, f->x, f->w, f->lab, NULL, f->work, f->met,
			      NULL, NULL))
		return NAN;
	return f->scale * D(f->met)[MG_METRIC_LOSS_SUM];
}

static void lx_case(enum mg_dtype dt, int64_t R, int64_t Dm, int64_t V,
		    int64_t C)
{
	char name[96], buf[160];
	snprintf(name, sizeof name,
		 "linear_xent %s rows %lld dim %lld vocab %lld chunk %lld",
		 mg_dtype_name(dt), (long long)R, (long long)Dm, (long long)V,
		 (long long)C);
	/* F32: the chunks' GEMMs may sum in another order than the whole one */
	const double tol = dt == MG_F64 ? 1e-12 : 1e-4;
	struct mg_tensor x64 = mk(MG_F64, 2, R, Dm, 0, 0),
			 w64 = mk(MG_F64, 2, V, Dm, 0, 0);
	fill_rand(&x64, 2), fill_rand(&w64, 1);
	struct mg_tensor x = as_dt(&x64, dt), w = as_dt(&w64, dt);
	struct mg_tensor lab = mk(MG_I32, 1, R, 0, 0, 0);
	int32_t *l = lab.data;
	for (int64_t r = 0; r < R; r++) /* every third row ignored */
		l[r] = r % 3 == 1 ? -100 : (int32_t)(urand() * (double)V);
	struct mg_tensor scale = mk(MG_F32, 1, 1, 0, 0, 0);
	*(float *)scale.data = 0.375f;
	/* unfused: logits, metrics, dlogits in place, dx and dw += */
	struct mg_tensor lg = mk(dt, 2, R, V, 0, 0),
			 m1 = mk(MG_F64, 1, 3, 0, 0, 0),
			 m2 = mk(MG_F64, 1, 3, 0, 0, 0);
	struct mg_tensor dx1 = as_dt(&x64, dt), dx2 = as_dt(&x64, dt);
	fill_rand(&w64, 0.5);
	struct mg_tensor dw1 = as_dt(&w64, dt), dw2 = as_dt(&w64, dt),
			 dw0 = as_dt(&w64, dt);
	CHECK_OK(mg_op_linear(&ctx, &x, &w, NULL, &lg));
	CHECK_OK(mg_op_softmax_xent(&ctx, &lg, &lab, &m1));
	CHECK_OK(mg_op_softmax_xent_backward(&ctx, &lg, &lab, &scale, &lg));
	CHECK_OK(mg_op_linear_backward(&ctx, &x, &w, &lg, &dx1, &dw1, NULL));
	struct mg_tensor work = mk(dt, 2, C, V, 0, 0);
	CHECK_OK(mg_op_linear_xent(&ctx, &x, &w, &lab, &scale, &work, &m2, &dx2,
				   &dw2));
	snprintf(buf, sizeof buf, "%s metrics", name);
	expect_close(buf, D(&m2), D(&m1), 3, dt == MG_F64 ? 1e-13 : 1e-6);
	if (D(&m2)[MG_METRIC_COUNT] != D(&m1)[MG_METRIC_COUNT] ||
	    D(&m2)[MG_METRIC_CORRECT] != D(&m1)[MG_METRIC_CORRECT])
		fail("%s: counted %g correct %g, unfused %g and %g", name,
		     D(&m2)[MG_METRIC_COUNT], D(&m2)[MG_METRIC_CORRECT],
		     D(&m1)[MG_METRIC_COUNT], D(&m1)[MG_METRIC_CORRECT]);
	snprintf(buf, sizeof buf, "%s dx", name);
	expect_near(buf, &dx2, &dx1, tol);
	snprintf(buf, sizeof buf, "%s dw", name);
	expect_near(buf, &dw2, &dw1, tol);
	/* metrics only, dx only, dw only: the same values */
	struct mg_tensor m3 = mk(MG_F64, 1, 3, 0, 0, 0), dx3 = as_dt(&x64, dt),
			 dw3 = clone(&dw0);
	CHECK_OK(mg_op_linear_xent(&ctx, &x, &w, &lab, NULL, &work, &m3, NULL,
				   NULL));
	snprintf(buf, sizeof buf, "%s metrics without gradients", name);
	expect_close(buf, D(&m3), D(&m2), 3, 0);
	CHECK_OK(mg_op_linear_xent(&ctx, &x, &w, &lab, &scale, &work, NULL,
				   &dx3, NULL));
	snprintf(buf, sizeof buf, "%s dx alone", name);
	expect_same(buf, &dx3, &dx2);
	if (dt == MG_F64) {
		CHECK_OK(mg_op_linear_xent(&ctx, &x, &w, &lab, &scale, &work,
					   NULL, NULL, &dw3));
		snprintf(buf, sizeof buf, "%s dw alone", name);
		expect_same(buf, &dw3, &dw2);
		/* finite differences of scale * loss */
		double *adw = malloc((size_t)N_(&dw2) * sizeof *adw);
		for (int64_t i = 0; i < N_(&dw2); i++)
			adw[i] = D(&dw2)[i] - D(&dw0)[i];
		struct lx_fd f = {&x, &w, &lab, &work, &m3, 0.375};
		snprintf(buf, sizeof buf, "%s dx", name);
		fd_check(buf, &x, D(&dx2), lx_loss, &f, 40, FD_TOL);
		snprintf(buf, sizeof buf, "%s dw", name);
		fd_check(buf, &w, adw, lx_loss, &f, 40, FD_TOL);
		free(adw);
	}
	del(&x64), del(&w64), del(&x), del(&w), del(&lab), del(&scale);
	del(&lg), del(&m1), del(&m2), del(&m3), del(&dx1), del(&dx2);
	del(&dx3), del(&dw0), del(&dw1), del(&dw2), del(&dw3), del(&work);
}

/* With a low-rank term (LoRA on the head): logits = x w^T + x2 w2^T. */
struct lxl_fd {
	struct mg_tensor *x, *w, *x2, *w2, *lab, *work, *met;
};

static double lxl_loss(void *arg)
{
	struct lxl_fd *f = arg;
	struct mg_lowrank lr = {f->x2, f->w2, NULL, NULL};
	if (mg_op_linear_lora_xent(&ctx, f->x, f->w, &lr, f->lab, NULL, f->work,
				   f->met, NULL, NULL))
		return NAN;
	return D(f->met)[MG_METRIC_LOSS_SUM];
}

static void lxl_case(enum mg_dtype dt, int64_t R, int64_t Dm, int64_t V,
		     int64_t r, int64_t C)
{
	char name[128], buf[192];
	snprintf(name, sizeof name,
		 "linear_lora_xent %s rows %lld dim %lld vocab %lld rank %lld "
		 "chunk %lld",
		 mg_dtype_name(dt), (long long)R, (long long)Dm, (long long)V,
		 (long long)r, (long long)C);
	const double tol = dt == MG_F64 ? 1e-12 : 1e-4;
	struct mg_tensor x64 = mk(MG_F64, 2, R, Dm, 0, 0),
			 w64 = mk(MG_F64, 2, V, Dm, 0, 0),
			 a64 = mk(MG_F64, 2, R, r, 0, 0),
			 b64 = mk(MG_F64, 2, V, r, 0, 0);
	fill_rand(&x64, 2), fill_rand(&w64, 1), fill_rand(&a64, 1);
	fill_rand(&b64, 1);
	struct mg_tensor x = as_dt(&x64, dt), w = as_dt(&w64, dt),
			 x2 = as_dt(&a64, dt), w2 = as_dt(&b64, dt);
	struct mg_tensor lab = mk(MG_I32, 1, R, 0, 0, 0);
	for (int64_t i = 0; i < R; i++)
		((int32_t *)lab.data)[i] =
			i % 4 == 2 ? -100 : (int32_t)(urand() * (double)V);
	/* unfused: both GEMMs and an add, the loss, both backwards */
	struct mg_tensor lg = mk(dt, 2, R, V, 0, 0), l2 = mk(dt, 2, R, V, 0, 0),
			 m1 = mk(MG_F64, 1, 3, 0, 0, 0),
			 m2 = mk(MG_F64, 1, 3, 0, 0, 0);
	struct mg_tensor dx1 = as_dt(&x64, dt), dx2 = as_dt(&x64, dt),
			 da1 = as_dt(&a64, dt), da2 = as_dt(&a64, dt);
	fill_const(&b64, 0);
	struct mg_tensor db1 = as_dt(&b64, dt), db2 = as_dt(&b64, dt);
	CHECK_OK(mg_op_linear(&ctx, &x, &w, NULL, &lg));
	CHECK_OK(mg_op_linear(&ctx, &x2, &w2, NULL, &l2));
	CHECK_OK(mg_op_add(&ctx, &lg, &l2, &lg));
	CHECK_OK(mg_op_softmax_xent(&ctx, &lg, &lab, &m1));
	CHECK_OK(mg_op_softmax_xent_backward(&ctx, &lg, &lab, NULL, &lg));
	CHECK_OK(mg_op_linear_backward(&ctx, &x, &w, &lg, &dx1, NULL, NULL));
	CHECK_OK(mg_op_linear_backward(&ctx, &x2, &w2, &lg, &da1, &db1, NULL));
	struct mg_tensor work = mk(dt, 2, C, V, 0, 0);
	struct mg_lowrank lr = {&x2, &w2, &da2, &db2};
	CHECK_OK(mg_op_linear_lora_xent(&ctx, &x, &w, &lr, &lab, NULL, &work,
					&m2, &dx2, NULL));
	snprintf(buf, sizeof buf, "%s metrics", name);
	expect_close(buf, D(&m2), D(&m1), 3, dt == MG_F64 ? 1e-13 : 1e-6);
	snprintf(buf, sizeof buf, "%s dx", name);
	expect_near(buf, &dx2, &dx1, tol);
	snprintf(buf, sizeof buf, "%s dx2", name);
	expect_near(buf, &da2, &da1, tol);
	snprintf(buf, sizeof buf, "%s dw2", name);
	expect_near(buf, &db2, &db1, tol);
	if (dt == MG_F64) {
		struct lxl_fd f = {&x, &w, &x2, &w2, &lab, &work, &m2};
		snprintf(buf, sizeof buf, "%s dx2", name);
		fd_check(buf, &x2, D(&da2), lxl_loss, &f, 30, FD_TOL);
		snprintf(buf, sizeof buf, "%s dw2", name);
		fd_check(buf, &w2, D(&db2), lxl_loss, &f, 30, FD_TOL);
	}
	struct mg_tensor *all[] = {&x64, &w64, &a64, &b64, &x,	 &w,   &x2,
				   &w2,	 &lab, &lg,  &l2,  &m1,	 &m2,  &dx1,
				   &dx2, &da1, &da2, &db1, &db2, &work};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		del(all[i]);
}

static void test_linear_xent(void)
{
	lxl_case(MG_F64, 11, 6, 13, 3, 4);
	lxl_case(MG_F64, 5, 4, 7, 1, 16);
	lxl_case(MG_F32, 29, 16, 203, 4, 8);
	lx_case(MG_F64, 10, 6, 13, 1);
	lx_case(MG_F64, 10, 6, 13, 4);
	lx_case(MG_F64, 10, 6, 13, 10);
	lx_case(MG_F64, 7, 5, 9, 64);
	lx_case(MG_F32, 37, 24, 301, 8);
	lx_case(MG_F32, 5, 3, 1, 2); /* one class: loss 0, all correct */
}

/* ------------------------------------------------------------------ */
/* Argument errors name the op and the argument.                       */

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
	struct mg_tensor x = mk(MG_F64, 2, 4, 3, 0, 0),
			 w = mk(MG_F64, 2, 5, 3, 0, 0),
			 lab = mk(MG_I32, 1, 4, 0, 0, 0),
			 lab3 = mk(MG_I32, 1, 3, 0, 0, 0),
			 work = mk(MG_F64, 2, 2, 5, 0, 0),
			 work4 = mk(MG_F64, 2, 2, 4, 0, 0),
			 w4 = mk(MG_F64, 2, 5, 4, 0, 0),
			 met = mk(MG_F64, 1, 2, 0, 0, 0),
			 nw = mk(MG_F64, 1, 3, 0, 0, 0), y = clone(&x);
	expect_error("linear_xent labels",
		     mg_op_linear_xent(&ctx, &x, &w, &lab3, NULL, &work, NULL,
				       NULL, NULL),
		     "linear_xent: labels");
	expect_error("linear_xent work",
		     mg_op_linear_xent(&ctx, &x, &w, &lab, NULL, &work4, NULL,
				       NULL, NULL),
		     "linear_xent: work");
	expect_error("linear_xent width",
		     mg_op_linear_xent(&ctx, &x, &w4, &lab, NULL, &work, NULL,
				       NULL, NULL),
		     "width");
	expect_error("linear_xent metrics",
		     mg_op_linear_xent(&ctx, &x, &w, &lab, NULL, &work, &met,
				       NULL, NULL),
		     "metrics");
	expect_error("linear_xent dx aliasing x",
		     mg_op_linear_xent(&ctx, &x, &w, &lab, NULL, &work, NULL,
				       &x, NULL),
		     "alias");
	struct mg_lowrank lr = {&nw, &w, NULL, NULL};
	expect_error("linear_lora_xent x2 shape",
		     mg_op_linear_lora_xent(&ctx, &x, &w, &lr, &lab, NULL,
					    &work, NULL, NULL, NULL),
		     "linear_lora_xent: x2");
	((int32_t *)lab.data)[2] = 5;
	expect_error("linear_xent label out of range",
		     mg_op_linear_xent(&ctx, &x, &w, &lab, NULL, &work, NULL,
				       NULL, NULL),
		     "label 5 of row 2");
	expect_error("add_rmsnorm y aliasing s",
		     mg_op_add_rmsnorm(&ctx, &x, &y, &nw, 1e-5, &y, &y, NULL),
		     "alias");
	expect_error("add_rmsnorm r shape",
		     mg_op_add_rmsnorm(&ctx, &x, &w, &nw, 1e-5, &y, &x, NULL),
		     "add_rmsnorm");
	del(&x), del(&w), del(&lab), del(&lab3), del(&work), del(&work4);
	del(&w4), del(&met), del(&nw), del(&y);
}

int main(int argc, char **argv)
{
	fail_context = op_test_context;
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"add_rmsnorm", test_add_rmsnorm},
		{"rmsnorm_backward_add", test_rmsnorm_backward_add},
		{"linear_xent", test_linear_xent},
		{"errors", test_errors},
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
