/*
 * ddp.h - the data-parallel core shared by ddp, ddp_rr and ddp_ds (and
 * third-party DDP variants): a full replica per rank, gradients reduced
 * in buckets as soon as backward completes them (overlapping the rest of
 * backward), buffers (batch-norm running statistics) broadcast from rank
 * 0 after every step, and the same optimizer step on every rank. The
 * shipped plugins differ only in their sampler: which samples a rank
 * reads and which it computes. How a bucket is reduced is a communication
 * hook (PyTorch DDP's register_comm_hook): a plain all-reduce unless the
 * strategy registers another, such as the built-in bf16 compression.
 *
 * A DDP strategy uses mg_ddp_create/mg_ddp_destroy as its plugin's
 * create/destroy, MG_DDP_COMMON_OPS for every callback but
 * steps_per_epoch and plan, and MG_DDP_OPTIONS in its schema.
 */
#ifndef MG_KIT_DDP_H
#define MG_KIT_DDP_H

#include "mg/kit/replica.h"
#include "mg/kit/sampler.h"
#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A contiguous slice of one gradient buffer, reduced in one collective
 * (or what the communication hook makes of it). */
struct mg_ddp_bucket {
	void *data; /* on the context's device */
	enum mg_dtype dtype;
	int64_t n;
	int nparams; /* parameters whose gradients lie in it */
	int pending; /* of those, not yet ready this step */
	bool launched;
};

struct mg_ddp;

/*
 * A communication hook: how one gradient bucket is reduced across ranks.
 * Gradients arrive already divided by the step's global sample count
 * (ctx->grad_scale), so a SUM over ranks is the global mean; a hook must
 * leave that sum (or its approximation) in b->data by the end of finish.
 * Every rank calls the hook for the same buckets in the same order, so
 * collectives match across ranks.
 */
struct mg_ddp_comm_hook {
	const char *name; /* for messages */
	/* Optional: once, after the buckets are laid out (setup); may keep
	 * its state in d->hook_state. */
	int (*setup)(struct mg_ddp *d);
	/* Bucket b's gradients are complete on the compute stream: start
	 * its reduction (compress, then issue collectives on ctx->comm).
	 * Runs during backward: must not wait for the collective. */
	int (*launch)(struct mg_ddp *d, struct mg_ddp_bucket *b);
	/* Optional: in step(), after ctx->comm->wait(): turn the reduced
	 * data back into b->data (decompress). Ordered before the
	 * optimizer on the compute stream. */
	int (*finish)(struct mg_ddp *d, struct mg_ddp_bucket *b);
	/* Optional: free d->hook_state. */
	void (*destroy)(struct mg_ddp *d);
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
	const struct mg_ddp_comm_hook *hook; /* NULL: mg_ddp_hook_allreduce */
	void *hook_state;		     /* the hook's own */
};

/* The default hook: one SUM all-reduce of the bucket in its own dtype. */
extern const struct mg_ddp_comm_hook mg_ddp_hook_allreduce;
/*
 * bf16 compression (PyTorch's bf16_compress_hook): each bucket that is
 * not already BF16 is rounded to BF16 (nearest even) in a scratch buffer,
 * all-reduced in BF16 (NCCL, or MPI accumulating in F32 on CPU ranks),
 * and converted back. Halves F32 gradient traffic for about three
 * significant decimal digits of the reduced gradient.
 */
extern const struct mg_ddp_comm_hook mg_ddp_hook_bf16;

/* Use hook h for every bucket of d (call it from create(), before
 * setup; the hook object must outlive d). Returns 0, or -1 when the
 * hook lacks launch. */
int mg_ddp_register_comm_hook(struct mg_ddp *d,
			      const struct mg_ddp_comm_hook *h);

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

/* A struct mg_ddp as *self, from the MG_DDP_OPTIONS entries of o. ctx is
 * kept (its comm is not used before setup). */
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

#ifdef __cplusplus
}
#endif
#endif /* MG_KIT_DDP_H */
