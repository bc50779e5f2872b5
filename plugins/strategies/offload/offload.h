/*
 * offload.h - ZeRO-Offload: the state the offload plugin's files share
 * (offload.c: plugin, storage, sampler, the step, and the hooks of the
 * kit's unit pipeline (mg/kit/unit_pipe.h) behind acquire / grads_ready;
 * offload_ckpt.c: checkpoints).
 *
 * The device keeps only what compute needs: every unit's full parameters
 * in the compute dtype, and transient full gradients while backward runs.
 * fp32 master weights and the optimizer's moments live in host memory
 * (pageable, placed by the optimizer's threads; pinned: only what copies
 * touch). As backward completes a unit, its gradients are reduce-scattered
 * over the ranks (each rank owns one shard of every flat parameter) and
 * the rank's shard is copied to the host while backward goes on: the
 * copy is the pipeline's final action (off_final), completed at its next
 * wait (the wait hook joins the side stream). The step
 * runs the optimizer on the host (host_optim: SIMD, all cores) in chunks,
 * each chunk's updated parameters copied back while the next chunk
 * computes, and the ranks all-gather the updated shards. Everything is
 * stream work (side-stream copies, a host call), so the step can still be
 * one CUDA graph.
 *
 * With update_in_backward the host optimizer does not wait for the step:
 * each unit's update (and its upload) is queued on the side stream as
 * soon as its gradient shard's copy to the host is, and runs while
 * backward computes the next units (offload.c off_update_unit).
 *
 * Gradient accumulation (run.grad_accum = K): each micro-batch's unit
 * gradients go through the pipeline as above, but land in the device's
 * gradient shard (this rank's 1/N, in the reduce dtype), summed: the
 * step's first contribution written there, later ones reduce-scattered
 * into a shard-sized scratch after the unit's slot and added (one rank:
 * added from the slot). Only after the last micro-batch is the summed
 * shard copied to the host, so the host optimizer runs once a step on the
 * whole step's gradient, and the gradient norm is taken over the shard.
 * Summing on the device keeps the host out of every micro-batch; the cost
 * is the shard buffer (with one rank: one full gradient, which a step
 * without accumulation does not keep: there the shard is transient,
 * MG_UP_TRANSIENT_GRADS, the slot copied out as it is).
 */
#ifndef MG_OFFLOAD_H
#define MG_OFFLOAD_H

#include "mg/kit/flat.h"
#include "mg/kit/host_optim.h"
#include "mg/kit/sampler.h"
#include "mg/kit/unit_pipe.h"
#include "mg/mg.h"

#define OFFLOAD_CHUNKS 4

/* Flats [first, last) updated by one host call, then uploaded. */
struct off_chunk {
	struct offload *d;
	int first, last;
	struct mg_optim_slice *slices;
	int nslices;
};

struct offload {
	struct mg_unit_strategy base; /* first: MG_UNIT_STRATEGY_OPS */
	struct mg_ctx *ctx;
	bool reduce_fp32;
	int threads;
	enum mg_dtype master, compute;
	const struct mg_model_spec *spec;
	struct mg_flat_layout L; /* sharded over all ranks */
	int srank, world;
	int nslots_state;
	/* Device. */
	struct mg_buf params;  /* every flat, full, lent dtype */
	size_t *unit_base;     /* per unit: its flats' start in params */
	struct mg_buf buffers; /* MG_P_BUFFER tensors */
	bool transient;	       /* one rank, no accumulation: no device
				  gradient shard, the slot copied out */
	/* Host: h_lp and h_grads pinned (copies), h_master pinned only when
	 * uploaded from (a trained flat lent in the master dtype), the
	 * moments pageable (offload.c alloc_storage). */
	struct mg_buf h_master, h_lp, h_grads, h_state[2];
	struct mg_buf h_vals; /* this step's optimizer values */
	struct mg_host_optim *hopt;
	const struct mg_optim_hparams *hp; /* the step's (stable) settings */
	struct off_chunk chunks[OFFLOAD_CHUNKS];
	int nchunks;
	/* update_in_backward: a chunk a unit, updated on the side stream as
	 * soon as the unit's gradient shard is on the host (off_final)
	 * while backward goes on; the step's optimizer values are
	 * copied to h_vals before the first of them. */
	bool ubw;
	struct off_chunk *uchunks;
	bool vals_sent;
	volatile int host_error; /* set by a failing host call */
	char host_msg[256];
};

/* offload_ckpt.c */
int off_save(void *self, struct mg_ckpt *ck);
int off_load(void *self, struct mg_ckpt *ck);
/* Fill the device parameters of flat k from a full master-dtype flat in
 * host memory (init, load). */
int off_upload_full(struct offload *d, int k, const void *full_host);

/* offload.c: the host's low-precision copy of every lp shard, from the
 * master shard. */
void off_refresh_host_lp(struct offload *d);

/* Where flat k's pieces are. */
static inline char *off_dev_full(const struct offload *d, int k)
{
	const struct mg_flat *f = &d->L.flats[k];
	return (char *)d->params.ptr + d->unit_base[f->unit] + f->full_byte;
}
/* This rank's shard inside the device's full flat k. */
static inline char *off_dev_mine(const struct offload *d, int k)
{
	const struct mg_flat *f = &d->L.flats[k];
	return off_dev_full(d, k) +
	       (size_t)(d->srank * f->shard) * mg_dtype_size(f->lent);
}
static inline char *off_host(const struct mg_buf *b, int64_t off,
			     enum mg_dtype dt)
{
	return (char *)b->ptr + (size_t)off * mg_dtype_size(dt);
}

#endif
