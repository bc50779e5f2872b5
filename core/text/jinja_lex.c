/*
 * jinja_lex.c - chat-template source to tokens, as jinja2 3.1's lexer
 * does it with transformers' settings: text between tags; {{ }}, {% %}
 * and {# #} with the - and + whitespace controls; trim_blocks (the
 * newline after a block or comment tag dropped) and lstrip_blocks (the
 * blanks before a block or comment tag that starts its line dropped);
 * inside tags names, numbers, strings with Python's escapes and
 * operators. The whitespace rules are where renderings most easily differ
 * from transformers', so they follow jinja2's code, not its docs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "mg/tokenizer.h"

static void push(struct jj_ctx *c, struct jj_toks *t, struct jj_tok k)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		struct jj_tok *v = jj_alloc(c, k.line, cap * sizeof *v);
		if (t->n)
			memcpy(v, t->v, t->n * sizeof *v);
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n++] = k;
}

static int count_nl(const char *p, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += p[i] == '\n';
	return k;
}

/* The length of Python whitespace at the end of p[0..n). */
static size_t trailing_space(const char *p, size_t n)
{
	size_t e = n;
	while (e > 0) {
		size_t s = e - 1, l;
		while (s > 0 && ((unsigned char)p[s] & 0xC0) == 0x80 &&
		       e - s < 4)
			s--;
		if (!jj_u8space(p + s, e - s, &l) || s + l != e)
			break;
		e = s;
	}
	return n - e;
}

/* The length of Python whitespace at the start of p[0..n). */
static size_t leading_space(const char *p, size_t n)
{
	size_t i = 0, l;
	while (i < n && jj_u8space(p + i, n - i, &l))
		i += l;
	return i;
}

static int is_name0(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       ch == '_';
}
static int is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static int hexval(const char *p, int n, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		char ch = p[i];
		int d = is_digit(ch)		 ? ch - '0'
			: ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
			: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
						 : -1;
		if (d < 0)
			return -1;
		*v = *v << 4 | (uint32_t)d;
	}
	return 0;
}

/* A string literal's body, decoded as Python's unicode-escape codec
 * does: \n \t \\ \' \" \xhh \uhhhh \Uhhhhhhhh \ooo, \<newline> dropped,
 * other backslashes kept. */
static void decode_str(struct jj_ctx *c, int line, const char *p, size_t n,
		       struct jj_tok *k)
{
	char *o = jj_alloc(c, line, n + 1);
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\\' || i + 1 == n) {
			o[w++] = p[i];
			continue;
		}
		char e = p[++i];
		uint32_t cp;
		int hl = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
		switch (e) {
		case 'n':
			o[w++] = '\n';
			break;
		case 't':
			o[w++] = '\t';
			break;
		case 'r':
			o[w++] = '\r';
			break;
		case 'a':
			o[w++] = '\a';
			break;
		case 'b':
			o[w++] = '\b';
			break;
		case 'f':
			o[w++] = '\f';
			break;
		case 'v':
			o[w++] = '\v';
			break;
		case '\\':
		case '\'':
		case '"':
			o[w++] = e;
			break;
		case '\n':
			break;
		case 'x':
		case 'u':
		case 'U':
			if (i + (size_t)hl >= n || hexval(p + i + 1, hl, &cp) ||
			    cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
				jj_fail(&c->err, line,
					"bad \\%c escape in a string", e);
			/* \xhh (and any escape) may need up to 4 bytes; the
			 * escape itself took at least 4 */
			w += mg_utf8_put(cp, o + w);
			i += (size_t)hl;
			break;
		default:
			if (e >= '0' && e <= '7') {
				cp = 0;
				int d = 0;
				while (d < 3 && i < n && p[i] >= '0' &&
				       p[i] <= '7')
					cp = cp * 8 + (uint32_t)(p[i++] - '0'),
					d++;
				i--;
				w += mg_utf8_put(cp, o + w);
			} else {
				o[w++] = '\\';
				o[w++] = e;
			}
		}
	}
	k->p = o;
	k->n = w;
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char ops1[] = "+-*/%~<>=.,:|()[]{}";

/* Tokens of one {{ }} or {% %} tag from *pos, up to and including its
 * end; returns 1 when the end had a '-' (strip what follows). */
static void lex_tag(struct jj_ctx *c, const char *s, size_t n, size_t *pos,
		    int *line, int block, struct jj_toks *out)
{
	size_t i = *pos;
	int depth = 0, start = *line;
	for (;;) {
		if (i >= n)
			jj_fail(&c->err, start,
				"unexpected end of template "
				"(an unclosed %s tag)",
				block ? "{%" : "{{");
		char ch = s[i];
		/* the end, unless inside brackets */
		if (!depth) {
			const char *end = block ? "%}" : "}}";
			int sign = (ch == '-' || (block && ch == '+')) &&
				   i + 2 < n + 0 && !memcmp(s + i + 1, end, 2);
			if (sign || (i + 1 < n && !memcmp(s + i, end, 2))) {
				struct jj_tok k = {.type = block ? JT_BEND
								 : JT_VEND,
						   .line = *line};
				push(c, out, k);
				i += sign ? 3 : 2;
				if (sign && ch == '-') {
					size_t w = leading_space(s + i, n - i);
					*line += count_nl(s + i, w);
					i += w;
				} else if (block && !sign && i < n &&
					   s[i] == '\n') { /* trim_blocks */
					i++;
					(*line)++;
				}
				*pos = i;
				return;
			}
		}
		size_t l;
		if (jj_u8space(s + i, n - i, &l)) {
			if (s[i] == '\n')
				(*line)++;
			i += l;
			continue;
		}
		struct jj_tok k = {.line = *line, .p = s + i};
		if (is_name0(ch)) {
			size_t j = i + 1;
			while (j < n && (is_name0(s[j]) || is_digit(s[j])))
				j++;
			k.type = JT_NAME;
			k.n = j - i;
			i = j;
		} else if (is_digit(ch)) {
			size_t j = i;
			int isf = 0;
			char num[64];
			size_t m = 0;
/* One character of the literal into num: a longer literal is refused,
 * not cut (the '.' once wrote past num, and a cut float is another
 * value). */
#define NUM_PUT(ch)                                                            \
	do {                                                                   \
		if (m == sizeof num - 1)                                       \
			jj_fail(&c->err, *line,                                \
				"number literal of more than %d characters",   \
				(int)sizeof num - 1);                          \
		num[m++] = (ch);                                               \
	} while (0)
			while (j < n && (is_digit(s[j]) || s[j] == '_')) {
				if (s[j] != '_')
					NUM_PUT(s[j]);
				j++;
			}
			if (j + 1 < n && s[j] == '.' && is_digit(s[j + 1])) {
				isf = 1;
				NUM_PUT(s[j]);
				j++;
				while (j < n &&
				       (is_digit(s[j]) || s[j] == '_')) {
					if (s[j] != '_')
						NUM_PUT(s[j]);
					j++;
				}
			}
			if (j < n && (s[j] == 'e' || s[j] == 'E')) {
				size_t q = j + 1;
				if (q < n && (s[q] == '+' || s[q] == '-'))
					q++;
				if (q < n && is_digit(s[q])) {
					isf = 1;
					for (; j < q; j++)
						NUM_PUT(s[j]);
					while (j < n && is_digit(s[j])) {
						NUM_PUT(s[j]);
						j++;
					}
				}
			}
#undef NUM_PUT
			num[m] = 0;
			k.n = j - i;
			i = j;
			if (isf) {
				k.type = JT_FLOAT;
				k.f = strtod(num, NULL);
			} else {
				k.type = JT_INT;
				errno = 0;
				k.i = strtoll(num, NULL, 10);
				if (errno == ERANGE)
					jj_fail(&c->err, *line,
						"integer %s too large", num);
			}
		} else if (ch == '\'' || ch == '"') {
			size_t j = i + 1;
			while (j < n && s[j] != ch) {
				if (s[j] == '\\')
					j++;
				j++;
			}
			if (j >= n)
				jj_fail(&c->err, *line,
					"unexpected end of string");
			k.type = JT_STR;
			decode_str(c, *line, s + i + 1, j - i - 1, &k);
			*line += count_nl(s + i, j - i);
			i = j + 1;
		} else {
			k.type = JT_OP;
			k.n = 0;
			for (int o = 0; ops2[o]; o++)
				if (i + 1 < n && !memcmp(s + i, ops2[o], 2))
					k.n = 2;
			if (!k.n && strchr(ops1, ch) && ch)
				k.n = 1;
			if (!k.n)
				jj_fail(&c->err, *line,
					"unexpected char '%c' in a tag", ch);
			if (ch == '(' || ch == '[' || ch == '{')
				depth++;
			else if (ch == ')' || ch == ']' || ch == '}') {
				if (!depth)
					jj_fail(&c->err, *line,
						"unexpected '%c'", ch);
				depth--;
			}
			i += k.n;
		}
		push(c, out, k);
	}
}

void jj_lex(struct jj_ctx *c, const char *s, size_t n, struct jj_toks *out)
{
	size_t pos = 0;
	int line = 1;
	while (pos < n) {
		/* the next tag opener */
		size_t t = pos;
		int kind = 0; /* '{', '%', '#' */
		for (; t + 1 < n; t++)
			if (s[t] == '{' &&
			    (s[t + 1] == '{' || s[t + 1] == '%' ||
			     s[t + 1] == '#')) {
				kind = s[t + 1];
				break;
			}
		if (!kind)
			t = n;
		size_t tl = t - pos; /* text length */
		char sign = kind && t + 2 < n ? s[t + 2] : 0;
		if (sign != '-' && sign != '+')
			sign = 0;
		if (kind == '{' && sign == '+')
			sign = 0; /* {{+ is not a control */
		if (sign == '-') {
			tl -= trailing_space(s + pos, tl);
		} else if (kind && kind != '{' && sign != '+') {
			/* lstrip_blocks */
			size_t lp = tl;
			while (lp > 0 && s[pos + lp - 1] != '\n')
				lp--;
			int line_starting = pos == 0 || s[pos - 1] == '\n';
			if ((lp > 0 || line_starting) && lp < tl &&
			    leading_space(s + pos + lp, tl - lp) == tl - lp)
				tl = lp;
		}
		if (tl) {
			struct jj_tok k = {.type = JT_DATA,
					   .line = line,
					   .p = s + pos,
					   .n = tl};
			push(c, out, k);
		}
		line += count_nl(s + pos, t - pos);
		if (!kind)
			break;
		pos = t + 2 + (sign ? 1 : 0);
		if (kind == '#') {
			const char *e = NULL;
			for (size_t j = pos; j + 1 < n; j++)
				if (s[j] == '#' && s[j + 1] == '}') {
					e = s + j;
					break;
				}
			if (!e)
				jj_fail(&c->err, line,
					"missing end of comment tag");
			size_t j = (size_t)(e - s);
			char es =
				j > pos && (s[j - 1] == '-' || s[j - 1] == '+')
					? s[j - 1]
					: 0;
			line += count_nl(s + pos, j - pos);
			pos = j + 2;
			if (es == '-') {
				size_t w = leading_space(s + pos, n - pos);
				line += count_nl(s + pos, w);
				pos += w;
			} else if (!es && pos < n && s[pos] == '\n') {
				pos++;
				line++;
			}
			continue;
		}
		struct jj_tok k = {.type = kind == '%' ? JT_BBEGIN : JT_VBEGIN,
				   .line = line};
		push(c, out, k);
		lex_tag(c, s, n, &pos, &line, kind == '%', out);
	}
	struct jj_tok k = {.type = JT_EOF, .line = line};
	push(c, out, k);
}
