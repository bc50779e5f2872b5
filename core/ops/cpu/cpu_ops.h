/*
 * cpu_ops.h - the CPU backend of the ops: the mg_cpu_* entry points the
 * dispatchers (core/ops/FAMILY.c) call once the arguments are checked, and
 * the helpers the CPU kernels share: the OpenMP thread count, scratch
 * memory, typed GEMM wrappers, tap ranges, and the macros the *_impl.h
 * type templates use.
 *
 * core/ops/cpu is a leaf: it includes only the mg/ headers, runtime.h and
 * ops/ops_geom.h, never the dispatch layer or another backend. Its
 * functions have hidden visibility (libmg's default) like everything not
 * declared MG_EXPORT.
 *
 * Each op family keeps its kernels in NAME_impl.h, written once against
 * the macros T (element type) and FN(name) (type-suffixed function name),
 * and its NAME.c includes that file twice, once for float and once for
 * double, then dispatches on the tensors' dtype.
 */
#ifndef MG_CPU_OPS_H
#define MG_CPU_OPS_H

#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mg/mg.h"

#include "ops/ops_geom.h"

/* Work (elements) below which a loop is not worth parallelising. */
#define MGO_PAR_MIN 32768

/* OpenMP threads for ops: the device's setting, else OpenMP's default. */
static inline int mgo_threads(const struct mg_ctx *ctx)
{
	if (ctx->dev && ctx->dev->threads > 0)
		return ctx->dev->threads;
	return omp_get_max_threads();
}

/* Threads to use for `work` elements of simple element-wise work. */
static inline int mgo_threads_for(const struct mg_ctx *ctx, int64_t work)
{
	return work < MGO_PAR_MIN ? 1 : mgo_threads(ctx);
}

/* Read and write element i of an F32 or F64 tensor as double (small
 * per-channel vectors only). */
static inline double mgo_get(const struct mg_tensor *t, int64_t i)
{
	return t->dtype == MG_F64 ? ((const double *)t->data)[i]
				  : (double)((const float *)t->data)[i];
}

static inline void mgo_set(struct mg_tensor *t, int64_t i, double v)
{
	if (t->dtype == MG_F64)
		((double *)t->data)[i] = v;
	else
		((float *)t->data)[i] = (float)v;
}

/*
 * Scratch memory: ws if the caller gave one (grown to bytes), else a
 * private allocation released by mgo_scratch_done(). Contents undefined.
 */
struct mgo_scratch {
	struct mg_buf own;
	struct mg_buf *buf;
};
void *mgo_scratch_get(struct mg_ctx *ctx, struct mgo_scratch *s,
		      struct mg_buf *ws, size_t bytes);
void mgo_scratch_done(struct mg_ctx *ctx, struct mgo_scratch *s);

/*
 * Row-major GEMM, C = alpha * op(A) op(B) + beta * C, one per type so the
 * templates can write FN(mgo_gemm) (gemm.c). nt is the op's OpenMP thread
 * count: when OpenBLAS runs single-threaded (openblas_set_num_threads(1),
 * the right set-up for a process whose ops are OpenMP-parallel), large
 * GEMMs are split into fixed blocks of C run by the OpenMP threads;
 * otherwise OpenBLAS parallelises on its own.
 */
void mgo_gemm_f32(int nt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
		  float alpha, const float *a, int64_t lda, const float *b,
		  int64_t ldb, float beta, float *c, int64_t ldc);
void mgo_gemm_f64(int nt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
		  double alpha, const double *a, int64_t lda, const double *b,
		  int64_t ldb, double beta, double *c, int64_t ldc);

/*
 * Output positions o in [*lo, *hi) of a strided, padded window whose tap
 * `tap` lands inside the input: 0 <= o * s - p + tap < in.
 */
static inline void mgo_tap_range(int64_t out, int64_t in, int64_t s, int64_t p,
				 int64_t tap, int64_t *lo, int64_t *hi)
{
	int64_t a = p - tap, b = in - 1 + p - tap;
	*lo = a <= 0 ? 0 : (a + s - 1) / s;
	*hi = b < 0 ? 0 : b / s + 1;
	if (*hi > out)
		*hi = out;
	if (*lo > *hi)
		*lo = *hi;
}

/* ReLU6 on one value, and its pass-through test from the output. Written
 * without short-circuits so that loops using them vectorise (select and
 * min/max instructions, no branches). */
#define MGO_RELU6(v) ((v) > 0 ? ((v) < 6 ? (v) : 6) : 0)
#define MGO_RELU6_PASS(y) (((y) > 0) & ((y) < 6))

/* Depthwise kernels (depthwise.c), for groups == C == K. */
int mgo_depthwise_fwd(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		      const struct mg_tensor *x, const struct mg_tensor *w,
		      const struct mg_tensor *bias, struct mg_tensor *y);
int mgo_depthwise_bwd(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		      const struct mg_tensor *x, const struct mg_tensor *w,
		      const struct mg_tensor *dy, struct mg_tensor *dx,
		      struct mg_tensor *dw, struct mg_tensor *dbias,
		      struct mg_buf *ws);

/*
 * The CPU backend: each mg_cpu_NAME() takes the arguments of the public
 * mg_op_NAME() (include/mg/ops_nn.h, ops_image.h, tensor.h, optim.h),
 * already validated by it, and computes on the host. The convolutions take
 * the geometry the dispatcher computed instead of the mg_conv2d_args.
 */
int mg_cpu_conv2d(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		  const struct mg_tensor *x, const struct mg_tensor *w,
		  const struct mg_tensor *bias, struct mg_tensor *y,
		  struct mg_buf *ws);
int mg_cpu_conv2d_backward(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
			   const struct mg_tensor *x, const struct mg_tensor *w,
			   const struct mg_tensor *dy, struct mg_tensor *dx,
			   struct mg_tensor *dw, struct mg_tensor *dbias,
			   struct mg_buf *ws);
int mg_cpu_batchnorm2d(struct mg_ctx *ctx, const struct mg_bn_args *a,
		       const struct mg_tensor *x, const struct mg_tensor *gamma,
		       const struct mg_tensor *beta,
		       struct mg_tensor *running_mean,
		       struct mg_tensor *running_var,
		       struct mg_tensor *save_mean,
		       struct mg_tensor *save_invstd, struct mg_tensor *y);
int mg_cpu_batchnorm2d_backward(struct mg_ctx *ctx, const struct mg_bn_args *a,
				const struct mg_tensor *x,
				const struct mg_tensor *y,
				const struct mg_tensor *dy,
				const struct mg_tensor *gamma,
				const struct mg_tensor *save_mean,
				const struct mg_tensor *save_invstd,
				struct mg_tensor *dx, struct mg_tensor *dgamma,
				struct mg_tensor *dbeta);
int mg_cpu_relu6(struct mg_ctx *ctx, const struct mg_tensor *x,
		 struct mg_tensor *y);
int mg_cpu_relu6_backward(struct mg_ctx *ctx, const struct mg_tensor *y,
			  const struct mg_tensor *dy, struct mg_tensor *dx);
int mg_cpu_add(struct mg_ctx *ctx, const struct mg_tensor *a,
	       const struct mg_tensor *b, struct mg_tensor *y);
int mg_cpu_add_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
			struct mg_tensor *da, struct mg_tensor *db);
int mg_cpu_dropout(struct mg_ctx *ctx, const struct mg_tensor *x,
		   struct mg_tensor *y, double p, uint64_t key, int64_t offset);
int mg_cpu_dropout_backward(struct mg_ctx *ctx, const struct mg_tensor *dy,
			    struct mg_tensor *dx, double p, uint64_t key,
			    int64_t offset);
int mg_cpu_global_avgpool(struct mg_ctx *ctx, const struct mg_tensor *x,
			  struct mg_tensor *y);
int mg_cpu_global_avgpool_backward(struct mg_ctx *ctx,
				   const struct mg_tensor *dy,
				   struct mg_tensor *dx);
int mg_cpu_linear(struct mg_ctx *ctx, const struct mg_tensor *x,
		  const struct mg_tensor *w, const struct mg_tensor *b,
		  struct mg_tensor *y);
/* y += x w^T + b */
int mg_cpu_linear_add(struct mg_ctx *ctx, const struct mg_tensor *x,
		      const struct mg_tensor *w, const struct mg_tensor *b,
		      struct mg_tensor *y);
int mg_cpu_linear_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			   const struct mg_tensor *w,
			   const struct mg_tensor *dy, struct mg_tensor *dx,
			   bool dx_add, struct mg_tensor *dw,
			   struct mg_tensor *db);
/* The loss ops also check that every label is below the class count (the
 * CUDA twin cannot without a host sync). */
int mg_cpu_softmax_xent(struct mg_ctx *ctx, const struct mg_tensor *logits,
			const struct mg_tensor *labels,
			struct mg_tensor *metrics);
int mg_cpu_softmax_xent_backward(struct mg_ctx *ctx,
				 const struct mg_tensor *logits,
				 const struct mg_tensor *labels,
				 const struct mg_tensor *scale,
				 struct mg_tensor *dlogits);
int mg_cpu_pair_logprob(struct mg_ctx *ctx, const struct mg_tensor *logits,
			const struct mg_tensor *labels,
			const struct mg_tensor *positions,
			struct mg_tensor *logp);
int mg_cpu_pair_logprob_backward(struct mg_ctx *ctx,
				 const struct mg_tensor *logits,
				 const struct mg_tensor *labels,
				 const struct mg_tensor *positions,
				 const struct mg_tensor *dlogp,
				 struct mg_tensor *dlogits);
int mg_cpu_dpo_loss(struct mg_ctx *ctx, const struct mg_tensor *logp,
		    const struct mg_tensor *ref, double beta, double eps,
		    struct mg_tensor *metrics);
int mg_cpu_dpo_loss_backward(struct mg_ctx *ctx, const struct mg_tensor *logp,
			     const struct mg_tensor *ref, double beta,
			     double eps, const struct mg_tensor *scale,
			     struct mg_tensor *dlogp);
int mg_cpu_resize_normalize_u8(struct mg_ctx *ctx, const struct mg_tensor *src,
			       struct mg_tensor *dst, double mean, double std);
int mg_cpu_convert(struct mg_ctx *ctx, void *dst, enum mg_dtype dt,
		   const void *src, enum mg_dtype st, int64_t n);
int mg_cpu_optim_sumsq(struct mg_ctx *ctx, struct mg_optim_vals *vals,
		       enum mg_dtype dt, const void *grad, int64_t n);
int mg_cpu_optim_finalize(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
			  struct mg_optim_vals *vals);
int mg_cpu_optim_update(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
			const struct mg_optim_vals *vals,
			const struct mg_optim_slice *s);

/* y[0] = s / max(x[0], 1) (scalar.c). */
int mg_cpu_reciprocal_scale(const float *x, double s, float *y);

#endif
