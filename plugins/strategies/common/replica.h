/*
 * replica.h - a full, unsharded copy of a model's parameters, gradients and
 * optimizer state on one rank: the storage of single-rank and DDP-family
 * strategies. Flat buffers (one per kind) so a whole-model all-reduce or
 * broadcast is one call, with per-parameter tensors pointing into them.
 */
#ifndef MG_REPLICA_H
#define MG_REPLICA_H

#include "mg/mg.h"

#define MG_REPLICA_MAX_SLOTS 2

struct mg_replica {
	struct mg_ctx *ctx;
	const struct mg_model_spec *spec;
	enum mg_dtype dtype; /* master == compute dtype */
	struct mg_buf params;	/* trained + frozen parameters */
	struct mg_buf buffers;	/* MG_P_BUFFER tensors */
	struct mg_buf grads;	/* trained parameters only */
	struct mg_buf state[MG_REPLICA_MAX_SLOTS];
	int nslots;
	int64_t n_params, n_buffers, n_grads; /* elements */
	struct mg_tensor *ptensor; /* per parameter (params or buffers) */
	struct mg_tensor *gtensor; /* per parameter (data NULL if none) */
	int64_t *goff;		   /* per parameter offset into grads, -1 */
	struct mg_unit_view *views;
};

/* Allocate storage for spec and fill it through mg_init_unit(). */
int mg_replica_init(struct mg_replica *r, struct mg_ctx *ctx,
		    const struct mg_model_spec *spec);
void mg_replica_free(struct mg_replica *r);

struct mg_unit_view *mg_replica_view(struct mg_replica *r, int unit,
				     enum mg_phase ph);
int mg_replica_zero_grads(struct mg_replica *r);
/* L2 norm of grads * grad_mul (host double). */
double mg_replica_grad_norm(struct mg_replica *r, double grad_mul);
/* Clip (per h->max_grad_norm) and apply the optimizer to every trained
 * parameter; fills rep->grad_norm. */
int mg_replica_step(struct mg_replica *r, const struct mg_optim_hparams *h,
		    struct mg_step_report *rep);
int mg_replica_save(struct mg_replica *r, struct mg_ckpt *ck);
int mg_replica_load(struct mg_replica *r, struct mg_ckpt *ck);

#endif
