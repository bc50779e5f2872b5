/*
 * llama_config.c - the decoder's architecture: presets of the published
 * shapes, explicit options over them (the family option choosing the
 * features, llama_family.c), or a Hugging Face config.json of any
 * family; and the rotary frequencies with llama3's scaling.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llama.h"

/* Shapes of the published models (their config.json files), by field
 * (what a preset leaves out is 0: no rope scaling, no window, ...). */
#define P(V, D, F, L, H, KV, HD, EPS, THETA, TIE, MAXP)                        \
	.vocab = V, .dim = D, .ffn = F, .layers = L, .heads = H,               \
	.kv_heads = KV, .head_dim = HD, .norm_eps = EPS, .rope_theta = THETA,  \
	.tie_embeddings = TIE, .init_std = 0.02, .max_positions = MAXP
/* llama3's rope scaling of Llama 3.2 */
#define LLAMA32_RS                                                             \
	.rs_factor = 32, .rs_low = 1, .rs_high = 4, .rs_orig_max = 8192
static const struct {
	const char *name;
	struct llama_cfg c;
} presets[] = {
	{"tiny", {P(256, 64, 176, 2, 4, 2, 16, 1e-5, 10000, false, 2048)}},
	{"llama2-7b",
	 {P(32000, 4096, 11008, 32, 32, 32, 128, 1e-5, 10000, false, 4096)}},
	{"llama3-8b",
	 {P(128256, 4096, 14336, 32, 32, 8, 128, 1e-5, 500000, false, 8192)}},
	{"llama3.2-1b",
	 {P(128256, 2048, 8192, 16, 32, 8, 64, 1e-5, 500000, true, 131072),
	  LLAMA32_RS}},
	{"llama3.2-3b",
	 {P(128256, 3072, 8192, 28, 24, 8, 128, 1e-5, 500000, true, 131072),
	  LLAMA32_RS}},
	/* the families' features come from their config keys (family
	 * option auto: the preset's family, llama_family.c) */
	{"mistral-7b",
	 {P(32768, 4096, 14336, 32, 32, 8, 128, 1e-5, 1e6, false, 32768),
	  .family = 1}},
	{"qwen2.5-1.5b",
	 {P(151936, 1536, 8960, 28, 12, 2, 128, 1e-6, 1e6, true, 32768),
	  .family = 2}},
	{"qwen3-1.7b",
	 {P(151936, 2048, 6144, 28, 16, 8, 128, 1e-6, 1e6, true, 40960),
	  .family = 3}},
	/* the sliding window is the preset's (Gemma 3 1B: 512) */
	{"gemma-2-2b",
	 {P(256000, 2304, 9216, 26, 8, 4, 256, 1e-6, 10000, true, 8192),
	  .family = 4, .window = 4096}},
	{"gemma-3-1b",
	 {P(262144, 1152, 6912, 26, 4, 1, 256, 1e-6, 1e6, true, 32768),
	  .family = 5, .window = 512}},
	/* Phi-3-mini-4k (window 2047) and Phi-4-mini (3/4 of each head
	 * rotary, tied; its longrope factors come with its folder) */
	{"phi-3-mini",
	 {P(32064, 3072, 8192, 32, 32, 32, 96, 1e-5, 10000, false, 4096),
	  .family = 6, .window = 2047}},
	{"phi-4-mini",
	 {P(200064, 3072, 8192, 32, 24, 8, 128, 1e-5, 10000, true, 131072),
	  .family = 6, .rot_dim = 96}},
};
#undef P

int llama_cfg_check(const struct llama_cfg *c)
{
	/* Each size by its config.json key, within the plugin options'
	 * bounds, so that no product of them overflows; then the whole. */
	const struct {
		const char *key;
		int64_t v, lo, hi;
	} size[] = {
		{"vocab_size", c->vocab, 2, 1 << 24},
		{"hidden_size", c->dim, 2, 1 << 20},
		{"intermediate_size", c->ffn, 1, 1 << 22},
		{"num_hidden_layers", c->layers, 1, 4096},
		{"num_attention_heads", c->heads, 1, 4096},
		{"num_key_value_heads", c->kv_heads, 1, 4096},
		{"head_dim", c->head_dim, 2, 4096},
	};
	for (size_t i = 0; i < sizeof size / sizeof *size; i++)
		if (size[i].v < size[i].lo || size[i].v > size[i].hi)
			return mg_error("llama: %s is %lld, not in [%lld, "
					"%lld]",
					size[i].key, (long long)size[i].v,
					(long long)size[i].lo,
					(long long)size[i].hi);
	const double D = (double)c->dim, V = (double)c->vocab,
		     q = (double)(c->heads * c->head_dim),
		     kv = (double)(c->kv_heads * c->head_dim);
	const double params =
		V * D * (c->tie_embeddings ? 1 : 2) + D +
		(double)c->layers * (D * (q + 2 * kv) + q * D +
				     3 * D * (double)c->ffn + 2 * D);
	if (params > 0x1p42)
		return mg_error("llama: the sizes make %.4g parameters, more "
				"than 2^42",
				params);
	if (c->heads % c->kv_heads)
		return mg_error("llama: num_attention_heads %lld is not a "
				"multiple of num_key_value_heads %lld",
				(long long)c->heads, (long long)c->kv_heads);
	if (c->head_dim % 2)
		return mg_error("llama: head_dim %lld is odd (rotary pairs)",
				(long long)c->head_dim);
	if (c->lr_n && c->lr_n != llama_rot_dim(c) / 2)
		return mg_error("llama: rope_scaling longrope has %d factors, "
				"the heads %lld rotary pairs",
				c->lr_n, (long long)(llama_rot_dim(c) / 2));
	if (c->rot_dim &&
	    (c->rot_dim < 2 || c->rot_dim % 2 || c->rot_dim > c->head_dim))
		return mg_error("llama: %lld rotary dims of a head of %lld "
				"(partial_rotary_factor): not even, or out "
				"of [2, head_dim]",
				(long long)c->rot_dim, (long long)c->head_dim);
	if (!(c->norm_eps > 0) || !(c->rope_theta > 1))
		return mg_error("llama: rms_norm_eps %g and rope_theta %g must "
				"be positive (theta > 1)",
				c->norm_eps, c->rope_theta);
	if (c->rs_factor != 0 &&
	    (!(c->rs_factor >= 1) || !(c->rs_high > c->rs_low) ||
	     !(c->rs_low > 0) || c->rs_orig_max < 1))
		return mg_error("llama: rope_scaling (llama3) needs factor >= "
				"1, 0 < low_freq_factor < high_freq_factor "
				"and original_max_position_embeddings >= 1");
	return 0;
}

/* The family option's features, through the family's own reader of
 * config.json keys (the options as those keys), so a preset and a
 * folder of the family get the same features. */
static int family_from_opts(struct llama_cfg *c, const struct mg_opts *o)
{
	/* auto|llama|mistral|...: auto keeps the preset's */
	const int opt = mg_opt_enum(o, "family");
	const int f = opt ? opt - 1 : c->family;
	const int64_t w = mg_opt_int(o, "sliding_window"),
		      pat = mg_opt_int(o, "sliding_window_pattern");
	const double acap = mg_opt_float(o, "attn_logit_softcapping"),
		     fcap = mg_opt_float(o, "final_logit_softcapping"),
		     local = mg_opt_float(o, "rope_local_base_freq"),
		     prf = mg_opt_float(o, "partial_rotary_factor");
	cJSON *j = cJSON_CreateObject();
	/* the families' keys as config.json names them (-1 / 0: the
	 * family's) */
	if (!j ||
	    (w > 0 &&
	     !cJSON_AddNumberToObject(j, "sliding_window", (double)w)) ||
	    (pat > 0 && !cJSON_AddNumberToObject(j, "sliding_window_pattern",
						 (double)pat)) ||
	    (acap >= 0 &&
	     !cJSON_AddNumberToObject(j, "attn_logit_softcapping", acap)) ||
	    (fcap >= 0 &&
	     !cJSON_AddNumberToObject(j, "final_logit_softcapping", fcap)) ||
	    (local > 0 &&
	     !cJSON_AddNumberToObject(j, "rope_local_base_freq", local)) ||
	    (prf > 0 &&
	     !cJSON_AddNumberToObject(j, "partial_rotary_factor", prf))) {
		cJSON_Delete(j);
		return mg_error("llama: out of memory");
	}
	c->family = f;
	/* the preset and the tie_embeddings option decide tying here, not
	 * the family's config default */
	const bool tie = c->tie_embeddings;
	const int64_t rot0 = c->rot_dim;
	c->rot_dim = prf > 0 ? -1 : rot0; /* -1: must be read */
	int rc = llama_families[f].read(c, j, "[model] family");
	c->tie_embeddings = tie;
	cJSON_Delete(j);
	if (!rc && w > 0 && c->window != w)
		rc = mg_error("llama: sliding_window = %lld is read by family "
			      "= mistral, phi3 or the gemma families only "
			      "(family = %s)",
			      (long long)w, llama_families[f].model_type);
	if (!rc && !c->norm_offset &&
	    (pat > 0 || acap >= 0 || fcap >= 0 || local > 0))
		rc = mg_error(
			"llama: sliding_window_pattern, the soft-caps and "
			"rope_local_base_freq are read by the gemma "
			"families only (family = %s)",
			llama_families[f].model_type);
	if (!rc && c->rot_dim < 0)
		rc = mg_error("llama: partial_rotary_factor is read by family "
			      "= phi3 only (family = %s)",
			      llama_families[f].model_type);
	return rc;
}

/* Option value n (> 0) overrides *field. */
static void over(int64_t *field, const struct mg_opts *o, const char *n)
{
	int64_t v = mg_opt_int(o, n);
	if (v > 0)
		*field = v;
}

int llama_cfg_from_opts(struct llama_cfg *c, const struct mg_opts *o,
			char *hf_dir, size_t hf_len)
{
	const char *dir = mg_opt_str(o, "hf_dir");
	snprintf(hf_dir, hf_len, "%s", dir);
	if (dir[0]) {
		char path[4200];
		snprintf(path, sizeof path, "%s/config.json", dir);
		if (llama_cfg_from_hf(c, path))
			return -1;
	} else {
		int p = mg_opt_enum(o, "preset");
		*c = presets[p].c;
		over(&c->vocab, o, "vocab_size");
		over(&c->dim, o, "hidden_size");
		over(&c->ffn, o, "intermediate_size");
		over(&c->layers, o, "num_layers");
		over(&c->heads, o, "num_heads");
		over(&c->kv_heads, o, "num_kv_heads");
		int64_t hd = mg_opt_int(o, "head_dim");
		const int64_t hd0 = c->head_dim;
		/* A changed width or head count re-derives head_dim. */
		if (hd > 0)
			c->head_dim = hd;
		else if (mg_opt_int(o, "hidden_size") > 0 ||
			 mg_opt_int(o, "num_heads") > 0)
			c->head_dim = c->dim / c->heads;
		/* a preset's partial rotary keeps its share of the head */
		if (c->rot_dim && c->head_dim != hd0)
			c->rot_dim =
				(int64_t)((double)c->head_dim *
					  ((double)c->rot_dim / (double)hd0));
		if (mg_opt_float(o, "rope_theta") > 0)
			c->rope_theta = mg_opt_float(o, "rope_theta");
		if (mg_opt_float(o, "rms_norm_eps") > 0)
			c->norm_eps = mg_opt_float(o, "rms_norm_eps");
		int tie = mg_opt_enum(o, "tie_embeddings"); /* auto|yes|no */
		if (tie)
			c->tie_embeddings = tie == 1;
		if (family_from_opts(c, o))
			return -1;
	}
	return llama_cfg_check(c);
}

/* ---- config.json -------------------------------------------------- */

static int json_int(const cJSON *j, const char *key, int64_t *out, bool need,
		    const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
	if (!v || cJSON_IsNull(v)) {
		if (need)
			return mg_error("%s: '%s' is missing", path, key);
		return 0;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
	    v->valuedouble < 0 || v->valuedouble > 9e15)
		return mg_error("%s: '%s' is not a non-negative integer", path,
				key);
	*out = (int64_t)v->valuedouble;
	return 0;
}

static int json_num(const cJSON *j, const char *key, double *out,
		    const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v))
		return mg_error("%s: '%s' is not a number", path, key);
	/* cJSON reads 1e999 as infinity: a NaN norm or rotation later */
	if (!isfinite(v->valuedouble))
		return mg_error("%s: '%s' is not a finite number (it "
				"overflows a double)",
				path, key);
	*out = v->valuedouble;
	return 0;
}

/* A list of at most LLAMA_LR_MAX numbers at key `name` of r into out;
 * their count, or -1 after an error naming k and name. */
static int factors(const cJSON *r, const char *name, double *out, const char *k,
		   const char *path)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, name), *e;
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1 ||
	    cJSON_GetArraySize(a) > LLAMA_LR_MAX)
		return mg_error("%s: '%s' longrope: '%s' is not a list of 1 "
				"to %d numbers",
				path, k, name, LLAMA_LR_MAX);
	int n = 0;
	cJSON_ArrayForEach(e, a)
	{
		if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) ||
		    !isfinite(e->valuedouble))
			return mg_error("%s: '%s' longrope: %s[%d] is not a "
					"positive number",
					path, k, name, n);
		out[n++] = e->valuedouble;
	}
	return n;
}

/*
 * rope type "longrope" (transformers' _compute_longrope_parameters, as
 * Phi3Config has it): short_factor and long_factor, one per rotary pair;
 * original_max_position_embeddings (config.json's, or the rope
 * object's); the attention factor given, else sqrt(1 + ln(s) / ln(orig))
 * for s = max_position_embeddings / orig > 1, else 1.
 */
static int longrope(struct llama_cfg *c, const cJSON *j, const cJSON *r,
		    const char *k, const char *path)
{
	const int ns = factors(r, "short_factor", c->lr_short, k, path);
	const int nl =
		ns < 0 ? -1 : factors(r, "long_factor", c->lr_long, k, path);
	if (ns < 0 || nl < 0)
		return -1;
	if (ns != nl)
		return mg_error("%s: '%s' longrope: %d short and %d long "
				"factors",
				path, k, ns, nl);
	c->lr_n = ns;
	c->lr_orig_max = 0;
	if (json_int(j, "original_max_position_embeddings", &c->lr_orig_max,
		     false, path) ||
	    json_int(r, "original_max_position_embeddings", &c->lr_orig_max,
		     false, path))
		return -1;
	if (c->lr_orig_max < 1)
		return mg_error("%s: '%s' longrope needs "
				"original_max_position_embeddings",
				path, k);
	double a = 0;
	if (json_num(r, "attention_factor", &a, path))
		return -1;
	c->lr_attn_given = a > 0;
	const double s = (double)c->max_positions / (double)c->lr_orig_max;
	c->lr_attn = a > 0    ? a
		     : s <= 1 ? 1
			      : sqrt(1 + log(s) / log((double)c->lr_orig_max));
	return 0;
}

/* rope_scaling (transformers 4) or rope_parameters (5), the object at
 * key k of j: theta (5 only), and llama3 scaling; "default" (or none) is
 * unscaled. */
static int rope_params(struct llama_cfg *c, const cJSON *j, const char *k,
		       const char *path)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, k);
	if (!r || cJSON_IsNull(r))
		return 0;
	if (!cJSON_IsObject(r))
		return mg_error("%s: '%s' is not an object", path, k);
	if (json_num(r, "rope_theta", &c->rope_theta, path))
		return -1;
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
	if (!t)
		t = cJSON_GetObjectItemCaseSensitive(r, "type");
	const char *type = cJSON_IsString(t) ? t->valuestring : "default";
	if (!strcmp(type, "default"))
		return 0;
	if (!strcmp(type, "linear")) /* positions / factor (Gemma 3) */
		return json_num(r, "factor", &c->rs_linear, path);
	if (!strcmp(type, "longrope"))
		return longrope(c, j, r, k, path);
	if (strcmp(type, "llama3"))
		return mg_error("%s: '%s' has rope type '%s', which the llama "
				"model does not run (default, linear, llama3 "
				"and longrope are)",
				path, k, type);
	if (json_num(r, "factor", &c->rs_factor, path) ||
	    json_num(r, "low_freq_factor", &c->rs_low, path) ||
	    json_num(r, "high_freq_factor", &c->rs_high, path) ||
	    json_int(r, "original_max_position_embeddings", &c->rs_orig_max,
		     true, path))
		return -1;
	return 0;
}

char *llama_read_file(const char *path, size_t cap)
{
	size_t len;
	char *text = mg_file_read(path, cap, 0, &len);
	/* A raw 0 byte is no JSON: cJSON_Parse would read the text up to it
	 * (a shorter file, or "not an object"), a length-bounded parse would
	 * skip it as white space (fuzz_adapter: the two readers of
	 * adapter_config.json disagreed) */
	if (text && strlen(text) != len) {
		mg_error("%s: a 0 byte at byte offset %zu: not a text file",
			 path, strlen(text));
		free(text);
		return NULL;
	}
	return text;
}

/*
 * Gemma 3's multimodal folders (model_type gemma3): the language model
 * is text_config, a Gemma3TextConfig of which transformers writes only
 * the keys that differ from its defaults; *j becomes those defaults with
 * text_config's keys over them (llama_hf.c maps the tensor names). The
 * vision tower is not read: such a folder trains and exports as the text
 * model it holds (gemma3_text).
 */
static int gemma3_text_of(cJSON **j, const char *path)
{
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(*j, "model_type");
	if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "gemma3"))
		return 0;
	static const char defaults[] =
		"{\"model_type\": \"gemma3_text\", \"vocab_size\": 262208, "
		"\"hidden_size\": 2304, \"intermediate_size\": 9216, "
		"\"num_hidden_layers\": 26, \"num_attention_heads\": 8, "
		"\"num_key_value_heads\": 4, \"head_dim\": 256, "
		"\"hidden_activation\": \"gelu_pytorch_tanh\", "
		"\"max_position_embeddings\": 131072, "
		"\"initializer_range\": 0.02, \"rms_norm_eps\": 1e-6, "
		"\"rope_theta\": 1000000.0, \"query_pre_attn_scalar\": 256, "
		"\"sliding_window\": 4096, \"rope_local_base_freq\": 10000.0, "
		"\"sliding_window_pattern\": 6, \"tie_word_embeddings\": true}";
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(*j, "text_config");
	if (tc && !cJSON_IsObject(tc) && !cJSON_IsNull(tc))
		return mg_error("%s: text_config is not an object", path);
	cJSON *t = cJSON_Parse(defaults);
	if (!t)
		return mg_error("llama: out of memory");
	const cJSON *e;
	cJSON_ArrayForEach(e, tc)
	{
		cJSON *d = cJSON_Duplicate(e, true);
		if (!d || !e->string) {
			cJSON_Delete(d);
			cJSON_Delete(t);
			return mg_error("llama: out of memory");
		}
		cJSON_DeleteItemFromObjectCaseSensitive(t, e->string);
		cJSON_AddItemToObject(t, e->string, d);
	}
	const cJSON *tmt = cJSON_GetObjectItemCaseSensitive(t, "model_type");
	if (!cJSON_IsString(tmt) || strcmp(tmt->valuestring, "gemma3_text")) {
		cJSON_Delete(t);
		return mg_error("%s: text_config's model_type is not "
				"\"gemma3_text\"",
				path);
	}
	cJSON_Delete(*j);
	*j = t;
	return 0;
}

int llama_cfg_from_hf(struct llama_cfg *c, const char *path)
{
	char *text = llama_read_file(path, 1 << 20);
	if (!text)
		return -1;
	cJSON *j = cJSON_Parse(text);
	free(text);
	if (!j || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return mg_error("%s: not a JSON object", path);
	}
	if (gemma3_text_of(&j, path))
		return -1;
	int rc = 0;
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
	const int fam =
		cJSON_IsString(mt) ? llama_family_find(mt->valuestring) : -1;
	if (fam < 0)
		rc = mg_error("%s: model_type is %s%s%s, not one of the "
			      "families the llama model runs (%s)",
			      path, cJSON_IsString(mt) ? "\"" : "",
			      cJSON_IsString(mt) ? mt->valuestring : "missing",
			      cJSON_IsString(mt) ? "\"" : "",
			      llama_family_names());
	memset(c, 0, sizeof *c);
	c->family = fam;
	c->norm_eps = 1e-6;
	c->rope_theta = 10000;
	c->init_std = 0.02;
	c->max_positions = 2048;
	if (!rc)
		rc = json_int(j, "vocab_size", &c->vocab, true, path) ||
		     json_int(j, "hidden_size", &c->dim, true, path) ||
		     json_int(j, "intermediate_size", &c->ffn, true, path) ||
		     json_int(j, "num_hidden_layers", &c->layers, true, path) ||
		     json_int(j, "num_attention_heads", &c->heads, true,
			      path) ||
		     json_int(j, "max_position_embeddings", &c->max_positions,
			      false, path) ||
		     json_num(j, "rms_norm_eps", &c->norm_eps, path) ||
		     json_num(j, "rope_theta", &c->rope_theta, path) ||
		     json_num(j, "initializer_range", &c->init_std, path);
	if (!rc) {
		c->kv_heads = c->heads;
		c->head_dim = c->heads ? c->dim / c->heads : 0;
		rc = json_int(j, "num_key_value_heads", &c->kv_heads, false,
			      path) ||
		     json_int(j, "head_dim", &c->head_dim, false, path) ||
		     rope_params(c, j, "rope_scaling", path) ||
		     rope_params(c, j, "rope_parameters", path) ||
		     llama_families[fam].read(c, j, path);
	}
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
	/* Gemma's MLP reads hidden_activation (llama_family.c) */
	if (!rc && act && !c->geglu &&
	    (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
		rc = mg_error("%s: hidden_act is not \"silu\"", path);
	/* absent: the family's default (read sets it: Gemma ties, and
	 * transformers leaves out a value equal to the class default) */
	const cJSON *tie =
		cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
	if (tie)
		c->tie_embeddings = cJSON_IsTrue(tie);
	cJSON_Delete(j);
	if (rc)
		return -1;
	if (llama_cfg_check(c))
		return mg_error_prefix("%s", path);
	return 0;
}

void llama_inv_freq(const struct llama_cfg *c, float *out)
{
	/* partial rotary: transformers' dim = int(head_dim * factor) */
	const int64_t rd = llama_rot_dim(c), half = rd / 2;
	for (int64_t j = 0; j < half; j++) {
		/* As transformers computes it: in float32. */
		float f = 1.0f / powf((float)c->rope_theta,
				      (float)(2 * j) / (float)rd);
		/* longrope: 1 / (short_factor * base^(2j / rd)), float32 */
		if (c->lr_n)
			f = 1.0f / ((float)c->lr_short[j] *
				    powf((float)c->rope_theta,
					 (float)(2 * j) / (float)rd));
		if (c->rs_linear > 0) /* rope_scaling linear (Gemma 3) */
			f = (float)(f / c->rs_linear);
		if (c->rs_factor > 0) {
			/* llama3: long wavelengths slowed by factor, short
			 * ones kept, a smooth blend between. */
			double lo_wl = (double)c->rs_orig_max / c->rs_low;
			double hi_wl = (double)c->rs_orig_max / c->rs_high;
			double wl = 2 * M_PI / f;
			if (wl > lo_wl) {
				f = (float)(f / c->rs_factor);
			} else if (wl >= hi_wl) {
				double s = ((double)c->rs_orig_max / wl -
					    c->rs_low) /
					   (c->rs_high - c->rs_low);
				f = (float)((1 - s) * f / c->rs_factor + s * f);
			}
		}
		out[j] = f;
	}
}

void llama_inv_freq_local(const struct llama_cfg *c, float *out)
{
	const double theta =
		c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta;
	const int64_t rd = llama_rot_dim(c);
	for (int64_t j = 0; j < rd / 2; j++)
		out[j] = 1.0f / powf((float)theta, (float)(2 * j) / (float)rd);
}
