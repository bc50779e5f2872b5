/*
 * peft.c - write a run's LoRA adapters as a Hugging Face PEFT adapter
 * folder. It reads the checkpoint as the trainer assembles it, so the
 * adapter on disk is always the one of the last checkpoint, and it needs
 * nothing from the strategy (every strategy checkpoints full tensors).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/crash_point.h"
#include "engine/peft.h"
#include "mg/tensor_file.h"

/* Does the plugin's schema declare option `name`? */
static bool declares(const struct mg_plugin *p, const char *name)
{
	for (const struct mg_option *o = p->options; o && o->name; o++)
		if (!strcmp(o->name, name))
			return true;
	return false;
}

/* "param/<unit>.<module>.lora_X.weight" -> "<module>" (the head unit's
 * parameters carry their full Hugging Face names already). Returns
 * 'A', 'B' or 0 when name is no adapter. */
static char module_of(const char *name, char *out, size_t cap)
{
	static const char pre[] = "param/", head[] = "param/head.";
	const char *s =
		!strncmp(name, head, sizeof head - 1) ? name + sizeof head - 1
		: !strncmp(name, pre, sizeof pre - 1) ? name + sizeof pre - 1
						      : NULL;
	const char *tail = s ? strstr(s, ".lora_") : NULL;
	if (!tail ||
	    (strcmp(tail, ".lora_A.weight") && strcmp(tail, ".lora_B.weight")))
		return 0;
	size_t n = (size_t)(tail - s);
	if (n + 1 > cap)
		return 0;
	memcpy(out, s, n);
	out[n] = 0;
	return tail[6];
}

/* Entry e's values as F32 (PEFT's adapters are F32 files). */
static float *as_f32(const struct mg_st_entry *e, int64_t n)
{
	float *f = malloc((size_t)n * sizeof *f);
	if (!f)
		return NULL;
	for (int64_t j = 0; j < n; j++)
		f[j] = e->dtype == MG_F64 ? (float)((const double *)e->data)[j]
					  : ((const float *)e->data)[j];
	return f;
}

int mg_peft_export(const struct mg_st_writer *w, const struct mg_plugin *model,
		   const struct mg_opts *mo, const char *run_dir)
{
	if (!declares(model, "lora_rank") || mg_opt_int(mo, "lora_rank") <= 0)
		return 0;
	static const char *const need[] = {"lora_alpha", "lora_dropout",
					   "rslora", "hf_dir"};
	for (size_t i = 0; i < sizeof need / sizeof *need; i++)
		if (!declares(model, need[i]))
			return mg_error("PEFT adapter: model %s has lora_rank "
					"but no %s option",
					model->name, need[i]);
	char dir[4096], path[4200], mod[256], key[512];
	snprintf(dir, sizeof dir, "%s/adapter", run_dir);
	if (mkdir(dir, 0755) && errno != EEXIST)
		return mg_error("%s: %s", dir, strerror(errno));
	struct mg_st_writer out;
	mg_st_writer_init(&out);
	cJSON *targets = cJSON_CreateArray();
	int rc = targets ? 0 : mg_error("out of memory");
	int64_t rank = 0;
	for (int i = 0; i < w->n && !rc; i++) {
		const struct mg_st_entry *e = &w->entries[i];
		char ab = module_of(e->name, mod, sizeof mod);
		if (!ab)
			continue;
		if (e->ndim != 2 ||
		    (e->dtype != MG_F32 && e->dtype != MG_F64)) {
			rc = mg_error("peft: %s is not a 2-D float tensor",
				      e->name);
			break;
		}
		int64_t r = ab == 'A' ? e->shape[0] : e->shape[1];
		if (rank && r != rank) {
			rc = mg_error("peft: %s has rank %lld, others %lld",
				      e->name, (long long)r, (long long)rank);
			break;
		}
		rank = r;
		/* target_modules: the module's last name, once each. */
		const char *leaf = strrchr(mod, '.');
		leaf = leaf ? leaf + 1 : mod;
		bool seen = false;
		cJSON *it;
		cJSON_ArrayForEach(it, targets) seen |=
			!strcmp(it->valuestring, leaf);
		if (!seen)
			cJSON_AddItemToArray(targets, cJSON_CreateString(leaf));
		snprintf(key, sizeof key, "base_model.model.%s.lora_%c.weight",
			 mod, ab);
		float *f = as_f32(e, e->shape[0] * e->shape[1]);
		rc = !f ? mg_error("out of memory")
			: mg_st_writer_add(&out, key, MG_F32, 2, e->shape, f);
		free(f);
	}
	if (!rc && !rank)
		rc = mg_error("peft: lora_rank > 0 but the checkpoint holds no "
			      "lora_A / lora_B tensor");
	if (!rc) {
		snprintf(path, sizeof path, "%s/adapter_model.safetensors",
			 dir);
		mg_st_writer_meta(&out, "format", "pt");
		rc = mg_st_writer_save(&out, path);
		if (!rc)
			mg_crash_point("adapter_model");
	}
	mg_st_writer_free(&out);
	if (rc) {
		cJSON_Delete(targets);
		return mg_error_prefix("PEFT adapter");
	}
	cJSON *c = cJSON_CreateObject();
	const char *base = mg_opt_str(mo, "hf_dir");
	cJSON_AddStringToObject(c, "peft_type", "LORA");
	cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
	cJSON_AddNumberToObject(c, "r", (double)rank);
	cJSON_AddNumberToObject(c, "lora_alpha",
				mg_opt_float(mo, "lora_alpha"));
	cJSON_AddNumberToObject(c, "lora_dropout",
				mg_opt_float(mo, "lora_dropout"));
	cJSON_AddItemToObject(c, "target_modules", targets);
	cJSON_AddBoolToObject(c, "use_rslora", mg_opt_bool(mo, "rslora"));
	cJSON_AddStringToObject(c, "bias", "none");
	cJSON_AddBoolToObject(c, "fan_in_fan_out", false);
	cJSON_AddBoolToObject(c, "inference_mode", true);
	cJSON_AddBoolToObject(c, "init_lora_weights", true);
	if (base && base[0])
		cJSON_AddStringToObject(c, "base_model_name_or_path", base);
	else
		cJSON_AddNullToObject(c, "base_model_name_or_path");
	char *text = cJSON_Print(c);
	cJSON_Delete(c);
	snprintf(path, sizeof path, "%s/adapter_config.json", dir);
	rc = text ? mg_file_write_atomic(path, text, strlen(text))
		  : mg_error("out of memory");
	free(text);
	if (!rc)
		mg_crash_point("adapter_config");
	return rc ? mg_error_prefix("PEFT adapter") : 0;
}
