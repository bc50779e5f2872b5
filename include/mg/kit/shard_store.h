/*
 * shard_store.h - storage for ZeRO-style strategies over the unit pipeline
 * (kit 1.5): every flat's full parameters resident on the device in their
 * lent dtype (so the pipeline never gathers them), this rank's shard of
 * the master weights and of the optimizer state either on the device
 * (ZeRO-1, ZeRO-2) or in host memory with the host optimizer (ZeRO-2
 * offload), its updated shard written back into its block of the full
 * parameters and all-gathered in place after the step.
 *
 * With the state on the device a trained flat lent in the master dtype
 * has no separate master: its shard is its block of the full parameters,
 * updated in place; a flat lent in a lower dtype keeps an fp32 master
 * shard and the update writes the lent copy (mg_optim_slice.param_lp)
 * into the block. With the state on the host the gradient shards are
 * copied to host memory first and the host optimizer (host_optim.h)
 * updates every slice on the pool's threads.
 *
 * Use, from a strategy whose state starts with struct mg_unit_strategy:
 *   setup:  mg_flat_build over the ranks, mg_shard_store_init (storage and
 *           initial values), mg_unit_pipe_init with .hooks whose params
 *           is mg_shard_store_params and .buffers = S.buffers.ptr,
 *           then mg_shard_store_bind (the optimizer's slices over the
 *           pipeline's gradient shards);
 *   step:   mg_shard_store_step (finish, norm, finalize, update, gather);
 *   save / load: mg_shard_store_save / _load (full named tensors, so a
 *           checkpoint moves between rank counts and strategies).
 */
#ifndef MG_KIT_SHARD_STORE_H
#define MG_KIT_SHARD_STORE_H

#include "mg/kit/flat.h"
#include "mg/kit/host_optim.h"
#include "mg/kit/unit_pipe.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_shard_store {
	struct mg_ctx *ctx;
	const struct mg_flat_layout *L;
	struct mg_comm *comm; /* the group the flats are sharded over
				 (NULL: one rank) */
	int srank, nstate;
	bool host;		/* master and optimizer state in host memory */
	struct mg_buf params;	/* device: every flat, full, lent dtype */
	size_t *unit_base;	/* per unit: its flats' start in params */
	struct mg_buf buffers;	/* device: MG_P_BUFFER tensors */
	struct mg_buf master;	/* master shards (host: all; device: of
				   flats lent in a lower dtype) */
	struct mg_buf lp;	/* host: the lent-dtype copy of lp shards */
	struct mg_buf state[2]; /* optimizer state shards */
	struct mg_buf grads;	/* host: gradient shards (gshard_byte) */
	struct mg_buf vals;	/* host: the step's optimizer values */
	struct mg_host_optim *hopt;
	struct mg_optim_slice *slices; /* bound by mg_shard_store_bind */
	int nslices;
	struct mg_unit_pipe *P;
	const struct mg_optim_hparams *h; /* the step's, for the host */
	volatile int host_rc;		  /* a failed host update */
};

/* Allocate, then fill with the model's initial values (each rank draws
 * its shard; the full parameters all-gathered). threads: host optimizer
 * threads (0: this rank's share of the cores); ignored on the device. */
int mg_shard_store_init(struct mg_shard_store *S, struct mg_ctx *ctx,
			const struct mg_flat_layout *L, struct mg_comm *comm,
			int srank, bool host, int threads);
void mg_shard_store_free(struct mg_shard_store *S);
/* The pipeline's params hook: flat k's full parameters on the device
 * (self: the store). */
void *mg_shard_store_params(void *self, int k);
/* The optimizer's slices of this rank's shards, reading the gradient
 * shards of P (kept: not MG_UP_TRANSIENT_GRADS). */
int mg_shard_store_bind(struct mg_shard_store *S, struct mg_unit_pipe *P);
/* A strategy's whole step(): the bound pipeline's gradient shards final
 * (mg_unit_pipe_finish), the global norm (this rank's shards summed in F32
 * by mg_optim_sumsq, all-reduced over the group: a strategy that sums in
 * another order than ddp_ds differs from it by F32 rounding of the norm
 * when clipping is on), mg_optim_finalize, the update of this rank's
 * shards, the pipeline reset, every rank's shards all-gathered into the
 * full parameters and the buffers broadcast from rank 0. No host waits
 * except the host optimizer's own (host state). */
int mg_shard_store_step(struct mg_shard_store *S,
			const struct mg_optim_hparams *h);
int mg_shard_store_save(struct mg_shard_store *S, struct mg_ckpt *ck);
int mg_shard_store_load(struct mg_shard_store *S, struct mg_ckpt *ck);

/*
 * A whole ZeRO strategy over the store: a strategy whose state starts with
 * struct mg_zero gets every callback but setup from MG_ZERO_OPS and
 * destroys with mg_zero_destroy; its setup calls mg_zero_setup with its
 * policies (examples/zero):
 *   ZeRO-1              MG_UP_WHOLE_GRADS, state on the device
 *   ZeRO-2              0 (gradients reduce-scattered), on the device
 *   ZeRO-2 offload      0, host = true
 * The sampler gives each rank its own block of the global batch (ddp_ds's
 * split), so each is compared with ddp_ds or offload.
 */
struct mg_zero {
	struct mg_unit_strategy base; /* first */
	struct mg_flat_layout L;      /* flats cut into one block a rank */
	struct mg_shard_store S;
};

/* The layout over every rank, the store, the pipeline with `flags`
 * (MG_UP_*, resident parameters), the store bound to it; errors
 * prefixed with who. threads: see mg_shard_store_init. */
int mg_zero_setup(struct mg_zero *z, const struct mg_model_spec *spec,
		  unsigned flags, bool host, int threads, const char *who);
/* Frees self (a struct mg_zero or a struct starting with one, from
 * calloc), whatever setup reached. */
void mg_zero_destroy(void *self);
int mg_zero_begin_step(void *self);
int mg_zero_step(void *self, const struct mg_optim_hparams *h,
		 struct mg_step_report *r);
int mg_zero_save(void *self, struct mg_ckpt *ck);
int mg_zero_load(void *self, struct mg_ckpt *ck);
#define MG_ZERO_OPS                                                            \
	MG_UNIT_STRATEGY_OPS, .begin_step = mg_zero_begin_step,                \
			      .step = mg_zero_step, .save = mg_zero_save,      \
			      .load = mg_zero_load,                            \
			      .caps = MG_STRATEGY_GRAD_ACCUM

#ifdef __cplusplus
}
#endif
#endif
