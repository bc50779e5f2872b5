/*
 * jinja_eval.c - renders a parsed chat template: statements (output,
 * if, for with loop.* and break/continue, set, namespace attributes,
 * macros, filter and generation blocks), expressions with Python's
 * semantics (and/or return an operand, / is true division, % and // floor,
 * str + str, list + list, chained comparisons), jinja2's attribute and
 * item lookup (a missing key is Undefined; only using an Undefined fails),
 * and the filters, tests and str/dict/list methods real templates call.
 *
 * Scoping follows jinja2: each loop iteration and each macro call gets
 * its own frame, so a `set` inside a loop does not outlive the iteration
 * (hence namespace()); `if` opens none. Hostile templates are bounded:
 * nesting depth, macro recursion, total loop iterations, range() sizes,
 * output bytes and arena bytes all have caps that end the render with an
 * error.
 *
 * Approximations, all documented in include/mg/chat.h: case mapping
 * (upper, lower, title, capitalize) is ASCII-only; integers are 64-bit
 * (overflow is an error, not a big integer); an attribute of an Undefined
 * fails as jinja2's default Undefined does, but the messages differ.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };
enum { F_RANGE = 1, F_NAMESPACE, F_RAISE, F_STRFTIME, F_DICT };

struct jj_frame {
	struct jj_frame *parent;
	struct jj_dict *vars;
};

struct rs {
	struct jj_ctx *c;
	struct jj_buf *out, *main;
	struct jj_spans *spans;
	struct jj_frame *root, *f; /* the globals, the current frame */
	int depth, calls, ctl;
	long long steps;
};

struct args {
	int n;
	struct jj_val *v;
	const char **kw;
	size_t *kwn;
};

#define FAIL(line, ...) jj_fail(&r->c->err, line, __VA_ARGS__)

static struct jj_val eval(struct rs *r, const struct jj_node *n);
static void exec(struct rs *r, const struct jj_node *n, struct jj_frame *f);
static struct jj_val apply_filter(struct rs *r, int line, const char *name,
				  size_t nn, struct jj_val v,
				  const struct args *a);
static int apply_test(struct rs *r, int line, const char *name, size_t nn,
		      struct jj_val v, const struct args *a);

static int streq(const char *p, size_t n, const char *z)
{
	return strlen(z) == n && !memcmp(p, z, n);
}

static void step(struct rs *r, int line)
{
	if (++r->steps > JJ_MAX_STEPS)
		FAIL(line, "the template runs more than %lld loop iterations",
		     JJ_MAX_STEPS);
}

static struct jj_frame *frame_new(struct rs *r, int line,
				  struct jj_frame *parent)
{
	struct jj_frame *f = jj_alloc(r->c, line, sizeof *f);
	f->parent = parent;
	f->vars = jj_dict_new(r->c, line, 4);
	return f;
}

static void frame_set(struct rs *r, int line, struct jj_frame *f, const char *s,
		      size_t n, struct jj_val v)
{
	jj_dict_set(r->c, line, f->vars, jj_str(s, n), v);
}

static struct jj_val lookup(struct jj_frame *f, const char *s, size_t n)
{
	for (; f; f = f->parent) {
		struct jj_val *v = jj_dict_getz(f->vars, s, n);
		if (v)
			return *v;
	}
	static const struct {
		const char *name;
		int fn;
	} g[] = {{"range", F_RANGE},
		 {"namespace", F_NAMESPACE},
		 {"raise_exception", F_RAISE},
		 {"strftime_now", F_STRFTIME},
		 {"dict", F_DICT}};
	for (size_t i = 0; i < sizeof g / sizeof *g; i++)
		if (streq(s, n, g[i].name)) {
			struct jj_val v = {.k = JV_FUNC};
			v.u.i = g[i].fn;
			return v;
		}
	return jj_undef(s, n);
}

JJ_NORETURN static void undefined_error(struct rs *r, int line, struct jj_val v)
{
	if (v.u.s.n)
		FAIL(line, "'%.*s' is undefined", (int)v.u.s.n, v.u.s.p);
	FAIL(line, "an undefined value is used");
}

/* ---- strings by code point ---- */

static int ascii_only(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] >= 0x80)
			return 0;
	return 1;
}

/* Byte offsets of each code point (n+1 entries, the last = len). */
static size_t *cp_offsets(struct rs *r, int line, const char *p, size_t n,
			  size_t *count)
{
	size_t k = jj_u8count(p, n), j = 0;
	size_t *o = jj_alloc(r->c, line, (k + 1) * sizeof *o);
	for (size_t i = 0; i < n; i += jj_u8len(p + i, n - i))
		o[j++] = i;
	o[j] = n;
	*count = k;
	return o;
}

static char up(char ch)
{
	return ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch;
}
static char low(char ch)
{
	return ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
}
static int alpha(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' str.title,
 * 'T' jinja's title filter. ASCII letters only. */
static struct jj_val recase(struct rs *r, int line, struct jj_val s, int mode)
{
	char *o = jj_alloc(r->c, line, s.u.s.n + 1);
	const char *p = s.u.s.p;
	int prev_letter = 0, word_start = 1;
	for (size_t i = 0; i < s.u.s.n; i++) {
		char ch = p[i];
		switch (mode) {
		case 'u':
			o[i] = up(ch);
			break;
		case 'l':
			o[i] = low(ch);
			break;
		case 'c':
			o[i] = i ? low(ch) : up(ch);
			break;
		case 't':
			o[i] = prev_letter ? low(ch) : up(ch);
			prev_letter = alpha(ch) || (unsigned char)ch >= 0x80;
			break;
		default: {
			/* words start after runs of [-\s({[<] */
			size_t l;
			int sep = ch == '-' || ch == '(' || ch == '{' ||
				  ch == '[' || ch == '<' ||
				  jj_u8space(p + i, s.u.s.n - i, &l);
			o[i] = sep ? ch : word_start ? up(ch) : low(ch);
			if (!sep && ((unsigned char)ch & 0xC0) == 0x80)
				o[i] = ch;
			word_start = sep;
		}
		}
	}
	return jj_str(o, s.u.s.n);
}

/* Python's str.strip family: which 1 left, 2 right, 3 both; chars NULL
 * for whitespace. */
static struct jj_val pystrip(struct jj_val s, const struct jj_val *chars,
			     int which)
{
	const char *p = s.u.s.p;
	size_t b = 0, e = s.u.s.n, l;
	if (chars && chars->k == JV_STR) {
		const char *cs = chars->u.s.p;
		size_t cn = chars->u.s.n;
#define IN_SET(q, ql) (cn && (ql) <= cn && memmem(cs, cn, (q), (ql)) != NULL)
		while (which & 1 && b < e) {
			l = jj_u8len(p + b, e - b);
			if (!IN_SET(p + b, l))
				break;
			b += l;
		}
		while (which & 2 && e > b) {
			size_t st = e - 1;
			while (st > b && ((unsigned char)p[st] & 0xC0) == 0x80)
				st--;
			if (!IN_SET(p + st, e - st))
				break;
			e = st;
		}
#undef IN_SET
		return jj_str(p + b, e - b);
	}
	while (which & 1 && b < e && jj_u8space(p + b, e - b, &l))
		b += l;
	while (which & 2 && e > b) {
		size_t st = e - 1;
		while (st > b && ((unsigned char)p[st] & 0xC0) == 0x80 &&
		       e - st < 4)
			st--;
		if (!jj_u8space(p + st, e - st, &l) || st + l != e)
			break;
		e = st;
	}
	return jj_str(p + b, e - b);
}

static struct jj_val replace(struct rs *r, int line, struct jj_val s,
			     struct jj_val old, struct jj_val nw, int64_t count)
{
	if (old.k != JV_STR || nw.k != JV_STR)
		FAIL(line, "replace() arguments must be str");
	struct jj_buf b = {0};
	const char *p = s.u.s.p;
	size_t n = s.u.s.n, i = 0;
	int64_t done = 0;
	if (!old.u.s.n) { /* between every character */
		while (count < 0 || done < count) {
			jj_buf_put(r->c, line, &b, nw.u.s.p, nw.u.s.n);
			done++;
			if (i >= n)
				break;
			size_t l = jj_u8len(p + i, n - i);
			jj_buf_put(r->c, line, &b, p + i, l);
			i += l;
		}
		jj_buf_put(r->c, line, &b, p + i, n - i);
		return jj_buf_val(&b);
	}
	while (i <= n && (count < 0 || done < count)) {
		const char *h = memmem(p + i, n - i, old.u.s.p, old.u.s.n);
		if (!h)
			break;
		jj_buf_put(r->c, line, &b, p + i, (size_t)(h - (p + i)));
		jj_buf_put(r->c, line, &b, nw.u.s.p, nw.u.s.n);
		i = (size_t)(h - p) + old.u.s.n;
		done++;
	}
	jj_buf_put(r->c, line, &b, p + i, n - i);
	return jj_buf_val(&b);
}

static struct jj_list *list_grow(struct rs *r, int line, struct jj_list *l,
				 size_t *cap, struct jj_val v)
{
	if (l->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		struct jj_val *nv = jj_alloc(r->c, line, nc * sizeof *nv);
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof *nv);
		l->v = nv;
		*cap = nc;
	}
	l->v[l->n++] = v;
	return l;
}

/* Python's str.split(sep, maxsplit). */
static struct jj_val split(struct rs *r, int line, struct jj_val s,
			   const struct jj_val *sep, int64_t maxsplit)
{
	struct jj_list *l = jj_list_new(r->c, line, 0);
	size_t cap = 0, n = s.u.s.n, i = 0, w;
	const char *p = s.u.s.p;
	if (!sep || sep->k == JV_NONE) {
		for (;;) {
			while (i < n && jj_u8space(p + i, n - i, &w))
				i += w;
			if (i >= n)
				break;
			if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
				struct jj_val rest =
					pystrip(jj_str(p + i, n - i), NULL, 2);
				list_grow(r, line, l, &cap, rest);
				break;
			}
			size_t b = i;
			while (i < n && !jj_u8space(p + i, n - i, &w))
				i += jj_u8len(p + i, n - i);
			list_grow(r, line, l, &cap, jj_str(p + b, i - b));
		}
	} else {
		if (sep->k != JV_STR || !sep->u.s.n)
			FAIL(line, "split(): empty or non-str separator");
		for (;;) {
			const char *h =
				(maxsplit < 0 || (int64_t)l->n < maxsplit)
					? memmem(p + i, n - i, sep->u.s.p,
						 sep->u.s.n)
					: NULL;
			if (!h) {
				list_grow(r, line, l, &cap,
					  jj_str(p + i, n - i));
				break;
			}
			list_grow(r, line, l, &cap,
				  jj_str(p + i, (size_t)(h - (p + i))));
			i = (size_t)(h - p) + sep->u.s.n;
			step(r, line);
		}
	}
	struct jj_val v = {.k = JV_LIST};
	v.u.l = l;
	return v;
}

/* Python's str.splitlines(keepends=False). */
static struct jj_list *splitlines(struct rs *r, int line, const char *p,
				  size_t n)
{
	struct jj_list *l = jj_list_new(r->c, line, 0);
	size_t cap = 0, b = 0, i = 0;
	while (i < n) {
		size_t len = jj_u8len(p + i, n - i);
		uint32_t cp = jj_u8cp(p + i, n - i);
		int brk = cp == '\n' || cp == '\r' || cp == 0x0B ||
			  cp == 0x0C || cp == 0x1C || cp == 0x1D ||
			  cp == 0x1E || cp == 0x85 || cp == 0x2028 ||
			  cp == 0x2029;
		if (!brk) {
			i += len;
			continue;
		}
		list_grow(r, line, l, &cap, jj_str(p + b, i - b));
		i += len;
		if (cp == '\r' && i < n && p[i] == '\n')
			i++;
		b = i;
	}
	if (b < n)
		list_grow(r, line, l, &cap, jj_str(p + b, n - b));
	return l;
}

/* ---- iteration, lookup ---- */

static struct jj_val listv(struct jj_list *l)
{
	struct jj_val v = {.k = JV_LIST};
	v.u.l = l;
	return v;
}

/* What `for x in v` walks: list items, dict keys, string characters. */
static struct jj_list *iter_items(struct rs *r, int line, struct jj_val v)
{
	switch (v.k) {
	case JV_LIST:
		return v.u.l;
	case JV_UNDEF:
		return jj_list_new(r->c, line, 0);
	case JV_DICT: {
		struct jj_list *l = jj_list_new(r->c, line, v.u.d->n);
		for (size_t i = 0; i < v.u.d->n; i++)
			l->v[i] = v.u.d->key[i];
		return l;
	}
	case JV_STR: {
		size_t k;
		size_t *o = cp_offsets(r, line, v.u.s.p, v.u.s.n, &k);
		struct jj_list *l = jj_list_new(r->c, line, k);
		for (size_t i = 0; i < k; i++)
			l->v[i] = jj_str(v.u.s.p + o[i], o[i + 1] - o[i]);
		return l;
	}
	default:
		FAIL(line, "'%s' object is not iterable", jj_type_name(v));
	}
}

static struct jj_val loop_attr(struct rs *r, int line, struct jj_loop *lp,
			       const char *s, size_t n)
{
	int64_t len = (int64_t)lp->items->n, i = lp->index0;
	if (streq(s, n, "index"))
		return jj_int(i + 1);
	if (streq(s, n, "index0"))
		return jj_int(i);
	if (streq(s, n, "revindex"))
		return jj_int(len - i);
	if (streq(s, n, "revindex0"))
		return jj_int(len - i - 1);
	if (streq(s, n, "first"))
		return jj_bool(i == 0);
	if (streq(s, n, "last"))
		return jj_bool(i == len - 1);
	if (streq(s, n, "length"))
		return jj_int(len);
	if (streq(s, n, "depth"))
		return jj_int(lp->depth);
	if (streq(s, n, "depth0"))
		return jj_int(lp->depth - 1);
	if (streq(s, n, "previtem"))
		return i > 0 ? lp->items->v[i - 1] : jj_undef("previtem", 8);
	if (streq(s, n, "nextitem"))
		return i + 1 < len ? lp->items->v[i + 1]
				   : jj_undef("nextitem", 8);
	(void)r, (void)line;
	return jj_undef(s, n);
}

/* jinja2's getattr/getitem: a key of a dict or namespace, loop
 * attributes; anything missing is Undefined; only Undefined itself
 * fails. */
static struct jj_val get_key(struct rs *r, int line, struct jj_val o,
			     struct jj_val k)
{
	switch (o.k) {
	case JV_UNDEF:
		undefined_error(r, line, o);
	case JV_DICT:
	case JV_NS: {
		struct jj_val *v = jj_dict_get(o.u.d, k);
		return v ? *v
			 : jj_undef(k.k == JV_STR ? k.u.s.p : "",
				    k.k == JV_STR ? k.u.s.n : 0);
	}
	case JV_LOOP:
		if (k.k == JV_STR)
			return loop_attr(r, line, o.u.lp, k.u.s.p, k.u.s.n);
		break;
	case JV_LIST:
	case JV_STR:
		if (k.k == JV_INT || k.k == JV_BOOL) {
			int64_t i = k.u.i;
			if (o.k == JV_LIST) {
				int64_t n = (int64_t)o.u.l->n;
				if (i < 0)
					i += n;
				if (i >= 0 && i < n)
					return o.u.l->v[i];
				break;
			}
			if (ascii_only(o.u.s.p, o.u.s.n)) {
				int64_t n = (int64_t)o.u.s.n;
				if (i < 0)
					i += n;
				if (i >= 0 && i < n)
					return jj_str(o.u.s.p + i, 1);
				break;
			}
			size_t cnt;
			size_t *off =
				cp_offsets(r, line, o.u.s.p, o.u.s.n, &cnt);
			if (i < 0)
				i += (int64_t)cnt;
			if (i >= 0 && i < (int64_t)cnt)
				return jj_str(o.u.s.p + off[i],
					      off[i + 1] - off[i]);
		}
		break;
	default:
		break;
	}
	return jj_undef(k.k == JV_STR ? k.u.s.p : "",
			k.k == JV_STR ? k.u.s.n : 0);
}

static int64_t slice_idx(struct rs *r, int line, struct jj_val v, int64_t len,
			 int64_t step, int is_start)
{
	if (v.k == JV_NONE || v.k == JV_UNDEF)
		return step > 0 ? (is_start ? 0 : len)
				: (is_start ? len - 1 : -1);
	if (v.k != JV_INT && v.k != JV_BOOL)
		FAIL(line, "slice indices must be integers or None");
	int64_t i = v.u.i;
	if (i < 0) {
		i += len;
		if (i < 0)
			i = step > 0 ? 0 : -1;
	} else if (i >= len) {
		i = step > 0 ? len : len - 1;
	}
	return i;
}

static struct jj_val do_slice(struct rs *r, int line, struct jj_val o,
			      struct jj_val a, struct jj_val b,
			      struct jj_val st)
{
	if (o.k == JV_UNDEF)
		undefined_error(r, line, o);
	if (o.k != JV_LIST && o.k != JV_STR)
		FAIL(line, "'%s' object is not subscriptable", jj_type_name(o));
	int64_t step = 1;
	if (st.k == JV_INT || st.k == JV_BOOL)
		step = st.u.i;
	else if (st.k != JV_NONE && st.k != JV_UNDEF)
		FAIL(line, "slice indices must be integers or None");
	if (!step)
		FAIL(line, "slice step cannot be zero");
	size_t cnt;
	size_t *off = NULL;
	if (o.k == JV_LIST)
		cnt = o.u.l->n;
	else if (ascii_only(o.u.s.p, o.u.s.n))
		cnt = o.u.s.n;
	else
		off = cp_offsets(r, line, o.u.s.p, o.u.s.n, &cnt);
	int64_t len = (int64_t)cnt;
	int64_t i0 = slice_idx(r, line, a, len, step, 1),
		i1 = slice_idx(r, line, b, len, step, 0);
	int64_t m = step > 0 ? (i1 > i0 ? (i1 - i0 + step - 1) / step : 0)
			     : (i0 > i1 ? (i0 - i1 - step - 1) / -step : 0);
	if (o.k == JV_LIST) {
		struct jj_list *l = jj_list_new(r->c, line, (size_t)m);
		l->tuple = o.u.l->tuple;
		for (int64_t j = 0; j < m; j++)
			l->v[j] = o.u.l->v[i0 + j * step];
		return listv(l);
	}
	if (step == 1) {
		size_t bs = off ? off[i0] : (size_t)i0,
		       be = off ? off[i0 + m] : (size_t)(i0 + m);
		return jj_str(o.u.s.p + bs, be - bs);
	}
	struct jj_buf buf = {0};
	for (int64_t j = 0; j < m; j++) {
		int64_t k = i0 + j * step;
		size_t bs = off ? off[k] : (size_t)k,
		       be = off ? off[k + 1] : (size_t)k + 1;
		jj_buf_put(r->c, line, &buf, o.u.s.p + bs, be - bs);
	}
	return jj_buf_val(&buf);
}

/* Dotted attribute paths of map/selectattr/sort: "a.b", "0". */
static struct jj_val attr_path(struct rs *r, int line, struct jj_val v,
			       struct jj_val path)
{
	if (path.k == JV_INT)
		return get_key(r, line, v, path);
	if (path.k != JV_STR)
		FAIL(line, "attribute must be a string");
	const char *p = path.u.s.p, *e = p + path.u.s.n;
	while (p <= e) {
		const char *d = memchr(p, '.', (size_t)(e - p));
		if (!d)
			d = e;
		struct jj_val k = jj_str(p, (size_t)(d - p));
		int isnum = d > p;
		for (const char *q = p; q < d; q++)
			isnum &= *q >= '0' && *q <= '9';
		if (isnum)
			k = jj_int(strtoll(p, NULL, 10));
		if (v.k == JV_UNDEF)
			return v;
		v = get_key(r, line, v, k);
		p = d + 1;
	}
	return v;
}

/* ---- arithmetic ---- */

static struct jj_val arith(struct rs *r, int line, int op, struct jj_val a,
			   struct jj_val b)
{
	if (a.k == JV_UNDEF)
		undefined_error(r, line, a);
	if (b.k == JV_UNDEF)
		undefined_error(r, line, b);
	if (op == '+' && a.k == JV_STR && b.k == JV_STR) {
		struct jj_buf buf = {0};
		jj_buf_put(r->c, line, &buf, a.u.s.p, a.u.s.n);
		jj_buf_put(r->c, line, &buf, b.u.s.p, b.u.s.n);
		return jj_buf_val(&buf);
	}
	if (op == '+' && a.k == JV_LIST && b.k == JV_LIST &&
	    a.u.l->tuple == b.u.l->tuple) {
		struct jj_list *l =
			jj_list_new(r->c, line, a.u.l->n + b.u.l->n);
		l->tuple = a.u.l->tuple;
		if (a.u.l->n)
			memcpy(l->v, a.u.l->v, a.u.l->n * sizeof *l->v);
		if (b.u.l->n)
			memcpy(l->v + a.u.l->n, b.u.l->v,
			       b.u.l->n * sizeof *l->v);
		return listv(l);
	}
	if (op == '*' && (a.k == JV_INT || a.k == JV_BOOL) &&
	    (b.k == JV_STR || b.k == JV_LIST)) {
		struct jj_val t = a;
		a = b, b = t;
	}
	if (op == '*' && (a.k == JV_STR || a.k == JV_LIST) &&
	    (b.k == JV_INT || b.k == JV_BOOL)) {
		int64_t k = b.u.i < 0 ? 0 : b.u.i;
		size_t unit = a.k == JV_STR ? a.u.s.n : a.u.l->n;
		if (unit && (uint64_t)k > JJ_MAX_OUTPUT / unit)
			FAIL(line, "repetition too large");
		if (a.k == JV_STR) {
			struct jj_buf buf = {0};
			for (int64_t i = 0; i < k; i++)
				jj_buf_put(r->c, line, &buf, a.u.s.p, a.u.s.n);
			return jj_buf_val(&buf);
		}
		struct jj_list *l = jj_list_new(r->c, line, unit * (size_t)k);
		l->tuple = a.u.l->tuple;
		for (int64_t i = 0; i < k; i++)
			if (unit)
				memcpy(l->v + (size_t)i * unit, a.u.l->v,
				       unit * sizeof *l->v);
		return listv(l);
	}
	if (op == '%' && a.k == JV_STR)
		FAIL(line, "printf-style '%%' formatting is not supported");
	if (!jj_is_num(a) || !jj_is_num(b))
		FAIL(line, "unsupported operand type(s) for %s: '%s' and '%s'",
		     op == 'F'	 ? "//"
		     : op == 'P' ? "**"
				 : (char[2]){(char)op, 0},
		     jj_type_name(a), jj_type_name(b));
	if (a.k != JV_FLOAT && b.k != JV_FLOAT && op != '/') {
		int64_t x = a.u.i, y = b.u.i, z;
		switch (op) {
		case '+':
			if (__builtin_add_overflow(x, y, &z))
				break;
			return jj_int(z);
		case '-':
			if (__builtin_sub_overflow(x, y, &z))
				break;
			return jj_int(z);
		case '*':
			if (__builtin_mul_overflow(x, y, &z))
				break;
			return jj_int(z);
		case 'F':
		case '%':
			if (!y)
				FAIL(line, "integer division or modulo by "
					   "zero");
			if (x == INT64_MIN && y == -1)
				break;
			z = x / y;
			if ((x % y != 0) && ((x < 0) != (y < 0)))
				z--;
			return jj_int(op == 'F' ? z : x - z * y);
		case 'P':
			if (y < 0)
				return jj_float(pow((double)x, (double)y));
			z = 1;
			for (int64_t i = 0; i < y; i++)
				if (__builtin_mul_overflow(z, x, &z))
					FAIL(line, "integer overflow");
			return jj_int(z);
		}
		FAIL(line, "integer overflow");
	}
	double x = jj_num(a), y = jj_num(b);
	switch (op) {
	case '+':
		return jj_float(x + y);
	case '-':
		return jj_float(x - y);
	case '*':
		return jj_float(x * y);
	case '/':
		if (y == 0)
			FAIL(line, "division by zero");
		return jj_float(x / y);
	case 'F':
		if (y == 0)
			FAIL(line, "float floor division by zero");
		return jj_float(floor(x / y));
	case '%': {
		if (y == 0)
			FAIL(line, "float modulo");
		double m = fmod(x, y);
		if (m != 0 && ((m < 0) != (y < 0)))
			m += y;
		return jj_float(m);
	}
	default:
		return jj_float(pow(x, y));
	}
}

static int contains(struct rs *r, int line, struct jj_val hay,
		    struct jj_val needle)
{
	switch (hay.k) {
	case JV_STR:
		if (needle.k != JV_STR)
			FAIL(line,
			     "'in <string>' requires string as left "
			     "operand, not %s",
			     jj_type_name(needle));
		return !needle.u.s.n ||
		       memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p,
			      needle.u.s.n) != NULL;
	case JV_LIST:
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jj_eq(hay.u.l->v[i], needle))
				return 1;
		return 0;
	case JV_DICT:
	case JV_NS:
		return jj_dict_get(hay.u.d, needle) != NULL;
	case JV_UNDEF:
		return 0;
	default:
		FAIL(line, "argument of type '%s' is not iterable",
		     jj_type_name(hay));
	}
}

/* ---- arguments ---- */

static void eval_args(struct rs *r, const struct jj_node *n, struct args *a)
{
	a->n = n->nkids;
	a->kw = n->kw;
	a->kwn = n->kwn;
	a->v = n->nkids ? jj_alloc(r->c, n->line,
				   (size_t)n->nkids * sizeof *a->v)
			: NULL;
	for (int i = 0; i < n->nkids; i++)
		a->v[i] = eval(r, n->kids[i]);
}

/* The pos-th positional argument or the one named name. */
static int arg(const struct args *a, int pos, const char *name,
	       struct jj_val *out)
{
	int k = 0;
	for (int i = 0; i < a->n; i++) {
		if (!a->kw[i]) {
			if (k++ == pos) {
				*out = a->v[i];
				return 1;
			}
		} else if (name && streq(a->kw[i], a->kwn[i], name)) {
			*out = a->v[i];
			return 1;
		}
	}
	return 0;
}

static int npos(const struct args *a)
{
	int k = 0;
	for (int i = 0; i < a->n; i++)
		k += !a->kw[i];
	return k;
}

static int64_t int_arg(struct rs *r, int line, const struct args *a, int pos,
		       const char *name, int64_t dflt)
{
	struct jj_val v;
	if (!arg(a, pos, name, &v) || v.k == JV_NONE)
		return dflt;
	if (v.k != JV_INT && v.k != JV_BOOL)
		FAIL(line, "argument '%s' must be an integer",
		     name ? name : "?");
	return v.u.i;
}

static struct jj_val str_arg(struct rs *r, int line, const struct args *a,
			     int pos, const char *name)
{
	struct jj_val v;
	if (!arg(a, pos, name, &v))
		FAIL(line, "missing argument '%s'", name);
	if (v.k != JV_STR)
		FAIL(line, "argument '%s' must be a string, not %s", name,
		     jj_type_name(v));
	return v;
}

/* ---- calls ---- */

static struct jj_val call_macro(struct rs *r, int line, struct jj_val m,
				const struct args *a)
{
	const struct jj_node *mn = m.u.m.node;
	if (++r->calls > JJ_MAX_CALL_DEPTH)
		FAIL(line, "macro calls nest deeper than %d",
		     JJ_MAX_CALL_DEPTH);
	step(r, line);
	struct jj_frame *f = frame_new(r, line, m.u.m.fr);
	if (npos(a) > mn->nkids)
		FAIL(line, "macro '%.*s' takes not more than %d argument(s)",
		     (int)mn->sn, mn->s, mn->nkids);
	for (int i = 0; i < mn->nkids; i++) {
		const struct jj_node *pn = mn->kids[i];
		struct jj_val v;
		char nm[128];
		snprintf(nm, sizeof nm, "%.*s", (int)pn->sn, pn->s);
		if (!arg(a, i, nm, &v)) {
			if (pn->a) {
				struct jj_frame *sv = r->f;
				r->f = f;
				v = eval(r, pn->a);
				r->f = sv;
			} else {
				v = jj_undef(pn->s, pn->sn);
			}
		}
		frame_set(r, line, f, pn->s, pn->sn, v);
	}
	struct jj_buf buf = {0}, *sv = r->out;
	r->out = &buf;
	exec(r, mn->c, f);
	r->out = sv;
	r->ctl = CTL_NONE;
	r->calls--;
	return jj_buf_val(&buf);
}

static struct jj_val call_func(struct rs *r, int line, int fn,
			       const struct args *a)
{
	switch (fn) {
	case F_RANGE: {
		int np = npos(a);
		int64_t b = 0, e, s = 1;
		if (np == 1) {
			e = int_arg(r, line, a, 0, NULL, 0);
		} else if (np >= 2) {
			b = int_arg(r, line, a, 0, NULL, 0);
			e = int_arg(r, line, a, 1, NULL, 0);
			s = int_arg(r, line, a, 2, NULL, 1);
		} else {
			FAIL(line, "range expected at least 1 argument");
		}
		if (!s)
			FAIL(line, "range() arg 3 must not be zero");
		int64_t m = s > 0 ? (e > b ? (e - b + s - 1) / s : 0)
				  : (b > e ? (b - e - s - 1) / -s : 0);
		if (m > 1000000)
			FAIL(line, "range() of more than 1000000 items");
		struct jj_list *l = jj_list_new(r->c, line, (size_t)m);
		for (int64_t i = 0; i < m; i++)
			l->v[i] = jj_int(b + i * s);
		return listv(l);
	}
	case F_NAMESPACE:
	case F_DICT: {
		struct jj_val v = {.k = fn == F_DICT ? JV_DICT : JV_NS};
		v.u.d = jj_dict_new(r->c, line, (size_t)a->n);
		for (int i = 0; i < a->n; i++) {
			if (a->kw[i]) {
				jj_dict_set(r->c, line, v.u.d,
					    jj_str(a->kw[i], a->kwn[i]),
					    a->v[i]);
			} else if (a->v[i].k == JV_DICT) {
				for (size_t j = 0; j < a->v[i].u.d->n; j++)
					jj_dict_set(r->c, line, v.u.d,
						    a->v[i].u.d->key[j],
						    a->v[i].u.d->val[j]);
			} else {
				FAIL(line,
				     "%s() takes keyword arguments or "
				     "a dict",
				     fn == F_DICT ? "dict" : "namespace");
			}
		}
		return v;
	}
	case F_RAISE: {
		struct jj_val m;
		if (!arg(a, 0, NULL, &m))
			m = jj_strz("");
		m = jj_to_str(r->c, line, m);
		FAIL(line, "%.*s", (int)(m.u.s.n > 400 ? 400 : m.u.s.n),
		     m.u.s.p);
	}
	case F_STRFTIME: {
		struct jj_val f = str_arg(r, line, a, 0, "format");
		char fmt[256], out[512];
		snprintf(fmt, sizeof fmt, "%.*s", (int)f.u.s.n, f.u.s.p);
		time_t now = time(NULL);
		struct tm tm;
		localtime_r(&now, &tm);
		size_t k = strftime(out, sizeof out, fmt, &tm);
		return jj_strdup(r->c, line, out, k);
	}
	}
	FAIL(line, "not callable");
}

/* Python's str.format with {} {0} {name} fields (specs ignored). */
static struct jj_val str_format(struct rs *r, int line, struct jj_val s,
				const struct args *a)
{
	struct jj_buf b = {0};
	const char *p = s.u.s.p, *e = p + s.u.s.n;
	int autoi = 0;
	while (p < e) {
		if (*p == '{' && p + 1 < e && p[1] == '{') {
			jj_buf_putz(r->c, line, &b, "{");
			p += 2;
			continue;
		}
		if (*p == '}' && p + 1 < e && p[1] == '}') {
			jj_buf_putz(r->c, line, &b, "}");
			p += 2;
			continue;
		}
		if (*p != '{') {
			jj_buf_put(r->c, line, &b, p++, 1);
			continue;
		}
		const char *q = memchr(p, '}', (size_t)(e - p));
		if (!q)
			FAIL(line, "format(): single '{' encountered");
		const char *f = p + 1, *fe = q;
		const char *colon = memchr(f, ':', (size_t)(fe - f));
		if (colon)
			fe = colon;
		struct jj_val v;
		int ok;
		if (f == fe) {
			ok = arg(a, autoi++, NULL, &v);
		} else if (*f >= '0' && *f <= '9') {
			ok = arg(a, (int)strtol(f, NULL, 10), NULL, &v);
		} else {
			char nm[64];
			snprintf(nm, sizeof nm, "%.*s", (int)(fe - f), f);
			ok = arg(a, -1, nm, &v);
		}
		if (!ok)
			FAIL(line, "format(): no argument for '%.*s'",
			     (int)(q - p + 1), p);
		jj_str_of(r->c, line, &b, v);
		p = q + 1;
	}
	return jj_buf_val(&b);
}

static int starts_ends(struct rs *r, int line, struct jj_val s, struct jj_val x,
		       int ends)
{
	if (x.k == JV_LIST && x.u.l->tuple) {
		for (size_t i = 0; i < x.u.l->n; i++)
			if (starts_ends(r, line, s, x.u.l->v[i], ends))
				return 1;
		return 0;
	}
	if (x.k != JV_STR)
		FAIL(line, "%s first arg must be str or a tuple of str",
		     ends ? "endswith" : "startswith");
	if (x.u.s.n > s.u.s.n)
		return 0;
	return !memcmp(s.u.s.p + (ends ? s.u.s.n - x.u.s.n : 0), x.u.s.p,
		       x.u.s.n);
}

static struct jj_val method(struct rs *r, int line, struct jj_val o,
			    const char *m, size_t mn, const struct args *a)
{
	struct jj_val x, y;
	if (o.k == JV_UNDEF)
		undefined_error(r, line, o);
	if (o.k == JV_STR) {
		if (streq(m, mn, "strip") || streq(m, mn, "lstrip") ||
		    streq(m, mn, "rstrip")) {
			int w = m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3;
			int has = arg(a, 0, NULL, &x) && x.k != JV_NONE;
			return pystrip(o, has ? &x : NULL, w);
		}
		if (streq(m, mn, "split")) {
			int has = arg(a, 0, "sep", &x);
			return split(r, line, o, has ? &x : NULL,
				     int_arg(r, line, a, 1, "maxsplit", -1));
		}
		if (streq(m, mn, "startswith") || streq(m, mn, "endswith")) {
			if (!arg(a, 0, NULL, &x))
				FAIL(line, "%.*s() takes an argument", (int)mn,
				     m);
			return jj_bool(starts_ends(r, line, o, x, m[0] == 'e'));
		}
		if (streq(m, mn, "upper"))
			return recase(r, line, o, 'u');
		if (streq(m, mn, "lower"))
			return recase(r, line, o, 'l');
		if (streq(m, mn, "title"))
			return recase(r, line, o, 't');
		if (streq(m, mn, "capitalize"))
			return recase(r, line, o, 'c');
		if (streq(m, mn, "replace"))
			return replace(r, line, o,
				       str_arg(r, line, a, 0, "old"),
				       str_arg(r, line, a, 1, "new"),
				       int_arg(r, line, a, 2, "count", -1));
		if (streq(m, mn, "format"))
			return str_format(r, line, o, a);
		if (streq(m, mn, "find") || streq(m, mn, "count")) {
			struct jj_val sub = str_arg(r, line, a, 0, "sub");
			if (m[0] == 'c') {
				int64_t k = 0;
				if (!sub.u.s.n)
					return jj_int(
						(int64_t)jj_u8count(o.u.s.p,
								    o.u.s.n) +
						1);
				for (const char *p = o.u.s.p, *h;
				     (h = memmem(p,
						 o.u.s.n -
							 (size_t)(p - o.u.s.p),
						 sub.u.s.p, sub.u.s.n));
				     p = h + sub.u.s.n)
					k++;
				return jj_int(k);
			}
			const char *h =
				memmem(o.u.s.p, o.u.s.n, sub.u.s.p, sub.u.s.n);
			return jj_int(
				h ? (int64_t)jj_u8count(o.u.s.p,
							(size_t)(h - o.u.s.p))
				  : -1);
		}
		if (streq(m, mn, "join")) {
			if (!arg(a, 0, NULL, &x))
				FAIL(line, "join() takes an argument");
			struct jj_list *l = iter_items(r, line, x);
			struct jj_buf b = {0};
			for (size_t i = 0; i < l->n; i++) {
				if (i)
					jj_buf_put(r->c, line, &b, o.u.s.p,
						   o.u.s.n);
				if (l->v[i].k != JV_STR)
					FAIL(line,
					     "join(): sequence item "
					     "%zu: expected str",
					     i);
				jj_buf_put(r->c, line, &b, l->v[i].u.s.p,
					   l->v[i].u.s.n);
			}
			return jj_buf_val(&b);
		}
		if (streq(m, mn, "splitlines"))
			return listv(splitlines(r, line, o.u.s.p, o.u.s.n));
		if (streq(m, mn, "isdigit") || streq(m, mn, "isalpha") ||
		    streq(m, mn, "isalnum") || streq(m, mn, "isspace") ||
		    streq(m, mn, "islower") || streq(m, mn, "isupper")) {
			int ok = o.u.s.n > 0, cased = 0;
			for (size_t i = 0; i < o.u.s.n; i++) {
				char ch = o.u.s.p[i];
				int d = ch >= '0' && ch <= '9', l = alpha(ch);
				size_t w;
				switch (m[2]) {
				case 'd':
					ok &= d;
					break;
				case 'a':
					ok &= mn == 7 ? l : (l || d);
					break;
				case 's':
					ok &= jj_u8space(o.u.s.p + i,
							 o.u.s.n - i, &w);
					break;
				case 'l':
					ok &= !(ch >= 'A' && ch <= 'Z');
					cased |= l;
					break;
				default:
					ok &= !(ch >= 'a' && ch <= 'z');
					cased |= l;
				}
			}
			if (m[2] == 'l' || m[2] == 'u')
				ok &= cased;
			return jj_bool(ok);
		}
	} else if (o.k == JV_DICT || o.k == JV_NS) {
		const struct jj_dict *d = o.u.d;
		if (streq(m, mn, "get")) {
			if (!arg(a, 0, NULL, &x))
				FAIL(line, "get() takes an argument");
			struct jj_val *v = jj_dict_get(d, x);
			if (v)
				return *v;
			return arg(a, 1, NULL, &y) ? y : jj_none();
		}
		if (streq(m, mn, "items") || streq(m, mn, "keys") ||
		    streq(m, mn, "values")) {
			struct jj_list *l = jj_list_new(r->c, line, d->n);
			for (size_t i = 0; i < d->n; i++) {
				if (m[0] == 'k') {
					l->v[i] = d->key[i];
				} else if (m[0] == 'v') {
					l->v[i] = d->val[i];
				} else {
					struct jj_list *t =
						jj_list_new(r->c, line, 2);
					t->tuple = 1;
					t->v[0] = d->key[i];
					t->v[1] = d->val[i];
					l->v[i] = listv(t);
				}
			}
			return listv(l);
		}
		/* a callable stored in a dict: d.f(x) */
		struct jj_val *v = jj_dict_getz(d, m, mn);
		if (v && v->k == JV_MACRO)
			return call_macro(r, line, *v, a);
	} else if (o.k == JV_LIST) {
		if (streq(m, mn, "index") || streq(m, mn, "count")) {
			if (!arg(a, 0, NULL, &x))
				FAIL(line, "%.*s() takes an argument", (int)mn,
				     m);
			int64_t k = 0;
			for (size_t i = 0; i < o.u.l->n; i++)
				if (jj_eq(o.u.l->v[i], x)) {
					if (m[0] == 'i')
						return jj_int((int64_t)i);
					k++;
				}
			if (m[0] == 'i')
				FAIL(line, "list.index(x): x not in list");
			return jj_int(k);
		}
	} else if (o.k == JV_LOOP && streq(m, mn, "cycle")) {
		if (!a->n)
			FAIL(line, "no items for cycling given");
		return a->v[o.u.lp->index0 % a->n];
	}
	FAIL(line,
	     "'%s' object has no callable attribute '%.*s' (or the "
	     "sandbox forbids it)",
	     jj_type_name(o), (int)mn, m);
}

/* ---- filters ---- */

static struct jj_val html_escape(struct rs *r, int line, struct jj_val s)
{
	struct jj_buf b = {0};
	for (size_t i = 0; i < s.u.s.n; i++) {
		char ch = s.u.s.p[i];
		const char *e = ch == '&'    ? "&amp;"
				: ch == '<'  ? "&lt;"
				: ch == '>'  ? "&gt;"
				: ch == '"'  ? "&#34;"
				: ch == '\'' ? "&#39;"
					     : NULL;
		if (e)
			jj_buf_putz(r->c, line, &b, e);
		else
			jj_buf_put(r->c, line, &b, &ch, 1);
	}
	return jj_buf_val(&b);
}

static struct jj_val indent(struct rs *r, int line, struct jj_val s,
			    const struct args *a)
{
	struct jj_val w, t;
	struct jj_buf ind = {0}, b = {0};
	if (!arg(a, 0, "width", &w))
		w = jj_int(4);
	if (w.k == JV_STR) {
		jj_buf_put(r->c, line, &ind, w.u.s.p, w.u.s.n);
	} else if (w.k == JV_INT) {
		for (int64_t i = 0; i < w.u.i && i < 4096; i++)
			jj_buf_putz(r->c, line, &ind, " ");
	} else {
		FAIL(line, "indent width must be an int or a str");
	}
	int first = arg(a, 1, "first", &t) && jj_truthy(t);
	int blank = arg(a, 2, "blank", &t) && jj_truthy(t);
	struct jj_buf src = {0};
	jj_buf_put(r->c, line, &src, s.u.s.p, s.u.s.n);
	jj_buf_putz(r->c, line, &src, "\n");
	struct jj_list *ls = splitlines(r, line, src.p, src.n);
	for (size_t i = 0; i < ls->n; i++) {
		struct jj_val l = ls->v[i];
		if (i)
			jj_buf_putz(r->c, line, &b, "\n");
		if ((i || first) && (blank || l.u.s.n || (!i && first)))
			jj_buf_put(r->c, line, &b, ind.p, ind.n);
		jj_buf_put(r->c, line, &b, l.u.s.p, l.u.s.n);
	}
	return jj_buf_val(&b);
}

static struct jj_val tojson(struct rs *r, int line, struct jj_val v,
			    const struct args *a)
{
	struct jj_json_opts o = {0};
	struct jj_val x;
	struct jj_buf ind = {0}, b = {0};
	if (arg(a, 0, "ensure_ascii", &x))
		o.ensure_ascii = jj_truthy(x);
	if (arg(a, 1, "indent", &x) && x.k != JV_NONE) {
		if (x.k == JV_STR) {
			jj_buf_put(r->c, line, &ind, x.u.s.p, x.u.s.n);
		} else if (x.k == JV_INT) {
			for (int64_t i = 0; i < x.u.i && i < 4096; i++)
				jj_buf_putz(r->c, line, &ind, " ");
		} else {
			FAIL(line, "tojson: indent must be an int or a str");
		}
		o.indent = ind.p ? ind.p : "";
		o.indent_n = ind.n;
	}
	if (arg(a, 2, "separators", &x) && x.k != JV_NONE) {
		if (x.k != JV_LIST || x.u.l->n != 2 ||
		    x.u.l->v[0].k != JV_STR || x.u.l->v[1].k != JV_STR)
			FAIL(line, "tojson: separators must be two strings");
		o.item_sep = x.u.l->v[0].u.s.p;
		o.item_sep_n = x.u.l->v[0].u.s.n;
		o.key_sep = x.u.l->v[1].u.s.p;
		o.key_sep_n = x.u.l->v[1].u.s.n;
	}
	if (arg(a, 3, "sort_keys", &x))
		o.sort_keys = jj_truthy(x);
	jj_json_dump(r->c, line, &b, v, &o, 0);
	return jj_buf_val(&b);
}

/* Stable merge sort of l by key (attribute path or the item itself). */
static void sort_list(struct rs *r, int line, struct jj_val *v, size_t n,
		      const struct jj_val *attr, int ci, int rev)
{
	if (n < 2)
		return;
	struct jj_val *key = jj_alloc(r->c, line, n * sizeof *key),
		      *tv = jj_alloc(r->c, line, n * sizeof *tv),
		      *tk = jj_alloc(r->c, line, n * sizeof *tk);
	for (size_t i = 0; i < n; i++) {
		key[i] = attr ? attr_path(r, line, v[i], *attr) : v[i];
		if (ci && key[i].k == JV_STR)
			key[i] = recase(r, line, key[i], 'l');
	}
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n,
			       hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi) {
				int c = jj_cmp(r->c, line, key[j], key[i]);
				int take_j = rev ? c > 0 : c < 0;
				size_t s = take_j ? j++ : i++;
				tv[k] = v[s], tk[k++] = key[s];
			}
			while (i < mid)
				tv[k] = v[i], tk[k++] = key[i++];
			while (j < hi)
				tv[k] = v[j], tk[k++] = key[j++];
		}
		memcpy(v, tv, n * sizeof *v);
		memcpy(key, tk, n * sizeof *key);
	}
}

static struct jj_val list_copy(struct rs *r, int line, struct jj_list *s)
{
	struct jj_list *l = jj_list_new(r->c, line, s->n);
	if (s->n)
		memcpy(l->v, s->v, s->n * sizeof *l->v);
	return listv(l);
}

/* select/reject/selectattr/rejectattr: keep items whose test (or
 * truthiness) is `keep`. */
static struct jj_val select_items(struct rs *r, int line, struct jj_val v,
				  const struct args *a, int byattr, int keep)
{
	struct jj_list *src = iter_items(r, line, v);
	struct jj_list *l = jj_list_new(r->c, line, 0);
	size_t cap = 0;
	int skip = byattr ? 1 : 0;
	struct jj_val attr = {0}, test;
	if (byattr && !arg(a, 0, NULL, &attr))
		FAIL(line, "selectattr/rejectattr need an attribute");
	int has_test = arg(a, skip, NULL, &test);
	if (has_test && test.k != JV_STR)
		FAIL(line, "the test name must be a string");
	struct args ta = {0};
	if (has_test && a->n > skip + 1) {
		ta.n = a->n - skip - 1;
		ta.v = a->v + skip + 1;
		ta.kw = a->kw + skip + 1;
		ta.kwn = a->kwn + skip + 1;
	}
	for (size_t i = 0; i < src->n; i++) {
		struct jj_val x = src->v[i];
		if (byattr)
			x = attr_path(r, line, x, attr);
		int t = has_test ? apply_test(r, line, test.u.s.p, test.u.s.n,
					      x, &ta)
				 : jj_truthy(x);
		if (!t == !keep)
			list_grow(r, line, l, &cap, src->v[i]);
	}
	return listv(l);
}

static struct jj_val apply_filter(struct rs *r, int line, const char *f,
				  size_t fn, struct jj_val v,
				  const struct args *a)
{
	struct jj_val x;
#define IS(name) streq(f, fn, name)
	if (IS("default") || IS("d")) {
		struct jj_val b;
		int boolean = arg(a, 1, "boolean", &b) && jj_truthy(b);
		if (v.k == JV_UNDEF || (boolean && !jj_truthy(v)))
			return arg(a, 0, "default_value", &x) ? x : jj_strz("");
		return v;
	}
	if (IS("safe"))
		return v;
	if (IS("string"))
		return jj_to_str(r->c, line, v);
	if (IS("tojson"))
		return tojson(r, line, v, a);
	if (IS("length") || IS("count")) {
		switch (v.k) {
		case JV_UNDEF:
			return jj_int(0);
		case JV_STR:
			return jj_int((int64_t)jj_u8count(v.u.s.p, v.u.s.n));
		case JV_LIST:
			return jj_int((int64_t)v.u.l->n);
		case JV_DICT:
			return jj_int((int64_t)v.u.d->n);
		default:
			FAIL(line, "object of type '%s' has no len()",
			     jj_type_name(v));
		}
	}
	if (IS("list"))
		return list_copy(r, line, iter_items(r, line, v));
	if (IS("first") || IS("last")) {
		struct jj_list *l = iter_items(r, line, v);
		if (!l->n)
			return jj_undef("", 0);
		return l->v[f[0] == 'f' ? 0 : l->n - 1];
	}
	if (IS("items")) {
		if (v.k == JV_UNDEF)
			return listv(jj_list_new(r->c, line, 0));
		if (v.k != JV_DICT)
			FAIL(line, "can only get item pairs from a mapping");
		return method(r, line, v, "items", 5, a);
	}
	if (IS("map")) {
		struct jj_list *src = iter_items(r, line, v);
		struct jj_list *l = jj_list_new(r->c, line, src->n);
		struct jj_val attr, name, dflt;
		int has_attr = arg(a, -1, "attribute", &attr);
		int has_d = arg(a, -1, "default", &dflt);
		if (!has_attr && !arg(a, 0, NULL, &name))
			FAIL(line, "map needs a filter name or attribute=");
		if (!has_attr && name.k != JV_STR)
			FAIL(line, "map's filter name must be a string");
		struct args fa = {0};
		if (!has_attr && a->n > 1) {
			fa.n = a->n - 1;
			fa.v = a->v + 1;
			fa.kw = a->kw + 1;
			fa.kwn = a->kwn + 1;
		}
		for (size_t i = 0; i < src->n; i++) {
			if (has_attr) {
				l->v[i] = attr_path(r, line, src->v[i], attr);
				if (has_d && l->v[i].k == JV_UNDEF)
					l->v[i] = dflt;
			} else {
				l->v[i] = apply_filter(r, line, name.u.s.p,
						       name.u.s.n, src->v[i],
						       &fa);
			}
		}
		return listv(l);
	}
	if (IS("selectattr") || IS("rejectattr"))
		return select_items(r, line, v, a, 1, f[0] == 's');
	if (IS("select") || IS("reject"))
		return select_items(r, line, v, a, 0, f[0] == 's');
	if (IS("join")) {
		struct jj_list *src = iter_items(r, line, v);
		struct jj_val sep = jj_strz(""), attr;
		arg(a, 0, "d", &sep);
		sep = jj_to_str(r->c, line, sep);
		int has_attr = arg(a, 1, "attribute", &attr);
		struct jj_buf b = {0};
		for (size_t i = 0; i < src->n; i++) {
			if (i)
				jj_buf_put(r->c, line, &b, sep.u.s.p,
					   sep.u.s.n);
			struct jj_val it = src->v[i];
			if (has_attr)
				it = attr_path(r, line, it, attr);
			jj_str_of(r->c, line, &b, it);
		}
		return jj_buf_val(&b);
	}
	if (IS("dictsort")) {
		if (v.k != JV_DICT)
			FAIL(line, "dictsort expects a mapping");
		struct jj_val cs, by, rv;
		int ci = !(arg(a, 0, "case_sensitive", &cs) && jj_truthy(cs));
		int byval = arg(a, 1, "by", &by) && by.k == JV_STR &&
			    streq(by.u.s.p, by.u.s.n, "value");
		int rev = arg(a, 2, "reverse", &rv) && jj_truthy(rv);
		struct jj_val items = method(r, line, v, "items", 5, a);
		struct jj_val key = jj_int(byval ? 1 : 0);
		sort_list(r, line, items.u.l->v, items.u.l->n, &key, ci, rev);
		return items;
	}
	if (IS("sort")) {
		struct jj_val rv, cs, attr;
		int rev = arg(a, 0, "reverse", &rv) && jj_truthy(rv);
		int ci = !(arg(a, 1, "case_sensitive", &cs) && jj_truthy(cs));
		int has_attr = arg(a, 2, "attribute", &attr);
		struct jj_val l = list_copy(r, line, iter_items(r, line, v));
		sort_list(r, line, l.u.l->v, l.u.l->n, has_attr ? &attr : NULL,
			  ci, rev);
		return l;
	}
	if (IS("unique")) {
		struct jj_list *src = iter_items(r, line, v);
		struct jj_list *l = jj_list_new(r->c, line, 0);
		size_t cap = 0;
		for (size_t i = 0; i < src->n; i++) {
			int dup = 0;
			for (size_t j = 0; j < l->n && !dup; j++)
				dup = jj_eq(l->v[j], src->v[i]);
			if (!dup)
				list_grow(r, line, l, &cap, src->v[i]);
		}
		return listv(l);
	}
	if (IS("reverse")) {
		if (v.k == JV_STR) {
			struct jj_val s = jj_int(-1), none = jj_none();
			return do_slice(r, line, v, none, none, s);
		}
		struct jj_list *src = iter_items(r, line, v);
		struct jj_list *l = jj_list_new(r->c, line, src->n);
		for (size_t i = 0; i < src->n; i++)
			l->v[i] = src->v[src->n - 1 - i];
		return listv(l);
	}
	if (IS("sum")) {
		struct jj_list *src = iter_items(r, line, v);
		struct jj_val attr, acc = jj_int(0);
		int has_attr = arg(a, 0, "attribute", &attr);
		arg(a, 1, "start", &acc);
		for (size_t i = 0; i < src->n; i++)
			acc = arith(
				r, line, '+', acc,
				has_attr ? attr_path(r, line, src->v[i], attr)
					 : src->v[i]);
		return acc;
	}
	if (IS("min") || IS("max")) {
		struct jj_list *src = iter_items(r, line, v);
		if (!src->n)
			return jj_undef("", 0);
		struct jj_val best = src->v[0];
		for (size_t i = 1; i < src->n; i++) {
			int c = jj_cmp(r->c, line, src->v[i], best);
			if (f[1] == 'i' ? c < 0 : c > 0)
				best = src->v[i];
		}
		return best;
	}
	if (IS("abs")) {
		if (v.k == JV_FLOAT)
			return jj_float(fabs(v.u.f));
		if (v.k == JV_INT || v.k == JV_BOOL)
			return jj_int(v.u.i < 0 ? -v.u.i : v.u.i);
		FAIL(line, "bad operand type for abs(): '%s'", jj_type_name(v));
	}
	if (IS("round")) {
		int64_t prec = int_arg(r, line, a, 0, "precision", 0);
		struct jj_val m;
		const char *meth = "common";
		size_t ml = 6;
		if (arg(a, 1, "method", &m) && m.k == JV_STR)
			meth = m.u.s.p, ml = m.u.s.n;
		if (!jj_is_num(v))
			FAIL(line, "round expects a number");
		double x = jj_num(v), p = pow(10, (double)prec);
		if (streq(meth, ml, "floor"))
			x = floor(x * p) / p;
		else if (streq(meth, ml, "ceil"))
			x = ceil(x * p) / p;
		else
			x = nearbyint(x * p) / p;
		return v.k == JV_FLOAT ? jj_float(x) : jj_float(x);
	}
	if (IS("int")) {
		int64_t d = int_arg(r, line, a, 0, "default", 0);
		if (v.k == JV_INT || v.k == JV_BOOL)
			return jj_int(v.u.i);
		if (v.k == JV_FLOAT)
			return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18
				       ? jj_int((int64_t)v.u.f)
				       : jj_int(d);
		if (v.k == JV_STR) {
			char t[64], *e;
			struct jj_val s = pystrip(v, NULL, 3);
			if (!s.u.s.n || s.u.s.n >= sizeof t)
				return jj_int(d);
			memcpy(t, s.u.s.p, s.u.s.n);
			t[s.u.s.n] = 0;
			long long k = strtoll(t, &e, 10);
			if (!*e)
				return jj_int(k);
			double fl = strtod(t, &e);
			if (!*e && isfinite(fl) && fabs(fl) < 9.2e18)
				return jj_int((int64_t)fl);
		}
		return jj_int(d);
	}
	if (IS("float")) {
		struct jj_val d = jj_float(0);
		arg(a, 0, "default", &d);
		if (jj_is_num(v))
			return jj_float(jj_num(v));
		if (v.k == JV_STR) {
			char t[64], *e;
			struct jj_val s = pystrip(v, NULL, 3);
			if (s.u.s.n && s.u.s.n < sizeof t) {
				memcpy(t, s.u.s.p, s.u.s.n);
				t[s.u.s.n] = 0;
				double fl = strtod(t, &e);
				if (!*e)
					return jj_float(fl);
			}
		}
		return d;
	}
	if (IS("attr")) {
		if (!arg(a, 0, "name", &x))
			FAIL(line, "attr needs a name");
		/* getattr only: a dict's keys are not attributes */
		if (v.k == JV_DICT)
			return jj_undef("", 0);
		return get_key(r, line, v, x);
	}
	/* the string filters */
	struct jj_val s = jj_to_str(r->c, line, v);
	if (IS("trim")) {
		int has = arg(a, 0, "chars", &x) && x.k != JV_NONE;
		return pystrip(s, has ? &x : NULL, 3);
	}
	if (IS("upper"))
		return recase(r, line, s, 'u');
	if (IS("lower"))
		return recase(r, line, s, 'l');
	if (IS("capitalize"))
		return recase(r, line, s, 'c');
	if (IS("title"))
		return recase(r, line, s, 'T');
	if (IS("replace"))
		return replace(r, line, s, str_arg(r, line, a, 0, "old"),
			       str_arg(r, line, a, 1, "new"),
			       int_arg(r, line, a, 2, "count", -1));
	if (IS("indent"))
		return indent(r, line, s, a);
	if (IS("escape") || IS("e"))
		return html_escape(r, line, s);
	if (IS("wordcount")) {
		struct jj_val w = split(r, line, s, NULL, -1);
		return jj_int((int64_t)w.u.l->n);
	}
#undef IS
	FAIL(line, "no filter named '%.*s'", (int)fn, f);
}

/* ---- tests ---- */

static int apply_test(struct rs *r, int line, const char *t, size_t tn,
		      struct jj_val v, const struct args *a)
{
	struct jj_val x;
#define IS(name) streq(t, tn, name)
	int has = arg(a, 0, NULL, &x);
	if (IS("defined"))
		return v.k != JV_UNDEF;
	if (IS("undefined"))
		return v.k == JV_UNDEF;
	if (IS("none"))
		return v.k == JV_NONE;
	if (IS("boolean"))
		return v.k == JV_BOOL;
	if (IS("true"))
		return v.k == JV_BOOL && v.u.i;
	if (IS("false"))
		return v.k == JV_BOOL && !v.u.i;
	if (IS("integer"))
		return v.k == JV_INT;
	if (IS("float"))
		return v.k == JV_FLOAT;
	if (IS("number"))
		return jj_is_num(v);
	if (IS("string"))
		return v.k == JV_STR;
	if (IS("mapping"))
		return v.k == JV_DICT;
	if (IS("iterable"))
		return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT ||
		       v.k == JV_UNDEF;
	if (IS("sequence"))
		return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT ||
		       v.k == JV_UNDEF;
	if (IS("callable"))
		return v.k == JV_MACRO || v.k == JV_FUNC;
	if (IS("lower") || IS("upper")) {
		if (v.k != JV_STR)
			return 0;
		struct jj_val m = recase(r, line, v, t[0] == 'l' ? 'l' : 'u');
		return jj_eq(m, v);
	}
	if (IS("even") || IS("odd")) {
		if (v.k != JV_INT && v.k != JV_BOOL)
			FAIL(line, "even/odd need an integer");
		return (int)(v.u.i & 1) == (t[0] == 'o');
	}
	if (IS("divisibleby")) {
		if (!has || !jj_is_num(x) || !jj_is_num(v))
			FAIL(line, "divisibleby needs numbers");
		struct jj_val m = arith(r, line, '%', v, x);
		return jj_num(m) == 0;
	}
	if (!has && !IS("escaped"))
		FAIL(line, "test '%.*s' needs an argument or is unknown",
		     (int)tn, t);
	if (IS("eq") || IS("equalto") || IS("=="))
		return jj_eq(v, x);
	if (IS("ne") || IS("!="))
		return !jj_eq(v, x);
	if (IS("lt") || IS("lessthan"))
		return jj_cmp(r->c, line, v, x) < 0;
	if (IS("le"))
		return jj_cmp(r->c, line, v, x) <= 0;
	if (IS("gt") || IS("greaterthan"))
		return jj_cmp(r->c, line, v, x) > 0;
	if (IS("ge"))
		return jj_cmp(r->c, line, v, x) >= 0;
	if (IS("in"))
		return contains(r, line, x, v);
	if (IS("sameas")) /* identity: exact for None/bools/undefined */
		return v.k == x.k && jj_eq(v, x) &&
		       (v.k != JV_LIST || v.u.l == x.u.l) &&
		       (v.k != JV_DICT || v.u.d == x.u.d);
#undef IS
	FAIL(line, "no test named '%.*s'", (int)tn, t);
}

/* ---- expressions ---- */

static struct jj_val eval(struct rs *r, const struct jj_node *n)
{
	struct jj_val a, b;
	if (++r->depth > 3 * JJ_MAX_DEPTH)
		FAIL(n->line, "the template nests too deeply");
	struct jj_val v = {0};
	switch (n->kind) {
	case JN_LIT:
		v = n->lit;
		break;
	case JN_NAME:
		v = lookup(r->f, n->s, n->sn);
		break;
	case JN_LIST:
	case JN_TUPLE: {
		struct jj_list *l =
			jj_list_new(r->c, n->line, (size_t)n->nkids);
		l->tuple = n->kind == JN_TUPLE;
		for (int i = 0; i < n->nkids; i++)
			l->v[i] = eval(r, n->kids[i]);
		v = listv(l);
		break;
	}
	case JN_DICT:
		v.k = JV_DICT;
		v.u.d = jj_dict_new(r->c, n->line, (size_t)n->nkids / 2);
		for (int i = 0; i + 1 < n->nkids; i += 2) {
			a = eval(r, n->kids[i]);
			b = eval(r, n->kids[i + 1]);
			jj_dict_set(r->c, n->line, v.u.d, a, b);
		}
		break;
	case JN_ATTR:
		a = eval(r, n->a);
		v = get_key(r, n->line, a, jj_str(n->s, n->sn));
		break;
	case JN_ITEM:
		a = eval(r, n->a);
		b = eval(r, n->b);
		v = get_key(r, n->line, a, b);
		break;
	case JN_SLICE: {
		struct jj_val p[3];
		a = eval(r, n->a);
		for (int i = 0; i < 3; i++)
			p[i] = n->kids[i] ? eval(r, n->kids[i]) : jj_none();
		v = do_slice(r, n->line, a, p[0], p[1], p[2]);
		break;
	}
	case JN_CALL: {
		struct args ar;
		if (n->a->kind == JN_ATTR) {
			a = eval(r, n->a->a);
			eval_args(r, n, &ar);
			v = method(r, n->line, a, n->a->s, n->a->sn, &ar);
			break;
		}
		a = eval(r, n->a);
		eval_args(r, n, &ar);
		if (a.k == JV_MACRO)
			v = call_macro(r, n->line, a, &ar);
		else if (a.k == JV_FUNC)
			v = call_func(r, n->line, (int)a.u.i, &ar);
		else if (a.k == JV_UNDEF)
			undefined_error(r, n->line, a);
		else
			FAIL(n->line, "'%s' object is not callable",
			     jj_type_name(a));
		break;
	}
	case JN_FILTER: {
		struct args ar;
		a = eval(r, n->a);
		eval_args(r, n, &ar);
		v = apply_filter(r, n->line, n->s, n->sn, a, &ar);
		break;
	}
	case JN_TEST: {
		struct args ar;
		a = eval(r, n->a);
		eval_args(r, n, &ar);
		int t = apply_test(r, n->line, n->s, n->sn, a, &ar);
		v = jj_bool(n->op ? !t : t);
		break;
	}
	case JN_NEG:
	case JN_POS:
		a = eval(r, n->a);
		if (a.k == JV_UNDEF)
			undefined_error(r, n->line, a);
		if (!jj_is_num(a))
			FAIL(n->line, "bad operand type for unary %c: '%s'",
			     n->kind == JN_NEG ? '-' : '+', jj_type_name(a));
		if (n->kind == JN_POS)
			v = a.k == JV_BOOL ? jj_int(a.u.i) : a;
		else if (a.k == JV_FLOAT)
			v = jj_float(-a.u.f);
		else if (a.u.i == INT64_MIN)
			FAIL(n->line, "integer overflow");
		else
			v = jj_int(-a.u.i);
		break;
	case JN_NOT:
		v = jj_bool(!jj_truthy(eval(r, n->a)));
		break;
	case JN_AND:
		a = eval(r, n->a);
		v = jj_truthy(a) ? eval(r, n->b) : a;
		break;
	case JN_OR:
		a = eval(r, n->a);
		v = jj_truthy(a) ? a : eval(r, n->b);
		break;
	case JN_BIN:
		a = eval(r, n->a);
		b = eval(r, n->b);
		if (n->op == '~') {
			struct jj_buf buf = {0};
			jj_str_of(r->c, n->line, &buf, a);
			jj_str_of(r->c, n->line, &buf, b);
			v = jj_buf_val(&buf);
		} else {
			v = arith(r, n->line, n->op, a, b);
		}
		break;
	case JN_CMP: {
		a = eval(r, n->a);
		int ok = 1;
		for (int i = 0; i < n->nkids && ok; i++) {
			b = eval(r, n->kids[i]);
			switch (n->cmpops[i]) {
			case JC_EQ:
				ok = jj_eq(a, b);
				break;
			case JC_NE:
				ok = !jj_eq(a, b);
				break;
			case JC_LT:
				ok = jj_cmp(r->c, n->line, a, b) < 0;
				break;
			case JC_LE:
				ok = jj_cmp(r->c, n->line, a, b) <= 0;
				break;
			case JC_GT:
				ok = jj_cmp(r->c, n->line, a, b) > 0;
				break;
			case JC_GE:
				ok = jj_cmp(r->c, n->line, a, b) >= 0;
				break;
			case JC_IN:
				ok = contains(r, n->line, b, a);
				break;
			default:
				ok = !contains(r, n->line, b, a);
			}
			a = b;
		}
		v = jj_bool(ok);
		break;
	}
	case JN_COND:
		if (jj_truthy(eval(r, n->a)))
			v = eval(r, n->b);
		else
			v = n->c ? eval(r, n->c) : jj_undef("", 0);
		break;
	default:
		FAIL(n->line, "internal error: node %d is not an expression",
		     n->kind);
	}
	r->depth--;
	return v;
}

/* ---- statements ---- */

static void assign(struct rs *r, const struct jj_node *n, struct jj_frame *f,
		   struct jj_val v)
{
	if (n->nkids == 1) {
		frame_set(r, n->line, f, n->kids[0]->s, n->kids[0]->sn, v);
		return;
	}
	if (v.k == JV_UNDEF)
		undefined_error(r, n->line, v);
	struct jj_list *l = iter_items(r, n->line, v);
	if ((int)l->n != n->nkids)
		FAIL(n->line, "cannot unpack %zu values into %d names", l->n,
		     n->nkids);
	for (int i = 0; i < n->nkids; i++)
		frame_set(r, n->line, f, n->kids[i]->s, n->kids[i]->sn,
			  l->v[i]);
}

static struct jj_val render_body(struct rs *r, const struct jj_node *body,
				 struct jj_frame *f)
{
	struct jj_buf buf = {0}, *sv = r->out;
	r->out = &buf;
	exec(r, body, f);
	r->out = sv;
	return jj_buf_val(&buf);
}

static struct jj_val filter_chain(struct rs *r, const struct jj_node *n,
				  struct jj_val v)
{
	for (int i = 0; i < n->nkids; i++) {
		struct args ar;
		eval_args(r, n->kids[i], &ar);
		v = apply_filter(r, n->kids[i]->line, n->kids[i]->s,
				 n->kids[i]->sn, v, &ar);
	}
	return v;
}

static void exec_for(struct rs *r, const struct jj_node *n, struct jj_frame *f)
{
	struct jj_list *items = iter_items(r, n->line, eval(r, n->a));
	if (n->b) { /* for x in y if cond */
		struct jj_list *l = jj_list_new(r->c, n->line, 0);
		size_t cap = 0;
		struct jj_frame *it = frame_new(r, n->line, f);
		for (size_t i = 0; i < items->n; i++) {
			step(r, n->line);
			it->vars->n = 0;
			assign(r, n, it, items->v[i]);
			r->f = it;
			int keep = jj_truthy(eval(r, n->b));
			r->f = f;
			if (keep)
				list_grow(r, n->line, l, &cap, items->v[i]);
		}
		items = l;
	}
	if (!items->n) {
		if (n->d)
			exec(r, n->d, f);
		return;
	}
	/* one loop object and one frame for all iterations, as jinja2's
	 * LoopContext and the loop body's locals: nothing grows with the
	 * iteration count */
	struct jj_loop *lp = jj_alloc(r->c, n->line, sizeof *lp);
	lp->items = items;
	lp->depth = 1; /* recursive loops are refused: always 1 */
	struct jj_frame *it = frame_new(r, n->line, f);
	struct jj_val lv = {.k = JV_LOOP};
	lv.u.lp = lp;
	for (size_t i = 0; i < items->n; i++) {
		step(r, n->line);
		lp->index0 = (int64_t)i;
		it->vars->n = 0;
		assign(r, n, it, items->v[i]);
		frame_set(r, n->line, it, "loop", 4, lv);
		exec(r, n->c, it);
		if (r->ctl == CTL_BREAK) {
			r->ctl = CTL_NONE;
			break;
		}
		r->ctl = CTL_NONE;
	}
}

static void exec(struct rs *r, const struct jj_node *n, struct jj_frame *f)
{
	struct jj_frame *saved = r->f;
	r->f = f;
	if (++r->depth > 3 * JJ_MAX_DEPTH)
		FAIL(n->line, "the template nests too deeply");
	switch (n->kind) {
	case JN_BODY:
		for (int i = 0; i < n->nkids && r->ctl == CTL_NONE; i++)
			exec(r, n->kids[i], f);
		break;
	case JN_TEXT:
		jj_buf_put(r->c, n->line, r->out, n->s, n->sn);
		break;
	case JN_OUTPUT:
		jj_str_of(r->c, n->line, r->out, eval(r, n->a));
		break;
	case JN_IF:
		if (jj_truthy(eval(r, n->a)))
			exec(r, n->b, f);
		else if (n->c)
			exec(r, n->c, f);
		break;
	case JN_FOR:
		exec_for(r, n, f);
		break;
	case JN_SET:
		assign(r, n, f, eval(r, n->a));
		break;
	case JN_SETATTR: {
		struct jj_val ns = lookup(f, n->s, n->sn);
		if (ns.k != JV_NS)
			FAIL(n->line,
			     "cannot assign attribute on "
			     "non-namespace object '%.*s'",
			     (int)n->sn, n->s);
		jj_dict_set(r->c, n->line, ns.u.d, jj_str(n->s2, n->s2n),
			    eval(r, n->a));
		break;
	}
	case JN_SETBLOCK: {
		struct jj_val v = render_body(r, n->c, f);
		frame_set(r, n->line, f, n->s, n->sn, filter_chain(r, n, v));
		break;
	}
	case JN_FILTERBLOCK: {
		struct jj_val v = render_body(r, n->c, f);
		jj_str_of(r->c, n->line, r->out, filter_chain(r, n, v));
		break;
	}
	case JN_MACRO: {
		struct jj_val m = {.k = JV_MACRO};
		m.u.m.node = n;
		m.u.m.fr = f;
		frame_set(r, n->line, f, n->s, n->sn, m);
		break;
	}
	case JN_BREAK:
		r->ctl = CTL_BREAK;
		break;
	case JN_CONTINUE:
		r->ctl = CTL_CONTINUE;
		break;
	case JN_GENERATION: {
		size_t start = r->out->n;
		exec(r, n->c, f);
		if (r->spans && r->out == r->main) {
			struct jj_spans *s = r->spans;
			if (s->n == s->cap) {
				size_t cap = s->cap ? s->cap * 2 : 16;
				struct jj_span *v = jj_alloc(r->c, n->line,
							     cap * sizeof *v);
				if (s->n)
					memcpy(v, s->v, s->n * sizeof *v);
				s->v = v;
				s->cap = cap;
			}
			s->v[s->n].start = start;
			s->v[s->n++].end = r->out->n;
		}
		break;
	}
	default:
		jj_str_of(r->c, n->line, r->out, eval(r, n));
	}
	r->depth--;
	r->f = saved;
}

void jj_render(struct jj_ctx *c, const struct jj_node *root,
	       struct jj_dict *vars, struct jj_buf *out, struct jj_spans *spans)
{
	struct rs r = {.c = c, .out = out, .main = out, .spans = spans};
	r.root = jj_alloc(c, 0, sizeof *r.root);
	r.root->parent = NULL;
	r.root->vars = vars;
	/* the template's own top-level sets go in a frame above the
	 * variables, as jinja2's context keeps them apart */
	struct jj_frame *top = frame_new(&r, 0, r.root);
	exec(&r, root, top);
}
