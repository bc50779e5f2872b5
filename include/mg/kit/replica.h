/*
 * replica.h - a full, unsharded copy of a model's parameters, gradients and
 * optimizer state on one rank: the storage of single-rank and DDP-family
 * strategies.
 *
 * Flat buffers, so a whole-model all-reduce or broadcast is one call and
 * the optimizer is a handful of launches. Trained parameters are ordered
 * in four groups - {compute dtype, kept in master dtype (MG_P_FP32)} x
 * {weight decay, no decay} - so each group is one contiguous optimizer
 * slice. With mixed precision (compute dtype F16 or BF16) the master copy
 * is F32 and a low-precision copy is what the model borrows; the
 * optimizer refreshes it in the same pass.
 *
 * Frozen parameters (no MG_P_TRAIN: a LoRA base) are kept once, in the
 * dtype they are lent in (the compute dtype, or the master dtype for
 * MG_P_FP32 ones), in a buffer of their own: no master copy, gradient or
 * optimizer state. They are never reduced, broadcast or checkpointed:
 * their values are a pure function of the model's source (seed or
 * weights folder), the same on every rank and again on resume. A frozen
 * parameter declared MG_NF4 is kept there as the blob the model's
 * init_unit filled (mg_tensor_bytes: codes and scales, 256-byte
 * aligned) and lent as an MG_NF4 tensor of its logical shape.
 */
#ifndef MG_KIT_REPLICA_H
#define MG_KIT_REPLICA_H

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_REPLICA_MAX_SLOTS 2
#define MG_REPLICA_GROUPS 4 /* lp-decay, lp-nodecay, f32-decay, f32-nodecay */

struct mg_replica {
	struct mg_ctx *ctx;
	const struct mg_model_spec *spec;
	enum mg_dtype master, compute;
	bool mixed;		 /* compute != master */
	struct mg_buf params;	 /* master: groups 0..3 */
	struct mg_buf params_lp; /* mixed: compute copy of groups 0, 1 */
	struct mg_buf frozen;	 /* frozen parameters, each as lent */
	struct mg_buf buffers;	 /* MG_P_BUFFER tensors (master dtype) */
	struct mg_buf grads;	 /* groups 0, 1 (compute dtype) */
	struct mg_buf grads32;	 /* groups 2, 3 (master dtype) */
	struct mg_buf state[MG_REPLICA_MAX_SLOTS]; /* trained, master dtype */
	int nslots;
	int64_t n_params, n_buffers, n_train; /* n_params == n_train */
	int64_t frozen_bytes;
	int64_t group_off[MG_REPLICA_GROUPS + 1]; /* element offsets */
	/* per parameter: element offset in its buffer (bytes in frozen) */
	int64_t *off;
	struct mg_tensor *ptensor; /* per parameter, as lent */
	struct mg_tensor *gtensor; /* per parameter (data NULL if none) */
	struct mg_unit_view *views;
};

/* Allocate storage for spec and fill it through mg_init_unit(). */
int mg_replica_init(struct mg_replica *r, struct mg_ctx *ctx,
		    const struct mg_model_spec *spec);
void mg_replica_free(struct mg_replica *r);

struct mg_unit_view *mg_replica_view(struct mg_replica *r, int unit,
				     enum mg_phase ph);
int mg_replica_zero_grads(struct mg_replica *r);
/* Add the local gradients' sum of squares to ctx->optim_vals->sumsq. */
int mg_replica_sumsq(struct mg_replica *r);
/* Apply the optimizer (ctx->optim_vals already finalised). */
int mg_replica_update(struct mg_replica *r, const struct mg_optim_hparams *h);
/* sumsq + finalize + update for a replica no other rank shares. */
int mg_replica_step(struct mg_replica *r, const struct mg_optim_hparams *h);
int mg_replica_save(struct mg_replica *r, struct mg_ckpt *ck);
int mg_replica_load(struct mg_replica *r, struct mg_ckpt *ck);
/* After master params changed outside the optimizer (load): refresh the
 * low-precision copy. */
int mg_replica_refresh_lp(struct mg_replica *r);

#ifdef __cplusplus
}
#endif
#endif
