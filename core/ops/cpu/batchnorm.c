/*
 * batchnorm.c - 2-D batch normalisation with an optional fused ReLU6
 * (mg_op_batchnorm2d*), PyTorch semantics: training normalises with the
 * batch mean and biased variance and moves the running statistics toward
 * the batch mean and unbiased variance; eval uses the running statistics.
 * Fusing the activation saves a pass over the tensor each way and the
 * memory of the pre-activation values (the mask comes from the output).
 */
#include <math.h>

#include "cpu_ops.h"

/* Longest run of contiguous elements a batch-norm tile sweeps at once;
 * its per-element accumulators live on the stack (7 arrays of BN_SEG). */
#define BN_SEG 1024

/*
 * Channels per tile: whole planes up to BN_SEG elements, but at least ~16
 * tiles when there are channels enough, for load balance. Only channels
 * larger than BN_SEG are split (then one per tile), and that depends on
 * HW alone, so sums do not depend on the tiling or the thread count.
 */
static void bn_tiling(int64_t C, int64_t HW, int64_t *cpt, int64_t *ntiles)
{
	int64_t k = HW >= BN_SEG ? 1 : BN_SEG / HW;
	const int64_t bal = (C + 15) / 16;
	if (k > bal)
		k = bal;
	if (k < 1)
		k = 1;
	*cpt = k;
	*ntiles = (C + k - 1) / k;
}

/*
 * Segment sg of the tile of channels [c0, c1): its planes whole when they
 * fit BN_SEG, else (one channel per tile) the plane in BN_SEG pieces. j0
 * is the segment's offset within a sample, L its length, qoff its offset
 * within its first channel. False past the last segment.
 */
static bool bn_segment(int64_t c0, int64_t c1, int64_t HW, int64_t sg,
		       int64_t *j0, int64_t *L, int64_t *qoff)
{
	if (c1 - c0 == 1 && HW > BN_SEG) {
		const int64_t q0 = sg * BN_SEG;
		if (q0 >= HW)
			return false;
		*j0 = c0 * HW + q0;
		*L = HW - q0 < BN_SEG ? HW - q0 : BN_SEG;
		*qoff = q0;
		return true;
	}
	if (sg > 0)
		return false;
	*j0 = c0 * HW;
	*L = (c1 - c0) * HW;
	*qoff = 0;
	return true;
}

#define T float
#define FN(n) n##_f32
#include "batchnorm_impl.h"
#define T double
#define FN(n) n##_f64
#include "batchnorm_impl.h"

static int bn_check_args(const char *op, const struct mg_bn_args *a)
{
	if (!a)
		return mg_error("%s: no batch-norm arguments", op);
	if (!(a->eps > 0) || !(a->momentum >= 0 && a->momentum <= 1))
		return mg_error("%s: eps %g must be > 0 and momentum %g in "
				"[0, 1]",
				op, a->eps, a->momentum);
	if (a->act != MG_ACT_NONE && a->act != MG_ACT_RELU6)
		return mg_error("%s: unknown activation %d", op, (int)a->act);
	return 0;
}

/* dtype of per-channel tensors (gamma, beta, saved statistics and their
 * gradients): x's, or F32 when x is F16/BF16 (mixed precision). */
static int bn_param_dtype(const struct mg_tensor *x)
{
	return x->dtype == MG_F16 || x->dtype == MG_BF16 ? MG_F32 : x->dtype;
}

/* A per-channel vector argument: dtype dt (< 0: F32 or F64), shape [C]. */
static int bn_vec(const char *op, const char *name, struct mg_ctx *ctx,
		  const struct mg_tensor *t, int dt, int64_t C, bool optional)
{
	if (!t && optional)
		return 0;
	return mgo_check(op, name, ctx, t, dt, 1) ||
	       mgo_check_vec(op, name, t, C);
}

int mg_op_batchnorm2d(struct mg_ctx *ctx, const struct mg_bn_args *a,
		      const struct mg_tensor *x, const struct mg_tensor *gamma,
		      const struct mg_tensor *beta,
		      struct mg_tensor *running_mean,
		      struct mg_tensor *running_var,
		      struct mg_tensor *save_mean,
		      struct mg_tensor *save_invstd, struct mg_tensor *y)
{
	static const char op[] = "batchnorm2d";
	if (mgo_check_ctx(op, ctx) || bn_check_args(op, a) ||
	    mgo_check(op, "x", ctx, x, -1, 4) ||
	    mgo_check(op, "y", ctx, y, x->dtype, 4) ||
	    mgo_same_shape(op, "y", y, "x", x))
		return -1;
	const int64_t N = x->shape[0], C = x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	if (bn_vec(op, "gamma", ctx, gamma, bn_param_dtype(x), C, false) ||
	    bn_vec(op, "beta", ctx, beta, bn_param_dtype(x), C, false) ||
	    bn_vec(op, "running_mean", ctx, running_mean, -1, C, a->training) ||
	    bn_vec(op, "running_var", ctx, running_var, -1, C, a->training) ||
	    bn_vec(op, "save_mean", ctx, save_mean, bn_param_dtype(x), C,
		   true) ||
	    bn_vec(op, "save_invstd", ctx, save_invstd, bn_param_dtype(x), C,
		   true))
		return -1;
	if (a->training && N * HW < 2) {
		char s[96];
		return mg_error("%s: training needs more than one value per "
				"channel, input is %s",
				op, mgo_shape_str(x, s, sizeof s));
	}
	MGO_CUDA(ctx,
		 mg_cuda_batchnorm2d(ctx, a, x, gamma, beta, running_mean,
				     running_var, save_mean, save_invstd, y));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int nt = mgo_threads_for(ctx, N * C * HW);
	if (x->dtype == MG_F32)
		bn_fwd_f32(a, N, C, HW, x->data, gamma->data, beta->data,
			   running_mean, running_var,
			   save_mean ? save_mean->data : NULL,
			   save_invstd ? save_invstd->data : NULL, y->data, nt);
	else
		bn_fwd_f64(a, N, C, HW, x->data, gamma->data, beta->data,
			   running_mean, running_var,
			   save_mean ? save_mean->data : NULL,
			   save_invstd ? save_invstd->data : NULL, y->data, nt);
	return 0;
}

int mg_op_batchnorm2d_backward(
	struct mg_ctx *ctx, const struct mg_bn_args *a,
	const struct mg_tensor *x, const struct mg_tensor *y,
	const struct mg_tensor *dy, const struct mg_tensor *gamma,
	const struct mg_tensor *save_mean, const struct mg_tensor *save_invstd,
	struct mg_tensor *dx, struct mg_tensor *dgamma, struct mg_tensor *dbeta)
{
	static const char op[] = "batchnorm2d_backward";
	if (mgo_check_ctx(op, ctx) || bn_check_args(op, a) ||
	    mgo_check(op, "x", ctx, x, -1, 4) ||
	    mgo_check(op, "dy", ctx, dy, x->dtype, 4) ||
	    mgo_same_shape(op, "dy", dy, "x", x) ||
	    mgo_check_opt(op, "dx", ctx, dx, x->dtype, 4) ||
	    (dx && mgo_same_shape(op, "dx", dx, "x", x)))
		return -1;
	if (a->act != MG_ACT_NONE &&
	    (mgo_check(op, "y (needed by the activation)", ctx, y, x->dtype,
		       4) ||
	     mgo_same_shape(op, "y", y, "x", x)))
		return -1;
	const int64_t N = x->shape[0], C = x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	if (bn_vec(op, "gamma", ctx, gamma, bn_param_dtype(x), C, false) ||
	    bn_vec(op, "save_mean", ctx, save_mean, bn_param_dtype(x), C,
		   false) ||
	    bn_vec(op, "save_invstd", ctx, save_invstd, bn_param_dtype(x), C,
		   false) ||
	    bn_vec(op, "dgamma", ctx, dgamma, bn_param_dtype(x), C, true) ||
	    bn_vec(op, "dbeta", ctx, dbeta, bn_param_dtype(x), C, true))
		return -1;
	MGO_CUDA(ctx, mg_cuda_batchnorm2d_backward(ctx, a, x, y, dy, gamma,
						   save_mean, save_invstd, dx,
						   dgamma, dbeta));
	if (ctx->dev->kind != MG_DEV_CPU)
		return mgo_no_device(op, ctx);
	const int nt = mgo_threads_for(ctx, N * C * HW);
	const void *yd = a->act != MG_ACT_NONE ? y->data : NULL;
	if (x->dtype == MG_F32)
		bn_bwd_f32(a, N, C, HW, x->data, yd, dy->data, gamma->data,
			   save_mean->data, save_invstd->data,
			   dx ? dx->data : NULL, dgamma ? dgamma->data : NULL,
			   dbeta ? dbeta->data : NULL, nt);
	else
		bn_bwd_f64(a, N, C, HW, x->data, yd, dy->data, gamma->data,
			   save_mean->data, save_invstd->data,
			   dx ? dx->data : NULL, dgamma ? dgamma->data : NULL,
			   dbeta ? dbeta->data : NULL, nt);
	return 0;
}
