/*
 * llama_family.c - the decoder families the llama plugin runs, each a
 * config.json model_type whose keys beyond LlamaConfig's are resolved
 * here, once, into the architecture's features (struct llama_cfg: which
 * projections carry biases, q/k norms, the sliding window), and written
 * back by export. The forward, backward and decode read the features and
 * never a family, so a family that differs only in these is an entry of
 * the table below.
 *
 *   llama    attention_bias (q, k, v, o) and mlp_bias (gate, up, down)
 *   mistral  sliding_window over every layer
 *   qwen2    q, k, v biases; Qwen's sliding-window keys
 *   qwen3    per-head q and k RMSNorm; attention_bias; the same keys
 *   gemma2   (1 + w) RMSNorms, sandwich norms, GeGLU (tanh GELU),
 *            embeddings times sqrt(hidden), query_pre_attn_scalar,
 *            attention and final logit soft-capping, sliding and full
 *            layers (layer_types; older configs: even layers slide)
 *   gemma3_text  Gemma 2's without the soft-caps by default, with q/k
 *            norms, rope_local_base_freq on sliding layers and
 *            sliding_window_pattern (every 6th layer full)
 *   phi3     fused qkv_proj and gate_up_proj in the folder (split at
 *            load, fused at export), partial_rotary_factor (Phi-4-mini
 *            turns 3/4 of each head), sliding_window over every layer
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llama.h"

#define BIAS_QKV ((1u << LT_Q) | (1u << LT_K) | (1u << LT_V))
#define BIAS_QKVO (BIAS_QKV | (1u << LT_O))
#define BIAS_MLP ((1u << LT_GATE) | (1u << LT_UP) | (1u << LT_DOWN))

static const cJSON *key(const void *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A boolean key: absent or null is false. */
static int get_bool(const void *j, const char *k, bool *out, const char *path)
{
	const cJSON *v = key(j, k);
	if (v && !cJSON_IsBool(v))
		return mg_error("%s: '%s' is not true or false", path, k);
	*out = v && cJSON_IsTrue(v);
	return 0;
}

/* A count key: absent or null leaves *out. */
static int get_count(const void *j, const char *k, int64_t *out,
		     const char *path)
{
	const cJSON *v = key(j, k);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
	    v->valuedouble < 0 || v->valuedouble > 1e15)
		return mg_error("%s: '%s' is not a non-negative integer", path,
				k);
	*out = (int64_t)v->valuedouble;
	return 0;
}

/*
 * The layers' attention kinds: transformers 5's layer_types when given
 * (every entry "full_attention" or "sliding_attention"), else `sliding`
 * (whether every layer slides). The window applies when every layer
 * slides; layers that differ are refused: the decoder has one attention
 * per model so far.
 */
static int window_of(struct llama_cfg *c, const void *j, bool sliding,
		     int64_t w, const char *path)
{
	const cJSON *lt = key(j, "layer_types");
	if (lt) {
		if (!cJSON_IsArray(lt) ||
		    cJSON_GetArraySize(lt) != (int)c->layers)
			return mg_error("%s: 'layer_types' is not a list of "
					"num_hidden_layers = %lld names",
					path, (long long)c->layers);
		int slide = 0, i = 0;
		const cJSON *e;
		cJSON_ArrayForEach(e, lt)
		{
			const char *s = cJSON_IsString(e) ? e->valuestring : "";
			if (!strcmp(s, "sliding_attention"))
				slide++;
			else if (strcmp(s, "full_attention"))
				return mg_error("%s: layer_types[%d] is not "
						"\"full_attention\" or "
						"\"sliding_attention\"",
						path, i);
			i++;
		}
		if (slide && slide != i)
			return mg_error(
				"%s: layer_types mixes sliding and full "
				"attention layers, which the llama "
				"model does not run (every layer "
				"attends one way)",
				path);
		sliding = slide > 0;
	}
	c->window = 0;
	if (!sliding)
		return 0;
	if (w < 1)
		return mg_error("%s: sliding attention without a "
				"'sliding_window' size",
				path);
	c->window = w;
	return 0;
}

static int read_llama(struct llama_cfg *c, const void *j, const char *path)
{
	bool ab = false, mb = false;
	if (get_bool(j, "attention_bias", &ab, path) ||
	    get_bool(j, "mlp_bias", &mb, path))
		return -1;
	c->bias = (ab ? BIAS_QKVO : 0) | (mb ? BIAS_MLP : 0);
	return 0;
}

static void write_llama(const struct llama_cfg *c, void *j)
{
	cJSON_AddBoolToObject(j, "attention_bias", c->bias & BIAS_QKVO);
	cJSON_AddBoolToObject(j, "mlp_bias", c->bias & BIAS_MLP);
	cJSON_AddNumberToObject(j, "pretraining_tp", 1);
}

static int read_mistral(struct llama_cfg *c, const void *j, const char *path)
{
	int64_t w = 0;
	if (get_count(j, "sliding_window", &w, path))
		return -1;
	return window_of(c, j, w > 0, w, path);
}

static void write_mistral(const struct llama_cfg *c, void *j)
{
	if (c->window)
		cJSON_AddNumberToObject(j, "sliding_window", (double)c->window);
	else
		cJSON_AddNullToObject(j, "sliding_window");
}

/* Qwen2 and Qwen3: use_sliding_window slides layers from
 * max_window_layers (28 by default, as transformers) on, or as
 * layer_types says; without use_sliding_window nothing slides, whatever
 * layer_types says (transformers drops the window then). */
static int qwen_window(struct llama_cfg *c, const void *j, const char *path)
{
	bool use = false;
	int64_t w = 0, from = 28;
	if (get_bool(j, "use_sliding_window", &use, path) ||
	    get_count(j, "sliding_window", &w, path) ||
	    get_count(j, "max_window_layers", &from, path))
		return -1;
	c->window = 0;
	if (!use)
		return 0;
	if (from > 0 && from < c->layers && !key(j, "layer_types"))
		return mg_error("%s: use_sliding_window slides layers %lld "
				"and up only (max_window_layers), which the "
				"llama model does not run (every layer "
				"attends one way)",
				path, (long long)from);
	return window_of(c, j, from < c->layers, w, path);
}

static void write_qwen_window(const struct llama_cfg *c, void *j)
{
	cJSON_AddBoolToObject(j, "use_sliding_window", c->window > 0);
	if (c->window)
		cJSON_AddNumberToObject(j, "sliding_window", (double)c->window);
	else
		cJSON_AddNullToObject(j, "sliding_window");
	cJSON_AddNumberToObject(j, "max_window_layers",
				c->window ? 0 : (double)c->layers);
	cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
	for (int64_t l = 0; l < c->layers; l++)
		cJSON_AddItemToArray(
			lt, cJSON_CreateString(c->window ? "sliding_attention"
							 : "full_attention"));
}

static int read_qwen2(struct llama_cfg *c, const void *j, const char *path)
{
	c->bias = BIAS_QKV;
	return qwen_window(c, j, path);
}

static int read_qwen3(struct llama_cfg *c, const void *j, const char *path)
{
	bool ab = false;
	if (get_bool(j, "attention_bias", &ab, path))
		return -1;
	c->bias = ab ? BIAS_QKVO : 0;
	c->qk_norm = true;
	return qwen_window(c, j, path);
}

static void write_qwen3(const struct llama_cfg *c, void *j)
{
	cJSON_AddBoolToObject(j, "attention_bias", c->bias & BIAS_QKVO);
	write_qwen_window(c, j);
}

/* A number key: absent leaves *out, null writes 0 (Gemma's "no
 * soft-capping"). */
static int get_num(const void *j, const char *k, double *out, const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	if (!v)
		return 0;
	if (cJSON_IsNull(v)) {
		*out = 0;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
	    v->valuedouble < 0)
		return mg_error("%s: '%s' is not a non-negative number", path,
				k);
	*out = v->valuedouble;
	return 0;
}

/* Gemma's layers: layer_types (full_attention / sliding_attention),
 * else the family's pattern (layer l full when (l + 1) % pattern == 0:
 * Gemma 2's 2 slides the even layers, Gemma 3's 6 every five of six);
 * the window is sliding_window (the preset's, else 4096). */
static int gemma_layers(struct llama_cfg *c, const void *j, int64_t pattern,
			const char *path)
{
	int64_t w = c->window > 0 ? c->window : 4096;
	if (get_count(j, "sliding_window", &w, path) ||
	    get_count(j, "sliding_window_pattern", &pattern, path))
		return -1;
	if (c->layers > LLAMA_MAX_LAYERS)
		return mg_error("%s: more than %d layers", path,
				LLAMA_MAX_LAYERS);
	memset(c->full, 0, sizeof c->full);
	const cJSON *lt = key(j, "layer_types");
	if (lt &&
	    (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)c->layers))
		return mg_error("%s: 'layer_types' is not a list of "
				"num_hidden_layers = %lld names",
				path, (long long)c->layers);
	for (int64_t l = 0; l < c->layers; l++) {
		bool full = pattern > 0 && (l + 1) % pattern == 0;
		if (lt) {
			const cJSON *e = cJSON_GetArrayItem(lt, (int)l);
			const char *n = cJSON_IsString(e) ? e->valuestring : "";
			full = !strcmp(n, "full_attention");
			if (!full && strcmp(n, "sliding_attention"))
				return mg_error("%s: layer_types[%lld] is not "
						"\"full_attention\" or "
						"\"sliding_attention\"",
						path, (long long)l);
		}
		if (full)
			c->full[l / 64] |= (uint64_t)1 << (l % 64);
	}
	c->window = w;
	return 0;
}

/* transformers 5's rope_parameters by layer type (Gemma 3): the full
 * layers' theta and linear factor, the sliding layers' theta. */
static int gemma_rope(struct llama_cfg *c, const void *j, const char *path)
{
	const cJSON *rp = key(j, "rope_parameters");
	const cJSON *r[2] = {rp ? key(rp, "full_attention") : NULL,
			     rp ? key(rp, "sliding_attention") : NULL};
	for (int i = 0; i < 2; i++) {
		if (!r[i])
			continue;
		const cJSON *t = key(r[i], "rope_type");
		const char *type =
			cJSON_IsString(t) ? t->valuestring : "default";
		double f = 0;
		if (get_num(r[i], "rope_theta",
			    i ? &c->rope_local_theta : &c->rope_theta, path) ||
		    get_num(r[i], "factor", &f, path))
			return -1;
		if (!strcmp(type, "linear") && i == 0)
			c->rs_linear = f;
		else if (strcmp(type, "default"))
			return mg_error("%s: rope type '%s' of the %s layers "
					"is not supported (default, and "
					"linear on full layers, are)",
					path, type, i ? "sliding" : "full");
	}
	return 0;
}

/* What Gemma 2 and 3 share; the soft-caps' defaults are the family's
 * (transformers' Gemma2Config: 50 and 30; Gemma3: none). */
static int read_gemma(struct llama_cfg *c, const void *j, const char *path,
		      bool v3)
{
	bool ab = false;
	double qs = 256, acap = v3 ? 0 : 50, fcap = v3 ? 0 : 30;
	if (get_bool(j, "attention_bias", &ab, path) ||
	    get_num(j, "query_pre_attn_scalar", &qs, path) ||
	    get_num(j, "attn_logit_softcapping", &acap, path) ||
	    get_num(j, "final_logit_softcapping", &fcap, path))
		return -1;
	const cJSON *act = key(j, "hidden_activation");
	if (act && (!cJSON_IsString(act) ||
		    strcmp(act->valuestring, "gelu_pytorch_tanh")))
		return mg_error("%s: hidden_activation is not "
				"\"gelu_pytorch_tanh\"",
				path);
	if (!(qs > 0))
		return mg_error("%s: query_pre_attn_scalar must be > 0", path);
	c->bias = ab ? BIAS_QKVO : 0;
	c->norm_offset = c->sandwich = c->geglu = true;
	/* transformers' default, which its config.json then leaves out
	 * (llama_config.c reads tie_word_embeddings after this) */
	c->tie_embeddings = true;
	c->embed_scale = sqrt((double)c->dim);
	c->attn_scale = 1 / sqrt(qs);
	c->attn_softcap = acap;
	c->final_softcap = fcap;
	c->qk_norm = v3;
	if (v3) {
		c->rope_local_theta = 10000;
		if (get_num(j, "rope_local_base_freq", &c->rope_local_theta,
			    path) ||
		    gemma_rope(c, j, path))
			return -1;
	}
	return gemma_layers(c, j, v3 ? 6 : 2, path);
}

static int read_gemma2(struct llama_cfg *c, const void *j, const char *path)
{
	return read_gemma(c, j, path, false);
}

static int read_gemma3(struct llama_cfg *c, const void *j, const char *path)
{
	return read_gemma(c, j, path, true);
}

/* A number that is null when 0. */
static void add_num_or_null(void *j, const char *k, double v)
{
	if (v > 0)
		cJSON_AddNumberToObject(j, k, v);
	else
		cJSON_AddNullToObject(j, k);
}

static void write_gemma(const struct llama_cfg *c, void *j)
{
	cJSON_AddBoolToObject(j, "attention_bias", c->bias & BIAS_QKVO);
	cJSON_ReplaceItemInObject(j, "hidden_act",
				  cJSON_CreateString("gelu_pytorch_tanh"));
	cJSON_AddStringToObject(j, "hidden_activation", "gelu_pytorch_tanh");
	double qs = 1 / (c->attn_scale * c->attn_scale);
	if (fabs(qs - round(qs)) < 1e-6 * qs)
		qs = round(qs);
	cJSON_AddNumberToObject(j, "query_pre_attn_scalar", qs);
	add_num_or_null(j, "attn_logit_softcapping", c->attn_softcap);
	add_num_or_null(j, "final_logit_softcapping", c->final_softcap);
	add_num_or_null(j, "sliding_window", (double)c->window);
	cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
	for (int64_t l = 0; l < c->layers; l++)
		cJSON_AddItemToArray(
			lt, cJSON_CreateString(llama_slides(c, l)
						       ? "sliding_attention"
						       : "full_attention"));
	if (c->qk_norm) {
		cJSON_AddNumberToObject(j, "rope_local_base_freq",
					c->rope_local_theta > 0
						? c->rope_local_theta
						: c->rope_theta);
		/* the pattern too when the layers follow one (transformers
		 * before layer_types reads only it) */
		for (int64_t p = 1; p <= c->layers + 1; p++) {
			bool fits = true;
			for (int64_t l = 0; l < c->layers && fits; l++)
				fits = llama_slides(c, l) == ((l + 1) % p != 0);
			if (fits) {
				cJSON_AddNumberToObject(
					j, "sliding_window_pattern", (double)p);
				break;
			}
		}
		if (c->rs_linear > 0) {
			cJSON *r = cJSON_CreateObject();
			cJSON_AddStringToObject(r, "rope_type", "linear");
			cJSON_AddNumberToObject(r, "factor", c->rs_linear);
			cJSON_ReplaceItemInObject(j, "rope_scaling", r);
		}
	}
}

/* A factor key in (0, 1]: absent or null leaves *out. */
static int get_factor(const void *j, const char *k, double *out,
		      const char *path)
{
	const cJSON *v = key(j, k);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || v->valuedouble > 1)
		return mg_error("%s: '%s' is not a number in (0, 1]", path, k);
	*out = v->valuedouble;
	return 0;
}

/* Phi-3: q, k, v and gate, up fused in the folder; no biases; RoPE on
 * the first int(head_dim * partial_rotary_factor) dims of each head (as
 * transformers truncates it; transformers 5 may keep the factor in
 * rope_parameters); a sliding window over every layer when
 * sliding_window is set (transformers' Phi3Model masks with it). A
 * config without the keys keeps the window and rotary dims it has (a
 * preset's; a folder's start at none and all). */
static int read_phi3(struct llama_cfg *c, const void *j, const char *path)
{
	double f = 0;
	int64_t w = 0;
	const cJSON *rp = key(j, "rope_parameters");
	if (get_factor(j, "partial_rotary_factor", &f, path) ||
	    (cJSON_IsObject(rp) &&
	     get_factor(rp, "partial_rotary_factor", &f, path)) ||
	    get_count(j, "sliding_window", &w, path))
		return -1;
	c->bias = 0;
	c->fused = LLAMA_FUSE_QKV | LLAMA_FUSE_GU;
	if (f > 0) {
		const int64_t rd = (int64_t)((double)c->head_dim * f);
		if (rd < 2 || rd % 2)
			return mg_error("%s: partial_rotary_factor %g of "
					"head_dim %lld makes %lld rotary "
					"dims, not an even number >= 2",
					path, f, (long long)c->head_dim,
					(long long)rd);
		c->rot_dim = rd == c->head_dim ? 0 : rd;
	}
	if (key(j, "sliding_window") || key(j, "layer_types"))
		return window_of(c, j, w > 0, w, path);
	return 0;
}

static void write_phi3(const struct llama_cfg *c, void *j)
{
	write_mistral(c, j);
	/* a factor that int(head_dim * factor) turns back into rot_dim */
	const int64_t rd = llama_rot_dim(c);
	double f = (double)rd / (double)c->head_dim;
	while ((int64_t)((double)c->head_dim * f) < rd)
		f = nextafter(f, 2.0);
	cJSON_AddNumberToObject(j, "partial_rotary_factor", f);
	/* Phi3Config's default pad_token_id (32000) would be outside a
	 * smaller vocabulary; the folder does not say which id pads */
	cJSON_AddNullToObject(j, "pad_token_id");
}

/* In the order of the plugin's `family` option. */
const struct llama_family llama_families[] = {
	{"llama", "LlamaForCausalLM", read_llama, write_llama},
	{"mistral", "MistralForCausalLM", read_mistral, write_mistral},
	{"qwen2", "Qwen2ForCausalLM", read_qwen2, write_qwen_window},
	{"qwen3", "Qwen3ForCausalLM", read_qwen3, write_qwen3},
	{"gemma2", "Gemma2ForCausalLM", read_gemma2, write_gemma},
	{"gemma3_text", "Gemma3ForCausalLM", read_gemma3, write_gemma},
	{"phi3", "Phi3ForCausalLM", read_phi3, write_phi3},
	{NULL, NULL, NULL, NULL},
};

int llama_family_find(const char *model_type)
{
	for (int i = 0; llama_families[i].model_type; i++)
		if (!strcmp(llama_families[i].model_type, model_type))
			return i;
	return -1;
}

const char *llama_family_names(void)
{
	return "llama|mistral|qwen2|qwen3|gemma2|gemma3_text|phi3";
}
