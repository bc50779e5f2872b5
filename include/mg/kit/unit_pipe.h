/*
 * unit_pipe.h - the unit-by-unit gradient pipeline of sharded strategies
 * (kit 1.5): what runs behind a strategy's acquire / release /
 * grads_ready, so that a strategy chooses where state lives (policies)
 * and what happens to a unit's final gradient (hooks), and nothing else.
 * fsdp (its four shard modes) and offload are this pipeline with
 * different policies and hooks; so are ZeRO-1/2/3 (examples/zero).
 *
 * What the pipeline does, per unit (a model's unit: a layer, a block):
 *   - before use: gathers the unit's full parameters from every rank's
 *     shard into a gather slot (policy MG_UP_SHARD_PARAMS), the next
 *     units' gathers started early in the order learned in the first
 *     steps (prefetch depth); or lends them where the strategy keeps them
 *     whole (resident parameters: replicated, or offload's full copy);
 *   - in backward: lends zeroed full gradients in a transient gradient
 *     slot; when the model reports them ready (grads_ready), converts
 *     them to the reduce dtype, then reduces them while backward goes on:
 *     reduce-scatter over the shard group into this rank's gradient shard
 *     (group > 1), all-reduce of the shard over the replica groups
 *     (replicas > 1), each stage issued at the next acquire after a wait
 *     (so it overlaps the next unit's compute);
 *   - micro-batches (ctx->micro_count > 1): either every micro-batch's
 *     gradients are reduced and summed into the shard (the first
 *     contribution lands there, later ones in a scratch and are added:
 *     memory stays a shard), or, with MG_UP_NO_SYNC, the full gradient
 *     stays in its slot and is reduced once after the last (PyTorch's
 *     no_sync); the replica all-reduce runs once, after the last;
 *   - the final action: when a unit's gradient shard is final for the
 *     step, the `final` hook runs (an optimizer update on the device, a
 *     copy to the host and a host update, anything);
 *   - the flush (mg_unit_pipe_finish, at the start of step()): units the
 *     model never reported are reduced (or their shard zeroed, the same
 *     on every rank, if backward never reached them), every stage waited
 *     for, so every trained unit's gradient shard is final.
 *
 * Storage policies (flags of mg_unit_pipe_cfg), in the combinations:
 *   replicated (DDP by units)           group 1, replicas = world
 *   replicated gradients (ZeRO-1)       group > 1, MG_UP_WHOLE_GRADS
 *   sharded gradients (ZeRO-2)          group > 1, resident parameters
 *   sharded parameters (ZeRO-3, fsdp)   group > 1, MG_UP_SHARD_PARAMS
 *   hybrid (fsdp hybrid)                1 < group < world, replicas > 1
 *   sharded optimizer state             the strategy's: it updates the
 *                                       slices mg_flat_slices gives for
 *                                       its shard (any of the above)
 *   host-resident master / optimizer    the strategy's: its final hook
 *                                       copies the gradient shard out
 *                                       and returns MG_UP_ASYNC (offload)
 *
 * Layout and dtypes (flat.h has the flat layout):
 *   - the gradient slot of unit u holds, for each trained flat f at
 *     f->gfull_byte, the full padded gradient in the lent dtype (what the
 *     model accumulates into), followed, when gradients are reduced in
 *     the master dtype (f->grad != f->lent: mg_flat_build's
 *     reduce_master), by its copy converted to f->grad at the next
 *     256-byte boundary: that copy is what is reduced;
 *   - a gradient shard (mg_unit_pipe_gshard) is f->shard elements of
 *     f->grad, this rank's block [srank x shard, (srank + 1) x shard) of
 *     the flat, gaps zero; the summed (not averaged) gradient: the
 *     optimizer divides by the global batch (mg_optim_finalize);
 *   - the kept gradient shard buffer (gshard) has the layout's
 *     gshard_byte offsets: the flats reduced in the lent dtype first
 *     (gshard_lent_bytes), then those reduced in the master dtype, so
 *     mg_unit_pipe_sumsq takes the norm in two calls.
 *
 * Collectives in place: the pipeline's all-gather sends from the shard
 * the `params` hook returns into the slot (out of place, unless the
 * strategy's shard is its own block of the slot, MG_UP_SLOTS_AT_INIT,
 * which every backend accepts: the send is the receive buffer's block
 * srank); reduce-scatter runs out of place (full gradient in the slot,
 * shard elsewhere); the replica all-reduce runs in place on the shard.
 *
 * Zero-byte buffers: the kit allocates every slot and shard buffer with
 * at least one byte (`bytes ? bytes : 1`, `bytes + 1`), so a unit or a
 * layout with nothing of a kind (no buffers, no trained flat) still has
 * an address: mg_buf_alloc(0) may give NULL on a GPU (cudaMalloc(0)),
 * which the kit reads as "not allocated" and collectives refuse. The
 * byte is accounted in the buffer's memory category (the +1 in reports).
 *
 * Streams: everything is issued on the compute stream or the
 * communicators' streams, never waited on the host, so a step can be
 * captured as one CUDA graph; the `wait` hook adds the strategy's own
 * streams (offload's side-stream copies) to the pipeline's waits.
 */
#ifndef MG_KIT_UNIT_PIPE_H
#define MG_KIT_UNIT_PIPE_H

#include "mg/kit/flat.h"
#include "mg/kit/sampler.h"
#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage policies (mg_unit_pipe_cfg.flags). */
enum {
	/* Parameters sharded over the shard group and all-gathered into a
	 * gather slot before each use (ZeRO-3, fsdp full / grad_op /
	 * hybrid); the slot is dropped at release. Without it parameters
	 * are resident: the `params` hook gives each flat's full values. */
	MG_UP_SHARD_PARAMS = 1u << 0,
	/* With MG_UP_SHARD_PARAMS: a unit's gathered parameters stay from
	 * forward to backward, in a slot of its own (fsdp grad_op); frozen
	 * flats gathered there once are not gathered again until
	 * mg_unit_pipe_invalidate. */
	MG_UP_KEEP_GATHERED = 1u << 1,
	/* With MG_UP_KEEP_GATHERED: every unit's slot allocated by
	 * mg_unit_pipe_init, so the strategy may keep its own shard as its
	 * block of the slot (mg_unit_pipe_slot) and gather in place. */
	MG_UP_SLOTS_AT_INIT = 1u << 2,
	/* Micro-batches: full gradients kept in their slot (or, direct,
	 * in the shard) and reduced once, after the last micro-batch. */
	MG_UP_NO_SYNC = 1u << 3,
	/* Group 1, no dtype change: the model accumulates straight into
	 * the kept gradient shard (which is then the full gradient); no
	 * gradient slots. mg_unit_pipe_init refuses it elsewhere. */
	MG_UP_DIRECT_GRADS = 1u << 4,
	/* No kept gradient shard buffer: a unit's shard lives from its
	 * reduction to its final action only (pooled, as large as the
	 * largest unit's; with group 1 the slot's reduced gradient itself)
	 * and is gone after the final hook (update_in_backward, or a shard
	 * copied out at once). Needs no micro-batches. */
	MG_UP_TRANSIENT_GRADS = 1u << 5,
	/* Group > 1 (ZeRO-1): gradients are all-reduced whole over the shard
	 * group instead of reduce-scattered, and kept whole all step (one
	 * slot per unit, memory category grads), reduced once after the
	 * last micro-batch (implies MG_UP_NO_SYNC); a unit's gradient shard
	 * is this rank's block of its whole gradient. */
	MG_UP_WHOLE_GRADS = 1u << 6,
};

/* What the final hook returns besides 0 and -1. */
#define MG_UP_ASYNC 1

struct mg_unit_pipe;

/* The reductions the reduce hook is asked for. */
enum mg_up_reduce {
	/* Sum the full gradient `src` (group x n elements, in the slot)
	 * over the shard group into this rank's shard `dst` (n). */
	MG_UP_REDUCE_SCATTER = 0,
	/* Sum the shard `dst` (n elements) over the replica groups, in
	 * place (src == dst). */
	MG_UP_ALL_REDUCE,
	/* MG_UP_WHOLE_GRADS: sum the full gradient (group x n elements, in
	 * the slot) over the shard group, in place (src == dst). */
	MG_UP_ALL_REDUCE_WHOLE,
};

/*
 * What a strategy plugs in. self: the strategy's state, passed to each.
 * Every hook returns 0, or -1 with the error set (mg_error); all run on
 * the issuing thread, inside the strategy's acquire, grads_ready or
 * step, so they may issue device work and collectives but never wait on
 * the host (the step may be a graph).
 */
struct mg_unit_hooks {
	/* Required. Where flat k's parameters are, in its lent dtype on the
	 * device: with MG_UP_SHARD_PARAMS this rank's shard (f->shard
	 * elements, the all-gather's source), else the full padded flat
	 * (f->shard x group elements: resident). Packed (NF4) flats: bytes
	 * (flat.h). */
	void *(*params)(void *self, int k);
	/* Optional (NULL: mg_unit_pipe_gather_flat). Issue the all-gather of
	 * flat k of unit u into `dst` (its place in the gather slot), on the
	 * shard group; asynchronous, completed by the pipeline's next wait. */
	int (*gather)(void *self, struct mg_unit_pipe *P, int u, int k,
		      void *dst);
	/* Optional (NULL: mg_unit_pipe_reduce_flat). Issue one reduction of
	 * flat k of unit u (n elements of f->grad, summed: see enum
	 * mg_up_reduce); asynchronous, completed by the next wait. A
	 * compression hook converts here and keeps its own buffers. */
	int (*reduce)(void *self, struct mg_unit_pipe *P, int u, int k,
		      enum mg_up_reduce op, const void *src, void *dst,
		      int64_t n);
	/* Optional. Unit u's gradient shards (mg_unit_pipe_gshard) are
	 * final for the step (called once a step per trained unit, in the
	 * order they become final; the same on every rank). Return 0 when
	 * done with them (a transient shard is freed at once), MG_UP_ASYNC
	 * when work was issued that still reads them (kept until the next
	 * wait: a copy on a side stream), -1 on error. */
	int (*final)(void *self, int u);
	/* Optional. Order compute after the strategy's own asynchronous work
	 * (side-stream copies); called at every pipeline wait, after the
	 * communicators'. */
	int (*wait)(void *self);
};

struct mg_unit_pipe_cfg {
	struct mg_ctx *ctx;
	const struct mg_flat_layout *L; /* built over `group` ranks */
	struct mg_comm *sc;		/* shard group: NULL when group 1 */
	struct mg_comm *rc;		/* replica group: NULL when 1 */
	int srank;			/* this rank in the shard group */
	int replicas;			/* world / group */
	unsigned flags;			/* MG_UP_* */
	int prefetch;  /* units gathered ahead (0: on demand) */
	void *buffers; /* MG_P_BUFFER tensors (master dtype,
				     L->n_buffers, replicated) */
	const struct mg_unit_hooks *hooks;
	void *self;	 /* the hooks' first argument */
	const char *who; /* prefix of errors ("fsdp") */
	/* Optional: allocator of gather and gradient slots (fsdp's NCCL
	 * windows); NULL: mg_buf_alloc. */
	int (*alloc_slot)(void *self, struct mg_buf *b, size_t bytes,
			  enum mg_mem_cat cat);
};

/* Per unit, read-only to the strategy. */
enum mg_up_state {
	MG_UP_IDLE = 0, /* gradients not ready yet */
	MG_UP_READY,	/* ready: its first reduction not issued */
	MG_UP_SCATTER,	/* reduce-scatter issued */
	MG_UP_REPLICA,	/* replica all-reduce issued */
	MG_UP_FINAL,	/* final hook issued asynchronous work */
	MG_UP_DONE,	/* shard final for this micro-batch */
	MG_UP_HELD,	/* no_sync: ready this micro-batch, not reduced */
};

struct mg_up_unit {
	enum mg_up_state gs;
	int64_t gepoch;	  /* wait epoch its last stage was issued in */
	int pslot;	  /* gather slot, -1 */
	int gslot;	  /* gradient slot, -1 */
	int uslot;	  /* transient gradient shard slot, -1 */
	bool gathered;	  /* its all-gathers were issued */
	bool acc;	  /* the shard holds part of this step's sum */
	bool scratch;	  /* the reduction in flight lands in the scratch */
	bool frozen_held; /* KEEP_GATHERED: frozen flats in the slot */
};

struct mg_up_slot {
	struct mg_buf buf;
	int owner; /* unit, -1 when free */
};

struct mg_up_order {
	int *seq;
	int n, cap, cur;
	bool final;
};

struct mg_unit_pipe {
	struct mg_unit_pipe_cfg cfg;
	const struct mg_model_spec *spec;
	int group;     /* L->group */
	int accum;     /* micro-batches a step */
	int micro;     /* the micro-batch the pipeline is in */
	bool final;    /* this micro-batch is the step's last */
	int64_t epoch; /* waits done this step */
	struct mg_up_unit *units;
	struct mg_up_slot *pslots, *gslots, *uslots;
	int npslots, ngslots, nuslots;
	struct mg_buf gshard;	/* kept gradient shards (gshard_byte) */
	size_t gslot_bytes;	/* a pooled gradient slot */
	size_t scratch_base;	/* the scratch's start in a gradient slot */
	size_t *scratch_byte;	/* per flat: its shard in the scratch */
	size_t uslot_bytes;	/* a transient gradient shard slot */
	size_t *ushard_byte;	/* per flat: its shard in a uslot */
	struct mg_flat_views V; /* what acquire lends */
	struct mg_up_order order[2]; /* forward (and eval), backward */
};

/* Set P up over cfg (copied; L, hooks and the buffers must outlive P):
 * slots, the kept gradient shard buffer (zeroed, MG_MEM_GRADS) unless
 * MG_UP_TRANSIENT_GRADS, the lent views. The model's spec is cfg.L's;
 * micro-batches are ctx->micro_count. 0 or -1. */
int mg_unit_pipe_init(struct mg_unit_pipe *P,
		      const struct mg_unit_pipe_cfg *cfg);
void mg_unit_pipe_free(struct mg_unit_pipe *P);

/* The strategy_ops entry points, for a strategy to call from its own
 * (same arguments and results as strategy.h's). */
struct mg_unit_view *mg_unit_pipe_acquire(struct mg_unit_pipe *P, int unit,
					  enum mg_phase ph);
void mg_unit_pipe_release(struct mg_unit_pipe *P, int unit, enum mg_phase ph);
int mg_unit_pipe_grads_ready(struct mg_unit_pipe *P, int unit);

/* The same as plugin callbacks, for a strategy whose state struct starts
 * with its struct mg_unit_pipe (self points at both):
 *   static const struct mg_strategy_ops ops = { MG_UNIT_PIPE_OPS, ... }; */
struct mg_unit_view *mg_unit_pipe_acquire_op(void *self, int unit,
					     enum mg_phase ph);
void mg_unit_pipe_release_op(void *self, int unit, enum mg_phase ph);
int mg_unit_pipe_grads_ready_op(void *self, int unit);
#define MG_UNIT_PIPE_OPS                                                       \
	.acquire = mg_unit_pipe_acquire_op,                                    \
	.release = mg_unit_pipe_release_op,                                    \
	.grads_ready = mg_unit_pipe_grads_ready_op

/*
 * The head of a sharded strategy's state: its pipeline, the context and
 * the sampler (each rank reads and computes its own block of the global
 * batch, as ddp_ds). A strategy whose state struct starts with it gets
 * steps_per_epoch, plan, acquire, release and grads_ready from
 * MG_UNIT_STRATEGY_OPS, and shuffle / drop_last from
 * MG_UNIT_STRATEGY_OPTIONS.
 */
struct mg_unit_strategy {
	struct mg_unit_pipe pipe; /* first */
	struct mg_ctx *ctx;
	struct mg_sampler sampler;
	bool drop_last;
};

#define MG_UNIT_STRATEGY_OPTIONS                                               \
	MG_OPT_B("shuffle", "true", "shuffle the training set every epoch"),   \
		MG_OPT_B("drop_last", "true",                                  \
			 "skip the last incomplete global batch of an epoch "  \
			 "(false: pad it by repeating samples)")

/* From the plugin's create(): the sampler from the options above. */
void mg_unit_strategy_init(struct mg_unit_strategy *s, const struct mg_opts *o,
			   struct mg_ctx *ctx);
/* From destroy(): the pipeline and the sampler. */
void mg_unit_strategy_free(struct mg_unit_strategy *s);
/* begin_step for a strategy with nothing of its own to do then
 * (mg_unit_pipe_begin_step). */
int mg_unit_strategy_begin_step(void *self);
int64_t mg_unit_strategy_steps(void *self, int64_t n, int64_t batch);
int mg_unit_strategy_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
			  int64_t step, struct mg_plan *p);
#define MG_UNIT_STRATEGY_OPS                                                   \
	.steps_per_epoch = mg_unit_strategy_steps,                             \
	.plan = mg_unit_strategy_plan, MG_UNIT_PIPE_OPS

/* begin_step: zeroes the kept shard the model accumulates into
 * (MG_UP_DIRECT_GRADS). */
int mg_unit_pipe_begin_step(struct mg_unit_pipe *P);
/* step(), first: every trained unit's gradient shard final (and its
 * final hook run). */
int mg_unit_pipe_finish(struct mg_unit_pipe *P);
/* After the optimizer changed the parameters (end of step()): every unit
 * back to the start of a step, gathered copies dropped. */
void mg_unit_pipe_reset(struct mg_unit_pipe *P);
/* Parameters changed behind the pipeline's back (a checkpoint loaded):
 * frozen flats kept in slots are gathered again. */
void mg_unit_pipe_invalidate(struct mg_unit_pipe *P);
/* Wait for everything the pipeline issued (the communicators and the
 * wait hook). */
int mg_unit_pipe_wait(struct mg_unit_pipe *P);

/* Where flat k (of unit u) has its gradient shard this step: f->shard
 * elements of f->grad (see the top of this file). */
void *mg_unit_pipe_gshard(const struct mg_unit_pipe *P, int u, int k);
/* Unit u's gather slot (MG_UP_SLOTS_AT_INIT: its own, from init on). */
void *mg_unit_pipe_slot(const struct mg_unit_pipe *P, int u);
/* Add the squares of every kept gradient shard to ctx->optim_vals'
 * sumsq (the norm in F32, mg_optim_sumsq), in the layout's order. With
 * shards over the group the caller sums it over the shard group. */
int mg_unit_pipe_sumsq(const struct mg_unit_pipe *P);

/* The default gather and reduce hooks, for a hook to call around. */
int mg_unit_pipe_gather_flat(void *self, struct mg_unit_pipe *P, int u, int k,
			     void *dst);
int mg_unit_pipe_reduce_flat(void *self, struct mg_unit_pipe *P, int u, int k,
			     enum mg_up_reduce op, const void *src, void *dst,
			     int64_t n);

#ifdef __cplusplus
}
#endif
#endif
