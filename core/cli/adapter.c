/*
 * adapter.c - `mgrun generate --adapter DIR`: a PEFT LoRA adapter folder
 * (adapter_config.json + adapter_model.safetensors, as core/engine/peft.c
 * writes and transformers' peft saves) turned into the model options
 * that apply it: lora_rank, lora_alpha, lora_targets, rslora from the
 * config, lora_adapter = DIR for the tensors (the llama plugin loads
 * them and checks every key and shape, llama_lora.c). The config is read
 * here, before the session opens, so its values are --set overrides
 * that win over the INI's; what the adapter path y += s B A x cannot
 * honour is refused by name before anything loads: another peft_type,
 * bias other than "none" (or lora_bias), modules_to_save,
 * fan_in_fan_out, DoRA, per-module rank or alpha patterns, layer
 * selections, exclude_modules, a regex target_modules. Module names themselves are the model's business
 * (llama's lora_targets names the unknown one).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"

static int bad(const char *path, const char *why, const char *what)
{
	fprintf(stderr, "mgrun generate: --adapter: %s: %s%s\n", path, why,
		what ? what : "");
	return 2;
}

/* A field that must be absent, null, false, or an empty list/object. */
static bool unset(const cJSON *v)
{
	return !v || cJSON_IsNull(v) || cJSON_IsFalse(v) ||
	       ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child);
}

static int add_set(struct mg_cli_adapter *a, const char *fmt, const char *v)
{
	if (a->nsets == MG_CLI_ADAPTER_SETS)
		return -1;
	size_t n = strlen(fmt) + strlen(v) + 1;
	char *s = malloc(n);
	if (!s)
		return -1;
	snprintf(s, n, fmt, v);
	a->sets[a->nsets++] = s;
	return 0;
}

/* target_modules: a list of module names, or PEFT's "all-linear" (the
 * seven layer projections, never the output head). */
static int targets(const char *path, const cJSON *t, char *out, size_t cap)
{
	if (cJSON_IsString(t)) {
		if (strcmp(t->valuestring, "all-linear"))
			return bad(path,
				   "target_modules is a regular expression, "
				   "which mgrun does not match; list the "
				   "modules: ",
				   t->valuestring);
		snprintf(out, cap, "all");
		return 0;
	}
	if (!cJSON_IsArray(t) || !t->child)
		return bad(path, "target_modules is not a list of module names",
			   NULL);
	out[0] = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, t)
	{
		if (!cJSON_IsString(it) || !it->valuestring[0] ||
		    strpbrk(it->valuestring, ", =\n"))
			return bad(path,
				   "target_modules holds something that is not "
				   "a module name",
				   NULL);
		size_t used = strlen(out);
		if (used + strlen(it->valuestring) + 2 > cap)
			return bad(path, "target_modules is too long", NULL);
		snprintf(out + used, cap - used, "%s%s", used ? "," : "",
			 it->valuestring);
	}
	return 0;
}

/* Fields PEFT may set that change what the adapter computes. */
static int unsupported(const char *path, const cJSON *c)
{
	static const char *const must_be_unset[] = {"modules_to_save",
						    "fan_in_fan_out",
						    "use_dora",
						    "rank_pattern",
						    "alpha_pattern",
						    "layers_to_transform",
						    "layers_pattern",
						    "layer_replication",
						    "target_parameters",
						    "use_qalora",
						    "trainable_token_indices",
						    "lora_bias",
						    "exclude_modules"};
	for (size_t i = 0; i < sizeof must_be_unset / sizeof *must_be_unset;
	     i++) {
		const cJSON *v =
			cJSON_GetObjectItemCaseSensitive(c, must_be_unset[i]);
		if (!unset(v))
			return bad(path,
				   "mgrun cannot apply an adapter with "
				   "(set) ",
				   must_be_unset[i]);
	}
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(c, "bias");
	if (b && !cJSON_IsNull(b) &&
	    !(cJSON_IsString(b) && !strcmp(b->valuestring, "none")))
		return bad(path,
			   "bias is not \"none\": mgrun's LoRA trains and "
			   "applies no biases: bias ",
			   cJSON_IsString(b) ? b->valuestring
					     : "(not a string)");
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "peft_type");
	if (p && !(cJSON_IsString(p) && !strcmp(p->valuestring, "LORA")))
		return bad(path, "peft_type is not LORA: ",
			   cJSON_IsString(p) ? p->valuestring
					     : "(not a string)");
	return 0;
}

int mg_cli_adapter_read(const char *dir, struct mg_cli_adapter *a)
{
	memset(a, 0, sizeof *a);
	char path[4200];
	snprintf(path, sizeof path, "%s/adapter_config.json", dir);
	size_t len;
	char *text = mg_cli_read_all("generate --adapter", path, 1 << 20, &len);
	if (!text)
		return 2;
	/* cJSON skips a raw 0 byte between tokens as white space: no JSON,
	 * and the llama plugin's reader of the same file refuses it */
	if (strlen(text) != len) {
		char at[32];
		snprintf(at, sizeof at, "%zu", strlen(text));
		free(text);
		return bad(path, "a 0 byte (not JSON) at byte offset ", at);
	}
	cJSON *c = cJSON_ParseWithLength(text, len);
	free(text);
	if (!cJSON_IsObject(c)) {
		cJSON_Delete(c);
		return bad(path, "not a JSON object", NULL);
	}
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "r"),
		    *al = cJSON_GetObjectItemCaseSensitive(c, "lora_alpha"),
		    *rs = cJSON_GetObjectItemCaseSensitive(c, "use_rslora"),
		    *tm = cJSON_GetObjectItemCaseSensitive(c, "target_modules");
	char tg[1024], num[64];
	int rc = unsupported(path, c);
	if (!rc &&
	    (!cJSON_IsNumber(r) || r->valuedouble < 1 ||
	     r->valuedouble > 65536 || r->valuedouble != floor(r->valuedouble)))
		rc = bad(path, "r is not a whole number in [1, 65536]", NULL);
	/* PEFT's default lora_alpha is 8 */
	double alpha = 8;
	if (!rc && al) {
		if (!cJSON_IsNumber(al) || !(al->valuedouble >= 0) ||
		    al->valuedouble > 1e9)
			rc = bad(path, "lora_alpha is not a number in [0, 1e9]",
				 NULL);
		else
			alpha = al->valuedouble;
	}
	if (!rc && rs && !cJSON_IsBool(rs))
		rc = bad(path, "use_rslora is not true or false", NULL);
	if (!rc)
		rc = targets(path, tm, tg, sizeof tg);
	if (!rc) {
		snprintf(num, sizeof num, "%d", (int)r->valuedouble);
		rc = add_set(a, "model.lora_rank=%s", num);
		snprintf(num, sizeof num, "%.17g", alpha);
		rc = rc || add_set(a, "model.lora_alpha=%s", num) ||
		     add_set(a, "model.lora_targets=%s", tg) ||
		     add_set(a, "model.rslora=%s",
			     cJSON_IsTrue(rs) ? "true" : "false") ||
		     add_set(a, "model.lora_dropout=%s", "0") ||
		     add_set(a, "model.lora_adapter=%s", dir);
		if (rc) {
			fprintf(stderr, "mgrun generate: out of memory\n");
			rc = 1;
		}
	}
	if (!rc)
		snprintf(a->desc, sizeof a->desc,
			 "r %d, lora_alpha %g, use_rslora %s, target_modules "
			 "%.900s",
			 (int)r->valuedouble, alpha,
			 cJSON_IsTrue(rs) ? "true" : "false", tg);
	cJSON_Delete(c);
	if (rc)
		mg_cli_adapter_free(a);
	return rc;
}

void mg_cli_adapter_free(struct mg_cli_adapter *a)
{
	for (int i = 0; i < a->nsets; i++)
		free(a->sets[i]);
	a->nsets = 0;
}
