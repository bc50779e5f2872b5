/*
 * td_tok_hf.c - the core's Hugging Face tokenizer behind struct td_tok.
 *
 * Datasets encode data text with MG_TOK_NO_ADDED and insert the
 * template's special tokens by id, so the two never mix; a chat
 * rendered by the model's own template (td_render_model.c) is encoded
 * with its special tokens matched, its data contents apart. What the
 * tokenizer does on its own (a BOS from the post-processor, a word
 * boundary before every encode) is probed once here on a short text.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/chat.h"
#include "mg/mg.h"
#include "mg/tokenizer.h"
#include "textdata.h"

static int hf_encode(void *self, const char *s, size_t n, struct mg_ids *out)
{
	return mg_tokenizer_encode(self, s, n, MG_TOK_NO_ADDED, out);
}

/* A rendered chat template: added tokens matched, nothing added. */
static int hf_encode_rendered(void *self, const char *s, size_t n,
			      struct mg_ids *out)
{
	return mg_tokenizer_encode(self, s, n, 0, out);
}

static int hf_apply_chat(void *self, const char *req, size_t n, char **out,
			 size_t *len, struct mg_chat_span **spans,
			 size_t *nspans)
{
	return mg_tokenizer_apply_chat_template(self, req, n, out, len, spans,
						nspans);
}

static int32_t hf_token_id(void *self, const char *name)
{
	return mg_tokenizer_token_id(self, name);
}

int td_tok_hf_load(const char *path, struct td_tok *t)
{
	memset(t, 0, sizeof *t);
	struct mg_tokenizer *k = mg_tokenizer_load(path);
	if (!k)
		return -1;
	struct mg_tokenizer_specials sp;
	mg_tokenizer_specials(k, &sp);
	t->self = k;
	t->encode = hf_encode;
	t->encode_rendered = hf_encode_rendered;
	t->apply_chat = hf_apply_chat;
	t->token_id = hf_token_id;
	t->bos_id = sp.bos;
	t->eos_id = sp.eos;
	t->bos = sp.bos >= 0 ? mg_tokenizer_token(k, sp.bos) : NULL;
	t->eos = sp.eos >= 0 ? mg_tokenizer_token(k, sp.eos) : NULL;
	t->chat_template = mg_tokenizer_chat_template(k);
	t->digest = mg_tokenizer_digest(k);
	t->vocab = mg_tokenizer_vocab_size(k);
	struct mg_ids ids = {0};
	if (mg_tokenizer_encode(k, "a", 1, MG_TOK_ADD_SPECIAL, &ids)) {
		td_tok_hf_free(t);
		return -1;
	}
	t->add_bos = sp.bos >= 0 && ids.n > 0 && ids.v[0] == sp.bos;
	ids.n = 0;
	if (mg_tokenizer_encode(k, "a", 1, MG_TOK_NO_ADDED, &ids)) {
		free(ids.v);
		td_tok_hf_free(t);
		return -1;
	}
	const char *first = ids.n ? mg_tokenizer_token(k, ids.v[0]) : NULL;
	t->prepend_space = first && !strncmp(first, "\xe2\x96\x81", 3);
	free(ids.v);
	return 0;
}

void td_tok_hf_free(struct td_tok *t)
{
	if (t->self)
		mg_tokenizer_free(t->self);
	memset(t, 0, sizeof *t);
}
