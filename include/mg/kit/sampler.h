/*
 * sampler.h - the epoch order shared by all ranks (same seed, same
 * order), cached per epoch, and the blocks of it each rank takes.
 *
 * The order of epoch e over n samples is a pure function of (seed, e):
 * mg_rng_permutation(mg_rng_key(seed, MG_SAMPLER_KEY + e), n) when
 * shuffling, else 0..n-1. A strategy that wants the order ddp_ds, fsdp
 * and offload see must take it from here, not from its own key.
 */
#ifndef MG_KIT_SAMPLER_H
#define MG_KIT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

/* The shuffle key's offset: "SHUFF" in ASCII. */
#define MG_SAMPLER_KEY 0x5348554646ull

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * samples of the epoch's order, [step x global, (step + 1) x global);
 * rank r's share is the r-th block of per_rank. Writes the blocks of
 * ranks [first, first + count) to out (cap entries at most) and returns
 * the block size c.
 *
 * Last-batch padding: when only a < global samples remain (the last step
 * of an epoch without drop_last), c = ceil(a / world) for every rank and
 * positions past the end wrap around to the start of the order, so all
 * ranks compute c samples and a few count twice (PyTorch's
 * DistributedSampler pads likewise). -1 on error (step outside the
 * epoch, out too small).
 */
int64_t mg_sampler_blocks(struct mg_sampler *s, int64_t n, int64_t per_rank,
			  int world, int64_t epoch, int64_t step, int first,
			  int count, int64_t *out, int64_t cap);

/*
 * The own-block plan (ddp_ds, fsdp, offload): rank `rank` of `world`
 * reads and computes its own block of every global batch, c samples:
 * n_read = compute_count = c, compute_begin = 0, global_count = world x c
 * (the loss divides by it), global_offset = rank x c. p->read_idx and
 * p->read_cap are the core's; everything else is filled.
 */
int mg_sampler_plan_own(struct mg_sampler *s, int world, int rank, int64_t n,
			int64_t batch, int64_t epoch, int64_t step,
			struct mg_plan *p);

#ifdef __cplusplus
}
#endif
#endif /* MG_KIT_SAMPLER_H */
