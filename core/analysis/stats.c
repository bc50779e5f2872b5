/*
 * stats.c - the bootstrap test of whether two runs' per-step medians
 * differ by more than their own step-to-step noise. Deterministic (fixed
 * seed), so the same two runs always get the same verdict. Quantiles are
 * runtime/series.c's, the same as report.json's.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "runtime/runtime.h"

#define BOOT_RESAMPLES 2000
#define BOOT_SEED 0x6d6772756e5f6162ull /* "mgrun_ab" */
#define BOOT_MIN_N 5

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Median of a resample (with replacement) of v, drawn into tmp. The
 * median of a resample only needs the middle order statistics, but a
 * sort keeps this short; n is a run's step count. */
static double resample_median(const double *v, int n, double *tmp,
			      uint64_t *rng)
{
	for (int i = 0; i < n; i++)
		tmp[i] = v[splitmix64(rng) % (uint64_t)n];
	mg_sort_doubles(tmp, (size_t)n);
	return mg_quantile_sorted(tmp, (size_t)n, 0.5);
}

int mg_bootstrap_ratio(const double *a, int na, const double *b, int nb,
		       double *lo, double *hi)
{
	*lo = *hi = NAN;
	if (na < BOOT_MIN_N || nb < BOOT_MIN_N)
		return -1;
	double *tmp = malloc((size_t)(na > nb ? na : nb) * sizeof *tmp);
	double *r = malloc(BOOT_RESAMPLES * sizeof *r);
	if (!tmp || !r) {
		free(tmp);
		free(r);
		return -1;
	}
	uint64_t rng = BOOT_SEED;
	int nr = 0;
	for (int i = 0; i < BOOT_RESAMPLES; i++) {
		double ma = resample_median(a, na, tmp, &rng);
		double mb = resample_median(b, nb, tmp, &rng);
		/* 0/0 (a phase that never ran): equal; x/0: huge */
		if (ma > 0)
			r[nr++] = mb / ma;
		else
			r[nr++] = mb > 0 ? 1e300 : 1.0;
	}
	mg_sort_doubles(r, (size_t)nr);
	*lo = mg_quantile_sorted(r, (size_t)nr, 0.025);
	*hi = mg_quantile_sorted(r, (size_t)nr, 0.975);
	free(tmp);
	free(r);
	if (nr == 0)
		return -1;
	return *lo > 1.0 || *hi < 1.0;
}
