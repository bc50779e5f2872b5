/*
 * sampler.h - the epoch permutation shared by all ranks (same seed, same
 * order), cached per epoch.
 */
#ifndef MG_SAMPLER_H
#define MG_SAMPLER_H

#include "mg/mg.h"

struct mg_sampler {
	uint64_t seed;
	bool shuffle;
	int64_t n, epoch; /* what perm holds; epoch -1: nothing yet */
	int64_t *perm;
};

void mg_sampler_init(struct mg_sampler *s, uint64_t seed, bool shuffle);
void mg_sampler_free(struct mg_sampler *s);
/* The order of epoch's samples (n of them); NULL on allocation failure. */
const int64_t *mg_sampler_order(struct mg_sampler *s, int64_t n, int64_t epoch);

#endif
