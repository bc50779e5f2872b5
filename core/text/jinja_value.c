/*
 * jinja_value.c - the chat-template interpreter's values: the arena they
 * live in (one free per render, a byte cap against hostile templates),
 * constructors, Python's truthiness, == and ordering, and the three ways
 * Python turns a value into text that templates reach: str() (what
 * {{ x }} prints), repr() (items of a printed list or dict) and
 * json.dumps (transformers' tojson filter), so renderings match jinja2's
 * byte for byte, floats included.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

struct jj_chunk {
	struct jj_chunk *next;
	size_t used, cap;
	_Alignas(16) unsigned char mem[];
};

void *jj_arena_alloc(struct jj_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct jj_chunk *h = a->head;
	if (h && h->cap - h->used >= n) {
		void *p = h->mem + h->used;
		h->used += n;
		return p;
	}
	size_t cap = n > (64u << 10) ? n : (64u << 10);
	if (a->cap && (a->used + cap > a->cap || cap > a->cap))
		return NULL;
	struct jj_chunk *k = malloc(sizeof *k + cap);
	if (!k)
		return NULL;
	a->used += cap;
	k->cap = cap;
	k->used = n;
	/* a big block goes behind the current chunk, which keeps its room */
	if (h && n > (64u << 10) / 2) {
		k->next = h->next;
		h->next = k;
	} else {
		k->next = h;
		a->head = k;
	}
	return k->mem;
}

void jj_arena_free(struct jj_arena *a)
{
	struct jj_chunk *k = a->head;
	while (k) {
		struct jj_chunk *nx = k->next;
		free(k);
		k = nx;
	}
	a->head = NULL;
	a->used = 0;
}

void jj_fail(struct jj_err *e, int line, const char *fmt, ...)
{
	int o = line > 0 ? snprintf(e->msg, sizeof e->msg, "line %d: ", line)
			 : 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg + o, sizeof e->msg - (size_t)o, fmt, ap);
	va_end(ap);
	longjmp(e->jb, 1);
}

void *jj_alloc(struct jj_ctx *c, int line, size_t n)
{
	void *p = jj_arena_alloc(&c->arena, n);
	if (!p)
		jj_fail(&c->err, line,
			"the template needs more than %llu MiB of memory",
			(unsigned long long)(c->arena.cap >> 20));
	return p;
}

struct jj_val jj_undef(const char *name, size_t n)
{
	struct jj_val v = {.k = JV_UNDEF};
	v.u.s.p = name;
	v.u.s.n = n;
	return v;
}
struct jj_val jj_none(void)
{
	return (struct jj_val){.k = JV_NONE};
}
struct jj_val jj_bool(int b)
{
	struct jj_val v = {.k = JV_BOOL};
	v.u.i = !!b;
	return v;
}
struct jj_val jj_int(int64_t i)
{
	struct jj_val v = {.k = JV_INT};
	v.u.i = i;
	return v;
}
struct jj_val jj_float(double f)
{
	struct jj_val v = {.k = JV_FLOAT};
	v.u.f = f;
	return v;
}
struct jj_val jj_str(const char *p, size_t n)
{
	struct jj_val v = {.k = JV_STR};
	v.u.s.p = n ? p : "";
	v.u.s.n = n;
	return v;
}
struct jj_val jj_strz(const char *z)
{
	return jj_str(z, strlen(z));
}
struct jj_val jj_strdup(struct jj_ctx *c, int line, const char *p, size_t n)
{
	if (!n)
		return jj_str("", 0);
	char *q = jj_alloc(c, line, n);
	memcpy(q, p, n);
	return jj_str(q, n);
}

struct jj_list *jj_list_new(struct jj_ctx *c, int line, size_t n)
{
	struct jj_list *l = jj_alloc(c, line, sizeof *l);
	l->n = n;
	l->tuple = 0;
	if (n > (size_t)1 << 40)
		jj_fail(&c->err, line, "list too long");
	l->v = n ? jj_alloc(c, line, n * sizeof *l->v) : NULL;
	return l;
}

struct jj_dict *jj_dict_new(struct jj_ctx *c, int line, size_t cap)
{
	struct jj_dict *d = jj_alloc(c, line, sizeof *d);
	d->n = 0;
	d->cap = cap < 4 ? 4 : cap;
	d->key = jj_alloc(c, line, d->cap * sizeof *d->key);
	d->val = jj_alloc(c, line, d->cap * sizeof *d->val);
	return d;
}

struct jj_val *jj_dict_get(const struct jj_dict *d, struct jj_val k)
{
	for (size_t i = 0; i < d->n; i++)
		if (jj_eq(d->key[i], k))
			return &d->val[i];
	return NULL;
}

struct jj_val *jj_dict_getz(const struct jj_dict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->key[i].k == JV_STR && d->key[i].u.s.n == n &&
		    !memcmp(d->key[i].u.s.p, key, n))
			return &d->val[i];
	return NULL;
}

void jj_dict_set(struct jj_ctx *c, int line, struct jj_dict *d, struct jj_val k,
		 struct jj_val v)
{
	struct jj_val *o = jj_dict_get(d, k);
	if (o) {
		*o = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap * 2;
		struct jj_val *nk = jj_alloc(c, line, cap * sizeof *nk);
		struct jj_val *nv = jj_alloc(c, line, cap * sizeof *nv);
		memcpy(nk, d->key, d->n * sizeof *nk);
		memcpy(nv, d->val, d->n * sizeof *nv);
		d->key = nk;
		d->val = nv;
		d->cap = cap;
	}
	d->key[d->n] = k;
	d->val[d->n++] = v;
}

int jj_is_num(struct jj_val v)
{
	return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT;
}
double jj_num(struct jj_val v)
{
	return v.k == JV_FLOAT ? v.u.f : (double)v.u.i;
}

int jj_truthy(struct jj_val v)
{
	switch (v.k) {
	case JV_UNDEF:
	case JV_NONE:
		return 0;
	case JV_BOOL:
	case JV_INT:
		return v.u.i != 0;
	case JV_FLOAT:
		return v.u.f != 0;
	case JV_STR:
		return v.u.s.n != 0;
	case JV_LIST:
		return v.u.l->n != 0;
	case JV_DICT:
		return v.u.d->n != 0;
	default:
		return 1;
	}
}

int jj_eq(struct jj_val a, struct jj_val b)
{
	if (jj_is_num(a) && jj_is_num(b)) {
		if (a.k != JV_FLOAT && b.k != JV_FLOAT)
			return a.u.i == b.u.i;
		return jj_num(a) == jj_num(b);
	}
	if (a.k != b.k)
		return 0;
	switch (a.k) {
	case JV_UNDEF:
	case JV_NONE:
		return 1;
	case JV_STR:
		return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
	case JV_LIST:
		if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
			return 0;
		for (size_t i = 0; i < a.u.l->n; i++)
			if (!jj_eq(a.u.l->v[i], b.u.l->v[i]))
				return 0;
		return 1;
	case JV_DICT:
		if (a.u.d->n != b.u.d->n)
			return 0;
		for (size_t i = 0; i < a.u.d->n; i++) {
			struct jj_val *o = jj_dict_get(b.u.d, a.u.d->key[i]);
			if (!o || !jj_eq(a.u.d->val[i], *o))
				return 0;
		}
		return 1;
	case JV_NS:
		return a.u.d == b.u.d;
	case JV_MACRO:
		return a.u.m.node == b.u.m.node;
	case JV_FUNC:
		return a.u.i == b.u.i;
	case JV_LOOP:
		return a.u.lp == b.u.lp;
	}
	return 0;
}

const char *jj_type_name(struct jj_val v)
{
	static const char *const n[] = {"Undefined", "NoneType", "bool",
					"int",	     "float",	 "str",
					"list",	     "dict",	 "Namespace",
					"Macro",     "function", "LoopContext"};
	if (v.k == JV_LIST && v.u.l->tuple)
		return "tuple";
	return n[v.k];
}

int jj_cmp(struct jj_ctx *c, int line, struct jj_val a, struct jj_val b)
{
	if (jj_is_num(a) && jj_is_num(b)) {
		if (a.k != JV_FLOAT && b.k != JV_FLOAT)
			return (a.u.i > b.u.i) - (a.u.i < b.u.i);
		double x = jj_num(a), y = jj_num(b);
		return (x > y) - (x < y);
	}
	if (a.k == JV_STR && b.k == JV_STR) {
		/* UTF-8 byte order is code point order */
		size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
		int r = memcmp(a.u.s.p, b.u.s.p, n);
		if (r)
			return r < 0 ? -1 : 1;
		return (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
	}
	if (a.k == JV_LIST && b.k == JV_LIST) {
		size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
		for (size_t i = 0; i < n; i++) {
			if (jj_eq(a.u.l->v[i], b.u.l->v[i]))
				continue;
			return jj_cmp(c, line, a.u.l->v[i], b.u.l->v[i]);
		}
		return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
	}
	jj_fail(&c->err, line,
		"'<' not supported between instances of '%s' and '%s'",
		jj_type_name(a), jj_type_name(b));
}

/* ---- strings ---- */

void jj_buf_put(struct jj_ctx *c, int line, struct jj_buf *b, const char *s,
		size_t n)
{
	if (b->n + n > JJ_MAX_OUTPUT)
		jj_fail(&c->err, line, "the rendering is longer than %u MiB",
			JJ_MAX_OUTPUT >> 20);
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 256;
		while (cap < b->n + n)
			cap *= 2;
		char *p = jj_alloc(c, line, cap);
		if (b->n)
			memcpy(p, b->p, b->n);
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
}

void jj_buf_putz(struct jj_ctx *c, int line, struct jj_buf *b, const char *z)
{
	jj_buf_put(c, line, b, z, strlen(z));
}

struct jj_val jj_buf_val(struct jj_buf *b)
{
	return jj_str(b->p, b->n);
}

size_t jj_u8len(const char *p, size_t n)
{
	unsigned char c = (unsigned char)p[0];
	size_t l = c < 0x80	  ? 1
		   : c >> 5 == 6  ? 2
		   : c >> 4 == 14 ? 3
		   : c >> 3 == 30 ? 4
				  : 1;
	if (l > n)
		return 1;
	for (size_t i = 1; i < l; i++)
		if (((unsigned char)p[i] & 0xC0) != 0x80)
			return 1;
	return l;
}

uint32_t jj_u8cp(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	switch (jj_u8len(p, n)) {
	case 2:
		return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
	case 3:
		return (uint32_t)(u[0] & 0x0F) << 12 |
		       (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
	case 4:
		return (uint32_t)(u[0] & 0x07) << 18 |
		       (uint32_t)(u[1] & 0x3F) << 12 |
		       (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
	default:
		return u[0];
	}
}

size_t jj_u8count(const char *p, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i += jj_u8len(p + i, n - i))
		k++;
	return k;
}

/* Python's str.isspace: Unicode White_Space plus the separators
 * U+001C..U+001F. */
int jj_u8space(const char *p, size_t n, size_t *len)
{
	size_t l = jj_u8len(p, n);
	uint32_t c = jj_u8cp(p, n);
	*len = l;
	return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
	       c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
	       c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

/* Python's repr(float): the shortest digits that read back, in
 * positional form for exponents -4..15 and scientific outside. */
void jj_float_repr(double f, char *out, size_t cap)
{
	if (isnan(f)) {
		snprintf(out, cap, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, cap, f < 0 ? "-inf" : "inf");
		return;
	}
	char tmp[40];
	int p;
	for (p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	/* tmp: [-]d.ddde[+-]XX */
	char digits[24];
	int nd = 0, neg = tmp[0] == '-';
	const char *q = tmp + neg;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9')
			digits[nd++] = *q;
	int e = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	char *o = out;
	size_t left = cap;
#define PUT(...)                                                               \
	do {                                                                   \
		int w_ = snprintf(o, left, __VA_ARGS__);                       \
		if (w_ > 0 && (size_t)w_ < left)                               \
			o += w_, left -= (size_t)w_;                           \
	} while (0)
	if (neg)
		PUT("-");
	if (e < -4 || e >= 16) {
		PUT("%c", digits[0]);
		if (nd > 1)
			PUT(".%s", digits + 1);
		PUT("e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	} else if (e < 0) {
		PUT("0.");
		for (int i = 0; i < -e - 1; i++)
			PUT("0");
		PUT("%s", digits);
	} else {
		for (int i = 0; i <= e; i++)
			PUT("%c", i < nd ? digits[i] : '0');
		PUT(".");
		if (nd > e + 1)
			PUT("%s", digits + e + 1);
		else
			PUT("0");
	}
#undef PUT
}

static void put_int(struct jj_ctx *c, int line, struct jj_buf *b, int64_t i)
{
	char t[32];
	snprintf(t, sizeof t, "%lld", (long long)i);
	jj_buf_putz(c, line, b, t);
}

static void put_float(struct jj_ctx *c, int line, struct jj_buf *b, double f)
{
	char t[40];
	jj_float_repr(f, t, sizeof t);
	jj_buf_putz(c, line, b, t);
}

/* Python's repr(str): single quotes unless the text holds ' and no ". */
static void repr_str(struct jj_ctx *c, int line, struct jj_buf *b,
		     const char *s, size_t n)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	jj_buf_put(c, line, b, &q, 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char t[8];
		if (ch == (unsigned char)q || ch == '\\') {
			t[0] = '\\', t[1] = (char)ch;
			jj_buf_put(c, line, b, t, 2);
		} else if (ch == '\n') {
			jj_buf_putz(c, line, b, "\\n");
		} else if (ch == '\r') {
			jj_buf_putz(c, line, b, "\\r");
		} else if (ch == '\t') {
			jj_buf_putz(c, line, b, "\\t");
		} else if (ch < 0x20 || ch == 0x7F) {
			snprintf(t, sizeof t, "\\x%02x", ch);
			jj_buf_putz(c, line, b, t);
		} else {
			jj_buf_put(c, line, b, s + i, 1);
		}
	}
	jj_buf_put(c, line, b, &q, 1);
}

static void repr_seq(struct jj_ctx *c, int line, struct jj_buf *b,
		     struct jj_val v)
{
	if (v.k == JV_LIST) {
		const struct jj_list *l = v.u.l;
		jj_buf_putz(c, line, b, l->tuple ? "(" : "[");
		for (size_t i = 0; i < l->n; i++) {
			if (i)
				jj_buf_putz(c, line, b, ", ");
			jj_repr_of(c, line, b, l->v[i]);
		}
		if (l->tuple && l->n == 1)
			jj_buf_putz(c, line, b, ",");
		jj_buf_putz(c, line, b, l->tuple ? ")" : "]");
		return;
	}
	const struct jj_dict *d = v.u.d;
	jj_buf_putz(c, line, b, "{");
	for (size_t i = 0; i < d->n; i++) {
		if (i)
			jj_buf_putz(c, line, b, ", ");
		jj_repr_of(c, line, b, d->key[i]);
		jj_buf_putz(c, line, b, ": ");
		jj_repr_of(c, line, b, d->val[i]);
	}
	jj_buf_putz(c, line, b, "}");
}

void jj_repr_of(struct jj_ctx *c, int line, struct jj_buf *b, struct jj_val v)
{
	if (v.k == JV_STR)
		repr_str(c, line, b, v.u.s.p, v.u.s.n);
	else
		jj_str_of(c, line, b, v);
}

void jj_str_of(struct jj_ctx *c, int line, struct jj_buf *b, struct jj_val v)
{
	switch (v.k) {
	case JV_UNDEF:
		return;
	case JV_NONE:
		jj_buf_putz(c, line, b, "None");
		return;
	case JV_BOOL:
		jj_buf_putz(c, line, b, v.u.i ? "True" : "False");
		return;
	case JV_INT:
		put_int(c, line, b, v.u.i);
		return;
	case JV_FLOAT:
		put_float(c, line, b, v.u.f);
		return;
	case JV_STR:
		jj_buf_put(c, line, b, v.u.s.p, v.u.s.n);
		return;
	case JV_LIST:
	case JV_DICT:
		repr_seq(c, line, b, v);
		return;
	case JV_NS: {
		struct jj_val d = {.k = JV_DICT};
		d.u.d = v.u.d;
		jj_buf_putz(c, line, b, "<Namespace ");
		repr_seq(c, line, b, d);
		jj_buf_putz(c, line, b, ">");
		return;
	}
	case JV_MACRO:
		jj_buf_putz(c, line, b, "<Macro '");
		jj_buf_put(c, line, b, v.u.m.node->s, v.u.m.node->sn);
		jj_buf_putz(c, line, b, "'>");
		return;
	case JV_FUNC:
		jj_buf_putz(c, line, b, "<function>");
		return;
	case JV_LOOP:
		jj_buf_putz(c, line, b, "<LoopContext>");
		return;
	}
}

struct jj_val jj_to_str(struct jj_ctx *c, int line, struct jj_val v)
{
	if (v.k == JV_STR)
		return v;
	struct jj_buf b = {0};
	jj_str_of(c, line, &b, v);
	return jj_buf_val(&b);
}

/* json.dumps's string form: ", \, and control characters escaped;
 * everything else as is, or as \uXXXX with ensure_ascii. */
static void json_str(struct jj_ctx *c, int line, struct jj_buf *b,
		     const char *s, size_t n, int ascii)
{
	jj_buf_putz(c, line, b, "\"");
	for (size_t i = 0; i < n;) {
		unsigned char ch = (unsigned char)s[i];
		char t[16];
		if (ch >= 0x80 && ascii) {
			size_t l = jj_u8len(s + i, n - i);
			uint32_t cp = jj_u8cp(s + i, n - i);
			if (cp >= 0x10000) {
				cp -= 0x10000;
				snprintf(t, sizeof t, "\\u%04x\\u%04x",
					 0xD800 + (cp >> 10),
					 0xDC00 + (cp & 0x3FF));
			} else {
				snprintf(t, sizeof t, "\\u%04x", cp);
			}
			jj_buf_putz(c, line, b, t);
			i += l;
			continue;
		}
		i++;
		switch (ch) {
		case '"':
			jj_buf_putz(c, line, b, "\\\"");
			break;
		case '\\':
			jj_buf_putz(c, line, b, "\\\\");
			break;
		case '\n':
			jj_buf_putz(c, line, b, "\\n");
			break;
		case '\r':
			jj_buf_putz(c, line, b, "\\r");
			break;
		case '\t':
			jj_buf_putz(c, line, b, "\\t");
			break;
		case '\b':
			jj_buf_putz(c, line, b, "\\b");
			break;
		case '\f':
			jj_buf_putz(c, line, b, "\\f");
			break;
		default:
			if (ch < 0x20 || (ch == 0x7F && ascii)) {
				snprintf(t, sizeof t, "\\u%04x", ch);
				jj_buf_putz(c, line, b, t);
			} else {
				jj_buf_put(c, line, b, (const char *)&ch, 1);
			}
		}
	}
	jj_buf_putz(c, line, b, "\"");
}

static void json_newline(struct jj_ctx *c, int line, struct jj_buf *b,
			 const struct jj_json_opts *o, int level)
{
	jj_buf_putz(c, line, b, "\n");
	for (int i = 0; i < level; i++)
		jj_buf_put(c, line, b, o->indent, o->indent_n);
}

/* A dict key as json.dumps writes it: str as is; numbers, bools and
 * None as their JSON text in quotes. */
static void json_key(struct jj_ctx *c, int line, struct jj_buf *b,
		     struct jj_val k, const struct jj_json_opts *o)
{
	if (k.k == JV_STR) {
		json_str(c, line, b, k.u.s.p, k.u.s.n, o->ensure_ascii);
		return;
	}
	struct jj_buf t = {0};
	if (k.k == JV_NONE)
		jj_buf_putz(c, line, &t, "null");
	else if (k.k == JV_BOOL)
		jj_buf_putz(c, line, &t, k.u.i ? "true" : "false");
	else if (k.k == JV_INT || k.k == JV_FLOAT)
		jj_str_of(c, line, &t, k);
	else
		jj_fail(&c->err, line,
			"tojson: keys must be str, int, float, bool or None, "
			"not %s",
			jj_type_name(k));
	json_str(c, line, b, t.p, t.n, 0);
}

void jj_json_dump(struct jj_ctx *c, int line, struct jj_buf *b, struct jj_val v,
		  const struct jj_json_opts *o, int level)
{
	if (level > JJ_MAX_DEPTH)
		jj_fail(&c->err, line, "tojson: nested too deeply");
	const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
	size_t isn = o->item_sep ? o->item_sep_n : strlen(isep);
	const char *ksep = o->key_sep ? o->key_sep : ": ";
	size_t ksn = o->key_sep ? o->key_sep_n : 2;
	switch (v.k) {
	case JV_NONE:
		jj_buf_putz(c, line, b, "null");
		return;
	case JV_BOOL:
		jj_buf_putz(c, line, b, v.u.i ? "true" : "false");
		return;
	case JV_INT:
		put_int(c, line, b, v.u.i);
		return;
	case JV_FLOAT:
		if (isnan(v.u.f))
			jj_buf_putz(c, line, b, "NaN");
		else if (isinf(v.u.f))
			jj_buf_putz(c, line, b,
				    v.u.f < 0 ? "-Infinity" : "Infinity");
		else
			put_float(c, line, b, v.u.f);
		return;
	case JV_STR:
		json_str(c, line, b, v.u.s.p, v.u.s.n, o->ensure_ascii);
		return;
	case JV_LIST: {
		const struct jj_list *l = v.u.l;
		if (!l->n) {
			jj_buf_putz(c, line, b, "[]");
			return;
		}
		jj_buf_putz(c, line, b, "[");
		for (size_t i = 0; i < l->n; i++) {
			if (i)
				jj_buf_put(c, line, b, isep, isn);
			if (o->indent)
				json_newline(c, line, b, o, level + 1);
			jj_json_dump(c, line, b, l->v[i], o, level + 1);
		}
		if (o->indent)
			json_newline(c, line, b, o, level);
		jj_buf_putz(c, line, b, "]");
		return;
	}
	case JV_DICT: {
		const struct jj_dict *d = v.u.d;
		if (!d->n) {
			jj_buf_putz(c, line, b, "{}");
			return;
		}
		size_t *ord = jj_alloc(c, line, d->n * sizeof *ord);
		for (size_t i = 0; i < d->n; i++)
			ord[i] = i;
		if (o->sort_keys) /* insertion sort: dicts here are small */
			for (size_t i = 1; i < d->n; i++)
				for (size_t j = i;
				     j > 0 && jj_cmp(c, line, d->key[ord[j]],
						     d->key[ord[j - 1]]) < 0;
				     j--) {
					size_t t = ord[j];
					ord[j] = ord[j - 1];
					ord[j - 1] = t;
				}
		jj_buf_putz(c, line, b, "{");
		for (size_t i = 0; i < d->n; i++) {
			if (i)
				jj_buf_put(c, line, b, isep, isn);
			if (o->indent)
				json_newline(c, line, b, o, level + 1);
			json_key(c, line, b, d->key[ord[i]], o);
			jj_buf_put(c, line, b, ksep, ksn);
			jj_json_dump(c, line, b, d->val[ord[i]], o, level + 1);
		}
		if (o->indent)
			json_newline(c, line, b, o, level);
		jj_buf_putz(c, line, b, "}");
		return;
	}
	default:
		jj_fail(&c->err, line,
			"tojson: Object of type %s is not JSON serializable",
			jj_type_name(v));
	}
}
