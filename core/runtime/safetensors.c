/*
 * safetensors.c - validated safetensors reader (mmap) and atomic writer.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/input_files.h"
#include "runtime/runtime.h"
#include "runtime/safetensors.h"

static int parse_dtype(const char *s, enum mg_dtype *dt)
{
	static const struct {
		const char *name;
		enum mg_dtype dt;
	} map[] = {{"F32", MG_F32},   {"F64", MG_F64}, {"F16", MG_F16},
		   {"BF16", MG_BF16}, {"U8", MG_U8},   {"I32", MG_I32},
		   {"I64", MG_I64}};
	for (size_t i = 0; i < sizeof map / sizeof *map; i++)
		if (!strcmp(s, map[i].name)) {
			*dt = map[i].dt;
			return 0;
		}
	return -1;
}

static int cmp_entry_offset(const void *a, const void *b)
{
	const struct mg_st_entry *x = a, *y = b;
	const char *px = x->data, *py = y->data;
	if (px != py)
		return px < py ? -1 : 1;
	return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* A JSON number that is a whole number in [0, 2^53] (exact in a double). */
static int json_count(const cJSON *j, uint64_t *v)
{
	if (!cJSON_IsNumber(j))
		return -1;
	double d = j->valuedouble;
	if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d)
		return -1;
	*v = (uint64_t)d;
	return 0;
}

static int parse_entry(struct mg_st_file *f, const cJSON *item,
		       struct mg_st_entry *e, const char *base, size_t dlen)
{
	const char *name = item->string;
	e->name = strdup(name);
	if (!cJSON_IsObject(item))
		return mg_error("%s: tensor '%s': header entry is not a JSON "
				"object",
				f->path, name);
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
	const cJSON *off =
		cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
	if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
	    cJSON_GetArraySize(off) != 2)
		return mg_error("%s: tensor '%s': header entry lacks dtype, "
				"shape or data_offsets",
				f->path, name);
	if (parse_dtype(dt->valuestring, &e->dtype))
		return mg_error("%s: tensor '%s': unsupported dtype '%s'",
				f->path, name, dt->valuestring);
	e->ndim = cJSON_GetArraySize(sh);
	if (e->ndim > MG_MAX_DIMS)
		return mg_error("%s: tensor '%s': %d dimensions (max %d)",
				f->path, name, e->ndim, MG_MAX_DIMS);
	uint64_t numel = 1, need;
	for (int i = 0; i < e->ndim; i++) {
		uint64_t d;
		if (json_count(cJSON_GetArrayItem(sh, i), &d))
			return mg_error("%s: tensor '%s': shape[%d] is not a "
					"non-negative integer",
					f->path, name, i);
		if (__builtin_mul_overflow(numel, d, &numel))
			return mg_error("%s: tensor '%s': shape overflows",
					f->path, name);
		e->shape[i] = (int64_t)d;
	}
	if (__builtin_mul_overflow(numel, (uint64_t)mg_dtype_size(e->dtype),
				   &need))
		return mg_error("%s: tensor '%s': shape overflows", f->path,
				name);
	uint64_t b, en;
	if (json_count(cJSON_GetArrayItem(off, 0), &b) ||
	    json_count(cJSON_GetArrayItem(off, 1), &en))
		return mg_error("%s: tensor '%s': data_offsets are not two "
				"non-negative integers",
				f->path, name);
	if (en < b || en > dlen)
		return mg_error("%s: tensor '%s': data_offsets [%llu, %llu] "
				"outside the %zu data bytes (file truncated?)",
				f->path, name, (unsigned long long)b,
				(unsigned long long)en, dlen);
	e->bytes = (size_t)(en - b);
	if (e->bytes != need)
		return mg_error("%s: tensor '%s': %zu bytes at offset %llu but "
				"shape and dtype need %llu",
				f->path, name, e->bytes, (unsigned long long)b,
				(unsigned long long)need);
	e->data = base + (size_t)b;
	return 0;
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_entry_name(const void *a, const void *b)
{
	const struct mg_st_entry *x = *(const struct mg_st_entry *const *)a,
				 *y = *(const struct mg_st_entry *const *)b;
	return strcmp(x->name, y->name);
}

/* f->by_name: the entries sorted by name; a name twice is an error. */
static int index_names(struct mg_st_file *f)
{
	f->by_name = malloc(((size_t)f->nentries + 1) * sizeof *f->by_name);
	if (!f->by_name)
		return mg_error("%s: out of memory", f->path);
	for (int i = 0; i < f->nentries; i++)
		f->by_name[i] = &f->entries[i];
	qsort(f->by_name, (size_t)f->nentries, sizeof *f->by_name,
	      cmp_entry_name);
	for (int i = 1; i < f->nentries; i++)
		if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
			return mg_error("%s: tensor '%s' appears twice in the "
					"header",
					f->path, f->by_name[i]->name);
	return 0;
}

static int parse_meta(struct mg_st_file *f, const cJSON *it)
{
	if (f->meta_keys)
		return mg_error("%s: header has __metadata__ twice", f->path);
	if (!cJSON_IsObject(it))
		return mg_error("%s: __metadata__ is not a JSON object of "
				"strings",
				f->path);
	int n = cJSON_GetArraySize(it);
	f->meta_keys = calloc((size_t)n + 1, sizeof(char *));
	f->meta_vals = calloc((size_t)n + 1, sizeof(char *));
	if (!f->meta_keys || !f->meta_vals)
		return mg_error("%s: out of memory", f->path);
	for (const cJSON *m = it->child; m; m = m->next) {
		if (!cJSON_IsString(m))
			return mg_error("%s: __metadata__ '%s' is not a string",
					f->path, m->string);
		f->meta_keys[f->nmeta] = strdup(m->string);
		f->meta_vals[f->nmeta++] = strdup(m->valuestring);
		if (!f->meta_keys[f->nmeta - 1] || !f->meta_vals[f->nmeta - 1])
			return mg_error("%s: out of memory", f->path);
	}
	/* Duplicates by sorting a copy of the keys (a hostile header may
	 * hold many: no pairwise comparison). */
	const char **k = malloc(((size_t)f->nmeta + 1) * sizeof *k);
	if (!k)
		return mg_error("%s: out of memory", f->path);
	memcpy(k, f->meta_keys, (size_t)f->nmeta * sizeof *k);
	qsort(k, (size_t)f->nmeta, sizeof *k, cmp_str_ptr);
	int rc = 0;
	for (int i = 1; i < f->nmeta && !rc; i++)
		if (!strcmp(k[i - 1], k[i]))
			rc = mg_error("%s: __metadata__ '%s' appears twice",
				      f->path, k[i]);
	free(k);
	return rc;
}

static int parse_header(struct mg_st_file *f, const char *json, size_t hlen)
{
	cJSON *root = cJSON_ParseWithLength(json, hlen);
	if (!root || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return mg_error(
			"%s: header (bytes 8..%zu) is not a JSON object",
			f->path, 8 + hlen);
	}
	const char *base = json + hlen;
	size_t dlen = f->size - 8 - hlen;
	int n = cJSON_GetArraySize(root), rc = 0;
	f->entries = calloc((size_t)n + 1, sizeof *f->entries);
	if (!f->entries) {
		cJSON_Delete(root);
		return mg_error("%s: out of memory", f->path);
	}
	for (const cJSON *it = root->child; it && !rc; it = it->next) {
		if (!strcmp(it->string, "__metadata__")) {
			rc = parse_meta(f, it);
			continue;
		}
		rc = parse_entry(f, it, &f->entries[f->nentries++], base, dlen);
	}
	cJSON_Delete(root);
	if (!rc)
		rc = index_names(f);
	if (rc)
		return rc;
	/* Entries must not overlap: sort a copy by offset and walk it
	 * (empty tensors occupy no bytes and overlap nothing). */
	struct mg_st_entry *s = malloc(((size_t)f->nentries + 1) * sizeof *s);
	memcpy(s, f->entries, (size_t)f->nentries * sizeof *s);
	qsort(s, (size_t)f->nentries, sizeof *s, cmp_entry_offset);
	const struct mg_st_entry *prev = NULL;
	for (int i = 0; i < f->nentries && !rc; i++) {
		if (!s[i].bytes)
			continue;
		if (prev && (const char *)prev->data + prev->bytes >
				    (const char *)s[i].data)
			rc = mg_error("%s: tensors '%s' and '%s' overlap",
				      f->path, prev->name, s[i].name);
		prev = &s[i];
	}
	free(s);
	return rc;
}

static int st_open(struct mg_st_file *f, const char *path)
{
	f->path = strdup(path);
	/* O_NONBLOCK: a FIFO must not block the open; refused below. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return mg_error("%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return mg_error("%s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return mg_error("%s: not a regular file", path);
	}
	if (st.st_size < 8) {
		close(fd);
		return mg_error("%s: %lld bytes, too short for a safetensors "
				"header",
				path, (long long)st.st_size);
	}
	f->size = (size_t)st.st_size;
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return mg_error("%s: mmap: %s", path, strerror(errno));
	}
	uint64_t hlen = 0;
	const unsigned char *p = f->map;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | p[i];
	if (hlen > f->size - 8)
		return mg_error(
			"%s: header length %llu at offset 0 exceeds the "
			"file size %zu (truncated or not safetensors)",
			path, (unsigned long long)hlen, f->size);
	return parse_header(f, (const char *)p + 8, (size_t)hlen);
}

/* A failed open releases what it took (f is left empty; closing it again
 * is harmless), so callers that only close an opened file leak nothing. */
int mg_st_open(struct mg_st_file *f, const char *path)
{
	memset(f, 0, sizeof *f);
	int rc = st_open(f, path);
	if (rc)
		mg_st_close(f);
	else /* what the run read, for the checkpoint's fingerprint */
		mg_input_files_note(path);
	return rc;
}

const struct mg_st_entry *mg_st_find(const struct mg_st_file *f,
				     const char *name)
{
	if (!f->by_name || !name)
		return NULL;
	struct mg_st_entry key = {.name = name};
	const struct mg_st_entry *kp = &key;
	const struct mg_st_entry **hit =
		bsearch(&kp, f->by_name, (size_t)f->nentries,
			sizeof *f->by_name, cmp_entry_name);
	return hit ? *hit : NULL;
}

const char *mg_st_meta(const struct mg_st_file *f, const char *key)
{
	for (int i = 0; i < f->nmeta; i++)
		if (!strcmp(f->meta_keys[i], key))
			return f->meta_vals[i];
	return NULL;
}

void mg_st_close(struct mg_st_file *f)
{
	if (f->map)
		munmap(f->map, f->size);
	for (int i = 0; i < f->nentries; i++)
		free((char *)f->entries[i].name);
	for (int i = 0; i < f->nmeta; i++) {
		free(f->meta_keys[i]);
		free(f->meta_vals[i]);
	}
	free(f->entries);
	free(f->by_name);
	free(f->meta_keys);
	free(f->meta_vals);
	free(f->path);
	memset(f, 0, sizeof *f);
}

void mg_st_writer_init(struct mg_st_writer *w)
{
	memset(w, 0, sizeof *w);
}

int mg_st_writer_add(struct mg_st_writer *w, const char *name, enum mg_dtype dt,
		     int ndim, const int64_t *shape, const void *data)
{
	if (w->n == w->cap) {
		int ncap = w->cap ? 2 * w->cap : 64;
		void *q =
			realloc(w->entries, (size_t)ncap * sizeof *w->entries);
		if (!q)
			return mg_error("out of memory");
		w->entries = q;
		w->cap = ncap;
	}
	struct mg_st_entry *e = &w->entries[w->n];
	memset(e, 0, sizeof *e);
	e->dtype = dt;
	e->ndim = ndim;
	size_t numel = 1;
	for (int i = 0; i < ndim; i++) {
		e->shape[i] = shape[i];
		numel *= (size_t)shape[i];
	}
	e->bytes = numel * mg_dtype_size(dt);
	void *copy = malloc(e->bytes ? e->bytes : 1);
	if (!copy)
		return mg_error("out of memory copying tensor '%s'", name);
	memcpy(copy, data, e->bytes);
	e->data = copy;
	e->name = strdup(name);
	w->n++;
	return 0;
}

int mg_st_writer_meta(struct mg_st_writer *w, const char *key,
		      const char *value)
{
	if (w->nmeta == w->capmeta) {
		int ncap = w->capmeta ? 2 * w->capmeta : 16;
		w->meta_keys =
			realloc(w->meta_keys, (size_t)ncap * sizeof(char *));
		w->meta_vals =
			realloc(w->meta_vals, (size_t)ncap * sizeof(char *));
		w->capmeta = ncap;
	}
	w->meta_keys[w->nmeta] = strdup(key);
	w->meta_vals[w->nmeta++] = strdup(value);
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t k = write(fd, c, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

int mg_st_writer_save(const struct mg_st_writer *w, const char *path)
{
	cJSON *root = cJSON_CreateObject();
	if (w->nmeta) {
		cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
		for (int i = 0; i < w->nmeta; i++)
			cJSON_AddStringToObject(meta, w->meta_keys[i],
						w->meta_vals[i]);
	}
	size_t off = 0;
	for (int i = 0; i < w->n; i++) {
		const struct mg_st_entry *e = &w->entries[i];
		cJSON *t = cJSON_AddObjectToObject(root, e->name);
		cJSON_AddStringToObject(t, "dtype", mg_dtype_name(e->dtype));
		cJSON *sh = cJSON_AddArrayToObject(t, "shape");
		for (int d = 0; d < e->ndim; d++)
			cJSON_AddItemToArray(
				sh, cJSON_CreateNumber((double)e->shape[d]));
		cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
		cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
		cJSON_AddItemToArray(
			o, cJSON_CreateNumber((double)(off + e->bytes)));
		off += e->bytes;
	}
	char *json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	size_t jlen = strlen(json), padded = (jlen + 7) & ~(size_t)7;
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		free(json);
		return mg_error("%s: %s", tmp, strerror(errno));
	}
	unsigned char hdr[8];
	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	int rc = write_all(fd, hdr, 8) || write_all(fd, json, jlen);
	for (size_t i = jlen; i < padded && !rc; i++)
		rc = write_all(fd, " ", 1);
	for (int i = 0; i < w->n && !rc; i++)
		rc = write_all(fd, w->entries[i].data, w->entries[i].bytes);
	free(json);
	if (rc || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return mg_error("%s: write failed: %s", tmp, strerror(e));
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return mg_error("rename %s -> %s: %s", tmp, path, strerror(e));
	}
	return 0;
}

void mg_st_writer_free(struct mg_st_writer *w)
{
	for (int i = 0; i < w->n; i++) {
		free((void *)w->entries[i].data);
		free((char *)w->entries[i].name);
	}
	for (int i = 0; i < w->nmeta; i++) {
		free(w->meta_keys[i]);
		free(w->meta_vals[i]);
	}
	free(w->entries);
	free(w->meta_keys);
	free(w->meta_vals);
	memset(w, 0, sizeof *w);
}
