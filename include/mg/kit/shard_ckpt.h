/*
 * shard_ckpt.h - checkpoints of sharded flat state (parameters and
 * optimizer slots) as full, named tensors (ckpt.h), for fsdp and offload.
 *
 * Both strategies keep each flat's master weights and optimizer slots cut
 * into shards over a group of ranks - fsdp on the device, offload in host
 * memory - and checkpoint them the same way: save gathers every shard to a
 * full flat and lets mg_flat_ckpt_flat write it, load reads the full flat
 * and keeps this rank's shard. One copy of that walk, so the two stay
 * interchangeable (a checkpoint of one loads into the other or into any
 * rank count); where the shards live and what follows a load are the
 * strategy's, through the fields below.
 */
#ifndef MG_KIT_SHARD_CKPT_H
#define MG_KIT_SHARD_CKPT_H

#include <stdbool.h>

#include "mg/kit/flat.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_shard_ckpt {
	const struct mg_flat_layout *L;
	struct mg_ctx *ctx;
	enum mg_dtype master;
	int nslots;	      /* optimizer slots per trained flat */
	int group;	      /* ranks the shards are spread over */
	int srank;	      /* this rank's shard index */
	struct mg_comm *comm; /* gathers the shards (group > 1) */
	bool host;	      /* shards in host memory (else device) */
	void *buffers;	      /* the replicated buffers (on the device) */
	/* The shard of `what` (0: parameters, 1+: optimizer slot what-1) of
	 * flat f. */
	void *(*shard)(void *self, const struct mg_flat *f, int what);
	/* Load, optional: after flat k's `what` was placed, with the full
	 * flat on the host. */
	int (*loaded)(void *self, int k, int what, const void *full);
	void *self;
};

/* -1 after mg_error(); the caller adds its prefix. */
int mg_shard_ckpt_save(const struct mg_shard_ckpt *s, struct mg_ckpt *ck);
int mg_shard_ckpt_load(const struct mg_shard_ckpt *s, struct mg_ckpt *ck);

#ifdef __cplusplus
}
#endif
#endif
