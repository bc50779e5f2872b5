/*
 * pref.c - the public preference-pair ops (DPO): sequence
 * log-probabilities of the two documents packed in each row, and the DPO
 * loss over pairs. Checks, then the device's backend. Kept apart from
 * the token loss (loss.c) because their shapes are per pair, not per row
 * of logits.
 */
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

/* logits [N * T, K] or [N, T, K] with labels and positions I32 [N, T];
 * v [N, 2] of dtype vdt (F32, or F64 for F64 logits). */
static int pair_check(const char *op, struct mg_ctx *ctx,
		      const struct mg_tensor *logits,
		      const struct mg_tensor *labels,
		      const struct mg_tensor *positions, const char *vn,
		      const struct mg_tensor *v)
{
	if (mgo_check_ctx(op, ctx) ||
	    mgo_check(op, "logits", ctx, logits, -1, -1) ||
	    mgo_check(op, "labels", ctx, labels, MG_I32, 2) ||
	    mgo_check(op, "positions", ctx, positions, MG_I32, 2) ||
	    mgo_same_shape(op, "positions", positions, "labels", labels))
		return -1;
	const enum mg_dtype vdt = logits->dtype == MG_F64 ? MG_F64 : MG_F32;
	if (mgo_check(op, vn, ctx, v, (int)vdt, 2))
		return -1;
	const int64_t N = labels->shape[0], T = labels->shape[1];
	if (logits->ndim < 2 || logits->shape[logits->ndim - 1] < 1 ||
	    mg_tensor_numel(logits) / logits->shape[logits->ndim - 1] !=
		    N * T) {
		char sl[96], sb[96];
		return mg_error("%s: logits %s do not hold one row per label "
				"of %s",
				op, mgo_shape_str(logits, sl, sizeof sl),
				mgo_shape_str(labels, sb, sizeof sb));
	}
	if (v->shape[0] != N || v->shape[1] != 2) {
		char s[96];
		return mg_error("%s: %s is %s, need [%lld, 2]", op, vn,
				mgo_shape_str(v, s, sizeof s), (long long)N);
	}
	return 0;
}

int mg_op_pair_logprob(struct mg_ctx *ctx, const struct mg_tensor *logits,
		       const struct mg_tensor *labels,
		       const struct mg_tensor *positions,
		       struct mg_tensor *logp)
{
	static const char op[] = "pair_logprob";
	if (pair_check(op, ctx, logits, labels, positions, "logp", logp))
		return -1;
	MGO_DISPATCH(
		op, ctx,
		mg_cpu_pair_logprob(ctx, logits, labels, positions, logp),
		mg_cuda_pair_logprob(ctx, logits, labels, positions, logp));
}

int mg_op_pair_logprob_backward(struct mg_ctx *ctx,
				const struct mg_tensor *logits,
				const struct mg_tensor *labels,
				const struct mg_tensor *positions,
				const struct mg_tensor *dlogp,
				struct mg_tensor *dlogits)
{
	static const char op[] = "pair_logprob_backward";
	if (pair_check(op, ctx, logits, labels, positions, "dlogp", dlogp) ||
	    mgo_check(op, "dlogits", ctx, dlogits, logits->dtype, -1) ||
	    mgo_same_shape(op, "dlogits", dlogits, "logits", logits))
		return -1;
	MGO_DISPATCH(op, ctx,
		     mg_cpu_pair_logprob_backward(ctx, logits, labels,
						  positions, dlogp, dlogits),
		     mg_cuda_pair_logprob_backward(ctx, logits, labels,
						   positions, dlogp, dlogits));
}

/* logp and ref [N, 2] of one float dtype; beta > 0, eps in [0, 0.5]. */
static int dpo_check(const char *op, struct mg_ctx *ctx,
		     const struct mg_tensor *logp, const struct mg_tensor *ref,
		     double beta, double eps)
{
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "logp", ctx, logp, -1, 2) ||
	    mgo_check(op, "ref", ctx, ref, (int)logp->dtype, 2) ||
	    mgo_same_shape(op, "ref", ref, "logp", logp))
		return -1;
	if (logp->shape[1] != 2)
		return mg_error("%s: logp has %lld columns, need 2 (chosen, "
				"rejected)",
				op, (long long)logp->shape[1]);
	if (!(beta > 0) || !(eps >= 0 && eps <= 0.5))
		return mg_error("%s: beta %g must be > 0 and label_smoothing "
				"%g in [0, 0.5]",
				op, beta, eps);
	return 0;
}

int mg_op_dpo_loss(struct mg_ctx *ctx, const struct mg_tensor *logp,
		   const struct mg_tensor *ref, double beta,
		   double label_smoothing, struct mg_tensor *metrics)
{
	static const char op[] = "dpo_loss";
	if (dpo_check(op, ctx, logp, ref, beta, label_smoothing) ||
	    mgo_check(op, "metrics", ctx, metrics, -1, -1))
		return -1;
	if (mg_tensor_numel(metrics) < MG_DPO_NSUMS)
		return mg_error("%s: metrics hold %lld values, need %d", op,
				(long long)mg_tensor_numel(metrics),
				MG_DPO_NSUMS);
	MGO_DISPATCH(
		op, ctx,
		mg_cpu_dpo_loss(ctx, logp, ref, beta, label_smoothing, metrics),
		mg_cuda_dpo_loss(ctx, logp, ref, beta, label_smoothing,
				 metrics));
}

int mg_op_dpo_loss_backward(struct mg_ctx *ctx, const struct mg_tensor *logp,
			    const struct mg_tensor *ref, double beta,
			    double label_smoothing,
			    const struct mg_tensor *scale,
			    struct mg_tensor *dlogp)
{
	static const char op[] = "dpo_loss_backward";
	if (dpo_check(op, ctx, logp, ref, beta, label_smoothing) ||
	    mgo_check_opt(op, "scale", ctx, scale, MG_F32, -1) ||
	    mgo_check(op, "dlogp", ctx, dlogp, (int)logp->dtype, 2) ||
	    mgo_same_shape(op, "dlogp", dlogp, "logp", logp))
		return -1;
	if (scale && mg_tensor_numel(scale) != 1)
		return mg_error("%s: scale must be one value, has %lld", op,
				(long long)mg_tensor_numel(scale));
	MGO_DISPATCH(op, ctx,
		     mg_cpu_dpo_loss_backward(ctx, logp, ref, beta,
					      label_smoothing, scale, dlogp),
		     mg_cuda_dpo_loss_backward(ctx, logp, ref, beta,
					       label_smoothing, scale, dlogp));
}
