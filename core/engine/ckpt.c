/*
 * ckpt.c - named full tensors in a safetensors file, so a checkpoint
 * written by one strategy and rank count loads into any other.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/ckpt.h"

void mg_ckpt_begin_write(struct mg_ckpt *ck, struct mg_ctx *ctx)
{
	memset(ck, 0, sizeof *ck);
	ck->ctx = ctx;
	ck->writing = 1;
	mg_st_writer_init(&ck->w);
}

int mg_ckpt_open_read(struct mg_ckpt *ck, struct mg_ctx *ctx, const char *path)
{
	memset(ck, 0, sizeof *ck);
	ck->ctx = ctx;
	if (mg_st_open(&ck->f, path))
		return -1;
	ck->got = calloc((size_t)ck->f.nentries + 1, sizeof *ck->got);
	return ck->got ? 0 : mg_error("out of memory");
}

const char *mg_ckpt_unread(const struct mg_ckpt *ck)
{
	for (int i = 0; ck->got && i < ck->f.nentries; i++)
		if (!ck->got[i])
			return ck->f.entries[i].name;
	return NULL;
}

void mg_ckpt_free(struct mg_ckpt *ck)
{
	if (ck->writing)
		mg_st_writer_free(&ck->w);
	else
		mg_st_close(&ck->f);
	free(ck->scratch);
	ck->scratch = NULL;
	free(ck->got);
	ck->got = NULL;
}

static void *scratch(struct mg_ckpt *ck, size_t bytes)
{
	if (ck->scratch_bytes < bytes) {
		free(ck->scratch);
		ck->scratch = malloc(bytes);
		ck->scratch_bytes = ck->scratch ? bytes : 0;
	}
	return ck->scratch;
}

int mg_ckpt_put(struct mg_ckpt *ck, const char *name, const struct mg_tensor *t)
{
	if (!ck->writing)
		return mg_error("checkpoint: put '%s' while loading", name);
	if (ck->ctx->rank != 0)
		return 0;
	size_t bytes = mg_tensor_bytes(t);
	const void *src = t->data;
	if (t->device != MG_DEV_CPU) {
		void *h = scratch(ck, bytes);
		if (!h)
			return mg_error("checkpoint: out of memory for '%s'",
					name);
		if (mg_copy_d2h(ck->ctx, h, t->data, bytes))
			return -1;
		src = h;
	}
	return mg_st_writer_add(&ck->w, name, t->dtype, t->ndim, t->shape, src);
}

int mg_ckpt_has(struct mg_ckpt *ck, const char *name)
{
	return !ck->writing && mg_st_find(&ck->f, name) != NULL;
}

/* Convert n elements between F32 and F64 (or copy when equal). */
static int convert(void *dst, enum mg_dtype dt, const void *src,
		   enum mg_dtype st, int64_t n)
{
	if (dt == st) {
		memcpy(dst, src, (size_t)n * mg_dtype_size(dt));
		return 0;
	}
	if (dt == MG_F32 && st == MG_F64) {
		for (int64_t i = 0; i < n; i++)
			((float *)dst)[i] = (float)((const double *)src)[i];
		return 0;
	}
	if (dt == MG_F64 && st == MG_F32) {
		for (int64_t i = 0; i < n; i++)
			((double *)dst)[i] = ((const float *)src)[i];
		return 0;
	}
	return -1;
}

int mg_ckpt_get(struct mg_ckpt *ck, const char *name, struct mg_tensor *t)
{
	const struct mg_st_entry *e = mg_st_find(&ck->f, name);
	if (!e)
		return mg_error("checkpoint %s has no tensor '%s'", ck->f.path,
				name);
	int same = e->ndim == t->ndim;
	for (int i = 0; same && i < t->ndim; i++)
		same = e->shape[i] == t->shape[i];
	if (!same)
		return mg_error("checkpoint %s: tensor '%s' has another shape "
				"than the model declares (model changed?)",
				ck->f.path, name);
	if (ck->got)
		ck->got[e - ck->f.entries] = true;
	int64_t n = mg_tensor_numel(t);
	size_t bytes = mg_tensor_bytes(t);
	void *dst = t->data;
	if (t->device != MG_DEV_CPU && !(dst = scratch(ck, bytes)))
		return mg_error("checkpoint: out of memory for '%s'", name);
	if (convert(dst, t->dtype, e->data, e->dtype, n))
		return mg_error("checkpoint %s: tensor '%s' is %s, cannot load "
				"into %s",
				ck->f.path, name, mg_dtype_name(e->dtype),
				mg_dtype_name(t->dtype));
	if (t->device != MG_DEV_CPU)
		return mg_copy_h2d(ck->ctx, t->data, dst, bytes);
	return 0;
}
