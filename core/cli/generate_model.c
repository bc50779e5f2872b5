/*
 * generate_model.c - what `mgrun generate` needs beyond a run's INI:
 * --model DIR (a Hugging Face folder generated from without an
 * experiment file: a throwaway run of the llama plugin on that folder),
 * --chat (the prompt as messages, rendered by the tokenizer's own chat
 * template with the generation prompt) and the model's stop tokens
 * (every eos_token_id of generation_config.json, as transformers stops).
 */
#include <cjson/cJSON.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_common.h"
#include "cli/generate.h"
#include "mg/chat.h"
#include "mg/tensor_file.h"

/* The run --model sets up: the llama plugin (every decoder family the
 * project runs) on the folder, a dataset that reads no file; the folder,
 * device and precision come as --set values, so no path is written
 * into INI syntax. */
static const char MODEL_INI[] = "[run]\nname = generate\n"
				"[model]\nname = llama\n"
				"[dataset]\nname = random_tokens\n";

int gen_model_setup(struct gen_opts *o, char *dir, size_t cap)
{
	if (o->ini) {
		fprintf(stderr, "mgrun generate: --model DIR or -c FILE, not "
				"both\n");
		return 2;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, cap, "%s/mgrun-generate-XXXXXX",
		 tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "mgrun generate: cannot make %s\n", dir);
		dir[0] = 0;
		return 1;
	}
	char ini[4200];
	snprintf(ini, sizeof ini, "%s/model.ini", dir);
	if (mg_file_write_atomic(ini, MODEL_INI, sizeof MODEL_INI - 1)) {
		fprintf(stderr, "mgrun generate: %s\n", mg_last_error());
		return 1;
	}
	o->ini = strdup(ini);
	/* before the user's --set (appended after them: theirs would be
	 * overridden), so they go first */
	static char sets[4][4400];
	snprintf(sets[0], sizeof sets[0], "model.hf_dir=%s", o->model);
	snprintf(sets[1], sizeof sets[1], "run.out_dir=%s", dir);
	snprintf(sets[2], sizeof sets[2], "run.device=%s",
		 o->device ? o->device : "cpu");
	snprintf(sets[3], sizeof sets[3], "run.precision=%s",
		 o->precision ? o->precision : "fp32");
	memmove(o->sets + 4, o->sets, (size_t)o->nsets * sizeof *o->sets);
	for (int i = 0; i < 4; i++)
		o->sets[i] = sets[i];
	o->nsets += 4;
	return o->ini ? 0 : 1;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	remove(p);
	return 0;
}

void gen_model_cleanup(struct gen_opts *o, const char *dir)
{
	if (!dir[0])
		return; /* nothing made (and o->ini, if any, is the user's) */
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free((char *)o->ini);
	o->ini = NULL;
}

int gen_chat_prompt(struct mg_tokenizer *tok, const char *text, size_t len,
		    struct mg_ids *ids)
{
	/* a list of messages, or an object holding "messages" (and any
	 * other template variables) */
	cJSON *j = cJSON_ParseWithLength(text, len);
	cJSON *req = NULL;
	if (cJSON_IsArray(j)) {
		req = cJSON_CreateObject();
		if (req)
			cJSON_AddItemToObject(req, "messages", j);
		else
			cJSON_Delete(j);
	} else if (cJSON_IsObject(j) &&
		   cJSON_IsArray(cJSON_GetObjectItem(j, "messages"))) {
		req = j;
	} else {
		cJSON_Delete(j);
		fprintf(stderr, "mgrun generate: --chat: the prompt is not a "
				"JSON list of messages nor an object with "
				"\"messages\"\n");
		return 2;
	}
	/* the generation prompt unless the request says otherwise */
	if (req && !cJSON_GetObjectItem(req, "add_generation_prompt") &&
	    !cJSON_AddTrueToObject(req, "add_generation_prompt")) {
		cJSON_Delete(req);
		req = NULL;
	}
	char *js = req ? cJSON_PrintUnformatted(req) : NULL;
	cJSON_Delete(req);
	char *out = NULL;
	size_t olen = 0;
	int rc = js ? mg_tokenizer_apply_chat_template(tok, js, strlen(js),
						       &out, &olen, NULL, NULL)
		    : -1;
	free(js);
	if (rc) {
		fprintf(stderr, "mgrun generate: --chat: %s\n",
			mg_last_error());
		return 2;
	}
	/* as apply_chat_template(tokenize=True): the rendering's own
	 * special tokens, nothing added */
	rc = mg_tokenizer_encode(tok, out, olen, 0, ids);
	free(out);
	if (rc) {
		fprintf(stderr, "mgrun generate: --chat: %s\n",
			mg_last_error());
		return 2;
	}
	return 0;
}

int gen_stops_from_config(const char *hf_dir, int32_t *stop, int *n, int cap)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/generation_config.json", hf_dir);
	if (access(path, F_OK))
		return 0; /* none: the tokenizer's EOS */
	size_t len;
	char *text = mg_file_read(path, 1 << 20, 0, &len);
	const bool read = text != NULL;
	cJSON *j = read ? cJSON_ParseWithLength(text, len) : NULL;
	free(text);
	if (!j) {
		fprintf(stderr, "mgrun generate: %s: %s\n", path,
			read ? "not JSON" : mg_last_error());
		return 2;
	}
	const cJSON *e = cJSON_GetObjectItem(j, "eos_token_id");
	/* absent or null: no stop tokens of the model's own */
	const cJSON *v = cJSON_IsArray(e)  ? e->child
			 : cJSON_IsNull(e) ? NULL
					   : e;
	int rc = 0;
	for (; v && !rc; v = cJSON_IsArray(e) ? v->next : NULL) {
		if (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
		    v->valuedouble > 2147483647.0) {
			fprintf(stderr,
				"mgrun generate: %s: eos_token_id holds a "
				"value that is no token id\n",
				path);
			rc = 2;
			break;
		}
		const int32_t id = (int32_t)v->valuedouble;
		bool have = false;
		for (int i = 0; i < *n; i++)
			have = have || stop[i] == id;
		if (!have && *n < cap)
			stop[(*n)++] = id;
	}
	cJSON_Delete(j);
	return rc;
}
