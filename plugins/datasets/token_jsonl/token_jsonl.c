/*
 * token_jsonl.c - pre-tokenized data: one JSON object per line with
 * "input_ids" (and optionally "labels", both as Hugging Face datasets
 * hold them: labels aligned with the ids, -100 where no loss counts; the
 * reader shifts them into next-token targets). Without labels every
 * next token counts. Optional "position_ids" (HF's packed rows: 0 where
 * each document starts, then counting up) pack several documents in a
 * row, attention never crossing; a preference pair for DPO is such a
 * row, [chosen | rejected].
 *
 * Why: the exact rows a user (or a reference script) tokenized, with no
 * tokenizer in the loop - what the transformers comparison tests feed
 * both sides. Files are read once into memory; a bad line is reported
 * with its file and line number (and, for JSON that does not parse, the
 * byte within the line). A file whose labels leave no token to learn
 * (every label -100, or rows of one token) is refused rather than
 * trained to a NaN loss.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mg/mg.h"

struct split {
	int64_t rows, cap;
	int64_t *off;	 /* [rows + 1] into ids/labels */
	int32_t *ids;	 /* concatenated rows */
	int32_t *labels; /* shifted targets, MG_IGNORE_INDEX where none */
	int32_t *pos;	 /* positions within each document */
	int64_t ntok, captok;
};

struct tj {
	struct split s[2];
	int64_t seq_len, vocab;
	int64_t limit; /* ids and labels below this (vocab_size or TJ_MAX) */
	int64_t truncated;
	int64_t counted; /* labels that count, in the file being loaded */
};

/* The largest vocabulary the option allows: an id past it is refused
 * where it is read rather than grown into a table no model has. */
#define TJ_MAX_VOCAB (1 << 24)
/* Lines: rows up to TJ_MAX_OVER x seq_len tokens are read (and cut), of
 * up to TJ_FIELD_BYTES bytes a token: three arrays (input_ids, labels,
 * position_ids) of numbers up to 11 characters and a separator. */
#define TJ_MAX_OVER 16
#define TJ_FIELD_BYTES 40

static const struct mg_option tj_options[] = {
	MG_OPT_P("train", "", "JSON Lines file of training rows"),
	MG_OPT_P("test", "",
		 "JSON Lines file of held-out rows (empty: the train file)"),
	MG_OPT_I("seq_len", "2048", 2, 1 << 20,
		 "longest row; longer rows are cut (and counted)"),
	MG_OPT_I("vocab_size", "0", 0, TJ_MAX_VOCAB,
		 "vocabulary (0: the largest id seen plus one)"),
	MG_OPT_END,
};

static int grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	int64_t nc = *cap ? *cap * 2 : 1024;
	while (nc < need)
		nc *= 2;
	void *q = realloc(*p, (size_t)nc * elem);
	if (!q)
		return mg_error("token_jsonl: out of memory");
	*p = q;
	*cap = nc;
	return 0;
}

/* An array of integers (ids, labels or positions) of length n, into
 * out: each whole, non-negative (labels: or -100) and below lim; checked
 * as doubles, so no out-of-range value is ever converted. */
static int int_array(const cJSON *a, const char *what, int64_t n, int32_t *out,
		     bool labels, int64_t lim, const char *path, int64_t line)
{
	int64_t i = 0;
	const cJSON *v;
	cJSON_ArrayForEach(v, a)
	{
		if (i == n)
			break;
		double x = v->valuedouble;
		if (!cJSON_IsNumber(v) || x != floor(x) ||
		    (x < 0 && !(labels && x == MG_IGNORE_INDEX)))
			return mg_error("%s:%lld: %s[%lld] is not a %s", path,
					(long long)line, what, (long long)i,
					labels ? "token id or -100"
					       : "non-negative integer");
		if (x >= (double)lim)
			return mg_error("%s:%lld: %s[%lld] is %.17g, not below "
					"%s %lld",
					path, (long long)line, what,
					(long long)i, x,
					lim == TJ_MAX_VOCAB ? "the largest "
							      "vocab_size"
							    : "vocab_size",
					(long long)lim);
		out[i++] = (int32_t)x;
	}
	return 0;
}

static int parse_line(struct tj *d, struct split *s, const char *text,
		      size_t len, const char *path, int64_t line)
{
	/* The whole line must be one value: a second object after the
	 * first, or a NUL byte, would otherwise be dropped unseen. */
	if (strlen(text) != len)
		return mg_error("%s:%lld: a NUL byte at byte %lld of the line",
				path, (long long)line,
				(long long)strlen(text) + 1);
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithOpts(text, &end, true);
	if (!j) {
		const char *at = end ? end : cJSON_GetErrorPtr();
		long long b = at && at >= text && at <= text + len
				      ? (long long)(at - text) + 1
				      : 1;
		return mg_error("%s:%lld: not JSON (at byte %lld of the "
				"line%s)",
				path, (long long)line, b,
				text[len - 1] == '\n' ? ""
						      : ", the last, which has "
							"no newline: cut "
							"short?");
	}
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "input_ids");
	const cJSON *lab = cJSON_GetObjectItemCaseSensitive(j, "labels");
	const cJSON *pid = cJSON_GetObjectItemCaseSensitive(j, "position_ids");
	int rc = 0;
	int64_t n = cJSON_GetArraySize(ids);
	if (!cJSON_IsObject(j) || !cJSON_IsArray(ids) || n < 1)
		rc = mg_error("%s:%lld: not an object with a non-empty "
			      "\"input_ids\" array",
			      path, (long long)line);
	else if (lab && (!cJSON_IsArray(lab) || cJSON_GetArraySize(lab) != n))
		rc = mg_error("%s:%lld: \"labels\" is not an array as long as "
			      "\"input_ids\" (%lld)",
			      path, (long long)line, (long long)n);
	else if (pid && (!cJSON_IsArray(pid) || cJSON_GetArraySize(pid) != n))
		rc = mg_error("%s:%lld: \"position_ids\" is not an array as "
			      "long as \"input_ids\" (%lld)",
			      path, (long long)line, (long long)n);
	if (!rc && n > d->seq_len) {
		n = d->seq_len;
		d->truncated++;
	}
	if (!rc)
		rc = grow((void **)&s->off, &s->cap, s->rows + 2,
			  sizeof *s->off) ||
		     grow((void **)&s->ids, &s->captok, s->ntok + n, 4);
	if (!rc) {
		/* labels and positions share the ids' capacity */
		int32_t *l = realloc(s->labels, (size_t)s->captok * 4);
		if (l)
			s->labels = l;
		int32_t *q = l ? realloc(s->pos, (size_t)s->captok * 4) : NULL;
		if (q)
			s->pos = q;
		if (!l || !q)
			rc = mg_error("token_jsonl: out of memory");
	}
	if (!rc) {
		int32_t *x = s->ids + s->ntok, *y = s->labels + s->ntok;
		rc = int_array(ids, "input_ids", n, x, false, d->limit, path,
			       line);
		/* HF labels are aligned with the ids; ours are the next
		 * token's: y[t] = labels[t + 1]. */
		if (!rc && lab) {
			rc = int_array(lab, "labels", n, y, true, d->limit,
				       path, line);
			memmove(y, y + 1, (size_t)(n - 1) * 4);
		} else if (!rc) {
			memcpy(y, x + 1, (size_t)(n - 1) * 4);
		}
		y[n - 1] = MG_IGNORE_INDEX;
		int32_t *p = s->pos + s->ntok;
		if (!rc && pid)
			rc = int_array(pid, "position_ids", n, p, false,
				       INT32_MAX, path, line);
		for (int64_t t = 0; !rc && t < n; t++) {
			if (!pid)
				p[t] = (int32_t)t;
			else if (p[t] != 0 && (t == 0 || p[t] != p[t - 1] + 1))
				rc = mg_error("%s:%lld: position_ids[%lld] is "
					      "%d: a document starts at 0 and "
					      "counts up by one",
					      path, (long long)line,
					      (long long)t, p[t]);
		}
		for (int64_t t = 0; !rc && t < n; t++) {
			if ((int64_t)x[t] + 1 > d->vocab)
				d->vocab = (int64_t)x[t] + 1;
			if ((int64_t)y[t] + 1 > d->vocab)
				d->vocab = (int64_t)y[t] + 1;
			d->counted += y[t] != MG_IGNORE_INDEX;
		}
	}
	if (!rc) {
		if (s->rows == 0)
			s->off[0] = 0;
		s->ntok += n;
		s->off[++s->rows] = s->ntok;
	}
	cJSON_Delete(j);
	return rc;
}

/* One line into *buf (NUL-terminated; NUL bytes inside kept and
 * counted), as getline, but reading no more than max + 1 bytes of it:
 * returns its length, max + 1 when it is longer (the rest unread), -1 at
 * the end of the file, -2 out of memory. */
static ssize_t line_bounded(FILE *f, char **buf, size_t *cap, size_t max)
{
	size_t n = 0;
	int ch = 0;
	while (n <= max && (ch = getc_unlocked(f)) != EOF) {
		if (n + 2 > *cap) {
			size_t nc = *cap ? *cap * 2 : 65536;
			char *p = realloc(*buf, nc);
			if (!p)
				return -2;
			*buf = p;
			*cap = nc;
		}
		(*buf)[n++] = (char)ch;
		if (ch == '\n')
			break;
	}
	if (n == 0 && ch == EOF)
		return -1;
	(*buf)[n] = 0;
	return (ssize_t)n;
}

static int load(struct tj *d, struct split *s, const char *path)
{
	struct stat st;
	if (stat(path, &st))
		return mg_error("token_jsonl: %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return mg_error("token_jsonl: %s: not a regular file", path);
	FILE *f = fopen(path, "r");
	if (!f)
		return mg_error("token_jsonl: %s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t cap = 0;
	ssize_t len;
	int64_t line = 0;
	int rc = 0;
	d->counted = 0;
	/* A line longer than any row the run keeps is refused before it is
	 * parsed: cJSON takes ~40 bytes of memory a number (a 24 MB line
	 * peaked at 1 GB). Rows up to TJ_MAX_OVER times seq_len are cut
	 * to it as before. */
	const size_t max_line =
		(size_t)d->seq_len * TJ_MAX_OVER * TJ_FIELD_BYTES + (1 << 16);
	while (!rc && (len = line_bounded(f, &buf, &cap, max_line)) != -1) {
		if (len == -2) {
			rc = mg_error("token_jsonl: %s: out of memory", path);
			break;
		}
		line++;
		if ((size_t)len > max_line) {
			rc = mg_error(
				"token_jsonl: %s:%lld: a line of more than "
				"%zu bytes: longer than %d times "
				"seq_len %lld tokens could be; shorten "
				"or split the row",
				path, (long long)line, max_line, TJ_MAX_OVER,
				(long long)d->seq_len);
			break;
		}
		if (strspn(buf, " \t\r\n") == (size_t)len)
			continue; /* blank line */
		rc = parse_line(d, s, buf, (size_t)len, path, line);
	}
	if (!rc && ferror(f))
		rc = mg_error("token_jsonl: %s: read error", path);
	free(buf);
	fclose(f);
	if (!rc && s->rows == 0)
		rc = mg_error("token_jsonl: %s has no rows", path);
	if (!rc && d->counted == 0)
		rc = mg_error("token_jsonl: %s: no label counts (%lld rows, "
			      "every label -100 or every row one token): "
			      "no token carries loss, nothing to learn or "
			      "evaluate",
			      path, (long long)s->rows);
	return rc;
}

static void tj_destroy(void *self)
{
	struct tj *d = self;
	if (!d)
		return;
	for (int i = 0; i < 2; i++) {
		free(d->s[i].off);
		free(d->s[i].ids);
		free(d->s[i].labels);
		free(d->s[i].pos);
	}
	free(d);
}

static int tj_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	(void)ctx;
	struct tj *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("token_jsonl: out of memory");
	d->seq_len = mg_opt_int(o, "seq_len");
	const char *train = mg_opt_str(o, "train"),
		   *test = mg_opt_str(o, "test");
	int64_t v = mg_opt_int(o, "vocab_size");
	d->limit = v > 0 ? v : TJ_MAX_VOCAB;
	int rc = 0;
	if (!train[0])
		rc = mg_error("token_jsonl: dataset.train names no file");
	if (!rc)
		rc = load(d, &d->s[MG_SPLIT_TRAIN], train);
	if (!rc)
		rc = load(d, &d->s[MG_SPLIT_TEST], test[0] ? test : train);
	if (rc) {
		tj_destroy(d);
		return -1;
	}
	if (v > 0)
		d->vocab = v;
	if (d->truncated)
		mg_warn("token_jsonl: %lld rows cut to seq_len %lld",
			(long long)d->truncated, (long long)d->seq_len);
	*self = d;
	return 0;
}

static int64_t tj_count(void *self, enum mg_split split)
{
	return ((struct tj *)self)->s[split == MG_SPLIT_TEST].rows;
}

static int tj_layout(void *self, struct mg_sample_layout *l)
{
	const struct tj *d = self;
	mg_token_layout(l, d->seq_len, d->vocab);
	return 0;
}

static int tj_read_tokens(void *self, enum mg_split split, const int64_t *idx,
			  int64_t n, const struct mg_token_rows *out)
{
	const struct tj *d = self;
	const struct split *s = &d->s[split == MG_SPLIT_TEST];
	for (int64_t i = 0; i < n; i++) {
		if (idx[i] < 0 || idx[i] >= s->rows)
			return mg_error("token_jsonl: row %lld of %lld",
					(long long)idx[i], (long long)s->rows);
		int64_t a = s->off[idx[i]], len = s->off[idx[i] + 1] - a;
		int32_t *x = out->ids + i * out->stride,
			*y = out->labels + i * out->stride,
			*p = out->positions + i * out->stride;
		memcpy(x, s->ids + a, (size_t)len * 4);
		memcpy(y, s->labels + a, (size_t)len * 4);
		for (int64_t t = 0; t < d->seq_len; t++) {
			p[t] = t < len ? s->pos[a + t] : 0;
			if (t >= len) {
				x[t] = 0;
				y[t] = MG_IGNORE_INDEX;
			}
		}
		out->lens[i] = (int32_t)len;
	}
	return 0;
}

static const struct mg_dataset_ops tj_ops = {
	.count = tj_count,
	.layout = tj_layout,
	.read_tokens = tj_read_tokens,
};

static const struct mg_plugin tj_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_DATASET,
	.name = "token_jsonl",
	.version = "1.0",
	.description = "pre-tokenized rows from JSON Lines (input_ids, "
		       "optional HF-style labels and position_ids)",
	.options = tj_options,
	.create = tj_create,
	.destroy = tj_destroy,
	.ops = &tj_ops,
};

MG_PLUGIN_DEFINE(tj_plugin)
