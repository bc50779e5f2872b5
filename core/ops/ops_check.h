/*
 * ops_check.h - the op dispatchers' shared argument checks (check.c), which
 * produce readable errors naming the op and the argument, and the dispatch
 * to a backend on the context's device kind.
 *
 * Every public mg_op_* (core/ops/FAMILY.c) checks its arguments here, then
 * calls the backend: mg_cpu_* (core/ops/cpu/cpu_ops.h) or, in a build with
 * the CUDA backend, mg_cuda_* (core/ops/cuda/cuda_ops.h). Checks run before
 * any dispatch, so every device reports a bad call with the same message.
 * Only dispatchers include this header; the backends are leaves below it.
 */
#ifndef MG_OPS_CHECK_H
#define MG_OPS_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "mg/mg.h"

/* Does ctx have a usable device? Errors name the op. */
int mgo_check_ctx(const char *op, const struct mg_ctx *ctx);

/*
 * Check a tensor argument: present, data set (unless it has no elements),
 * on ctx's device, of dtype dt (dt < 0: MG_F32 or MG_F64) and with ndim
 * dims (ndim < 0: any). Errors name the op and the argument.
 */
int mgo_check(const char *op, const char *name, const struct mg_ctx *ctx,
	      const struct mg_tensor *t, int dt, int ndim);
/* Same check, but t may be NULL (an optional argument). */
int mgo_check_opt(const char *op, const char *name, const struct mg_ctx *ctx,
		  const struct mg_tensor *t, int dt, int ndim);
/* Equal shapes (ndim and every dim); error shows both. */
int mgo_same_shape(const char *op, const char *an, const struct mg_tensor *a,
		   const char *bn, const struct mg_tensor *b);
/* t is exactly [n] (one dimension). */
int mgo_check_vec(const char *op, const char *name, const struct mg_tensor *t,
		  int64_t n);
/* Format a shape as "[2, 3, 4]" into buf (returns buf). */
const char *mgo_shape_str(const struct mg_tensor *t, char *buf, size_t len);
/* The error for a device kind without an implementation of op (a CUDA
 * context in a build without the CUDA backend). */
int mgo_no_device(const char *op, const struct mg_ctx *ctx);

/*
 * After the checks: return the CPU backend's cpu_call on a CPU context,
 * the CUDA backend's cuda_call on a CUDA context (builds with the CUDA
 * backend only; cuda_call is not even compiled otherwise), else the
 * "no implementation" error for op.
 */
#ifdef MG_HAVE_CUDA
#define MGO_DISPATCH(op, ctx, cpu_call, cuda_call)                             \
	do {                                                                   \
		if ((ctx)->dev->kind == MG_DEV_CPU)                            \
			return (cpu_call);                                     \
		if ((ctx)->dev->kind == MG_DEV_CUDA)                           \
			return (cuda_call);                                    \
		return mgo_no_device(op, ctx);                                 \
	} while (0)
#else
#define MGO_DISPATCH(op, ctx, cpu_call, cuda_call)                             \
	do {                                                                   \
		if ((ctx)->dev->kind == MG_DEV_CPU)                            \
			return (cpu_call);                                     \
		return mgo_no_device(op, ctx);                                 \
	} while (0)
#endif

#endif
