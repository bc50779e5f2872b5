/*
 * buf.c - accounted allocations on the context's device and host-device
 * copies. The CPU device allocates 64-byte aligned host memory; every byte
 * is counted in the context's stats under its category, so the report can
 * say where memory went.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "mg/comm.h"

#include "runtime/runtime.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

/* Buffers released so far (mg_buf_frees); relaxed atomic, as frees may
 * come from more than one thread. */
static _Atomic uint64_t frees;

uint64_t mg_buf_frees(void)
{
	return atomic_load_explicit(&frees, memory_order_relaxed);
}

/* Device memory goes by category; host memory beside a GPU is counted
 * apart, pinned or pageable (on the CPU device, host memory is the
 * device's). */
static void account(struct mg_ctx *ctx, const struct mg_buf *b, int sign)
{
	if (!ctx || !ctx->stats)
		return;
	enum mg_stats_host host = MG_STATS_DEVICE;
	if (b->pinned_host)
		host = MG_STATS_PINNED;
	else if (b->device == MG_DEV_CPU && ctx->dev->kind != MG_DEV_CPU)
		host = MG_STATS_PAGEABLE;
	mg_stats_mem(ctx->stats, b->cat, sign * (int64_t)b->bytes, host);
}

static void *host_alloc(size_t bytes)
{
	size_t rounded = (bytes + 63) & ~(size_t)63;
	return aligned_alloc(64, rounded ? rounded : 64);
}

int mg_buf_alloc(struct mg_ctx *ctx, struct mg_buf *b, size_t bytes,
		 enum mg_mem_cat cat)
{
	memset(b, 0, sizeof *b);
	b->device = ctx->dev->kind;
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA) {
		if (mg_cuda_malloc(&b->ptr, bytes))
			return mg_error_prefix("%s", mg_mem_cat_name(cat));
		b->bytes = bytes;
		b->cat = cat;
		account(ctx, b, 1);
		return 0;
	}
#endif
	if (ctx->dev->kind != MG_DEV_CPU)
		return mg_error("device kind %d has no allocator in this build",
				ctx->dev->kind);
	b->ptr = host_alloc(bytes);
	if (!b->ptr)
		return mg_error(
			"out of host memory allocating %zu bytes for %s", bytes,
			mg_mem_cat_name(cat));
	b->bytes = bytes;
	b->cat = cat;
	account(ctx, b, 1);
	return 0;
}

int mg_buf_alloc_comm(struct mg_ctx *ctx, struct mg_comm *c, struct mg_buf *b,
		      size_t bytes, enum mg_mem_cat cat, bool *windowed)
{
	static atomic_bool told;
	if (windowed)
		*windowed = false;
	if (!c || !c->window_alloc) {
		if (!atomic_exchange(&told, true))
			mg_info("%s: the %s communicator has no "
				"copy-engine windows; ordinary memory, "
				"all-gathers as before",
				mg_mem_cat_name(cat),
				c ? c->backend : "absent");
		return mg_buf_alloc(ctx, b, bytes, cat);
	}
	memset(b, 0, sizeof *b);
	void *p = NULL;
	if (c->window_alloc(c, bytes ? bytes : 1, &p)) {
		/* every rank failed alike (window_alloc agrees), so every
		 * rank falls back alike */
		if (!atomic_exchange(&told, true))
			mg_warn("%s: no copy-engine window (%s); ordinary "
				"device memory, all-gathers as kernels",
				mg_mem_cat_name(cat), mg_last_error());
		return mg_buf_alloc(ctx, b, bytes, cat);
	}
	if (mg_buf_window_add(p, c)) {
		c->window_free(c, p);
		return mg_error("out of memory registering a window");
	}
	b->ptr = p;
	b->bytes = bytes;
	b->cat = cat;
	b->device = ctx->dev->kind; /* the communicator's ranks' memory */
	account(ctx, b, 1);
	if (windowed)
		*windowed = true;
	return 0;
}

int mg_buf_alloc_host(struct mg_ctx *ctx, struct mg_buf *b, size_t bytes,
		      enum mg_mem_cat cat, bool pinned)
{
	memset(b, 0, sizeof *b);
	b->device = MG_DEV_CPU;
	b->bytes = bytes;
	b->cat = cat;
#ifdef MG_HAVE_CUDA
	/* Page-locked memory lets copies run asynchronously at full speed;
	 * on the CPU device there is no transfer, so it stays pageable. */
	if (pinned && ctx->dev->kind == MG_DEV_CUDA) {
		if (mg_cuda_host_alloc(&b->ptr, bytes))
			return mg_error_prefix("pinned host memory for %s",
					       mg_mem_cat_name(cat));
		b->pinned_host = true;
		account(ctx, b, 1);
		return 0;
	}
#else
	(void)pinned;
#endif
	b->ptr = host_alloc(bytes);
	if (!b->ptr)
		return mg_error(
			"out of host memory allocating %zu bytes for %s", bytes,
			mg_mem_cat_name(cat));
	account(ctx, b, 1);
	return 0;
}

int mg_buf_reserve(struct mg_ctx *ctx, struct mg_buf *b, size_t bytes,
		   enum mg_mem_cat cat)
{
	if (b->ptr && b->bytes >= bytes)
		return 0;
	mg_buf_free(ctx, b);
	return mg_buf_alloc(ctx, b, bytes, cat);
}

void mg_buf_free(struct mg_ctx *ctx, struct mg_buf *b)
{
	if (!b->ptr)
		return;
	atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed);
	account(ctx, b, -1);
	struct mg_comm *owner = NULL;
	if (mg_buf_window_take(b->ptr, &owner)) {
		if (owner)
			owner->window_free(owner, b->ptr);
		memset(b, 0, sizeof *b);
		return;
	}
#ifdef MG_HAVE_CUDA
	if (b->device == MG_DEV_CUDA)
		mg_cuda_free(b->ptr);
	else if (b->pinned_host)
		mg_cuda_host_free(b->ptr);
	else
		free(b->ptr);
#else
	free(b->ptr);
#endif
	memset(b, 0, sizeof *b);
}

/* Copies are ordered on the compute stream. Host-to-device returns once
 * the source may be reused (CUDA stages pageable memory; pinned sources
 * are read asynchronously, so callers must not touch them until the
 * stream passed the copy); device-to-host returns with the data there. */
int mg_copy_h2d(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_copy(ctx->dev, dst, src, bytes,
				    cudaMemcpyHostToDevice, 0);
#endif
	(void)ctx;
	memcpy(dst, src, bytes);
	return 0;
}

int mg_copy_d2h(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_copy(ctx->dev, dst, src, bytes,
				    cudaMemcpyDeviceToHost, 1);
#endif
	(void)ctx;
	memcpy(dst, src, bytes);
	return 0;
}

int mg_copy_d2d(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_copy(ctx->dev, dst, src, bytes,
				    cudaMemcpyDeviceToDevice, 0);
#endif
	(void)ctx;
	memmove(dst, src, bytes);
	return 0;
}

int mg_memset_dev(struct mg_ctx *ctx, void *dst, int value, size_t bytes)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_memset(ctx->dev, dst, value, bytes);
#endif
	(void)ctx;
	memset(dst, value, bytes);
	return 0;
}

int mg_copy_async(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_copy_async(ctx->dev, dst, src, bytes);
#endif
	(void)ctx;
	memcpy(dst, src, bytes);
	return 0;
}

int mg_copy_join(struct mg_ctx *ctx)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_copy_join(ctx->dev);
#endif
	(void)ctx;
	return 0;
}

/* fn(arg) on the compute or the side stream; on the CPU, now. */
static int host_call(struct mg_ctx *ctx, void (*fn)(void *arg), void *arg,
		     bool side)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return side ? mg_cuda_host_call_side(ctx->dev, fn, arg)
			    : mg_cuda_host_call(ctx->dev, fn, arg);
#endif
	(void)ctx;
	(void)side;
	fn(arg);
	return 0;
}

int mg_host_call(struct mg_ctx *ctx, void (*fn)(void *arg), void *arg)
{
	return host_call(ctx, fn, arg, false);
}

int mg_host_call_side(struct mg_ctx *ctx, void (*fn)(void *arg), void *arg)
{
	return host_call(ctx, fn, arg, true);
}

int mg_device_sync(struct mg_ctx *ctx)
{
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA)
		return mg_cuda_sync(ctx->dev);
#endif
	(void)ctx;
	return 0;
}
