/*
 * batchnorm.c - the public 2-D batch normalisation ops with an optional
 * fused ReLU6 (mg_op_batchnorm2d*): checks, then the device's backend.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

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
	MGO_DISPATCH(op, ctx,
		     mg_cpu_batchnorm2d(ctx, a, x, gamma, beta, running_mean,
					running_var, save_mean, save_invstd, y),
		     mg_cuda_batchnorm2d(ctx, a, x, gamma, beta, running_mean,
					 running_var, save_mean, save_invstd,
					 y));
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
	const int64_t C = x->shape[1];
	if (bn_vec(op, "gamma", ctx, gamma, bn_param_dtype(x), C, false) ||
	    bn_vec(op, "save_mean", ctx, save_mean, bn_param_dtype(x), C,
		   false) ||
	    bn_vec(op, "save_invstd", ctx, save_invstd, bn_param_dtype(x), C,
		   false) ||
	    bn_vec(op, "dgamma", ctx, dgamma, bn_param_dtype(x), C, true) ||
	    bn_vec(op, "dbeta", ctx, dbeta, bn_param_dtype(x), C, true))
		return -1;
	MGO_DISPATCH(
		op, ctx,
		mg_cpu_batchnorm2d_backward(ctx, a, x, y, dy, gamma, save_mean,
					    save_invstd, dx, dgamma, dbeta),
		mg_cuda_batchnorm2d_backward(ctx, a, x, y, dy, gamma, save_mean,
					     save_invstd, dx, dgamma, dbeta));
}
