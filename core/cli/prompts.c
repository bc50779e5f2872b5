/*
 * prompts.c - the parser of `mgrun generate --prompts FILE` (JSON Lines
 * of {"prompt": TEXT} or {"ids": [...]}, with an optional "id"), on a
 * buffer: generate_batch.c reads the file and runs the prompts. Apart,
 * with gen_append, so the fuzz target (tests/fuzz/fuzz_prompts.c) links
 * the parser without the session and model generate_batch.c drives.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/generate.h"

int gen_append(struct mg_ids *ids, int32_t id)
{
	if (ids->n == ids->cap) {
		int64_t cap = ids->cap ? ids->cap * 2 : 64;
		int32_t *nv = realloc(ids->v, (size_t)cap * sizeof *nv);
		if (!nv)
			return mg_error("out of memory");
		ids->v = nv;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

/* Line `ln` (text of n bytes) into *p; 2 after a FILE:LINE message. */
static int read_prompt(const struct mg_tokenizer *tok, const char *file, int ln,
		       const char *text, size_t n, struct gen_prompt *p)
{
	const char *const f = file;
	const char *end = NULL;
	cJSON *o = cJSON_ParseWithLengthOpts(text, n, &end, 0);
	/* cJSON stops after the first value: text after it (a second
	 * object on the line) would be dropped unseen */
	size_t after = o && end ? (size_t)(end - text) : n;
	while (after < n && (text[after] == ' ' || text[after] == '\t' ||
			     text[after] == '\r'))
		after++;
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
	} else if (after < n) {
		fprintf(stderr,
			"mgrun generate: %s:%d: text after the JSON object "
			"(at byte %zu of the line): one object a line\n",
			f, ln, after + 1);
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
	} else if (pr && !tok) {
		fprintf(stderr,
			"mgrun generate: %s:%d: a text prompt needs a "
			"tokenizer (--tokenizer, or give \"ids\")\n",
			f, ln);
		rc = 2;
	} else if (pr) {
		const char *t = pr->valuestring;
		if (mg_tokenizer_encode(tok, t, strlen(t), MG_TOK_ADD_SPECIAL,
					&p->ids)) {
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

int gen_parse_prompts(const char *file, const char *buf, size_t len,
		      const struct mg_tokenizer *tok, struct gen_prompt **out,
		      int *nout)
{
	struct gen_prompt *ps = NULL;
	int n = 0, cap = 0, rc = 0, ln = 0;
	for (const char *s = buf; !rc && s < buf + len;) {
		const char *e = memchr(s, '\n', (size_t)(buf + len - s));
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
			rc = read_prompt(tok, file, ln, s, m, &ps[n]);
			n++;
		}
		s += m + 1;
	}
	if (!rc && n == 0) {
		fprintf(stderr, "mgrun generate: %s: no prompts\n", file);
		rc = 2;
	}
	*out = ps;
	*nout = n;
	return rc;
}

void gen_prompts_free(struct gen_prompt *ps, int n)
{
	for (int i = 0; i < n; i++) {
		free(ps[i].ids.v);
		cJSON_Delete(ps[i].id);
	}
	free(ps);
}

void gen_free_prompts(struct gen *g)
{
	gen_prompts_free(g->prompts, g->nprompts);
	g->prompts = NULL;
	g->nprompts = 0;
}
