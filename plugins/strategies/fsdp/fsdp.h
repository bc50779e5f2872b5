/*
 * fsdp.h - fully sharded data parallel: the state the fsdp plugin's files
 * share (fsdp.c: plugin, setup, sampler, optimizer step; fsdp_exec.c: the
 * gather / reduce pipeline behind acquire and release; fsdp_ckpt.c:
 * checkpoints of full tensors).
 *
 * Shard modes, as PyTorch names them:
 *   full    FULL_SHARD     parameters, gradients and optimizer state
 *                          sharded over all ranks; a unit's parameters
 *                          gathered before forward, freed after, gathered
 *                          again for backward
 *   grad_op SHARD_GRAD_OP  the same, but parameters gathered in forward
 *                          stay until the unit's backward is done
 *   none    NO_SHARD       full replicas, gradients all-reduced per unit
 *   hybrid  HYBRID_SHARD   full sharding inside groups of
 *                          shard_group_size ranks, gradient shards
 *                          all-reduced across the groups
 * All four are one engine: shards over a group of G ranks (G = world,
 * world, 1, shard_group_size) and gradient shards all-reduced over the
 * world / G replicas.
 *
 * Gradient accumulation (run.grad_accum = K, ctx->micro of micro_count),
 * two ways, chosen by what the mode already keeps unsharded:
 *   scatter  full, hybrid (G > 1): every micro-batch's unit gradients are
 *            reduce-scattered as in a step without accumulation and summed
 *            into the gradient shard (the first contribution lands there,
 *            later ones in a shard-sized scratch after the unit's gradient
 *            slot, then added), so no full gradient outlives its unit's
 *            backward: memory stays 1/G. Hybrid all-reduces the summed
 *            shard across replica groups once, after the last micro-batch.
 *   no_sync  grad_op, and any mode with G = 1 (none): the unit's full
 *            gradient stays in its slot (or, G = 1 without a dtype change,
 *            in the shard itself) across micro-batches and is reduced once,
 *            after the last, as PyTorch's no_sync(): K times fewer
 *            reductions, for one full gradient per unit, which is what
 *            grad_op trades memory for anyway (and none holds regardless).
 * Each micro-batch's reductions are finished when the next one starts (its
 * first acquire), as PyTorch FSDP waits for them at the end of backward.
 *
 * update_in_backward (torchtune's optimizer_in_bwd): a unit's optimizer
 * update runs as soon as its gradient shard is final (fsdp_update_unit),
 * while backward goes on with the units before it, instead of all of
 * them after backward. With shards over G > 1 ranks and no accumulation
 * the shard then lives only from the unit's reduce-scatter to its update,
 * in a pooled slot (uslots), so the whole gradient shard (gshard, 4 bytes
 * a parameter / G with fp32 reductions) is never held, as PyTorch frees
 * gradients between steps. Clipping needs the norm of every gradient
 * before the first update, so it is refused, as is fp16 (loss scaling
 * skips steps); a step whose gradients are not finite is applied, and the
 * next step's loss stops the run.
 */
#ifndef MG_FSDP_H
#define MG_FSDP_H

#include "mg/kit/flat.h"
#include "mg/kit/sampler.h"
#include "mg/mg.h"

enum fsdp_mode { FSDP_FULL = 0, FSDP_GRAD_OP, FSDP_NONE, FSDP_HYBRID };

/* Where a unit's gradients are in this step's reduction. */
enum fsdp_gstate {
	G_IDLE = 0, /* not ready yet */
	G_READY,    /* backward done: reduce-scatter not issued */
	G_SCATTER,  /* reduce-scatter issued (epoch in gepoch) */
	G_REPLICA,  /* hybrid: all-reduce across replicas issued */
	G_DONE,	    /* gradient shard final (for this micro-batch) */
	G_HELD,	    /* no_sync: reported in this micro-batch, not reduced */
};

struct fsdp_unit {
	int slot;	     /* gather slot with its full parameters, -1 */
	bool gathered;	     /* an all-gather into slot was issued */
	int gslot;	     /* gradient slot while backward runs, -1 */
	enum fsdp_gstate gs; /* this step */
	int64_t gepoch;	     /* wait epoch its last collective was issued in */
	bool acc;	     /* scatter path: the gradient shard holds part of
				this step's sum (later micro-batches add) */
	bool scratch;	     /* the reduce-scatter in flight lands in the
				scratch: add it to the shard when done */
	int uslot;	     /* pooled: its gradient shard's slot, -1 */
	bool frozen_held;    /* dedicated slot (grad_op): its frozen flats
				were gathered there and never change, so
				later gathers skip them */
};

/* A transient buffer for one unit's full parameters or gradients. */
struct fsdp_slot {
	struct mg_buf buf;
	int owner; /* unit, -1 when free */
};

/* Units in the order the model used them, learned in the first steps,
 * so the next unit's all-gather can start early. */
struct fsdp_order {
	int *seq;
	int n, cap, cur;
	bool final;
};

struct fsdp {
	struct mg_ctx *ctx;
	struct mg_sampler sampler;
	bool drop_last, reduce_fp32;
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
	struct mg_buf gshard;	  /* gradient shards */
	struct mg_buf state[2];	  /* optimizer state shards */
	struct mg_buf buffers;	  /* MG_P_BUFFER tensors, replicated */
	bool direct_grads;	  /* G = 1, no dtype change: the model
				     accumulates into gshard itself */
	/* Gather and gradient slots. */
	struct fsdp_slot *pslots, *gslots;
	int npslots, ngslots;
	bool dedicated;	 /* grad_op: one parameter slot per unit, kept */
	bool lp_inplace; /* grad_op over G > 1: a flat's lp shard is its
			    own block of the unit's slot (no lp_buf), the
			    all-gather in place */
	struct fsdp_unit *units;
	struct mg_flat_views V;	    /* what acquire() lends */
	struct fsdp_order order[2]; /* forward (and eval), backward */
	int64_t epoch;		    /* waits done this step */
	/* Gradient accumulation (see the top of this file). */
	int accum;	      /* micro-batches a step (ctx->micro_count) */
	bool nosync;	      /* accum > 1, kept unreduced until the last */
	int micro;	      /* the micro-batch the pipeline is in */
	bool final;	      /* this micro-batch's reductions are the step's
				  last (replicas reduce, no_sync units go) */
	size_t gslot_bytes;   /* a pooled gradient slot (scatter path:
				  with the scratch after scratch_base) */
	size_t scratch_base;  /* the scratch's start in a gradient slot */
	size_t *scratch_byte; /* per flat: its shard in the scratch */
	/* update_in_backward (see the top of this file). */
	bool ubw;
	bool pooled; /* G > 1, no accumulation: gradient shards in
				uslots, gshard not allocated */
	struct fsdp_slot *uslots;
	int nuslots;
	size_t uslot_bytes;  /* the largest unit's gradient shards */
	size_t *ushard_byte; /* per flat: its gradient shard in a uslot */
};

/* fsdp.c: device memory that all-gathers read or write: in a window of
 * the shard group's communicator with copy_engine (their gathers then
 * need no SMs), else ordinary. */
int fsdp_alloc_gathered(struct fsdp *d, struct mg_buf *b, size_t bytes,
			enum mg_mem_cat cat);

/* fsdp_exec.c */
int fsdp_exec_init(struct fsdp *d);
void fsdp_exec_free(struct fsdp *d);
/* Every unit back to the start of a step (gathered copies dropped). */
void fsdp_exec_reset(struct fsdp *d);
struct mg_unit_view *fsdp_acquire(void *self, int unit, enum mg_phase ph);
void fsdp_release(void *self, int unit, enum mg_phase ph);
int fsdp_grads_ready(void *self, int unit);
/* Finish every unit's gradient reduction (step start). */
int fsdp_exec_finish(struct fsdp *d);
/* Wait for every collective issued on the shard and replica groups. */
int fsdp_wait_all(struct fsdp *d);

/* fsdp.c: unit u's optimizer update from its final gradient shards
 * (update_in_backward), their sum of squares added to the step's. */
int fsdp_update_unit(struct fsdp *d, int u);

/* fsdp_ckpt.c */
int fsdp_save(void *self, struct mg_ckpt *ck);
int fsdp_load(void *self, struct mg_ckpt *ck);
/* Refresh the compute-dtype shards from the master shards. */
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
		return (char *)d->pslots[f->unit].buf.ptr + f->full_byte +
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

/* Where flat k's gradient shard is this step: in its unit's pooled slot
 * (update_in_backward), else in gshard. */
static inline char *fsdp_gshard(const struct fsdp *d, int u, int k)
{
	if (d->pooled)
		return (char *)d->uslots[d->units[u].uslot].buf.ptr +
		       d->ushard_byte[k];
	return (char *)d->gshard.ptr + d->L.flats[k].gshard_byte;
}

#endif
