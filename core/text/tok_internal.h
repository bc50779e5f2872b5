/*
 * tok_internal.h - the loaded tokenizer's tables and the components'
 * descriptions, shared by the core/text files (load, normalize,
 * pre-tokenize, BPE, added tokens, post-process, decode). Nothing here is
 * exported: users see include/mg/tokenizer.h only.
 *
 * Everything in struct mg_tokenizer is written once by tok_load.c and only
 * read afterwards, so encode/decode run concurrently; per-call state lives
 * in struct tok_scratch.
 */
#ifndef MG_TOK_INTERNAL_H
#define MG_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "mg/tokenizer.h"

struct cJSON;
struct mg_chat_template;

/* String -> id open-addressing table over a string pool. */
struct tok_strmap {
	uint64_t *slot; /* hash << 32 | (index into ent + 1); 0 = empty:
			   the hash spares a cache miss on ent per probe */
	size_t mask;
	struct {
		uint32_t off, len; /* in pool */
		int32_t id;
	} * ent;
	size_t n, cap;
	char *pool;
	size_t pool_len, pool_cap;
};

/* (left id, right id) -> (rank, merged id). */
struct tok_merges {
	struct tok_merge_ent {
		uint64_t key; /* left << 32 | right, + 1; 0 = empty */
		int32_t rank, id;
	} * slot;
	size_t mask, n;
};

/* Split behaviours, as tokenizers' SplitDelimiterBehavior. */
enum tok_behavior {
	TOK_REMOVED,
	TOK_ISOLATED,
	TOK_MERGED_PREV,
	TOK_MERGED_NEXT,
	TOK_CONTIGUOUS,
};

enum tok_norm_type { TOK_N_PREPEND, TOK_N_REPLACE, TOK_N_STRIP };
struct tok_norm {
	enum tok_norm_type type;
	char *a, *b;	 /* Prepend: a; Replace: a -> b */
	int left, right; /* Strip */
};

enum tok_pre_type { TOK_P_SPLIT, TOK_P_BYTELEVEL, TOK_P_METASPACE };
enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };
struct tok_pre {
	enum tok_pre_type type;
	pcre2_code *re; /* Split regex, ByteLevel's GPT-2 regex, or NULL */
	char *pattern;	/* re's source, for the errors of a match */
	char *literal;	/* Split with a String pattern */
	enum tok_behavior behavior;
	int invert;
	int add_prefix_space; /* ByteLevel */
	char rep[8];	      /* Metaspace replacement (UTF-8) */
	int prepend_scheme, split;
};

enum tok_dec_type {
	TOK_D_BYTELEVEL,
	TOK_D_REPLACE,
	TOK_D_BYTEFALLBACK,
	TOK_D_FUSE,
	TOK_D_STRIP,
	TOK_D_METASPACE,
};
struct tok_dec {
	enum tok_dec_type type;
	char *a, *b;	    /* Replace a -> b; Strip content (a char) */
	int start, stop;    /* Strip */
	char rep[8];	    /* Metaspace */
	int prepend_scheme; /* Metaspace */
};

/* An added token as in tokenizer.json's added_tokens. */
struct tok_added {
	char *content; /* as stored */
	char *pattern; /* what is matched: content, or normalized content */
	size_t plen;
	int32_t id;
	int special, lstrip, rstrip, single_word, normalized;
};

/* One set of added tokens matched together (raw or normalized pass):
 * tokens indexed by first byte, longest first, for leftmost-longest. */
struct tok_addset {
	int32_t *idx;	    /* indices into t->added, grouped by first byte */
	int32_t first[257]; /* idx[first[b] .. first[b+1]) start with b */
	int n;
};

struct mg_tokenizer {
	/* model */
	struct tok_strmap vocab; /* token string (as in file) -> id */
	struct tok_strmap raw;	 /* byte-level: raw bytes -> id */
	char **id_tok;		 /* id -> token string (vocab or added) */
	int64_t nid;
	struct tok_merges merges;
	int bytelevel;	       /* a ByteLevel pre-tokenizer: model sees bytes */
	int32_t byte_id[256];  /* byte-level: id of each byte's character;
				 byte fallback: id of <0xNN>, or -1 */
	int32_t ascii_id[128]; /* character-level: id of each ASCII char */
	int byte_fallback, fuse_unk, ignore_merges;
	int32_t unk_id;

	struct tok_norm *norm;
	int nnorm;
	struct tok_pre *pre;
	int npre;
	struct tok_dec *dec;
	int ndec;
	int has_decoder;
	/* post-processor: the single template, ids before and after A */
	int32_t *post_pre, *post_post;
	int npost_pre, npost_post;

	struct tok_added *added;
	int nadded;
	struct tok_addset add_raw, add_norm;
	pcre2_code *word_re; /* \w, for single_word */
	uint8_t *is_special; /* per id */

	struct mg_tokenizer_specials sp;
	char *chat_template;
	struct mg_chat_template *chat; /* parsed; NULL when absent or bad */
	char *chat_err;		       /* why it did not parse */
	char *chat_vars; /* JSON: the special tokens, tools/documents None */
	char digest[17];
	char *path; /* the tokenizer.json read, for errors */
};

/* chat_template.c: parse the chat template and gather the special
 * tokens' strings (cfg may be NULL). */
int tok_chat_setup(struct mg_tokenizer *t, const struct cJSON *cfg);

/* Per-call growable buffers, so a const tokenizer serves many threads. */
struct tok_piece {
	size_t off, len; /* in scratch arena */
	int first;	 /* starts at original offset 0 (Metaspace "first") */
};
struct tok_pieces {
	struct tok_piece *v;
	size_t n, cap;
};
struct tok_scratch {
	char *arena;
	size_t alen, acap;
	struct tok_pieces p[2];
	pcre2_match_data *md;
	pcre2_match_context *mctx; /* match limits sized to each piece */
	pcre2_jit_stack *jit;	   /* grown for long pieces */
	/* BPE */
	struct tok_sym {
		int32_t id, prev, next, len;
	} * sym;
	size_t symcap;
	struct tok_heap_ent {
		int32_t rank, pos, id;
		int32_t l, r; /* the pair when pushed: still there = valid */
	} * heap;
	size_t heapcap;
};

/* tok_util.c */
int tok_strmap_put(struct tok_strmap *m, const char *s, size_t len, int32_t id);
int32_t tok_strmap_get(const struct tok_strmap *m, const char *s, size_t len);
void tok_strmap_free(struct tok_strmap *m);
int tok_merges_init(struct tok_merges *m, size_t n);
void tok_merges_put(struct tok_merges *m, int32_t l, int32_t r, int32_t rank,
		    int32_t id);
const struct tok_merge_ent *tok_merges_get(const struct tok_merges *m,
					   int32_t l, int32_t r);
size_t tok_utf8_valid(const char *s, size_t len); /* bad offset or len */
int tok_utf8_decode(const char *s, size_t len, uint32_t *cp); /* bytes */
int tok_is_space(uint32_t cp);
int tok_arena_reserve(struct tok_scratch *s, size_t more);
int tok_arena_add(struct tok_scratch *s, const char *p, size_t len,
		  size_t *off);
int tok_pieces_push(struct tok_pieces *p, size_t off, size_t len, int first);
int tok_ids_push(struct mg_ids *ids, int32_t id);
void tok_scratch_free(struct tok_scratch *s);

/* tok_bytelevel.c */
extern const uint16_t tok_byte_to_cp[256];
int tok_cp_to_byte(uint32_t cp); /* -1 when not in the map */
/* Raw bytes of a byte-level token string into out (cap >= len); the
 * length, or -1 when a character is outside the map. */
long tok_bytelevel_unmap(const char *s, size_t len, char *out);

/* tok_normalize.c: the normalized segment appended to the arena. */
int tok_normalize(const struct mg_tokenizer *t, struct tok_scratch *s,
		  const char *text, size_t len, size_t *off, size_t *olen);
/* tok_normalize on a string into a malloc'd one (load time). */
char *tok_normalize_str(const struct mg_tokenizer *t, const char *text);

/* tok_pretok.c: split s->p[0] (one piece in) into the model's pieces,
 * left in s->p[0]. */
int tok_pretokenize(const struct mg_tokenizer *t, struct tok_scratch *s);
pcre2_code *tok_regex_compile(const char *pat, const char *what);

/* tok_bpe.c: append the ids of one piece. */
int tok_bpe_word(const struct mg_tokenizer *t, struct tok_scratch *s,
		 const char *w, size_t len, struct mg_ids *out);

/* tok_added.c */
int tok_addset_build(struct mg_tokenizer *t, struct tok_addset *set,
		     int normalized);
/* Segments of text: calls fn(ctx, added index or -1, start, end) in
 * order. */
typedef int (*tok_seg_fn)(void *ctx, int added, size_t start, size_t end);
int tok_added_split(const struct mg_tokenizer *t, const struct tok_addset *set,
		    struct tok_scratch *s, const char *text, size_t len,
		    tok_seg_fn fn, void *ctx);

/* tok_load.c helpers used by the component parsers */
struct cJSON;
int tok_parse_normalizer(struct mg_tokenizer *t, const struct cJSON *j);
int tok_parse_pretokenizer(struct mg_tokenizer *t, const struct cJSON *j);
int tok_parse_decoder(struct mg_tokenizer *t, const struct cJSON *j);
int tok_parse_post(struct mg_tokenizer *t, const struct cJSON *j);
int tok_parse_model(struct mg_tokenizer *t, const struct cJSON *j);

#endif
