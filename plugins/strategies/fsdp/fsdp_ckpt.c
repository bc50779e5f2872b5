/*
 * fsdp_ckpt.c - checkpoints of sharded state as full, named tensors (the
 * names every strategy uses, ckpt.h), so a checkpoint written by N ranks
 * of fsdp loads into M ranks, into another shard mode or into ddp_ds.
 * Save gathers each flat parameter (and optimizer slot) over the shard
 * group and lets rank 0 write it; load reads the full tensors on every
 * rank and keeps this rank's shard.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

/* What a checkpoint holds per flat: the parameters, then each optimizer
 * slot of trained flats. Shard of `what` for flat f, and its name kind. */
static void *shard_of(struct fsdp *d, const struct mg_flat *f, int what,
		      char *kind, size_t kn)
{
	if (what == 0) {
		snprintf(kind, kn, "param");
		return fsdp_at(&d->master_buf, f->master_off, d->master);
	}
	snprintf(kind, kn, "optim/%s",
		 mg_optim_slot_name(d->ctx->optim, what - 1));
	return fsdp_at(&d->state[what - 1], f->train_off, d->master);
}

int fsdp_save(void *self, struct mg_ckpt *ck)
{
	struct fsdp *d = self;
	const struct mg_flat_layout *L = &d->L;
	const size_t ms = mg_dtype_size(d->master);
	struct mg_buf full = {0};
	int rc = 0;
	if (d->group > 1 &&
	    mg_buf_alloc(d->ctx, &full, (size_t)L->max_flat * ms + 1,
			 MG_MEM_OTHER))
		return mg_error_prefix("fsdp: checkpoint");
	for (int k = 0; k < L->nflats && !rc; k++) {
		const struct mg_flat *f = &L->flats[k];
		int nwhat = 1 + (f->train ? d->nslots_state : 0);
		for (int w = 0; w < nwhat && !rc; w++) {
			char kind[64];
			void *src = shard_of(d, f, w, kind, sizeof kind);
			void *base = src;
			if (d->group > 1) {
				base = full.ptr;
				rc = d->sc->all_gather(d->sc, src, base,
						       f->shard, d->master) ||
				     d->sc->wait(d->sc);
			}
			if (!rc)
				rc = mg_flat_ckpt_flat(&d->L, k, kind, base,
						       d->ctx->dev->kind, ck,
						       true);
		}
	}
	if (!rc)
		rc = mg_flat_ckpt_buffers(&d->L, d->buffers.ptr,
					  d->ctx->dev->kind, ck, true);
	mg_buf_free(d->ctx, &full);
	return rc ? mg_error_prefix("fsdp: checkpoint") : 0;
}

int fsdp_load(void *self, struct mg_ckpt *ck)
{
	struct fsdp *d = self;
	const struct mg_flat_layout *L = &d->L;
	const size_t ms = mg_dtype_size(d->master);
	char *full = malloc((size_t)L->max_flat * ms + 1);
	int rc = full ? 0 : mg_error("out of memory");
	for (int k = 0; k < L->nflats && !rc; k++) {
		const struct mg_flat *f = &L->flats[k];
		int nwhat = 1 + (f->train ? d->nslots_state : 0);
		for (int w = 0; w < nwhat && !rc; w++) {
			char kind[64];
			void *dst = shard_of(d, f, w, kind, sizeof kind);
			memset(full, 0, (size_t)(f->shard * L->group) * ms);
			rc = mg_flat_ckpt_flat(&d->L, k, kind, full, MG_DEV_CPU,
					       ck, false);
			if (!rc)
				rc = mg_copy_h2d(
					d->ctx, dst,
					full + (size_t)(d->srank * f->shard) *
							ms,
					(size_t)f->shard * ms);
		}
	}
	free(full);
	if (!rc)
		rc = mg_flat_ckpt_buffers(&d->L, d->buffers.ptr,
					  d->ctx->dev->kind, ck, false);
	if (!rc)
		rc = fsdp_refresh_lp(d);
	return rc ? mg_error_prefix("fsdp: resume") : 0;
}
