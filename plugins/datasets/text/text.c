/*
 * text.c - plain-text corpora for (continued) pretraining.
 *
 * Files (globs allowed, relative to `dir`, by default the INI's folder)
 * are split into documents at separator lines ("%" for fortune files;
 * empty: one document per file), tokenized once on all cores with the
 * model's tokenizer.json (cached under ctx->cache_dir), joined with BOS
 * (when the tokenizer adds one) and EOS around each document and cut
 * into blocks of seq_len tokens. Whole documents are held out, so the
 * validation loss measures text the model never saw.
 */
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mg/mg.h"
#include "textdata.h"

struct text {
	struct td_rows rows[2];
	int64_t seq_len, vocab;
};

static const struct mg_option tx_options[] = {
	MG_OPT_S("files", "",
		 "comma-separated text files or globs (a.txt,b/*.txt), "
		 "relative to dir; gzip is read too"),
	MG_OPT_P("dir", ".",
		 "folder files are relative to (default: the "
		 "INI's folder)"),
	MG_OPT_S("exclude", "",
		 "comma-separated name patterns left out of globs (e.g. "
		 "*.dat,*.u8 for /usr/share/games/fortunes/*)"),
	MG_OPT_S("separator", "",
		 "a line holding only this splits documents (% for fortune "
		 "files); empty: each file is one document"),
	MG_OPT_P("tokenizer", "",
		 "the model's tokenizer.json, or the folder holding it"),
	MG_OPT_I("seq_len", "256", 2, 1 << 20, "tokens per block (row)"),
	MG_OPT_F("val_fraction", "0.05", 0, 0.9,
		 "share of documents held out (0: evaluate on train)"),
	MG_OPT_I("seed", "1234", 0, 9.2e18, "seed of the held-out choice"),
	MG_OPT_B("cache", "true",
		 "keep tokenized documents in run cache_dir/tokens, keyed by "
		 "the tokenizer, separator and the files' bytes"),
	MG_OPT_I("vocab_size", "0", 0, 1 << 24,
		 "vocabulary reported to the model (0: the tokenizer's)"),
	MG_OPT_END,
};

static bool excluded(const char *path, const char *exclude)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	char pat[256];
	for (const char *p = exclude; p && *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		snprintf(pat, sizeof pat, "%.*s", (int)n, p);
		if (pat[0] && !fnmatch(pat, base, 0))
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* The files named by `files` (each entry a path or glob), sorted per
 * entry so the order (and the cache key) is stable. */
static int expand(const char *files, const char *dir, const char *exclude,
		  glob_t *g)
{
	memset(g, 0, sizeof *g);
	int flags = 0, rc = 0;
	char entry[4096], path[8300];
	for (const char *p = files; !rc && p && *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		while (n && *p == ' ')
			p++, n--;
		while (n && p[n - 1] == ' ')
			n--;
		snprintf(entry, sizeof entry, "%.*s", (int)n, p);
		p = e ? e + 1 : NULL;
		if (!entry[0])
			continue;
		if (entry[0] == '/')
			snprintf(path, sizeof path, "%s", entry);
		else
			snprintf(path, sizeof path, "%s/%s", dir, entry);
		size_t before = g->gl_pathc;
		int r = glob(path, flags, NULL, g);
		flags = GLOB_APPEND;
		if (r == GLOB_NOMATCH || (r == 0 && g->gl_pathc == before))
			rc = mg_error("text: files: %s: no such file", path);
		else if (r)
			rc = mg_error("text: files: %s: cannot list", path);
	}
	if (!rc && g->gl_pathc == 0)
		rc = mg_error("text: dataset.files names no file");
	/* Drop excluded names and folders (a glob's matches); a name that
	 * cannot be read (a dangling symbolic link) is an error naming it,
	 * not a file silently left out, and a FIFO or device is refused by
	 * td_read_file. */
	size_t w = 0;
	for (size_t i = 0; !rc && i < g->gl_pathc; i++) {
		struct stat st;
		char *f = g->gl_pathv[i];
		if (excluded(f, exclude))
			continue;
		if (stat(f, &st)) {
			struct stat lst;
			rc = !lstat(f, &lst) && S_ISLNK(lst.st_mode)
				     ? mg_error("text: files: %s: a symbolic "
						"link to nothing (%s)",
						f, strerror(errno))
				     : mg_error("text: files: %s: %s", f,
						strerror(errno));
			break;
		}
		if (S_ISDIR(st.st_mode))
			continue;
		/* Swap kept names to the front: globfree still sees every
		 * pointer once. */
		g->gl_pathv[i] = g->gl_pathv[w];
		g->gl_pathv[w++] = f;
	}
	if (!rc && w == 0)
		rc = mg_error("text: every file named was excluded");
	if (rc) {
		if (g->gl_pathc)
			globfree(g);
		memset(g, 0, sizeof *g);
		return -1;
	}
	return (int)w;
}

static int load(struct text *d, const struct mg_opts *o, struct mg_ctx *ctx,
		const struct td_tok *tok)
{
	glob_t g;
	int nf = expand(mg_opt_str(o, "files"), mg_opt_str(o, "dir"),
			mg_opt_str(o, "exclude"), &g);
	if (nf < 0)
		return -1;
	const char *sep = mg_opt_str(o, "separator");
	bool cache = mg_opt_bool(o, "cache");
	struct td_buf *bufs = calloc((size_t)nf, sizeof *bufs);
	int rc = bufs ? 0 : mg_error("out of memory");
	struct td_hash h;
	td_hash_init(&h);
	td_hash_str(&h, "text-v1");
	td_hash_str(&h, tok->digest);
	td_hash_str(&h, sep);
	size_t bytes = 0;
	for (int i = 0; !rc && i < nf; i++) {
		rc = td_read_file(g.gl_pathv[i], &bufs[i]);
		size_t bad;
		if (!rc && td_utf8_check(bufs[i].data, bufs[i].len, &bad))
			rc = mg_error("%s: invalid UTF-8 at byte offset %zu",
				      g.gl_pathv[i], bad);
		if (!rc) {
			uint64_t len = bufs[i].len;
			td_hash_add(&h, &len, sizeof len);
			td_hash_add(&h, bufs[i].data, bufs[i].len);
			bytes += bufs[i].len;
		}
	}
	char key[33];
	td_hash_hex(&h, key);
	struct td_corpus c = {0};
	int hit = rc ? 0 : cache ? td_cache_load(ctx->cache_dir, key, &c) : 0;
	if (hit < 0)
		rc = -1;
	if (hit > 0)
		mg_info("text: tokens from cache %s/tokens/%s.bin (%d files, "
			"%lld documents, %lld tokens)",
			ctx->cache_dir, key, nf, (long long)c.n,
			(long long)c.off[c.n]);
	struct td_sample *docs = NULL;
	int64_t ndoc = 0, cap = 0;
	for (int i = 0; !rc && !hit && i < nf; i++)
		rc = td_split_docs(&bufs[i], sep, &docs, &ndoc, &cap);
	if (!rc && !hit && ndoc == 0)
		rc = mg_error("text: no documents in %d files", nf);
	if (!rc && !hit) {
		mg_info("text: %d files, %.1f MB, %lld documents", nf,
			bytes / 1e6, (long long)ndoc);
		rc = td_encode_samples(tok, docs, ndoc, 0, false, true, "text",
				       &c);
		if (!rc && cache && td_cache_store(ctx->cache_dir, key, &c))
			mg_warn("text: token cache not written: %s",
				mg_last_error());
	}
	for (int64_t i = 0; i < ndoc; i++)
		td_sample_free(&docs[i]);
	free(docs);
	for (int i = 0; bufs && i < nf; i++)
		td_buf_free(&bufs[i]);
	free(bufs);
	globfree(&g);

	/* Hold out whole documents, then cut each side into blocks. */
	double frac = mg_opt_float(o, "val_fraction");
	uint8_t *v = rc ? NULL : calloc((size_t)c.n + 1, 1);
	int64_t *sel[2] = {NULL, NULL}, ns[2] = {0, 0};
	if (!rc) {
		sel[0] = malloc(((size_t)c.n + 1) * sizeof(int64_t));
		sel[1] = malloc(((size_t)c.n + 1) * sizeof(int64_t));
		if (!v || !sel[0] || !sel[1])
			rc = mg_error("out of memory");
	}
	if (!rc) {
		td_split(c.n, frac, (uint64_t)mg_opt_int(o, "seed"), v);
		bool same = frac == 0 || c.n < 2;
		for (int64_t i = 0; i < c.n; i++) {
			if (same) {
				sel[0][ns[0]++] = i;
				sel[1][ns[1]++] = i;
			} else {
				sel[v[i]][ns[v[i]]++] = i;
			}
		}
		if (same)
			mg_warn("text: no held-out documents: evaluating on "
				"train");
		int32_t bos = tok->add_bos ? tok->bos_id : -1;
		for (int s = 0; !rc && s < 2; s++)
			rc = td_rows_blocks(&c, sel[s], ns[s], d->seq_len, bos,
					    tok->eos_id, &d->rows[s]);
	}
	if (!rc && (d->rows[0].n == 0 || d->rows[1].n == 0))
		rc = mg_error("text: too little text for one block of %lld "
			      "tokens on each side",
			      (long long)d->seq_len);
	if (!rc)
		mg_info("text: %lld documents, %lld tokens: %lld train blocks, "
			"%lld held-out blocks (%lld documents) of %lld tokens",
			(long long)c.n, (long long)c.off[c.n],
			(long long)d->rows[0].n, (long long)d->rows[1].n,
			(long long)ns[1], (long long)d->seq_len);
	free(v);
	free(sel[0]);
	free(sel[1]);
	td_corpus_free(&c);
	return rc;
}

static void tx_destroy(void *self)
{
	struct text *d = self;
	if (!d)
		return;
	td_rows_free(&d->rows[0]);
	td_rows_free(&d->rows[1]);
	free(d);
}

static int tx_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct text *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("text: out of memory");
	d->seq_len = mg_opt_int(o, "seq_len");
	const char *tp = mg_opt_str(o, "tokenizer");
	struct td_tok tok;
	int rc = tp[0] ? td_tok_hf_load(tp, &tok)
		       : mg_error("text: dataset.tokenizer names no "
				  "tokenizer.json");
	if (!rc) {
		rc = load(d, o, ctx, &tok);
		int64_t v = mg_opt_int(o, "vocab_size");
		if (!rc && v > 0 && v < tok.vocab)
			rc = mg_error("text: vocab_size %lld is smaller than "
				      "the tokenizer's %lld",
				      (long long)v, (long long)tok.vocab);
		d->vocab = v > 0 ? v : tok.vocab;
		td_tok_hf_free(&tok);
	}
	if (rc) {
		tx_destroy(d);
		return -1;
	}
	*self = d;
	return 0;
}

static int64_t tx_count(void *self, enum mg_split split)
{
	return ((struct text *)self)->rows[split == MG_SPLIT_TEST].n;
}

static int tx_layout(void *self, struct mg_sample_layout *l)
{
	const struct text *d = self;
	mg_token_layout(l, d->seq_len, d->vocab);
	return 0;
}

static int tx_read_tokens(void *self, enum mg_split split, const int64_t *idx,
			  int64_t n, const struct mg_token_rows *out)
{
	const struct text *d = self;
	return td_rows_read(&d->rows[split == MG_SPLIT_TEST], idx, n, out);
}

static const struct mg_dataset_ops tx_ops = {
	.count = tx_count,
	.layout = tx_layout,
	.read_tokens = tx_read_tokens,
};

static const struct mg_plugin tx_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_DATASET,
	.name = "text",
	.version = "1.0",
	.description = "plain-text corpus (documents split by a separator "
		       "line, joined with EOS, cut into blocks) tokenized "
		       "with a tokenizer.json",
	.options = tx_options,
	.create = tx_create,
	.destroy = tx_destroy,
	.ops = &tx_ops,
};

MG_PLUGIN_DEFINE(tx_plugin)
