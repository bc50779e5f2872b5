/*
 * optim.h - optimizer hyper-parameters and the update kernels strategies
 * run on whatever slice of parameters they own (all of them, a shard, or a
 * host-side master copy).
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

struct mg_optim_hparams {
	enum mg_optim_kind kind;
	double lr;	     /* this step's learning rate (schedule applied) */
	double momentum;     /* SGD */
	double dampening;    /* SGD */
	bool nesterov;	     /* SGD */
	double beta1, beta2; /* AdamW */
	double eps;	     /* AdamW */
	double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
	int64_t step;	     /* 1-based optimizer step, for bias correction */
	double grad_mul;     /* multiply gradients by this first (unscale) */
	double max_grad_norm; /* clip the global gradient norm; 0: off */
	bool decay_all;	      /* apply weight decay to MG_P_NO_DECAY too */
};

/* Number of state tensors (each as large as the parameter) kind needs. */
MG_EXPORT int mg_optim_state_slots(const struct mg_optim_hparams *h);
/* State slot names for checkpoints: "momentum", "exp_avg", "exp_avg_sq". */
MG_EXPORT const char *mg_optim_slot_name(const struct mg_optim_hparams *h,
					 int slot);

/*
 * Update n elements in place: param (dtype dt, F32 or F64) with grad (same
 * dtype), state[slot] arrays (same dtype). decay=false skips weight decay.
 * Runs on ctx's device; CPU when the pointers are host memory and
 * on_host is set (offload).
 */
MG_EXPORT int mg_optim_update(struct mg_ctx *ctx,
			      const struct mg_optim_hparams *h,
			      enum mg_dtype dt, void *param, const void *grad,
			      void **state, int64_t n, bool decay,
			      bool on_host);

#ifdef __cplusplus
}
#endif
#endif
