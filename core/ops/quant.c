/*
 * quant.c - ops on quantized storage (include/mg/ops_quant.h): argument
 * checks naming the op and the argument, then the CPU kernel
 * (cpu/nf4.c) or its CUDA twin (cuda/nf4.cu).
 */
#include <stdint.h>

#include "ops/cpu/cpu_quant.h"
#include "ops/ops_check.h"
#ifdef MG_HAVE_CUDA
#include "ops/cuda/cuda_quant.h"
#endif

int mg_op_nf4_dequantize(struct mg_ctx *ctx, const struct mg_tensor *w,
			 struct mg_tensor *out)
{
	static const char op[] = "nf4_dequantize";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "w", ctx, w, MG_NF4, -1))
		return -1;
	if (((uintptr_t)w->data & 3) != 0)
		return mg_error("%s: w's blob is not 4-byte aligned (it holds "
				"f32 scales)",
				op);
	if (!out)
		return mg_error("%s: out is missing", op);
	if (out->dtype != MG_F32 && out->dtype != MG_F16 &&
	    out->dtype != MG_BF16)
		return mg_error(
			"%s: out is %s; this op writes F32, F16 or BF16", op,
			mg_dtype_name(out->dtype));
	if (mgo_check(op, "out", ctx, out, (int)out->dtype, -1))
		return -1;
	const int64_t n = mg_tensor_numel(w);
	if (mg_tensor_numel(out) != n) {
		char a[96], b[96];
		return mg_error("%s: w %s has %lld elements, out %s has %lld",
				op, mgo_shape_str(w, a, sizeof a), (long long)n,
				mgo_shape_str(out, b, sizeof b),
				(long long)mg_tensor_numel(out));
	}
	if (n == 0)
		return 0;
	MGO_DISPATCH(op, ctx, mg_cpu_nf4_dequantize(ctx, w, out),
		     mg_cuda_nf4_dequantize(ctx, w, out));
}

int mg_op_nf4_quantize(struct mg_ctx *ctx, const struct mg_tensor *x,
		       struct mg_tensor *w)
{
	static const char op[] = "nf4_quantize";
	if (mgo_check_ctx(op, ctx) || mgo_check(op, "w", ctx, w, MG_NF4, -1))
		return -1;
	if (((uintptr_t)w->data & 3) != 0)
		return mg_error("%s: w's blob is not 4-byte aligned (it holds "
				"f32 scales)",
				op);
	if (!x)
		return mg_error("%s: x is missing", op);
	if (x->dtype != MG_F32 && x->dtype != MG_F16 && x->dtype != MG_BF16)
		return mg_error("%s: x is %s; this op reads F32, F16 or BF16",
				op, mg_dtype_name(x->dtype));
	if (mgo_check(op, "x", ctx, x, (int)x->dtype, -1))
		return -1;
	const int64_t n = mg_tensor_numel(w);
	if (mg_tensor_numel(x) != n) {
		char a[96], b[96];
		return mg_error("%s: w %s has %lld elements, x %s has %lld", op,
				mgo_shape_str(w, a, sizeof a), (long long)n,
				mgo_shape_str(x, b, sizeof b),
				(long long)mg_tensor_numel(x));
	}
	if (n == 0)
		return 0;
	MGO_DISPATCH(op, ctx, mg_cpu_nf4_quantize(ctx, x, w),
		     mg_cuda_nf4_quantize(ctx, x, w));
}

/* Checks shared by the fake-quantization ops: x and (when given) a and b
 * of x's dtype and shape, a float dtype, and the row length `cols`
 * divisible by group (group 0: per row). */
static int fq_check(const char *op, struct mg_ctx *ctx,
		    const struct mg_tensor *x, const char *an,
		    const struct mg_tensor *a, const char *bn,
		    const struct mg_tensor *b, int64_t group)
{
	if (mgo_check_ctx(op, ctx))
		return -1;
	if (!x)
		return mg_error("%s: x is missing", op);
	const enum mg_dtype dt = x->dtype;
	if (dt != MG_F32 && dt != MG_F64 && dt != MG_F16 && dt != MG_BF16)
		return mg_error("%s: x is %s; this op takes F32, F64, F16 or "
				"BF16",
				op, mg_dtype_name(dt));
	if (mgo_check(op, "x", ctx, x, (int)dt, -1))
		return -1;
	if (x->ndim < 1)
		return mg_error("%s: x has no dimensions", op);
	if (mgo_check(op, an, ctx, a, (int)dt, -1) ||
	    mgo_same_shape(op, "x", x, an, a))
		return -1;
	if (b && (mgo_check(op, bn, ctx, b, (int)dt, -1) ||
		  mgo_same_shape(op, "x", x, bn, b)))
		return -1;
	const int64_t cols = x->shape[x->ndim - 1];
	if (group && (group < 1 || cols % group != 0)) {
		char s[96];
		return mg_error("%s: group %lld does not divide the last "
				"dimension of %s",
				op, (long long)group,
				mgo_shape_str(x, s, sizeof s));
	}
	return 0;
}

int mg_op_fq_int4_weight(struct mg_ctx *ctx, const struct mg_tensor *w,
			 int64_t group, struct mg_tensor *out)
{
	static const char op[] = "fq_int4_weight";
	if (group < 1)
		return mg_error("%s: group %lld < 1", op, (long long)group);
	if (fq_check(op, ctx, w, "out", out, NULL, NULL, group))
		return -1;
	if (mg_tensor_numel(w) == 0)
		return 0;
	MGO_DISPATCH(op, ctx, mg_cpu_fq_int4_weight(ctx, w, group, NULL, out),
		     mg_cuda_fq_int4_weight(ctx, w, group, NULL, out));
}

int mg_op_fq_int4_weight_backward(struct mg_ctx *ctx, const struct mg_tensor *w,
				  int64_t group, const struct mg_tensor *dy,
				  struct mg_tensor *dw)
{
	static const char op[] = "fq_int4_weight_backward";
	if (group < 1)
		return mg_error("%s: group %lld < 1", op, (long long)group);
	if (fq_check(op, ctx, w, "dy", dy, "dw", dw, group))
		return -1;
	if (mg_tensor_numel(w) == 0)
		return 0;
	MGO_DISPATCH(op, ctx, mg_cpu_fq_int4_weight(ctx, w, group, dy, dw),
		     mg_cuda_fq_int4_weight(ctx, w, group, dy, dw));
}

int mg_op_fq_int8_token(struct mg_ctx *ctx, const struct mg_tensor *x,
			struct mg_tensor *out)
{
	static const char op[] = "fq_int8_token";
	if (fq_check(op, ctx, x, "out", out, NULL, NULL, 0))
		return -1;
	if (mg_tensor_numel(x) == 0)
		return 0;
	MGO_DISPATCH(op, ctx, mg_cpu_fq_int8_token(ctx, x, NULL, out),
		     mg_cuda_fq_int8_token(ctx, x, NULL, out));
}

int mg_op_fq_int8_token_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
				 const struct mg_tensor *dy,
				 struct mg_tensor *dx)
{
	static const char op[] = "fq_int8_token_backward";
	if (fq_check(op, ctx, x, "dy", dy, "dx", dx, 0))
		return -1;
	if (dx->data == x->data)
		return mg_error("%s: dx may alias dy, not x", op);
	if (mg_tensor_numel(x) == 0)
		return 0;
	MGO_DISPATCH(op, ctx, mg_cpu_fq_int8_token(ctx, x, dy, dx),
		     mg_cuda_fq_int8_token(ctx, x, dy, dx));
}
