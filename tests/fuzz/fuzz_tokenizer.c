/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer (core/text/tok_*.c):
 * the input is a tokenizer.json and a text, separated by a line "%%".
 * The file is loaded as mgrun loads a model's tokenizer (alone: no
 * tokenizer_config.json beside it, fuzz_tokconfig.c covers that); when it
 * loads, the text is encoded as data (no added tokens), as a prompt (with
 * the post-processor) and plainly, each result decoded with and without
 * the special tokens, and the accessors asked about every id. The text
 * is also encoded with the real Llama 2 and Llama 3 tokenizers when
 * scripts/fetch-tokenizers.sh has put them in .deps/tokenizers (too large
 * for an input; their pre-tokenizer regexes are the ones users meet).
 * Errors are fine (an unsupported component, invalid UTF-8); crashes,
 * sanitizer reports, leaks, hangs and unbounded memory are findings.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "mg/log.h"
#include "mg/tokenizer.h"

/* Encode text with flags; decode what came out both ways; the ids must be
 * ids of the vocabulary (decode refuses others: that would be a bug). */
static void round_trip(const struct mg_tokenizer *t, const char *text,
		       size_t len, unsigned flags)
{
	struct mg_ids ids = {0};
	if (mg_tokenizer_encode(t, text, len, flags, &ids) == 0) {
		const int64_t nv = mg_tokenizer_vocab_size(t);
		for (int64_t i = 0; i < ids.n; i++)
			if (ids.v[i] < 0 || ids.v[i] >= nv)
				abort();
		for (unsigned d = 0; d < 2; d++) {
			char *out = NULL;
			size_t n = 0;
			if (mg_tokenizer_decode(t, ids.v, ids.n,
						d ? MG_TOK_SKIP_SPECIAL : 0,
						&out, &n) == 0 &&
			    strlen(out) > n)
				abort();
			free(out);
		}
	}
	free(ids.v);
}

#ifndef MG_FUZZ_DEPS
#error "MG_FUZZ_DEPS: the project's .deps folder (fuzz.sh sets it)"
#endif

/* The fetched real tokenizers, NULL where absent. */
static struct mg_tokenizer *real[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	static const char *const dir[2] = {MG_FUZZ_DEPS "/tokenizers/llama2",
					   MG_FUZZ_DEPS "/tokenizers/llama3"};
	for (int i = 0; i < 2; i++) {
		char p[512];
		struct stat st;
		snprintf(p, sizeof p, "%s/tokenizer.json", dir[i]);
		if (stat(p, &st))
			continue;
		if (!(real[i] = mg_tokenizer_load(dir[i]))) {
			fprintf(stderr, "%s: %s\n", dir[i], mg_last_error());
			abort();
		}
	}
	fprintf(stderr,
		"fuzz_tokenizer: real tokenizers: llama2 %s, llama3 %s\n",
		real[0] ? "yes" : "no", real[1] ? "yes" : "no");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *part[2];
	size_t len[2];
	int n = fuzz_split(data, size, 2, part, len);
	const char *text = n > 1 ? (const char *)part[1] : "";
	size_t tlen = n > 1 ? len[1] : 0;
	/* at most 16 KiB, once each: under the sanitizers the real files
	 * cost ~0.1 ms a byte, and the per-input timeout is 10 s (a
	 * quadratic pre-tokenizer would still show: 2^28 steps) */
	for (int i = 0; i < 2; i++)
		if (real[i])
			round_trip(real[i], text, tlen < 16384 ? tlen : 16384,
				   MG_TOK_ADD_SPECIAL);
	char path[128], cfg[128];
	/* a config beside it would be read: there is none */
	fuzz_write("tokenizer_config.json", NULL, 0, cfg, sizeof cfg);
	fuzz_write("tokenizer.json", part[0], len[0], path, sizeof path);
	struct mg_tokenizer *t = mg_tokenizer_load(path);
	if (!t)
		return 0;
	round_trip(t, text, tlen, MG_TOK_NO_ADDED);
	round_trip(t, text, tlen, MG_TOK_ADD_SPECIAL);
	round_trip(t, text, tlen, 0);
	const int64_t nv = mg_tokenizer_vocab_size(t);
	for (int64_t id = 0; id < nv && id < 4096; id++) {
		const char *s = mg_tokenizer_token(t, (int32_t)id);
		volatile int sp = mg_tokenizer_is_special(t, (int32_t)id);
		(void)sp;
		if (s && mg_tokenizer_token_id(t, s) < 0)
			abort();
	}
	struct mg_tokenizer_specials sp;
	mg_tokenizer_specials(t, &sp);
	if (sp.bos >= nv || sp.eos >= nv || sp.pad >= nv || sp.unk >= nv ||
	    strlen(mg_tokenizer_digest(t)) == 0)
		abort();
	mg_tokenizer_free(t);
	return 0;
}
