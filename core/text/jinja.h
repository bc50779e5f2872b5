/*
 * jinja.h - the chat-template interpreter's internals, shared by its four
 * files: jinja_lex.c (source to tokens, with jinja2's whitespace rules),
 * jinja_parse.c (tokens to a tree), jinja_value.c (values, the arena they
 * live in, Python's str/repr/json.dumps of them) and jinja_eval.c (the
 * tree rendered against variables). Users see include/mg/chat.h only.
 *
 * The dialect is jinja2 3.1 as transformers' apply_chat_template sets it
 * up: ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the
 * loopcontrols extension, transformers' {% generation %} tag, its tojson
 * filter and its raise_exception / strftime_now globals.
 *
 * Memory: a parsed template's nodes live in the template's arena; a
 * render's values live in a per-render arena with a byte cap, freed in
 * one go, so values need no reference counts and an error unwinds with
 * longjmp without leaking. A parsed template is read-only while it
 * renders: renders may run on many threads at once.
 */
#ifndef MG_JINJA_H
#define MG_JINJA_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds that keep a hostile template from exhausting the machine. */
#define JJ_MAX_DEPTH 200	    /* nested expressions / statements */
#define JJ_MAX_CALL_DEPTH 40	    /* nested macro calls */
#define JJ_MAX_OUTPUT (64u << 20)   /* bytes rendered */
#define JJ_MAX_ARENA (512ull << 20) /* bytes of values per render */
#define JJ_MAX_STEPS 1000000ll	    /* loop iterations + macro calls */
#define JJ_MAX_SOURCE (16u << 20)   /* template bytes */

/* ---- arena ---- */
struct jj_chunk;
struct jj_arena {
	struct jj_chunk *head;
	size_t used, cap; /* bytes taken from malloc, the limit */
};
/* NULL when the cap would be passed or malloc fails. */
void *jj_arena_alloc(struct jj_arena *a, size_t n);
void jj_arena_free(struct jj_arena *a);

/* ---- values ---- */
enum jj_kind {
	JV_UNDEF, /* jinja2's default Undefined; s holds its name */
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,
	JV_LIST, /* also tuples (l->tuple) */
	JV_DICT,
	JV_NS,	  /* namespace(): a dict whose attributes can be set */
	JV_MACRO, /* a {% macro %} and the scope it was defined in */
	JV_FUNC,  /* a global function: range, namespace, ... */
	JV_LOOP,  /* the `loop` variable of a for */
};

struct jj_list;
struct jj_dict;
struct jj_loop;
struct jj_frame;
struct jj_node;

struct jj_val {
	uint8_t k;
	union {
		int64_t i; /* BOOL, INT, FUNC */
		double f;
		struct {
			const char *p;
			size_t n;
		} s; /* STR; UNDEF's name (may be empty) */
		struct jj_list *l;
		struct jj_dict *d; /* DICT, NS */
		struct {
			const struct jj_node *node;
			struct jj_frame *fr;
		} m;
		struct jj_loop *lp;
	} u;
};

struct jj_list {
	size_t n;
	int tuple;
	struct jj_val *v;
};
struct jj_dict {
	size_t n, cap;
	struct jj_val *key, *val;
};

struct jj_loop {
	struct jj_list *items;
	int64_t index0;
	int depth;
};

/* Errors: jj_fail formats "line N: ..." into the state and longjmps. */
struct jj_err {
	jmp_buf jb;
	char msg[512];
	int syntax; /* 1: a syntax error */
};
#if defined(__GNUC__)
#define JJ_NORETURN __attribute__((noreturn))
#define JJ_FMT(a, b) __attribute__((format(printf, a, b)))
#else
#define JJ_NORETURN
#define JJ_FMT(a, b)
#endif
JJ_NORETURN JJ_FMT(3, 4) void jj_fail(struct jj_err *e, int line,
				      const char *fmt, ...);

/* The per-render context the value helpers need: the arena and where
 * errors go. */
struct jj_ctx {
	struct jj_arena arena;
	struct jj_err err;
};

void *jj_alloc(struct jj_ctx *c, int line, size_t n);
struct jj_val jj_undef(const char *name, size_t n);
struct jj_val jj_none(void);
struct jj_val jj_bool(int b);
struct jj_val jj_int(int64_t i);
struct jj_val jj_float(double f);
struct jj_val jj_str(const char *p, size_t n); /* no copy */
struct jj_val jj_strdup(struct jj_ctx *c, int line, const char *p, size_t n);
struct jj_val jj_strz(const char *z); /* a static C string */
struct jj_list *jj_list_new(struct jj_ctx *c, int line, size_t n);
struct jj_dict *jj_dict_new(struct jj_ctx *c, int line, size_t cap);
/* Insert or replace; keys compare as Python's ==. */
void jj_dict_set(struct jj_ctx *c, int line, struct jj_dict *d, struct jj_val k,
		 struct jj_val v);
/* The value or NULL. */
struct jj_val *jj_dict_get(const struct jj_dict *d, struct jj_val k);
struct jj_val *jj_dict_getz(const struct jj_dict *d, const char *key, size_t n);

int jj_truthy(struct jj_val v);
int jj_eq(struct jj_val a, struct jj_val b);
/* <0, 0, >0; fails on types Python cannot order. */
int jj_cmp(struct jj_ctx *c, int line, struct jj_val a, struct jj_val b);
const char *jj_type_name(struct jj_val v);
int jj_is_num(struct jj_val v); /* bool, int, float */
double jj_num(struct jj_val v);

/* A growable string in the arena. */
struct jj_buf {
	char *p;
	size_t n, cap;
};
void jj_buf_put(struct jj_ctx *c, int line, struct jj_buf *b, const char *s,
		size_t n);
void jj_buf_putz(struct jj_ctx *c, int line, struct jj_buf *b, const char *z);
struct jj_val jj_buf_val(struct jj_buf *b);

/* Python's str(v) and repr(v) appended to b. */
void jj_str_of(struct jj_ctx *c, int line, struct jj_buf *b, struct jj_val v);
void jj_repr_of(struct jj_ctx *c, int line, struct jj_buf *b, struct jj_val v);
struct jj_val jj_to_str(struct jj_ctx *c, int line, struct jj_val v);
/* json.dumps(v, ensure_ascii, indent (<0: None; or the string istr),
 * separators (NULL: the default), sort_keys). */
struct jj_json_opts {
	int ensure_ascii, sort_keys;
	const char *indent; /* NULL: no indent */
	size_t indent_n;
	const char *item_sep, *key_sep; /* NULL: the defaults */
	size_t item_sep_n, key_sep_n;
};
void jj_json_dump(struct jj_ctx *c, int line, struct jj_buf *b, struct jj_val v,
		  const struct jj_json_opts *o, int level);
/* Python's repr of a float. */
void jj_float_repr(double f, char *out, size_t cap);

/* UTF-8 helpers: the length of the character at p (1 for a bad byte),
 * its code point, Python's str.isspace of it. */
size_t jj_u8len(const char *p, size_t n);
uint32_t jj_u8cp(const char *p, size_t n);
int jj_u8space(const char *p, size_t n, size_t *len);
size_t jj_u8count(const char *p, size_t n);

/* ---- tokens ---- */
enum jj_tok_type {
	JT_DATA,
	JT_VBEGIN,
	JT_VEND,
	JT_BBEGIN,
	JT_BEND,
	JT_NAME,
	JT_STR,
	JT_INT,
	JT_FLOAT,
	JT_OP,
	JT_EOF,
};
struct jj_tok {
	int type, line;
	const char *p; /* DATA, NAME, OP: the text; STR: decoded */
	size_t n;
	int64_t i;
	double f;
};
struct jj_toks {
	struct jj_tok *v;
	size_t n, cap;
};
/* Tokenize src (already newline-normalized); tokens' strings point into
 * src or the arena. Fails through c->err. */
void jj_lex(struct jj_ctx *c, const char *src, size_t n, struct jj_toks *out);

/* ---- the tree ---- */
enum jj_node_kind {
	/* statements */
	JN_BODY,    /* kids */
	JN_TEXT,    /* s */
	JN_OUTPUT,  /* a */
	JN_IF,	    /* a cond, b then, c else (a BODY or an IF for elif) */
	JN_FOR,	    /* kids targets (NAMEs), a iter, b filter, c body, d else */
	JN_SET,	    /* kids targets, a value */
	JN_SETATTR, /* s name, s2 attr, a value */
	JN_SETBLOCK, /* s name, c body, kids filters (FILTER nodes, a=NULL) */
	JN_MACRO,    /* s name, kids params (NAME, a default), c body */
	JN_BREAK,
	JN_CONTINUE,
	JN_GENERATION,	/* c body */
	JN_FILTERBLOCK, /* c body, kids filters */
	/* expressions */
	JN_LIT,	   /* lit */
	JN_NAME,   /* s */
	JN_LIST,   /* kids */
	JN_TUPLE,  /* kids */
	JN_DICT,   /* kids: key, value, key, value... */
	JN_ATTR,   /* a obj, s name */
	JN_ITEM,   /* a obj, b index */
	JN_SLICE,  /* a obj, kids[0..2] start, stop, step (NULL when absent) */
	JN_CALL,   /* a callee, kids args (kw names in kw) */
	JN_FILTER, /* a operand, s name, kids args */
	JN_TEST,   /* a operand, s name, kids args, op 1 for `is not` */
	JN_NEG,
	JN_POS,
	JN_NOT,
	JN_AND,
	JN_OR,
	JN_BIN,	 /* op: + - * / F(//) % P(**) ~ */
	JN_CMP,	 /* a first, kids operands, ops in cmpops */
	JN_COND, /* a cond, b then, c else (NULL: undefined) */
};

enum jj_cmp_op { JC_EQ, JC_NE, JC_LT, JC_LE, JC_GT, JC_GE, JC_IN, JC_NOTIN };

struct jj_node {
	int kind, line, op;
	const char *s, *s2;
	size_t sn, s2n;
	struct jj_val lit;
	struct jj_node *a, *b, *c, *d;
	struct jj_node **kids;
	const char **kw; /* CALL/FILTER/TEST: keyword names, NULL: positional */
	size_t *kwn;
	int nkids;
	uint8_t *cmpops;
};

/* Parse tokens into a JN_BODY. */
struct jj_node *jj_parse(struct jj_ctx *c, const struct jj_toks *t);

/* ---- rendering ---- */
struct jj_span {
	size_t start, end;
};
struct jj_spans {
	struct jj_span *v;
	size_t n, cap;
};
/* Render root with the variables in vars (a DICT, names to values) into
 * out; {% generation %} spans, byte offsets in out, appended to spans
 * when it is not NULL. Fails through c->err. */
void jj_render(struct jj_ctx *c, const struct jj_node *root,
	       struct jj_dict *vars, struct jj_buf *out,
	       struct jj_spans *spans);

#endif
