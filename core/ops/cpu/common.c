/*
 * common.c - scratch memory shared by the CPU kernels (cpu_ops.h).
 */
#include <string.h>

#include "cpu_ops.h"

void *mgo_scratch_get(struct mg_ctx *ctx, struct mgo_scratch *s,
		      struct mg_buf *ws, size_t bytes)
{
	memset(s, 0, sizeof *s);
	s->buf = ws ? ws : &s->own;
	if (bytes == 0)
		bytes = 64;
	if (mg_buf_reserve(ctx, s->buf, bytes, MG_MEM_ACTIVATIONS))
		return NULL;
	return s->buf->ptr;
}

void mgo_scratch_done(struct mg_ctx *ctx, struct mgo_scratch *s)
{
	if (s->buf == &s->own)
		mg_buf_free(ctx, &s->own);
}
