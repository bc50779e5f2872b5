/*
 * tok_added.c - added tokens found in the text before the model sees it,
 * as tokenizers' AddedVocabulary does: leftmost-longest, non-overlapping,
 * the search resuming after each match; single_word drops a match inside
 * a word, lstrip/rstrip take the whitespace beside it into the token.
 * Tokens with normalized=false are matched in the raw text, the others in
 * each normalized segment (against their own normalized form).
 */
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "tok_internal.h"

static int by_first_then_longest(const void *a, const void *b, void *base)
{
	const struct tok_added *x =
		&((const struct tok_added *)base)[*(const int32_t *)a];
	const struct tok_added *y =
		&((const struct tok_added *)base)[*(const int32_t *)b];
	unsigned char fx = (unsigned char)x->pattern[0];
	unsigned char fy = (unsigned char)y->pattern[0];
	if (fx != fy)
		return fx < fy ? -1 : 1;
	if (x->plen != y->plen)
		return x->plen > y->plen ? -1 : 1;
	return 0;
}

int tok_addset_build(struct mg_tokenizer *t, struct tok_addset *set,
		     int normalized)
{
	set->idx = calloc((size_t)t->nadded + 1, sizeof *set->idx);
	if (!set->idx)
		return mg_error("tokenizer: out of memory");
	set->n = 0;
	for (int i = 0; i < t->nadded; i++)
		if (!!t->added[i].normalized == !!normalized &&
		    t->added[i].plen)
			set->idx[set->n++] = i;
	/* qsort_r: tokenizers may be loaded on several threads at once */
	qsort_r(set->idx, (size_t)set->n, sizeof *set->idx,
		by_first_then_longest, t->added);
	int k = 0;
	for (int b = 0; b <= 256; b++) {
		while (k < set->n &&
		       (unsigned char)t->added[set->idx[k]].pattern[0] < b)
			k++;
		set->first[b] = k;
	}
	return 0;
}

/* Is the character ending at / starting at text[i] a word character
 * (regex \w with Unicode properties)? */
static int word_at(const struct mg_tokenizer *t, struct tok_scratch *s,
		   const char *text, size_t len, size_t i, int before)
{
	if (before) {
		if (!i)
			return 0;
		size_t k = i - 1;
		while (k && ((unsigned char)text[k] & 0xC0) == 0x80)
			k--;
		i = k;
	} else if (i >= len) {
		return 0;
	}
	if (!s->md && !(s->md = pcre2_match_data_create(1, NULL)))
		return 0;
	return pcre2_match(t->word_re, (PCRE2_SPTR)text, len, i,
			   PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, s->md,
			   NULL) >= 0;
}

int tok_added_split(const struct mg_tokenizer *t, const struct tok_addset *set,
		    struct tok_scratch *s, const char *text, size_t len,
		    tok_seg_fn fn, void *ctx)
{
	size_t done = 0, pos = 0;
	while (set->n && pos < len) {
		int hit = -1;
		size_t i;
		for (i = pos; i < len && hit < 0; i++) {
			unsigned char c = (unsigned char)text[i];
			for (int k = set->first[c]; k < set->first[c + 1];
			     k++) {
				const struct tok_added *a =
					&t->added[set->idx[k]];
				/* the second byte first: Llama 3's 256
				 * tokens all start with '<' */
				if (a->plen <= len - i &&
				    (a->plen < 2 ||
				     a->pattern[1] == text[i + 1]) &&
				    !memcmp(text + i, a->pattern, a->plen)) {
					hit = set->idx[k];
					break;
				}
			}
		}
		if (hit < 0)
			break;
		const struct tok_added *a = &t->added[hit];
		size_t start = i - 1, stop = start + a->plen;
		pos = stop;
		if (a->single_word && (word_at(t, s, text, len, start, 1) ||
				       word_at(t, s, text, len, stop, 0)))
			continue;
		if (a->lstrip) {
			size_t k = start;
			while (k > done) {
				size_t j = k - 1;
				uint32_t cp;
				while (j > done &&
				       ((unsigned char)text[j] & 0xC0) == 0x80)
					j--;
				tok_utf8_decode(text + j, k - j, &cp);
				if (!tok_is_space(cp))
					break;
				k = j;
			}
			start = k;
		}
		if (a->rstrip) {
			uint32_t cp;
			while (stop < len) {
				int n = tok_utf8_decode(text + stop, len - stop,
							&cp);
				if (!tok_is_space(cp))
					break;
				stop += (size_t)n;
			}
		}
		if (start < done) /* an rstrip took this match's start */
			start = done;
		if (start > done && fn(ctx, -1, done, start))
			return -1;
		if (fn(ctx, hit, start, stop))
			return -1;
		done = stop;
		if (pos < done)
			pos = done;
	}
	if (done < len && fn(ctx, -1, done, len))
		return -1;
	return 0;
}
