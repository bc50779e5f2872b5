/*
 * tensor.h - dtypes, devices, contiguous tensors and accounted buffers.
 *
 * Tensors are plain descriptors (pointer, dtype, device, shape) over memory
 * somebody else owns; they are always contiguous, row-major. Memory that
 * plugins allocate goes through mg_buf_alloc() so the report can say, per
 * category, how much each rank held and when.
 */
#ifndef MG_TENSOR_H
#define MG_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_dtype {
	MG_F32 = 0,
	MG_F64,
	MG_F16,
	MG_BF16,
	MG_U8,
	MG_I32,
	MG_I64,
	MG_NF4,	 /* 4-bit NormalFloat, two per byte, plus per-block scales:
		   one blob per tensor (mg/nf4.h); frozen parameters only
		   (model.h) */
	MG_INT4, /* ABI 1.6: packed int4 weights with per-group f32 scales
		    (mg/int4.h); names `mgrun export --dtype int4` to a
		    model's save_hf; no tensor is made of it */
	MG_DTYPE_COUNT,
	/* In a parameter declaration: "the run's float type" (master dtype
	 * for storage, compute dtype in views). */
	MG_DTYPE_AUTO = 100,
};

enum mg_device_kind {
	MG_DEV_CPU = 0,
	MG_DEV_CUDA = 1,
};

#define MG_MAX_DIMS 6

struct mg_tensor {
	void *data;
	enum mg_dtype dtype;
	enum mg_device_kind device;
	int ndim;
	int64_t shape[MG_MAX_DIMS];
};

/* Size in bytes of one element; 0 for packed types (NF4: use
 * mg_tensor_bytes). */
MG_EXPORT size_t mg_dtype_size(enum mg_dtype dt);
MG_EXPORT const char *mg_dtype_name(enum mg_dtype dt);
MG_EXPORT int64_t mg_tensor_numel(const struct mg_tensor *t);
MG_EXPORT size_t mg_tensor_bytes(const struct mg_tensor *t);
/* Build a descriptor; unused dims must be absent (ndim says how many). */
MG_EXPORT struct mg_tensor mg_tensor_make(void *data, enum mg_dtype dt,
					  enum mg_device_kind dev, int ndim,
					  const int64_t *shape);

/* What a buffer holds, for memory accounting in the report. */
enum mg_mem_cat {
	MG_MEM_PARAMS = 0,  /* persistent parameter storage (shards too) */
	MG_MEM_GRADS,	    /* gradient storage */
	MG_MEM_OPTIM,	    /* optimizer state (momentum, Adam moments) */
	MG_MEM_GATHER,	    /* transient full-unit buffers (FSDP gathers) */
	MG_MEM_ACTIVATIONS, /* activations kept for backward, workspaces */
	MG_MEM_INPUT,	    /* input staging and batches */
	MG_MEM_OTHER,
	MG_MEM_LIBRARY, /* cuBLAS workspace, NCCL's device buffers (core) */
	MG_MEM_CAT_COUNT,
};

MG_EXPORT const char *mg_mem_cat_name(enum mg_mem_cat c);

/* An accounted allocation on the context's device (or pinned host). */
struct mg_buf {
	void *ptr;
	size_t bytes;
	enum mg_mem_cat cat;
	enum mg_device_kind device;
	bool pinned_host; /* host memory page-locked for async copies */
};

struct mg_ctx;

/* Allocate bytes on ctx's device, accounted under cat. Returns 0 or -1
 * (error set). Memory is not zeroed. */
MG_EXPORT int mg_buf_alloc(struct mg_ctx *ctx, struct mg_buf *b, size_t bytes,
			   enum mg_mem_cat cat);
/* Host memory (pinned if the device can pin), accounted under cat. */
MG_EXPORT int mg_buf_alloc_host(struct mg_ctx *ctx, struct mg_buf *b,
				size_t bytes, enum mg_mem_cat cat, bool pinned);
/* Grow b to at least bytes (contents not kept). */
MG_EXPORT int mg_buf_reserve(struct mg_ctx *ctx, struct mg_buf *b, size_t bytes,
			     enum mg_mem_cat cat);
MG_EXPORT void mg_buf_free(struct mg_ctx *ctx, struct mg_buf *b);
struct mg_comm;
/* Added in ABI 1.8. Like mg_buf_alloc, but in a window of c (struct
 * mg_comm's window_alloc: memory its all-gathers move on copy engines)
 * where c has windows; ordinary device memory otherwise, *windowed (may
 * be NULL) saying which, the reason logged once a run. Collective over
 * c: every rank calls it in the same order with the same bytes.
 * mg_buf_free releases either kind (call it on every rank, in the same
 * order, before c is destroyed). */
MG_EXPORT int mg_buf_alloc_comm(struct mg_ctx *ctx, struct mg_comm *c,
				struct mg_buf *b, size_t bytes,
				enum mg_mem_cat cat, bool *windowed);
/* How many buffers mg_buf_free (and so a growing mg_buf_reserve) has
 * released in this process so far. A CUDA graph captured before this
 * count last changed may replay addresses that are gone: the trainer
 * re-captures instead (launch_compute in trainer.c). */
MG_EXPORT uint64_t mg_buf_frees(void);

/* Copies between host and the context's device (synchronous on the
 * context's compute stream; CPU devices memcpy). */
MG_EXPORT int mg_copy_h2d(struct mg_ctx *ctx, void *dst, const void *src,
			  size_t bytes);
MG_EXPORT int mg_copy_d2h(struct mg_ctx *ctx, void *dst, const void *src,
			  size_t bytes);
MG_EXPORT int mg_copy_d2d(struct mg_ctx *ctx, void *dst, const void *src,
			  size_t bytes);
MG_EXPORT int mg_memset_dev(struct mg_ctx *ctx, void *dst, int value,
			    size_t bytes);

/* Convert n elements between float dtypes (F32, F64, F16, BF16) on ctx's
 * device, rounding to nearest even. dst and src must not overlap. */
MG_EXPORT int mg_op_convert(struct mg_ctx *ctx, void *dst, enum mg_dtype dt,
			    const void *src, enum mg_dtype st, int64_t n);
/* y[0] = s / max(x[0], 1) for F32 scalars on ctx's device: a loss
 * gradient multiplier from a count summed on the device (the label
 * tokens of a step over every rank), without a host round trip. */
MG_EXPORT int mg_op_reciprocal_scale(struct mg_ctx *ctx,
				     const struct mg_tensor *x, double s,
				     struct mg_tensor *y);
/* Host scalar conversions used by CPU twins and tests. */
MG_EXPORT float mg_half_to_float(uint16_t h);
MG_EXPORT uint16_t mg_float_to_half(float f);
MG_EXPORT float mg_bf16_to_float(uint16_t b);
MG_EXPORT uint16_t mg_float_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif
