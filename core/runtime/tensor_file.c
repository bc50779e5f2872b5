/*
 * tensor_file.c - the plugins' read access to safetensors files
 * (include/mg/tensor_file.h), over the core's validated, memory-mapped
 * reader (safetensors.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "runtime/safetensors.h"

struct mg_tensor_file {
	struct mg_st_file st;
};

struct mg_tensor_file *mg_tensor_file_open(const char *path)
{
	struct mg_tensor_file *f = calloc(1, sizeof *f);
	if (!f) {
		mg_error("%s: out of memory", path);
		return NULL;
	}
	if (mg_st_open(&f->st, path)) {
		mg_st_close(&f->st);
		free(f);
		return NULL;
	}
	return f;
}

void mg_tensor_file_close(struct mg_tensor_file *f)
{
	if (!f)
		return;
	mg_st_close(&f->st);
	free(f);
}

const char *mg_tensor_file_path(const struct mg_tensor_file *f)
{
	return f->st.path;
}

int mg_tensor_file_get(const struct mg_tensor_file *f, const char *name,
		       struct mg_tensor *view)
{
	const struct mg_st_entry *e = mg_st_find(&f->st, name);
	if (!e)
		return 0;
	*view = mg_tensor_make((void *)e->data, e->dtype, MG_DEV_CPU, e->ndim,
			       e->shape);
	return 1;
}

const char *mg_tensor_file_meta(const struct mg_tensor_file *f, const char *key)
{
	return mg_st_meta(&f->st, key);
}

/* Element i of a float tensor as double. */
static double get(const struct mg_tensor *t, int64_t i)
{
	switch (t->dtype) {
	case MG_F64:
		return ((const double *)t->data)[i];
	case MG_F32:
		return ((const float *)t->data)[i];
	case MG_F16:
		return mg_half_to_float(((const uint16_t *)t->data)[i]);
	default:
		return mg_bf16_to_float(((const uint16_t *)t->data)[i]);
	}
}

int mg_tensor_convert_host(struct mg_tensor *dst, const struct mg_tensor *src)
{
	const enum mg_dtype s = src->dtype, d = dst->dtype;
	if ((s != MG_F32 && s != MG_F64 && s != MG_F16 && s != MG_BF16) ||
	    (d != MG_F32 && d != MG_F64 && d != MG_F16 && d != MG_BF16))
		return mg_error("convert: %s to %s is not supported",
				mg_dtype_name(s), mg_dtype_name(d));
	int64_t n = mg_tensor_numel(src);
	if (n != mg_tensor_numel(dst))
		return mg_error("convert: %lld elements into %lld",
				(long long)n, (long long)mg_tensor_numel(dst));
	if (s == d) {
		memcpy(dst->data, src->data, mg_tensor_bytes(src));
		return 0;
	}
	/* Element-wise and independent: on every core (checkpoints of
	 * billions of values convert at load). */
#pragma omp parallel for schedule(static) if (n > 65536)
	for (int64_t i = 0; i < n; i++) {
		double v = get(src, i);
		if (d == MG_F64)
			((double *)dst->data)[i] = v;
		else if (d == MG_F32)
			((float *)dst->data)[i] = (float)v;
		else if (d == MG_F16)
			((uint16_t *)dst->data)[i] = mg_float_to_half((float)v);
		else
			((uint16_t *)dst->data)[i] = mg_float_to_bf16((float)v);
	}
	return 0;
}

struct mg_tensor_writer {
	struct mg_st_writer st;
};

struct mg_tensor_writer *mg_tensor_writer_new(void)
{
	struct mg_tensor_writer *w = calloc(1, sizeof *w);
	if (!w) {
		mg_error("out of memory");
		return NULL;
	}
	mg_st_writer_init(&w->st);
	return w;
}

int mg_tensor_writer_add(struct mg_tensor_writer *w, const char *name,
			 const struct mg_tensor *t)
{
	return mg_st_writer_add(&w->st, name, t->dtype, t->ndim, t->shape,
				t->data);
}

int mg_tensor_writer_meta(struct mg_tensor_writer *w, const char *key,
			  const char *value)
{
	return mg_st_writer_meta(&w->st, key, value);
}

int mg_tensor_writer_save(const struct mg_tensor_writer *w, const char *path)
{
	return mg_st_writer_save(&w->st, path);
}

void mg_tensor_writer_free(struct mg_tensor_writer *w)
{
	if (!w)
		return;
	mg_st_writer_free(&w->st);
	free(w);
}

int mg_mkdir_p(const char *path)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
		return mg_error("%s: path too long", path);
	for (char *s = p + 1;; s++) {
		const char c = *s;
		if (c && c != '/')
			continue;
		*s = 0;
		struct stat st;
		if (mkdir(p, 0755) && errno != EEXIST)
			return mg_error("mkdir %s: %s", p, strerror(errno));
		if (stat(p, &st) || !S_ISDIR(st.st_mode))
			return mg_error("mkdir %s: not a folder", p);
		if (!(*s = c))
			return 0;
	}
}

int mg_file_write_atomic(const char *path, const void *data, size_t len)
{
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	if (!f)
		return mg_error("%s: %s", tmp, strerror(errno));
	bool ok = fwrite(data, 1, len, f) == len;
	ok &= fflush(f) == 0;
	ok &= fclose(f) == 0;
	if (!ok || rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return mg_error("%s: %s", path, strerror(e));
	}
	return 0;
}
