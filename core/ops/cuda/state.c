/*
 * state.c - per-device state of the CUDA ops, hung off
 * struct mg_cuda_device.ops_state: the growable scratch buffer every op
 * shares (all work is ordered on the one compute stream, so one buffer
 * suffices; outgrown ones are kept for graphs that captured them), the
 * tuning knobs, the reductions' completion counters and the convolution
 * plan cache (conv.c).
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "ops/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_device.h"

static int env_choice(const char *name, const char *on, int dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	return strcmp(v, on) == 0 || strcmp(v, "1") == 0;
}

struct mgc_state *mgc_state(struct mg_ctx *ctx)
{
	struct mg_cuda_device *cd = ctx->dev->impl;
	if (!cd) {
		mg_error("CUDA ops: the device has no CUDA context");
		return NULL;
	}
	if (cd->ops_state)
		return cd->ops_state;
	struct mgc_state *st = calloc(1, sizeof *st);
	if (!st) {
		mg_error("CUDA ops: out of memory");
		return NULL;
	}
	/* Defaults: see docs in cuda_ops.h and the numbers in the report of
	 * tests/gpu/bench_gpu_ops. */
	st->opt[MG_CUDA_OPT_DEPTHWISE_CUDNN] =
		env_choice("MG_CUDA_DEPTHWISE", "cudnn", 0);
	st->opt[MG_CUDA_OPT_CONV_FIND] = env_choice("MG_CUDNN_ALGO", "find", 0);
	st->opt[MG_CUDA_OPT_TF32] = env_choice("MG_CUDA_TF32", "1", 0);
	st->opt[MG_CUDA_OPT_POINTWISE_GEMM] =
		env_choice("MG_CUDA_POINTWISE", "gemm", 1);
	st->opt[MG_CUDA_OPT_ATTN_FLASH] =
		env_choice("MG_CUDA_ATTENTION", "flash", 1);
	/* opt-in until measured on a GPU (core/ops/cuda/NOTES.md) */
	st->opt[MG_CUDA_OPT_BN_SMALL] = env_choice("MG_CUDA_BN_SMALL", "1", 0);
	cd->ops_state = st;
	cd->ops_state_free = mg_cuda_ops_free;
	return st;
}

void *mgc_scratch(struct mg_ctx *ctx, size_t bytes)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return NULL;
	if (bytes < 256)
		bytes = 256;
	if (st->scratch.ptr && st->scratch.bytes >= bytes)
		return st->scratch.ptr;
	if (st->scratch.ptr) {
		struct mg_buf *r = realloc(
			st->retired, (size_t)(st->nretired + 1) * sizeof *r);
		if (!r) {
			mg_error("CUDA ops scratch: out of host memory");
			return NULL;
		}
		st->retired = r;
		r[st->nretired++] = st->scratch;
		memset(&st->scratch, 0, sizeof st->scratch);
	}
	/* Grow by half again to avoid a series of small regrowths. */
	size_t want = bytes + bytes / 2;
	if (mg_buf_alloc(ctx, &st->scratch, want, MG_MEM_ACTIVATIONS)) {
		mg_error_prefix("CUDA ops scratch (%zu bytes): ", want);
		return NULL;
	}
	return st->scratch.ptr;
}

unsigned *mgc_counters(struct mg_ctx *ctx)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return NULL;
	if (st->counters.ptr)
		return st->counters.ptr;
	const size_t bytes = MGC_COUNTERS * sizeof(unsigned);
	if (mg_buf_alloc(ctx, &st->counters, bytes, MG_MEM_ACTIVATIONS)) {
		mg_error_prefix("CUDA ops counters: ");
		return NULL;
	}
	cudaError_t e = cudaMemsetAsync(st->counters.ptr, 0, bytes,
					(cudaStream_t)ctx->dev->stream);
	if (e != cudaSuccess) {
		mg_error("CUDA ops counters: memset: %s",
			 cudaGetErrorString(e));
		mg_buf_free(ctx, &st->counters);
		return NULL;
	}
	return st->counters.ptr;
}

int mgc_check_launch(const char *op)
{
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return mg_error("%s: CUDA kernel launch failed: %s (%s)", op,
				cudaGetErrorName(e), cudaGetErrorString(e));
	return 0;
}

int mgc_bad_dtype(const char *op, enum mg_dtype dt)
{
	return mg_error("%s: dtype %s is not supported on CUDA", op,
			mg_dtype_name(dt));
}

int mgc_zero(struct mg_ctx *ctx, void *p, enum mg_dtype dt, int64_t n)
{
	if (n <= 0)
		return 0;
	cudaError_t e = cudaMemsetAsync(p, 0, (size_t)n * mg_dtype_size(dt),
					(cudaStream_t)ctx->dev->stream);
	if (e != cudaSuccess)
		return mg_error("CUDA memset: %s", cudaGetErrorString(e));
	return 0;
}

int mg_cuda_ops_set(struct mg_ctx *ctx, enum mg_cuda_opt opt, int value)
{
	if ((int)opt < 0 || opt >= MG_CUDA_OPT_COUNT)
		return mg_error("CUDA ops: unknown option %d", (int)opt);
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return -1;
	st->opt[opt] = value;
	mgc_conv_cache_clear(st);
	return 0;
}

void mg_cuda_ops_free(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	if (!cd || !cd->ops_state)
		return;
	struct mgc_state *st = cd->ops_state;
	/* Teardown: the stats this scratch was counted in may be gone. */
	struct mg_ctx tmp = {.struct_size = sizeof tmp, .dev = dev};
	mgc_conv_cache_clear(st);
	free(st->table);
	mg_buf_free(&tmp, &st->scratch);
	mg_buf_free(&tmp, &st->counters);
	for (int i = 0; i < st->nretired; i++)
		mg_buf_free(&tmp, &st->retired[i]);
	free(st->retired);
	free(st);
	cd->ops_state = NULL;
}
