/*
 * tensor_file.c - the plugins' read access to safetensors files
 * (include/mg/tensor_file.h), over the core's validated, memory-mapped
 * reader (safetensors.c); the writer, and since ABI 1.6 the sharded
 * writer of Hugging Face folders (model-0000k-of-0000N.safetensors and
 * the index).
 */
#include <dirent.h>
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

/* Element i of a float tensor as double. Loads through memcpy: a
 * tensor memory-mapped from a safetensors file need not be aligned to
 * its element size (the format packs tensors back to back, and a
 * bitsandbytes folder puts U8 blobs before BF16 tensors). */
static double get(const struct mg_tensor *t, int64_t i)
{
	const char *p = (const char *)t->data;
	switch (t->dtype) {
	case MG_F64: {
		double v;
		memcpy(&v, p + i * 8, 8);
		return v;
	}
	case MG_F32: {
		float v;
		memcpy(&v, p + i * 4, 4);
		return v;
	}
	case MG_F16: {
		uint16_t v;
		memcpy(&v, p + i * 2, 2);
		return mg_half_to_float(v);
	}
	default: {
		uint16_t v;
		memcpy(&v, p + i * 2, 2);
		return mg_bf16_to_float(v);
	}
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

/* ABI 1.6: sharded writing (mg/tensor_file.h). */
struct mg_shard_writer {
	char dir[PATH_MAX], stem[256];
	uint64_t max, cur_bytes, total;
	struct mg_st_writer cur; /* the file being filled */
	int nfiles;		 /* .part files written */
	bool finished;
	int nmeta;
	char **meta_keys, **meta_vals;
	int n, cap; /* every tensor so far: its name and file (0-based) */
	struct shard_tensor {
		char *name;
		int file;
	} * tensors;
};

struct mg_shard_writer *mg_shard_writer_new(const char *dir, const char *stem,
					    uint64_t max_shard_bytes)
{
	if (!max_shard_bytes) {
		mg_error("%s: a shard size of 0 bytes", dir);
		return NULL;
	}
	struct mg_shard_writer *s = calloc(1, sizeof *s);
	if (!s) {
		mg_error("out of memory");
		return NULL;
	}
	if (snprintf(s->dir, sizeof s->dir, "%s", dir) >=
		    (int)sizeof s->dir - 64 ||
	    snprintf(s->stem, sizeof s->stem, "%s", stem) >=
		    (int)sizeof s->stem ||
	    !stem[0] || strchr(stem, '/')) {
		mg_error("%s/%s: bad folder or file name", dir, stem);
		free(s);
		return NULL;
	}
	s->max = max_shard_bytes;
	mg_st_writer_init(&s->cur);
	return s;
}

int mg_shard_writer_meta(struct mg_shard_writer *s, const char *key,
			 const char *value)
{
	char **k = realloc(s->meta_keys, (size_t)(s->nmeta + 1) * sizeof *k);
	if (k)
		s->meta_keys = k;
	char **v = realloc(s->meta_vals, (size_t)(s->nmeta + 1) * sizeof *v);
	if (v)
		s->meta_vals = v;
	char *kc = k ? strdup(key) : NULL, *vc = v ? strdup(value) : NULL;
	if (!kc || !vc) {
		free(kc);
		free(vc);
		return mg_error("out of memory");
	}
	s->meta_keys[s->nmeta] = kc;
	s->meta_vals[s->nmeta++] = vc;
	return 0;
}

static void part_path(const struct mg_shard_writer *s, int k, char *p,
		      size_t cap)
{
	snprintf(p, cap, "%s/%s-%05d.safetensors.part", s->dir, s->stem, k + 1);
}

/* The file being filled written out as the next .part (then emptied). */
static int flush_file(struct mg_shard_writer *s)
{
	if (s->nfiles == 99999)
		return mg_error("%s: more than 99999 shards; give a larger "
				"shard size",
				s->dir);
	char path[PATH_MAX + 64];
	part_path(s, s->nfiles, path, sizeof path);
	int rc = 0;
	for (int i = 0; i < s->nmeta && !rc; i++)
		rc = mg_st_writer_meta(&s->cur, s->meta_keys[i],
				       s->meta_vals[i]);
	if (!rc)
		rc = mg_st_writer_save(&s->cur, path);
	mg_st_writer_free(&s->cur);
	mg_st_writer_init(&s->cur);
	s->cur_bytes = 0;
	if (rc)
		return -1;
	s->nfiles++;
	return 0;
}

int mg_shard_writer_take(struct mg_shard_writer *s, struct mg_tensor_writer *g)
{
	struct mg_st_writer *src = &g->st;
	uint64_t bytes = 0;
	for (int i = 0; i < src->n; i++)
		bytes += src->entries[i].bytes;
	if (s->finished)
		return mg_error("%s: shard writer already finished", s->dir);
	if (s->cur.n && s->cur_bytes + bytes > s->max && flush_file(s))
		return -1;
	/* room first, so that the move below cannot fail half way */
	struct mg_st_writer *d = &s->cur;
	if (d->n + src->n > d->cap) {
		const int ncap = d->n + src->n + 64;
		void *q =
			realloc(d->entries, (size_t)ncap * sizeof *d->entries);
		if (!q)
			return mg_error("out of memory");
		d->entries = q;
		d->cap = ncap;
	}
	if (s->n + src->n > s->cap) {
		const int ncap = 2 * (s->n + src->n) + 64;
		void *q =
			realloc(s->tensors, (size_t)ncap * sizeof *s->tensors);
		if (!q)
			return mg_error("out of memory");
		s->tensors = q;
		s->cap = ncap;
	}
	for (int i = 0; i < src->n; i++) {
		char *name = strdup(src->entries[i].name);
		if (!name)
			return mg_error("out of memory");
		s->tensors[s->n].name = name;
		s->tensors[s->n++].file = s->nfiles;
	}
	memcpy(d->entries + d->n, src->entries,
	       (size_t)src->n * sizeof *src->entries);
	d->n += src->n;
	src->n = 0; /* the data is the shard writer's now */
	s->cur_bytes += bytes;
	s->total += bytes;
	return 0;
}

static void final_name(const struct mg_shard_writer *s, int k, char *name,
		       size_t cap)
{
	if (s->nfiles == 1)
		snprintf(name, cap, "%s.safetensors", s->stem);
	else
		snprintf(name, cap, "%s-%05d-of-%05d.safetensors", s->stem,
			 k + 1, s->nfiles);
}

/* JSON string of text (quotes, backslashes, control characters
 * escaped) appended to the buffer at *b (grown as needed). */
static int json_str(char **b, size_t *len, size_t *cap, const char *text)
{
	const size_t need = *len + 6 * strlen(text) + 8;
	if (need > *cap) {
		size_t ncap = 2 * need;
		char *q = realloc(*b, ncap);
		if (!q)
			return mg_error("out of memory");
		*b = q;
		*cap = ncap;
	}
	char *o = *b + *len;
	*o++ = '"';
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		if (*c == '"' || *c == '\\') {
			*o++ = '\\';
			*o++ = (char)*c;
		} else if (*c < 0x20) {
			o += sprintf(o, "\\u%04x", *c);
		} else {
			*o++ = (char)*c;
		}
	}
	*o++ = '"';
	*o = 0;
	*len = (size_t)(o - *b);
	return 0;
}

static int json_raw(char **b, size_t *len, size_t *cap, const char *text)
{
	const size_t n = strlen(text);
	if (*len + n + 1 > *cap) {
		size_t ncap = 2 * (*len + n + 1);
		char *q = realloc(*b, ncap);
		if (!q)
			return mg_error("out of memory");
		*b = q;
		*cap = ncap;
	}
	memcpy(*b + *len, text, n + 1);
	*len += n;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct shard_tensor *)a)->name,
		      ((const struct shard_tensor *)b)->name);
}

/* STEM.safetensors.index.json as transformers writes it (json.dumps,
 * indent 2, keys sorted); a name given twice is an error. */
static int write_index(const struct mg_shard_writer *s)
{
	struct shard_tensor *ord =
		malloc((size_t)(s->n ? s->n : 1) * sizeof *ord);
	if (!ord)
		return mg_error("out of memory");
	if (s->n)
		memcpy(ord, s->tensors, (size_t)s->n * sizeof *ord);
	qsort(ord, (size_t)s->n, sizeof *ord, by_name);
	char *b = NULL, line[128], file[320];
	size_t len = 0, cap = 0;
	snprintf(line, sizeof line,
		 "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n"
		 "  \"weight_map\": {",
		 (unsigned long long)s->total);
	int rc = json_raw(&b, &len, &cap, line);
	for (int i = 0; i < s->n && !rc; i++) {
		const char *name = ord[i].name;
		if (i && !strcmp(name, ord[i - 1].name)) {
			rc = mg_error("%s: tensor '%s' written twice", s->dir,
				      name);
			break;
		}
		final_name(s, ord[i].file, file, sizeof file);
		rc = json_raw(&b, &len, &cap, i ? ",\n    " : "\n    ") ||
		     json_str(&b, &len, &cap, name) ||
		     json_raw(&b, &len, &cap, ": ") ||
		     json_str(&b, &len, &cap, file);
	}
	if (!rc)
		rc = json_raw(&b, &len, &cap, "\n  }\n}\n");
	free(ord);
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s.safetensors.index.json", s->dir,
		 s->stem);
	if (!rc)
		rc = mg_file_write_atomic(path, b, len);
	free(b);
	return rc ? -1 : 0;
}

/* Whether name is STEM-KKKKK-of-NNNNN.safetensors; sets *k, *n. */
static bool shard_name(const char *stem, const char *name, int *k, int *n)
{
	const size_t sl = strlen(stem);
	char tail[32];
	if (strncmp(name, stem, sl))
		return false;
	if (sscanf(name + sl, "-%5d-of-%5d.safetensors", k, n) != 2)
		return false;
	snprintf(tail, sizeof tail, "-%05d-of-%05d.safetensors", *k, *n);
	return !strcmp(name + sl, tail);
}

/* A file a killed export leaves: its shards before the rename
 * (STEM-NNNNN.safetensors.part) and the temporary files of a write
 * (STEM....safetensors.tmp, .part.tmp, .index.json.tmp). Once this
 * export's own files are renamed, any such name is stale. */
static bool leftover_name(const char *stem, const char *name)
{
	const size_t sl = strlen(stem), nl = strlen(name);
	static const char *const tails[] = {
		".safetensors.part", ".safetensors.part.tmp",
		".safetensors.tmp", ".safetensors.index.json.tmp"};
	if (strncmp(name, stem, sl) || (name[sl] != '-' && name[sl] != '.'))
		return false;
	for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
		const size_t tl = strlen(tails[i]);
		if (nl >= sl + tl && !strcmp(name + nl - tl, tails[i]))
			return true;
	}
	return false;
}

/* Files of an earlier export that the new one does not name, and what a
 * killed one left behind. */
static int remove_stale(const struct mg_shard_writer *s)
{
	DIR *d = opendir(s->dir);
	if (!d)
		return mg_error("%s: %s", s->dir, strerror(errno));
	char one[300], idx[320], path[PATH_MAX + 300];
	snprintf(one, sizeof one, "%s.safetensors", s->stem);
	snprintf(idx, sizeof idx, "%s.safetensors.index.json", s->stem);
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d))) {
		int k, n;
		bool stale;
		if (!strcmp(e->d_name, one))
			stale = s->nfiles > 1;
		else if (!strcmp(e->d_name, idx))
			stale = s->nfiles == 1;
		else if (shard_name(s->stem, e->d_name, &k, &n))
			stale = s->nfiles == 1 || n != s->nfiles || k < 1 ||
				k > n;
		else
			stale = leftover_name(s->stem, e->d_name);
		snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
		if (stale && unlink(path) && errno != ENOENT)
			rc = mg_error("%s: stale file of an earlier export: "
				      "%s",
				      path, strerror(errno));
	}
	closedir(d);
	return rc;
}

int mg_shard_writer_finish(struct mg_shard_writer *s)
{
	if (s->finished)
		return mg_error("%s: shard writer already finished", s->dir);
	if ((s->cur.n || !s->nfiles) && flush_file(s))
		return -1;
	char from[PATH_MAX + 64], to[PATH_MAX + 400], name[320];
	for (int k = 0; k < s->nfiles; k++) {
		part_path(s, k, from, sizeof from);
		final_name(s, k, name, sizeof name);
		snprintf(to, sizeof to, "%s/%s", s->dir, name);
		if (rename(from, to))
			return mg_error("rename %s -> %s: %s", from, to,
					strerror(errno));
	}
	s->finished = true;
	if (s->nfiles > 1 && write_index(s))
		return -1;
	if (remove_stale(s))
		return -1;
	return s->nfiles;
}

void mg_shard_writer_free(struct mg_shard_writer *s)
{
	if (!s)
		return;
	char path[PATH_MAX + 64];
	for (int k = 0; k < s->nfiles && !s->finished; k++) {
		part_path(s, k, path, sizeof path);
		unlink(path);
	}
	mg_st_writer_free(&s->cur);
	for (int i = 0; i < s->nmeta; i++) {
		free(s->meta_keys[i]);
		free(s->meta_vals[i]);
	}
	free(s->meta_keys);
	free(s->meta_vals);
	for (int i = 0; i < s->n; i++)
		free(s->tensors[i].name);
	free(s->tensors);
	free(s);
}
