/*
 * tok_components.c - tokenizer.json's normalizer, pre_tokenizer and
 * decoder objects into the flat step lists the encoder and decoder run
 * (Sequences are flattened). Anything not implemented is refused with its
 * type named, never skipped: a silently ignored component gives wrong ids.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "tok_internal.h"

static const char *jtype(const cJSON *j)
{
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
	return cJSON_IsString(ty) ? ty->valuestring : "(no type)";
}

static const char *jstr(const cJSON *j, const char *key)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
	return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* A boolean member, or def when absent. */
static int jbool(const cJSON *j, const char *key, int def)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
	return cJSON_IsBool(x) ? cJSON_IsTrue(x) : def;
}

static char *dup(const char *s)
{
	char *d = strdup(s ? s : "");
	if (!d)
		mg_error("tokenizer: out of memory");
	return d;
}

static void *grow(void *v, int n, size_t sz)
{
	void *r = realloc(v, (size_t)(n + 1) * sz);
	if (!r)
		mg_error("tokenizer: out of memory");
	return r;
}

/* The pattern object {"String": s} (or {"Regex": r} when allowed). */
static int pattern(const cJSON *j, const char *what, const char **str,
		   const char **re)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
	*str = jstr(p, "String");
	*re = jstr(p, "Regex");
	if (!*str && !*re)
		return mg_error("%s: pattern is neither String nor Regex",
				what);
	return 0;
}

int tok_parse_normalizer(struct mg_tokenizer *t, const cJSON *j)
{
	if (!j || cJSON_IsNull(j))
		return 0;
	const char *type = jtype(j);
	struct tok_norm n = {0};
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(
			c, cJSON_GetObjectItemCaseSensitive(j, "normalizers"))
		{
			if (tok_parse_normalizer(t, c))
				return -1;
		}
		return 0;
	} else if (!strcmp(type, "Prepend")) {
		n.type = TOK_N_PREPEND;
		if (!(n.a = dup(jstr(j, "prepend"))))
			return -1;
	} else if (!strcmp(type, "Replace")) {
		const char *s, *re;
		if (pattern(j, "normalizer Replace", &s, &re))
			return -1;
		if (!s)
			return mg_error("normalizer: unsupported type "
					"'Replace' with a Regex pattern");
		n.type = TOK_N_REPLACE;
		n.a = dup(s);
		n.b = dup(jstr(j, "content"));
		if (!n.a || !n.b)
			return -1;
	} else if (!strcmp(type, "Strip")) {
		n.type = TOK_N_STRIP;
		n.left = jbool(j, "strip_left", 1);
		n.right = jbool(j, "strip_right", 1);
	} else {
		return mg_error("normalizer: unsupported type '%s'", type);
	}
	struct tok_norm *v = grow(t->norm, t->nnorm, sizeof *v);
	if (!v)
		return -1;
	t->norm = v;
	v[t->nnorm++] = n;
	return 0;
}

static int behavior(const char *b, enum tok_behavior *out)
{
	static const struct {
		const char *name;
		enum tok_behavior b;
	} tab[] = {{"Removed", TOK_REMOVED},
		   {"Isolated", TOK_ISOLATED},
		   {"MergedWithPrevious", TOK_MERGED_PREV},
		   {"MergedWithNext", TOK_MERGED_NEXT},
		   {"Contiguous", TOK_CONTIGUOUS}};
	for (size_t i = 0; b && i < sizeof tab / sizeof *tab; i++)
		if (!strcmp(b, tab[i].name)) {
			*out = tab[i].b;
			return 0;
		}
	return mg_error("pre_tokenizer: Split: unknown behavior '%s'",
			b ? b : "(none)");
}

/* Metaspace's prepend_scheme, or the older add_prefix_space. */
static int prepend_scheme(const cJSON *j, int *out)
{
	const char *s = jstr(j, "prepend_scheme");
	if (!s) {
		*out = jbool(j, "add_prefix_space", 1) ? TOK_PREPEND_ALWAYS
						       : TOK_PREPEND_NEVER;
		return 0;
	}
	if (!strcmp(s, "always"))
		*out = TOK_PREPEND_ALWAYS;
	else if (!strcmp(s, "first"))
		*out = TOK_PREPEND_FIRST;
	else if (!strcmp(s, "never"))
		*out = TOK_PREPEND_NEVER;
	else
		return mg_error("Metaspace: unknown prepend_scheme '%s'", s);
	return 0;
}

static int replacement(const cJSON *j, char rep[8])
{
	const char *r = jstr(j, "replacement");
	if (!r)
		r = "\xE2\x96\x81"; /* U+2581 */
	if (strlen(r) >= 8)
		return mg_error("Metaspace: replacement '%s' is not one "
				"character",
				r);
	strcpy(rep, r);
	return 0;
}

/* The GPT-2 pattern ByteLevel(use_regex=true) splits with. */
static const char gpt2_re[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
	"\\s+(?!\\S)|\\s+";

int tok_parse_pretokenizer(struct mg_tokenizer *t, const cJSON *j)
{
	if (!j || cJSON_IsNull(j))
		return 0;
	const char *type = jtype(j);
	struct tok_pre p = {0};
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(
			c, cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"))
		{
			if (tok_parse_pretokenizer(t, c))
				return -1;
		}
		return 0;
	}
	/* the BPE model maps bytes itself, so nothing may split after */
	if (t->bytelevel)
		return mg_error("pre_tokenizer: unsupported '%s' after "
				"ByteLevel",
				type);
	if (!strcmp(type, "Split")) {
		const char *s, *re;
		if (pattern(j, "pre_tokenizer Split", &s, &re) ||
		    behavior(jstr(j, "behavior"), &p.behavior))
			return -1;
		p.type = TOK_P_SPLIT;
		p.invert = jbool(j, "invert", 0);
		if (re &&
		    (!(p.re = tok_regex_compile(re, "pre_tokenizer Split")) ||
		     !(p.pattern = dup(re))))
			return -1;
		if (s && !(p.literal = dup(s)))
			return -1;
	} else if (!strcmp(type, "ByteLevel")) {
		p.type = TOK_P_BYTELEVEL;
		p.add_prefix_space = jbool(j, "add_prefix_space", 1);
		if (jbool(j, "use_regex", 1) &&
		    (!(p.re = tok_regex_compile(gpt2_re, "ByteLevel")) ||
		     !(p.pattern = dup(gpt2_re))))
			return -1;
		t->bytelevel = 1;
	} else if (!strcmp(type, "Metaspace")) {
		p.type = TOK_P_METASPACE;
		p.split = jbool(j, "split", 1);
		if (replacement(j, p.rep) ||
		    prepend_scheme(j, &p.prepend_scheme))
			return -1;
	} else {
		return mg_error("pre_tokenizer: unsupported type '%s'", type);
	}
	struct tok_pre *v = grow(t->pre, t->npre, sizeof *v);
	if (!v)
		return -1;
	t->pre = v;
	v[t->npre++] = p;
	return 0;
}

int tok_parse_decoder(struct mg_tokenizer *t, const cJSON *j)
{
	if (!j || cJSON_IsNull(j))
		return 0;
	t->has_decoder = 1;
	const char *type = jtype(j);
	struct tok_dec d = {0};
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(
			c, cJSON_GetObjectItemCaseSensitive(j, "decoders"))
		{
			if (tok_parse_decoder(t, c))
				return -1;
		}
		return 0;
	} else if (!strcmp(type, "ByteLevel")) {
		d.type = TOK_D_BYTELEVEL;
	} else if (!strcmp(type, "Replace")) {
		const char *s, *re;
		if (pattern(j, "decoder Replace", &s, &re))
			return -1;
		if (!s)
			return mg_error("decoder: unsupported type 'Replace' "
					"with a Regex pattern");
		d.type = TOK_D_REPLACE;
		d.a = dup(s);
		d.b = dup(jstr(j, "content"));
		if (!d.a || !d.b)
			return -1;
	} else if (!strcmp(type, "ByteFallback")) {
		d.type = TOK_D_BYTEFALLBACK;
	} else if (!strcmp(type, "Fuse")) {
		d.type = TOK_D_FUSE;
	} else if (!strcmp(type, "Strip")) {
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "start");
		const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "stop");
		d.type = TOK_D_STRIP;
		if (!(d.a = dup(jstr(j, "content"))))
			return -1;
		d.start = cJSON_IsNumber(st) ? st->valueint : 0;
		d.stop = cJSON_IsNumber(sp) ? sp->valueint : 0;
	} else if (!strcmp(type, "Metaspace")) {
		d.type = TOK_D_METASPACE;
		if (replacement(j, d.rep) ||
		    prepend_scheme(j, &d.prepend_scheme))
			return -1;
	} else {
		return mg_error("decoder: unsupported type '%s'", type);
	}
	struct tok_dec *v = grow(t->dec, t->ndec, sizeof *v);
	if (!v)
		return -1;
	t->dec = v;
	v[t->ndec++] = d;
	return 0;
}
