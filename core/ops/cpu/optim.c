/*
 * optim.c - SGD (momentum, dampening, Nesterov, L2) and AdamW (decoupled
 * weight decay) updates with PyTorch's semantics, on whatever slice of
 * parameters a strategy owns. The CPU version is the reference for the
 * CUDA twin and the kernel the offload strategy runs on the host.
 */
#include <math.h>
#include <string.h>

#include "runtime/runtime.h"

int mg_optim_state_slots(const struct mg_optim_hparams *h)
{
	if (h->kind == MG_OPTIM_ADAMW)
		return 2;
	return h->momentum != 0.0 ? 1 : 0;
}

const char *mg_optim_slot_name(const struct mg_optim_hparams *h, int slot)
{
	if (h->kind == MG_OPTIM_ADAMW)
		return slot == 0 ? "exp_avg" : "exp_avg_sq";
	return "momentum";
}

/* One body, instantiated for float and double. */
#define DEFINE_UPDATE(T, SQRT)                                                 \
	static void sgd_##T(const struct mg_optim_hparams *h, T *p,           \
			    const T *g, T *buf, int64_t n, bool decay)        \
	{                                                                     \
		const T lr = (T)h->lr, mul = (T)h->grad_mul;                  \
		const T wd = decay ? (T)h->weight_decay : 0;                  \
		const T mom = (T)h->momentum, damp = 1 - (T)h->dampening;     \
		const bool first = h->step <= 1, nest = h->nesterov;          \
		_Pragma("omp parallel for simd schedule(static)")             \
		for (int64_t i = 0; i < n; i++) {                             \
			T d = g[i] * mul + wd * p[i];                         \
			if (buf) {                                            \
				T b = first ? d : mom * buf[i] + damp * d;    \
				buf[i] = b;                                   \
				d = nest ? d + mom * b : b;                   \
			}                                                     \
			p[i] -= lr * d;                                       \
		}                                                             \
	}                                                                     \
	static void adamw_##T(const struct mg_optim_hparams *h, T *p,         \
			      const T *g, T *m, T *v, int64_t n, bool decay)  \
	{                                                                     \
		const double bc1 = 1 - pow(h->beta1, (double)h->step);        \
		const double bc2 = 1 - pow(h->beta2, (double)h->step);        \
		const T step_size = (T)(h->lr / bc1);                         \
		const T rbc2 = (T)(1.0 / sqrt(bc2));                          \
		const T shrink = decay ? (T)(1 - h->lr * h->weight_decay)     \
				       : (T)1;                                \
		const T b1 = (T)h->beta1, b2 = (T)h->beta2, eps = (T)h->eps;  \
		const T mul = (T)h->grad_mul;                                 \
		_Pragma("omp parallel for simd schedule(static)")             \
		for (int64_t i = 0; i < n; i++) {                             \
			T gi = g[i] * mul;                                    \
			T mi = b1 * m[i] + (1 - b1) * gi;                     \
			T vi = b2 * v[i] + (1 - b2) * gi * gi;                \
			m[i] = mi;                                            \
			v[i] = vi;                                            \
			p[i] = p[i] * shrink -                                \
			       step_size * mi / (SQRT(vi) * rbc2 + eps);      \
		}                                                             \
	}

DEFINE_UPDATE(float, sqrtf)
DEFINE_UPDATE(double, sqrt)

int mg_optim_update(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
		    enum mg_dtype dt, void *param, const void *grad,
		    void **state, int64_t n, bool decay, bool on_host)
{
	if (!on_host && ctx->dev->kind != MG_DEV_CPU)
		return mg_error("optimizer: no kernel for device kind %d",
				ctx->dev->kind);
	if (dt != MG_F32 && dt != MG_F64)
		return mg_error("optimizer: master dtype %s unsupported",
				mg_dtype_name(dt));
	if (h->kind == MG_OPTIM_ADAMW) {
		if (dt == MG_F32)
			adamw_float(h, param, grad, state[0], state[1], n,
				    decay);
		else
			adamw_double(h, param, grad, state[0], state[1], n,
				     decay);
		return 0;
	}
	void *buf = mg_optim_state_slots(h) ? state[0] : NULL;
	if (dt == MG_F32)
		sgd_float(h, param, grad, buf, n, decay);
	else
		sgd_double(h, param, grad, buf, n, decay);
	return 0;
}
