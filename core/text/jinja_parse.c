/*
 * jinja_parse.c - chat-template tokens to a tree (struct jj_node), by
 * recursive descent with jinja2's precedence: x if c else y; or; and;
 * not; comparisons and in / not in; + -; ~; * / // %; **; unary - +;
 * primaries with .attr, [item], [a:b:c] and calls; then | filters and
 * `is` tests. Statements: if/elif/else, for (targets, `if` filter,
 * else), set (plain, ns.attr, block), macro, break/continue, filter
 * blocks and transformers' generation block. Nesting is bounded
 * (JJ_MAX_DEPTH) so a hostile template cannot overflow the stack.
 */
#include <string.h>

#include "jinja.h"

struct parser {
	struct jj_ctx *c;
	const struct jj_tok *t;
	size_t i, n;
	int depth;
};

static const struct jj_tok *peek(struct parser *p)
{
	return &p->t[p->i];
}
static const struct jj_tok *peek2(struct parser *p)
{
	return p->i + 1 < p->n ? &p->t[p->i + 1] : &p->t[p->n - 1];
}
static const struct jj_tok *next(struct parser *p)
{
	const struct jj_tok *k = &p->t[p->i];
	if (k->type != JT_EOF)
		p->i++;
	return k;
}

static int is_op(const struct jj_tok *k, const char *op)
{
	return k->type == JT_OP && k->n == strlen(op) &&
	       !memcmp(k->p, op, k->n);
}
static int is_name(const struct jj_tok *k, const char *nm)
{
	return k->type == JT_NAME && k->n == strlen(nm) &&
	       !memcmp(k->p, nm, k->n);
}

static const char *tok_desc(const struct jj_tok *k)
{
	switch (k->type) {
	case JT_EOF:
		return "end of template";
	case JT_VEND:
		return "end of print statement";
	case JT_BEND:
		return "end of statement block";
	case JT_DATA:
		return "template data";
	case JT_STR:
		return "string";
	case JT_INT:
	case JT_FLOAT:
		return "number";
	default:
		return NULL;
	}
}

JJ_NORETURN static void unexpected(struct parser *p, const struct jj_tok *k,
				   const char *want)
{
	const char *d = tok_desc(k);
	if (d)
		jj_fail(&p->c->err, k->line, "expected %s, got %s", want, d);
	jj_fail(&p->c->err, k->line, "expected %s, got '%.*s'", want, (int)k->n,
		k->p);
}

static void expect_op(struct parser *p, const char *op)
{
	if (!is_op(peek(p), op))
		unexpected(p, peek(p), op);
	next(p);
}

static void expect_type(struct parser *p, int type, const char *what)
{
	if (peek(p)->type != type)
		unexpected(p, peek(p), what);
	next(p);
}

static struct jj_node *node(struct parser *p, int kind, int line)
{
	struct jj_node *n = jj_alloc(p->c, line, sizeof *n);
	memset(n, 0, sizeof *n);
	n->kind = kind;
	n->line = line;
	return n;
}

/* A growable child list. */
struct kids {
	struct jj_node **v;
	const char **kw;
	size_t *kwn;
	int n, cap;
};
static void kid_add(struct parser *p, struct kids *k, struct jj_node *x,
		    const char *kw, size_t kwn)
{
	if (k->n == k->cap) {
		int cap = k->cap ? k->cap * 2 : 4;
		struct jj_node **v = jj_alloc(p->c, 0, (size_t)cap * sizeof *v);
		const char **w = jj_alloc(p->c, 0, (size_t)cap * sizeof *w);
		size_t *wn = jj_alloc(p->c, 0, (size_t)cap * sizeof *wn);
		if (k->n) {
			memcpy(v, k->v, (size_t)k->n * sizeof *v);
			memcpy(w, k->kw, (size_t)k->n * sizeof *w);
			memcpy(wn, k->kwn, (size_t)k->n * sizeof *wn);
		}
		k->v = v, k->kw = w, k->kwn = wn, k->cap = cap;
	}
	k->kw[k->n] = kw;
	k->kwn[k->n] = kwn;
	k->v[k->n++] = x;
}
static void kids_to(struct jj_node *n, struct kids *k)
{
	n->kids = k->v;
	n->kw = k->kw;
	n->kwn = k->kwn;
	n->nkids = k->n;
}

static void enter(struct parser *p, int line)
{
	if (++p->depth > JJ_MAX_DEPTH)
		jj_fail(&p->c->err, line, "the template nests too deeply");
}

static struct jj_node *expr(struct parser *p);
static struct jj_node *or_expr(struct parser *p);
static struct jj_node *unary(struct parser *p, int with_filter);

/* (args) of a call, filter or test: positional then name=value. */
static void call_args(struct parser *p, struct kids *k)
{
	expect_op(p, "(");
	while (!is_op(peek(p), ")")) {
		if (k->n)
			expect_op(p, ",");
		if (is_op(peek(p), ")"))
			break;
		const struct jj_tok *t = peek(p);
		if (t->type == JT_NAME && is_op(peek2(p), "=")) {
			next(p), next(p);
			kid_add(p, k, expr(p), t->p, t->n);
		} else {
			kid_add(p, k, expr(p), NULL, 0);
		}
	}
	next(p);
}

static struct jj_node *primary(struct parser *p)
{
	const struct jj_tok *t = next(p);
	struct jj_node *n;
	switch (t->type) {
	case JT_NAME:
		if (is_name(t, "true") || is_name(t, "True") ||
		    is_name(t, "false") || is_name(t, "False")) {
			n = node(p, JN_LIT, t->line);
			n->lit = jj_bool(t->p[0] == 't' || t->p[0] == 'T');
		} else if (is_name(t, "none") || is_name(t, "None")) {
			n = node(p, JN_LIT, t->line);
			n->lit = jj_none();
		} else {
			n = node(p, JN_NAME, t->line);
			n->s = t->p;
			n->sn = t->n;
		}
		return n;
	case JT_STR: {
		n = node(p, JN_LIT, t->line);
		n->lit = jj_str(t->p, t->n);
		/* adjacent literals concatenate */
		if (peek(p)->type == JT_STR) {
			struct jj_buf b = {0};
			jj_buf_put(p->c, t->line, &b, t->p, t->n);
			while (peek(p)->type == JT_STR) {
				const struct jj_tok *u = next(p);
				jj_buf_put(p->c, t->line, &b, u->p, u->n);
			}
			n->lit = jj_buf_val(&b);
		}
		return n;
	}
	case JT_INT:
		n = node(p, JN_LIT, t->line);
		n->lit = jj_int(t->i);
		return n;
	case JT_FLOAT:
		n = node(p, JN_LIT, t->line);
		n->lit = jj_float(t->f);
		return n;
	case JT_OP:
		break;
	default:
		unexpected(p, t, "an expression");
	}
	struct kids k = {0};
	if (is_op(t, "(")) { /* parenthesised expression or tuple */
		int tuple = 0;
		while (!is_op(peek(p), ")")) {
			if (k.n) {
				expect_op(p, ",");
				tuple = 1;
				if (is_op(peek(p), ")"))
					break;
			}
			kid_add(p, &k, expr(p), NULL, 0);
		}
		next(p);
		if (k.n == 1 && !tuple)
			return k.v[0];
		n = node(p, JN_TUPLE, t->line);
		kids_to(n, &k);
		return n;
	}
	if (is_op(t, "[")) {
		while (!is_op(peek(p), "]")) {
			if (k.n) {
				expect_op(p, ",");
				if (is_op(peek(p), "]"))
					break;
			}
			kid_add(p, &k, expr(p), NULL, 0);
		}
		next(p);
		n = node(p, JN_LIST, t->line);
		kids_to(n, &k);
		return n;
	}
	if (is_op(t, "{")) {
		while (!is_op(peek(p), "}")) {
			if (k.n) {
				expect_op(p, ",");
				if (is_op(peek(p), "}"))
					break;
			}
			kid_add(p, &k, expr(p), NULL, 0);
			expect_op(p, ":");
			kid_add(p, &k, expr(p), NULL, 0);
		}
		next(p);
		n = node(p, JN_DICT, t->line);
		kids_to(n, &k);
		return n;
	}
	unexpected(p, t, "an expression");
}

static struct jj_node *postfix(struct parser *p, struct jj_node *n)
{
	for (;;) {
		const struct jj_tok *t = peek(p);
		if (is_op(t, ".")) {
			next(p);
			const struct jj_tok *a = next(p);
			struct jj_node *x = node(p, JN_ATTR, t->line);
			x->a = n;
			if (a->type == JT_NAME) {
				x->s = a->p;
				x->sn = a->n;
			} else if (a->type == JT_INT) { /* x.0 is x[0] */
				x->kind = JN_ITEM;
				x->b = node(p, JN_LIT, t->line);
				x->b->lit = jj_int(a->i);
			} else {
				unexpected(p, a, "an attribute name");
			}
			n = x;
		} else if (is_op(t, "[")) {
			next(p);
			struct jj_node *part[3] = {0};
			int colons = 0;
			for (;;) {
				const struct jj_tok *u = peek(p);
				if (is_op(u, ":")) {
					if (++colons > 2)
						unexpected(p, u, "']'");
					next(p);
					continue;
				}
				if (is_op(u, "]"))
					break;
				if (part[colons])
					unexpected(p, u, "']' or ':'");
				part[colons] = expr(p);
			}
			next(p);
			struct jj_node *x;
			if (!colons) {
				if (!part[0])
					unexpected(p, t, "an index");
				x = node(p, JN_ITEM, t->line);
				x->b = part[0];
			} else {
				x = node(p, JN_SLICE, t->line);
				struct kids k = {0};
				for (int j = 0; j < 3; j++)
					kid_add(p, &k, part[j], NULL, 0);
				kids_to(x, &k);
			}
			x->a = n;
			n = x;
		} else if (is_op(t, "(")) {
			struct jj_node *x = node(p, JN_CALL, t->line);
			struct kids k = {0};
			call_args(p, &k);
			kids_to(x, &k);
			x->a = n;
			n = x;
		} else {
			return n;
		}
	}
}

/* | name(args) and `is [not] name args` after an operand. */
static struct jj_node *filters(struct parser *p, struct jj_node *n)
{
	for (;;) {
		const struct jj_tok *t = peek(p);
		if (is_op(t, "|")) {
			next(p);
			for (;;) {
				const struct jj_tok *nm = next(p);
				if (nm->type != JT_NAME)
					unexpected(p, nm, "a filter name");
				struct jj_node *x =
					node(p, JN_FILTER, nm->line);
				x->a = n;
				x->s = nm->p;
				x->sn = nm->n;
				/* dotted names are not used by real
				 * templates: one name */
				if (is_op(peek(p), "(")) {
					struct kids k = {0};
					call_args(p, &k);
					kids_to(x, &k);
				}
				n = x;
				if (!is_op(peek(p), "|"))
					break;
				next(p);
			}
		} else if (is_name(t, "is")) {
			next(p);
			struct jj_node *x = node(p, JN_TEST, t->line);
			if (is_name(peek(p), "not")) {
				next(p);
				x->op = 1;
			}
			const struct jj_tok *nm = next(p);
			/* `is none`, `is true`, `is false` lex as names */
			if (nm->type != JT_NAME)
				unexpected(p, nm, "a test name");
			x->a = n;
			x->s = nm->p;
			x->sn = nm->n;
			struct kids k = {0};
			const struct jj_tok *u = peek(p);
			if (is_op(u, "(")) {
				call_args(p, &k);
			} else if (u->type == JT_STR || u->type == JT_INT ||
				   u->type == JT_FLOAT ||
				   (u->type == JT_NAME && !is_name(u, "else") &&
				    !is_name(u, "or") && !is_name(u, "and") &&
				    !is_name(u, "if") && !is_name(u, "is") &&
				    !is_name(u, "in") && !is_name(u, "not")) ||
				   is_op(u, "[") || is_op(u, "{") ||
				   is_op(u, "-")) {
				/* one argument without parentheses:
				 * `is divisibleby 3`, `is sameas none` */
				kid_add(p, &k, unary(p, 0), NULL, 0);
			}
			kids_to(x, &k);
			n = x;
		} else {
			return n;
		}
	}
}

static struct jj_node *unary(struct parser *p, int with_filter)
{
	const struct jj_tok *t = peek(p);
	enter(p, t->line);
	struct jj_node *n;
	if (is_op(t, "-") || is_op(t, "+")) {
		next(p);
		n = node(p, t->p[0] == '-' ? JN_NEG : JN_POS, t->line);
		n->a = unary(p, 0);
	} else {
		n = primary(p);
	}
	n = postfix(p, n);
	if (with_filter)
		n = filters(p, n);
	p->depth--;
	return n;
}

static struct jj_node *binop(struct parser *p, int op, int line,
			     struct jj_node *a, struct jj_node *b)
{
	struct jj_node *x = node(p, JN_BIN, line);
	x->op = op;
	x->a = a;
	x->b = b;
	return x;
}

static struct jj_node *pow_expr(struct parser *p)
{
	struct jj_node *n = unary(p, 1);
	while (is_op(peek(p), "**")) {
		int line = next(p)->line;
		n = binop(p, 'P', line, n, unary(p, 1));
	}
	return n;
}

static struct jj_node *math2(struct parser *p)
{
	struct jj_node *n = pow_expr(p);
	for (;;) {
		const struct jj_tok *t = peek(p);
		int op = is_op(t, "*")	  ? '*'
			 : is_op(t, "/")  ? '/'
			 : is_op(t, "//") ? 'F'
			 : is_op(t, "%")  ? '%'
					  : 0;
		if (!op)
			return n;
		next(p);
		n = binop(p, op, t->line, n, pow_expr(p));
	}
}

static struct jj_node *concat(struct parser *p)
{
	struct jj_node *n = math2(p);
	while (is_op(peek(p), "~")) {
		int line = next(p)->line;
		n = binop(p, '~', line, n, math2(p));
	}
	return n;
}

static struct jj_node *math1(struct parser *p)
{
	struct jj_node *n = concat(p);
	for (;;) {
		const struct jj_tok *t = peek(p);
		if (!is_op(t, "+") && !is_op(t, "-"))
			return n;
		next(p);
		n = binop(p, t->p[0], t->line, n, concat(p));
	}
}

static struct jj_node *compare(struct parser *p)
{
	struct jj_node *first = math1(p), *x = NULL;
	struct kids k = {0};
	uint8_t ops[64];
	for (;;) {
		const struct jj_tok *t = peek(p);
		int op = -1;
		if (is_op(t, "=="))
			op = JC_EQ;
		else if (is_op(t, "!="))
			op = JC_NE;
		else if (is_op(t, "<"))
			op = JC_LT;
		else if (is_op(t, "<="))
			op = JC_LE;
		else if (is_op(t, ">"))
			op = JC_GT;
		else if (is_op(t, ">="))
			op = JC_GE;
		else if (is_name(t, "in"))
			op = JC_IN;
		else if (is_name(t, "not") && is_name(peek2(p), "in"))
			op = JC_NOTIN;
		if (op < 0)
			break;
		next(p);
		if (op == JC_NOTIN)
			next(p);
		if (k.n == (int)sizeof ops)
			jj_fail(&p->c->err, t->line, "comparison too long");
		ops[k.n] = (uint8_t)op;
		if (!x)
			x = node(p, JN_CMP, t->line);
		kid_add(p, &k, math1(p), NULL, 0);
	}
	if (!x)
		return first;
	x->a = first;
	kids_to(x, &k);
	x->cmpops = jj_alloc(p->c, x->line, (size_t)k.n);
	memcpy(x->cmpops, ops, (size_t)k.n);
	return x;
}

static struct jj_node *not_expr(struct parser *p)
{
	const struct jj_tok *t = peek(p);
	if (is_name(t, "not")) {
		next(p);
		enter(p, t->line);
		struct jj_node *x = node(p, JN_NOT, t->line);
		x->a = not_expr(p);
		p->depth--;
		return x;
	}
	return compare(p);
}

static struct jj_node *and_expr(struct parser *p)
{
	struct jj_node *n = not_expr(p);
	while (is_name(peek(p), "and")) {
		int line = next(p)->line;
		struct jj_node *x = node(p, JN_AND, line);
		x->a = n;
		x->b = not_expr(p);
		n = x;
	}
	return n;
}

static struct jj_node *or_expr(struct parser *p)
{
	struct jj_node *n = and_expr(p);
	while (is_name(peek(p), "or")) {
		int line = next(p)->line;
		struct jj_node *x = node(p, JN_OR, line);
		x->a = n;
		x->b = and_expr(p);
		n = x;
	}
	return n;
}

/* The full expression with the conditional: a if c else b. */
static struct jj_node *expr(struct parser *p)
{
	enter(p, peek(p)->line);
	struct jj_node *n = or_expr(p);
	while (is_name(peek(p), "if")) {
		int line = next(p)->line;
		struct jj_node *x = node(p, JN_COND, line);
		x->b = n;
		x->a = or_expr(p);
		if (is_name(peek(p), "else")) {
			next(p);
			x->c = or_expr(p);
		}
		n = x;
	}
	p->depth--;
	return n;
}

/* An expression, or a tuple of them without parentheses (set x = a, b). */
static struct jj_node *tuple_expr(struct parser *p, int condexpr)
{
	int line = peek(p)->line;
	struct jj_node *first = condexpr ? expr(p) : or_expr(p);
	if (!is_op(peek(p), ","))
		return first;
	struct kids k = {0};
	kid_add(p, &k, first, NULL, 0);
	while (is_op(peek(p), ",")) {
		next(p);
		const struct jj_tok *t = peek(p);
		if (t->type == JT_BEND || t->type == JT_VEND)
			break;
		kid_add(p, &k, condexpr ? expr(p) : or_expr(p), NULL, 0);
	}
	struct jj_node *x = node(p, JN_TUPLE, line);
	kids_to(x, &k);
	return x;
}

/* Assignment targets: NAME or NAME, NAME... */
static void targets(struct parser *p, struct kids *k)
{
	int paren = is_op(peek(p), "(");
	if (paren)
		next(p);
	for (;;) {
		const struct jj_tok *t = next(p);
		if (t->type != JT_NAME)
			unexpected(p, t, "a name");
		struct jj_node *x = node(p, JN_NAME, t->line);
		x->s = t->p;
		x->sn = t->n;
		kid_add(p, k, x, NULL, 0);
		if (!is_op(peek(p), ","))
			break;
		next(p);
		if (paren && is_op(peek(p), ")"))
			break;
	}
	if (paren)
		expect_op(p, ")");
}

static struct jj_node *body(struct parser *p, const char *const *ends,
			    const struct jj_tok **end);

static void block_end(struct parser *p)
{
	expect_type(p, JT_BEND, "end of statement block");
}

/* A chain of filters without an operand: {% filter f | g %}. */
static void filter_chain(struct parser *p, struct kids *k)
{
	for (;;) {
		const struct jj_tok *nm = next(p);
		if (nm->type != JT_NAME)
			unexpected(p, nm, "a filter name");
		struct jj_node *x = node(p, JN_FILTER, nm->line);
		x->s = nm->p;
		x->sn = nm->n;
		if (is_op(peek(p), "(")) {
			struct kids a = {0};
			call_args(p, &a);
			kids_to(x, &a);
		}
		kid_add(p, k, x, NULL, 0);
		if (!is_op(peek(p), "|"))
			return;
		next(p);
	}
}

static struct jj_node *statement(struct parser *p)
{
	const struct jj_tok *t = next(p);
	if (t->type != JT_NAME)
		unexpected(p, t, "a statement name");
	const struct jj_tok *end;
	struct jj_node *x;
	enter(p, t->line);
	if (is_name(t, "if")) {
		static const char *const e[] = {"elif", "else", "endif", NULL};
		x = node(p, JN_IF, t->line);
		struct jj_node *cur = x;
		for (;;) {
			cur->a = tuple_expr(p, 1);
			block_end(p);
			cur->b = body(p, e, &end);
			if (is_name(end, "elif")) {
				cur->c = node(p, JN_IF, end->line);
				cur = cur->c;
				continue;
			}
			if (is_name(end, "else")) {
				static const char *const e2[] = {"endif", NULL};
				block_end(p);
				cur->c = body(p, e2, &end);
			}
			break;
		}
	} else if (is_name(t, "for")) {
		static const char *const e[] = {"else", "endfor", NULL};
		static const char *const e2[] = {"endfor", NULL};
		x = node(p, JN_FOR, t->line);
		struct kids k = {0};
		targets(p, &k);
		kids_to(x, &k);
		if (!is_name(peek(p), "in"))
			unexpected(p, peek(p), "'in'");
		next(p);
		x->a = tuple_expr(p, 0);
		if (is_name(peek(p), "if")) {
			next(p);
			x->b = expr(p);
		}
		if (is_name(peek(p), "recursive"))
			jj_fail(&p->c->err, t->line,
				"recursive loops are not supported");
		block_end(p);
		x->c = body(p, e, &end);
		if (is_name(end, "else")) {
			block_end(p);
			x->d = body(p, e2, &end);
		}
	} else if (is_name(t, "set")) {
		const struct jj_tok *nm = peek(p);
		if (nm->type == JT_NAME && is_op(peek2(p), ".")) {
			next(p), next(p);
			const struct jj_tok *at = next(p);
			if (at->type != JT_NAME)
				unexpected(p, at, "an attribute name");
			expect_op(p, "=");
			x = node(p, JN_SETATTR, t->line);
			x->s = nm->p, x->sn = nm->n;
			x->s2 = at->p, x->s2n = at->n;
			x->a = tuple_expr(p, 1);
		} else {
			struct kids k = {0};
			targets(p, &k);
			if (is_op(peek(p), "=")) {
				next(p);
				x = node(p, JN_SET, t->line);
				kids_to(x, &k);
				x->a = tuple_expr(p, 1);
			} else {
				static const char *const e[] = {"endset", NULL};
				if (k.n != 1)
					unexpected(p, peek(p), "'='");
				x = node(p, JN_SETBLOCK, t->line);
				x->s = k.v[0]->s, x->sn = k.v[0]->sn;
				struct kids f = {0};
				if (is_op(peek(p), "|")) {
					next(p);
					filter_chain(p, &f);
				}
				kids_to(x, &f);
				block_end(p);
				x->c = body(p, e, &end);
			}
		}
	} else if (is_name(t, "macro")) {
		static const char *const e[] = {"endmacro", NULL};
		const struct jj_tok *nm = next(p);
		if (nm->type != JT_NAME)
			unexpected(p, nm, "a macro name");
		x = node(p, JN_MACRO, t->line);
		x->s = nm->p, x->sn = nm->n;
		struct kids k = {0};
		expect_op(p, "(");
		while (!is_op(peek(p), ")")) {
			if (k.n)
				expect_op(p, ",");
			const struct jj_tok *a = next(p);
			if (a->type != JT_NAME)
				unexpected(p, a, "a parameter name");
			struct jj_node *pn = node(p, JN_NAME, a->line);
			pn->s = a->p, pn->sn = a->n;
			if (is_op(peek(p), "=")) {
				next(p);
				pn->a = expr(p);
			}
			kid_add(p, &k, pn, NULL, 0);
		}
		next(p);
		kids_to(x, &k);
		block_end(p);
		x->c = body(p, e, &end);
		if (peek(p)->type == JT_NAME) /* {% endmacro name %} */
			next(p);
	} else if (is_name(t, "break") || is_name(t, "continue")) {
		x = node(p, is_name(t, "break") ? JN_BREAK : JN_CONTINUE,
			 t->line);
	} else if (is_name(t, "generation")) {
		static const char *const e[] = {"endgeneration", NULL};
		x = node(p, JN_GENERATION, t->line);
		block_end(p);
		x->c = body(p, e, &end);
	} else if (is_name(t, "filter")) {
		static const char *const e[] = {"endfilter", NULL};
		x = node(p, JN_FILTERBLOCK, t->line);
		struct kids f = {0};
		filter_chain(p, &f);
		kids_to(x, &f);
		block_end(p);
		x->c = body(p, e, &end);
	} else {
		jj_fail(&p->c->err, t->line, "unknown tag '%.*s'", (int)t->n,
			t->p);
	}
	block_end(p);
	p->depth--;
	return x;
}

/* Nodes up to one of ends (a {% name %} tag, its name left in *end and
 * consumed), or the end of the template when ends is NULL. */
static struct jj_node *body(struct parser *p, const char *const *ends,
			    const struct jj_tok **end)
{
	struct jj_node *b = node(p, JN_BODY, peek(p)->line);
	struct kids k = {0};
	int line0 = peek(p)->line;
	for (;;) {
		const struct jj_tok *t = peek(p);
		if (t->type == JT_EOF) {
			if (ends)
				jj_fail(&p->c->err, t->line,
					"unexpected end of template: the "
					"block opened on line %d wants '%s'",
					line0, ends[0]);
			break;
		}
		next(p);
		if (t->type == JT_DATA) {
			struct jj_node *x = node(p, JN_TEXT, t->line);
			x->s = t->p, x->sn = t->n;
			kid_add(p, &k, x, NULL, 0);
		} else if (t->type == JT_VBEGIN) {
			struct jj_node *x = node(p, JN_OUTPUT, t->line);
			x->a = tuple_expr(p, 1);
			expect_type(p, JT_VEND, "end of print statement");
			kid_add(p, &k, x, NULL, 0);
		} else if (t->type == JT_BBEGIN) {
			const struct jj_tok *nm = peek(p);
			int hit = 0;
			for (int i = 0; ends && ends[i]; i++)
				hit |= is_name(nm, ends[i]);
			if (hit) {
				next(p);
				*end = nm;
				break;
			}
			if (nm->type == JT_NAME &&
			    (!memcmp(nm->p, "end", 3 < nm->n ? 3 : nm->n) ||
			     is_name(nm, "elif") || is_name(nm, "else")))
				jj_fail(&p->c->err, nm->line,
					"unexpected '%.*s'%s%s", (int)nm->n,
					nm->p, ends ? ": the block wants " : "",
					ends ? ends[0] : "");
			kid_add(p, &k, statement(p), NULL, 0);
		} else {
			unexpected(p, t, "template data or a tag");
		}
	}
	kids_to(b, &k);
	return b;
}

struct jj_node *jj_parse(struct jj_ctx *c, const struct jj_toks *t)
{
	struct parser p = {.c = c, .t = t->v, .n = t->n};
	return body(&p, NULL, NULL);
}
