/*
 * tok_load.c - mg_tokenizer_load: tokenizer.json (model, added tokens,
 * components) and tokenizer_config.json beside it (BOS/EOS/PAD/UNK,
 * add_bos_token, chat_template) into the immutable struct mg_tokenizer;
 * its accessors and mg_tokenizer_free. JSON errors name the file and the
 * byte offset; unsupported components are refused by name.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mg/chat.h"
#include "mg/log.h"
#include "mg/tensor_file.h"
#include "tok_internal.h"

/* Bounds on what mg_file_read takes: Llama 3's tokenizer.json is 9 MB,
 * the largest vocabularies' a few tens; a config with a chat template is
 * kilobytes. */
#define TOK_JSON_MAX (1ull << 30)
#define TOK_CONFIG_MAX (64ull << 20)

static cJSON *parse_json(const char *path, const char *buf, size_t len)
{
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
	if (!j) {
		/* cJSON stops just past the offending byte */
		size_t off = end && end >= buf ? (size_t)(end - buf) : 0;
		size_t line = 1, col = 1;
		for (size_t i = 0; i < off && i < len; i++, col++)
			if (buf[i] == '\n')
				line++, col = 0;
		mg_error("%s: invalid JSON near byte offset %zu (line %zu, "
			 "column %zu)",
			 path, off, line, col);
	}
	return j;
}

static uint64_t fnv(uint64_t h, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* id -> token string table: the vocabulary's strings live in the map's
 * pool; added tokens' content overrides. */
static int build_id_table(struct mg_tokenizer *t)
{
	int64_t nid = 0;
	for (size_t i = 0; i < t->vocab.n; i++)
		if (t->vocab.ent[i].id >= nid)
			nid = t->vocab.ent[i].id + 1;
	for (int i = 0; i < t->nadded; i++)
		if (t->added[i].id >= nid)
			nid = t->added[i].id + 1;
	/* The tables are indexed by id: ids are dense in real files (the
	 * vocabulary 0..n-1, added tokens after it), so an id far past the
	 * number of tokens is refused before tables for it are allocated
	 * (one id of 2^30 in a 60-byte file asked for 9 GB). */
	const int64_t ntok = (int64_t)t->vocab.n + t->nadded;
	if (nid > 2 * ntok + 65536)
		return mg_error("the largest token id is %lld, but there are "
				"only %lld tokens (vocab and added_tokens): "
				"ids must be (nearly) dense",
				(long long)nid - 1, (long long)ntok);
	t->nid = nid;
	t->id_tok = calloc((size_t)nid + 1, sizeof *t->id_tok);
	t->is_special = calloc((size_t)nid + 1, 1);
	if (!t->id_tok || !t->is_special)
		return mg_error("tokenizer: out of memory");
	for (size_t i = 0; i < t->vocab.n; i++)
		t->id_tok[t->vocab.ent[i].id] =
			t->vocab.pool + t->vocab.ent[i].off;
	for (int i = 0; i < t->nadded; i++) {
		t->id_tok[t->added[i].id] = t->added[i].content;
		t->is_special[t->added[i].id] = (uint8_t)t->added[i].special;
	}
	return 0;
}

int tok_parse_model(struct mg_tokenizer *t, const cJSON *m)
{
	const char *type = NULL;
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(m, "type");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
	if (cJSON_IsString(ty))
		type = ty->valuestring;
	else if (merges) /* old files: BPE without "type" */
		type = "BPE";
	if (!type || strcmp(type, "BPE"))
		return mg_error("model: unsupported type '%s'",
				type ? type : "(none)");
	const char *bad[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (int i = 0; i < 2; i++) {
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, bad[i]);
		if (cJSON_IsString(x) && x->valuestring[0])
			return mg_error("model: BPE %s is not supported",
					bad[i]);
	}
	const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
	if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
		return mg_error("model: BPE dropout is not supported");
	if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
		return mg_error("model: BPE needs a vocab object and a merges "
				"array");
	const cJSON *e;
	cJSON_ArrayForEach(e, vocab)
	{
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 ||
		    e->valuedouble > 1 << 30)
			return mg_error("model: vocab '%s': bad id", e->string);
		if (tok_strmap_put(&t->vocab, e->string, strlen(e->string),
				   (int32_t)e->valuedouble))
			return -1;
	}
	t->byte_fallback = cJSON_IsTrue(
		cJSON_GetObjectItemCaseSensitive(m, "byte_fallback"));
	t->fuse_unk =
		cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "fuse_unk"));
	t->ignore_merges = cJSON_IsTrue(
		cJSON_GetObjectItemCaseSensitive(m, "ignore_merges"));
	const cJSON *unk = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
	t->unk_id = -1;
	if (cJSON_IsString(unk) &&
	    (t->unk_id = tok_strmap_get(&t->vocab, unk->valuestring,
					strlen(unk->valuestring))) < 0)
		return mg_error("model: unk_token '%s' is not in the vocab",
				unk->valuestring);
	if (t->bytelevel) {
		char *tmp = malloc(t->vocab.pool_len + 1);
		if (!tmp)
			return mg_error("tokenizer: out of memory");
		for (size_t i = 0; i < t->vocab.n; i++) {
			long n = tok_bytelevel_unmap(
				t->vocab.pool + t->vocab.ent[i].off,
				t->vocab.ent[i].len, tmp);
			if (n > 0 && tok_strmap_put(&t->raw, tmp, (size_t)n,
						    t->vocab.ent[i].id)) {
				free(tmp);
				return -1;
			}
		}
		free(tmp);
	}
	for (int b = 0; b < 128; b++) {
		char c = (char)b;
		t->ascii_id[b] = tok_strmap_get(&t->vocab, &c, 1);
	}
	for (int b = 0; b < 256; b++) {
		char c = (char)b, name[8];
		snprintf(name, sizeof name, "<0x%02X>", b);
		t->byte_id[b] = t->bytelevel
					? tok_strmap_get(&t->raw, &c, 1)
					: tok_strmap_get(&t->vocab, name, 6);
	}
	if (tok_merges_init(&t->merges, (size_t)cJSON_GetArraySize(merges)))
		return -1;
	int32_t rank = 0;
	char *both = NULL;
	size_t bcap = 0;
	cJSON_ArrayForEach(e, merges)
	{
		const char *l, *r;
		size_t ll, rl;
		char *sp;
		if (cJSON_IsString(e) && (sp = strchr(e->valuestring, ' '))) {
			l = e->valuestring;
			ll = (size_t)(sp - l);
			r = sp + 1;
			rl = strlen(r);
		} else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
			   cJSON_IsString(e->child) &&
			   cJSON_IsString(e->child->next)) {
			l = e->child->valuestring;
			ll = strlen(l);
			r = e->child->next->valuestring;
			rl = strlen(r);
		} else {
			free(both);
			return mg_error("model: merge %d is not \"a b\" or "
					"[a, b]",
					rank);
		}
		if (ll + rl + 1 > bcap) {
			bcap = 2 * (ll + rl + 1);
			char *nb = realloc(both, bcap);
			if (!nb) {
				free(both);
				return mg_error("tokenizer: out of memory");
			}
			both = nb;
		}
		memcpy(both, l, ll);
		memcpy(both + ll, r, rl);
		int32_t a = tok_strmap_get(&t->vocab, l, ll);
		int32_t b = tok_strmap_get(&t->vocab, r, rl);
		int32_t ab = tok_strmap_get(&t->vocab, both, ll + rl);
		if (a < 0 || b < 0 || ab < 0) {
			mg_error("model: merge %d '%.*s' + '%.*s': %s not in "
				 "the vocab",
				 rank, (int)ll, l, (int)rl, r,
				 a < 0	 ? "left"
				 : b < 0 ? "right"
					 : "merged");
			free(both);
			return -1;
		}
		tok_merges_put(&t->merges, a, b, rank++, ab);
	}
	free(both);
	return 0;
}

static int parse_added(struct mg_tokenizer *t, const cJSON *arr)
{
	int n = cJSON_GetArraySize(arr);
	t->added = calloc((size_t)n + 1, sizeof *t->added);
	if (!t->added)
		return mg_error("tokenizer: out of memory");
	const cJSON *e;
	cJSON_ArrayForEach(e, arr)
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
		if (!cJSON_IsNumber(id) || !cJSON_IsString(c) ||
		    id->valuedouble < 0 || id->valuedouble > 1 << 30)
			return mg_error("added_tokens[%d]: needs an id and a "
					"content",
					t->nadded);
		struct tok_added *a = &t->added[t->nadded++];
		a->id = (int32_t)id->valuedouble;
		a->special = cJSON_IsTrue(
			cJSON_GetObjectItemCaseSensitive(e, "special"));
		a->lstrip = cJSON_IsTrue(
			cJSON_GetObjectItemCaseSensitive(e, "lstrip"));
		a->rstrip = cJSON_IsTrue(
			cJSON_GetObjectItemCaseSensitive(e, "rstrip"));
		a->single_word = cJSON_IsTrue(
			cJSON_GetObjectItemCaseSensitive(e, "single_word"));
		const cJSON *nz =
			cJSON_GetObjectItemCaseSensitive(e, "normalized");
		/* tokenizers' default: normalized unless special */
		a->normalized =
			cJSON_IsBool(nz) ? cJSON_IsTrue(nz) : !a->special;
		if (!(a->content = strdup(c->valuestring)))
			return mg_error("tokenizer: out of memory");
		/* normalized tokens are matched in normalized text, so
		 * against their own normalized form */
		a->pattern = a->normalized ? tok_normalize_str(t, a->content)
					   : strdup(a->content);
		if (!a->pattern)
			return mg_error("tokenizer: out of memory");
		a->plen = strlen(a->pattern);
	}
	return 0;
}

/* A special token named in tokenizer_config.json: a string or an
 * AddedToken object with "content". */
static int32_t config_token(const struct mg_tokenizer *t, const cJSON *cfg,
			    const char *key)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (cJSON_IsObject(x))
		x = cJSON_GetObjectItemCaseSensitive(x, "content");
	return cJSON_IsString(x) ? mg_tokenizer_token_id(t, x->valuestring)
				 : -1;
}

static int32_t first_of(const struct mg_tokenizer *t, const char *const *names)
{
	for (; *names; names++) {
		int32_t id = mg_tokenizer_token_id(t, *names);
		if (id >= 0)
			return id;
	}
	return -1;
}

static int parse_config(struct mg_tokenizer *t, const cJSON *cfg)
{
	static const char *const bos[] = {"<s>", "<|begin_of_text|>", "<bos>",
					  NULL};
	static const char *const eos[] = {"</s>", "<|end_of_text|>", "<eos>",
					  "<|endoftext|>", NULL};
	struct mg_tokenizer_specials *sp = &t->sp;
	sp->add_bos = sp->add_eos = -1;
	if (!cfg) { /* no config: the usual names, when the file has them */
		sp->bos = first_of(t, bos);
		sp->eos = first_of(t, eos);
		sp->pad = -1;
		sp->unk = t->unk_id;
		return tok_chat_setup(t, NULL);
	}
	sp->bos = config_token(t, cfg, "bos_token");
	sp->eos = config_token(t, cfg, "eos_token");
	sp->pad = config_token(t, cfg, "pad_token");
	sp->unk = config_token(t, cfg, "unk_token");
	if (sp->unk < 0)
		sp->unk = t->unk_id;
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
	if (cJSON_IsBool(x))
		sp->add_bos = cJSON_IsTrue(x);
	x = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
	if (cJSON_IsBool(x))
		sp->add_eos = cJSON_IsTrue(x);
	x = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
	const char *tpl = cJSON_IsString(x) ? x->valuestring : NULL;
	if (cJSON_IsArray(x)) { /* [{name, template}]: the default one */
		const cJSON *e;
		cJSON_ArrayForEach(e, x)
		{
			const cJSON *nm =
				cJSON_GetObjectItemCaseSensitive(e, "name");
			const cJSON *tp =
				cJSON_GetObjectItemCaseSensitive(e, "template");
			if (cJSON_IsString(tp) &&
			    (!tpl || (cJSON_IsString(nm) &&
				      !strcmp(nm->valuestring, "default"))))
				tpl = tp->valuestring;
		}
	}
	if (tpl && !(t->chat_template = strdup(tpl)))
		return mg_error("tokenizer: out of memory");
	return tok_chat_setup(t, cfg);
}

static int load_json(struct mg_tokenizer *t, const cJSON *j)
{
	if (!cJSON_IsObject(j))
		return mg_error("not a tokenizer.json object");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
	if (!m)
		return mg_error("no model");
	if (tok_parse_normalizer(
		    t, cJSON_GetObjectItemCaseSensitive(j, "normalizer")) ||
	    tok_parse_pretokenizer(
		    t, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer")) ||
	    tok_parse_model(t, m) ||
	    parse_added(t,
			cJSON_GetObjectItemCaseSensitive(j, "added_tokens")) ||
	    tok_parse_decoder(t,
			      cJSON_GetObjectItemCaseSensitive(j, "decoder")) ||
	    build_id_table(t) ||
	    /* after the id table: its ids are checked against it */
	    tok_parse_post(
		    t, cJSON_GetObjectItemCaseSensitive(j, "post_processor")) ||
	    tok_addset_build(t, &t->add_raw, 0) ||
	    tok_addset_build(t, &t->add_norm, 1))
		return -1;
	if (!(t->word_re = tok_regex_compile("\\w", "single_word")))
		return -1;
	return 0;
}

struct mg_tokenizer *mg_tokenizer_load(const char *path)
{
	struct stat st;
	char *json_path, *cfg_path;
	size_t plen = strlen(path);
	int isdir = !stat(path, &st) && S_ISDIR(st.st_mode);
	json_path = malloc(plen + 32);
	cfg_path = malloc(plen + 32);
	struct mg_tokenizer *t = calloc(1, sizeof *t);
	if (!json_path || !cfg_path || !t) {
		free(json_path);
		free(cfg_path);
		free(t);
		mg_error("tokenizer: out of memory");
		return NULL;
	}
	if (isdir) {
		sprintf(json_path, "%s/tokenizer.json", path);
		sprintf(cfg_path, "%s/tokenizer_config.json", path);
	} else {
		strcpy(json_path, path);
		const char *sl = strrchr(path, '/');
		sprintf(cfg_path, "%.*stokenizer_config.json",
			sl ? (int)(sl - path + 1) : 0, path);
	}
	size_t len = 0, clen = 0;
	char *buf = mg_file_read(json_path, TOK_JSON_MAX, 0, &len),
	     *cbuf = NULL;
	cJSON *j = buf ? parse_json(json_path, buf, len) : NULL, *cfg = NULL;
	int rc = j ? 0 : -1;
	if (!rc && !(t->path = strdup(json_path)))
		rc = mg_error("tokenizer: out of memory");
	if (!rc && load_json(t, j))
		rc = mg_error_prefix("%s", json_path);
	/* lstat: a dangling link is named, not taken for no config */
	if (!rc && !lstat(cfg_path, &st)) {
		cbuf = mg_file_read(cfg_path, TOK_CONFIG_MAX, 0, &clen);
		cfg = cbuf ? parse_json(cfg_path, cbuf, clen) : NULL;
		if (!cfg)
			rc = -1;
	}
	if (!rc && parse_config(t, cfg))
		rc = mg_error_prefix("%s", cfg_path);
	if (!rc) {
		uint64_t h = fnv(1469598103934665603ull, buf, len);
		h = fnv(h, "\0", 1);
		if (cbuf)
			h = fnv(h, cbuf, clen);
		snprintf(t->digest, sizeof t->digest, "%016llx",
			 (unsigned long long)h);
	}
	cJSON_Delete(j);
	cJSON_Delete(cfg);
	free(buf);
	free(cbuf);
	free(json_path);
	free(cfg_path);
	if (rc) {
		mg_tokenizer_free(t);
		return NULL;
	}
	return t;
}

void mg_tokenizer_free(struct mg_tokenizer *t)
{
	if (!t)
		return;
	tok_strmap_free(&t->vocab);
	tok_strmap_free(&t->raw);
	free(t->id_tok);
	free(t->is_special);
	mg_chat_template_free(t->chat);
	free(t->chat_err);
	cJSON_free(t->chat_vars);
	free(t->merges.slot);
	for (int i = 0; i < t->nnorm; i++) {
		free(t->norm[i].a);
		free(t->norm[i].b);
	}
	free(t->norm);
	for (int i = 0; i < t->npre; i++) {
		if (t->pre[i].re)
			pcre2_code_free(t->pre[i].re);
		free(t->pre[i].literal);
		free(t->pre[i].pattern);
	}
	free(t->pre);
	for (int i = 0; i < t->ndec; i++) {
		free(t->dec[i].a);
		free(t->dec[i].b);
	}
	free(t->dec);
	free(t->post_pre);
	free(t->post_post);
	for (int i = 0; i < t->nadded; i++) {
		free(t->added[i].content);
		free(t->added[i].pattern);
	}
	free(t->added);
	free(t->add_raw.idx);
	free(t->add_norm.idx);
	if (t->word_re)
		pcre2_code_free(t->word_re);
	free(t->chat_template);
	free(t->path);
	free(t);
}

int64_t mg_tokenizer_vocab_size(const struct mg_tokenizer *t)
{
	return t->nid;
}

int32_t mg_tokenizer_token_id(const struct mg_tokenizer *t, const char *tok)
{
	for (int i = 0; i < t->nadded; i++)
		if (!strcmp(t->added[i].content, tok))
			return t->added[i].id;
	return tok_strmap_get(&t->vocab, tok, strlen(tok));
}

const char *mg_tokenizer_token(const struct mg_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->nid ? t->id_tok[id] : NULL;
}

int mg_tokenizer_is_special(const struct mg_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->nid && t->is_special[id];
}

void mg_tokenizer_specials(const struct mg_tokenizer *t,
			   struct mg_tokenizer_specials *out)
{
	*out = t->sp;
}

const char *mg_tokenizer_chat_template(const struct mg_tokenizer *t)
{
	return t->chat_template;
}

const char *mg_tokenizer_digest(const struct mg_tokenizer *t)
{
	return t->digest;
}
