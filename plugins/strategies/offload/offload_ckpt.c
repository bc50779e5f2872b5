/*
 * offload_ckpt.c - checkpoints of the offload strategy as full, named
 * tensors (ckpt.h): host shards gathered over the ranks through device
 * staging (collectives move device buffers), so a checkpoint loads into
 * any rank count or strategy; on load every rank keeps its shard on the
 * host and the full parameters on the device.
 */
#include "mg/kit/shard_ckpt.h"
#include "offload.h"

/* Host shard of `what` (0: parameters, 1+: optimizer slot) of flat f. */
static void *shard_of(void *self, const struct mg_flat *f, int what)
{
	struct offload *d = self;
	if (what == 0)
		return off_host(&d->h_master, f->master_off, d->master);
	return off_host(&d->h_state[what - 1], f->train_off, d->master);
}

/* Load: the device holds the full parameters of every flat. */
static int loaded(void *self, int k, int what, const void *full)
{
	return what == 0 ? off_upload_full(self, k, full) : 0;
}

/* The walk over flats is shared with fsdp (common/shard_ckpt.c). */
static struct mg_shard_ckpt shard_ckpt(struct offload *d)
{
	return (struct mg_shard_ckpt){
		.L = &d->L,
		.ctx = d->ctx,
		.master = d->master,
		.nslots = d->nslots_state,
		.group = d->world,
		.srank = d->srank,
		.comm = d->ctx->comm,
		.host = true,
		.buffers = d->buffers.ptr,
		.shard = shard_of,
		.loaded = loaded,
		.self = d,
	};
}

int off_save(void *self, struct mg_ckpt *ck)
{
	struct offload *d = self;
	/* The last step's host optimizer may still be queued on the device. */
	int rc = mg_device_sync(d->ctx);
	if (!rc && d->host_error)
		rc = mg_error("host optimizer: %s", d->host_msg);
	struct mg_shard_ckpt s = shard_ckpt(d);
	if (!rc)
		rc = mg_shard_ckpt_save(&s, ck);
	return rc ? mg_error_prefix("offload: checkpoint") : 0;
}

int off_load(void *self, struct mg_ckpt *ck)
{
	struct offload *d = self;
	struct mg_shard_ckpt s = shard_ckpt(d);
	if (mg_shard_ckpt_load(&s, ck))
		return mg_error_prefix("offload: resume");
	/* The lp copies follow the loaded master weights. */
	off_refresh_host_lp(d);
	return 0;
}
