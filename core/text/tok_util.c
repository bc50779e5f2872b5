/*
 * tok_util.c - the tokenizer's small containers: string->id and
 * (id, id)->merge hash tables (open addressing, built once at load),
 * UTF-8 helpers, and the per-call scratch buffers encode grows.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "mg/rng.h"
#include "mg/tokenizer.h"
#include "tok_internal.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static int strmap_grow(struct tok_strmap *m)
{
	size_t nslots = m->mask ? (m->mask + 1) * 2 : 1024;
	uint64_t *slot = calloc(nslots, sizeof *slot);
	if (!slot)
		return mg_error("tokenizer: out of memory");
	for (size_t i = 0; i < m->n; i++) {
		uint64_t h = hash_bytes(m->pool + m->ent[i].off, m->ent[i].len);
		size_t k = h & (nslots - 1);
		while (slot[k])
			k = (k + 1) & (nslots - 1);
		slot[k] = (h >> 32) << 32 | (i + 1);
	}
	free(m->slot);
	m->slot = slot;
	m->mask = nslots - 1;
	return 0;
}

/* Insert or overwrite (a later duplicate wins, as a JSON object would). */
int tok_strmap_put(struct tok_strmap *m, const char *s, size_t len, int32_t id)
{
	if ((m->n + 1) * 2 > m->mask + 1 && strmap_grow(m))
		return -1;
	uint64_t h = hash_bytes(s, len);
	size_t k = h & m->mask;
	while (m->slot[k]) {
		size_t e = (uint32_t)m->slot[k] - 1;
		if (m->slot[k] >> 32 == h >> 32 && m->ent[e].len == len &&
		    !memcmp(m->pool + m->ent[e].off, s, len)) {
			m->ent[e].id = id;
			return 0;
		}
		k = (k + 1) & m->mask;
	}
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		void *e = realloc(m->ent, cap * sizeof *m->ent);
		if (!e)
			return mg_error("tokenizer: out of memory");
		m->ent = e;
		m->cap = cap;
	}
	if (m->pool_len + len + 1 > m->pool_cap) {
		size_t cap = m->pool_cap ? m->pool_cap * 2 : 65536;
		while (cap < m->pool_len + len + 1)
			cap *= 2;
		char *p = realloc(m->pool, cap);
		if (!p)
			return mg_error("tokenizer: out of memory");
		m->pool = p;
		m->pool_cap = cap;
	}
	memcpy(m->pool + m->pool_len, s, len);
	m->pool[m->pool_len + len] = 0;
	m->ent[m->n].off = (uint32_t)m->pool_len;
	m->ent[m->n].len = (uint32_t)len;
	m->ent[m->n].id = id;
	m->pool_len += len + 1;
	m->slot[k] = (h >> 32) << 32 | ++m->n;
	return 0;
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *s, size_t len)
{
	if (!m->n)
		return -1;
	uint64_t h = hash_bytes(s, len);
	size_t k = h & m->mask;
	while (m->slot[k]) {
		size_t e = (uint32_t)m->slot[k] - 1;
		if (m->slot[k] >> 32 == h >> 32 && m->ent[e].len == len &&
		    !memcmp(m->pool + m->ent[e].off, s, len))
			return m->ent[e].id;
		k = (k + 1) & m->mask;
	}
	return -1;
}

void tok_strmap_free(struct tok_strmap *m)
{
	free(m->slot);
	free(m->ent);
	free(m->pool);
	memset(m, 0, sizeof *m);
}

int tok_merges_init(struct tok_merges *m, size_t n)
{
	size_t nslots = 1024;
	while (nslots < n * 2 + 2)
		nslots *= 2;
	m->slot = calloc(nslots, sizeof *m->slot);
	if (!m->slot)
		return mg_error("tokenizer: out of memory");
	m->mask = nslots - 1;
	m->n = 0;
	return 0;
}

/* The first rank of a pair wins (tokenizers keeps the first as well). */
void tok_merges_put(struct tok_merges *m, int32_t l, int32_t r, int32_t rank,
		    int32_t id)
{
	uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
	size_t k = mg_fmix64(key) & m->mask;
	while (m->slot[k].key) {
		if (m->slot[k].key == key)
			return;
		k = (k + 1) & m->mask;
	}
	m->slot[k].key = key;
	m->slot[k].rank = rank;
	m->slot[k].id = id;
	m->n++;
}

const struct tok_merge_ent *tok_merges_get(const struct tok_merges *m,
					   int32_t l, int32_t r)
{
	uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
	size_t k = mg_fmix64(key) & m->mask;
	while (m->slot[k].key) {
		if (m->slot[k].key == key)
			return &m->slot[k];
		k = (k + 1) & m->mask;
	}
	return NULL;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid
 * (overlong, surrogate, above U+10FFFF, truncated). */
static int utf8_len(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	int n;
	uint32_t v, min;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2, v = c & 0x1F, min = 0x80;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3, v = c & 0x0F, min = 0x800;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4, v = c & 0x07, min = 0x10000;
	else
		return 0;
	if ((size_t)n > len)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return n;
}

size_t tok_utf8_valid(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	while (i < len) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		uint32_t cp;
		int n = utf8_len(u + i, len - i, &cp);
		if (!n)
			return i;
		i += (size_t)n;
	}
	return len;
}

size_t mg_utf8_valid(const char *s, size_t len)
{
	return tok_utf8_valid(s, len);
}

/* The scan of mg_json_nul_string: per nesting level whether it is an
 * object, the name of the container (the key that introduced it) and the
 * last key seen in it; levels deeper than this go unnamed. */
#define NUL_SCAN_DEPTH 64
struct nul_level {
	const char *name, *last;
	size_t nlen, llen;
	bool obj;
};

size_t mg_json_nul_string(const char *s, size_t len, char *key, size_t keycap)
{
	struct nul_level st[NUL_SCAN_DEPTH];
	int d = -1;
	for (size_t i = 0; i < len; i++) {
		const char c = s[i];
		if (c == '{' || c == '[') {
			d++;
			if (d >= NUL_SCAN_DEPTH)
				continue;
			struct nul_level *l = &st[d], *up = d ? l - 1 : NULL;
			l->obj = c == '{';
			l->last = NULL;
			l->llen = 0;
			l->name = !up ? NULL : up->obj ? up->last : up->name;
			l->nlen = !up ? 0 : up->obj ? up->llen : up->nlen;
			continue;
		}
		if (c == '}' || c == ']') {
			/* never below the top level: a closer too many (text
			 * after the value cJSON parsed, which callers may pass
			 * whole) would make the next opener level -1 */
			if (d >= 0)
				d--;
			continue;
		}
		if (c != '"')
			continue;
		const size_t q = i;
		bool nul = false;
		for (i++; i < len && s[i] != '"'; i++) {
			if (!s[i]) {
				nul = true;
			} else if (s[i] == '\\' && i + 1 < len) {
				nul |= s[i + 1] == 'u' && i + 5 < len &&
				       !memcmp(s + i + 2, "0000", 4);
				i++; /* the escaped character */
			}
		}
		const char *str = s + q + 1;
		const size_t slen = (i < len ? i : len) - q - 1;
		size_t j = i + 1;
		while (j < len && s[j] && strchr(" \t\r\n", s[j]))
			j++;
		const bool in = d >= 0 && d < NUL_SCAN_DEPTH;
		const bool is_key = in && st[d].obj && j < len && s[j] == ':';
		if (is_key) {
			st[d].last = str;
			st[d].llen = slen;
		}
		if (nul) {
			/* the key itself, the key of this value, or that of
			 * the array holding it */
			const char *n = str;
			size_t nl = slen;
			if (!is_key) {
				n = !in		? NULL
				    : st[d].obj ? st[d].last
						: st[d].name;
				nl = !in	 ? 0
				     : st[d].obj ? st[d].llen
						 : st[d].nlen;
			}
			if (keycap) {
				nl = n ? (nl < keycap - 1 ? nl : keycap - 1)
				       : 0;
				memcpy(key, n ? n : "", nl);
				key[nl] = 0;
			}
			return q;
		}
	}
	return len;
}

/* Decode one character of valid UTF-8; returns its byte length. */
int tok_utf8_decode(const char *s, size_t len, uint32_t *cp)
{
	int n = utf8_len((const unsigned char *)s, len, cp);
	if (!n) {
		*cp = 0xFFFD;
		return 1;
	}
	return n;
}

/* Unicode White_Space, what Rust's char::is_whitespace tests (used by
 * added tokens' lstrip/rstrip). */
int tok_is_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
	       c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int tok_arena_reserve(struct tok_scratch *s, size_t more)
{
	if (s->alen + more <= s->acap)
		return 0;
	size_t cap = s->acap ? s->acap : 4096;
	while (cap < s->alen + more)
		cap *= 2;
	char *a = realloc(s->arena, cap);
	if (!a)
		return mg_error("tokenizer: out of memory");
	s->arena = a;
	s->acap = cap;
	return 0;
}

int tok_arena_add(struct tok_scratch *s, const char *p, size_t len, size_t *off)
{
	/* at least a byte: an empty piece (an empty text, a normalizer
	 * leaving nothing) still gets an arena, so arena + off is never
	 * NULL + 0, which is undefined */
	if (tok_arena_reserve(s, len ? len : 1))
		return -1;
	if (len) /* p may be NULL then */
		memcpy(s->arena + s->alen, p, len);
	*off = s->alen;
	s->alen += len;
	return 0;
}

int tok_pieces_push(struct tok_pieces *p, size_t off, size_t len, int first)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 64;
		void *v = realloc(p->v, cap * sizeof *p->v);
		if (!v)
			return mg_error("tokenizer: out of memory");
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = (struct tok_piece){off, len, first};
	return 0;
}

int tok_ids_push(struct mg_ids *ids, int32_t id)
{
	if (ids->n == ids->cap) {
		int64_t cap = ids->cap ? ids->cap * 2 : 64;
		int32_t *v = realloc(ids->v, (size_t)cap * sizeof *v);
		if (!v)
			return mg_error("tokenizer: out of memory");
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

void tok_scratch_free(struct tok_scratch *s)
{
	free(s->arena);
	free(s->p[0].v);
	free(s->p[1].v);
	if (s->md)
		pcre2_match_data_free(s->md);
	if (s->mctx)
		pcre2_match_context_free(s->mctx);
	if (s->jit)
		pcre2_jit_stack_free(s->jit);
	free(s->sym);
	free(s->heap);
	memset(s, 0, sizeof *s);
}
