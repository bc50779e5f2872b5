/*
 * fuzz_prompts.c - libFuzzer target for the prompt files of `mgrun
 * generate --prompts` (core/cli/prompts.c, gen_parse_prompts): JSON Lines
 * of {"prompt": TEXT} or {"ids": [...]} with an optional "id". Text
 * prompts are tokenized with the project's small test tokenizer
 * (tests/text/data/sp), or refused at their line without one: the first
 * input byte says which (odd: no tokenizer), the rest is the file. Every
 * prompt accepted must hold at least one token.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/generate.h"

#ifndef MG_FUZZ_DATA
#error "MG_FUZZ_DATA: the folder of the test tokenizers (fuzz.sh sets it)"
#endif

static struct mg_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	tok = mg_tokenizer_load(MG_FUZZ_DATA "/sp");
	if (!tok)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const struct mg_tokenizer *t = data[0] & 1 ? NULL : tok;
	/* the file as mg_file_read gives it: NUL-terminated */
	char *buf = malloc(size);
	if (!buf)
		abort();
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = 0;
	struct gen_prompt *ps = NULL;
	int n = 0;
	int rc = gen_parse_prompts("prompts.jsonl", buf, size - 1, t, &ps, &n);
	if (rc == 0 && n == 0)
		abort();
	for (int i = 0; rc == 0 && i < n; i++)
		if (ps[i].ids.n < 1 || ps[i].line < 1)
			abort();
	gen_prompts_free(ps, n);
	free(buf);
	return 0;
}
