/*
 * cpu_ops.h - private helpers shared by the CPU NN ops: argument checks
 * that produce readable errors, the OpenMP thread count, scratch memory,
 * typed GEMM wrappers, and the macros the *_impl.h type templates use.
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

#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
/* After the shared checks: run the op's CUDA twin (core/ops/cuda, same
 * arguments) when ctx computes on a CUDA device. */
#define MGO_CUDA(ctx, call)                                                    \
	do {                                                                   \
		if ((ctx)->dev->kind == MG_DEV_CUDA)                           \
			return (call);                                         \
	} while (0)
#else
#define MGO_CUDA(ctx, call) ((void)0)
#endif

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

/* Does ctx have a usable device? Errors name the op. */
int mgo_check_ctx(const char *op, const struct mg_ctx *ctx);

/*
 * Check a tensor argument: present, data set (unless it has no elements),
 * on ctx's device, of dtype dt (dt < 0: MG_F32 or MG_F64) and with ndim
 * dims (ndim < 0: any). Errors name the op and the argument.
 */
int mgo_check(const char *op, const char *name, const struct mg_ctx *ctx,
	      const struct mg_tensor *t, int dt, int ndim);
/* Same check, but t may be NULL (an optional argument). */
int mgo_check_opt(const char *op, const char *name, const struct mg_ctx *ctx,
		  const struct mg_tensor *t, int dt, int ndim);
/* Equal shapes (ndim and every dim); error shows both. */
int mgo_same_shape(const char *op, const char *an, const struct mg_tensor *a,
		   const char *bn, const struct mg_tensor *b);
/* t is exactly [n] (one dimension). */
int mgo_check_vec(const char *op, const char *name, const struct mg_tensor *t,
		  int64_t n);
/* Format a shape as "[2, 3, 4]" into buf (returns buf). */
const char *mgo_shape_str(const struct mg_tensor *t, char *buf, size_t len);
/* The error for a device kind without an implementation of op (a CUDA
 * context in a build without the CUDA backend). */
int mgo_no_device(const char *op, const struct mg_ctx *ctx);

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

/* A validated 2-D convolution's sizes (conv.c fills it). */
struct mgo_conv_geom {
	int64_t N, C, H, W; /* input */
	int64_t K, OH, OW;  /* output channels and extent */
	int64_t kh, kw;	    /* window */
	int64_t sh, sw;	    /* stride */
	int64_t ph, pw;	    /* padding */
	int64_t groups;
	int64_t Cg, Kg; /* channels per group in and out */
	int64_t krow;	/* GEMM depth per group: Cg * kh * kw */
	int64_t HW, OHW;
	bool pointwise; /* 1x1, stride 1, no padding: im2col is a copy */
};

/* Depthwise kernels (depthwise.c), for groups == C == K. */
int mgo_depthwise_fwd(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		      const struct mg_tensor *x, const struct mg_tensor *w,
		      const struct mg_tensor *bias, struct mg_tensor *y);
int mgo_depthwise_bwd(struct mg_ctx *ctx, const struct mgo_conv_geom *g,
		      const struct mg_tensor *x, const struct mg_tensor *w,
		      const struct mg_tensor *dy, struct mg_tensor *dx,
		      struct mg_tensor *dw, struct mg_tensor *dbias,
		      struct mg_buf *ws);

#endif
