/*
 * optim.c - SGD (momentum, dampening, Nesterov, L2) and AdamW (decoupled
 * weight decay) with PyTorch's semantics, the gradient norm, clipping and
 * the non-finite skip on the CPU: the reference for the CUDA twin and the
 * kernel an offload strategy runs on the host. ops/optim.c dispatches.
 */
#include <math.h>
#include <string.h>

#include "runtime/runtime.h"

#include "cpu_ops.h"

/* One body, instantiated for float and double. */
#define DEFINE_UPDATE(T, SQRT)                                                 \
	static void sgd_##T(const struct mg_optim_hparams *h,                  \
			    const struct mg_optim_vals *v,                     \
			    const struct mg_optim_slice *s)                    \
	{                                                                      \
		T *p = s->param, *buf = s->state[0];                           \
		const T *g = s->grad;                                          \
		const T lr = (T)v->lr, mul = (T)v->grad_mul;                   \
		const T wd = s->decay ? (T)h->weight_decay : 0;                \
		const T mom = (T)h->momentum, damp = 1 - (T)h->dampening;      \
		const bool first = v->first, nest = h->nesterov;               \
		if (h->momentum == 0.0)                                        \
			buf = NULL;                                            \
		_Pragma("omp parallel for simd schedule(static)") for (        \
			int64_t i = 0; i < s->n; i++)                          \
		{                                                              \
			T d = g[i] * mul + wd * p[i];                          \
			if (buf) {                                             \
				T b = first ? d : mom * buf[i] + damp * d;     \
				buf[i] = b;                                    \
				d = nest ? d + mom * b : b;                    \
			}                                                      \
			p[i] -= lr * d;                                        \
		}                                                              \
	}                                                                      \
	static void adamw_##T(const struct mg_optim_hparams *h,                \
			      const struct mg_optim_vals *v,                   \
			      const struct mg_optim_slice *s)                  \
	{                                                                      \
		T *p = s->param, *m = s->state[0], *q = s->state[1];           \
		const T *g = s->grad;                                          \
		const T step_size = (T)((double)v->lr / v->bias1);             \
		const T rbc2 = (T)(1.0 / sqrt((double)v->bias2));              \
		const T shrink =                                               \
			s->decay ? (T)(1 - (double)v->lr * h->weight_decay)    \
				 : (T)1;                                       \
		const T b1 = (T)h->beta1, b2 = (T)h->beta2, eps = (T)h->eps;   \
		const T mul = (T)v->grad_mul;                                  \
		_Pragma("omp parallel for simd schedule(static)") for (        \
			int64_t i = 0; i < s->n; i++)                          \
		{                                                              \
			T gi = g[i] * mul;                                     \
			T mi = b1 * m[i] + (1 - b1) * gi;                      \
			T qi = b2 * q[i] + (1 - b2) * gi * gi;                 \
			m[i] = mi;                                             \
			q[i] = qi;                                             \
			p[i] = p[i] * shrink -                                 \
			       step_size * mi / (SQRT(qi) * rbc2 + eps);       \
		}                                                              \
	}

DEFINE_UPDATE(float, sqrtf)
DEFINE_UPDATE(double, sqrt)

int mg_cpu_optim_sumsq(struct mg_ctx *ctx, struct mg_optim_vals *vals,
		       enum mg_dtype dt, const void *grad, int64_t n)
{
	(void)ctx;
	double s = 0;
	if (dt == MG_F64) {
		const double *g = grad;
		for (int64_t i = 0; i < n; i++)
			s += g[i] * g[i];
	} else if (dt == MG_F32) {
		const float *g = grad;
		for (int64_t i = 0; i < n; i++)
			s += (double)g[i] * g[i];
	} else {
		return mg_error("optimizer: gradient dtype %s on the CPU",
				mg_dtype_name(dt));
	}
	vals->sumsq += (float)s;
	return 0;
}

int mg_cpu_optim_finalize(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
			  struct mg_optim_vals *vals)
{
	(void)ctx;
	float norm = sqrtf(vals->sumsq) * fabsf(vals->grad_mul);
	vals->grad_norm = norm;
	vals->skip = !isfinite(norm);
	if (!vals->skip && h->max_grad_norm > 0 && norm > h->max_grad_norm)
		vals->grad_mul *= (float)(h->max_grad_norm / (norm + 1e-6));
	return 0;
}

int mg_cpu_optim_update(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
			const struct mg_optim_vals *vals,
			const struct mg_optim_slice *s)
{
	(void)ctx;
	if (s->dtype != MG_F32 && s->dtype != MG_F64)
		return mg_error("optimizer: master dtype %s unsupported",
				mg_dtype_name(s->dtype));
	if (s->grad_dtype != s->dtype || s->param_lp)
		return mg_error("optimizer: mixed precision (%s gradients) "
				"needs the CUDA backend",
				mg_dtype_name(s->grad_dtype));
	if (vals->skip)
		return 0;
	if (h->kind == MG_OPTIM_ADAMW) {
		if (s->dtype == MG_F32)
			adamw_float(h, vals, s);
		else
			adamw_double(h, vals, s);
		return 0;
	}
	if (s->dtype == MG_F32)
		sgd_float(h, vals, s);
	else
		sgd_double(h, vals, s);
	return 0;
}
