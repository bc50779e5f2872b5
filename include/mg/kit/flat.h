/*
 * flat.h - flat parameters: how a sharding strategy packs a model's units
 * into contiguous tensors it can all-gather and reduce-scatter in one
 * collective each, and where each rank's shard of them lives.
 *
 * One flat parameter per (unit, lent dtype, trained or frozen): a unit
 * whose tensors the model borrows in two dtypes (mixed precision keeps
 * norm weights in fp32, MG_P_FP32) has two flats, frozen tensors get
 * their own flat so they never carry gradients. A frozen flat lent in a
 * lower dtype than the master (a LoRA base under mixed precision) has
 * no master shard at all (master_off -1): its shard is kept once, in
 * the lent dtype. Inside a trained flat the
 * parameters that take weight decay come first, so a shard's optimizer
 * update is at most two slices. Every parameter starts at a multiple of
 * MG_FLAT_ALIGN elements (kernels get aligned pointers); the gaps hold
 * zeros and zero gradients, which the optimizer leaves at zero. A flat is
 * padded to a multiple of group x MG_FLAT_ALIGN elements and cut into
 * `group` equal shards (PyTorch FSDP pads the same way).
 *
 * Buffers (MG_P_BUFFER: batch-norm statistics) are never sharded; they get
 * offsets in a separate replicated buffer.
 *
 * Frozen parameters declared MG_NF4 (QLoRA's base) go into a packed flat
 * of their unit (packed true, lent MG_U8): its elements are bytes, each
 * parameter is its whole blob (mg_tensor_bytes: codes, absmax, nested
 * scales; a multiple of 256 bytes) at a byte offset that is a multiple
 * of 256, and the flat is padded to a multiple of group x 256 bytes, so
 * a shard is a multiple of 256 bytes too. A shard boundary therefore
 * falls at a multiple of 256 bytes from the start of some blob - inside
 * its codes, a boundary between 64-element blocks (every 512th element)
 * - but it may fall between a blob's codes and its scales or inside
 * either: a shard is bytes to store and gather, never read as values
 * (the model dequantizes only the gathered, whole blob). A packed flat
 * has no master or lp shard; a strategy keeps its shard at packed_off of
 * a byte buffer (n_packed bytes), gathers it as U8 and lends each
 * parameter as an MG_NF4 tensor of its logical shape over the blob.
 */
#ifndef MG_KIT_FLAT_H
#define MG_KIT_FLAT_H

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_FLAT_ALIGN 32 /* elements */

struct mg_flat {
	int unit;
	enum mg_dtype lent; /* dtype the model borrows */
	enum mg_dtype grad; /* trained: dtype gradients are reduced in */
	bool train;
	bool lp;	   /* lent != master: a low-precision shard copy */
	int64_t n;	   /* elements, gaps included */
	int64_t n_decay;   /* trained: [0, n_decay) takes weight decay */
	int64_t shard;	   /* elements per shard (group x shard >= n) */
	size_t full_byte;  /* padded full tensor in the unit's gather buffer */
	size_t gfull_byte; /* trained: full gradient in the unit's grad buffer */
	int64_t master_off; /* shard in the master buffer (master dtype), -1
			       for a frozen lp flat (mg_flat_frozen_lp) */
	int64_t lp_off;	    /* lp: shard in the lp buffer (lent dtype) */
	int64_t train_off;  /* trained: shard in the optimizer state buffers */
	size_t gshard_byte; /* trained: shard in the gradient shard buffer */
	/* kit 1.1 */
	bool packed;	    /* NF4 blobs as bytes (lent MG_U8, frozen) */
	int64_t packed_off; /* packed: shard in the packed buffer (bytes) */
};

struct mg_flat_layout {
	const struct mg_model_spec *spec;
	enum mg_dtype master;
	int group; /* ranks a flat is sharded over */
	int nflats;
	struct mg_flat *flats;
	int *unit_first; /* flats of unit u: [unit_first[u], unit_first[u+1]) */
	int *param_flat; /* per parameter: its flat, -1 for buffers */
	int64_t *param_off; /* per parameter: element offset in its flat, or
				 in the buffer store */
	int64_t n_master, n_lp, n_train, n_buffers; /* shard buffer elements */
	size_t gshard_bytes;	  /* gradient shard buffer bytes */
	size_t gshard_lent_bytes; /* of which the first part holds
				     gradients reduced in the compute
				     dtype (the rest: master dtype) */
	size_t *unit_full_bytes, *unit_grad_bytes; /* per unit */
	size_t max_full_bytes, max_grad_bytes;
	int64_t max_flat; /* largest padded flat (elements) */
	/* kit 1.1 */
	int64_t n_packed; /* shard buffer bytes of packed (NF4) flats */
};

/*
 * Lay spec out for shards over `group` ranks. compute: the dtype lent for
 * ordinary parameters; master: storage dtype. reduce_master: reduce
 * gradients in the master dtype (else in the lent dtype). Frozen MG_NF4
 * parameters go into packed flats; any other explicit dtype, or a
 * trained NF4 parameter, is refused with the parameter's name.
 */
int mg_flat_build(struct mg_flat_layout *L, const struct mg_model_spec *spec,
		  enum mg_dtype master, enum mg_dtype compute, int group,
		  bool reduce_master);
void mg_flat_free(struct mg_flat_layout *L);

/* The part of flat f's shard `srank` inside [lo, hi) (flat coordinates),
 * as [*a, *b) relative to the shard's start; false if empty. */
bool mg_flat_shard_range(const struct mg_flat *f, int srank, int64_t lo,
			 int64_t hi, int64_t *a, int64_t *b);

/* Checkpoint name of parameter i ("param/<unit>.<name>") or of its
 * optimizer slot ("optim/<slot>/<unit>.<name>": kind "optim/exp_avg"). */
void mg_flat_param_name(char *out, size_t n, const char *kind,
			const struct mg_model_spec *s, int i);

/* Save (put) or load (get) the parameters of flat k as named tensors
 * over `base`, a full flat in the master dtype on device dev; kind is
 * "param" or "optim/<slot>". */
int mg_flat_ckpt_flat(const struct mg_flat_layout *L, int k, const char *kind,
		      void *base, enum mg_device_kind dev, struct mg_ckpt *ck,
		      bool save);
/* The same for the buffers, stored at `bufs` (master dtype on dev). */
int mg_flat_ckpt_buffers(const struct mg_flat_layout *L, void *bufs,
			 enum mg_device_kind dev, struct mg_ckpt *ck,
			 bool save);

/* The tensors a flat-parameter strategy lends: one per parameter (dtype
 * and shape fixed, data pointed by the strategy at each acquire) and one
 * view per unit over them. */
struct mg_flat_views {
	struct mg_tensor *ptensor, *gtensor;
	struct mg_unit_view *views;
	bool *trains; /* per unit: has a trained flat */
};

int mg_flat_views_init(struct mg_flat_views *v, const struct mg_flat_layout *L,
		       enum mg_device_kind dev);
void mg_flat_views_free(struct mg_flat_views *v);

/*
 * Make every unit's initial values (the model's init is a function of the
 * seed and the unit, so every rank makes the same) as full flats in host
 * memory and hand each to keep(arg, flat index, full flat) to keep what
 * the strategy stores; buffers are copied to bufs_dev (the context's
 * device).
 */
int mg_flat_init_values(struct mg_flat_layout *L, struct mg_ctx *ctx,
			int (*keep)(void *arg, int k, const char *full),
			void *arg, void *bufs_dev);

/* mg_flat_init_shard's flags: frozen flats get every value (for a
 * strategy that keeps them whole on every rank, as offload does). */
#define MG_FLAT_INIT_FROZEN_WHOLE 1u

/* Added in kit 1.2: mg_flat_init_values for a rank that keeps shard
 * srank (0 <= srank < group) of every flat: keep() gets the full flat
 * buffer, whose values are valid inside [srank x shard, (srank + 1) x
 * shard) only (packed flats, buffers and, with MG_FLAT_INIT_FROZEN_WHOLE,
 * frozen flats whole). The model is asked for those elements only
 * (mg_init_unit_part), so the group's ranks share the random draws
 * instead of each making all of them. srank < 0: every value
 * (mg_flat_init_values). */
int mg_flat_init_shard(struct mg_flat_layout *L, struct mg_ctx *ctx, int srank,
		       unsigned flags,
		       int (*keep)(void *arg, int k, const char *full),
		       void *arg, void *bufs_dev);

/* Added in kit 1.3: whether a strategy named `who` may update each unit
 * as its gradient shard lands (update_in_backward): 0, or -1 with the
 * error said. Not with gradient clipping (the whole gradient's norm is
 * not known while units update), nor with fp16 (loss scaling skips a
 * step whose gradients overflow, and updated units cannot be taken
 * back). fsdp and offload share it. */
int mg_flat_ubw_check(const struct mg_ctx *ctx, const char *who);

/* Initial values of unit u as the model makes them, packed into full
 * padded flats in host memory (master dtype): out[k] for the unit's k-th
 * flat holds mg_flat_host_bytes (flat->shard * group elements), gaps
 * zero; a packed flat's blobs are filled by the model's init_unit. Buffers go to
 * bufs_host at their offsets (may be NULL when the unit has none). */
int mg_flat_init_unit(struct mg_flat_layout *L, struct mg_ctx *ctx, int u,
		      void **out, void *bufs_host);

/* Bytes of flat f's full padded values as mg_flat_init_unit makes them
 * on the host: master-dtype elements, or bytes of a packed flat. */
static inline size_t mg_flat_host_bytes(const struct mg_flat_layout *L,
					const struct mg_flat *f)
{
	return (size_t)(f->shard * L->group) *
	       (f->packed ? 1 : mg_dtype_size(L->master));
}

/* A frozen flat kept only in its lent (lower) dtype: no master shard. */
static inline bool mg_flat_frozen_lp(const struct mg_flat *f)
{
	return !f->train && f->lp;
}

/* Added in kit 1.5: the optimizer's slices of this rank's shard
 * (srank) of trained flat f, at most two (the part that takes weight
 * decay, then the rest), so a strategy that owns an optimizer-state shard
 * updates exactly its part: param, grad, param_lp (NULL: none) and
 * state[j] point at the shard's first element (master dtype for param
 * and state, f->grad for grad, f->lent for param_lp); the slices point
 * inside them. decay_all: every slice takes weight decay
 * (mg_optim_hparams.decay_all, applied by mg_optim_update's caller).
 * Returns how many slices were filled (0 to 2). */
int mg_flat_slices(const struct mg_flat_layout *L, const struct mg_flat *f,
		   int srank, bool decay_all, void *param, const void *grad,
		   void *param_lp, void *const *state, int nstate,
		   struct mg_optim_slice out[2]);

/* Added in kit 1.5: n elements of flat f's values from host memory src
 * (master dtype; bytes of a packed flat) to the device at dst in f's
 * lent dtype (converted on the device; synchronous). */
int mg_flat_upload(struct mg_ctx *ctx, const struct mg_flat_layout *L,
		   const struct mg_flat *f, void *dst, const void *src,
		   int64_t n);

#ifdef __cplusplus
}
#endif
#endif
