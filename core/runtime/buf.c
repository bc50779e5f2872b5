/*
 * buf.c - accounted allocations on the context's device and host-device
 * copies. The CPU device allocates 64-byte aligned host memory; every byte
 * is counted in the context's stats under its category, so the report can
 * say where memory went.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static void account(struct mg_ctx *ctx, const struct mg_buf *b, int sign)
{
	if (ctx && ctx->stats)
		mg_stats_mem(ctx->stats, b->cat, sign * (int64_t)b->bytes,
			     b->pinned_host);
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
	if (ctx->dev->kind != MG_DEV_CPU)
		return mg_error("device kind %d has no allocator in this build",
				ctx->dev->kind);
	b->ptr = host_alloc(bytes);
	if (!b->ptr)
		return mg_error("out of host memory allocating %zu bytes for %s",
				bytes, mg_mem_cat_name(cat));
	b->bytes = bytes;
	b->cat = cat;
	account(ctx, b, 1);
	return 0;
}

int mg_buf_alloc_host(struct mg_ctx *ctx, struct mg_buf *b, size_t bytes,
		      enum mg_mem_cat cat, bool pinned)
{
	memset(b, 0, sizeof *b);
	b->device = MG_DEV_CPU;
	b->ptr = host_alloc(bytes);
	if (!b->ptr)
		return mg_error("out of host memory allocating %zu bytes for %s",
				bytes, mg_mem_cat_name(cat));
	b->bytes = bytes;
	b->cat = cat;
	/* Page-locking needs a GPU driver; on the CPU device there is no
	 * transfer to speed up, so the buffer stays pageable. */
	b->pinned_host = pinned && ctx->dev->kind != MG_DEV_CPU;
	if (ctx->dev->kind == MG_DEV_CPU)
		account(ctx, b, 1); /* host memory is the device's memory */
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
	if (b->device == ctx->dev->kind)
		account(ctx, b, -1);
	free(b->ptr);
	memset(b, 0, sizeof *b);
}

int mg_copy_h2d(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	(void)ctx;
	memcpy(dst, src, bytes);
	return 0;
}

int mg_copy_d2h(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	(void)ctx;
	memcpy(dst, src, bytes);
	return 0;
}

int mg_copy_d2d(struct mg_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	(void)ctx;
	memmove(dst, src, bytes);
	return 0;
}

int mg_memset_dev(struct mg_ctx *ctx, void *dst, int value, size_t bytes)
{
	(void)ctx;
	memset(dst, value, bytes);
	return 0;
}

int mg_device_sync(struct mg_ctx *ctx)
{
	(void)ctx;
	return 0;
}
