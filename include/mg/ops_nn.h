/*
 * ops_nn.h - neural-network ops, forward and backward, dispatched on the
 * context's device (ctx->dev->kind).
 *
 * Conventions shared by every op here:
 *  - Tensors are contiguous descriptors on ctx's device; images are NCHW.
 *    All float tensors of one call share one dtype, MG_F32 or MG_F64,
 *    except where a parameter says otherwise (BN running statistics,
 *    metrics, the loss scale).
 *  - Ops return 0, or a negative value after mg_error() said what was
 *    wrong (a shape, a dtype, a device).
 *  - Backward ops write (=) activation gradients (dx) and accumulate (+=)
 *    into parameter gradients (dw, dgamma, dbeta, dbias), the model/strategy
 *    contract of model.h. Any gradient output may be NULL: not computed.
 *  - Results are deterministic run to run: every reduction has a fixed
 *    order per output, whatever the thread count.
 *  - Ops that need scratch memory take a struct mg_buf *ws that they grow
 *    with mg_buf_reserve() (category MG_MEM_ACTIVATIONS) and that the caller
 *    keeps across calls, so steady-state steps allocate nothing. ws may be
 *    NULL: the op then allocates and frees its own scratch.
 */
#ifndef MG_OPS_NN_H
#define MG_OPS_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "abi.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_ctx;

/* Activation fused after an op (batch norm). */
enum mg_act {
	MG_ACT_NONE = 0,
	MG_ACT_RELU6 = 1, /* min(max(x, 0), 6) */
};

/* ------------------------------------------------------------------ */
/* 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d).         */

struct mg_conv2d_args {
	int stride_h, stride_w; /* >= 1 */
	int pad_h, pad_w;	/* zero padding, >= 0 */
	int groups;		/* >= 1, divides Cin and Cout */
};

/* Output extent of a convolution along one dimension. */
static inline int64_t mg_conv_out_dim(int64_t in, int64_t k, int stride,
				      int pad)
{
	return (in + 2 * (int64_t)pad - k) / stride + 1;
}

/*
 * y = conv2d(x, w) + bias.
 * x [N, Cin, H, W], w [Cout, Cin/groups, kh, kw], bias [Cout] or NULL,
 * y [N, Cout, OH, OW] with OH = mg_conv_out_dim(H, kh, stride_h, pad_h).
 * Depthwise convolutions (groups == Cin == Cout) run a direct kernel;
 * others run GEMMs (1x1 stride-1 convs need no im2col).
 */
MG_EXPORT int mg_op_conv2d(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
			   const struct mg_tensor *x, const struct mg_tensor *w,
			   const struct mg_tensor *bias, struct mg_tensor *y,
			   struct mg_buf *ws);

/*
 * Backward of mg_op_conv2d given dy [N, Cout, OH, OW]:
 * dx = dL/dx (written, may be NULL), dw += dL/dw, dbias += dL/dbias
 * (each may be NULL). dx must not alias dy.
 */
MG_EXPORT int mg_op_conv2d_backward(struct mg_ctx *ctx,
				    const struct mg_conv2d_args *a,
				    const struct mg_tensor *x,
				    const struct mg_tensor *w,
				    const struct mg_tensor *dy,
				    struct mg_tensor *dx, struct mg_tensor *dw,
				    struct mg_tensor *dbias, struct mg_buf *ws);

/* ------------------------------------------------------------------ */
/* Batch normalisation over N, H, W per channel (PyTorch BatchNorm2d),  */
/* optionally followed by a fused activation.                           */

struct mg_bn_args {
	double eps;	 /* added to the variance, > 0 */
	double momentum; /* running = (1 - m) * running + m * batch */
	bool training;	 /* batch statistics (true) or running ones */
	enum mg_act act; /* activation applied after the affine step */
};

/*
 * y = act(gamma * (x - mean) * invstd + beta), x and y [N, C, H, W]
 * (y may alias x), gamma and beta [C].
 *
 * Training: mean and the biased variance come from the batch; the running
 * statistics (may be NULL) are updated with the unbiased variance, as
 * PyTorch does; N*H*W must exceed 1. Eval: the running statistics are used
 * and not changed. running_mean/running_var are [C], F32 or F64
 * independently of x (they live in the master dtype).
 *
 * save_mean/save_invstd [C] (x's dtype) receive the mean and 1/sqrt(var +
 * eps) used, for the backward; they may be NULL when no backward follows.
 */
MG_EXPORT int
mg_op_batchnorm2d(struct mg_ctx *ctx, const struct mg_bn_args *a,
		  const struct mg_tensor *x, const struct mg_tensor *gamma,
		  const struct mg_tensor *beta, struct mg_tensor *running_mean,
		  struct mg_tensor *running_var, struct mg_tensor *save_mean,
		  struct mg_tensor *save_invstd, struct mg_tensor *y);

/*
 * Backward of mg_op_batchnorm2d with the same args. x is the forward input,
 * y its output (needed only when a->act != MG_ACT_NONE, else may be NULL),
 * save_mean/save_invstd what the forward saved. a->training selects the
 * batch-statistics gradient (training) or the affine-only one (frozen BN).
 * dx is written (may alias dy); dgamma, dbeta accumulate; any may be NULL.
 */
MG_EXPORT int mg_op_batchnorm2d_backward(
	struct mg_ctx *ctx, const struct mg_bn_args *a,
	const struct mg_tensor *x, const struct mg_tensor *y,
	const struct mg_tensor *dy, const struct mg_tensor *gamma,
	const struct mg_tensor *save_mean, const struct mg_tensor *save_invstd,
	struct mg_tensor *dx, struct mg_tensor *dgamma,
	struct mg_tensor *dbeta);

/* ------------------------------------------------------------------ */
/* Element-wise ops (any shape, equal numel).                           */

/* y = min(max(x, 0), 6); y may alias x. */
MG_EXPORT int mg_op_relu6(struct mg_ctx *ctx, const struct mg_tensor *x,
			  struct mg_tensor *y);
/* dx = dy where 0 < y < 6, else 0; from the forward output y (equivalent
 * to testing the input). dx may alias dy. */
MG_EXPORT int mg_op_relu6_backward(struct mg_ctx *ctx,
				   const struct mg_tensor *y,
				   const struct mg_tensor *dy,
				   struct mg_tensor *dx);

/* y = a + b (residual add); y may alias a or b. */
MG_EXPORT int mg_op_add(struct mg_ctx *ctx, const struct mg_tensor *a,
			const struct mg_tensor *b, struct mg_tensor *y);
/* Backward of y = a + b: da += dy, db += dy (either may be NULL). */
MG_EXPORT int mg_op_add_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
				 struct mg_tensor *da, struct mg_tensor *db);

/* ------------------------------------------------------------------ */
/* Pooling and fully connected layers.                                  */

/* y[n, c] = mean over H, W of x[n, c]; x [N, C, H, W], y [N, C] (or
 * [N, C, 1, 1]). */
MG_EXPORT int mg_op_global_avgpool(struct mg_ctx *ctx,
				   const struct mg_tensor *x,
				   struct mg_tensor *y);
/* dx[n, c, h, w] = dy[n, c] / (H * W) (written). */
MG_EXPORT int mg_op_global_avgpool_backward(struct mg_ctx *ctx,
					    const struct mg_tensor *dy,
					    struct mg_tensor *dx);

/*
 * y = x w^T + b. x [..., in] (rows = all leading dims), w [out, in],
 * b [out] or NULL, y [..., out] with the same leading dims.
 */
MG_EXPORT int mg_op_linear(struct mg_ctx *ctx, const struct mg_tensor *x,
			   const struct mg_tensor *w, const struct mg_tensor *b,
			   struct mg_tensor *y);
/* y += x w^T + b (b may be NULL), the shapes of mg_op_linear: a
 * projection whose output already holds another term (a LoRA adapter's
 * s B A x) adds its own in the GEMM's epilogue, where reading y hides
 * under the product, instead of a separate pass over y. ABI 1.13. */
MG_EXPORT int mg_op_linear_add(struct mg_ctx *ctx, const struct mg_tensor *x,
			       const struct mg_tensor *w,
			       const struct mg_tensor *b, struct mg_tensor *y);
/* dx = dy w (written), dw += dy^T x, db += column sums of dy. */
MG_EXPORT int mg_op_linear_backward(struct mg_ctx *ctx,
				    const struct mg_tensor *x,
				    const struct mg_tensor *w,
				    const struct mg_tensor *dy,
				    struct mg_tensor *dx, struct mg_tensor *dw,
				    struct mg_tensor *db);
/* mg_op_linear_backward with dx += dy w (dx required): a layer whose
 * input feeds several projections (q, k, v; gate, up) sums their input
 * gradients in the GEMMs' epilogue instead of a separate add. ABI 1.5. */
MG_EXPORT int
mg_op_linear_backward_add(struct mg_ctx *ctx, const struct mg_tensor *x,
			  const struct mg_tensor *w, const struct mg_tensor *dy,
			  struct mg_tensor *dx, struct mg_tensor *dw,
			  struct mg_tensor *db);

/* ------------------------------------------------------------------ */
/* Dropout with a counter-based mask.                                   */

/*
 * y = x * keep / (1 - p), keep = mg_rng_uniform(k, offset + i) >= p for
 * element i of x (row-major), k = mg_rng_key(key, step). The mask is a pure
 * function of (key, step, global element index): the caller passes a key
 * fixed for the run and offset = index of x's first element in the global
 * batch, so a split of the batch over ranks draws what one rank would.
 * step is ctx->step; the CUDA twin reads it from ctx->optim_vals->step
 * when set, so a training step captured as a CUDA graph draws a new mask
 * at every replay. p in [0, 1]; p == 1 gives zeros. y may alias x.
 */
MG_EXPORT int mg_op_dropout(struct mg_ctx *ctx, const struct mg_tensor *x,
			    struct mg_tensor *y, double p, uint64_t key,
			    int64_t offset);
/* dx = dy * keep / (1 - p) with the forward's (p, key, offset); dx may
 * alias dy. */
MG_EXPORT int mg_op_dropout_backward(struct mg_ctx *ctx,
				     const struct mg_tensor *dy,
				     struct mg_tensor *dx, double p,
				     uint64_t key, int64_t offset);

/* ------------------------------------------------------------------ */
/* Softmax cross-entropy with integer labels.                           */

/*
 * logits [..., K] (rows = all leading dims), labels I32 with one value per
 * row. Rows whose label is negative are ignored (no loss, no gradient:
 * padding tokens); a label >= K is an error. Writes (=) metrics
 * [MG_METRIC_N] (model.h), F32 or F64: the sum of per-row losses
 * -log softmax(logits)[label], the rows whose first arg-max equals the
 * label, and the number of rows counted.
 */
MG_EXPORT int mg_op_softmax_xent(struct mg_ctx *ctx,
				 const struct mg_tensor *logits,
				 const struct mg_tensor *labels,
				 struct mg_tensor *metrics);
/*
 * dlogits = (softmax(logits) - onehot(label)) * scale, written; zero rows
 * for ignored labels. scale is an F32 scalar on the device
 * (ctx->grad_scale: loss scale / global count) or NULL for 1. dlogits may
 * alias logits.
 */
MG_EXPORT int mg_op_softmax_xent_backward(struct mg_ctx *ctx,
					  const struct mg_tensor *logits,
					  const struct mg_tensor *labels,
					  const struct mg_tensor *scale,
					  struct mg_tensor *dlogits);

#ifdef __cplusplus
}
#endif
#endif
