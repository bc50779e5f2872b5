/*
 * ctx.h - the run context the core hands every plugin, and the calls that
 * connect a model to the strategy that owns its parameters.
 */
#ifndef MG_CTX_H
#define MG_CTX_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "log.h"
#include "model.h"
#include "optim.h"
#include "strategy.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device a rank computes on, with the handles its ops share. */
struct mg_device {
	enum mg_device_kind kind;
	int ordinal;  /* CUDA device index; 0 on CPU */
	int threads;  /* CPU worker threads for ops */
	void *stream; /* cudaStream_t for compute */
	void *cublas; /* cublasHandle_t */
	void *cudnn;  /* cudnnHandle_t */
	void *impl;   /* backend-private state (workspaces, caches) */
};

/* Phases timed every step. */
enum mg_timer {
	MG_T_DATA = 0, /* waiting for the reader */
	MG_T_H2D,      /* host-to-device copies of the batch */
	MG_T_FORWARD,
	MG_T_BACKWARD,
	MG_T_COMM, /* collectives not overlapped with compute */
	MG_T_OPTIM,
	MG_T_COUNT,
};

/* Counters the report sums per rank. */
enum mg_counter {
	MG_C_SAMPLES_READ = 0,
	MG_C_SAMPLES_COMPUTED,
	MG_C_H2D_BYTES,
	MG_C_D2H_BYTES,
	MG_C_COMM_BYTES,
	MG_C_COMM_CALLS,
	MG_C_TOKENS_COMPUTED, /* token rows' tokens, padding left out */
	MG_C_COUNT,
};

struct mg_stats; /* owned by the core */

struct mg_ctx {
	uint32_t struct_size;
	int rank, world, local_rank;
	struct mg_device *dev;
	struct mg_comm *comm;
	enum mg_dtype compute_dtype; /* activations, lent params, grads */
	enum mg_dtype master_dtype;  /* stored params, optimizer state */
	uint64_t seed;
	int64_t epoch, step; /* 0-based; step counts optimizer steps */
	bool training;	     /* train-mode forward (BN batch stats) */
	/* F32 scalar on the device: d(loss)/d(loss_sum) multiplier the model
	 * applies when seeding backward (loss scale / global batch). */
	struct mg_tensor grad_scale;
	/* The run's optimizer settings, so strategies know at setup which
	 * state to allocate, and this step's values on the device (written
	 * by the trainer before each step; see optim.h). */
	const struct mg_optim_hparams *optim;
	struct mg_optim_vals *optim_vals;

	/* Binding set by the core; use the inline calls below. */
	void *strategy;
	const struct mg_strategy_ops *strategy_ops;
	void *model;
	const struct mg_model_ops *model_ops;
	struct mg_stats *stats;
	void *core; /* core-private */

	/* Added in ABI 1.2 (valid when struct_size covers it). */
	int local_world; /* ranks on this node (FSDP hybrid groups) */

	/* Added in ABI 1.3: gradient accumulation. A step runs micro_count
	 * forward/backward passes (run.grad_accum) before one optimizer step;
	 * micro is the current one. Gradients accumulate (+=) across them;
	 * a strategy with MG_STRATEGY_GRAD_ACCUM sums them: it reduces once,
	 * after the last (micro == micro_count - 1), like PyTorch DDP's
	 * no_sync(), or reduces each and adds the results (fsdp full). */
	int micro, micro_count;

	/* Added in ABI 1.4: a folder shared by the runs under run.out_dir
	 * where plugins may keep derived data between runs (tokenized
	 * datasets), keyed by what it derives from. Created on first use by
	 * whoever writes there (mkdir -p); never NULL. */
	const char *cache_dir;
};

/* Borrow unit's full tensors for a phase; NULL on error (error set). */
static inline struct mg_unit_view *mg_acquire(struct mg_ctx *ctx, int unit,
					      enum mg_phase ph)
{
	return ctx->strategy_ops->acquire(ctx->strategy, unit, ph);
}

static inline void mg_release(struct mg_ctx *ctx, int unit, enum mg_phase ph)
{
	ctx->strategy_ops->release(ctx->strategy, unit, ph);
}

/* Tell the strategy a unit's gradients are final for this step. */
static inline int mg_grads_ready(struct mg_ctx *ctx, int unit)
{
	return ctx->strategy_ops->grads_ready(ctx->strategy, unit);
}

/* Ask the model for a unit's initial values (host tensors in storage
 * dtype); strategies call it from setup(). Deterministic in (seed, unit). */
MG_EXPORT int mg_init_unit(struct mg_ctx *ctx, const struct mg_model_spec *s,
			   int unit, struct mg_tensor *params_host);
/* Added in ABI 1.7: mg_init_unit where only elements [lo[i], hi[i]) of
 * the unit's i-th tensor are needed (a shard): the model's
 * init_unit_part when it has one, else init_unit fills everything. */
MG_EXPORT int mg_init_unit_part(struct mg_ctx *ctx,
				const struct mg_model_spec *s, int unit,
				struct mg_tensor *params_host,
				const int64_t *lo, const int64_t *hi);

/* Phase timing and counters for the report. */
MG_EXPORT void mg_timer_start(struct mg_ctx *ctx, enum mg_timer t);
MG_EXPORT void mg_timer_stop(struct mg_ctx *ctx, enum mg_timer t);
MG_EXPORT void mg_count(struct mg_ctx *ctx, enum mg_counter c, int64_t v);
/* Wall clock in seconds (monotonic). */
MG_EXPORT double mg_now(void);

/* Block until the device finished the work queued so far. */
MG_EXPORT int mg_device_sync(struct mg_ctx *ctx);

/*
 * Added in ABI 1.2: work beside the compute stream, for strategies that
 * move state between host and device while compute goes on (CPU offload).
 * All of it is stream work, so a step that uses it can still be captured
 * as a CUDA graph. On a CPU device each call does its work at once.
 *
 * mg_copy_async: copy bytes (either direction; host memory should be
 * pinned) on the device's side copy stream, after the compute work queued
 * so far. The source must stay and the destination must not be read until
 * mg_copy_join() (device work) or a host call queued after it (host work).
 */
MG_EXPORT int mg_copy_async(struct mg_ctx *ctx, void *dst, const void *src,
			    size_t bytes);
/* The compute stream waits for every mg_copy_async() issued so far. */
MG_EXPORT int mg_copy_join(struct mg_ctx *ctx);
/* Run fn(arg) on a host thread once the compute stream reaches this point;
 * later compute waits for it to return. fn must not call CUDA or
 * collectives. A CUDA graph captures the call and makes it again on
 * every replay. */
MG_EXPORT int mg_host_call(struct mg_ctx *ctx, void (*fn)(void *arg),
			   void *arg);
/* Added in ABI 1.9. Run fn(arg) on a host thread once the side copy
 * stream reaches this point (after the compute work queued so far and
 * every mg_copy_async() issued before it); later mg_copy_async() calls
 * wait for it to return, compute does not (until mg_copy_join()). Host
 * work that overlaps the device's: offload's optimizer updating a unit
 * while backward computes the next. The same rules as mg_host_call. */
MG_EXPORT int mg_host_call_side(struct mg_ctx *ctx, void (*fn)(void *arg),
				void *arg);

#ifdef __cplusplus
}
#endif
#endif
