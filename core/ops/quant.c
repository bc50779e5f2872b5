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
