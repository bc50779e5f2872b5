/*
 * pref.c - CPU preference-pair ops (DPO), the reference for the CUDA
 * twins: per-token log-probabilities summed per document of each row
 * (first document: chosen, the rest of the row: rejected), their
 * backward as the token loss's (softmax - onehot) scaled per document,
 * and the DPO loss with its metrics. Token work runs on all threads
 * into a per-token array; sums then run in a fixed order, so results do
 * not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

/* log(sum(exp(row))) of K values of dtype dt, in double. */
static double row_lse(const void *base, enum mg_dtype dt, int64_t r, int64_t K)
{
	double mx = -INFINITY, s = 0;
	if (dt == MG_F64) {
		const double *row = (const double *)base + r * K;
		for (int64_t k = 0; k < K; k++)
			mx = row[k] > mx ? row[k] : mx;
		for (int64_t k = 0; k < K; k++)
			s += exp(row[k] - mx);
	} else {
		const float *row = (const float *)base + r * K;
		for (int64_t k = 0; k < K; k++)
			mx = row[k] > mx ? row[k] : mx;
		for (int64_t k = 0; k < K; k++)
			s += exp((double)row[k] - mx);
	}
	return mx + log(s);
}

static double at(const void *base, enum mg_dtype dt, int64_t i)
{
	return dt == MG_F64 ? ((const double *)base)[i]
			    : (double)((const float *)base)[i];
}

/* Document of token r (row-major [N, T]): 0 inside the row's first one. */
static int doc_of(const int32_t *pos, int64_t r, int64_t T)
{
	return r % T - pos[r] != 0;
}

static int check_labels(const char *op, const int32_t *lab, int64_t R,
			int64_t K)
{
	for (int64_t r = 0; r < R; r++)
		if (lab[r] >= K)
			return mg_error("%s: label %d of row %lld is not below "
					"the %lld classes",
					op, lab[r], (long long)r, (long long)K);
	return 0;
}

int mg_cpu_pair_logprob(struct mg_ctx *ctx, const struct mg_tensor *logits,
			const struct mg_tensor *labels,
			const struct mg_tensor *positions,
			struct mg_tensor *logp)
{
	const int64_t N = labels->shape[0], T = labels->shape[1], R = N * T;
	const int64_t K = logits->shape[logits->ndim - 1];
	const int32_t *lab = labels->data, *pos = positions->data;
	if (check_labels("pair_logprob", lab, R, K))
		return -1;
	double *lp = malloc((size_t)(R ? R : 1) * sizeof *lp);
	if (!lp)
		return mg_error("pair_logprob: out of memory");
	const int nt = mgo_threads_for(ctx, R * K * 4);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < R; r++)
		lp[r] = lab[r] < 0 ? 0
				   : at(logits->data, logits->dtype,
					r * K + lab[r]) -
					     row_lse(logits->data,
						     logits->dtype, r, K);
	for (int64_t n = 0; n < N; n++) {
		double s[2] = {0, 0};
		for (int64_t t = 0; t < T; t++) {
			const int64_t r = n * T + t;
			if (lab[r] >= 0)
				s[doc_of(pos, r, T)] += lp[r];
		}
		mgo_set(logp, 2 * n, s[0]);
		mgo_set(logp, 2 * n + 1, s[1]);
	}
	free(lp);
	return 0;
}

int mg_cpu_pair_logprob_backward(struct mg_ctx *ctx,
				 const struct mg_tensor *logits,
				 const struct mg_tensor *labels,
				 const struct mg_tensor *positions,
				 const struct mg_tensor *dlogp,
				 struct mg_tensor *dlogits)
{
	const int64_t T = labels->shape[1], R = labels->shape[0] * T;
	const int64_t K = logits->shape[logits->ndim - 1];
	const int32_t *lab = labels->data, *pos = positions->data;
	const enum mg_dtype dt = logits->dtype;
	if (check_labels("pair_logprob_backward", lab, R, K))
		return -1;
	const int nt = mgo_threads_for(ctx, R * K * 4);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < R; r++) {
		const int32_t y = lab[r];
		double lse = 0, s = 0;
		if (y >= 0) {
			lse = row_lse(logits->data, dt, r, K);
			/* d logp / d logits = onehot - softmax */
			s = -mgo_get(dlogp, 2 * (r / T) + doc_of(pos, r, T));
		}
		for (int64_t k = 0; k < K; k++) {
			double g = 0;
			if (y >= 0)
				g = (exp(at(logits->data, dt, r * K + k) -
					 lse) -
				     (k == y ? 1.0 : 0.0)) *
				    s;
			if (dt == MG_F64)
				((double *)dlogits->data)[r * K + k] = g;
			else
				((float *)dlogits->data)[r * K + k] = (float)g;
		}
	}
	return 0;
}

/* -log sigmoid(x) = softplus(-x), without overflow. */
static double nls(double x)
{
	return x >= 0 ? log1p(exp(-x)) : -x + log1p(exp(x));
}

static double sigm(double x)
{
	return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

int mg_cpu_dpo_loss(struct mg_ctx *ctx, const struct mg_tensor *logp,
		    const struct mg_tensor *ref, double beta, double eps,
		    struct mg_tensor *metrics)
{
	(void)ctx;
	double m[MG_DPO_NSUMS] = {0};
	const int64_t N = logp->shape[0];
	for (int64_t n = 0; n < N; n++) {
		const double pc = mgo_get(logp, 2 * n),
			     pr = mgo_get(logp, 2 * n + 1);
		const double rc = beta * (pc - mgo_get(ref, 2 * n)),
			     rr = beta * (pr - mgo_get(ref, 2 * n + 1));
		const double z = rc - rr;
		m[MG_METRIC_LOSS_SUM] += (1 - eps) * nls(z) + eps * nls(-z);
		m[MG_METRIC_CORRECT] += rc > rr;
		m[MG_METRIC_COUNT] += 1;
		m[MG_DPO_REWARD_CHOSEN] += rc;
		m[MG_DPO_REWARD_REJECTED] += rr;
		m[MG_DPO_MARGIN] += z;
		m[MG_DPO_LOGP_CHOSEN] += pc;
		m[MG_DPO_LOGP_REJECTED] += pr;
	}
	for (int i = 0; i < MG_DPO_NSUMS; i++)
		mgo_set(metrics, i, m[i]);
	return 0;
}

int mg_cpu_dpo_loss_backward(struct mg_ctx *ctx, const struct mg_tensor *logp,
			     const struct mg_tensor *ref, double beta,
			     double eps, const struct mg_tensor *scale,
			     struct mg_tensor *dlogp)
{
	(void)ctx;
	const double s = scale ? (double)*(const float *)scale->data : 1.0;
	for (int64_t n = 0; n < logp->shape[0]; n++) {
		const double z =
			beta * (mgo_get(logp, 2 * n) - mgo_get(ref, 2 * n)) -
			beta * (mgo_get(logp, 2 * n + 1) -
				mgo_get(ref, 2 * n + 1));
		/* d/dz of (1 - eps) softplus(-z) + eps softplus(z) */
		const double g = -(1 - eps) * sigm(-z) + eps * sigm(z);
		mgo_set(dlogp, 2 * n, g * beta * s);
		mgo_set(dlogp, 2 * n + 1, -g * beta * s);
	}
	return 0;
}
