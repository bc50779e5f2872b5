/*
 * optim.h - optimizer settings and the update kernels strategies run on
 * whatever slice of parameters they own (all of them, a shard, or a
 * host-side master copy).
 *
 * The values that change every step (learning rate, loss-scale and clip
 * multiplier, bias corrections, the skip flag) live in device memory
 * (ctx->optim_vals), written by the trainer before the step and finished
 * on the device by mg_optim_finalize(), so a whole training step - forward,
 * backward, gradient norm, clipping, overflow skip, update - can be
 * captured once as a CUDA graph and replayed.
 */
#ifndef MG_OPTIM_H
#define MG_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_optim_kind { MG_OPTIM_SGD = 0, MG_OPTIM_ADAMW = 1 };

/* Settings fixed for the run (host memory). */
struct mg_optim_hparams {
	enum mg_optim_kind kind;
	double lr;	     /* peak learning rate (the schedule scales it) */
	double momentum;     /* SGD */
	double dampening;    /* SGD */
	bool nesterov;	     /* SGD */
	double beta1, beta2; /* AdamW */
	double eps;	     /* AdamW */
	double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
	double max_grad_norm; /* clip the global gradient norm; 0: off */
	bool decay_all;	      /* apply weight decay to MG_P_NO_DECAY too */
};

/* Per-step values, in the context's device memory (ctx->optim_vals). */
struct mg_optim_vals {
	float lr;	 /* this step's learning rate */
	float grad_mul;	 /* gradient multiplier: 1/loss scale, then clip */
	float bias1;	 /* AdamW: 1 - beta1^t */
	float bias2;	 /* AdamW: 1 - beta2^t */
	float grad_norm; /* written by mg_optim_finalize (unscaled) */
	int32_t first;	 /* first optimizer step: momentum = gradient */
	int32_t skip;	 /* written by mg_optim_finalize: non-finite grads */
	float sumsq;	 /* sum of squared (scaled) gradients, accumulated by
			     mg_optim_sumsq and reduced across ranks */
	int64_t step;	 /* the run's global step (== ctx->step): device
			     kernels key per-step random streams (dropout) on
			     it, so a replayed graph draws new masks */
};

/* Number of state tensors (each as large as the parameter) kind needs. */
MG_EXPORT int mg_optim_state_slots(const struct mg_optim_hparams *h);
/* State slot names for checkpoints: "momentum", "exp_avg", "exp_avg_sq". */
MG_EXPORT const char *mg_optim_slot_name(const struct mg_optim_hparams *h,
					 int slot);

/* Add the sum of squares of n gradient values (dtype dt) to vals->sumsq
 * on ctx's device (deterministic order). */
MG_EXPORT int mg_optim_sumsq(struct mg_ctx *ctx, struct mg_optim_vals *vals,
			     enum mg_dtype dt, const void *grad, int64_t n);
/* From vals->sumsq: set grad_norm, skip (non-finite) and fold clipping
 * (h->max_grad_norm) into grad_mul. On ctx's device. */
MG_EXPORT int mg_optim_finalize(struct mg_ctx *ctx,
				const struct mg_optim_hparams *h,
				struct mg_optim_vals *vals);

/* One slice of parameters to update. */
struct mg_optim_slice {
	enum mg_dtype dtype;	  /* master params and state: F32 or F64 */
	void *param;		  /* master copy, updated in place */
	const void *grad;	  /* gradient in grad_dtype */
	enum mg_dtype grad_dtype; /* the master dtype or the compute dtype */
	void *param_lp;		  /* optional low-precision copy refreshed
				     after the update (NULL: none) */
	enum mg_dtype lp_dtype;	  /* F16 or BF16 */
	void *state[2];		  /* mg_optim_state_slots() arrays, dtype */
	int64_t n;
	bool decay; /* apply weight decay */
};

/* Update a slice on ctx's device unless vals->skip is set. */
MG_EXPORT int mg_optim_update(struct mg_ctx *ctx,
			      const struct mg_optim_hparams *h,
			      const struct mg_optim_vals *vals,
			      const struct mg_optim_slice *s);

#ifdef __cplusplus
}
#endif
#endif
