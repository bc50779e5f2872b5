/*
 * ddp.h - the data-parallel core shared by ddp, ddp_rr and ddp_ds: a full
 * replica per rank, gradients all-reduced in buckets as soon as backward
 * completes them (overlapping the rest of backward), buffers (batch-norm
 * running statistics) broadcast from rank 0 after every step, and the
 * same optimizer step on every rank. The three plugins differ only in
 * their sampler: which samples a rank reads and which it computes.
 */
#ifndef MG_DDP_H
#define MG_DDP_H

#include "mg/mg.h"
#include "replica.h"
#include "sampler.h"

/* A contiguous slice of one gradient buffer, reduced in one collective. */
struct mg_ddp_bucket {
	void *data;
	enum mg_dtype dtype;
	int64_t n;
	int nparams; /* parameters whose gradients lie in it */
	int pending; /* of those, not yet ready this step */
	bool launched;
};

struct mg_ddp {
	struct mg_ctx *ctx;
	struct mg_replica rep;
	struct mg_sampler sampler;
	bool drop_last;
	int64_t bucket_bytes;
	struct mg_ddp_bucket *buckets;
	int nbuckets;
	int *param_bucket; /* per parameter: its bucket, -1 if none */
};

/* Option entries every DDP-family plugin offers (shuffle, drop_last,
 * bucket_mb), for its schema. */
#define MG_DDP_OPTIONS                                                         \
	MG_OPT_B("shuffle", "true", "shuffle the training set every epoch"),   \
		MG_OPT_B("drop_last", "true",                                  \
			 "skip the last incomplete global batch of an epoch "  \
			 "(false: pad it by repeating samples, as PyTorch's "  \
			 "DistributedSampler does)"),                          \
		MG_OPT_F("bucket_mb", "25", 0.001, 1e6,                        \
			 "gradient all-reduce bucket size in MiB (PyTorch "    \
			 "DDP's bucket_cap_mb)")

int mg_ddp_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self);
void mg_ddp_destroy(void *self);

/* mg_sampler_steps / mg_sampler_blocks (sampler.h) over the plugin's
 * sampler and drop_last. */
int64_t mg_ddp_steps(const struct mg_ddp *d, int64_t n, int64_t global);
int64_t mg_ddp_blocks(struct mg_ddp *d, int64_t n, int64_t per_rank, int world,
		      int64_t epoch, int64_t step, int first, int count,
		      int64_t *out, int64_t cap);

/* The strategy ops all three plugins share (everything but the sampler). */
int mg_ddp_setup(void *self, const struct mg_model_spec *spec);
int mg_ddp_begin_step(void *self);
struct mg_unit_view *mg_ddp_acquire(void *self, int unit, enum mg_phase ph);
void mg_ddp_release(void *self, int unit, enum mg_phase ph);
int mg_ddp_grads_ready(void *self, int unit);
int mg_ddp_step(void *self, const struct mg_optim_hparams *h,
		struct mg_step_report *r);
int mg_ddp_save(void *self, struct mg_ckpt *ck);
int mg_ddp_load(void *self, struct mg_ckpt *ck);

#define MG_DDP_COMMON_OPS                                                      \
	.setup = mg_ddp_setup, .begin_step = mg_ddp_begin_step,                \
	.acquire = mg_ddp_acquire, .release = mg_ddp_release,                  \
	.grads_ready = mg_ddp_grads_ready, .step = mg_ddp_step,                \
	.save = mg_ddp_save, .load = mg_ddp_load,                              \
	.caps = MG_STRATEGY_GRAD_ACCUM

#endif
