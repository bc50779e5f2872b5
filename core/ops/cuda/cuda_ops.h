/*
 * cuda_ops.h - private interface of the CUDA twins of the NN and image ops
 * (include/mg/ops_nn.h, ops_image.h).
 *
 * Each mg_cuda_NAME() takes the arguments of the public mg_op_NAME() and
 * is called by it, after the shared argument checks, when the context's
 * device is CUDA. All work is queued on dev->stream with no host
 * synchronisation and no allocation once workspaces have grown, so a
 * training step can be captured as a CUDA graph (after one eager step).
 *
 * Besides F32 and F64, every op accepts F16 and BF16 activations and
 * weights (F32 accumulation); batch-norm parameters, their gradients and
 * the saved statistics are then F32. The public checks admit only F32 and
 * F64 for now, so half types reach these functions only when called
 * directly (tests/gpu); the entry points are exported for that reason.
 */
#ifndef MG_CUDA_OPS_H
#define MG_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- public-op twins (arguments already validated) ---- */
MG_EXPORT int mg_cuda_conv2d(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
			     const struct mg_tensor *x,
			     const struct mg_tensor *w,
			     const struct mg_tensor *bias, struct mg_tensor *y,
			     struct mg_buf *ws);
MG_EXPORT int
mg_cuda_conv2d_backward(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
			const struct mg_tensor *x, const struct mg_tensor *w,
			const struct mg_tensor *dy, struct mg_tensor *dx,
			struct mg_tensor *dw, struct mg_tensor *dbias,
			struct mg_buf *ws);
MG_EXPORT int
mg_cuda_batchnorm2d(struct mg_ctx *ctx, const struct mg_bn_args *a,
		    const struct mg_tensor *x, const struct mg_tensor *gamma,
		    const struct mg_tensor *beta,
		    struct mg_tensor *running_mean,
		    struct mg_tensor *running_var, struct mg_tensor *save_mean,
		    struct mg_tensor *save_invstd, struct mg_tensor *y);
MG_EXPORT int mg_cuda_batchnorm2d_backward(
	struct mg_ctx *ctx, const struct mg_bn_args *a,
	const struct mg_tensor *x, const struct mg_tensor *y,
	const struct mg_tensor *dy, const struct mg_tensor *gamma,
	const struct mg_tensor *save_mean, const struct mg_tensor *save_invstd,
	struct mg_tensor *dx, struct mg_tensor *dgamma,
	struct mg_tensor *dbeta);
MG_EXPORT int mg_cuda_relu6(struct mg_ctx *ctx, const struct mg_tensor *x,
			    struct mg_tensor *y);
MG_EXPORT int mg_cuda_relu6_backward(struct mg_ctx *ctx,
				     const struct mg_tensor *y,
				     const struct mg_tensor *dy,
				     struct mg_tensor *dx);
MG_EXPORT int mg_cuda_add(struct mg_ctx *ctx, const struct mg_tensor *a,
			  const struct mg_tensor *b, struct mg_tensor *y);
MG_EXPORT int mg_cuda_add_backward(struct mg_ctx *ctx,
				   const struct mg_tensor *dy,
				   struct mg_tensor *da, struct mg_tensor *db);
MG_EXPORT int mg_cuda_global_avgpool(struct mg_ctx *ctx,
				     const struct mg_tensor *x,
				     struct mg_tensor *y);
MG_EXPORT int mg_cuda_global_avgpool_backward(struct mg_ctx *ctx,
					      const struct mg_tensor *dy,
					      struct mg_tensor *dx);
MG_EXPORT int mg_cuda_linear(struct mg_ctx *ctx, const struct mg_tensor *x,
			     const struct mg_tensor *w,
			     const struct mg_tensor *b, struct mg_tensor *y);
/* y += x w^T + b: the GEMM with beta 1 */
MG_EXPORT int mg_cuda_linear_add(struct mg_ctx *ctx, const struct mg_tensor *x,
				 const struct mg_tensor *w,
				 const struct mg_tensor *b,
				 struct mg_tensor *y);
MG_EXPORT int
mg_cuda_linear_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			const struct mg_tensor *w, const struct mg_tensor *dy,
			struct mg_tensor *dx, bool dx_add, struct mg_tensor *dw,
			struct mg_tensor *db);
MG_EXPORT int mg_cuda_dropout(struct mg_ctx *ctx, const struct mg_tensor *x,
			      struct mg_tensor *y, double p, uint64_t key,
			      int64_t offset);
MG_EXPORT int mg_cuda_dropout_backward(struct mg_ctx *ctx,
				       const struct mg_tensor *dy,
				       struct mg_tensor *dx, double p,
				       uint64_t key, int64_t offset);
/* Labels >= K cannot be reported without a host sync: such rows make the
 * loss sum NaN (forward) and their gradient row NaN (backward). */
MG_EXPORT int mg_cuda_softmax_xent(struct mg_ctx *ctx,
				   const struct mg_tensor *logits,
				   const struct mg_tensor *labels,
				   struct mg_tensor *metrics);
MG_EXPORT int mg_cuda_softmax_xent_backward(struct mg_ctx *ctx,
					    const struct mg_tensor *logits,
					    const struct mg_tensor *labels,
					    const struct mg_tensor *scale,
					    struct mg_tensor *dlogits);
/* Preference pairs (ops_llm.h); labels >= K turn the row's sums NaN. */
MG_EXPORT int mg_cuda_pair_logprob(struct mg_ctx *ctx,
				   const struct mg_tensor *logits,
				   const struct mg_tensor *labels,
				   const struct mg_tensor *positions,
				   struct mg_tensor *logp);
MG_EXPORT int mg_cuda_pair_logprob_backward(struct mg_ctx *ctx,
					    const struct mg_tensor *logits,
					    const struct mg_tensor *labels,
					    const struct mg_tensor *positions,
					    const struct mg_tensor *dlogp,
					    struct mg_tensor *dlogits);
MG_EXPORT int mg_cuda_dpo_loss(struct mg_ctx *ctx, const struct mg_tensor *logp,
			       const struct mg_tensor *ref, double beta,
			       double eps, struct mg_tensor *metrics);
MG_EXPORT int mg_cuda_dpo_loss_backward(struct mg_ctx *ctx,
					const struct mg_tensor *logp,
					const struct mg_tensor *ref,
					double beta, double eps,
					const struct mg_tensor *scale,
					struct mg_tensor *dlogp);
MG_EXPORT int mg_cuda_resize_normalize_u8(struct mg_ctx *ctx,
					  const struct mg_tensor *src,
					  struct mg_tensor *dst, float mean,
					  float std);
/* y[0] = s / max(x[0], 1), one thread on the stream (scalar.cu). */
MG_EXPORT int mg_cuda_reciprocal_scale(struct mg_ctx *ctx, const float *x,
				       double s, float *y);

/* ---- tuning knobs (benchmarks and tests) ---- */
enum mg_cuda_opt {
	/* Depthwise convolutions: 0 own kernels, 1 cuDNN grouped conv. */
	MG_CUDA_OPT_DEPTHWISE_CUDNN = 0,
	/* cuDNN algorithm choice: 0 cudnnGet*_v7 heuristics, 1 cudnnFind*
	 * (benchmarks each algorithm once per shape; syncs the device). */
	MG_CUDA_OPT_CONV_FIND,
	/* Allow TF32 tensor cores for F32 convolutions and GEMMs. */
	MG_CUDA_OPT_TF32,
	/* 1x1 stride-1 convolutions: 1 cuBLAS batched GEMMs (pointwise.cu,
	 * the default: 1.6-2.9x faster than cuDNN in F32 and F16), 0 cuDNN. */
	MG_CUDA_OPT_POINTWISE_GEMM,
	/* Attention on F16/BF16 with head dimension 64 or 128: 1 the
	 * tensor-core flash kernels (attention_flash.cu, the default), 0 the
	 * tiled CUDA-core kernels of llm.cu (F32 and other shapes always). */
	MG_CUDA_OPT_ATTN_FLASH,
	/* Batch norm (training) on channels of N * HW <= 4096: 1 one launch
	 * of 1-8 warps a channel holding the values in registers
	 * (batchnorm.cu's bn_small_*; opt-in until measured on a GPU), 0 the
	 * block-a-channel reduction with its folded finalise and pass (the
	 * default). */
	MG_CUDA_OPT_BN_SMALL,
	MG_CUDA_OPT_COUNT,
};
/* Set a knob (flushes cached algorithm choices). Defaults (first named)
 * can be changed in the environment: MG_CUDA_DEPTHWISE=own|cudnn,
 * MG_CUDNN_ALGO=heuristic|find, MG_CUDA_TF32=0|1,
 * MG_CUDA_POINTWISE=gemm|cudnn, MG_CUDA_ATTENTION=flash|tiled,
 * MG_CUDA_BN_SMALL=0|1. Returns 0 or -1 (error set). */
MG_EXPORT int mg_cuda_ops_set(struct mg_ctx *ctx, enum mg_cuda_opt opt,
			      int value);
/* Release the ops' per-device state (algorithm cache, descriptors,
 * scratch); mg_cuda_device_free should call it before the handles go. */
MG_EXPORT void mg_cuda_ops_free(struct mg_device *dev);

/* ---- shared helpers (state.c) ---- */

/* Per-device state of the ops, behind mg_cuda_device.ops_state. */
struct mgc_conv_entry;
struct mgc_state {
	struct mg_buf scratch; /* growable device scratch, ops-internal */
	/* Outgrown scratch buffers, kept until mg_cuda_ops_free: a CUDA
	 * graph captured earlier may still point into them. */
	struct mg_buf *retired;
	int nretired;
	int opt[MG_CUDA_OPT_COUNT];
	/* MGC_COUNTERS zeroed completion counters (cuda_reduce.cuh's
	 * folded finalise; each launch leaves them zero again). */
	struct mg_buf counters;
	struct mgc_conv_entry **table; /* algorithm cache, chained buckets */
	unsigned table_size;
	unsigned entries;
};

/* The device's ops state (created on first use); NULL on error. */
struct mgc_state *mgc_state(struct mg_ctx *ctx);
/* Device scratch of at least bytes (grown, never shrunk; an outgrown
 * buffer is kept, not freed, so graphs captured before stay valid and no
 * cudaFree synchronises the device). NULL on error. */
void *mgc_scratch(struct mg_ctx *ctx, size_t bytes);
/* Counters for one launch over up to MGC_COUNTERS channels (a grid's y
 * limit), zero on entry and left zero; allocated and zeroed (on the
 * stream) on first use. NULL on error. */
#define MGC_COUNTERS 65536
unsigned *mgc_counters(struct mg_ctx *ctx);
/* After a launch: 0, or an error naming op. */
int mgc_check_launch(const char *op);
/* Error for a dtype an op does not support. */
int mgc_bad_dtype(const char *op, enum mg_dtype dt);

/* Sizes of a 2-D convolution (conv.c fills it). */
struct mgc_conv_geom {
	int64_t N, C, H, W, K, OH, OW, kh, kw, sh, sw, ph, pw, groups;
};

/* Own depthwise kernels (depthwise.cu), groups == C == K. */
int mgc_depthwise_fwd(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
		      enum mg_dtype dt, const void *x, const void *w,
		      const void *bias, void *y);
int mgc_depthwise_bwd_data(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			   enum mg_dtype dt, const void *w, const void *dy,
			   void *dx);
/* dw += the weight gradient. */
int mgc_depthwise_bwd_filter(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			     enum mg_dtype dt, const void *x, const void *dy,
			     void *dw);
/* Band kernels for large 3x3 depthwise planes (depthwise_band.cu), also
 * with a channel multiplier K = M * C (the 1-channel stem). */
enum { MGC_DW_FWD, MGC_DW_BWD_DATA, MGC_DW_BWD_FILTER };
int mgc_dw_band_rows(const struct mgc_conv_geom *g, enum mg_dtype dt, int pass);
int mgc_dw_band_fwd(struct mg_ctx *ctx, const struct mgc_conv_geom *g, int R,
		    enum mg_dtype dt, const void *x, const void *w,
		    const void *bias, void *y);
int mgc_dw_band_bwd_data(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			 int R, enum mg_dtype dt, const void *w, const void *dy,
			 void *dx);
int mgc_dw_band_filter_slices(const struct mgc_conv_geom *g);
/* part[(k * NS + s) * 9 + t]: the NS sample slices' sums. */
int mgc_dw_band_bwd_filter(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			   int R, enum mg_dtype dt, const void *x,
			   const void *dy, double *part, int *NS);
/* 1x1 stride-1 unpadded ungrouped convolutions as GEMMs (pointwise.cu):
 * y =, dx =, dw +=. */
int mgc_pointwise_fwd(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
		      enum mg_dtype dt, const void *x, const void *w, void *y);
int mgc_pointwise_bwd_data(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			   enum mg_dtype dt, const void *w, const void *dy,
			   void *dx);
int mgc_pointwise_bwd_filter(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			     enum mg_dtype dt, const void *x, const void *dy,
			     void *dw);
/* db[c] += sum over n, hw of dy[n, c, hw] (NCHW), deterministic
 * (reduce.cu). */
int mgc_channel_sum_acc(struct mg_ctx *ctx, const char *op, enum mg_dtype dt,
			const void *dy, int64_t N, int64_t C, int64_t HW,
			void *db);
/* Drop every cached convolution plan (conv.c). */
void mgc_conv_cache_clear(struct mgc_state *st);
/* Fill n elements of dtype dt with zero, on the stream. */
int mgc_zero(struct mg_ctx *ctx, void *p, enum mg_dtype dt, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
