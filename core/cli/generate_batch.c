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

int gen_read_prompts(struct gen *g)
{
	size_t len = 0;
	const char *file = g->o.prompts;
	char *buf = mg_cli_read_all("generate", file, MG_CLI_PROMPTS_MAX, &len);
	if (!buf)
		return 2;
	int rc = gen_parse_prompts(file, buf, len, g->tok, &g->prompts,
				   &g->nprompts);
	free(buf);
	if (!rc)
		fprintf(stderr, "generate: %d prompts from %s\n", g->nprompts,
			file);
	return rc;
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
