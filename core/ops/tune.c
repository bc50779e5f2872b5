/*
 * tune.c - run-wide numerical modes of the ops (ops_tune.h): checks, then
 * the device's backend.
 */
#include "ops/ops_check.h"
#include "ops/ops_tune.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

int mgo_allow_tf32(struct mg_ctx *ctx, bool on)
{
	static const char op[] = "allow_tf32";
	if (mgo_check_ctx(op, ctx))
		return -1;
	if (ctx->dev->kind == MG_DEV_CPU)
		return on ? mg_error("run.tf32 = true: TF32 is a tensor-core "
				     "mode of CUDA GPUs; the CPU computes "
				     "fp32 exactly (run.device = cuda, or "
				     "run.tf32 = false)")
			  : 0;
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_ops_set(ctx, MG_CUDA_OPT_TF32, on);
#endif
	return mgo_no_device(op, ctx);
}
