/*
 * offload_ckpt.c - checkpoints of the offload strategy as full, named
 * tensors (ckpt.h): host shards gathered over the ranks through device
 * staging (collectives move device buffers), so a checkpoint loads into
 * any rank count or strategy; on load every rank keeps its shard on the
 * host and the full parameters on the device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"

/* Host shard of `what` (0: parameters, 1+: optimizer slot) of flat f, and
 * its checkpoint name kind. */
static char *shard_of(struct offload *d, const struct mg_flat *f, int what,
		      char *kind, size_t kn)
{
	if (what == 0) {
		snprintf(kind, kn, "param");
		return off_host(&d->h_master, f->master_off, d->master);
	}
	snprintf(kind, kn, "optim/%s",
		 mg_optim_slot_name(d->ctx->optim, what - 1));
	return off_host(&d->h_state[what - 1], f->train_off, d->master);
}

int off_save(void *self, struct mg_ckpt *ck)
{
	struct offload *d = self;
	const struct mg_flat_layout *L = &d->L;
	const size_t ms = mg_dtype_size(d->master);
	struct mg_buf mine = {0}, full = {0};
	/* The last step's host optimizer may still be queued on the device. */
	int rc = mg_device_sync(d->ctx);
	if (!rc && d->host_error)
		rc = mg_error("host optimizer: %s", d->host_msg);
	if (!rc && (mg_buf_alloc(d->ctx, &mine, (size_t)L->max_flat * ms + 1,
				 MG_MEM_OTHER) ||
		    mg_buf_alloc(d->ctx, &full, (size_t)L->max_flat * ms + 1,
				 MG_MEM_OTHER)))
		rc = -1;
	struct mg_comm *c = d->ctx->comm;
	for (int k = 0; k < L->nflats && !rc; k++) {
		const struct mg_flat *f = &L->flats[k];
		int nwhat = 1 + (f->train ? d->nslots_state : 0);
		for (int w = 0; w < nwhat && !rc; w++) {
			char kind[64];
			char *src = shard_of(d, f, w, kind, sizeof kind);
			if (d->world == 1) { /* the shard is the whole flat */
				rc = mg_flat_ckpt_flat(&d->L, k, kind, src,
						       MG_DEV_CPU, ck, true);
				continue;
			}
			rc = mg_copy_h2d(d->ctx, mine.ptr, src,
					 (size_t)f->shard * ms) ||
			     c->all_gather(c, mine.ptr, full.ptr, f->shard,
					   d->master) ||
			     c->wait(c);
			if (!rc)
				rc = mg_flat_ckpt_flat(&d->L, k, kind, full.ptr,
						       d->ctx->dev->kind, ck,
						       true);
		}
	}
	if (!rc)
		rc = mg_flat_ckpt_buffers(&d->L, d->buffers.ptr,
					  d->ctx->dev->kind, ck, true);
	mg_buf_free(d->ctx, &mine);
	mg_buf_free(d->ctx, &full);
	return rc ? mg_error_prefix("offload: checkpoint") : 0;
}

int off_load(void *self, struct mg_ckpt *ck)
{
	struct offload *d = self;
	const struct mg_flat_layout *L = &d->L;
	const size_t ms = mg_dtype_size(d->master);
	char *full = malloc((size_t)L->max_flat * ms + 1);
	int rc = full ? 0 : mg_error("out of memory");
	for (int k = 0; k < L->nflats && !rc; k++) {
		const struct mg_flat *f = &L->flats[k];
		int nwhat = 1 + (f->train ? d->nslots_state : 0);
		for (int w = 0; w < nwhat && !rc; w++) {
			char kind[64];
			char *dst = shard_of(d, f, w, kind, sizeof kind);
			memset(full, 0, (size_t)(f->shard * L->group) * ms);
			rc = mg_flat_ckpt_flat(&d->L, k, kind, full, MG_DEV_CPU,
					       ck, false);
			if (rc)
				break;
			memcpy(dst, full + (size_t)(d->srank * f->shard) * ms,
			       (size_t)f->shard * ms);
			if (w == 0)
				rc = off_upload_full(d, k, full);
		}
	}
	free(full);
	if (!rc)
		rc = mg_flat_ckpt_buffers(&d->L, d->buffers.ptr,
					  d->ctx->dev->kind, ck, false);
	if (rc)
		return mg_error_prefix("offload: resume");
	/* The lp copies follow the loaded master weights. */
	off_refresh_host_lp(d);
	return 0;
}
