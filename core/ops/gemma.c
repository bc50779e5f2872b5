/*
 * gemma.c - the element-wise ops Gemma 2 and 3 add (ops_llm.h, ABI
 * 1.13): the tanh-GELU gate (GeGLU), soft-capping of logits and an
 * affine y = a x + b (the embedding scale, the (1 + w) norm weights).
 * Argument checks naming the op and the argument, then the CPU kernels
 * (cpu/llm_gemma.c) or their CUDA twins (cuda/llm_gemma.cu).
 */
#include <math.h>

#include "ops/cpu/cpu_llm.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_llm.h"
#endif

/* A float tensor the device computes in (F32/F64 on the CPU, F32, BF16
 * or F16 on CUDA), or b of a's dtype and element count. */
static int ew(const char *op, struct mg_ctx *ctx, const char *an,
	      const struct mg_tensor *a, const char *bn,
	      const struct mg_tensor *b)
{
	if (!b)
		return mg_error("%s: %s is missing", op, bn);
	if (!a) {
		const bool cuda = ctx->dev->kind == MG_DEV_CUDA;
		const enum mg_dtype d = b->dtype;
		if (cuda ? !(d == MG_F32 || d == MG_BF16 || d == MG_F16)
			 : !(d == MG_F32 || d == MG_F64))
			return mg_error(
				"%s: %s is %s; this op supports F32 and "
				"F64 on the CPU, F32, BF16 and F16 on "
				"CUDA",
				op, bn, mg_dtype_name(d));
		return mgo_check(op, bn, ctx, b, (int)d, -1);
	}
	if (mgo_check(op, bn, ctx, b, a->dtype, -1))
		return -1;
	if (mg_tensor_numel(a) != mg_tensor_numel(b))
		return mgo_same_shape(op, an, a, bn, b);
	return 0;
}

#ifdef MG_HAVE_CUDA
#define DISPATCH(op, cpu, cuda)                                                \
	switch (ctx->dev->kind) {                                              \
	case MG_DEV_CPU:                                                       \
		return cpu;                                                    \
	case MG_DEV_CUDA:                                                      \
		return cuda;                                                   \
	default:                                                               \
		return mgo_no_device(op, ctx);                                 \
	}
#else
#define DISPATCH(op, cpu, cuda)                                                \
	switch (ctx->dev->kind) {                                              \
	case MG_DEV_CPU:                                                       \
		return cpu;                                                    \
	default:                                                               \
		return mgo_no_device(op, ctx);                                 \
	}
#endif

int mg_op_geglu(struct mg_ctx *ctx, const struct mg_tensor *g,
		const struct mg_tensor *u, struct mg_tensor *h)
{
	static const char op[] = "geglu";
	if (mgo_check_ctx(op, ctx) || ew(op, ctx, NULL, NULL, "g", g) ||
	    ew(op, ctx, "g", g, "u", u) || ew(op, ctx, "g", g, "h", h))
		return -1;
	DISPATCH(op, mg_cpu_geglu(ctx, g, u, h), mg_cuda_geglu(ctx, g, u, h));
}

int mg_op_geglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			 const struct mg_tensor *u, const struct mg_tensor *dh,
			 struct mg_tensor *dg, struct mg_tensor *du)
{
	static const char op[] = "geglu_backward";
	if (mgo_check_ctx(op, ctx) || ew(op, ctx, NULL, NULL, "g", g) ||
	    ew(op, ctx, "g", g, "u", u) || ew(op, ctx, "g", g, "dh", dh) ||
	    (dg && ew(op, ctx, "g", g, "dg", dg)) ||
	    (du && ew(op, ctx, "g", g, "du", du)))
		return -1;
	DISPATCH(op, mg_cpu_geglu_backward(ctx, g, u, dh, dg, du),
		 mg_cuda_geglu_backward(ctx, g, u, dh, dg, du));
}

static int cap_ok(const char *op, double cap)
{
	if (!(cap > 0) || !isfinite(cap))
		return mg_error("%s: cap %g (need a finite cap > 0)", op, cap);
	return 0;
}

int mg_op_softcap(struct mg_ctx *ctx, const struct mg_tensor *x, double cap,
		  struct mg_tensor *y)
{
	static const char op[] = "softcap";
	if (mgo_check_ctx(op, ctx) || cap_ok(op, cap) ||
	    ew(op, ctx, NULL, NULL, "x", x) || ew(op, ctx, "x", x, "y", y))
		return -1;
	DISPATCH(op, mg_cpu_softcap(ctx, x, cap, NULL, y),
		 mg_cuda_softcap(ctx, x, cap, NULL, y));
}

int mg_op_softcap_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			   double cap, const struct mg_tensor *dy,
			   struct mg_tensor *dx)
{
	static const char op[] = "softcap_backward";
	if (mgo_check_ctx(op, ctx) || cap_ok(op, cap) ||
	    ew(op, ctx, NULL, NULL, "x", x) || ew(op, ctx, "x", x, "dy", dy) ||
	    ew(op, ctx, "x", x, "dx", dx))
		return -1;
	DISPATCH(op, mg_cpu_softcap(ctx, x, cap, dy, dx),
		 mg_cuda_softcap(ctx, x, cap, dy, dx));
}

int mg_op_scale_shift(struct mg_ctx *ctx, const struct mg_tensor *x, double a,
		      double b, struct mg_tensor *y)
{
	static const char op[] = "scale_shift";
	if (mgo_check_ctx(op, ctx) || ew(op, ctx, NULL, NULL, "x", x) ||
	    ew(op, ctx, "x", x, "y", y))
		return -1;
	if (!isfinite(a) || !isfinite(b))
		return mg_error("%s: a %g and b %g must be finite", op, a, b);
	DISPATCH(op, mg_cpu_scale_shift(ctx, x, a, b, y),
		 mg_cuda_scale_shift(ctx, x, a, b, y));
}
