/*
 * test_tokenizer_random.c - decode(encode(x)) == x on thousands of random
 * texts through the real Llama 3 and Llama 2-style files (.deps, from
 * scripts/fetch-tokenizers.sh; exit 77 without them): random code points
 * from many scripts, emoji and joiners, control characters, whitespace
 * runs, digit runs and pieces of special-token strings, so the regex
 * splits, byte fallback and the merge loop meet inputs nobody wrote by
 * hand. Two threads share each tokenizer. Run under the sanitizer build
 * too. The Llama 2 file encodes with MG_TOK_NO_ADDED: its normalizer
 * cannot give back the spaces around an added token (as in tokenizers).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mg/log.h"
#include "mg/tokenizer.h"

static unsigned next(unsigned long long *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(*s >> 33);
}

/* A random text of up to ~300 bytes into buf; returns its length. */
static size_t gen(unsigned long long *s, char *buf)
{
	static const char *const bits[] = {
		"<|eot_id|>",	"<|begin_of_text|>",
		"<s>",		"</s>",
		"<unk>",	"[INST]",
		"<|",		"|>",
		"<0x41>",	"'s",
		"'LL",		"\r\n",
		"    ",		"\t\t",
		"123456",	"\xe2\x80\x8d",
		"\xef\xb8\x8f", " ",
	};
	static const unsigned ranges[][2] = {
		{0x20, 0x7E},	     {0x00, 0x1F},     {0xA0, 0x2FF},
		{0x370, 0x52F},	     {0x590, 0x6FF},   {0x900, 0x97F},
		{0xE00, 0xE7F},	     {0x3040, 0x30FF}, {0x4E00, 0x9FFF},
		{0xAC00, 0xD7A3},    {0x2000, 0x206F}, {0x1F300, 0x1FAFF},
		{0x10000, 0x10FFFF}, {0xFE00, 0xFFFD},
	};
	size_t n = 0, parts = 1 + next(s) % 24;
	for (size_t p = 0; p < parts; p++) {
		unsigned k = next(s) % 4;
		if (k == 0) {
			const char *b =
				bits[next(s) % (sizeof bits / sizeof *bits)];
			memcpy(buf + n, b, strlen(b));
			n += strlen(b);
			continue;
		}
		const unsigned *r = ranges[k == 1 ? 0
						  : next(s) % (sizeof ranges /
							       sizeof *ranges)];
		for (unsigned c = 1 + next(s) % 6; c; c--) {
			unsigned cp = r[0] + next(s) % (r[1] - r[0] + 1);
			if (cp >= 0xD800 && cp <= 0xDFFF)
				cp = 0xE000;
			n += mg_utf8_put(cp, buf + n);
		}
	}
	return n;
}

struct job {
	const struct mg_tokenizer *t;
	unsigned flags;
	unsigned long long seed;
	int bad;
	const char *name;
};

static void *run(void *arg)
{
	struct job *j = arg;
	char buf[1024];
	struct mg_ids ids = {0};
	for (int i = 0; i < 3000; i++) {
		size_t n = gen(&j->seed, buf);
		char *back;
		size_t blen;
		ids.n = 0;
		if (mg_tokenizer_encode(j->t, buf, n, j->flags, &ids) ||
		    mg_tokenizer_decode(j->t, ids.v, ids.n, 0, &back, &blen)) {
			if (j->bad++ < 3)
				fprintf(stderr, "FAIL %s: %s\n", j->name,
					mg_last_error());
			continue;
		}
		if (blen != n || memcmp(back, buf, n)) {
			if (j->bad++ < 3)
				fprintf(stderr,
					"FAIL %s: round trip of \"%.*s\" gave "
					"\"%s\"\n",
					j->name, (int)n, buf, back);
		}
		free(back);
	}
	free(ids.v);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr,
			"usage: test_tokenizer_random TOKENIZERS_DIR\n");
		return 2;
	}
	const char *names[] = {"llama3", "llama2"};
	int bad = 0;
	for (int f = 0; f < 2; f++) {
		char path[1024];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s/tokenizer.json", argv[1],
			 names[f]);
		if (stat(path, &st)) {
			printf("SKIP: %s missing "
			       "(scripts/fetch-tokenizers.sh)\n",
			       path);
			return 77;
		}
		struct mg_tokenizer *t = mg_tokenizer_load(path);
		if (!t) {
			fprintf(stderr, "FAIL: %s\n", mg_last_error());
			return 1;
		}
		pthread_t th[2];
		struct job j[2];
		for (int k = 0; k < 2; k++) {
			j[k] = (struct job){t, f ? MG_TOK_NO_ADDED : 0,
					    0x1234567ull * (unsigned)(k + 1) +
						    (unsigned)f,
					    0, names[f]};
			pthread_create(&th[k], NULL, run, &j[k]);
		}
		for (int k = 0; k < 2; k++) {
			pthread_join(th[k], NULL);
			bad += j[k].bad;
		}
		mg_tokenizer_free(t);
		printf("%s: %d of 6000 random texts failed the round trip\n",
		       names[f], j[0].bad + j[1].bad);
	}
	return bad != 0;
}
