/*
 * sampler.c - per-epoch shuffled order, a pure function of (seed, epoch).
 */
#include <stdlib.h>

#include "mg/kit/sampler.h"

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
			mg_rng_key(s->seed, MG_SAMPLER_KEY + (uint64_t)epoch),
			n, p);
	} else {
		for (int64_t i = 0; i < n; i++)
			p[i] = i;
	}
	s->n = n;
	s->epoch = epoch;
	return p;
}

int64_t mg_sampler_steps(int64_t n, int64_t global, bool drop_last)
{
	return drop_last ? n / global : (n + global - 1) / global;
}

int64_t mg_sampler_blocks(struct mg_sampler *s, int64_t n, int64_t per_rank,
			  int world, int64_t epoch, int64_t step, int first,
			  int count, int64_t *out, int64_t cap)
{
	const int64_t *order = mg_sampler_order(s, n, epoch);
	if (!order)
		return -1;
	const int64_t global = per_rank * world, begin = step * global;
	const int64_t avail = n - begin;
	if (step < 0 || avail <= 0)
		return mg_error("step %lld of epoch %lld is outside the epoch",
				(long long)step, (long long)epoch);
	int64_t c = avail >= global ? per_rank : (avail + world - 1) / world;
	if ((int64_t)count * c > cap)
		return mg_error("plan needs %lld samples, the input holds "
				"%lld",
				(long long)count * c, (long long)cap);
	for (int r = 0; r < count; r++)
		for (int64_t k = 0; k < c; k++)
			out[r * c + k] =
				order[(begin + (first + r) * c + k) % n];
	return c;
}

int mg_sampler_plan_own(struct mg_sampler *s, int world, int rank, int64_t n,
			int64_t batch, int64_t epoch, int64_t step,
			struct mg_plan *p)
{
	int64_t c = mg_sampler_blocks(s, n, batch, world, epoch, step, rank, 1,
				      p->read_idx, p->read_cap);
	if (c < 0)
		return -1;
	p->n_read = c;
	p->compute_begin = 0;
	p->compute_count = c;
	p->global_count = world * c;
	p->global_offset = rank * c;
	return 0;
}
