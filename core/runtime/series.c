/*
 * series.c - growable lists of doubles (step wall times) and their
 * quantiles, shared by the run report, the profiler's overhead figure and
 * sweeps/compare, so every median in mgrun's output is the same one
 * (linear interpolation between closest ranks: numpy's default).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

int mg_series_add(struct mg_series *s, double v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		double *p = realloc(s->v, cap * sizeof *p);
		if (!p)
			return mg_error("out of memory");
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	return 0;
}

void mg_series_free(struct mg_series *s)
{
	free(s->v);
	memset(s, 0, sizeof *s);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void mg_sort_doubles(double *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_double);
}

double mg_quantile_sorted(const double *v, size_t n, double q)
{
	if (!n)
		return NAN;
	double h = q * (double)(n - 1);
	size_t lo = (size_t)h;
	if (lo + 1 >= n)
		return v[n - 1];
	return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

double mg_quantile(const double *v, size_t n, double q)
{
	if (!n)
		return NAN;
	double *s = malloc(n * sizeof *s);
	if (!s)
		return NAN;
	memcpy(s, v, n * sizeof *s);
	mg_sort_doubles(s, n);
	double r = mg_quantile_sorted(s, n, q);
	free(s);
	return r;
}

double mg_median(const double *v, size_t n)
{
	return mg_quantile(v, n, 0.5);
}
