/*
 * check.c - the argument checks every op dispatcher runs before it calls a
 * backend (ops_check.h), so every device reports a bad call with the same
 * message.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops_check.h"

static const char *dev_name(enum mg_device_kind k)
{
	switch (k) {
	case MG_DEV_CPU:
		return "cpu";
	case MG_DEV_CUDA:
		return "cuda";
	}
	return "unknown";
}

const char *mgo_shape_str(const struct mg_tensor *t, char *buf, size_t len)
{
	size_t used = 0;
	used += (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < t->ndim && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld",
					 i ? ", " : "", (long long)t->shape[i]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
	return buf;
}

int mgo_check_ctx(const char *op, const struct mg_ctx *ctx)
{
	if (!ctx || !ctx->dev)
		return mg_error("%s: no context or device", op);
	return 0;
}

int mgo_check(const char *op, const char *name, const struct mg_ctx *ctx,
	      const struct mg_tensor *t, int dt, int ndim)
{
	if (!t)
		return mg_error("%s: %s is missing", op, name);
	if (t->ndim < 0 || t->ndim > MG_MAX_DIMS)
		return mg_error("%s: %s has %d dimensions", op, name, t->ndim);
	for (int i = 0; i < t->ndim; i++)
		if (t->shape[i] < 0)
			return mg_error("%s: %s has negative dimension %d", op,
					name, i);
	if (ndim >= 0 && t->ndim != ndim) {
		char b[96];
		return mg_error("%s: %s must have %d dimensions, has shape %s",
				op, name, ndim, mgo_shape_str(t, b, sizeof b));
	}
	if (dt >= 0 && t->dtype != (enum mg_dtype)dt)
		return mg_error("%s: %s is %s, expected %s", op, name,
				mg_dtype_name(t->dtype),
				mg_dtype_name((enum mg_dtype)dt));
	/* Half precision runs on the GPU only (the CPU computes in f32 or
	 * f64; tests use it as the oracle on upcast inputs). */
	bool half = t->dtype == MG_F16 || t->dtype == MG_BF16;
	if (dt < 0 && t->dtype != MG_F32 && t->dtype != MG_F64 &&
	    !(half && ctx->dev && ctx->dev->kind == MG_DEV_CUDA))
		return mg_error("%s: %s is %s; this op supports f32 and f64%s",
				op, name, mg_dtype_name(t->dtype),
				half ? " on the CPU (f16/bf16 on CUDA)" : "");
	if (t->device != ctx->dev->kind)
		return mg_error("%s: %s is on the %s device, the context on %s",
				op, name, dev_name(t->device),
				dev_name(ctx->dev->kind));
	if (!t->data && mg_tensor_numel(t) > 0)
		return mg_error("%s: %s has no data", op, name);
	return 0;
}

int mgo_check_opt(const char *op, const char *name, const struct mg_ctx *ctx,
		  const struct mg_tensor *t, int dt, int ndim)
{
	return t ? mgo_check(op, name, ctx, t, dt, ndim) : 0;
}

int mgo_same_shape(const char *op, const char *an, const struct mg_tensor *a,
		   const char *bn, const struct mg_tensor *b)
{
	bool same = a->ndim == b->ndim;
	for (int i = 0; same && i < a->ndim; i++)
		same = a->shape[i] == b->shape[i];
	if (!same) {
		char sa[96], sb[96];
		return mg_error("%s: shape mismatch: %s is %s, %s is %s", op,
				an, mgo_shape_str(a, sa, sizeof sa), bn,
				mgo_shape_str(b, sb, sizeof sb));
	}
	return 0;
}

int mgo_check_vec(const char *op, const char *name, const struct mg_tensor *t,
		  int64_t n)
{
	if (t->ndim != 1 || t->shape[0] != n) {
		char s[96];
		return mg_error("%s: %s must be [%lld], is %s", op, name,
				(long long)n, mgo_shape_str(t, s, sizeof s));
	}
	return 0;
}

int mgo_no_device(const char *op, const struct mg_ctx *ctx)
{
	return mg_error("%s: no implementation for the %s device in this "
			"build",
			op, dev_name(ctx->dev->kind));
}
