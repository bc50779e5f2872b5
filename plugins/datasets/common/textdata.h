/*
 * textdata.h - pieces the text dataset plugins (instruct, text) share:
 * reading JSON / JSON Lines / gzip files with errors a user can act on,
 * rendering instruction and chat samples into masked segments, encoding
 * them on all cores, a token cache keyed by everything that changes the
 * ids, and turning tokenized samples into rows (plain, packed or blocks).
 *
 * Why a static library: both plugins (and the unit tests, which drive it
 * with a small byte-level tokenizer so masks, packing and caching are
 * tested without the real tokenizer files) need the same code; it is
 * linked into each .so like plugins/strategies/common.
 */
#ifndef MG_TEXTDATA_H
#define MG_TEXTDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mg/chat.h"
#include "mg/dataset.h"
#include "mg/tokenizer.h"

struct cJSON;

/* ---- files ------------------------------------------------------------ */

/* A whole file in memory, gunzipped when it starts with the gzip magic.
 * An empty (or all white space) file is an error naming it. */
struct td_buf {
	char *data; /* NUL-terminated */
	size_t len;
};
int td_read_file(const char *path, struct td_buf *out);
void td_buf_free(struct td_buf *b);

/* 0 when s[0..n) is valid UTF-8 (no overlongs, surrogates or values past
 * U+10FFFF); else -1 with the first bad byte's offset in *bad. */
int td_utf8_check(const char *s, size_t n, size_t *bad);

/* The records of a JSON array file or a JSON Lines file (detected by the
 * first non-blank byte). Errors name the file and the line (JSONL) or
 * byte offset and line (array). */
struct td_records {
	int64_t n;
	struct cJSON **rec;   /* borrowed from root / lines */
	int64_t *line;	      /* 1-based line of each record */
	struct cJSON **owned; /* JSONL: one tree per line; array: [0] */
	int64_t nowned;
	const char *path;
};
int td_parse_records(const char *path, const struct td_buf *b,
		     struct td_records *out);
void td_records_free(struct td_records *r);

/* Field `name` of record i as a string: NULL when absent or JSON null;
 * an error naming the sample and field when it is not a string. */
int td_field(const struct td_records *r, int64_t i, const char *name,
	     const char **out);

/* Documents of a text file: the text between lines holding only sep
 * (none: the whole file), without the line break before the separator;
 * blank documents skipped. Appended to docs[*n..] as one trained text
 * segment each (cap: the array's capacity, grown). */
struct td_sample;
int td_split_docs(const struct td_buf *b, const char *sep,
		  struct td_sample **docs, int64_t *n, int64_t *cap);

/* ---- tokenizer seen by the datasets ------------------------------------ */

/* What the datasets need from a tokenizer. The plugins wrap the core's
 * mg_tokenizer (td_tok_hf); tests use a byte-level one. */
struct td_tok {
	void *self;
	/* Plain data text, no post-processor, added tokens not matched
	 * (MG_TOK_NO_ADDED): appends to out; 0 or -1 (error set). */
	int (*encode)(void *self, const char *s, size_t n, struct mg_ids *out);
	/* The id of a token string, -1 when the vocabulary lacks it. */
	int32_t (*token_id)(void *self, const char *name);
	const char *bos, *eos; /* token strings, NULL when none */
	int32_t bos_id, eos_id;
	bool add_bos;	    /* the tokenizer adds BOS to tokenizer(text) */
	bool prepend_space; /* SentencePiece-style: every encode starts a
			       word (Prepend "▁" normalizer) */
	const char *chat_template; /* or NULL */
	/* A rendered chat's template text: added tokens matched, nothing
	 * added (as tokenizer(text, add_special_tokens=False)). */
	int (*encode_rendered)(void *self, const char *s, size_t n,
			       struct mg_ids *out);
	/* mg_tokenizer_apply_chat_template (mg/chat.h). */
	int (*apply_chat)(void *self, const char *req, size_t n, char **out,
			  size_t *len, struct mg_chat_span **spans,
			  size_t *nspans);
	const char *digest; /* identifies the files, for caches */
	int64_t vocab;
};

/* Load the core tokenizer at path into t (td_tok_hf.c). */
int td_tok_hf_load(const char *path, struct td_tok *t);
void td_tok_hf_free(struct td_tok *t);

/* ---- rendered samples -------------------------------------------------- */

enum td_seg_kind {
	TD_SEG_TEXT = 0, /* data or template text, encoded MG_TOK_NO_ADDED */
	TD_SEG_CONTROL,	 /* one special token, by its string */
	TD_SEG_RENDERED, /* a chat template's text: added tokens matched */
};

struct td_seg {
	int kind;
	bool train;	 /* its tokens are targets (carry labels) */
	size_t off, len; /* into the sample's text */
};

/* One sample as segments; adjacent text of the same train flag is merged
 * so it is encoded in one piece (token boundaries as in one string). */
struct td_sample {
	char *text;
	size_t len, cap;
	struct td_seg *seg;
	int nseg, capseg;
};
int td_sample_text(struct td_sample *s, const char *t, size_t n, bool train);
int td_sample_control(struct td_sample *s, const char *tok, bool train);
int td_sample_rendered(struct td_sample *s, const char *t, size_t n,
		       bool train);
void td_sample_free(struct td_sample *s);

/* Single-turn prompt formats and chat templates. */
enum td_format {
	TD_FMT_AUTO = 0,
	TD_FMT_ALPACA,
	TD_FMT_SAMSUM,
	TD_FMT_GRAMMAR,
	TD_FMT_SHAREGPT,
	TD_FMT_MESSAGES,
	TD_FMT_PREFERENCE, /* chosen / rejected pairs (td_pairs.c) */
};
#define TD_FORMATS "auto|alpaca|samsum|grammar|sharegpt|messages|preference"
enum td_template {
	TD_TPL_AUTO = 0,
	TD_TPL_LLAMA3,
	TD_TPL_LLAMA2,
	TD_TPL_CHATML,
	TD_TPL_NONE,
	TD_TPL_MODEL, /* the tokenizer's chat_template (td_render_model.c) */
};
#define TD_TEMPLATES "auto|llama3|llama2|chatml|none|model"

/* Column map: "instruction=question,output=answer" renames the fields a
 * format reads. */
#define TD_MAX_COLS 8
struct td_columns {
	int n;
	char from[TD_MAX_COLS][64], to[TD_MAX_COLS][64];
};
int td_columns_parse(const char *spec, struct td_columns *c);
const char *td_column(const struct td_columns *c, const char *field);

/* The format records use (auto: by the first record's fields). */
int td_detect_format(const struct td_records *r, const struct td_columns *c,
		     enum td_format *out);
/* The chat template for a tokenizer (auto: its own chat_template, else
 * the built-in one its special tokens say; TD_TPL_AUTO when neither,
 * which td_render_chat refuses naming the option). */
enum td_template td_pick_template(enum td_template want,
				  const struct td_tok *t);
const char *td_template_name(enum td_template t);

/* Render record i into s (reset first). The tokenizer's bos/eos (NULL:
 * none) frame single-turn formats; its chat_template serves
 * template = model. */
int td_render(const struct td_records *r, int64_t i, enum td_format fmt,
	      enum td_template tpl, const struct td_columns *c,
	      const struct td_tok *tok, struct td_sample *s);
/* Chat messages, as the chat formats read them. Prompt messages are
 * never targets (a preference pair's shared history). */
enum { TD_ROLE_SYSTEM, TD_ROLE_USER, TD_ROLE_ASSISTANT };
struct td_msg {
	int role;
	const char *content;
	bool prompt;
};
/* The messages of JSON array a (field `list` of record i; keys role and
 * content, or from and value for ShareGPT, through the column map);
 * malloc'd. Errors name the file, line, sample and message (and the
 * list when name_list). */
int td_messages(const struct td_records *r, int64_t i, const struct cJSON *a,
		const char *list, enum td_format fmt,
		const struct td_columns *c, bool name_list, struct td_msg **out,
		int64_t *n);
/* Messages through a chat template: assistant contents not in the
 * prompt, and the token that ends them, are the targets. */
int td_render_chat(enum td_template tpl, const struct td_tok *tok,
		   const struct td_msg *m, int64_t n, struct td_sample *s);
/* template = model: through the tokenizer's own chat_template. */
int td_render_model(const struct td_tok *t, const struct td_msg *m, int64_t n,
		    struct td_sample *s);
/* BOS + prompt + response + EOS, the response and EOS the targets. */
int td_render_single(struct td_sample *s, const char *bos, const char *eos,
		     const char *prompt, const char *response);
/* All segments' text concatenated (what the template renders), malloc'd. */
char *td_sample_join(const struct td_sample *s);

/* ---- tokenized corpus --------------------------------------------------- */

/* Samples (or documents) as ids with a per-token target flag. */
struct td_corpus {
	int64_t n;
	int64_t *off;	/* [n + 1] */
	int32_t *ids;	/* [off[n]] */
	uint8_t *train; /* [off[n]]: 1 where the token is a target */
	int64_t truncated, dropped, unlabeled;
	/* [n]: the input index of each kept sample (td_encode_samples;
	 * NULL after a cache load) */
	int64_t *src;
};
void td_corpus_free(struct td_corpus *c);

/* Encode samples[0..n) on all cores: ids and target flags, cut to
 * max_len tokens (0: no limit; drop: leave long samples out instead).
 * train_all marks every token a target (train_on_input). Samples with no
 * target left are left out and counted. progress: a label for the
 * stderr progress line (NULL: quiet). */
int td_encode_samples(const struct td_tok *t, const struct td_sample *samples,
		      int64_t n, int64_t max_len, bool drop, bool train_all,
		      const char *progress, struct td_corpus *out);

/* ---- cache ------------------------------------------------------------- */

/* A 128-bit hash as 32 hex digits over added parts. */
struct td_hash {
	uint64_t a, b;
};
void td_hash_init(struct td_hash *h);
void td_hash_add(struct td_hash *h, const void *p, size_t n);
void td_hash_str(struct td_hash *h, const char *s); /* with its length */
void td_hash_hex(const struct td_hash *h, char out[33]);

/* cache_dir/tokens/<key>.bin: 1 when loaded, 0 when absent (or corrupt:
 * warned, to be rebuilt), -1 on error. */
int td_cache_load(const char *cache_dir, const char *key, struct td_corpus *c);
/* Written to a temporary file and renamed, so readers never see half. */
int td_cache_store(const char *cache_dir, const char *key,
		   const struct td_corpus *c);

/* ---- rows -------------------------------------------------------------- */

struct td_rows {
	int64_t n, seq_len;
	int64_t *off; /* [n + 1] */
	int32_t *ids, *labels, *pos;
};
void td_rows_free(struct td_rows *r);

/* Samples sel[0..nsel) of c as rows: one per sample, or packed greedily
 * into rows of at most seq_len with positions restarting per sample and
 * no label across samples. Labels are next-token targets of tokens
 * flagged train. */
int td_rows_samples(const struct td_corpus *c, const int64_t *sel, int64_t nsel,
		    int64_t seq_len, bool packed, struct td_rows *out);
/* Documents sel[] joined (bos before each when bos >= 0, eos after each
 * when eos >= 0) and cut into blocks of seq_len (the last may be
 * shorter; one of a single token is left out). */
int td_rows_blocks(const struct td_corpus *c, const int64_t *sel, int64_t nsel,
		   int64_t seq_len, int32_t bos, int32_t eos,
		   struct td_rows *out);
/* Copy rows idx[0..n) into out, padding past each row's length. */
int td_rows_read(const struct td_rows *r, const int64_t *idx, int64_t n,
		 const struct mg_token_rows *out);

/* ---- preference pairs (td_pairs.c) --------------------------------------- */

/* Record i of a preference file as its chosen and rejected samples:
 * prompt / chosen / rejected strings (BOS + prompt + response + EOS), or
 * chosen and rejected message lists through the chat template, with an
 * explicit `prompt` list or, without one, their longest common prefix of
 * messages as the prompt. Only the responses (and the token ending them)
 * are targets. Errors name the file, line, sample and field. */
int td_render_pair(const struct td_records *r, int64_t i, enum td_template tpl,
		   const struct td_columns *c, const struct td_tok *tok,
		   struct td_sample *chosen, struct td_sample *rejected);
/*
 * Encode n pairs (samples[2k] chosen, samples[2k + 1] rejected) into a
 * corpus of the kept pairs' documents, interleaved the same way. A pair
 * must fit one row of max_len tokens holding both sequences. One that
 * does not is left out with drop, else cut: first its prompt (in each
 * sequence; the prompt is the tokens before the first target) to
 * max_prompt tokens (0: max_len / 4), keeping its first token (BOS) and
 * its end; then, if still too long, the longer response is cut from its
 * end down to the shorter one's length, then both alike, until the row
 * fits. truncated / dropped / unlabeled count pairs; a pair whose
 * chosen or rejected sequence has no target is left out (unlabeled).
 */
int td_encode_pairs(const struct td_tok *t, const struct td_sample *samples,
		    int64_t n, int64_t max_len, int64_t max_prompt, bool drop,
		    const char *progress, struct td_corpus *out);
/* Pairs sel[] of c (documents 2 sel[k] and 2 sel[k] + 1) as one row each:
 * [chosen | rejected], positions restarting at the rejected sequence,
 * labels inside each document only. */
int td_rows_pairs(const struct td_corpus *c, const int64_t *sel, int64_t nsel,
		  int64_t seq_len, struct td_rows *out);

/* Deterministic split: 1 when item i (of n) goes to validation. At least
 * one item goes each way when fraction > 0 and n >= 2. */
void td_split(int64_t n, double fraction, uint64_t seed, uint8_t *is_val);

#endif
