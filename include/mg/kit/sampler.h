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

/* Steps of an epoch of n samples when a step consumes `global` samples. */
int64_t mg_sampler_steps(int64_t n, int64_t global, bool drop_last);
/*
 * Step `step` of an epoch takes `global` = world x per_rank consecutive
 * samples of the epoch's order; rank r's share is the r-th block of
 * per_rank. Writes the blocks of ranks [first, first + count) to out and
 * returns the block size: per_rank, or less for the last batch of an
 * epoch without drop_last, which is padded to an equal block per rank by
 * wrapping around the order (PyTorch's DistributedSampler pads likewise).
 * -1 on error.
 */
int64_t mg_sampler_blocks(struct mg_sampler *s, int64_t n, int64_t per_rank,
			  int world, int64_t epoch, int64_t step, int first,
			  int count, int64_t *out, int64_t cap);

/* A plan in which rank `rank` of `world` reads and computes its own block
 * of every global batch (ddp_ds, fsdp, offload). */
int mg_sampler_plan_own(struct mg_sampler *s, int world, int rank, int64_t n,
			int64_t batch, int64_t epoch, int64_t step,
			struct mg_plan *p);

#endif
