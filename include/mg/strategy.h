/*
 * strategy.h - what a data-distribution strategy plugin implements.
 *
 * The strategy owns three things: parameter storage (where each unit's
 * tensors live and in what form), the sampler (which samples this rank
 * reads, copies and computes), and the optimizer step (where it runs, on
 * which shard). Models reach the storage only through mg_acquire() and
 * mg_release() (ctx.h), so a strategy works for every model.
 */
#ifndef MG_STRATEGY_H
#define MG_STRATEGY_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_phase {
	MG_PHASE_FORWARD = 0, /* training forward */
	MG_PHASE_BACKWARD,    /* training backward: grads lent too */
	MG_PHASE_EVAL,	      /* evaluation forward, no backward follows */
};

/* A unit's tensors as lent to the model. */
struct mg_unit_view {
	int nparams;
	/* Full tensors on the context's device: compute dtype for float
	 * parameters, storage dtype for packed ones, master dtype for
	 * buffers (writable: the model updates running statistics). */
	struct mg_tensor *params;
	/* MG_PHASE_BACKWARD only: gradient per parameter in compute dtype,
	 * zeroed at the step's start, accumulated into by the model; data is
	 * NULL for frozen parameters and buffers. */
	struct mg_tensor *grads;
};

/* Which samples this rank handles in one step. */
struct mg_plan {
	int64_t n_read;	       /* samples this rank reads and copies */
	int64_t *read_idx;     /* [n_read] dataset indices (core's buffer) */
	int64_t read_cap;      /* capacity of read_idx */
	int64_t compute_begin; /* first sample of the read batch to compute */
	int64_t compute_count; /* samples this rank computes */
	int64_t global_count;  /* samples all ranks compute: gradient divisor */
	int64_t global_offset; /* position of the first computed sample in
				  the step's global batch */
};

/* What the step did, for the report. The core zeroes it before step();
 * a strategy need not fill skipped or grad_norm: the core reads both from
 * ctx->optim_vals, where mg_optim_finalize() writes them on the device. */
struct mg_step_report {
	bool skipped;	     /* optimizer step skipped (overflow) */
	double grad_norm;    /* global L2 norm of the (unscaled) gradient */
	double comm_seconds; /* collective time spent waiting in step() */
};

struct mg_ckpt;

struct mg_strategy_ops {
	/* Allocate storage for every unit of spec and fill it through
	 * mg_init_unit() (ctx.h). ctx is the one given to create(). */
	int (*setup)(void *self, const struct mg_model_spec *spec);
	/* Steps in one epoch of n samples at per-rank batch size batch. */
	int64_t (*steps_per_epoch)(void *self, int64_t n, int64_t batch);
	/* Fill p for step `step` of epoch `epoch`. Must be a pure function of
	 * its arguments and the run seed (resume relies on it). */
	int (*plan)(void *self, int64_t n, int64_t batch, int64_t epoch,
		    int64_t step, struct mg_plan *p);
	/* Called before a step's first forward: zero gradients. */
	int (*begin_step)(void *self);
	struct mg_unit_view *(*acquire)(void *self, int unit, enum mg_phase ph);
	void (*release)(void *self, int unit, enum mg_phase ph);
	/* A unit's gradients are complete: reduction may start. */
	int (*grads_ready)(void *self, int unit);
	/* Finish reductions, then the optimizer: mg_optim_sumsq over the
	 * gradients (summed across ranks), mg_optim_finalize, and
	 * mg_optim_update on what this rank owns, all with ctx->optim_vals,
	 * without host synchronisation (the step may be a CUDA graph). */
	int (*step)(void *self, const struct mg_optim_hparams *h,
		    struct mg_step_report *r);
	int (*save)(void *self, struct mg_ckpt *ck);
	int (*load)(void *self, struct mg_ckpt *ck);

	/* Added in ABI 1.1 (the core reads it only from plugins built for
	 * 1.1 or later); NULL means `batch`. The most samples plan() asks
	 * this rank to read in one step at per-rank batch size batch, so the
	 * core can size its input buffers (ddp_rr reads the global batch). */
	int64_t (*max_read)(void *self, int64_t batch);

	/* Added in ABI 1.3: MG_STRATEGY_* capabilities. */
	uint32_t caps;
};

/* Capabilities a strategy declares in mg_strategy_ops.caps. */
enum {
	/* step() optimizes the sum of the gradients of ctx->micro_count
	 * backward passes (the model adds to the lent gradients in each):
	 * either the lent gradients persist from begin_step to step() and
	 * are reduced once (no_sync), or each micro-batch's are reduced and
	 * the results summed (fsdp full). Without it the core refuses
	 * run.grad_accum > 1. */
	MG_STRATEGY_GRAD_ACCUM = 1u << 0,
};

#ifdef __cplusplus
}
#endif
#endif
