/*
 * tok_encode.c - mg_tokenizer_encode: validate UTF-8, split out added
 * tokens in the raw text, normalize each remaining segment (then split
 * out normalized added tokens), pre-tokenize, run BPE on every piece, and
 * wrap the ids in the post-processor's template. All state is in a
 * per-call scratch, so one tokenizer serves any number of threads.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "tok_internal.h"

struct enc {
	const struct mg_tokenizer *t;
	struct tok_scratch *s;
	const char *text; /* raw text, or the normalized copy (pass 2) */
	struct mg_ids *out;
	unsigned flags;
	int first; /* the segment being split starts the text */
};

/* Pre-tokenize arena[off..off+len) and append the model's ids. */
static int model_piece(const struct enc *e, size_t off, size_t len, int first)
{
	struct tok_scratch *s = e->s;
	s->p[0].n = 0;
	if (!len)
		return 0;
	if (tok_pieces_push(&s->p[0], off, len, first) ||
	    tok_pretokenize(e->t, s))
		return -1;
	for (size_t i = 0; i < s->p[0].n; i++)
		if (tok_bpe_word(e->t, s, s->arena + s->p[0].v[i].off,
				 s->p[0].v[i].len, e->out))
			return -1;
	return 0;
}

/* A segment of the normalized text around normalized added tokens. */
static int norm_seg(void *ctx, int added, size_t start, size_t end)
{
	const struct enc *e = ctx;
	if (added >= 0)
		return tok_ids_push(e->out, e->t->added[added].id);
	size_t off;
	e->s->alen = 0;
	if (tok_arena_add(e->s, e->text + start, end - start, &off))
		return -1;
	return model_piece(e, off, end - start, e->first && !start);
}

/* A segment of the raw text around (non-normalized) added tokens. */
static int raw_seg(void *ctx, int added, size_t start, size_t end)
{
	const struct enc *e = ctx;
	const struct mg_tokenizer *t = e->t;
	struct tok_scratch *s = e->s;
	if (added >= 0)
		return tok_ids_push(e->out, t->added[added].id);
	size_t off, len;
	s->alen = 0;
	if (tok_normalize(t, s, e->text + start, end - start, &off, &len))
		return -1;
	if ((e->flags & MG_TOK_NO_ADDED) || !t->add_norm.n)
		return model_piece(e, off, len, !start);
	/* the arena grows while pieces are processed: split a copy */
	char *copy = malloc(len + 1);
	if (!copy)
		return mg_error("tokenizer: out of memory");
	memcpy(copy, s->arena + off, len);
	struct enc e2 = *e;
	e2.text = copy;
	e2.first = !start;
	int rc = tok_added_split(t, &t->add_norm, s, copy, len, norm_seg, &e2);
	free(copy);
	return rc;
}

int mg_tokenizer_encode(const struct mg_tokenizer *t, const char *text,
			size_t len, unsigned flags, struct mg_ids *out)
{
	size_t bad = tok_utf8_valid(text, len);
	if (bad != len)
		return mg_error("tokenizer: invalid UTF-8 at byte offset %zu "
				"(byte 0x%02x)",
				bad, (unsigned char)text[bad]);
	struct tok_scratch s = {0};
	struct enc e = {t, &s, text, out, flags, 1};
	int64_t n0 = out->n;
	int rc = 0;
	if (flags & MG_TOK_ADD_SPECIAL)
		for (int i = 0; i < t->npost_pre && !rc; i++)
			rc = tok_ids_push(out, t->post_pre[i]);
	if (!rc) {
		if (!(flags & MG_TOK_NO_ADDED) && t->add_raw.n)
			rc = tok_added_split(t, &t->add_raw, &s, text, len,
					     raw_seg, &e);
		else if (len)
			rc = raw_seg(&e, -1, 0, len);
	}
	if (flags & MG_TOK_ADD_SPECIAL)
		for (int i = 0; i < t->npost_post && !rc; i++)
			rc = tok_ids_push(out, t->post_post[i]);
	tok_scratch_free(&s);
	if (rc)
		out->n = n0;
	return rc;
}
