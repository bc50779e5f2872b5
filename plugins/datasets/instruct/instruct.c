/*
 * instruct.c - instruction tuning and chat data as token rows.
 *
 * Reads what a user exports from the Hub (JSON array or JSON Lines,
 * gzipped or not) in the alpaca, samsum, grammar, ShareGPT/SlimOrca or
 * OpenAI `messages` layout, renders each sample with torchtune's prompts
 * or the model's chat format (textdata.h, td_render.c says how BOS/EOS
 * and special tokens are placed), tokenizes once on all cores with the
 * model's tokenizer.json and caches the ids under ctx->cache_dir, so
 * read_tokens only copies. train_on_input = false leaves labels only on
 * response tokens (and the EOS / end-of-turn token that ends them).
 */
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "textdata.h"

struct instruct {
	struct td_rows rows[2];
	int64_t seq_len, vocab;
};

static const struct mg_option in_options[] = {
	MG_OPT_P("train", "",
		 "training data: a JSON array or JSON Lines file, or a .gz "
		 "of either, as exported from the Hub"),
	MG_OPT_P("test", "",
		 "held-out data in the same format (empty: val_fraction of "
		 "train)"),
	MG_OPT_P("tokenizer", "",
		 "the model's tokenizer.json, or the folder holding it (with "
		 "tokenizer_config.json)"),
	MG_OPT_E("format", "auto", TD_FORMATS,
		 "sample layout; auto: by the first sample's fields "
		 "(instruction: alpaca, dialogue: samsum, input+output: "
		 "grammar, conversations: sharegpt, messages)"),
	MG_OPT_E("template", "auto", TD_TEMPLATES,
		 "chat format for sharegpt/messages; auto: from the "
		 "tokenizer's chat_template (or its special tokens). "
		 "Single-turn formats always use BOS + prompt + response + "
		 "EOS"),
	MG_OPT_S("columns", "",
		 "field renames, e.g. instruction=question,output=answer "
		 "(also conversations=, messages=, from=, value=, role=, "
		 "content=)"),
	MG_OPT_B("train_on_input", "false",
		 "loss on prompt tokens too (false: labels only on response "
		 "tokens and the EOS / end-of-turn that ends them)"),
	MG_OPT_I("max_seq_len", "2048", 8, 1 << 20,
		 "longest sample in tokens (and the packed row length)"),
	MG_OPT_E("truncation", "truncate", "truncate|drop",
		 "a longer sample is cut to max_seq_len or left out "
		 "(either is counted and reported)"),
	MG_OPT_B("packed", "false",
		 "pack several samples into rows of max_seq_len; positions "
		 "restart per sample, no attention or loss across samples"),
	MG_OPT_F("val_fraction", "0.05", 0, 0.9,
		 "share of train samples held out when test is empty "
		 "(0: evaluate on train)"),
	MG_OPT_I("seed", "1234", 0, 9.2e18, "seed of the held-out choice"),
	MG_OPT_B("cache", "true",
		 "keep tokenized data in run cache_dir/tokens, keyed by the "
		 "tokenizer, the options that change ids and the file bytes"),
	MG_OPT_I("vocab_size", "0", 0, 1 << 24,
		 "vocabulary reported to the model (0: the tokenizer's)"),
	MG_OPT_END,
};

struct cfg {
	const struct td_tok *tok;
	enum td_format fmt;
	enum td_template tpl;
	struct td_columns cols;
	const char *colspec;
	bool train_all, drop, cache;
	int64_t max_len;
	const char *cache_dir;
};

/* One file to a tokenized corpus, from the cache when it holds it. */
static int load_file(const struct cfg *g, const char *path, struct td_corpus *c)
{
	struct td_buf b;
	if (td_read_file(path, &b))
		return -1;
	struct td_hash h;
	char key[33];
	td_hash_init(&h);
	td_hash_str(&h, "instruct-v1");
	td_hash_str(&h, g->tok->digest);
	td_hash_add(&h, &g->fmt, sizeof g->fmt);
	td_hash_add(&h, &g->tpl, sizeof g->tpl);
	td_hash_str(&h, g->colspec);
	td_hash_add(&h, &g->train_all, sizeof g->train_all);
	td_hash_add(&h, &g->drop, sizeof g->drop);
	td_hash_add(&h, &g->max_len, sizeof g->max_len);
	td_hash_add(&h, b.data, b.len);
	td_hash_hex(&h, key);
	int hit = g->cache ? td_cache_load(g->cache_dir, key, c) : 0;
	if (hit < 0) {
		td_buf_free(&b);
		return -1;
	}
	if (hit) {
		td_buf_free(&b);
		mg_info("instruct: tokens from cache %s/tokens/%s.bin (%s: "
			"%lld samples, %lld tokens)",
			g->cache_dir, key, path, (long long)c->n,
			(long long)c->off[c->n]);
		return 0;
	}
	struct td_records r;
	int rc = td_parse_records(path, &b, &r);
	enum td_format fmt = g->fmt;
	if (!rc && fmt == TD_FMT_AUTO)
		rc = td_detect_format(&r, &g->cols, &fmt);
	struct td_sample *s = rc ? NULL : calloc((size_t)r.n, sizeof *s);
	if (!rc && !s)
		rc = mg_error("out of memory");
	for (int64_t i = 0; !rc && i < r.n; i++)
		rc = td_render(&r, i, fmt, g->tpl, &g->cols, g->tok->bos,
			       g->tok->eos, &s[i]);
	if (!rc) {
		static const char *fn[] = {"auto",    "alpaca",	  "samsum",
					   "grammar", "sharegpt", "messages"};
		mg_info("instruct: %s: %lld samples, format %s%s%s", path,
			(long long)r.n, fn[fmt],
			fmt >= TD_FMT_SHAREGPT ? ", template " : "",
			fmt >= TD_FMT_SHAREGPT ? td_template_name(g->tpl) : "");
		rc = td_encode_samples(g->tok, s, r.n, g->max_len, g->drop,
				       g->train_all, path, c);
		if (rc)
			rc = mg_error("%s: %s", path, mg_last_error());
	}
	for (int64_t i = 0; s && i < r.n; i++)
		td_sample_free(&s[i]);
	free(s);
	if (r.path)
		td_records_free(&r);
	td_buf_free(&b);
	if (!rc && c->n == 0)
		rc = mg_error("%s: no sample left: %lld without any response "
			      "token within max_seq_len %lld, %lld longer ones "
			      "left out",
			      path, (long long)c->unlabeled,
			      (long long)g->max_len, (long long)c->dropped);
	if (!rc && g->cache && td_cache_store(g->cache_dir, key, c))
		mg_warn("instruct: token cache not written: %s",
			mg_last_error());
	if (!rc && (c->truncated || c->dropped || c->unlabeled))
		mg_warn("instruct: %s: %lld samples cut to max_seq_len %lld, "
			"%lld longer ones left out, %lld left out without "
			"any response token",
			path, (long long)c->truncated, (long long)g->max_len,
			(long long)c->dropped, (long long)c->unlabeled);
	return rc;
}

static void in_destroy(void *self)
{
	struct instruct *d = self;
	if (!d)
		return;
	td_rows_free(&d->rows[0]);
	td_rows_free(&d->rows[1]);
	free(d);
}

static int build(struct instruct *d, const struct mg_opts *o,
		 struct mg_ctx *ctx, struct td_tok *tok)
{
	struct cfg g = {
		.tok = tok,
		.fmt = (enum td_format)mg_opt_enum(o, "format"),
		.colspec = mg_opt_str(o, "columns"),
		.train_all = mg_opt_bool(o, "train_on_input"),
		.drop = mg_opt_enum(o, "truncation") == 1,
		.cache = mg_opt_bool(o, "cache"),
		.max_len = mg_opt_int(o, "max_seq_len"),
		.cache_dir = ctx->cache_dir,
	};
	const char *train = mg_opt_str(o, "train"),
		   *test = mg_opt_str(o, "test");
	if (!train[0])
		return mg_error("instruct: dataset.train names no file");
	if (td_columns_parse(g.colspec, &g.cols))
		return mg_error("instruct: %s", mg_last_error());
	g.tpl = td_pick_template((enum td_template)mg_opt_enum(o, "template"),
				 tok);
	d->seq_len = g.max_len;
	bool packed = mg_opt_bool(o, "packed");
	struct td_corpus c[2] = {0};
	int rc = load_file(&g, train, &c[0]);
	if (!rc && test[0])
		rc = load_file(&g, test, &c[1]);
	int64_t *sel[2] = {NULL, NULL}, nsel[2] = {0, 0};
	if (!rc) {
		sel[0] = malloc((size_t)c[0].n * sizeof(int64_t));
		sel[1] = malloc((size_t)(test[0] ? c[1].n : c[0].n) *
				sizeof(int64_t));
		if (!sel[0] || !sel[1])
			rc = mg_error("out of memory");
	}
	double frac = mg_opt_float(o, "val_fraction");
	if (!rc && test[0]) {
		for (int64_t i = 0; i < c[0].n; i++)
			sel[0][nsel[0]++] = i;
		for (int64_t i = 0; i < c[1].n; i++)
			sel[1][nsel[1]++] = i;
	} else if (!rc) {
		uint8_t *v = calloc((size_t)c[0].n, 1);
		if (!v)
			rc = mg_error("out of memory");
		else
			td_split(c[0].n, frac, (uint64_t)mg_opt_int(o, "seed"),
				 v);
		for (int64_t i = 0; !rc && i < c[0].n; i++) {
			if (frac == 0 || c[0].n < 2) {
				sel[0][nsel[0]++] = i;
				sel[1][nsel[1]++] = i;
			} else {
				sel[v[i]][nsel[v[i]]++] = i;
			}
		}
		free(v);
		if (!rc && (frac == 0 || c[0].n < 2))
			mg_warn("instruct: no held-out data (test empty, "
				"val_fraction 0 or one sample): evaluating "
				"on train");
	}
	if (!rc)
		rc = td_rows_samples(&c[0], sel[0], nsel[0], d->seq_len, packed,
				     &d->rows[0]);
	if (!rc)
		rc = td_rows_samples(test[0] ? &c[1] : &c[0], sel[1], nsel[1],
				     d->seq_len, packed, &d->rows[1]);
	if (!rc)
		mg_info("instruct: %lld train rows (%lld tokens), %lld "
			"held-out rows (%lld tokens)%s",
			(long long)d->rows[0].n,
			(long long)d->rows[0].off[d->rows[0].n],
			(long long)d->rows[1].n,
			(long long)d->rows[1].off[d->rows[1].n],
			packed ? ", packed" : "");
	free(sel[0]);
	free(sel[1]);
	td_corpus_free(&c[0]);
	td_corpus_free(&c[1]);
	return rc;
}

static int in_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct instruct *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("instruct: out of memory");
	const char *tp = mg_opt_str(o, "tokenizer");
	struct td_tok tok;
	int rc = tp[0] ? td_tok_hf_load(tp, &tok)
		       : mg_error("instruct: dataset.tokenizer names no "
				  "tokenizer.json");
	if (!rc) {
		rc = build(d, o, ctx, &tok);
		int64_t v = mg_opt_int(o, "vocab_size");
		if (!rc && v > 0 && v < tok.vocab)
			rc = mg_error("instruct: vocab_size %lld is smaller "
				      "than the tokenizer's %lld",
				      (long long)v, (long long)tok.vocab);
		d->vocab = v > 0 ? v : tok.vocab;
		td_tok_hf_free(&tok);
	}
	if (rc) {
		in_destroy(d);
		return -1;
	}
	*self = d;
	return 0;
}

static int64_t in_count(void *self, enum mg_split split)
{
	return ((struct instruct *)self)->rows[split == MG_SPLIT_TEST].n;
}

static int in_layout(void *self, struct mg_sample_layout *l)
{
	const struct instruct *d = self;
	mg_token_layout(l, d->seq_len, d->vocab);
	return 0;
}

static int in_read_tokens(void *self, enum mg_split split, const int64_t *idx,
			  int64_t n, const struct mg_token_rows *out)
{
	const struct instruct *d = self;
	return td_rows_read(&d->rows[split == MG_SPLIT_TEST], idx, n, out);
}

static const struct mg_dataset_ops in_ops = {
	.count = in_count,
	.layout = in_layout,
	.read_tokens = in_read_tokens,
};

static const struct mg_plugin in_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_DATASET,
	.name = "instruct",
	.version = "1.0",
	.description = "instruction and chat data (alpaca, samsum, grammar, "
		       "ShareGPT, messages; JSON/JSONL/gz) tokenized with a "
		       "tokenizer.json, prompt masking, packing",
	.options = in_options,
	.create = in_create,
	.destroy = in_destroy,
	.ops = &in_ops,
};

MG_PLUGIN_DEFINE(in_plugin)
