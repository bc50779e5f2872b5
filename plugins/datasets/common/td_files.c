/*
 * td_files.c - reading what users export from the Hub: JSON arrays,
 * JSON Lines, either gzipped, checked for UTF-8 first so every error
 * names the file and where in it (line for JSONL, byte offset and line
 * for arrays) instead of failing later inside the tokenizer.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "mg/tokenizer.h"
#include "textdata.h"

#define TD_MAX_FILE (8ull << 30)

void td_buf_free(struct td_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
}

/* Through mg_file_read: FIFOs and devices refused, a gzip file that is
 * truncated or corrupt an error naming it (not a shorter file). */
int td_read_file(const char *path, struct td_buf *out)
{
	memset(out, 0, sizeof *out);
	size_t len;
	char *p = mg_file_read(path, TD_MAX_FILE, MG_FILE_GUNZIP, &len);
	if (!p)
		return -1;
	if (strspn(p, " \t\r\n") == len) {
		free(p);
		return mg_error("%s: empty file", path);
	}
	out->data = p;
	out->len = len;
	return 0;
}

int td_utf8_check(const char *str, size_t n, size_t *bad)
{
	*bad = mg_utf8_valid(str, n);
	return *bad < n ? -1 : 0;
}

static int64_t line_of(const char *s, size_t off)
{
	int64_t line = 1;
	for (size_t i = 0; i < off; i++)
		line += s[i] == '\n';
	return line;
}

/* A string holding a NUL (\u0000 or a raw 0 byte) would be cut there
 * by every C string after cJSON, the rest of the field silently lost:
 * refused naming the file, the line and the field. */
static int nul_check(const char *path, const char *s, size_t n,
		     const char *base, int64_t line)
{
	char key[128];
	size_t at = mg_json_nul_string(s, n, key, sizeof key);
	if (at == n)
		return 0;
	if (!line)
		line = line_of(base, (size_t)(s - base) + at);
	return mg_error("%s:%lld: field \"%s\" holds a NUL character "
			"(\\u0000 or a 0 byte), which would cut its text "
			"there",
			path, (long long)line, key);
}

/* The offset of the first byte of s[off..n) that is not JSON white
 * space, or n: cJSON stops after the first value, and text after it (a
 * second record on the line, a second array) would be dropped unseen. */
static size_t after_value(const char *s, size_t off, size_t n)
{
	while (off < n && (s[off] == ' ' || s[off] == '\t' || s[off] == '\r' ||
			   s[off] == '\n'))
		off++;
	return off;
}

static int push(struct td_records *r, int64_t *cap, cJSON *rec, int64_t line)
{
	if (r->n == *cap) {
		int64_t nc = *cap ? *cap * 2 : 256;
		cJSON **a = realloc(r->rec, (size_t)nc * sizeof *a);
		int64_t *l =
			a ? realloc(r->line, (size_t)nc * sizeof *l) : NULL;
		if (a)
			r->rec = a;
		if (!a || !l)
			return mg_error("%s: out of memory", r->path);
		r->line = l;
		*cap = nc;
	}
	r->rec[r->n] = rec;
	r->line[r->n++] = line;
	return 0;
}

static int parse_array(const char *path, const struct td_buf *b,
		       struct td_records *r)
{
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(b->data, b->len, &end, 0);
	if (!root) {
		size_t off = end ? (size_t)(end - b->data) : 0;
		return mg_error("%s: invalid JSON at byte offset %zu (line "
				"%lld)",
				path, off, (long long)line_of(b->data, off));
	}
	r->owned = malloc(sizeof *r->owned);
	if (!r->owned) {
		cJSON_Delete(root);
		return mg_error("%s: out of memory", path);
	}
	r->owned[0] = root;
	r->nowned = 1;
	if (!cJSON_IsArray(root))
		return mg_error("%s: not a JSON array of objects", path);
	size_t rest = after_value(b->data, (size_t)(end - b->data), b->len);
	if (rest < b->len)
		return mg_error("%s: text after the JSON array at byte offset "
				"%zu (line %lld)",
				path, rest, (long long)line_of(b->data, rest));
	if (nul_check(path, b->data, b->len, b->data, 0))
		return -1;
	int64_t cap = 0, i = 0;
	cJSON *v;
	/* Records' lines are not tracked by cJSON: report indices. */
	cJSON_ArrayForEach(v, root)
	{
		if (!cJSON_IsObject(v))
			return mg_error("%s: sample %lld is not a JSON object",
					path, (long long)i);
		if (push(r, &cap, v, 0))
			return -1;
		i++;
	}
	return 0;
}

static int parse_lines(const char *path, const struct td_buf *b,
		       struct td_records *r)
{
	int64_t cap = 0, capo = 0, line = 0;
	const char *p = b->data, *e = b->data + b->len;
	while (p < e) {
		const char *nl = memchr(p, '\n', (size_t)(e - p));
		const char *q = nl ? nl : e;
		line++;
		size_t n = (size_t)(q - p);
		const char *s = p;
		p = nl ? nl + 1 : e;
		size_t k = 0;
		while (k < n && strchr(" \t\r", s[k]))
			k++;
		if (k == n)
			continue; /* blank line */
		const char *end = NULL;
		cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
		if (!j) {
			size_t col = end ? (size_t)(end - s) + 1 : 1;
			return mg_error("%s:%lld: invalid JSON (column %zu)",
					path, (long long)line, col);
		}
		if (r->nowned == capo) {
			int64_t nc = capo ? capo * 2 : 256;
			cJSON **o = realloc(r->owned, (size_t)nc * sizeof *o);
			if (!o) {
				cJSON_Delete(j);
				return mg_error("%s: out of memory", path);
			}
			r->owned = o;
			capo = nc;
		}
		r->owned[r->nowned++] = j;
		if (!cJSON_IsObject(j))
			return mg_error("%s:%lld: not a JSON object", path,
					(long long)line);
		size_t rest = after_value(s, (size_t)(end - s), n);
		if (rest < n)
			return mg_error("%s:%lld: text after the JSON object "
					"(column %zu): one record a line",
					path, (long long)line, rest + 1);
		if (nul_check(path, s, n, b->data, line))
			return -1;
		if (push(r, &cap, j, line))
			return -1;
	}
	return 0;
}

int td_parse_records(const char *path, const struct td_buf *b,
		     struct td_records *out)
{
	memset(out, 0, sizeof *out);
	out->path = path;
	size_t bad;
	if (td_utf8_check(b->data, b->len, &bad))
		return mg_error("%s: invalid UTF-8 at byte offset %zu (line "
				"%lld)",
				path, bad, (long long)line_of(b->data, bad));
	size_t k = strspn(b->data, " \t\r\n");
	int rc = b->data[k] == '[' ? parse_array(path, b, out)
				   : parse_lines(path, b, out);
	if (!rc && out->n == 0)
		rc = mg_error("%s: no samples", path);
	return rc;
}

void td_records_free(struct td_records *r)
{
	for (int64_t i = 0; i < r->nowned; i++)
		cJSON_Delete(r->owned[i]);
	free(r->owned);
	free(r->rec);
	free(r->line);
	memset(r, 0, sizeof *r);
}

/* "sample 12 (line 13)" for errors. */
static void where(const struct td_records *r, int64_t i, char *buf, size_t n)
{
	if (r->line[i])
		snprintf(buf, n, "%s:%lld: sample %lld", r->path,
			 (long long)r->line[i], (long long)i);
	else
		snprintf(buf, n, "%s: sample %lld", r->path, (long long)i);
}

int td_field(const struct td_records *r, int64_t i, const char *name,
	     const char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->rec[i], name);
	*out = NULL;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsString(v)) {
		char w[1200];
		where(r, i, w, sizeof w);
		return mg_error("%s: field \"%s\" is %s, not a string", w, name,
				cJSON_IsNumber(v)   ? "a number"
				: cJSON_IsBool(v)   ? "a boolean"
				: cJSON_IsArray(v)  ? "an array"
				: cJSON_IsObject(v) ? "an object"
						    : "not a string");
	}
	*out = v->valuestring;
	return 0;
}

/* Documents of one file: text between separator lines, without the
 * newline before the separator; blank documents skipped. */
int td_split_docs(const struct td_buf *b, const char *sep,
		  struct td_sample **docs, int64_t *n, int64_t *cap)
{
	size_t slen = strlen(sep);
	const char *p = b->data, *end = b->data + b->len, *start = p;
	while (p <= end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		size_t ll = (size_t)(le - p);
		if (ll && p[ll - 1] == '\r')
			ll--;
		bool is_sep = slen && ll == slen && !memcmp(p, sep, slen);
		bool last = !nl;
		if (is_sep || last) {
			const char *de = is_sep ? p : end;
			while (de > start && (de[-1] == '\n' || de[-1] == '\r'))
				de--;
			if (strspn(start, " \t\r\n") < (size_t)(de - start)) {
				if (*n == *cap) {
					int64_t nc = *cap ? *cap * 2 : 1024;
					struct td_sample *q = realloc(
						*docs, (size_t)nc * sizeof *q);
					if (!q)
						return mg_error(
							"out of memory");
					memset(q + *cap, 0,
					       (size_t)(nc - *cap) * sizeof *q);
					*docs = q;
					*cap = nc;
				}
				if (td_sample_text(&(*docs)[*n], start,
						   (size_t)(de - start), true))
					return -1;
				(*n)++;
			}
			start = nl ? nl + 1 : end;
		}
		if (last)
			break;
		p = nl + 1;
	}
	return 0;
}
