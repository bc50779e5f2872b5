/*
 * llama_hf.c - a Hugging Face model folder as the source of initial
 * weights: model.safetensors, or the shards model.safetensors.index.json
 * maps names to. Shards are memory-mapped and opened on first use, and
 * each unit converts straight from the mapped pages into the strategy's
 * host tensor, so a rank reads only what it initialises and the host
 * never holds a second copy of the model.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llama.h"

#define MAX_SHARDS 1024

struct llama_hf {
	char dir[4096];
	cJSON *index; /* weight_map, or NULL for one file */
	int nshards;
	char *shard_name[MAX_SHARDS];
	struct mg_tensor_file *shard[MAX_SHARDS];
};

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int llama_hf_open(struct llama *m)
{
	struct llama_hf *h = calloc(1, sizeof *h);
	if (!h)
		return mg_error("llama: out of memory");
	snprintf(h->dir, sizeof h->dir, "%s", m->hf_dir);
	m->hf = h;
	char path[4200];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", h->dir);
	if (!is_file(path)) {
		snprintf(path, sizeof path, "%s/model.safetensors", h->dir);
		if (!is_file(path))
			return mg_error("llama: %s has neither "
					"model.safetensors nor "
					"model.safetensors.index.json",
					h->dir);
		return 0;
	}
	char *text = llama_read_file(path, 64 << 20);
	if (!text)
		return -1;
	cJSON *j = text ? cJSON_Parse(text) : NULL;
	free(text);
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
	if (!cJSON_IsObject(map)) {
		cJSON_Delete(j);
		return mg_error("llama: %s: not a safetensors index (no "
				"weight_map object)",
				path);
	}
	h->index = j;
	return 0;
}

void llama_hf_close(struct llama *m)
{
	struct llama_hf *h = m->hf;
	if (!h)
		return;
	for (int i = 0; i < h->nshards; i++) {
		mg_tensor_file_close(h->shard[i]);
		free(h->shard_name[i]);
	}
	cJSON_Delete(h->index);
	free(h);
	m->hf = NULL;
}

/* The file holding tensor name (opened once). */
static struct mg_tensor_file *shard_for(struct llama_hf *h, const char *name)
{
	const char *file = "model.safetensors";
	if (h->index) {
		const cJSON *map = cJSON_GetObjectItemCaseSensitive(
			h->index, "weight_map");
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(map, name);
		if (!cJSON_IsString(v) || strchr(v->valuestring, '/')) {
			mg_error("llama: %s/model.safetensors.index.json maps "
				 "no (valid) file to '%s'",
				 h->dir, name);
			return NULL;
		}
		file = v->valuestring;
	}
	for (int i = 0; i < h->nshards; i++)
		if (!strcmp(h->shard_name[i], file))
			return h->shard[i];
	if (h->nshards == MAX_SHARDS) {
		mg_error("llama: %s: more than %d shards", h->dir, MAX_SHARDS);
		return NULL;
	}
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", h->dir, file);
	struct mg_tensor_file *f = mg_tensor_file_open(path);
	if (!f)
		return NULL;
	h->shard[h->nshards] = f;
	h->shard_name[h->nshards++] = strdup(file);
	return f;
}

int llama_hf_load(struct llama *m, const char *name, struct mg_tensor *dst)
{
	struct mg_tensor_file *f = shard_for(m->hf, name);
	if (!f)
		return -1;
	struct mg_tensor src;
	if (!mg_tensor_file_get(f, name, &src))
		return mg_error("llama: %s has no tensor '%s'",
				mg_tensor_file_path(f), name);
	bool same = src.ndim == dst->ndim;
	for (int i = 0; same && i < src.ndim; i++)
		same = src.shape[i] == dst->shape[i];
	if (!same) {
		char a[96] = "", b[96] = "";
		for (int i = 0; i < src.ndim; i++)
			snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld",
				 i ? ", " : "", (long long)src.shape[i]);
		for (int i = 0; i < dst->ndim; i++)
			snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld",
				 i ? ", " : "", (long long)dst->shape[i]);
		return mg_error("llama: %s: tensor '%s' is [%s], config.json "
				"makes it [%s]",
				mg_tensor_file_path(f), name, a, b);
	}
	if (mg_tensor_convert_host(dst, &src))
		return mg_error_prefix("llama: %s: tensor '%s'",
				       mg_tensor_file_path(f), name);
	return 0;
}
