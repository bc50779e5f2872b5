/*
 * td_render_model.c - chat messages through the model's own template
 * (template = model, the default when tokenizer_config.json has a
 * chat_template): the Jinja chat_template rendered as transformers'
 * apply_chat_template renders it (mg/chat.h), cut into masked segments.
 *
 * Targets: the template's {% generation %} blocks when it has them (as
 * transformers' return_assistant_tokens_mask), else each trained
 * assistant turn found by rendering prefixes: the turn starts where
 * messages[:i] with the generation prompt ends, so the header the prompt
 * already ends with stays a prompt, and it ends after the message's
 * content and the end-of-turn token that follows (<|eot_id|>,
 * <|im_end|>, the EOS...), the token that teaches the model to stop. A
 * template that renders earlier turns differently once later turns
 * follow has no such prefixes: refused, naming the ways out.
 *
 * Tokens: the rendering encoded with its special tokens matched, as
 * transformers tokenizes a rendered chat, cut only where targets begin
 * and end; but a message's content that holds a special token's string
 * (found verbatim in the rendering) is encoded as data text (added
 * tokens not matched): a "<|eot_id|>" typed in a dataset stays text, as
 * with the built-in templates. SentencePiece tokenizers (a word boundary
 * before every encode) drop a cut piece's leading space as the built-in
 * templates' pieces do (td_corpus.c).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "textdata.h"

static const char *const role_name[] = {"system", "user", "assistant"};

/* messages[0..n) as apply_chat_template's request, rendered. */
static int render(const struct td_tok *t, const struct td_msg *m, int64_t n,
		  bool gen_prompt, char **out, size_t *len,
		  struct mg_chat_span **sp, size_t *nsp)
{
	cJSON *req = cJSON_CreateObject(),
	      *a = req ? cJSON_AddArrayToObject(req, "messages") : NULL;
	for (int64_t k = 0; a && k < n; k++) {
		cJSON *o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(a, o) ||
		    !cJSON_AddStringToObject(o, "role", role_name[m[k].role]) ||
		    !cJSON_AddStringToObject(o, "content", m[k].content))
			a = NULL;
	}
	if (a &&
	    !cJSON_AddBoolToObject(req, "add_generation_prompt", gen_prompt))
		a = NULL;
	char *js = a ? cJSON_PrintUnformatted(req) : NULL;
	cJSON_Delete(req);
	if (!js)
		return mg_error("out of memory");
	int rc = t->apply_chat(t->self, js, strlen(js), out, len, sp, nsp);
	free(js);
	return rc == 0 ? 0 : -1;
}

/* Byte ranges [a, b), growing. */
struct ranges {
	size_t (*r)[2];
	size_t n, cap;
};

static int push(struct ranges *g, size_t a, size_t b)
{
	if (a >= b)
		return 0;
	if (g->n == g->cap) {
		size_t nc = g->cap ? 2 * g->cap : 16;
		void *p = realloc(g->r, nc * sizeof *g->r);
		if (!p)
			return mg_error("out of memory");
		g->r = p;
		g->cap = nc;
	}
	g->r[g->n][0] = a;
	g->r[g->n++][1] = b;
	return 0;
}

static bool inside(const struct ranges *g, size_t at)
{
	for (size_t k = 0; k < g->n; k++)
		if (at >= g->r[k][0] && at < g->r[k][1])
			return true;
	return false;
}

/* The end-of-turn tokens templates close an assistant turn with, when
 * the vocabulary has them: the EOS, Llama 3's, ChatML's, Phi's, Gemma's. */
static size_t turn_end(const struct td_tok *t, const char *F, size_t len,
		       size_t at)
{
	static const char *const known[] = {"<|eot_id|>", "<|im_end|>",
					    "<|end|>", "<end_of_turn>",
					    "<|endoftext|>"};
	size_t p = at;
	while (p < len && (F[p] == ' ' || F[p] == '\n'))
		p++;
	for (size_t k = 0; k <= sizeof known / sizeof *known; k++) {
		const char *e =
			k < sizeof known / sizeof *known ? known[k] : t->eos;
		const size_t n = e ? strlen(e) : 0;
		if (n && p + n <= len && !memcmp(F + p, e, n) &&
		    t->token_id(t->self, e) >= 0)
			return p + n;
	}
	return at;
}

/* Where content c (or it trimmed, as templates often print it) lies in
 * F from `from` on: its end, or 0 when it is not there. */
static size_t content_end(const char *F, size_t len, size_t from, const char *c)
{
	size_t cl = strlen(c);
	while (cl && strchr(" \t\n\r", c[cl - 1]))
		cl--;
	while (cl && strchr(" \t\n\r", *c))
		c++, cl--;
	if (!cl)
		return from;
	const char *at =
		from <= len ? memmem(F + from, len - from, c, cl) : NULL;
	return at ? (size_t)(at - F) + cl : 0;
}

/*
 * The trained assistant turns of F[0..len) without generation blocks:
 * turn i starts where messages[:i] with the generation prompt ends (it
 * must be a prefix of F) and ends after its content and the end-of-turn
 * token that follows it. Templates that always append the assistant
 * header (Llama 3's) and ones that add nothing after the turn are both
 * covered: only what the conversation itself renders is compared.
 */
static int turns_by_prefix(const struct td_tok *t, const struct td_msg *m,
			   int64_t n, const char *F, size_t len,
			   struct ranges *tr)
{
	for (int64_t i = 0; i < n; i++) {
		if (m[i].role != TD_ROLE_ASSISTANT || m[i].prompt)
			continue;
		char *P = NULL;
		size_t lp = 0;
		int rc = render(t, m, i, true, &P, &lp, NULL, NULL);
		size_t e = 0;
		if (!rc && (lp > len || memcmp(F, P, lp)))
			rc = mg_error(
				"the chat template renders the messages "
				"before message %lld (assistant) differently "
				"once it follows (it rewrites earlier turns, "
				"as templates that drop past reasoning do): "
				"give the template {%% generation %%} blocks, "
				"split the conversation, or set "
				"dataset.template = llama3|llama2|chatml|none",
				(long long)i);
		if (!rc && !(e = content_end(F, len, lp, m[i].content)))
			rc = mg_error("the chat template does not print "
				      "message %lld (assistant) as it is "
				      "(nor trimmed), so its tokens cannot "
				      "be found: set dataset.template = "
				      "llama3|llama2|chatml|none",
				      (long long)i);
		if (!rc)
			rc = push(tr, lp, turn_end(t, F, len, e));
		free(P);
		if (rc)
			return -1;
	}
	return 0;
}

/* Whether text encodes differently with added tokens matched: it holds
 * a special token's string (typed in the data). */
static int holds_special(const struct td_tok *t, const char *p, size_t n,
			 bool *out)
{
	struct mg_ids a = {0}, b = {0};
	int rc = t->encode(t->self, p, n, &a) ||
		 t->encode_rendered(t->self, p, n, &b);
	*out = !rc && (a.n != b.n || memcmp(a.v, b.v, (size_t)a.n * 4));
	free(a.v);
	free(b.v);
	return rc ? -1 : 0;
}

/* The messages' contents, where they lie verbatim in F (in order), that
 * hold a special token's string: those are encoded as data text, so a
 * typed "<|eot_id|>" stays text; the rest of F is encoded whole, as
 * transformers encodes the rendering. */
static int contents(const struct td_tok *t, const struct td_msg *m, int64_t n,
		    const char *F, size_t len, struct ranges *d)
{
	size_t from = 0;
	for (int64_t k = 0; k < n; k++) {
		/* as the template likely prints it: trimmed */
		const char *c = m[k].content;
		size_t cl = strlen(c);
		while (cl && strchr(" \t\n\r", c[cl - 1]))
			cl--;
		while (cl && strchr(" \t\n\r", *c))
			c++, cl--;
		bool sp;
		if (!cl || holds_special(t, c, cl, &sp))
			return cl ? -1 : 0;
		if (!sp)
			continue; /* encoded with the rendering */
		/* from where the messages before it render to (when that
		 * is a prefix of F), so the template's own tokens before it
		 * are never taken for it */
		char *P = NULL;
		size_t lp = 0;
		if (render(t, m, k, false, &P, &lp, NULL, NULL))
			return -1;
		if (lp <= len && !memcmp(F, P, lp) && lp > from)
			from = lp;
		free(P);
		const char *at = from <= len
					 ? memmem(F + from, len - from, c, cl)
					 : NULL;
		if (!at)
			continue; /* the template changed it */
		const size_t a = (size_t)(at - F);
		from = a + cl;
		if (push(d, a, a + cl))
			return -1;
	}
	return 0;
}

int td_render_model(const struct td_tok *t, const struct td_msg *m, int64_t n,
		    struct td_sample *s)
{
	if (!t || !t->apply_chat || !t->chat_template)
		return mg_error("template = model: the tokenizer has no "
				"chat_template (tokenizer_config.json); set "
				"dataset.template = llama3|llama2|chatml|none");
	char *F = NULL;
	size_t len = 0, nsp = 0;
	struct mg_chat_span *sp = NULL;
	struct ranges tr = {0}, d = {0};
	int rc = render(t, m, n, false, &F, &len, &sp, &nsp);
	/* generation blocks: the k-th is the k-th assistant message's, so
	 * those of prompt messages (a preference pair's shared history) are
	 * not targets; blocks that do not pair with the messages cannot
	 * tell which are */
	int64_t nasst = 0, prompts = 0;
	for (int64_t k = 0; k < n; k++)
		if (m[k].role == TD_ROLE_ASSISTANT) {
			nasst++;
			prompts += m[k].prompt;
		}
	if (!rc && nsp && prompts && (int64_t)nsp != nasst)
		rc = mg_error("the chat template's {%% generation %%} blocks "
			      "(%zu) do not pair with the %lld assistant "
			      "messages, so those of the prompt cannot be told "
			      "apart: set dataset.template = "
			      "llama3|llama2|chatml|none",
			      nsp, (long long)nasst);
	for (size_t k = 0, j = 0; !rc && k < nsp; k++) {
		while (prompts && j < (size_t)n &&
		       m[j].role != TD_ROLE_ASSISTANT)
			j++;
		const bool prompt = prompts && j < (size_t)n && m[j++].prompt;
		if (!prompt)
			rc = push(&tr, sp[k].start, sp[k].end);
	}
	if (!rc && !nsp)
		rc = turns_by_prefix(t, m, n, F, len, &tr);
	if (!rc)
		rc = contents(t, m, n, F, len, &d);
	/* cut F where a target or a content begins or ends */
	for (size_t a = 0; !rc && a < len;) {
		const bool train = inside(&tr, a), data = inside(&d, a);
		size_t b = a + 1;
		while (b < len && inside(&tr, b) == train &&
		       inside(&d, b) == data)
			b++;
		rc = data ? td_sample_text(s, F + a, b - a, train)
			  : td_sample_rendered(s, F + a, b - a, train);
		a = b;
	}
	free(F);
	free(sp);
	free(tr.r);
	free(d.r);
	return rc;
}
