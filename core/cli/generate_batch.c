/*
 * generate_batch.c - `mgrun generate --prompts FILE`: many prompts with
 * the model loaded once, as an evaluation over a test set needs (one
 * `generate` a prompt reloads an 8B model each time).
 *
 * FILE is JSON Lines: each non-blank line an object with "prompt" (text,
 * tokenized with the special tokens, as --prompt) or "ids" (token ids, as
 * --ids); an "id" member, any JSON, is echoed back so answers can be
 * joined to their rows. Every line is read and checked before the first
 * token is generated, the file before the model is even loaded: a bad
 * line stops the job at FILE:LINE (exit 2) with nothing run. Each prompt
 * is then continued exactly as `generate` with the same options
 * continues it alone (position 0, the same sampling key), and
 * answered by one JSON line on stdout, in file order, as soon as it is
 * done: {"index", "line", "id"?, "completion" (text, with a tokenizer),
 * "completion_ids", "prompt_tokens", "new_tokens", "stop"}.
 * Prompts run one after the other (the decode op takes one sequence).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/generate.h"

struct gen_prompt {
	struct mg_ids ids;
	int line;
	cJSON *id; /* the row's "id", or NULL */
};

/* Line `ln` (text of n bytes) into *p; 2 after a FILE:LINE message. */
static int read_prompt(struct gen *g, const char *file, int ln,
		       const char *text, size_t n, struct gen_prompt *p)
{
	const char *const f = file;
	cJSON *o = cJSON_ParseWithLength(text, n);
	const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "prompt");
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "ids");
	int rc = 0;
	char key[128];
	p->line = ln;
	if (!cJSON_IsObject(o)) {
		fprintf(stderr,
			"mgrun generate: %s:%d: not a JSON object (each line: "
			"{\"prompt\": TEXT} or {\"ids\": [ID, ...]})\n",
			f, ln);
		rc = 2;
	} else if (mg_json_nul_string(text, n, key, sizeof key) < n) {
		/* cJSON's strings end at the NUL: the prompt would be cut */
		fprintf(stderr,
			"mgrun generate: %s:%d: field \"%s\" holds a NUL "
			"character (\\u0000 or a 0 byte), which would cut "
			"the prompt there\n",
			f, ln, key);
		rc = 2;
	} else if (!!pr == !!ids) {
		fprintf(stderr,
			"mgrun generate: %s:%d: give one of \"prompt\" and "
			"\"ids\"\n",
			f, ln);
		rc = 2;
	} else if (pr && !cJSON_IsString(pr)) {
		fprintf(stderr,
			"mgrun generate: %s:%d: \"prompt\" is not a "
			"string\n",
			f, ln);
		rc = 2;
	} else if (pr && !g->tok) {
		fprintf(stderr,
			"mgrun generate: %s:%d: a text prompt needs a "
			"tokenizer (--tokenizer, or give \"ids\")\n",
			f, ln);
		rc = 2;
	} else if (pr) {
		const char *t = pr->valuestring;
		if (mg_tokenizer_encode(g->tok, t, strlen(t),
					MG_TOK_ADD_SPECIAL, &p->ids)) {
			fprintf(stderr, "mgrun generate: %s:%d: %s\n", f, ln,
				mg_last_error());
			rc = 2;
		}
	} else if (!cJSON_IsArray(ids)) {
		fprintf(stderr,
			"mgrun generate: %s:%d: \"ids\" is not an "
			"array\n",
			f, ln);
		rc = 2;
	} else {
		const cJSON *e;
		int k = 0;
		cJSON_ArrayForEach(e, ids)
		{
			const double v =
				cJSON_IsNumber(e) ? e->valuedouble : -1;
			if (v < 0 || v > INT32_MAX || v != (int32_t)v) {
				fprintf(stderr,
					"mgrun generate: %s:%d: ids[%d] is not "
					"a token id\n",
					f, ln, k);
				rc = 2;
				break;
			}
			if (gen_append(&p->ids, (int32_t)v)) {
				fprintf(stderr, "mgrun generate: out of "
						"memory\n");
				rc = 2;
				break;
			}
			k++;
		}
	}
	if (!rc && p->ids.n == 0) {
		fprintf(stderr,
			"mgrun generate: %s:%d: the prompt has no "
			"tokens\n",
			f, ln);
		rc = 2;
	}
	if (!rc) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
		p->id = id ? cJSON_Duplicate(id, true) : NULL;
	}
	cJSON_Delete(o);
	return rc;
}

int gen_read_prompts(struct gen *g)
{
	size_t len = 0;
	const char *file = g->o.prompts;
	char *buf = mg_cli_read_all("generate", file, MG_CLI_PROMPTS_MAX, &len);
	if (!buf)
		return 2;
	struct gen_prompt *ps = NULL;
	int n = 0, cap = 0, rc = 0, ln = 0;
	for (char *s = buf; !rc && s < buf + len;) {
		char *e = memchr(s, '\n', (size_t)(buf + len - s));
		const size_t m = e ? (size_t)(e - s) : (size_t)(buf + len - s);
		ln++;
		size_t k = 0;
		while (k < m && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
			k++;
		if (k < m) {
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				struct gen_prompt *q =
					realloc(ps, (size_t)cap * sizeof *q);
				if (!q) {
					fprintf(stderr, "mgrun generate: out "
							"of memory\n");
					rc = 2;
					break;
				}
				ps = q;
			}
			memset(&ps[n], 0, sizeof ps[n]);
			rc = read_prompt(g, file, ln, s, m, &ps[n]);
			n++;
		}
		s += m + 1;
	}
	free(buf);
	if (!rc && n == 0) {
		fprintf(stderr, "mgrun generate: %s: no prompts\n", file);
		rc = 2;
	}
	g->prompts = ps;
	g->nprompts = n;
	if (!rc)
		fprintf(stderr, "generate: %d prompts from %s\n", n, file);
	return rc;
}

void gen_free_prompts(struct gen *g)
{
	for (int i = 0; i < g->nprompts; i++) {
		free(g->prompts[i].ids.v);
		cJSON_Delete(g->prompts[i].id);
	}
	free(g->prompts);
	g->prompts = NULL;
	g->nprompts = 0;
}

/* The answer to prompt i as one JSON line on stdout. */
static int answer(struct gen *g, int i, const struct gen_prompt *p,
		  const struct mg_ids *ids, const struct gen_done *d)
{
	cJSON *o = cJSON_CreateObject();
	int rc = 0;
	bool decoded = true; /* else gen_new_text said why */
	const int64_t n0 = p->ids.n;
	if (o) {
		cJSON_AddNumberToObject(o, "index", i);
		cJSON_AddNumberToObject(o, "line", p->line);
		if (p->id)
			cJSON_AddItemToObject(o, "id",
					      cJSON_Duplicate(p->id, true));
		if (g->tok) {
			char *text = gen_new_text(g, ids, n0);
			decoded = text != NULL;
			cJSON_AddStringToObject(o, "completion",
						text ? text : "");
			free(text);
		}
		cJSON *arr = cJSON_AddArrayToObject(o, "completion_ids");
		for (int64_t k = n0; arr && k < ids->n; k++)
			cJSON_AddItemToArray(arr,
					     cJSON_CreateNumber(ids->v[k]));
		cJSON_AddNumberToObject(o, "prompt_tokens", (double)n0);
		cJSON_AddNumberToObject(o, "new_tokens", (double)d->made);
		cJSON_AddStringToObject(o, "stop", d->why);
	}
	char *line = o && decoded ? cJSON_PrintUnformatted(o) : NULL;
	if (line) {
		printf("%s\n", line);
		fflush(stdout);
	} else {
		fprintf(stderr,
			"mgrun generate: prompt %d: no answer written%s\n", i,
			decoded ? " (out of memory)" : "");
		rc = 1;
	}
	cJSON_free(line);
	cJSON_Delete(o);
	return rc;
}

int gen_run_prompts(struct gen *g)
{
	const struct gen_prompt *ps = g->prompts;
	const int n = g->nprompts;
	int rc = 0;
	/* every id inside the model's vocabulary before the first token */
	for (int i = 0; !rc && i < n; i++)
		for (int64_t k = 0; k < ps[i].ids.n; k++)
			if (ps[i].ids.v[k] >= g->vocab) {
				fprintf(stderr,
					"mgrun generate: %s:%d: token %lld of "
					"the prompt, id %d, is outside the "
					"model's vocabulary of %lld\n",
					g->o.prompts, ps[i].line, (long long)k,
					(int)ps[i].ids.v[k],
					(long long)g->vocab);
				rc = 2;
				break;
			}
	struct mg_ids ids = {0};
	int64_t made = 0, read = 0;
	double prefill = 0, decode = 0;
	for (int i = 0; !rc && i < n; i++) {
		ids.n = 0;
		for (int64_t k = 0; !rc && k < ps[i].ids.n; k++)
			if (gen_append(&ids, ps[i].ids.v[k])) {
				fprintf(stderr, "mgrun generate: out of "
						"memory\n");
				rc = 1;
			}
		struct gen_done d;
		if (!rc && gen_continue(g, &ids, g->key, false, &d)) {
			fprintf(stderr,
				"mgrun generate: %s:%d: generation "
				"failed\n",
				g->o.prompts, ps[i].line);
			rc = 1;
		}
		if (!rc)
			rc = answer(g, i, &ps[i], &ids, &d);
		if (!rc) {
			made += d.made;
			read += ps[i].ids.n;
			prefill += d.prefill_s;
			decode += d.decode_s;
		}
	}
	if (!rc)
		fprintf(stderr,
			"generate: %d prompts, %lld prompt tokens in %.3f s, "
			"%lld new tokens in %.3f s (%.1f tokens/s)\n",
			n, (long long)read, prefill, (long long)made, decode,
			decode > 0 ? (double)made / decode : 0.0);
	free(ids.v);
	return rc;
}
