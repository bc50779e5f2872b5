/*
 * llama_hf.c - a Hugging Face model folder as the source of initial
 * weights: model.safetensors, or the shards model.safetensors.index.json
 * maps names to. Shards are memory-mapped and opened on first use, and
 * each unit converts straight from the mapped pages into the strategy's
 * host tensor, so a rank reads only what it initialises and the host
 * never holds a second copy of the model. A bitsandbytes 4-bit folder
 * (llama_bnb.c) loads too: its NF4 projections dequantized into float
 * parameters, or copied as they are into NF4 ones (quant = nf4).
 * A family that fuses projections in its folders (Phi-3's qkv_proj,
 * gate_up_proj) has each split projection read as its rows of the
 * fused tensor, in whatever form the folder holds it.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llama.h"
#include "llama_bnb.h"
#include "mg/int4.h"

#define MAX_SHARDS 1024

struct llama_hf {
	char dir[4096];
	cJSON *index;	/* weight_map, or NULL for one file */
	bool quantized; /* config.json: bitsandbytes 4-bit */
	int nshards;
	char *shard_name[MAX_SHARDS];
	struct mg_tensor_file *shard[MAX_SHARDS];
	/* Gemma 3's multimodal folders: the language model's tensors under
	 * this prefix instead of "model." (transformers up to 4.51:
	 * "language_model.model.", later "model.language_model."), and its
	 * head under lm_head_name; "" for every other folder */
	char prefix[32];
	const char *lm_head_name;
};

/* The folder's name of tensor `name` (the model's "model.*" names,
 * through the multimodal prefix when there is one), in buf. */
static const char *hf_name(const struct llama_hf *h, const char *name,
			   char *buf, size_t len)
{
	if (!h->prefix[0])
		return name;
	if (!strncmp(name, "model.", 6)) {
		snprintf(buf, len, "%s%s", h->prefix, name + 6);
		return buf;
	}
	return strcmp(name, "lm_head.weight") ? name : h->lm_head_name;
}

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int hf_open(struct llama *m)
{
	struct llama_hf *h = calloc(1, sizeof *h);
	if (!h)
		return mg_error("llama: out of memory");
	snprintf(h->dir, sizeof h->dir, "%s", m->hf_dir);
	m->hf = h;
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", h->dir);
	char *cfg = llama_read_file(path, 16 << 20);
	int q = cfg ? bnb_check_config(path, cfg) : -1;
	free(cfg);
	if (q < 0)
		return -1;
	h->quantized = q > 0;
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

static int check_shapes(struct llama *m);
static int hf_get(void *ctx, const char *name, struct mg_tensor *view,
		  const char **path);

/* A Gemma 3 multimodal folder (config.json's model_type gemma3, whose
 * text_config llama_config.c read): the prefix its language model's
 * tensors carry, found by the embedding's name; the vision tower's
 * tensors are not read. */
static int multimodal_prefix(struct llama *m)
{
	struct llama_hf *h = m->hf;
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", h->dir);
	char *text = llama_read_file(path, 16 << 20);
	cJSON *j = text ? cJSON_Parse(text) : NULL;
	free(text);
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
	const bool mm =
		cJSON_IsString(mt) && !strcmp(mt->valuestring, "gemma3");
	cJSON_Delete(j);
	if (!mm)
		return 0;
	static const char *const pre[2] = {"language_model.model.",
					   "model.language_model."};
	static const char *const head[2] = {"language_model.lm_head.weight",
					    "lm_head.weight"};
	for (int i = 0; i < 2; i++) {
		snprintf(h->prefix, sizeof h->prefix, "%s", pre[i]);
		h->lm_head_name = head[i];
		struct mg_tensor t;
		const char *p;
		const int rc = hf_get(h, "model.embed_tokens.weight", &t, &p);
		if (rc < 0)
			return -1;
		if (rc > 0)
			return 0;
	}
	return mg_error("llama: %s: a gemma3 folder without its language "
			"model's embedding (language_model.model."
			"embed_tokens.weight or model.language_model."
			"embed_tokens.weight)",
			h->dir);
}

/* Open the folder, then check its tensors' shapes against config.json. */
int llama_hf_open(struct llama *m)
{
	if (hf_open(m) || multimodal_prefix(m) || check_shapes(m))
		return -1;
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
	if (!f) {
		if (h->index)
			mg_error_prefix(
				"llama: %s/model.safetensors.index.json "
				"maps '%s' to %s",
				h->dir, name, file);
		return NULL;
	}
	h->shard[h->nshards] = f;
	h->shard_name[h->nshards++] = strdup(file);
	return f;
}

/* bnb_get_fn over the folder: a tensor the index does not map is
 * absent, not an error. */
static int hf_get(void *ctx, const char *name, struct mg_tensor *view,
		  const char **path)
{
	struct llama_hf *h = ctx;
	char buf[512];
	name = hf_name(h, name, buf, sizeof buf);
	if (h->index) {
		const cJSON *map = cJSON_GetObjectItemCaseSensitive(
			h->index, "weight_map");
		if (!cJSON_GetObjectItemCaseSensitive(map, name))
			return 0;
	}
	struct mg_tensor_file *f = shard_for(h, name);
	if (!f)
		return -1;
	*path = mg_tensor_file_path(f);
	return mg_tensor_file_get(f, name, view);
}

/* Weight `name` in bitsandbytes' form, read and checked against the
 * shape of t (2-D); 1 read, 0 the folder has it in another form. */
static int bnb_weight_of(struct llama *m, const char *name,
			 const struct mg_tensor *t, struct bnb_weight *w)
{
	int rc = bnb_probe(hf_get, m->hf, name);
	if (rc <= 0)
		return rc;
	if (t->ndim != 2)
		return mg_error("llama: %s: '%s' is a bitsandbytes 4-bit "
				"weight, the model has a %d-D tensor there",
				m->hf->dir, name, t->ndim);
	return bnb_read(hf_get, m->hf, name, t->shape[0], t->shape[1], w) ? -1
									  : 1;
}

int llama_hf_load_nf4(struct llama *m, const char *name, struct mg_tensor *blob)
{
	struct bnb_weight w;
	int rc = bnb_weight_of(m, name, blob, &w);
	if (rc <= 0)
		return rc;
	return bnb_to_blob(&w, blob->data) ? -1 : 1;
}

/* dst from a bitsandbytes weight, dequantized (f32, then dst's type). */
static int load_dequantized(const struct bnb_weight *w, struct mg_tensor *dst)
{
	float *f = malloc((size_t)w->n * sizeof *f);
	if (!f)
		return mg_error("llama: out of memory for '%s'", w->name);
	struct mg_tensor src =
		mg_tensor_make(f, MG_F32, MG_DEV_CPU, dst->ndim, dst->shape);
	int rc = bnb_dequantize(w, f) || mg_tensor_convert_host(dst, &src);
	free(f);
	return rc ? -1 : 0;
}

/* Is `name` ("model.layers.N." + a projection's name) a part of a fused
 * tensor in this family's folders? 1: src names that tensor, whose rows
 * [*row0, *row0 + dst rows) of *total it is; 0: it is stored as itself. */
static int fused_part(const struct llama *m, const char *name, char *src,
		      size_t cap, int64_t *row0, int64_t *total)
{
	static const char pre[] = "model.layers.";
	if (!m->c.fused || strncmp(name, pre, sizeof pre - 1))
		return 0;
	const char *rest = strchr(name + sizeof pre - 1, '.');
	if (!rest)
		return 0;
	rest++;
	for (int p = LP_Q; p <= LP_DOWN; p++) {
		if (!llama_lp_proj(p) || strcmp(rest, llama_layer_param[p]))
			continue;
		const char *f = llama_lp_hf(&m->c, p, row0, total);
		if (!strcmp(f, rest))
			return 0;
		snprintf(src, cap, "%.*s%s", (int)(rest - name), name, f);
		return 1;
	}
	return 0;
}

/* dst as rows [row0, row0 + rows) of tensor src [total, cols], read whole
 * into f32 by load (llama_hf_load or _int4: its return value, 1 or 0 of
 * _int4 passed on). */
static int load_rows(struct llama *m, const char *src, int64_t row0,
		     int64_t total, struct mg_tensor *dst,
		     int (*load)(struct llama *, const char *,
				 struct mg_tensor *))
{
	const int64_t cols = dst->ndim == 2 ? dst->shape[1] : 1,
		      shape[2] = {total, cols};
	float *f = malloc((size_t)(total * cols) * sizeof *f);
	if (!f)
		return mg_error("llama: out of memory for '%s'", src);
	struct mg_tensor whole =
		mg_tensor_make(f, MG_F32, MG_DEV_CPU, dst->ndim, shape);
	int rc = load(m, src, &whole);
	if (rc >= 0 && (rc == 1 || load == llama_hf_load)) {
		struct mg_tensor part =
			mg_tensor_make(f + row0 * cols, MG_F32, MG_DEV_CPU,
				       dst->ndim, dst->shape);
		if (mg_tensor_convert_host(dst, &part))
			rc = mg_error_prefix("llama: %s: rows %lld.. of '%s'",
					     m->hf->dir, (long long)row0, src);
	}
	free(f);
	return rc;
}

int llama_hf_load_int4(struct llama *m, const char *name, struct mg_tensor *dst)
{
	char fused[200];
	int64_t row0, total;
	if (fused_part(m, name, fused, sizeof fused, &row0, &total))
		return load_rows(m, fused, row0, total, dst,
				 llama_hf_load_int4);
	char qn[256], sn[256];
	snprintf(qn, sizeof qn, "%s_int4", name);
	snprintf(sn, sizeof sn, "%s_scales", name);
	struct mg_tensor q, s;
	const char *path = m->hf->dir;
	int rc = hf_get(m->hf, qn, &q, &path);
	if (rc <= 0)
		return rc;
	if (hf_get(m->hf, sn, &s, &path) <= 0)
		return mg_error("llama: %s has '%s' but no '%s'", path, qn, sn);
	if (dst->ndim != 2)
		return mg_error("llama: %s: '%s' is int4, the model has a "
				"%d-D tensor there",
				path, qn, dst->ndim);
	const int64_t rows = dst->shape[0], cols = dst->shape[1];
	if (q.dtype != MG_U8 || q.ndim != 2 || q.shape[0] != rows ||
	    q.shape[1] * 2 != cols)
		return mg_error("llama: %s: '%s' must be U8 [%lld, %lld] (two "
				"int4 a byte) for the [%lld, %lld] weight",
				path, qn, (long long)rows, (long long)cols / 2,
				(long long)rows, (long long)cols);
	if (s.dtype != MG_F32 || s.ndim != 2 || s.shape[0] != rows ||
	    s.shape[1] < 1 || cols % s.shape[1])
		return mg_error("llama: %s: '%s' must be F32 [%lld, groups] "
				"with groups dividing %lld",
				path, sn, (long long)rows, (long long)cols);
	const int64_t ng = rows * s.shape[1], n = rows * cols;
	float *f = malloc((size_t)(n + ng) * sizeof *f);
	if (!f)
		return mg_error("llama: out of memory for '%s'", qn);
	memcpy(f + n, s.data, (size_t)ng * sizeof *f); /* f32 aligned */
	struct mg_tensor src =
		mg_tensor_make(f, MG_F32, MG_DEV_CPU, dst->ndim, dst->shape);
	rc = mg_int4_dequantize_host(q.data, f + n, rows, cols,
				     cols / s.shape[1], f) ||
	     mg_tensor_convert_host(dst, &src);
	free(f);
	return rc ? mg_error_prefix("llama: %s: '%s'", path, qn) : 1;
}

/* "[a, b]" of a shape, into buf. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf,
			     size_t len)
{
	size_t u = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < ndim && u < len; i++)
		u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "",
				      (long long)shape[i]);
	if (u < len)
		snprintf(buf + u, len - u, "]");
	return buf;
}

int llama_hf_load(struct llama *m, const char *name, struct mg_tensor *dst)
{
	char fused[200];
	int64_t row0, total;
	if (fused_part(m, name, fused, sizeof fused, &row0, &total))
		return load_rows(m, fused, row0, total, dst, llama_hf_load);
	int q4 = llama_hf_load_int4(m, name, dst);
	if (q4)
		return q4 < 0 ? -1 : 0;
	struct bnb_weight w;
	int q = bnb_weight_of(m, name, dst, &w);
	if (q)
		return q < 0 ? -1 : load_dequantized(&w, dst);
	char buf[512];
	name = hf_name(m->hf, name, buf, sizeof buf);
	struct mg_tensor_file *f = shard_for(m->hf, name);
	if (!f)
		return -1;
	struct mg_tensor src;
	if (!mg_tensor_file_get(f, name, &src))
		return mg_error("llama: %s has no tensor '%s'%s",
				mg_tensor_file_path(f), name,
				m->hf->index ? " (model.safetensors.index.json "
					       "maps it there)"
					     : "");
	bool same = src.ndim == dst->ndim;
	for (int i = 0; same && i < src.ndim; i++)
		same = src.shape[i] == dst->shape[i];
	if (!same) {
		char a[96], b[96];
		return mg_error("llama: %s: tensor '%s' is %s, config.json "
				"makes it %s",
				mg_tensor_file_path(f), name,
				shape_str(src.ndim, src.shape, a, sizeof a),
				shape_str(dst->ndim, dst->shape, b, sizeof b));
	}
	if (mg_tensor_convert_host(dst, &src))
		return mg_error_prefix("llama: %s: tensor '%s'",
				       mg_tensor_file_path(f), name);
	return 0;
}

/* Every float tensor the model reads, its header shape against the one
 * config.json implies, when the folder is opened: a config.json that lies
 * about a size is refused before the model is allocated (a lie about one
 * size made mgrun allocate 12.6 GB first). Only headers are read.
 * Quantized forms (bitsandbytes' packed bytes, int4) have shapes of their
 * own and are checked where they are read. A tensor the folder lacks in
 * every form is refused here too. */
static int check_shapes(struct llama *m)
{
	const struct llama_cfg *c = &m->c;
	const int64_t D = c->dim;
	const int nl = m->nlp;
	const int64_t total = c->layers * nl + 3;
	for (int64_t k = 0; k < total; k++) {
		char name[160];
		int64_t want[2];
		if (k < c->layers * nl) {
			const int p = m->kind[k % nl];
			int64_t row0;
			/* a fused tensor: its whole shape (once a part) */
			const char *hn = llama_lp_hf(c, p, &row0, &want[0]);
			snprintf(name, sizeof name, "model.layers.%lld.%s",
				 (long long)(k / nl), hn);
			int64_t sh[2];
			llama_lp_shape(c, p, sh);
			want[1] = sh[1];
		} else if (k == c->layers * nl) {
			snprintf(name, sizeof name,
				 "model.embed_tokens.weight");
			want[0] = c->vocab, want[1] = D;
		} else if (k == c->layers * nl + 1) {
			snprintf(name, sizeof name, "model.norm.weight");
			want[0] = D, want[1] = 0;
		} else {
			if (c->tie_embeddings)
				continue;
			snprintf(name, sizeof name, "lm_head.weight");
			want[0] = c->vocab, want[1] = D;
		}
		struct mg_tensor t;
		const char *path = NULL;
		int rc = hf_get(m->hf, name, &t, &path);
		if (rc < 0)
			return -1;
		if (rc == 0) {
			/* absent: fine in a quantized folder (its own names),
			 * or where the int4 form stands in */
			const char *where =
				path; /* NULL: the index maps none */
			char qn[200];
			snprintf(qn, sizeof qn, "%s_int4", name);
			if (m->hf->quantized ||
			    hf_get(m->hf, qn, &t, &path) > 0)
				continue;
			if (!where)
				return mg_error(
					"llama: %s/model.safetensors."
					"index.json maps no (valid) file "
					"to '%s'",
					m->hf->dir, name);
			return mg_error(
				"llama: %s has no tensor '%s'%s", where, name,
				m->hf->index ? " (model.safetensors.index."
					       "json maps it there)"
					     : "");
		}
		if (t.dtype != MG_F32 && t.dtype != MG_F16 &&
		    t.dtype != MG_BF16 && t.dtype != MG_F64)
			continue;
		const int nd = want[1] ? 2 : 1;
		bool same = t.ndim == nd && t.shape[0] == want[0] &&
			    (nd == 1 || t.shape[1] == want[1]);
		if (!same) {
			char a[96], b[96];
			return mg_error("llama: %s: tensor '%s' is %s, but "
					"%s/config.json makes it %s",
					path, name,
					shape_str(t.ndim, t.shape, a, sizeof a),
					m->hf->dir,
					shape_str(nd, want, b, sizeof b));
		}
	}
	return 0;
}
