/*
 * fsdp_ckpt.c - checkpoints of sharded state as full, named tensors (the
 * names every strategy uses, ckpt.h), so a checkpoint written by N ranks
 * of fsdp loads into M ranks, into another shard mode or into ddp_ds.
 * Save gathers each flat parameter (and optimizer slot) over the shard
 * group and lets rank 0 write it; load reads the full tensors on every
 * rank and keeps this rank's shard.
 */
#include "fsdp.h"
#include "mg/kit/shard_ckpt.h"

/* Shard of `what` (0: parameters, 1+: optimizer slot) of flat f, on the
 * device. */
static void *shard_of(void *self, const struct mg_flat *f, int what)
{
	struct fsdp *d = self;
	if (what == 0)
		return fsdp_at(&d->master_buf, f->master_off, d->master);
	return fsdp_at(&d->state[what - 1], f->train_off, d->master);
}

/* The walk over flats is shared with offload (common/shard_ckpt.c). */
static struct mg_shard_ckpt shard_ckpt(struct fsdp *d)
{
	return (struct mg_shard_ckpt){
		.L = &d->L,
		.ctx = d->ctx,
		.master = d->master,
		.nslots = d->nslots_state,
		.group = d->group,
		.srank = d->srank,
		.comm = d->sc,
		.host = false,
		.buffers = d->buffers.ptr,
		.shard = shard_of,
		.self = d,
	};
}

int fsdp_save(void *self, struct mg_ckpt *ck)
{
	struct mg_shard_ckpt s = shard_ckpt(self);
	return mg_shard_ckpt_save(&s, ck) ? mg_error_prefix("fsdp: checkpoint")
					  : 0;
}

int fsdp_load(void *self, struct mg_ckpt *ck)
{
	struct fsdp *d = self;
	struct mg_shard_ckpt s = shard_ckpt(d);
	int rc = mg_shard_ckpt_load(&s, ck);
	/* whatever was loaded, gather every flat again */
	mg_unit_pipe_invalidate(&d->base.pipe);
	if (!rc)
		rc = fsdp_refresh_lp(self);
	return rc ? mg_error_prefix("fsdp: resume") : 0;
}
