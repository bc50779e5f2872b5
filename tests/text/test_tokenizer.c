/*
 * test_tokenizer.c - the tokenizer on tiny hand-written tokenizer.json
 * files (tests/text/data), each expected id worked out by hand from the
 * file's vocabulary, merges and components: byte-level BPE (merge ranks,
 * the leftmost pair on equal ranks), SentencePiece-style BPE (byte
 * fallback, fused unk, the BOS template, per-segment Prepend), added
 * tokens (lstrip, rstrip, single_word, leftmost-longest, normalized),
 * Split behaviours and Metaspace, decoders, the errors (an unknown
 * component named, malformed JSON with its offset, invalid UTF-8 with its
 * offset, post-processor ids outside the vocabulary, an id so far past
 * the token count that its tables would not fit; empty texts and
 * decodes to nothing, as the fuzz target found them), special files
 * where a file belongs (refused, not waited on
 * or read without end) and encode on several threads at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mg/log.h"
#include "mg/tokenizer.h"

static int fails;
static const char *data_dir;

static struct mg_tokenizer *load(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", data_dir, name);
	struct mg_tokenizer *t = mg_tokenizer_load(path);
	if (!t) {
		fprintf(stderr, "FAIL: load %s: %s\n", name, mg_last_error());
		exit(1);
	}
	return t;
}

/* Encode text and compare with the expected ids (terminated by -1). */
static void enc(const struct mg_tokenizer *t, const char *text, unsigned flags,
		const int32_t *want)
{
	struct mg_ids ids = {0};
	int n = 0;
	while (want[n] >= 0)
		n++;
	if (mg_tokenizer_encode(t, text, strlen(text), flags, &ids)) {
		fprintf(stderr, "FAIL: encode \"%s\": %s\n", text,
			mg_last_error());
		fails++;
		return;
	}
	int ok = ids.n == n;
	for (int i = 0; ok && i < n; i++)
		ok = ids.v[i] == want[i];
	if (!ok) {
		fprintf(stderr, "FAIL: encode \"%s\" flags %u: got", text,
			flags);
		for (int64_t i = 0; i < ids.n; i++)
			fprintf(stderr, " %d", ids.v[i]);
		fprintf(stderr, ", want");
		for (int i = 0; i < n; i++)
			fprintf(stderr, " %d", want[i]);
		fputc('\n', stderr);
		fails++;
	}
	free(ids.v);
}
#define ENC(t, text, flags, ...)                                               \
	enc(t, text, flags, (const int32_t[]){__VA_ARGS__, -1})
#define ENC_NONE(t, text, flags) enc(t, text, flags, (const int32_t[]){-1})

static void dec(const struct mg_tokenizer *t, const int32_t *ids, int n,
		unsigned flags, const char *want)
{
	char *s;
	size_t len;
	if (mg_tokenizer_decode(t, ids, n, flags, &s, &len)) {
		fprintf(stderr, "FAIL: decode: %s\n", mg_last_error());
		fails++;
		return;
	}
	if (strcmp(s, want) || len != strlen(want)) {
		fprintf(stderr, "FAIL: decode: got \"%s\", want \"%s\"\n", s,
			want);
		fails++;
	}
	free(s);
}
#define DEC(t, flags, want, ...)                                               \
	dec(t, (const int32_t[]){__VA_ARGS__},                                 \
	    (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)),   \
	    flags, want)

/* Expect failure with a message containing every one of the strings. */
static void expect_error(int failed, const char *what, const char *a,
			 const char *b)
{
	const char *e = mg_last_error();
	if (!failed || !e || !strstr(e, a) || (b && !strstr(e, b))) {
		fprintf(stderr,
			"FAIL: %s: want an error with '%s'%s%s, got "
			"'%s'\n",
			what, a, b ? " and " : "", b ? b : "",
			failed ? e : "(success)");
		fails++;
	}
}

static void bytelevel(void)
{
	struct mg_tokenizer *t = load("bytelevel.json");
	ENC(t, "hello world!", 0, 11, 16, 17);
	ENC(t, "hello world!", MG_TOK_ADD_SPECIAL, 11, 16, 17);
	ENC(t, "lll", 0, 9, 2); /* equal ranks: the leftmost pair first */
	ENC(t, "hel", 0, 8, 2);
	ENC(t, "\xc3\xa9", 0, 22); /* é: bytes C3 A9 are Ã © */
	ENC(t, "hello\n", 0, 11, 18);
	ENC(t, "hello<|end|>world", 0, 11, 19, 5, 13, 2, 7);
	/* plain text: pieces "<|" "end" "|>"; with no unk token the bytes
	 * outside the vocabulary (<, |, n, >) are dropped */
	ENC(t, "hello<|end|>", MG_TOK_NO_ADDED, 11, 1, 7);
	ENC_NONE(t, "", MG_TOK_ADD_SPECIAL);
	DEC(t, 0, "hello world!", 11, 16, 17);
	DEC(t, 0, "hello<|end|>", 11, 19);
	DEC(t, MG_TOK_SKIP_SPECIAL, "hello", 11, 19);
	DEC(t, 0, "\xef\xbf\xbd", 20); /* a lone C3 byte: U+FFFD */
	char *s;
	expect_error(mg_tokenizer_decode(t, (const int32_t[]){11, 99}, 2, 0, &s,
					 NULL) != 0,
		     "decode id 99", "id 99", "position 1");
	if (mg_tokenizer_vocab_size(t) != 23 ||
	    mg_tokenizer_token_id(t, "Ġworld") != 16 ||
	    mg_tokenizer_token_id(t, "<|end|>") != 19 ||
	    strcmp(mg_tokenizer_token(t, 14), "Ġwor") ||
	    !mg_tokenizer_is_special(t, 19) || mg_tokenizer_is_special(t, 0) ||
	    strlen(mg_tokenizer_digest(t)) != 16) {
		fprintf(stderr, "FAIL: bytelevel accessors\n");
		fails++;
	}
	struct mg_ids ids = {0};
	expect_error(mg_tokenizer_encode(t,
					 "ab\xff"
					 "cd",
					 5, 0, &ids) != 0,
		     "invalid UTF-8", "byte offset 2", "0xff");
	expect_error(mg_tokenizer_encode(t, "\xe2\x82", 2, 0, &ids) != 0,
		     "truncated UTF-8", "byte offset 0", NULL);
	expect_error(mg_tokenizer_encode(t, "a\xed\xa0\x80", 4, 0, &ids) != 0,
		     "surrogate in UTF-8", "byte offset 1", NULL);
	free(ids.v);
	mg_tokenizer_free(t);
}

static void sentencepiece(void)
{
	struct mg_tokenizer *t = load("sp"); /* a folder: json + config */
	ENC(t, "ab ab", 0, 10, 10);
	ENC(t, "ab ab", MG_TOK_ADD_SPECIAL, 1, 10, 10);
	ENC(t, "b\xc3\xa9", 0, 5, 7, 3, 4); /* é: byte fallback */
	/* € (E2 82 AC) has no byte tokens: unk, two fused into one */
	ENC(t,
	    "a\xe2\x82\xac\xe2\x82\xac"
	    "b",
	    0, 8, 0, 7);
	ENC_NONE(t, "", 0);
	ENC(t, "", MG_TOK_ADD_SPECIAL, 1);
	/* Prepend per segment between added tokens */
	ENC(t, "a<s>b", 0, 8, 1, 5, 7);
	DEC(t, MG_TOK_SKIP_SPECIAL, "a\xc3\xa9", 1, 8, 3, 4);
	DEC(t, 0, "<s> a\xc3\xa9", 1, 8, 3, 4);
	DEC(t, 0, "a\xef\xbf\xbd", 8, 3);
	struct mg_tokenizer_specials sp;
	mg_tokenizer_specials(t, &sp);
	if (sp.bos != 1 || sp.eos != 2 || sp.unk != 0 || sp.pad != -1 ||
	    sp.add_bos != 1 || sp.add_eos != 0 ||
	    !mg_tokenizer_chat_template(t) ||
	    strncmp(mg_tokenizer_chat_template(t), "{{ bos_token }}", 15)) {
		fprintf(stderr, "FAIL: sp specials/config\n");
		fails++;
	}
	mg_tokenizer_free(t);
}

static void added(void)
{
	struct mg_tokenizer *t = load("added.json");
	ENC(t, "a <L>b", 0, 0, 10, 14); /* lstrip takes the space */
	ENC(t, "a<R>  a", 0, 0, 11, 0); /* rstrip both spaces */
	ENC(t, "<LL>", 0, 13);		/* longest */
	ENC(t, "<L>", 0, 10);
	ENC(t, "x<W>", 0, 6, 3, 5, 4); /* not a single word */
	ENC(t, "x <W> a", 0, 6, 2, 12, 2, 0);
	ENC(t, "aB", 0, 0, 14); /* normalized token after B->b */
	ENC(t, "a<L>B", MG_TOK_NO_ADDED, 0, 3, 7, 4, 1);
	ENC(t, "zz", 0, 8, 8);	     /* unk, not fused */
	DEC(t, 0, "a   b", 0, 2, 1); /* no decoder: joined with spaces */
	mg_tokenizer_free(t);
}

static void split(void)
{
	struct mg_tokenizer *t = load("split.json");
	ENC(t, "ab1-b2 a", 0, 5, 1, 2, 8, 5);
	DEC(t, 0, "ab1b2 a", 5, 1, 2, 8, 5);
	mg_tokenizer_free(t);
}

static void errors(void)
{
	char path[512];
	snprintf(path, sizeof path, "%s/unknown.json", data_dir);
	expect_error(!mg_tokenizer_load(path), "unknown component",
		     "unsupported type 'Digits'", "unknown.json");
	snprintf(path, sizeof path, "%s/malformed.json", data_dir);
	expect_error(!mg_tokenizer_load(path), "malformed JSON",
		     "malformed.json: invalid JSON near byte offset 65",
		     "(line 2, column 45)");
	snprintf(path, sizeof path, "%s/missing.json", data_dir);
	expect_error(!mg_tokenizer_load(path), "missing file", "missing.json",
		     "cannot open");
}

/* Token ids index the id tables: a small hole is fine, one id of 2^30
 * in a two-token file (9 GB of tables) is refused before allocating. */
static void sparse_ids(void)
{
	char path[] = "/tmp/mg_tok_sparse_XXXXXX";
	int fd = mkstemp(path);
	static const char *const id[] = {"100", "1073741824"};
	for (int k = 0; fd >= 0 && k < 2; k++) {
		FILE *f = fopen(path, "wb");
		fprintf(f,
			"{\"model\": {\"type\": \"BPE\", \"vocab\": "
			"{\"a\": 0, \"b\": %s}, \"merges\": []}}",
			id[k]);
		fclose(f);
		struct mg_tokenizer *t = mg_tokenizer_load(path);
		if (k == 0 && (!t || mg_tokenizer_vocab_size(t) != 101)) {
			fprintf(stderr,
				"FAIL: sparse ids: a hole refused: %s\n",
				t ? "wrong vocab size" : mg_last_error());
			fails++;
		}
		if (k == 1)
			expect_error(!t, "sparse ids",
				     "the largest token id is 1073741824",
				     "only 2 tokens");
		mg_tokenizer_free(t);
	}
	if (fd < 0) {
		fprintf(stderr, "FAIL: sparse ids: mkstemp\n");
		fails++;
	} else {
		close(fd);
		unlink(path);
	}
}

/* An empty text, and a decode whose every string is empty (special
 * tokens skipped): no ids and "", without touching a buffer never made
 * (both were NULL + 0 under UBSan). */
static void empty(void)
{
	struct mg_tokenizer *t = load("sp/tokenizer.json");
	ENC_NONE(t, "", MG_TOK_NO_ADDED);
	DEC(t, MG_TOK_SKIP_SPECIAL, "", 1, 2);
	mg_tokenizer_free(t);
}

/* mg_json_nul_string on text with closers before an opener (what follows
 * the value cJSON parsed, which callers pass whole: `mgrun tokenize
 * --chat` lines): the nesting level stays at the top, so the field is
 * named; it went to -1 and wrote below its stack array (fuzz_prompts). */
static void nul_scan_unbalanced(void)
{
	static const char s[] = "{}]]} {\"a\": \"x\\u0000\"}";
	char key[16] = "?";
	size_t at = mg_json_nul_string(s, sizeof s - 1, key, sizeof key);
	if (at != 12 || strcmp(key, "a")) {
		fprintf(stderr,
			"FAIL: nul scan after closers: at %zu key '%s', want "
			"12 'a'\n",
			at, key);
		fails++;
	}
}

/* A FIFO (would block in open) or a link to /dev/zero (would read until
 * memory runs out) as tokenizer.json or tokenizer_config.json, a folder
 * named tokenizer.json and a dangling link as tokenizer_config.json: each
 * refused naming the file. The alarm turns a hang into a failure. */
static void special_files(void)
{
	char root[] = "/tmp/mg_tok_special_XXXXXX", d[600], p[700], sp[600];
	if (!mkdtemp(root)) {
		fprintf(stderr, "FAIL: mkdtemp\n");
		fails++;
		return;
	}
	snprintf(sp, sizeof sp, "%s/sp/tokenizer.json", data_dir);
	static const char *const cfg[] = {"fifo", "zero", "fifo", "dir",
					  "dangling"};
	static const char *const want[] = {
		"tokenizer.json: not a regular file",
		"tokenizer_config.json: not a regular file",
		"tokenizer_config.json: not a regular file",
		"tokenizer.json: a directory",
		"tokenizer_config.json: cannot open"};
	alarm(60);
	for (int k = 0; k < 5; k++) {
		snprintf(d, sizeof d, "%s/%d", root, k);
		mkdir(d, 0700);
		/* k = 0: tokenizer.json itself a FIFO; 3: a folder */
		snprintf(p, sizeof p, "%s/tokenizer.json", d);
		int ok = k == 0	  ? mkfifo(p, 0600)
			 : k == 3 ? mkdir(p, 0700)
				  : symlink(sp, p);
		snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
		if (k == 1)
			ok |= symlink("/dev/zero", p);
		else if (k == 2)
			ok |= mkfifo(p, 0600);
		else if (k == 4) /* formerly ignored as no config */
			ok |= symlink("nowhere.json", p);
		if (ok) {
			fprintf(stderr, "FAIL: cannot make %s\n", p);
			fails++;
			continue;
		}
		struct mg_tokenizer *t = mg_tokenizer_load(d);
		expect_error(!t, cfg[k], want[k], NULL);
		mg_tokenizer_free(t);
	}
	alarm(0);
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", root);
}

/* The post-processor's special token ids must be in the vocabulary
 * (they are added to every text): sp/tokenizer.json with its BOS id [1]
 * replaced by one past the end, a negative and a fractional id. */
static void post_ids(void)
{
	char src[600], text[8192], path[] = "/tmp/mg_tok_post_XXXXXX";
	snprintf(src, sizeof src, "%s/sp/tokenizer.json", data_dir);
	FILE *f = fopen(src, "rb");
	size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (f)
		fclose(f);
	text[n] = 0;
	char *at = strstr(text, "\"ids\": [1]");
	int fd = mkstemp(path);
	if (!at || fd < 0) {
		fprintf(stderr, "FAIL: post_ids: cannot set up\n");
		fails++;
		return;
	}
	close(fd);
	static const char *const bad[] = {"11", "-1", "1.5"};
	for (int k = 0; k < 3; k++) {
		f = fopen(path, "wb");
		fprintf(f, "%.*s\"ids\": [%s]%s", (int)(at - text), text,
			bad[k], at + strlen("\"ids\": [1]"));
		fclose(f);
		char want[128];
		snprintf(want, sizeof want,
			 "post_processor: special token '<s>': id %s is not in "
			 "the vocabulary (ids 0 to 10)",
			 bad[k]);
		struct mg_tokenizer *t = mg_tokenizer_load(path);
		expect_error(!t, bad[k], want, NULL);
		mg_tokenizer_free(t);
	}
	unlink(path);
}

/* One tokenizer, several threads: each must get the serial ids. */
struct job {
	const struct mg_tokenizer *t;
	int bad;
};
static void *worker(void *arg)
{
	struct job *j = arg;
	struct mg_ids ids = {0};
	for (int i = 0; i < 2000; i++) {
		ids.n = 0;
		if (mg_tokenizer_encode(j->t, "ab ab<s>b\xc3\xa9 a", 13,
					MG_TOK_ADD_SPECIAL, &ids) ||
		    ids.n != 9 || ids.v[0] != 1 || ids.v[3] != 1 ||
		    ids.v[8] != 8)
			j->bad++;
	}
	free(ids.v);
	return NULL;
}

static void threads(void)
{
	struct mg_tokenizer *t = load("sp");
	pthread_t th[4];
	struct job j[4];
	for (int i = 0; i < 4; i++) {
		j[i] = (struct job){t, 0};
		pthread_create(&th[i], NULL, worker, &j[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		if (j[i].bad) {
			fprintf(stderr, "FAIL: thread %d: %d bad encodes\n", i,
				j[i].bad);
			fails++;
		}
	}
	mg_tokenizer_free(t);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_tokenizer DATA_DIR\n");
		return 2;
	}
	data_dir = argv[1];
	bytelevel();
	sentencepiece();
	added();
	split();
	errors();
	special_files();
	post_ids();
	sparse_ids();
	empty();
	nul_scan_unbalanced();
	threads();
	if (fails)
		fprintf(stderr, "%d failures\n", fails);
	else
		printf("ok\n");
	return fails != 0;
}
