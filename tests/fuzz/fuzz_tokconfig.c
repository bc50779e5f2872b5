/*
 * fuzz_tokconfig.c - libFuzzer target for tokenizer_config.json as the
 * tokenizer reads it (core/text/tok_load.c, chat_template.c): the special
 * tokens (strings or AddedToken objects), add_bos_token / add_eos_token
 * and the chat_template (a string or the list form). The input is the
 * config, optionally followed by a line "%%" and a chat request (the
 * JSON of mg_tokenizer_apply_chat_template; without one, a two-message
 * conversation). It sits beside the project's small SentencePiece-style
 * tokenizer.json (tests/text/data/sp, copied to the scratch folder
 * once); when the pair loads, the template is applied and its output
 * encoded with the special tokens matched, as datasets and generate do.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mg/chat.h"
#include "mg/tokenizer.h"

#ifndef MG_FUZZ_DATA
#error "MG_FUZZ_DATA: the folder of the test tokenizers (fuzz.sh sets it)"
#endif

static const char default_request[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
	"{\"role\": \"user\", \"content\": \"Hello, ab!\"}, {\"role\": "
	"\"assistant\", \"content\": \"a b\"}], \"add_generation_prompt\": "
	"true}";

/* The project's tokenizer.json into the scratch folder, once. */
static void write_tokenizer(void)
{
	static int done;
	if (done)
		return;
	FILE *f = fopen(MG_FUZZ_DATA "/sp/tokenizer.json", "rb");
	static uint8_t buf[1 << 16];
	size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
	if (!f || n == 0 || n == sizeof buf)
		abort();
	fclose(f);
	char path[128];
	fuzz_write("tokenizer.json", buf, n, path, sizeof path);
	done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	write_tokenizer();
	const uint8_t *part[2];
	size_t len[2];
	int n = fuzz_split(data, size, 2, part, len);
	char path[128];
	fuzz_write("tokenizer_config.json", part[0], len[0], path, sizeof path);
	struct mg_tokenizer *t = mg_tokenizer_load(fuzz_scratch());
	if (!t)
		return 0;
	const int64_t nv = mg_tokenizer_vocab_size(t);
	struct mg_tokenizer_specials sp;
	mg_tokenizer_specials(t, &sp);
	if (sp.bos >= nv || sp.eos >= nv || sp.pad >= nv || sp.unk >= nv ||
	    sp.add_bos < -1 || sp.add_bos > 1 || sp.add_eos < -1 ||
	    sp.add_eos > 1)
		abort();
	const char *tpl = mg_tokenizer_chat_template(t);
	volatile size_t tl = tpl ? strlen(tpl) : 0;
	(void)tl;
	const char *req = n > 1 ? (const char *)part[1] : default_request;
	size_t rlen = n > 1 ? len[1] : sizeof default_request - 1;
	char *out = NULL;
	size_t olen = 0;
	struct mg_chat_span *spans = NULL;
	size_t nspans = 0;
	if (mg_tokenizer_apply_chat_template(t, req, rlen, &out, &olen, &spans,
					     &nspans) == 0) {
		for (size_t i = 0; i < nspans; i++)
			if (spans[i].start > spans[i].end ||
			    spans[i].end > olen)
				abort();
		struct mg_ids ids = {0};
		mg_tokenizer_encode(t, out, olen, MG_TOK_ADD_SPECIAL, &ids);
		free(ids.v);
	}
	free(out);
	free(spans);
	mg_tokenizer_free(t);
	return 0;
}
