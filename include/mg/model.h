/*
 * model.h - what a model plugin declares and implements.
 *
 * A model never owns parameter storage. It declares its parameters as
 * units (FSDP wrap units: a block, a transformer layer, the embedding),
 * each a list of named tensors with shape, dtype and flags. The strategy
 * allocates and places them (replicated, sharded, offloaded) and lends a
 * unit's full tensors to the model between mg_acquire() and mg_release().
 */
#ifndef MG_MODEL_H
#define MG_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_NAME_MAX 96

/* Parameter flags. */
enum {
	MG_P_TRAIN = 1 << 0,  /* trained: has a gradient and optimizer state */
	MG_P_BUFFER = 1 << 1, /* state updated by forward (BN running stats):
				   no gradient, never sharded, broadcast from rank 0 */
	MG_P_NO_DECAY = 1 << 2, /* excluded from weight decay (norms, biases) */
	MG_P_FP32 = 1 << 3,	/* lent (and its gradient kept) in the master
				   dtype even when the compute dtype is lower:
				   norm weights, as mixed-precision training
				   keeps them */
};

/*
 * dtype MG_NF4 (QLoRA's 4-bit base, mg/nf4.h) is storage only: such a
 * parameter must be frozen (mg_spec_add_param refuses MG_P_TRAIN and
 * MG_P_BUFFER with its name). init_unit gets it as a host MG_NF4 tensor
 * of the logical shape over a blob of mg_tensor_bytes() bytes to fill
 * (mg_nf4_quantize_host); mg_acquire lends an MG_NF4 tensor of the
 * logical shape over the blob on the device, without gradient, which
 * the model dequantizes itself (mg_op_nf4_dequantize). Strategies count
 * the whole blob under MG_MEM_PARAMS and never checkpoint it.
 */
struct mg_param_decl {
	char name[MG_NAME_MAX]; /* within the unit, e.g. "conv.weight" */
	enum mg_dtype dtype;	/* MG_DTYPE_AUTO or MG_NF4 (frozen, above) */
	int flags;		/* MG_P_* */
	int ndim;
	int64_t shape[MG_MAX_DIMS];
	int64_t numel;
};

struct mg_unit_decl {
	char name[MG_NAME_MAX]; /* e.g. "features.3" */
	int first_param;	/* index into spec->params */
	int nparams;
};

/* Filled by the model's declare(); read by strategies. */
struct mg_model_spec {
	int nunits;
	struct mg_unit_decl *units;
	int nparams;
	struct mg_param_decl *params;
	int cap_units, cap_params; /* internal */
};

/* Start a new unit; the params added next belong to it. Returns its index
 * or -1. */
MG_EXPORT int mg_spec_add_unit(struct mg_model_spec *s, const char *name);
/* Add a parameter to the last unit. Returns its index within the unit. */
MG_EXPORT int mg_spec_add_param(struct mg_model_spec *s, const char *name,
				enum mg_dtype dtype, int flags, int ndim,
				const int64_t *shape);
MG_EXPORT void mg_spec_free(struct mg_model_spec *s);
/* Totals over the spec (elements). */
MG_EXPORT int64_t mg_spec_numel(const struct mg_model_spec *s, int flag_mask);

/* A label that carries no loss: prompt and padding positions of token
 * batches (the value Hugging Face and torchtune use). */
#define MG_IGNORE_INDEX (-100)

/* One micro-batch's inputs on the context's device, after the dataset's
 * transform. */
struct mg_batch {
	/* images [n, C, H, W] in the compute dtype, or token ids I32 [n, T] */
	struct mg_tensor input;
	/* I32 [n] (classes) or [n, T] (next-token targets, already shifted:
	 * labels[i][t] is the token that should follow position t, or
	 * MG_IGNORE_INDEX) */
	struct mg_tensor labels;
	int64_t n; /* samples */
	/* Position of sample 0 in the step's global batch (all ranks and
	 * micro-batches): random per-sample choices (dropout) key on it, so
	 * N ranks draw what 1 rank would. */
	int64_t global_offset;

	/* Added in ABI 1.3; empty (ndim 0, data NULL) for non-token data. */
	/* I32 [n, T]: position of each token in its document. Positions
	 * restart at 0 where a packed row starts a new document; attention
	 * never crosses such a boundary. */
	struct mg_tensor positions;
	/* I32 [n]: valid tokens per row; the rest of a row is padding (ids 0,
	 * labels MG_IGNORE_INDEX). Host copy in lens_host. */
	struct mg_tensor lens;
	const int32_t *lens_host;
	int64_t seq; /* T: padded row length of this micro-batch */
};

/*
 * Metrics. A forward pass writes sums (F32 on the device, not
 * accumulated) into metrics[0..nsums): the first MG_METRIC_N are fixed,
 * later ones are the model's own. The core adds them over micro-batches,
 * ranks and epochs; what it shows is what the model declares (ABI 1.3)
 * as ratios of those sums.
 */
enum {
	MG_METRIC_LOSS_SUM = 0, /* sum of per-sample (or per-token) losses */
	MG_METRIC_CORRECT,	/* correct predictions (samples or tokens) */
	MG_METRIC_COUNT,	/* samples or label tokens the loss is over */
	MG_METRIC_N,
};
#define MG_METRIC_MAX 16 /* sums a model may write */

enum mg_metric_show {
	MG_SHOW_PLAIN = 0, /* the ratio as is (loss) */
	MG_SHOW_PERCENT,   /* 100 x ratio (accuracy) */
	MG_SHOW_EXP,	   /* exp(ratio) (perplexity from a mean NLL) */
};

/* One reported metric: value = sums[num] / sums[den] (den < 0: the sum
 * itself), shown as `show` under `name` in the progress line, steps.csv,
 * report.json, sweeps and `mgrun compare`. */
struct mg_metric_decl {
	char name[32]; /* "loss", "acc", "ppl", "rewards/margins" */
	int num, den;
	enum mg_metric_show show;
	int lower_is_better; /* for compare's "better"/"worse" */
};

/* What a model declares about its metrics and its inputs. */
struct mg_metric_spec {
	int nsums; /* sums forward writes, MG_METRIC_N..MG_METRIC_MAX */
	int ndecl;
	struct mg_metric_decl decl[MG_METRIC_MAX];
	/* The loss is averaged per label token (language models) rather than
	 * per sample: the core then divides the loss gradient by the label
	 * tokens of the whole step (every rank and micro-batch), counted
	 * before backward. */
	int per_token;
};

struct mg_ctx;

struct mg_model_ops {
	/* Declare units and parameters. Called once, before the strategy's
	 * setup. */
	int (*declare)(void *self, struct mg_model_spec *spec);
	/*
	 * Fill a unit's initial values: params[i] is a host tensor for the
	 * unit's i-th parameter, in its storage dtype (master dtype for
	 * MG_DTYPE_AUTO; for MG_NF4 the blob to fill, mg_tensor_bytes()
	 * bytes). seed is the run seed mixed with the unit index
	 * (mg_rng_key(ctx->seed, unit)), so values do not depend on rank
	 * count or strategy.
	 */
	int (*init_unit)(void *self, int unit, struct mg_tensor *params,
			 uint64_t seed);
	/*
	 * Forward pass over batch b. When ctx->training, keep what backward
	 * needs and update buffers (BN running statistics). Writes
	 * metrics[0..nsums) (F32, device). Calls mg_acquire/mg_release
	 * around each unit.
	 */
	int (*forward)(void *self, struct mg_ctx *ctx, const struct mg_batch *b,
		       struct mg_tensor *metrics);
	/*
	 * Backward from the loss of the last forward, scaled by
	 * ctx->grad_scale. Accumulates (+=) into the gradient tensors that
	 * mg_acquire(MG_PHASE_BACKWARD) returns and calls mg_grads_ready()
	 * when a unit's gradients are complete.
	 */
	int (*backward)(void *self, struct mg_ctx *ctx);

	/* Added in ABI 1.3, optional: declare the metrics (NULL: loss and
	 * accuracy of a classifier, per sample). Called once after create. */
	int (*metrics)(void *self, struct mg_metric_spec *out);

	/*
	 * Added in ABI 1.4, optional: incremental decoding for `mgrun
	 * generate` (language models). Run the n tokens ids[0..n) (host I32)
	 * of one sequence at positions pos..pos+n-1, after the pos tokens of
	 * earlier calls, and write the next-token logits after the last one
	 * to logits[0..vocab) (F32, host). pos == 0 starts a new sequence;
	 * max_len bounds pos + n over the whole sequence, so a model can
	 * size its key/value cache then. ctx->training is false; units are
	 * acquired with MG_PHASE_FORWARD as in forward().
	 */
	int (*decode)(void *self, struct mg_ctx *ctx, const int32_t *ids,
		      int64_t n, int64_t pos, int64_t max_len, float *logits);

	/*
	 * Added in ABI 1.4, optional: `mgrun export`. Write the model as
	 * its own ecosystem's folder into dir (which exists): for a Hugging
	 * Face model config.json and model.safetensors, tensors in dtype
	 * (MG_F32, MG_F16 or MG_BF16; MG_NF4: the model's 4-bit format
	 * for the weights it quantizes, e.g. llama's bitsandbytes folder,
	 * refused by models without one), adapters merged into the weights
	 * they adapt, each file written atomically (mg_file_write_atomic,
	 * mg_tensor_writer_save). Called in one process (world 1) after
	 * the run's checkpoint loaded, ctx->training false; units are
	 * acquired with MG_PHASE_FORWARD and copied to the host.
	 */
	int (*save_hf)(void *self, struct mg_ctx *ctx, const char *dir,
		       enum mg_dtype dtype);

	/*
	 * Added in ABI 1.6, optional: save_hf with the weights in files of
	 * at most max_shard_bytes of tensor data, as transformers'
	 * save_pretrained(max_shard_size) writes them: one
	 * model.safetensors when everything fits, else
	 * model-0000k-of-0000N.safetensors and model.safetensors.index.json
	 * (mg_shard_writer_* in mg/tensor_file.h), tensors in save_hf's
	 * order, none split, a tensor larger than the size alone in its
	 * file. `mgrun export` calls it when present (default 5 GB, as
	 * transformers), else save_hf.
	 */
	int (*save_hf_sharded)(void *self, struct mg_ctx *ctx, const char *dir,
			       enum mg_dtype dtype, uint64_t max_shard_bytes);

	/*
	 * Added in ABI 1.7, optional: init_unit for part of each tensor.
	 * Only elements [lo[i], hi[i]) of params[i] (row-major element
	 * indices, 0 <= lo[i] <= hi[i] <= numel) must get their values,
	 * which must equal init_unit's; the others may be written or left
	 * as they are. An MG_NF4 blob is filled whole whatever its range.
	 * A sharded strategy asks for its shard only, so N ranks each draw
	 * 1/N of a large model's random values instead of all of them
	 * (mg_init_unit_part in ctx.h calls init_unit when this is NULL).
	 */
	int (*init_unit_part)(void *self, int unit, struct mg_tensor *params,
			      uint64_t seed, const int64_t *lo,
			      const int64_t *hi);
};

/* The classifier default (loss, acc), for models and the core. */
MG_EXPORT void mg_metric_spec_classifier(struct mg_metric_spec *out);
/* Append a declaration; returns its index or -1 when full. */
MG_EXPORT int mg_metric_declare(struct mg_metric_spec *s, const char *name,
				int num, int den, enum mg_metric_show show,
				int lower_is_better);

#ifdef __cplusplus
}
#endif
#endif
