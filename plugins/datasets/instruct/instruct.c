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
 * format = preference reads DPO pairs (td_pairs.c): one row per pair,
 * [prompt + chosen | prompt + rejected] as two packed documents.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "textdata.h"

/* Bytes a token can stand for at most, for the row bound above: real
 * vocabularies' longest tokens (runs of spaces, dashes) are under 256. */
#define INSTRUCT_MAX_TOKEN_BYTES 256

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
		 "grammar, conversations: sharegpt, messages, chosen+"
		 "rejected: preference). preference: DPO pairs, prompt / "
		 "chosen / rejected strings or chosen / rejected message "
		 "lists (prompt: a list, or their shared first messages), "
		 "one row [prompt + chosen | prompt + rejected] per pair"),
	MG_OPT_E("template", "auto", TD_TEMPLATES,
		 "chat format for sharegpt/messages: model renders the "
		 "tokenizer's own chat_template (tokenizer_config.json) as "
		 "transformers does, loss on the assistant turns and the "
		 "end-of-turn token after each ({% generation %} blocks when "
		 "the template has them); llama3, llama2, chatml: built-in "
		 "formats; none: plain turns. auto: model when the tokenizer "
		 "has a chat_template, else the built-in format its special "
		 "tokens say, else an error asking for this option. "
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
		 "(either is counted and reported). A preference pair "
		 "longer than max_seq_len (both sequences) has its prompts "
		 "cut first (to max_prompt_len), then its longer response"),
	MG_OPT_I("max_prompt_len", "0", 0, 1 << 20,
		 "preference pairs that do not fit: each sequence's prompt "
		 "is cut to this many tokens, keeping BOS and its end (0: "
		 "max_seq_len / 4)"),
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
	int64_t max_len, max_prompt;
	const char *cache_dir;
};

/* Render and encode the records of a preference file (2 documents a
 * pair in c). */
static int load_pairs(const struct cfg *g, const struct td_records *r,
		      const char *path, struct td_corpus *c)
{
	if (g->train_all)
		return mg_error("instruct: %s: train_on_input does not apply "
				"to preference pairs (their log-probabilities "
				"are over the responses)",
				path);
	struct td_sample *s = calloc((size_t)(2 * r->n + 1), sizeof *s);
	int rc = s ? 0 : mg_error("out of memory");
	for (int64_t i = 0; !rc && i < r->n; i++)
		rc = td_render_pair(r, i, g->tpl, &g->cols, g->tok, &s[2 * i],
				    &s[2 * i + 1]);
	if (!rc) {
		mg_info("instruct: %s: %lld preference pairs, template %s",
			path, (long long)r->n, td_template_name(g->tpl));
		rc = td_encode_pairs(g->tok, s, r->n, g->max_len, g->max_prompt,
				     g->drop, path, c);
		if (rc)
			rc = mg_error_prefix("%s", path);
	}
	for (int64_t i = 0; s && i < 2 * r->n; i++)
		td_sample_free(&s[i]);
	free(s);
	return rc;
}

/* One file to a tokenized corpus, from the cache when it holds it; *pairs
 * says whether it holds preference pairs. */
static int load_file(const struct cfg *g, const char *path, struct td_corpus *c,
		     bool *pairs)
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
	td_hash_add(&h, &g->max_prompt, sizeof g->max_prompt);
	td_hash_add(&h, b.data, b.len);
	td_hash_hex(&h, key);
	/* a pair corpus interleaves documents: its cache says so */
	char pkey[40];
	snprintf(pkey, sizeof pkey, "%.32sp", key);
	int hit = g->cache ? td_cache_load(g->cache_dir, key, c) : 0;
	*pairs = false;
	if (hit == 0 && g->cache) {
		hit = td_cache_load(g->cache_dir, pkey, c);
		*pairs = hit > 0;
	}
	if (hit < 0) {
		td_buf_free(&b);
		return -1;
	}
	if (hit) {
		td_buf_free(&b);
		mg_info("instruct: tokens from cache %s/tokens/%s.bin (%s: "
			"%lld %s, %lld tokens)",
			g->cache_dir, *pairs ? pkey : key, path,
			(long long)(*pairs ? c->n / 2 : c->n),
			*pairs ? "pairs" : "samples", (long long)c->off[c->n]);
		return 0;
	}
	struct td_records r;
	int rc = td_parse_records(path, &b, &r);
	enum td_format fmt = g->fmt;
	if (!rc && fmt == TD_FMT_AUTO)
		rc = td_detect_format(&r, &g->cols, &fmt);
	*pairs = !rc && fmt == TD_FMT_PREFERENCE;
	if (*pairs)
		rc = load_pairs(g, &r, path, c);
	struct td_sample *s =
		rc || *pairs ? NULL : calloc((size_t)r.n + 1, sizeof *s);
	if (!rc && !*pairs && !s)
		rc = mg_error("out of memory");
	for (int64_t i = 0; !rc && s && i < r.n; i++) {
		rc = td_render(&r, i, fmt, g->tpl, &g->cols, g->tok, &s[i]);
		/* Tokenizing a row costs its bytes, whatever max_seq_len
		 * keeps of it: a row more than any max_seq_len tokens could
		 * hold is refused before it is tokenized. */
		if (!rc &&
		    s[i].len / INSTRUCT_MAX_TOKEN_BYTES > (size_t)g->max_len)
			rc = mg_error(
				"%s:%lld: a sample of %zu bytes, more than "
				"max_seq_len %lld tokens can hold even "
				"at %d bytes a token: shorten or split "
				"it",
				path, (long long)r.line[i], s[i].len,
				(long long)g->max_len,
				INSTRUCT_MAX_TOKEN_BYTES);
	}
	if (!rc && s) {
		static const char *fn[] = {"auto",    "alpaca",	  "samsum",
					   "grammar", "sharegpt", "messages"};
		mg_info("instruct: %s: %lld samples, format %s%s%s", path,
			(long long)r.n, fn[fmt],
			fmt >= TD_FMT_SHAREGPT ? ", template " : "",
			fmt >= TD_FMT_SHAREGPT ? td_template_name(g->tpl) : "");
		rc = td_encode_samples(g->tok, s, r.n, g->max_len, g->drop,
				       g->train_all, path, c);
		if (rc)
			rc = mg_error_prefix("%s", path);
	}
	for (int64_t i = 0; s && i < r.n; i++)
		td_sample_free(&s[i]);
	free(s);
	if (r.path)
		td_records_free(&r);
	td_buf_free(&b);
	if (!rc && c->n == 0)
		rc = mg_error("%s: no %s left: %lld without any response "
			      "token within max_seq_len %lld, %lld longer ones "
			      "left out",
			      path, *pairs ? "pair" : "sample",
			      (long long)c->unlabeled, (long long)g->max_len,
			      (long long)c->dropped);
	if (!rc && g->cache &&
	    td_cache_store(g->cache_dir, *pairs ? pkey : key, c))
		mg_warn("instruct: token cache not written: %s",
			mg_last_error());
	if (!rc && (c->truncated || c->dropped || c->unlabeled))
		mg_warn("instruct: %s: %lld %s cut to max_seq_len %lld, "
			"%lld longer ones left out, %lld left out without "
			"any response token",
			path, (long long)c->truncated,
			*pairs ? "pairs" : "samples", (long long)g->max_len,
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
		.max_prompt = mg_opt_int(o, "max_prompt_len"),
		.cache_dir = ctx->cache_dir,
	};
	const char *train = mg_opt_str(o, "train"),
		   *test = mg_opt_str(o, "test");
	if (!train[0])
		return mg_error("instruct: dataset.train names no file");
	if (td_columns_parse(g.colspec, &g.cols))
		return mg_error_prefix("instruct");
	g.tpl = td_pick_template((enum td_template)mg_opt_enum(o, "template"),
				 tok);
	d->seq_len = g.max_len;
	bool packed = mg_opt_bool(o, "packed");
	struct td_corpus c[2] = {0};
	bool pairs[2] = {false, false};
	int rc = load_file(&g, train, &c[0], &pairs[0]);
	if (!rc && test[0])
		rc = load_file(&g, test, &c[1], &pairs[1]);
	if (!rc && test[0] && pairs[0] != pairs[1])
		rc = mg_error("instruct: %s holds %s but %s %s", train,
			      pairs[0] ? "preference pairs" : "samples", test,
			      pairs[1] ? "preference pairs" : "samples");
	if (!rc && pairs[0] && packed)
		rc = mg_error("instruct: preference pairs are one row each "
			      "(chosen | rejected); packed = true does not "
			      "apply");
	/* Items to split and select: samples, or pairs of documents. */
	const int64_t items[2] = {pairs[0] ? c[0].n / 2 : c[0].n,
				  pairs[1] ? c[1].n / 2 : c[1].n};
	int64_t *sel[2] = {NULL, NULL}, nsel[2] = {0, 0};
	if (!rc) {
		sel[0] = malloc((size_t)(items[0] + 1) * sizeof(int64_t));
		sel[1] = malloc((size_t)((test[0] ? items[1] : items[0]) + 1) *
				sizeof(int64_t));
		if (!sel[0] || !sel[1])
			rc = mg_error("out of memory");
	}
	double frac = mg_opt_float(o, "val_fraction");
	if (!rc && test[0]) {
		for (int64_t i = 0; i < items[0]; i++)
			sel[0][nsel[0]++] = i;
		for (int64_t i = 0; i < items[1]; i++)
			sel[1][nsel[1]++] = i;
	} else if (!rc) {
		uint8_t *v = calloc((size_t)items[0] + 1, 1);
		if (!v)
			rc = mg_error("out of memory");
		else
			td_split(items[0], frac,
				 (uint64_t)mg_opt_int(o, "seed"), v);
		for (int64_t i = 0; !rc && i < items[0]; i++) {
			if (frac == 0 || items[0] < 2) {
				sel[0][nsel[0]++] = i;
				sel[1][nsel[1]++] = i;
			} else {
				sel[v[i]][nsel[v[i]]++] = i;
			}
		}
		free(v);
		if (!rc && (frac == 0 || items[0] < 2))
			mg_warn("instruct: no held-out data (test empty, "
				"val_fraction 0 or one sample): evaluating "
				"on train");
	}
	for (int k = 0; k < 2 && !rc; k++) {
		const struct td_corpus *src = k && test[0] ? &c[1] : &c[0];
		rc = pairs[0]
			     ? td_rows_pairs(src, sel[k], nsel[k], d->seq_len,
					     &d->rows[k])
			     : td_rows_samples(src, sel[k], nsel[k], d->seq_len,
					       packed, &d->rows[k]);
	}
	if (!rc)
		mg_info("instruct: %lld train rows (%lld tokens), %lld "
			"held-out rows (%lld tokens)%s",
			(long long)d->rows[0].n,
			(long long)d->rows[0].off[d->rows[0].n],
			(long long)d->rows[1].n,
			(long long)d->rows[1].off[d->rows[1].n],
			packed	   ? ", packed"
			: pairs[0] ? ", one pair a row"
				   : "");
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
		       "tokenizer.json, prompt masking, packing; preference "
		       "pairs for DPO",
	.options = in_options,
	.create = in_create,
	.destroy = in_destroy,
	.ops = &in_ops,
};

MG_PLUGIN_DEFINE(in_plugin)
