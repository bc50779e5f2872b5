/*
 * tok_decode.c - ids back to text: the token strings (skipping special
 * tokens on request) through the decoder chain (ByteLevel, Replace,
 * ByteFallback, Fuse, Strip, Metaspace), each step a list of strings to a
 * list of strings as in tokenizers, then joined. Invalid UTF-8 that byte
 * tokens produce becomes U+FFFD as Rust's from_utf8_lossy writes it.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "tok_internal.h"

/* A list of strings in one buffer: string i is buf[off[i]..off[i+1]). */
struct strv {
	char *buf;
	size_t len, cap;
	size_t *off;
	size_t n, ncap; /* n strings, off has n + 1 entries */
};

static int sv_bytes(struct strv *v, const char *p, size_t len)
{
	if (!len)
		return 0; /* also: memcpy from or to NULL is undefined */
	if (v->len + len > v->cap) {
		size_t cap = v->cap ? v->cap : 256;
		while (cap < v->len + len)
			cap *= 2;
		char *b = realloc(v->buf, cap + 1);
		if (!b)
			return mg_error("tokenizer: out of memory");
		v->buf = b;
		v->cap = cap;
	}
	memcpy(v->buf + v->len, p, len);
	v->len += len;
	return 0;
}

/* End the current string (bytes added since the last end). */
static int sv_end(struct strv *v)
{
	if (v->n + 2 > v->ncap) {
		size_t cap = v->ncap ? v->ncap * 2 : 64;
		size_t *o = realloc(v->off, cap * sizeof *o);
		if (!o)
			return mg_error("tokenizer: out of memory");
		v->off = o;
		v->ncap = cap;
	}
	if (!v->n)
		v->off[0] = 0;
	v->off[++v->n] = v->len;
	return 0;
}

static void sv_reset(struct strv *v)
{
	v->len = v->n = 0;
}

static const char *sv_at(const struct strv *v, size_t i, size_t *len)
{
	*len = v->off[i + 1] - v->off[i];
	/* no buffer yet when every string so far is empty (a decode of
	 * special tokens skipped): NULL + 0 is undefined */
	return v->buf ? v->buf + v->off[i] : "";
}

static const char fffd[] = "\xEF\xBF\xBD";

/* from_utf8_lossy: one U+FFFD per maximal invalid subpart. */
static int sv_lossy(struct strv *v, const unsigned char *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		unsigned c = s[i];
		int n = c < 0x80		   ? 1
			: (c >= 0xC2 && c <= 0xDF) ? 2
			: (c >= 0xE0 && c <= 0xEF) ? 3
			: (c >= 0xF0 && c <= 0xF4) ? 4
						   : 0;
		if (n == 1) {
			if (sv_bytes(v, (const char *)s + i, 1))
				return -1;
			i++;
			continue;
		}
		size_t k = 1;
		if (n) {
			unsigned lo = c == 0xE0	  ? 0xA0
				      : c == 0xF0 ? 0x90
						  : 0x80;
			unsigned hi = c == 0xED	  ? 0x9F
				      : c == 0xF4 ? 0x8F
						  : 0xBF;
			if (i + 1 < len && s[i + 1] >= lo && s[i + 1] <= hi) {
				k = 2;
				while ((int)k < n && i + k < len &&
				       (s[i + k] & 0xC0) == 0x80)
					k++;
			}
		}
		if (n && (int)k == n) {
			if (sv_bytes(v, (const char *)s + i, k))
				return -1;
		} else if (sv_bytes(v, fffd, 3)) {
			return -1;
		}
		i += k;
	}
	return 0;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* Replace every occurrence of a in p[0..len) by b, into v. */
static int replace_into(struct strv *v, const char *p, size_t len,
			const char *a, const char *b)
{
	size_t al = strlen(a), bl = strlen(b), i = 0;
	while (i < len) {
		const char *h = al ? memmem(p + i, len - i, a, al) : NULL;
		size_t stop = h ? (size_t)(h - p) : len;
		if (sv_bytes(v, p + i, stop - i))
			return -1;
		if (!h)
			break;
		if (sv_bytes(v, b, bl))
			return -1;
		i = stop + al;
	}
	return 0;
}

static int dec_step(const struct tok_dec *d, const struct strv *in,
		    struct strv *out)
{
	size_t len;
	const char *p;
	switch (d->type) {
	case TOK_D_BYTELEVEL: {
		struct strv raw = {0};
		int rc = 0;
		for (size_t i = 0; i < in->n && !rc; i++) {
			p = sv_at(in, i, &len);
			if ((rc = sv_bytes(&raw, p, len)))
				break;
			long k = tok_bytelevel_unmap(p, len,
						     raw.buf + raw.len - len);
			if (k >= 0) /* else the token's own bytes stay */
				raw.len -= len - (size_t)k;
		}
		if (!rc)
			rc = sv_lossy(out, (unsigned char *)raw.buf, raw.len);
		free(raw.buf);
		free(raw.off);
		return rc ? rc : sv_end(out);
	}
	case TOK_D_REPLACE:
		for (size_t i = 0; i < in->n; i++) {
			p = sv_at(in, i, &len);
			if (replace_into(out, p, len, d->a, d->b) ||
			    sv_end(out))
				return -1;
		}
		return 0;
	case TOK_D_BYTEFALLBACK: {
		unsigned char *bytes = malloc(in->n + 1);
		size_t nb = 0;
		int rc = bytes ? 0 : mg_error("tokenizer: out of memory");
		for (size_t i = 0; i <= in->n && !rc; i++) {
			int b = -1;
			if (i < in->n) {
				p = sv_at(in, i, &len);
				if (len == 6 && !memcmp(p, "<0x", 3) &&
				    p[5] == '>' && hexval(p[3]) >= 0 &&
				    hexval(p[4]) >= 0)
					b = hexval(p[3]) * 16 + hexval(p[4]);
			}
			if (b >= 0) {
				bytes[nb++] = (unsigned char)b;
				continue;
			}
			if (nb) {
				if (tok_utf8_valid((char *)bytes, nb) == nb) {
					rc = sv_bytes(out, (char *)bytes, nb);
					rc = rc ? rc : sv_end(out);
				} else {
					for (size_t k = 0; k < nb && !rc; k++)
						rc = sv_bytes(out, fffd, 3)
							     ? -1
							     : sv_end(out);
				}
				nb = 0;
			}
			if (i < in->n && !rc) {
				rc = sv_bytes(out, p, len);
				rc = rc ? rc : sv_end(out);
			}
		}
		free(bytes);
		return rc;
	}
	case TOK_D_FUSE:
		if (in->n && sv_bytes(out, in->buf, in->len))
			return -1;
		return sv_end(out);
	case TOK_D_STRIP: {
		size_t cl = strlen(d->a);
		for (size_t i = 0; i < in->n; i++) {
			p = sv_at(in, i, &len);
			for (int k = 0; k < d->start && len >= cl && cl &&
					!memcmp(p, d->a, cl);
			     k++)
				p += cl, len -= cl;
			for (int k = 0; k < d->stop && len >= cl && cl &&
					!memcmp(p + len - cl, d->a, cl);
			     k++)
				len -= cl;
			if (sv_bytes(out, p, len) || sv_end(out))
				return -1;
		}
		return 0;
	}
	case TOK_D_METASPACE:
		for (size_t i = 0; i < in->n; i++) {
			p = sv_at(in, i, &len);
			const char *b =
				i == 0 && d->prepend_scheme != TOK_PREPEND_NEVER
					? ""
					: " ";
			if (replace_into(out, p, len, d->rep, b) || sv_end(out))
				return -1;
		}
		return 0;
	}
	return 0;
}

int mg_tokenizer_decode(const struct mg_tokenizer *t, const int32_t *ids,
			int64_t n, unsigned flags, char **text, size_t *tlen)
{
	struct strv a = {0}, b = {0};
	int rc = 0;
	int64_t kept = 0;
	*text = NULL;
	for (int64_t i = 0; i < n && !rc; i++) {
		int32_t id = ids[i];
		if (id < 0 || id >= t->nid || !t->id_tok[id]) {
			rc = mg_error("tokenizer: decode: id %d (position "
				      "%lld) is not in the vocabulary",
				      (int)id, (long long)i);
			break;
		}
		if ((flags & MG_TOK_SKIP_SPECIAL) && t->is_special[id])
			continue;
		const char *s = t->id_tok[id];
		/* no decoder: tokenizers joins the tokens with spaces */
		if (!t->has_decoder && kept++ && sv_bytes(&a, " ", 1))
			rc = -1;
		if (!rc && (sv_bytes(&a, s, strlen(s)) ||
			    (t->has_decoder && sv_end(&a))))
			rc = -1;
	}
	if (!t->has_decoder && !rc)
		rc = sv_end(&a);
	for (int k = 0; k < t->ndec && !rc; k++) {
		sv_reset(&b);
		rc = dec_step(&t->dec[k], &a, &b);
		struct strv tmp = a;
		a = b;
		b = tmp;
	}
	if (!rc) {
		/* the strings joined: they are contiguous already */
		char *r = malloc(a.len + 1);
		if (!r) {
			rc = mg_error("tokenizer: out of memory");
		} else {
			if (a.len)
				memcpy(r, a.buf, a.len);
			r[a.len] = 0;
			*text = r;
			if (tlen)
				*tlen = a.len;
		}
	}
	free(a.buf);
	free(a.off);
	free(b.buf);
	free(b.off);
	return rc;
}
