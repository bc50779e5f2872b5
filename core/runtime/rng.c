/*
 * rng.c - normal variates and epoch permutations from the counter-based
 * generator in rng.h.
 */
#include <math.h>

#include "runtime/runtime.h"

double mg_rng_normal(uint64_t key, uint64_t counter)
{
	/* Box-Muller on two independent uniforms; u1 in (0, 1]. */
	double u1 = 1.0 - mg_rng_uniform(key, 2 * counter);
	double u2 = mg_rng_uniform(key, 2 * counter + 1);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void mg_rng_permutation(uint64_t key, int64_t n, int64_t *out)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = i;
	for (int64_t i = n - 1; i > 0; i--) {
		/* Unbiased enough for n << 2^64: modulo bias < n / 2^64. */
		int64_t j = (int64_t)(mg_rng_u64(key, (uint64_t)i) %
				      (uint64_t)(i + 1));
		int64_t t = out[i];
		out[i] = out[j];
		out[j] = t;
	}
}
