/*
 * td_render.c - instruction and chat records as masked segments.
 *
 * Single-turn formats (alpaca, samsum, grammar) use torchtune's prompts
 * and torchtune's framing: BOS + prompt + response + EOS, the response
 * and the EOS that ends it being the targets. Chat formats (ShareGPT
 * `conversations`, OpenAI `messages`) go through the model's chat format
 * (Llama 3 headers, Llama 2 [INST], ChatML): the template's own special
 * tokens are control segments (encoded as the token), everything the
 * data holds is text (encoded with MG_TOK_NO_ADDED, so a "<|eot_id|>"
 * typed in a dataset stays text, as torchtune does). Assistant contents
 * and the token that ends them are the targets.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "textdata.h"

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 256;
	while (nc < need)
		nc *= 2;
	void *q = realloc(*p, nc * elem);
	if (!q)
		return mg_error("out of memory");
	*p = q;
	*cap = nc;
	return 0;
}

static int add_seg(struct td_sample *s, int kind, bool train, const char *t,
		   size_t n)
{
	size_t cs = (size_t)s->capseg;
	if (grow((void **)&s->text, &s->cap, s->len + n + 1, 1) ||
	    grow((void **)&s->seg, &cs, (size_t)s->nseg + 1, sizeof *s->seg))
		return -1;
	s->capseg = (int)cs;
	memcpy(s->text + s->len, t, n);
	struct td_seg *last = s->nseg ? &s->seg[s->nseg - 1] : NULL;
	if (kind != TD_SEG_CONTROL && last && last->kind == kind &&
	    last->train == train) {
		last->len += n;
	} else {
		s->seg[s->nseg++] = (struct td_seg){kind, train, s->len, n};
	}
	s->len += n;
	s->text[s->len] = 0;
	return 0;
}

int td_sample_text(struct td_sample *s, const char *t, size_t n, bool train)
{
	return n ? add_seg(s, TD_SEG_TEXT, train, t, n) : 0;
}

int td_sample_rendered(struct td_sample *s, const char *t, size_t n, bool train)
{
	return n ? add_seg(s, TD_SEG_RENDERED, train, t, n) : 0;
}

int td_sample_control(struct td_sample *s, const char *tok, bool train)
{
	return add_seg(s, TD_SEG_CONTROL, train, tok, strlen(tok));
}

static int text(struct td_sample *s, const char *t, bool train)
{
	return td_sample_text(s, t, strlen(t), train);
}

void td_sample_free(struct td_sample *s)
{
	free(s->text);
	free(s->seg);
	memset(s, 0, sizeof *s);
}

char *td_sample_join(const struct td_sample *s)
{
	char *r = malloc(s->len + 1);
	if (r) {
		memcpy(r, s->text ? s->text : "", s->len);
		r[s->len] = 0;
	}
	return r;
}

int td_columns_parse(const char *spec, struct td_columns *c)
{
	memset(c, 0, sizeof *c);
	const char *p = spec;
	while (p && *p) {
		const char *comma = strchr(p, ','),
			   *e = comma ? comma : p + strlen(p);
		const char *eq = memchr(p, '=', (size_t)(e - p));
		while (p < e && *p == ' ')
			p++;
		if (p == e) {
			p = comma ? comma + 1 : NULL;
			continue;
		}
		if (!eq || eq == p || eq + 1 >= e || c->n == TD_MAX_COLS ||
		    eq - p >= 64 || e - eq - 1 >= 64)
			return mg_error("columns: '%.*s' is not field=column "
					"(at most %d, names under 64 bytes)",
					(int)(e - p), p, TD_MAX_COLS);
		size_t a = (size_t)(eq - p), b = (size_t)(e - eq - 1);
		while (a && p[a - 1] == ' ')
			a--;
		const char *q = eq + 1;
		while (b && *q == ' ')
			q++, b--;
		while (b && q[b - 1] == ' ')
			b--;
		memcpy(c->from[c->n], p, a);
		memcpy(c->to[c->n], q, b);
		c->n++;
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}

const char *td_column(const struct td_columns *c, const char *field)
{
	for (int i = 0; c && i < c->n; i++)
		if (!strcmp(c->from[i], field))
			return c->to[i];
	return field;
}

static bool has(const cJSON *o, const struct td_columns *c, const char *f)
{
	return cJSON_GetObjectItemCaseSensitive(o, td_column(c, f)) != NULL;
}

int td_detect_format(const struct td_records *r, const struct td_columns *c,
		     enum td_format *out)
{
	const cJSON *o = r->rec[0];
	if (has(o, c, "chosen") && has(o, c, "rejected"))
		*out = TD_FMT_PREFERENCE;
	else if (has(o, c, "conversations"))
		*out = TD_FMT_SHAREGPT;
	else if (has(o, c, "messages"))
		*out = TD_FMT_MESSAGES;
	else if (has(o, c, "instruction"))
		*out = TD_FMT_ALPACA;
	else if (has(o, c, "dialogue"))
		*out = TD_FMT_SAMSUM;
	else if (has(o, c, "input") && has(o, c, "output"))
		*out = TD_FMT_GRAMMAR;
	else
		return mg_error("%s: cannot tell the format from the first "
				"sample's fields (want instruction/output, "
				"dialogue/summary, input/output, "
				"conversations, messages or chosen/rejected); "
				"set format = "
				"or map fields with columns =",
				r->path);
	return 0;
}

const char *td_template_name(enum td_template t)
{
	static const char *n[] = {"auto",   "llama3", "llama2",
				  "chatml", "none",   "model"};
	return n[t];
}

enum td_template td_pick_template(enum td_template want, const struct td_tok *t)
{
	if (want != TD_TPL_AUTO)
		return want;
	if (t->chat_template && t->apply_chat)
		return TD_TPL_MODEL;
	/* No chat_template (base models' configs): by the special tokens
	 * the vocabulary has; none known: unresolved (td_render_chat
	 * names the option), never a guess. */
	if (t->token_id(t->self, "<|start_header_id|>") >= 0)
		return TD_TPL_LLAMA3;
	if (t->token_id(t->self, "<|im_start|>") >= 0)
		return TD_TPL_CHATML;
	if (t->token_id(t->self, "[INST]") >= 0)
		return TD_TPL_LLAMA2;
	return TD_TPL_AUTO;
}

/* A required string field (through the column map). */
static int need(const struct td_records *r, int64_t i,
		const struct td_columns *c, const char *f, const char **out)
{
	const char *name = td_column(c, f);
	if (td_field(r, i, name, out))
		return -1;
	if (!*out) {
		if (r->line[i])
			return mg_error("%s:%lld: sample %lld has no field "
					"\"%s\"",
					r->path, (long long)r->line[i],
					(long long)i, name);
		return mg_error("%s: sample %lld has no field \"%s\"", r->path,
				(long long)i, name);
	}
	return 0;
}

static const char ALPACA_IN[] =
	"Below is an instruction that describes a task, paired with an input "
	"that provides further context. Write a response that appropriately "
	"completes the request.\n\n### Instruction:\n";
static const char ALPACA_NOIN[] =
	"Below is an instruction that describes a task. Write a response "
	"that appropriately completes the request.\n\n### Instruction:\n";

static int single(struct td_sample *s, const char *bos, const char *eos,
		  const char *const *prompt, const char *response)
{
	int rc = bos ? td_sample_control(s, bos, false) : 0;
	for (int k = 0; !rc && prompt[k]; k++)
		rc = text(s, prompt[k], false);
	if (!rc)
		rc = text(s, response, true);
	if (!rc && eos)
		rc = td_sample_control(s, eos, true);
	return rc;
}

static const char *role_name[] = {"system", "user", "assistant"};

/* An error about message k of sample i (of list `list` when given). */
static int err_at(const struct td_records *r, int64_t i, const char *list,
		  const char *what, int64_t k)
{
	char where[160] = "";
	if (list)
		snprintf(where, sizeof where, "\"%.60s\" ", list);
	if (r->line[i])
		return mg_error("%s:%lld: sample %lld: %smessage %lld: %s",
				r->path, (long long)r->line[i], (long long)i,
				where, (long long)k, what);
	return mg_error("%s: sample %lld: %smessage %lld: %s", r->path,
			(long long)i, where, (long long)k, what);
}

int td_messages(const struct td_records *r, int64_t i, const cJSON *a,
		const char *list, enum td_format fmt,
		const struct td_columns *c, bool name_list, struct td_msg **out,
		int64_t *nout)
{
	const char *rk = td_column(c, fmt == TD_FMT_SHAREGPT ? "from" : "role");
	const char *ck =
		td_column(c, fmt == TD_FMT_SHAREGPT ? "value" : "content");
	const char *ln = name_list ? list : NULL;
	if (!a || !cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0) {
		char buf[200];
		snprintf(buf, sizeof buf, "field \"%s\" is %s", list,
			 !a ? "missing" : "not a non-empty array");
		return err_at(r, i, NULL, buf, 0);
	}
	int64_t n = cJSON_GetArraySize(a), k = 0;
	struct td_msg *m = calloc((size_t)n, sizeof *m);
	if (!m)
		return mg_error("out of memory");
	const cJSON *e;
	cJSON_ArrayForEach(e, a)
	{
		const cJSON *ro = cJSON_GetObjectItemCaseSensitive(e, rk),
			    *co = cJSON_GetObjectItemCaseSensitive(e, ck);
		char buf[200];
		if (!cJSON_IsString(ro) || !cJSON_IsString(co)) {
			snprintf(buf, sizeof buf,
				 "not an object with string \"%s\" and \"%s\"",
				 rk, ck);
			free(m);
			return err_at(r, i, ln, buf, k);
		}
		const char *v = ro->valuestring;
		if (!strcmp(v, "system"))
			m[k].role = TD_ROLE_SYSTEM;
		else if (!strcmp(v, "human") || !strcmp(v, "user"))
			m[k].role = TD_ROLE_USER;
		else if (!strcmp(v, "gpt") || !strcmp(v, "assistant"))
			m[k].role = TD_ROLE_ASSISTANT;
		else {
			snprintf(buf, sizeof buf,
				 "role \"%.60s\" is not system, user/human "
				 "or assistant/gpt",
				 v);
			free(m);
			return err_at(r, i, ln, buf, k);
		}
		if (m[k].role == TD_ROLE_SYSTEM && k > 0) {
			free(m);
			return err_at(r, i, ln,
				      "a system message after the first", k);
		}
		m[k++].content = co->valuestring;
	}
	*out = m;
	*nout = n;
	return 0;
}

/* The messages of a ShareGPT or OpenAI record. */
static int messages(const struct td_records *r, int64_t i, enum td_format fmt,
		    const struct td_columns *c, struct td_msg **out,
		    int64_t *nout)
{
	const char *list = td_column(c, fmt == TD_FMT_SHAREGPT ? "conversations"
							       : "messages");
	return td_messages(r, i,
			   cJSON_GetObjectItemCaseSensitive(r->rec[i], list),
			   list, fmt, c, false, out, nout);
}

/* A target: an assistant message that is not part of the prompt. */
static bool trains(const struct td_msg *m)
{
	return m->role == TD_ROLE_ASSISTANT && !m->prompt;
}

static int chat_llama3(struct td_sample *s, const char *bos,
		       const struct td_msg *m, int64_t n)
{
	int rc = td_sample_control(s, bos ? bos : "<|begin_of_text|>", false);
	for (int64_t k = 0; !rc && k < n; k++) {
		bool tr = trains(&m[k]);
		rc = td_sample_control(s, "<|start_header_id|>", false) ||
		     text(s, role_name[m[k].role], false) ||
		     td_sample_control(s, "<|end_header_id|>", false) ||
		     text(s, "\n\n", false) || text(s, m[k].content, tr) ||
		     td_sample_control(s, "<|eot_id|>", tr);
	}
	return rc;
}

static int chat_llama2(struct td_sample *s, const char *bos, const char *eos,
		       const struct td_msg *m, int64_t n)
{
	const char *sys = NULL;
	int rc = 0;
	for (int64_t k = 0; !rc && k < n; k++) {
		if (m[k].role == TD_ROLE_SYSTEM) {
			sys = m[k].content;
		} else if (m[k].role == TD_ROLE_USER) {
			rc = td_sample_control(s, bos ? bos : "<s>", false) ||
			     text(s, "[INST] ", false);
			if (!rc && sys)
				rc = text(s, "<<SYS>>\n", false) ||
				     text(s, sys, false) ||
				     text(s, "\n<</SYS>>\n\n", false);
			sys = NULL;
			rc = rc || text(s, m[k].content, false) ||
			     text(s, " [/INST]", false);
		} else {
			rc = text(s, " ", true) ||
			     text(s, m[k].content, true) ||
			     text(s, " ", true) ||
			     td_sample_control(s, eos ? eos : "</s>", true);
		}
	}
	return rc;
}

static int chat_chatml(struct td_sample *s, const struct td_msg *m, int64_t n)
{
	int rc = 0;
	for (int64_t k = 0; !rc && k < n; k++) {
		bool tr = trains(&m[k]);
		rc = td_sample_control(s, "<|im_start|>", false) ||
		     text(s, role_name[m[k].role], false) ||
		     text(s, "\n", false) || text(s, m[k].content, tr) ||
		     td_sample_control(s, "<|im_end|>", tr) ||
		     text(s, "\n", false);
	}
	return rc;
}

/* No chat format: contents one per line, BOS first, EOS after each
 * assistant reply. */
static int chat_none(struct td_sample *s, const char *bos, const char *eos,
		     const struct td_msg *m, int64_t n)
{
	int rc = bos ? td_sample_control(s, bos, false) : 0;
	for (int64_t k = 0; !rc && k < n; k++) {
		bool tr = trains(&m[k]);
		rc = text(s, m[k].content, tr) ||
		     (tr && eos ? td_sample_control(s, eos, true) : 0) ||
		     (k + 1 < n ? text(s, "\n", false) : 0);
	}
	return rc;
}

int td_render_chat(enum td_template tpl, const struct td_tok *tok,
		   const struct td_msg *m, int64_t n, struct td_sample *s)
{
	const char *bos = tok ? tok->bos : NULL, *eos = tok ? tok->eos : NULL;
	switch (tpl) {
	case TD_TPL_MODEL:
		return td_render_model(tok, m, n, s);
	case TD_TPL_AUTO:
		return mg_error(
			"the tokenizer has no chat_template and none of "
			"the special tokens of a built-in chat format: "
			"set dataset.template = llama3|llama2|chatml|"
			"none");
	case TD_TPL_LLAMA3:
		return chat_llama3(s, bos, m, n);
	case TD_TPL_LLAMA2:
		return chat_llama2(s, bos, eos, m, n);
	case TD_TPL_CHATML:
		return chat_chatml(s, m, n);
	default:
		return chat_none(s, bos, eos, m, n);
	}
}

int td_render_single(struct td_sample *s, const char *bos, const char *eos,
		     const char *prompt, const char *response)
{
	const char *p[] = {prompt, NULL};
	return single(s, bos, eos, p, response);
}

int td_render(const struct td_records *r, int64_t i, enum td_format fmt,
	      enum td_template tpl, const struct td_columns *c,
	      const struct td_tok *tok, struct td_sample *s)
{
	const char *bos = tok ? tok->bos : NULL, *eos = tok ? tok->eos : NULL;
	s->len = 0;
	s->nseg = 0;
	if (s->text)
		s->text[0] = 0;
	const char *a = NULL, *b = NULL, *o = NULL;
	switch (fmt) {
	case TD_FMT_ALPACA: {
		if (need(r, i, c, "instruction", &a) ||
		    td_field(r, i, td_column(c, "input"), &b) ||
		    need(r, i, c, "output", &o))
			return -1;
		bool in = b && b[0];
		const char *p[] = {in ? ALPACA_IN : ALPACA_NOIN, a,
				   in ? "\n\n### Input:\n" : "", in ? b : "",
				   "\n\n### Response:\n",	 NULL};
		return single(s, bos, eos, p, o);
	}
	case TD_FMT_SAMSUM: {
		if (need(r, i, c, "dialogue", &a) ||
		    need(r, i, c, "summary", &o))
			return -1;
		const char *p[] = {"Summarize this dialogue:\n", a,
				   "\n---\nSummary:\n", NULL};
		return single(s, bos, eos, p, o);
	}
	case TD_FMT_GRAMMAR: {
		if (need(r, i, c, "input", &a) || need(r, i, c, "output", &o))
			return -1;
		const char *p[] = {"Correct this to standard English: ", a,
				   "\n---\nCorrected: ", NULL};
		return single(s, bos, eos, p, o);
	}
	case TD_FMT_SHAREGPT:
	case TD_FMT_MESSAGES: {
		struct td_msg *m = NULL;
		int64_t n = 0;
		if (messages(r, i, fmt, c, &m, &n))
			return -1;
		int rc = td_render_chat(tpl, tok, m, n, s);
		free(m);
		return rc;
	}
	default:
		return mg_error("td_render: format not resolved");
	}
}
