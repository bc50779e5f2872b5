/*
 * optim.c - the optimizer ops of include/mg/optim.h: state slot queries,
 * and the gradient sum of squares, norm/clip/skip finalisation and update,
 * each run by the CUDA backend on a CUDA context, else by the CPU one.
 */
#include "ops/cpu/cpu_ops.h"
#include "runtime/runtime.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_optim.h"
#endif

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

int mg_optim_sumsq(struct mg_ctx *ctx, struct mg_optim_vals *vals,
		   enum mg_dtype dt, const void *grad, int64_t n)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_optim_sumsq(ctx, vals, dt, grad, n);
#endif
	return mg_cpu_optim_sumsq(ctx, vals, dt, grad, n);
}

int mg_optim_finalize(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
		      struct mg_optim_vals *vals)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_optim_finalize(ctx, h, vals);
#endif
	return mg_cpu_optim_finalize(ctx, h, vals);
}

int mg_optim_update(struct mg_ctx *ctx, const struct mg_optim_hparams *h,
		    const struct mg_optim_vals *vals,
		    const struct mg_optim_slice *s)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_optim_update(ctx, h, vals, s);
#endif
	return mg_cpu_optim_update(ctx, h, vals, s);
}
