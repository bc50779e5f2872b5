/*
 * chat.h - chat templates: the Jinja `chat_template` of a Hugging Face
 * tokenizer_config.json rendered as transformers' apply_chat_template
 * renders it (jinja2 3.1's ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks and loop controls; transformers' tojson,
 * raise_exception, strftime_now and {% generation %}).
 *
 * Covered: {{ }}, {% %}, {# #}, the - and + whitespace controls; if /
 * elif / else, for (tuple targets, `if` filters, else, loop.index,
 * index0, revindex, revindex0, first, last, length, previtem, nextitem,
 * depth, cycle), break / continue, set (names, tuples, ns.attr on
 * namespace(), block sets), macros with defaults, filter blocks; the
 * literals, operators and precedence of jinja2 with Python's semantics;
 * the filters abs, attr, capitalize, count, d/default, dictsort, e/escape,
 * first, float, indent, int, items, join, last, length, list, lower, map,
 * max, min, reject, rejectattr, replace, reverse, round, safe, select,
 * selectattr, sort, string, sum, title, tojson, trim, unique, upper,
 * wordcount; the tests of jinja2 (defined, none, string, mapping, ...);
 * str methods (strip, lstrip, rstrip, split, startswith, endswith, upper,
 * lower, title, capitalize, replace, find, count, join, format,
 * splitlines, is*), dict methods (get, items, keys, values), list index
 * and count; globals range, namespace, dict, raise_exception,
 * strftime_now.
 *
 * Differences from jinja2, by choice: upper/lower/title/capitalize map
 * ASCII letters only; integers are 64-bit (overflow is an error); JSON
 * numbers read from the variables are ints when integral and within
 * 2^53 (so a 1.0 written in the data prints as 1); using an undefined
 * value (its attribute, calling it, arithmetic) fails as jinja2's default
 * Undefined does, printing it gives ""; recursive loops, call blocks,
 * include/extends/import are refused at parse. Caps (nesting depth,
 * macro recursion, 1M loop iterations, 64 MiB of output, 512 MiB of
 * values) end hostile templates with an error.
 *
 * Errors name the template line: "chat template line N: ...". A parsed
 * template is immutable: renders may run on many threads at once.
 */
#ifndef MG_CHAT_H
#define MG_CHAT_H

#include <stddef.h>

#include "abi.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_chat_template;

/* A {% generation %} block's bytes in a rendering: [start, end). */
struct mg_chat_span {
	size_t start, end;
};

/* Added in ABI 1.11. Parse src[0..len). NULL after mg_error() on a
 * syntax error (the line named) or out of memory. */
MG_EXPORT struct mg_chat_template *mg_chat_template_parse(const char *src,
							  size_t len);
MG_EXPORT void mg_chat_template_free(struct mg_chat_template *t);

/* Render with the variables of vars_json[0..len), a JSON object (names to
 * values: messages, tools, add_generation_prompt, bos_token...). *out is
 * malloc'd and NUL-terminated, its length in *out_len (may be NULL).
 * With spans not NULL, *spans (malloc'd, may be NULL when *nspans is 0)
 * gets the {% generation %} blocks. Returns 0, or -1 after mg_error()
 * (a raise_exception message, a runtime error, bad JSON). */
MG_EXPORT int mg_chat_template_render(const struct mg_chat_template *t,
				      const char *vars_json, size_t len,
				      char **out, size_t *out_len,
				      struct mg_chat_span **spans,
				      size_t *nspans);

/* The tokenizer's chat_template applied to request_json[0..len), an
 * object with "messages" and optional "tools", "documents",
 * "add_generation_prompt" (default false) and any other template
 * variables, as apply_chat_template(messages, tools=..., documents=...,
 * add_generation_prompt=..., **kwargs) with the special tokens of
 * tokenizer_config.json (bos_token, eos_token, unk_token, pad_token,
 * sep_token, cls_token, mask_token, additional_special_tokens) as
 * variables; tools and documents are None when absent. Returns 0; -1
 * after mg_error() when rendering fails (raise_exception, a runtime
 * error, bad JSON); -2 when the tokenizer has no chat_template or its
 * template does not parse (the message says which). spans as for
 * mg_chat_template_render. */
MG_EXPORT int mg_tokenizer_apply_chat_template(const struct mg_tokenizer *t,
					       const char *request_json,
					       size_t len, char **out,
					       size_t *out_len,
					       struct mg_chat_span **spans,
					       size_t *nspans);

#ifdef __cplusplus
}
#endif
#endif
