/*
 * llama_adapter.c - a PEFT adapter folder's adapter_config.json as the
 * lora_adapter option reads it: r, lora_alpha and use_rslora must equal
 * the options (lora_rank, lora_alpha, rslora), target_modules must name
 * exactly the projections lora_targets makes. Apart from llama_lora.c
 * (the adapters' kernels) so the fuzz target of adapter configs
 * (tests/fuzz/fuzz_adapter.c) links the reader alone.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

const char *const llama_lora_module[LT_COUNT] = {
	"q_proj",    "k_proj",	"v_proj",    "o_proj",
	"gate_proj", "up_proj", "down_proj", "lm_head"};

const char *llama_lora_mod(const struct llama_cfg *c, int t)
{
	if ((c->fused & LLAMA_FUSE_QKV) && t >= LT_Q && t <= LT_V)
		return "qkv_proj";
	if ((c->fused & LLAMA_FUSE_GU) && (t == LT_GATE || t == LT_UP))
		return "gate_up_proj";
	return llama_lora_module[t];
}

/* target_modules of adapter_config.json (a list of module names, or
 * PEFT's "all-linear") as target bits; 0 after an error naming path.
 * Phi-3's fused modules name their projections together. */
static unsigned config_targets(const cJSON *tm, const char *path)
{
	if (cJSON_IsString(tm) && !strcmp(tm->valuestring, "all-linear"))
		return (1u << LT_HEAD) - 1;
	if (!cJSON_IsArray(tm) || !tm->child) {
		mg_error("llama: %s: 'target_modules' is not a list of module "
			 "names",
			 path);
		return 0;
	}
	unsigned bits = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, tm)
	{
		int found = -1;
		for (int t = 0; t < LT_COUNT && found < 0; t++)
			if (cJSON_IsString(it) &&
			    !strcmp(it->valuestring, llama_lora_module[t]))
				found = t;
		if (cJSON_IsString(it) &&
		    !strcmp(it->valuestring, "qkv_proj")) {
			bits |= (1u << LT_Q) | (1u << LT_K) | (1u << LT_V);
			continue;
		}
		if (cJSON_IsString(it) &&
		    !strcmp(it->valuestring, "gate_up_proj")) {
			bits |= (1u << LT_GATE) | (1u << LT_UP);
			continue;
		}
		if (found < 0) {
			mg_error("llama: %s: 'target_modules' names %s%s%s, "
				 "not a llama module (q_proj, k_proj, v_proj, "
				 "o_proj, gate_proj, up_proj, down_proj, "
				 "lm_head; Phi-3's qkv_proj, gate_up_proj)",
				 path, cJSON_IsString(it) ? "'" : "",
				 cJSON_IsString(it) ? it->valuestring
						    : "a non-string",
				 cJSON_IsString(it) ? "'" : "");
			return 0;
		}
		bits |= 1u << found;
	}
	return bits;
}

/* "q_proj, v_proj" of target bits. */
void llama_lora_modules_of(unsigned bits, char *out, size_t cap)
{
	out[0] = 0;
	for (int t = 0; t < LT_COUNT; t++)
		if (bits & (1u << t))
			snprintf(out + strlen(out), cap - strlen(out), "%s%s",
				 out[0] ? ", " : "", llama_lora_module[t]);
}

int llama_adapter_config(const char *path, int rank, double want_alpha,
			 bool rslora, unsigned targets)
{
	char *text = llama_read_file(path, 1 << 20);
	if (!text)
		return -1;
	cJSON *c = cJSON_Parse(text);
	free(text);
	/* PEFT's keys are case-sensitive, as generate's reader takes them */
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "r"),
		    *a = cJSON_GetObjectItemCaseSensitive(c, "lora_alpha"),
		    *rs = cJSON_GetObjectItemCaseSensitive(c, "use_rslora"),
		    *tm = cJSON_GetObjectItemCaseSensitive(c, "target_modules");
	/* PEFT's default lora_alpha is 8 */
	double alpha = cJSON_IsNumber(a) ? a->valuedouble : 8;
	int rc = 0;
	unsigned bits = 0;
	char want[160], have[160];
	if (!cJSON_IsObject(c))
		rc = mg_error("llama: %s: not a JSON object", path);
	else if (!cJSON_IsNumber(r) || !(r->valuedouble >= 1) ||
		 r->valuedouble > 65536 ||
		 r->valuedouble != floor(r->valuedouble))
		rc = mg_error("llama: %s: 'r' is not a whole number in [1, "
			      "65536]",
			      path);
	else if (a && !cJSON_IsNumber(a))
		rc = mg_error("llama: %s: 'lora_alpha' is not a number", path);
	else if ((int)r->valuedouble != rank || alpha != want_alpha ||
		 cJSON_IsTrue(rs) != rslora)
		rc = mg_error("llama: %s has r %g, lora_alpha %g, use_rslora "
			      "%s; the options say lora_rank %d, lora_alpha "
			      "%g, rslora %s",
			      path, r->valuedouble, alpha,
			      cJSON_IsTrue(rs) ? "true" : "false", rank,
			      want_alpha, rslora ? "true" : "false");
	else if (tm && !(bits = config_targets(tm, path)))
		rc = -1;
	else if (tm && bits != targets) {
		llama_lora_modules_of(bits, have, sizeof have);
		llama_lora_modules_of(targets, want, sizeof want);
		rc = mg_error("llama: %s: 'target_modules' is %s; the options' "
			      "lora_targets make %s",
			      path, have, want);
	}
	cJSON_Delete(c);
	return rc ? -1 : 0;
}
