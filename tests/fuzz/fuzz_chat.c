/*
 * fuzz_chat.c - libFuzzer target for the chat-template interpreter
 * (core/text/jinja_*.c): the input is a template, lexed, parsed and, when
 * it parses, rendered against a small conversation (two messages, a tool,
 * add_generation_prompt, the special tokens), as mgrun renders a
 * tokenizer_config.json's chat_template. Errors are fine; crashes,
 * sanitizer reports, leaks, hangs and unbounded memory are findings (the
 * interpreter caps loops, recursion, output and memory).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"

static void set(struct jj_ctx *c, struct jj_dict *d, const char *k,
		struct jj_val v)
{
	jj_dict_set(c, 0, d, jj_strz(k), v);
}

static struct jj_val message(struct jj_ctx *c, const char *role,
			     const char *content)
{
	struct jj_val m = {.k = JV_DICT};
	m.u.d = jj_dict_new(c, 0, 2);
	set(c, m.u.d, "role", jj_strz(role));
	set(c, m.u.d, "content", jj_strz(content));
	return m;
}

static void run(struct jj_ctx *c, const uint8_t *data, size_t size)
{
	struct jj_toks toks = {0};
	jj_lex(c, (const char *)data, size, &toks);
	const struct jj_node *root = jj_parse(c, &toks);
	struct jj_dict *vars = jj_dict_new(c, 0, 8);
	struct jj_val msgs = {.k = JV_LIST};
	msgs.u.l = jj_list_new(c, 0, 2);
	msgs.u.l->v[0] = message(c, "user", "Hello,\n wörld 🎉");
	msgs.u.l->v[1] = message(c, "assistant", "<think>x</think> hi");
	set(c, vars, "messages", msgs);
	struct jj_val tools = {.k = JV_LIST};
	tools.u.l = jj_list_new(c, 0, 1);
	tools.u.l->v[0] = message(c, "function", "{\"name\": \"f\"}");
	set(c, vars, "tools", tools);
	set(c, vars, "add_generation_prompt", jj_bool(1));
	set(c, vars, "bos_token", jj_strz("<s>"));
	set(c, vars, "eos_token", jj_strz("</s>"));
	struct jj_buf out = {0};
	struct jj_spans spans = {0};
	jj_render(c, root, vars, &out, &spans);
}

static int guarded(struct jj_ctx *c, const uint8_t *data, size_t size)
{
	if (setjmp(c->err.jb))
		return -1;
	run(c, data, size);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jj_ctx *c = calloc(1, sizeof *c);
	if (!c)
		abort();
	/* smaller than the library's cap: libFuzzer's RSS limit is 2 GiB */
	c->arena.cap = 256u << 20;
	guarded(c, data, size);
	jj_arena_free(&c->arena);
	free(c);
	return 0;
}
