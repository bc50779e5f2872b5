/*
 * sampler.c - per-epoch shuffled order, a pure function of (seed, epoch).
 */
#include <stdlib.h>

#include "sampler.h"

void mg_sampler_init(struct mg_sampler *s, uint64_t seed, bool shuffle)
{
	s->seed = seed;
	s->shuffle = shuffle;
	s->n = 0;
	s->epoch = -1;
	s->perm = NULL;
}

void mg_sampler_free(struct mg_sampler *s)
{
	free(s->perm);
	s->perm = NULL;
}

const int64_t *mg_sampler_order(struct mg_sampler *s, int64_t n, int64_t epoch)
{
	if (s->perm && s->n == n && s->epoch == epoch)
		return s->perm;
	int64_t *p = realloc(s->perm, (size_t)(n ? n : 1) * sizeof *p);
	if (!p) {
		mg_error("sampler: out of memory for %lld indices",
			 (long long)n);
		return NULL;
	}
	s->perm = p;
	if (s->shuffle) {
		mg_rng_permutation(
			mg_rng_key(s->seed, 0x5348554646ull + (uint64_t)epoch),
			n, p);
	} else {
		for (int64_t i = 0; i < n; i++)
			p[i] = i;
	}
	s->n = n;
	s->epoch = epoch;
	return p;
}
