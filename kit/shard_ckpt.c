/*
 * shard_ckpt.c - checkpoints of sharded flat state (shard_ckpt.h).
 */
#include "mg/kit/shard_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checkpoint name kind of `what`: "param" or "optim/<slot>". */
static void kind_of(const struct mg_shard_ckpt *s, int what, char *kind,
		    size_t kn)
{
	if (what == 0)
		snprintf(kind, kn, "param");
	else
		snprintf(kind, kn, "optim/%s",
			 mg_optim_slot_name(s->ctx->optim, what - 1));
}

int mg_shard_ckpt_save(const struct mg_shard_ckpt *s, struct mg_ckpt *ck)
{
	const struct mg_flat_layout *L = s->L;
	const size_t ms = mg_dtype_size(s->master);
	const size_t cap = (size_t)L->max_flat * ms + 1;
	const enum mg_device_kind dev = s->ctx->dev->kind;
	/* Collectives move device buffers: host shards are staged in mine. */
	struct mg_buf mine = {0}, full = {0};
	int rc = 0;
	if (s->group > 1 &&
	    ((s->host && mg_buf_alloc(s->ctx, &mine, cap, MG_MEM_OTHER)) ||
	     mg_buf_alloc(s->ctx, &full, cap, MG_MEM_OTHER)))
		rc = -1;
	for (int k = 0; k < L->nflats && !rc; k++) {
		const struct mg_flat *f = &L->flats[k];
		/* Frozen flats are re-created from the model's source. */
		if (!f->train)
			continue;
		int nwhat = 1 + s->nslots;
		for (int w = 0; w < nwhat && !rc; w++) {
			char kind[64];
			kind_of(s, w, kind, sizeof kind);
			void *src = s->shard(s->self, f, w);
			if (s->group == 1) { /* the shard is the whole flat */
				rc = mg_flat_ckpt_flat(
					L, k, kind, src,
					s->host ? MG_DEV_CPU : dev, ck, true);
				continue;
			}
			if (s->host) {
				rc = mg_copy_h2d(s->ctx, mine.ptr, src,
						 (size_t)f->shard * ms);
				src = mine.ptr;
			}
			rc = rc ||
			     s->comm->all_gather(s->comm, src, full.ptr,
						 f->shard, s->master) ||
			     s->comm->wait(s->comm);
			if (!rc)
				rc = mg_flat_ckpt_flat(L, k, kind, full.ptr,
						       dev, ck, true);
		}
	}
	if (!rc)
		rc = mg_flat_ckpt_buffers(L, s->buffers, dev, ck, true);
	mg_buf_free(s->ctx, &mine);
	mg_buf_free(s->ctx, &full);
	return rc ? -1 : 0;
}

int mg_shard_ckpt_load(const struct mg_shard_ckpt *s, struct mg_ckpt *ck)
{
	const struct mg_flat_layout *L = s->L;
	const size_t ms = mg_dtype_size(s->master);
	char *full = malloc((size_t)L->max_flat * ms + 1);
	int rc = full ? 0 : mg_error("out of memory");
	for (int k = 0; k < L->nflats && !rc; k++) {
		const struct mg_flat *f = &L->flats[k];
		/* Frozen flats are re-created from the model's source. */
		if (!f->train)
			continue;
		int nwhat = 1 + s->nslots;
		for (int w = 0; w < nwhat && !rc; w++) {
			char kind[64];
			kind_of(s, w, kind, sizeof kind);
			void *dst = s->shard(s->self, f, w);
			const size_t n = (size_t)f->shard * ms;
			const char *mine = full + (size_t)s->srank * n;
			memset(full, 0, (size_t)(f->shard * L->group) * ms);
			rc = mg_flat_ckpt_flat(L, k, kind, full, MG_DEV_CPU, ck,
					       false);
			if (rc)
				break;
			if (s->host)
				memcpy(dst, mine, n);
			else
				rc = mg_copy_h2d(s->ctx, dst, mine, n);
			if (!rc && s->loaded)
				rc = s->loaded(s->self, k, w, full);
		}
	}
	free(full);
	if (!rc)
		rc = mg_flat_ckpt_buffers(L, s->buffers, s->ctx->dev->kind, ck,
					  false);
	return rc ? -1 : 0;
}
