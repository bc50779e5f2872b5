/*
 * op_test_util.h - what the CPU op tests share (header-only): a CPU
 * context, the test's random stream (seed MG_OP_TEST_SEED, defined by the
 * test before including this), host tensors in f64 with f32 copies, a
 * compensated dot product, the relative-error checks and the central
 * finite-difference check of a gradient.
 */
#ifndef MG_OP_TEST_UTIL_H
#define MG_OP_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "test_util.h"

static struct mg_device dev __attribute__((unused)) = {.kind = MG_DEV_CPU};
static struct mg_ctx ctx
	__attribute__((unused)) = {.struct_size = sizeof(struct mg_ctx),
				   .dev = &dev,
				   .compute_dtype = MG_F64,
				   .master_dtype = MG_F64};
static uint64_t seed = MG_OP_TEST_SEED;
static uint64_t draw; /* counter of the test's random stream */

#define CHECK_OK(call)                                                         \
	do {                                                                   \
		if ((call) != 0) {                                             \
			fail("%s:%d: %s: %s", __FILE__, __LINE__, #call,       \
			     mg_last_error());                                 \
			return;                                                \
		}                                                              \
	} while (0)

static inline double urand(void)
{
	return mg_rng_uniform(seed, draw++);
}

/* Uniform in [-1, 1). */
static inline double srand1(void)
{
	return 2 * urand() - 1;
}

/* ------------------------------------------------------------------ */
/* Host tensors.                                                       */

static inline struct mg_tensor mk(enum mg_dtype dt, int ndim, int64_t d0,
				  int64_t d1, int64_t d2, int64_t d3)
{
	int64_t shape[4] = {d0, d1, d2, d3};
	struct mg_tensor t = mg_tensor_make(NULL, dt, MG_DEV_CPU, ndim, shape);
	size_t bytes = mg_tensor_bytes(&t);
	t.data = calloc(1, bytes ? bytes : 8);
	return t;
}

static inline int64_t N_(const struct mg_tensor *t)
{
	return mg_tensor_numel(t);
}

static double *D(const struct mg_tensor *t)
{
	return t->data;
}

static inline void fill_rand(struct mg_tensor *t, double scale)
{
	for (int64_t i = 0; i < N_(t); i++) {
		double v = scale * srand1();
		if (t->dtype == MG_F64)
			((double *)t->data)[i] = v;
		else
			((float *)t->data)[i] = (float)v;
	}
}

static inline void fill_const(struct mg_tensor *t, double v)
{
	for (int64_t i = 0; i < N_(t); i++) {
		if (t->dtype == MG_F64)
			((double *)t->data)[i] = v;
		else
			((float *)t->data)[i] = (float)v;
	}
}

static inline struct mg_tensor clone(const struct mg_tensor *s)
{
	struct mg_tensor t = *s;
	size_t b = mg_tensor_bytes(s);
	t.data = malloc(b ? b : 8);
	memcpy(t.data, s->data, b);
	return t;
}

/* An f32 copy of an f64 tensor. */
static inline struct mg_tensor to_f32(const struct mg_tensor *s)
{
	struct mg_tensor t = *s;
	t.dtype = MG_F32;
	t.data = malloc((size_t)(N_(s) ? N_(s) : 1) * sizeof(float));
	for (int64_t i = 0; i < N_(s); i++)
		((float *)t.data)[i] = (float)D(s)[i];
	return t;
}

static inline void del(struct mg_tensor *t)
{
	free(t->data);
	t->data = NULL;
}

/* sum(a * b), compensated (Kahan) so that finite differences of large
 * sums are not lost in their rounding. */
static inline double dot(const struct mg_tensor *a, const struct mg_tensor *b)
{
	double s = 0, c = 0;
	for (int64_t i = 0; i < N_(a); i++) {
		double y = D(a)[i] * D(b)[i] - c, t = s + y;
		c = (t - s) - y;
		s = t;
	}
	return s;
}

/*
 * Largest relative difference of got vs want, each element measured
 * against |want_i| + 1e-2 * max|want|: tiny components of a gradient are
 * judged on the tensor's scale (finite differences of a loss summed over
 * thousands of elements carry ~1e-9 of absolute rounding noise).
 */
static inline double rel_err(const double *got, const double *want, int64_t n)
{
	double mx = 0, e = 0;
	for (int64_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(want[i]));
	for (int64_t i = 0; i < n; i++) {
		double d = fabs(got[i] - want[i]) /
			   (fabs(want[i]) + 1e-2 * mx + 1e-300);
		if (!(d <= e)) /* NaN propagates */
			e = isnan(d) ? INFINITY : d;
	}
	return e;
}

static inline void expect_close(const char *what, const double *got,
				const double *want, int64_t n, double tol)
{
	double e = rel_err(got, want, n);
	if (!(e <= tol))
		fail("%s: relative error %.3g > %.3g", what, e, tol);
}

/*
 * f32 tensor against the f64 result: normwise relative error
 * ||got - want|| / ||want|| (elementwise would judge single-precision
 * rounding of values that cancel to near zero).
 */
static inline void expect_close32(const char *what, const struct mg_tensor *got,
				  const struct mg_tensor *want, double tol)
{
	double d = 0, w = 0;
	for (int64_t i = 0; i < N_(want); i++) {
		double g = ((float *)got->data)[i];
		d += (g - D(want)[i]) * (g - D(want)[i]);
		w += D(want)[i] * D(want)[i];
	}
	double e = sqrt(d) / (sqrt(w) + 1e-300);
	if (!(e <= tol))
		fail("%s: normwise relative error %.3g > %.3g", what, e, tol);
}

/*
 * Central finite differences of loss() with respect to every element of p
 * (or a random sample of `sample` of them; 0: all), compared with the analytic
 * gradient ana. h is relative to max(1, |p_i|).
 */
typedef double (*loss_fn)(void *arg);

static inline void fd_check(const char *what, struct mg_tensor *p,
			    const double *ana, loss_fn loss, void *arg,
			    int64_t sample, double tol)
{
	const int64_t n = N_(p);
	const int64_t m = sample > 0 && sample < n ? sample : n;
	double *fd = malloc((size_t)m * sizeof *fd);
	double *an = malloc((size_t)m * sizeof *an);
	for (int64_t k = 0; k < m; k++) {
		int64_t i = m == n ? k : (int64_t)(urand() * (double)n);
		double save = D(p)[i];
		double h = 1e-5 * fmax(1.0, fabs(save));
		D(p)[i] = save + h;
		double lp = loss(arg);
		D(p)[i] = save - h;
		double lm = loss(arg);
		D(p)[i] = save;
		fd[k] = (lp - lm) / (2 * h);
		an[k] = ana[i];
	}
	char buf[160];
	snprintf(buf, sizeof buf, "%s (finite differences, %lld of %lld)", what,
		 (long long)m, (long long)n);
	expect_close(buf, an, fd, m, tol);
	free(fd);
	free(an);
}

/* fail()'s context: the seed to rerun with (main sets fail_context). */
static inline void op_test_context(FILE *f)
{
	fprintf(f, " (seed %llu)", (unsigned long long)seed);
}

#endif
