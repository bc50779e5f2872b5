/*
 * chat_template.c - the public face of the chat-template interpreter
 * (include/mg/chat.h): parse a template once (newlines normalized and one
 * trailing newline dropped, as jinja2 does), render it against variables
 * given as JSON (read with cJSON into the interpreter's values), and the
 * tokenizer's own template with tokenizer_config.json's special tokens
 * as variables, as transformers' apply_chat_template passes them.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "mg/chat.h"
#include "mg/log.h"
#include "tok_internal.h"

struct mg_chat_template {
	struct jj_ctx c; /* its arena holds the source, tokens and tree */
	const struct jj_node *root;
};

/* Run fn(arg) with c's error jump set: 0, or -1 when it failed (the
 * message in c->err.msg). Nothing of the caller's lives across the
 * setjmp. */
static int guarded(struct jj_ctx *c, void (*fn)(void *), void *arg)
{
	if (setjmp(c->err.jb))
		return -1;
	fn(arg);
	return 0;
}

struct parse_job {
	struct mg_chat_template *t;
	const char *src;
	size_t len;
};

static void parse_job(void *arg)
{
	struct parse_job *p = arg;
	struct mg_chat_template *t = p->t;
	const char *src = p->src;
	size_t len = p->len;
	/* \r\n and \r become \n; one trailing newline goes
	 * (keep_trailing_newline=False) */
	char *s = jj_alloc(&t->c, 0, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[n++] = src[i];
		}
	}
	if (n && s[n - 1] == '\n')
		n--;
	s[n] = 0;
	struct jj_toks toks = {0};
	jj_lex(&t->c, s, n, &toks);
	t->root = jj_parse(&t->c, &toks);
}

struct mg_chat_template *mg_chat_template_parse(const char *src, size_t len)
{
	if (len > JJ_MAX_SOURCE) {
		mg_error("chat template: %zu bytes, more than the %u MiB "
			 "allowed",
			 len, JJ_MAX_SOURCE >> 20);
		return NULL;
	}
	struct mg_chat_template *t = calloc(1, sizeof *t);
	if (!t) {
		mg_error("chat template: out of memory");
		return NULL;
	}
	t->c.arena.cap = JJ_MAX_ARENA;
	struct parse_job job = {t, src, len};
	if (guarded(&t->c, parse_job, &job)) {
		mg_error("chat template %s", t->c.err.msg);
		mg_chat_template_free(t);
		return NULL;
	}
	return t;
}

void mg_chat_template_free(struct mg_chat_template *t)
{
	if (!t)
		return;
	jj_arena_free(&t->c.arena);
	free(t);
}

/* A cJSON value as an interpreter value. Numbers are ints when integral
 * and exact in a double (cJSON keeps no text). */
static struct jj_val from_json(struct jj_ctx *c, const cJSON *j, int depth)
{
	if (depth > JJ_MAX_DEPTH)
		jj_fail(&c->err, 0, "the variables nest too deeply");
	if (cJSON_IsNull(j))
		return jj_none();
	if (cJSON_IsBool(j))
		return jj_bool(cJSON_IsTrue(j));
	if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		if (d == floor(d) && fabs(d) <= 9007199254740992.0)
			return jj_int((int64_t)d);
		return jj_float(d);
	}
	if (cJSON_IsString(j))
		return jj_strdup(c, 0, j->valuestring, strlen(j->valuestring));
	if (cJSON_IsArray(j)) {
		struct jj_list *l =
			jj_list_new(c, 0, (size_t)cJSON_GetArraySize(j));
		size_t i = 0;
		const cJSON *e;
		cJSON_ArrayForEach(e, j) l->v[i++] = from_json(c, e, depth + 1);
		struct jj_val v = {.k = JV_LIST};
		v.u.l = l;
		return v;
	}
	struct jj_val v = {.k = JV_DICT};
	v.u.d = jj_dict_new(c, 0, (size_t)cJSON_GetArraySize(j));
	const cJSON *e;
	cJSON_ArrayForEach(e, j)
	{
		jj_dict_set(c, 0, v.u.d,
			    jj_strdup(c, 0, e->string, strlen(e->string)),
			    from_json(c, e, depth + 1));
	}
	return v;
}

struct render_job {
	struct jj_ctx *c;
	const struct mg_chat_template *t;
	const cJSON *vars, *dflt;
	struct jj_buf out;
	struct jj_spans spans;
	int want_spans;
};

static void render_job(void *arg)
{
	struct render_job *p = arg;
	struct jj_ctx *c = p->c;
	struct jj_val v = from_json(c, p->vars, 0);
	if (p->dflt) {
		struct jj_val dv = from_json(c, p->dflt, 0);
		for (size_t i = 0; i < dv.u.d->n; i++)
			if (!jj_dict_get(v.u.d, dv.u.d->key[i]))
				jj_dict_set(c, 0, v.u.d, dv.u.d->key[i],
					    dv.u.d->val[i]);
	}
	jj_render(c, p->t->root, v.u.d, &p->out,
		  p->want_spans ? &p->spans : NULL);
}

/* Render with the variables of vars (a JSON object) and, under them,
 * the JSON object dflt (defaults the caller's variables override). */
static int render(const struct mg_chat_template *t, const char *vars,
		  size_t len, const char *dflt, char **out, size_t *out_len,
		  struct mg_chat_span **spans, size_t *nspans)
{
	*out = NULL;
	if (spans)
		*spans = NULL, *nspans = 0;
	cJSON *j = cJSON_ParseWithLength(vars, len);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return mg_error("chat template: the variables are not a JSON "
				"object");
	}
	struct render_job job = {.t = t, .vars = j, .want_spans = !!spans};
	job.dflt = dflt ? cJSON_Parse(dflt) : NULL;
	job.c = calloc(1, sizeof *job.c);
	int rc = 0;
	if (!job.c) {
		rc = mg_error("chat template: out of memory");
		goto done;
	}
	job.c->arena.cap = JJ_MAX_ARENA;
	if (guarded(job.c, render_job, &job)) {
		rc = mg_error("chat template %s", job.c->err.msg);
		goto done;
	}
	struct jj_buf *b = &job.out;
	*out = malloc(b->n + 1);
	if (!*out) {
		rc = mg_error("chat template: out of memory");
		goto done;
	}
	if (b->n)
		memcpy(*out, b->p, b->n);
	(*out)[b->n] = 0;
	if (out_len)
		*out_len = b->n;
	if (spans && job.spans.n) {
		*spans = malloc(job.spans.n * sizeof **spans);
		if (!*spans) {
			free(*out);
			*out = NULL;
			rc = mg_error("chat template: out of memory");
			goto done;
		}
		for (size_t i = 0; i < job.spans.n; i++)
			(*spans)[i].start = job.spans.v[i].start,
			(*spans)[i].end = job.spans.v[i].end;
		*nspans = job.spans.n;
	}
done:
	if (job.c)
		jj_arena_free(&job.c->arena);
	free(job.c);
	cJSON_Delete(j);
	cJSON_Delete((cJSON *)job.dflt);
	return rc;
}

int mg_chat_template_render(const struct mg_chat_template *t,
			    const char *vars_json, size_t len, char **out,
			    size_t *out_len, struct mg_chat_span **spans,
			    size_t *nspans)
{
	return render(t, vars_json, len, NULL, out, out_len, spans, nspans);
}

int tok_chat_setup(struct mg_tokenizer *t, const cJSON *cfg)
{
	static const char *const names[] = {
		"bos_token",  "eos_token",
		"unk_token",  "sep_token",
		"pad_token",  "cls_token",
		"mask_token", "additional_special_tokens"};
	cJSON *vars = cJSON_CreateObject();
	if (!vars)
		return mg_error("tokenizer: out of memory");
	cJSON_AddNullToObject(vars, "tools");
	cJSON_AddNullToObject(vars, "documents");
	cJSON_AddFalseToObject(vars, "add_generation_prompt");
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		const cJSON *x =
			cfg ? cJSON_GetObjectItemCaseSensitive(cfg, names[i])
			    : NULL;
		if (cJSON_IsObject(x)) /* an AddedToken */
			x = cJSON_GetObjectItemCaseSensitive(x, "content");
		if (cJSON_IsString(x)) {
			cJSON_AddStringToObject(vars, names[i], x->valuestring);
		} else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) > 0) {
			/* special_tokens_map leaves out empty lists */
			cJSON *l = cJSON_AddArrayToObject(vars, names[i]);
			const cJSON *e;
			cJSON_ArrayForEach(e, x)
			{
				const cJSON *s =
					cJSON_IsObject(e)
						? cJSON_GetObjectItemCaseSensitive(
							  e, "content")
						: e;
				if (l && cJSON_IsString(s))
					cJSON_AddItemToArray(
						l, cJSON_CreateString(
							   s->valuestring));
			}
		} else if (!cfg && i < 3) { /* no config: what load found */
			int32_t id = i == 0   ? t->sp.bos
				     : i == 1 ? t->sp.eos
					      : t->sp.unk;
			const char *s = mg_tokenizer_token(t, id);
			if (s)
				cJSON_AddStringToObject(vars, names[i], s);
		}
	}
	t->chat_vars = cJSON_PrintUnformatted(vars);
	cJSON_Delete(vars);
	if (!t->chat_vars)
		return mg_error("tokenizer: out of memory");
	if (t->chat_template) {
		t->chat = mg_chat_template_parse(t->chat_template,
						 strlen(t->chat_template));
		/* a template that does not parse fails when applied, not at
		 * load: the tokenizer is still good for plain text */
		if (!t->chat && !(t->chat_err = strdup(mg_last_error())))
			return mg_error("tokenizer: out of memory");
	}
	return 0;
}

int mg_tokenizer_apply_chat_template(const struct mg_tokenizer *t,
				     const char *request_json, size_t len,
				     char **out, size_t *out_len,
				     struct mg_chat_span **spans,
				     size_t *nspans)
{
	*out = NULL;
	if (spans)
		*spans = NULL, *nspans = 0;
	if (!t->chat_template) {
		mg_error("the tokenizer has no chat_template in "
			 "tokenizer_config.json");
		return -2;
	}
	if (!t->chat) {
		mg_error("%s", t->chat_err);
		return -2;
	}
	return render(t->chat, request_json, len, t->chat_vars, out, out_len,
		      spans, nspans)
		       ? -1
		       : 0;
}
