/*
 * tok_normalize.c - normalizers (Prepend, Replace with a string pattern,
 * Strip), applied in order to each text segment between added tokens, as
 * tokenizers does. Each step writes its result to the per-call arena.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "tok_internal.h"

/* Apply one normalizer to arena[off..off+len); the result's place in
 * *noff and *nlen (possibly the same bytes when nothing changes). */
static int norm_one(const struct tok_norm *n, struct tok_scratch *s, size_t off,
		    size_t len, size_t *noff, size_t *nlen)
{
	*noff = off;
	*nlen = len;
	switch (n->type) {
	case TOK_N_PREPEND: {
		if (!len) /* tokenizers: only non-empty strings */
			return 0;
		size_t pl = strlen(n->a);
		if (tok_arena_reserve(s, pl + len))
			return -1;
		memcpy(s->arena + s->alen, n->a, pl);
		memcpy(s->arena + s->alen + pl, s->arena + off, len);
		*noff = s->alen;
		*nlen = pl + len;
		s->alen += pl + len;
		return 0;
	}
	case TOK_N_REPLACE: {
		size_t pl = strlen(n->a), cl = strlen(n->b);
		if (!pl)
			return 0;
		/* worst case every byte starts a match */
		size_t worst = cl > pl ? len / pl * (cl - pl) + len : len;
		if (tok_arena_reserve(s, worst))
			return -1;
		const char *src = s->arena + off;
		char *dst = s->arena + s->alen;
		size_t o = 0, i = 0;
		while (i < len) {
			if (i + pl <= len && src[i] == n->a[0] &&
			    !memcmp(src + i, n->a, pl)) {
				memcpy(dst + o, n->b, cl);
				o += cl;
				i += pl;
			} else {
				dst[o++] = src[i++];
			}
		}
		*noff = s->alen;
		*nlen = o;
		s->alen += o;
		return 0;
	}
	case TOK_N_STRIP: {
		const char *p = s->arena + off;
		size_t a = 0, b = len;
		uint32_t cp;
		while (n->left && a < b) {
			int k = tok_utf8_decode(p + a, b - a, &cp);
			if (!tok_is_space(cp))
				break;
			a += (size_t)k;
		}
		while (n->right && b > a) {
			size_t k = b - 1;
			while (k > a && ((unsigned char)p[k] & 0xC0) == 0x80)
				k--;
			tok_utf8_decode(p + k, b - k, &cp);
			if (!tok_is_space(cp))
				break;
			b = k;
		}
		*noff = off + a;
		*nlen = b - a;
		return 0;
	}
	}
	return 0;
}

int tok_normalize(const struct mg_tokenizer *t, struct tok_scratch *s,
		  const char *text, size_t len, size_t *off, size_t *olen)
{
	size_t o, l = len;
	if (tok_arena_add(s, text, len, &o))
		return -1;
	for (int i = 0; i < t->nnorm; i++)
		if (norm_one(&t->norm[i], s, o, l, &o, &l))
			return -1;
	*off = o;
	*olen = l;
	return 0;
}

char *tok_normalize_str(const struct mg_tokenizer *t, const char *text)
{
	struct tok_scratch s = {0};
	size_t off, len;
	char *r = NULL;
	if (!tok_normalize(t, &s, text, strlen(text), &off, &len)) {
		r = malloc(len + 1);
		if (r) {
			memcpy(r, s.arena + off, len);
			r[len] = 0;
		}
	}
	tok_scratch_free(&s);
	if (!r)
		mg_error("tokenizer: out of memory");
	return r;
}
