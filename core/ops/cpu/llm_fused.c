/*
 * llm_fused.c - CPU references of the fused LLM ops (ops_llm.h, ABI
 * 1.5; checks in core/ops/llm_fused.c): residual add + RMSNorm, RMSNorm
 * backward with a residual gradient, and linear + cross-entropy over
 * chunks of rows (the logits GEMM and the head's gradients through the
 * CPU linear op, one row pass between them), with an optional low-rank
 * term (a LoRA adapter on the head). F32 and F64.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_llm.h"
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "llm_fused_impl.h"
#define T double
#define FN(n) n##_f64
#include "llm_fused_impl.h"

static int64_t last_dim(const struct mg_tensor *t)
{
	return t->ndim ? t->shape[t->ndim - 1] : 1;
}

int mg_cpu_add_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
		       const struct mg_tensor *r, const struct mg_tensor *w,
		       double eps, struct mg_tensor *s, struct mg_tensor *y,
		       struct mg_tensor *rstd)
{
	const int64_t D = last_dim(x), R = D ? mg_tensor_numel(x) / D : 0;
	const bool wf32 = w->dtype == MG_F32 && x->dtype == MG_F64;
	const int nt = mgo_threads_for(ctx, R * D);
	if (x->dtype == MG_F32)
		add_rms_fwd_f32(x->data, r->data, w->data, false, eps, s->data,
				y->data, rstd ? rstd->data : NULL, R, D, nt);
	else
		add_rms_fwd_f64(x->data, r->data, w->data, wf32, eps, s->data,
				y->data, rstd ? rstd->data : NULL, R, D, nt);
	return 0;
}

int mg_cpu_rmsnorm_backward_add(struct mg_ctx *ctx, const struct mg_tensor *x,
				const struct mg_tensor *w,
				const struct mg_tensor *rstd,
				const struct mg_tensor *dy,
				const struct mg_tensor *dres,
				struct mg_tensor *dx, struct mg_tensor *dw)
{
	const int64_t D = last_dim(x), R = D ? mg_tensor_numel(x) / D : 0;
	const bool wf32 = w->dtype == MG_F32 && x->dtype == MG_F64;
	const int nt = mgo_threads_for(ctx, R * D);
	/* The weight gradient is the unfused op's (it reads dy and x, not
	 * dres); first, while dx may still alias dres. */
	if (dw && mg_cpu_rmsnorm_backward(ctx, x, w, rstd, dy, NULL, dw))
		return -1;
	if (x->dtype == MG_F32)
		rms_bwd_add_f32(x->data, w->data, false, rstd->data, dy->data,
				dres->data, dx->data, R, D, nt);
	else
		rms_bwd_add_f64(x->data, w->data, wf32, rstd->data, dy->data,
				dres->data, dx->data, R, D, nt);
	return 0;
}

/* Rows [r0, r0 + n) of a [R, D] tensor as a [n, D] one. */
static struct mg_tensor rows_of(const struct mg_tensor *t, int64_t r0,
				int64_t n, int64_t D)
{
	int64_t shape[2] = {n, D};
	return mg_tensor_make((char *)t->data + (size_t)(r0 * D) *
							mg_dtype_size(t->dtype),
			      t->dtype, MG_DEV_CPU, 2, shape);
}

/* work[:n] += x2 rows [c0, c0 + n) times w2^T (the low-rank term). */
static void lowrank_logits(struct mg_ctx *ctx, const struct mg_lowrank *lr,
			   int64_t c0, int64_t n, struct mg_tensor *lc)
{
	const int64_t r = lr->x2->shape[1], V = lc->shape[1];
	const int nt = mgo_threads(ctx);
	if (lc->dtype == MG_F32)
		mgo_gemm_f32(nt, false, true, n, V, r, 1,
			     (const float *)lr->x2->data + c0 * r, r,
			     lr->w2->data, r, 1, lc->data, V);
	else
		mgo_gemm_f64(nt, false, true, n, V, r, 1,
			     (const double *)lr->x2->data + c0 * r, r,
			     lr->w2->data, r, 1, lc->data, V);
}

int mg_cpu_linear_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
		       const struct mg_tensor *w, const struct mg_lowrank *lr,
		       const struct mg_tensor *labels,
		       const struct mg_tensor *scale, struct mg_tensor *work,
		       struct mg_tensor *metrics, struct mg_tensor *dx,
		       struct mg_tensor *dw)
{
	static const char op[] = "linear_xent";
	const int64_t V = w->shape[0], D = w->shape[1], C = work->shape[0];
	const int64_t R = D ? mg_tensor_numel(x) / D : 0;
	const int32_t *lab = labels->data;
	for (int64_t r = 0; r < R; r++)
		if (lab[r] >= V)
			return mg_error("%s: label %d of row %lld is not below "
					"the %lld classes",
					op, lab[r], (long long)r, (long long)V);
	double *acc = malloc((size_t)(R ? R : 1) * 3 * sizeof *acc);
	if (!acc)
		return mg_error("%s: out of memory", op);
	const bool grad2 = lr && (lr->dx2 || lr->dw2);
	const bool grad = dx || dw || grad2;
	const double s = scale ? (double)*(const float *)scale->data : 1.0;
	for (int64_t c0 = 0; c0 < R; c0 += C) {
		const int64_t n = R - c0 < C ? R - c0 : C;
		struct mg_tensor xc = rows_of(x, c0, n, D),
				 lc = rows_of(work, 0, n, V);
		if (mg_cpu_linear(ctx, &xc, w, NULL, &lc)) {
			free(acc);
			return -1;
		}
		if (lr)
			lowrank_logits(ctx, lr, c0, n, &lc);
		const int nt = mgo_threads_for(ctx, n * V * 4);
		if (x->dtype == MG_F32)
			lxent_rows_f32(lc.data, lab + c0, n, V, grad, s,
				       acc + 3 * c0, nt);
		else
			lxent_rows_f64(lc.data, lab + c0, n, V, grad, s,
				       acc + 3 * c0, nt);
		struct mg_tensor dxc;
		if (dx)
			dxc = rows_of(dx, c0, n, D);
		if ((dx || dw) &&
		    mg_cpu_linear_backward(ctx, &xc, w, &lc, dx ? &dxc : NULL,
					   false, dw, NULL)) {
			free(acc);
			return -1;
		}
		if (grad2) {
			const int64_t r = lr->x2->shape[1];
			struct mg_tensor x2c = rows_of(lr->x2, c0, n, r), d2c;
			if (lr->dx2)
				d2c = rows_of(lr->dx2, c0, n, r);
			if (mg_cpu_linear_backward(ctx, &x2c, lr->w2, &lc,
						   lr->dx2 ? &d2c : NULL, false,
						   lr->dw2, NULL)) {
				free(acc);
				return -1;
			}
		}
	}
	if (metrics) {
		double m[3] = {0, 0, 0};
		for (int64_t r = 0; r < R; r++)
			for (int j = 0; j < 3; j++)
				m[j] += acc[3 * r + j];
		mgo_set(metrics, MG_METRIC_LOSS_SUM, m[0]);
		mgo_set(metrics, MG_METRIC_CORRECT, m[1]);
		mgo_set(metrics, MG_METRIC_COUNT, m[2]);
	}
	free(acc);
	return 0;
}
