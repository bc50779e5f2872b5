/*
 * fsdp.h - fully sharded data parallel: the state the fsdp plugin's files
 * share (fsdp.c: plugin, setup, storage, the pipeline's hooks, sampler,
 * optimizer step; fsdp_ckpt.c: checkpoints of full tensors). The gather /
 * reduce pipeline behind acquire and release is the kit's unit pipeline
 * (mg/kit/unit_pipe.h); the shard modes are its storage policies.
 *
 * Shard modes, as PyTorch names them:
 *   full    FULL_SHARD     parameters, gradients and optimizer state
 *                          sharded over all ranks; a unit's parameters
 *                          gathered before forward, freed after, gathered
 *                          again for backward (MG_UP_SHARD_PARAMS)
 *   grad_op SHARD_GRAD_OP  the same, but parameters gathered in forward
 *                          stay until the unit's backward is done
 *                          (MG_UP_KEEP_GATHERED)
 *   none    NO_SHARD       full replicas, gradients all-reduced per unit
 *                          (group 1, replicas = world)
 *   hybrid  HYBRID_SHARD   full sharding inside groups of
 *                          shard_group_size ranks, gradient shards
 *                          all-reduced across the groups
 * All four are one pipeline: shards over a group of G ranks (G = world,
 * world, 1, shard_group_size) and gradient shards all-reduced over the
 * world / G replicas.
 *
 * Gradient accumulation (run.grad_accum = K): grad_op, and any mode with
 * G = 1, keep full gradients anyway, so they keep them across micro-
 * batches and reduce once (MG_UP_NO_SYNC, as PyTorch's no_sync()); full
 * and hybrid (G > 1) reduce-scatter every micro-batch and sum into the
 * shard, so memory stays 1/G (unit_pipe.h).
 *
 * update_in_backward (torchtune's optimizer_in_bwd): a unit's optimizer
 * update is the pipeline's final action (fsdp_final), run as soon as its
 * gradient shard is final, while backward goes on with the units before
 * it. With shards over G > 1 ranks and no accumulation the shard then
 * lives only from the unit's reduce-scatter to its update
 * (MG_UP_TRANSIENT_GRADS), so the whole gradient shard (4 bytes a
 * parameter / G with fp32 reductions) is never held, as PyTorch frees
 * gradients between steps. Clipping needs the norm of every gradient
 * before the first update, so it is refused, as is fp16 (loss scaling
 * skips steps); a step whose gradients are not finite is applied, and the
 * next step's loss stops the run.
 */
#ifndef MG_FSDP_H
#define MG_FSDP_H

#include "mg/kit/flat.h"
#include "mg/kit/sampler.h"
#include "mg/kit/unit_pipe.h"
#include "mg/mg.h"

enum fsdp_mode { FSDP_FULL = 0, FSDP_GRAD_OP, FSDP_NONE, FSDP_HYBRID };

struct fsdp {
	struct mg_unit_strategy base; /* first: MG_UNIT_STRATEGY_OPS */
	struct mg_ctx *ctx;
	bool reduce_fp32;
	int prefetch; /* units gathered ahead (0: on demand) */
	enum fsdp_mode mode;
	int group;		 /* G: ranks a flat is sharded over */
	int group_opt;		 /* shard_group_size as given (0: a node) */
	int srank;		 /* rank inside the shard group */
	int replicas;		 /* world / G */
	struct mg_comm *sc, *rc; /* shard group, replica group (may be
				    ctx->comm or NULL when of size 1) */
	bool own_sc, own_rc;
	bool copy_engine; /* shards and gather slots in sc's windows */
	enum mg_dtype master, compute;
	const struct mg_model_spec *spec;
	struct mg_flat_layout L;
	int nslots_state;
	/* This rank's storage. */
	struct mg_buf master_buf; /* shards, master dtype */
	struct mg_buf lp_buf;	  /* shards of lp flats, compute dtype */
	struct mg_buf packed_buf; /* shards of packed (NF4) flats, bytes */
	struct mg_buf state[2];	  /* optimizer state shards */
	struct mg_buf buffers;	  /* MG_P_BUFFER tensors, replicated */
	bool lp_inplace; /* grad_op over G > 1: a flat's lp shard is its
			    own block of the unit's gather slot (no lp_buf),
			    the all-gather in place */
	bool ubw;	 /* update_in_backward (see the top of this file) */
};

/* fsdp_ckpt.c */
int fsdp_save(void *self, struct mg_ckpt *ck);
int fsdp_load(void *self, struct mg_ckpt *ck);
/* fsdp.c: refresh the compute-dtype shards from the master shards. */
int fsdp_refresh_lp(struct fsdp *d);

static inline void *fsdp_at(const struct mg_buf *b, int64_t off,
			    enum mg_dtype dt)
{
	return (char *)b->ptr + (size_t)off * mg_dtype_size(dt);
}

/* This rank's compute-dtype copy of lp flat f's shard: in lp_buf, or
 * (lp_inplace) this rank's block of the unit's gather slot, where the
 * all-gather leaves it anyway, so grad_op, which keeps every unit's slot,
 * does not hold it twice. */
static inline char *fsdp_lp(const struct fsdp *d, const struct mg_flat *f)
{
	if (d->lp_inplace)
		return (char *)mg_unit_pipe_slot(&d->base.pipe, f->unit) +
		       f->full_byte +
		       (size_t)d->srank * (size_t)f->shard *
			       mg_dtype_size(f->lent);
	return fsdp_at(&d->lp_buf, f->lp_off, f->lent);
}

/* This rank's shard of flat f's parameters, in its lent dtype: the lp
 * copy, the bytes of a packed (NF4) flat, or the master shard. */
static inline char *fsdp_shard(const struct fsdp *d, const struct mg_flat *f)
{
	if (f->packed)
		return (char *)d->packed_buf.ptr + f->packed_off;
	if (f->lp)
		return fsdp_lp(d, f);
	return fsdp_at(&d->master_buf, f->master_off, d->master);
}

#endif
