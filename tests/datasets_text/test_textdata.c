/*
 * test_textdata.c - the text dataset pieces (plugins/datasets/common)
 * without the real tokenizer: a byte-level tokenizer (id = byte, special
 * tokens above 255) makes every id readable, so prompt templates are
 * checked byte for byte, masks token for token, and packing, truncation,
 * the column map, gzip, the cache and bad data exactly; preference pairs
 * (rendering, one row per pair, truncation, hostile records) too.
 *
 *   test_textdata CASE TMPDIR
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/test_util.h"
#include "textdata.h"

static const char *specials[] = {
	"<|begin_of_text|>",
	"<|end_of_text|>",
	"<|start_header_id|>",
	"<|end_header_id|>",
	"<|eot_id|>",
	"<|im_start|>",
	"<|im_end|>",
	"<s>",
	"</s>",
};
#define NSPEC (int)(sizeof specials / sizeof *specials)
enum { BOT = 256, EOT_TEXT = 257, SH = 258, EH = 259, EOT = 260 };

static int byte_encode(void *self, const char *s, size_t n, struct mg_ids *out)
{
	(void)self;
	if (out->n + (int64_t)n > out->cap) {
		int64_t nc = (out->n + (int64_t)n) * 2 + 16;
		out->v = realloc(out->v, (size_t)nc * 4);
		out->cap = nc;
	}
	for (size_t i = 0; i < n; i++)
		out->v[out->n++] = (unsigned char)s[i];
	return 0;
}

static int32_t byte_token_id(void *self, const char *name)
{
	(void)self;
	for (int i = 0; i < NSPEC; i++)
		if (!strcmp(specials[i], name))
			return 256 + i;
	return -1;
}

static struct td_tok byte_tok(void)
{
	return (struct td_tok){
		.encode = byte_encode,
		.token_id = byte_token_id,
		.bos = "<|begin_of_text|>",
		.eos = "<|end_of_text|>",
		.bos_id = BOT,
		.eos_id = EOT_TEXT,
		.add_bos = true,
		.chat_template = "{{ '<|start_header_id|>' }}",
		.digest = "bytes",
		.vocab = 256 + NSPEC,
	};
}

static const char *tmp;

static int32_t no_token_id(void *self, const char *name)
{
	(void)self, (void)name;
	return -1;
}

/* The byte tokenizer's rendered-text encoder: its specials matched. */
static int byte_encode_rendered(void *self, const char *s, size_t n,
				struct mg_ids *out)
{
	for (size_t i = 0; i < n;) {
		int sp = -1;
		for (int k = 0; k < NSPEC && sp < 0; k++)
			if (!strncmp(s + i, specials[k], strlen(specials[k])) &&
			    i + strlen(specials[k]) <= n)
				sp = k;
		if (sp >= 0) {
			if (out->n + 1 > out->cap) {
				out->cap = out->cap * 2 + 16;
				out->v = realloc(out->v, (size_t)out->cap * 4);
			}
			out->v[out->n++] = 256 + sp;
			i += strlen(specials[sp]);
		} else {
			byte_encode(self, s + i, 1, out);
			i++;
		}
	}
	return 0;
}

/* The byte tokenizer's chat_template (t->self: the template source)
 * through the core's Jinja interpreter, bos_token and eos_token as
 * variables, as mg_tokenizer_apply_chat_template renders. */
static int byte_apply_chat(void *self, const char *req, size_t n, char **out,
			   size_t *len, struct mg_chat_span **spans,
			   size_t *nspans)
{
	const char *src = self;
	struct mg_chat_template *ct = mg_chat_template_parse(src, strlen(src));
	if (!ct)
		return -2;
	char *vars = malloc(n + 128);
	/* req is {"messages": ..., "add_generation_prompt": ...} */
	snprintf(vars, n + 128,
		 "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": "
		 "\"<|end_of_text|>\", %.*s",
		 (int)(n - 1), req + 1);
	int rc = mg_chat_template_render(ct, vars, strlen(vars), out, len,
					 spans, nspans);
	free(vars);
	mg_chat_template_free(ct);
	return rc;
}

/* A byte tokenizer whose chat_template is src. */
static struct td_tok model_tok(const char *src)
{
	struct td_tok t = byte_tok();
	t.self = (void *)src;
	t.chat_template = src;
	t.apply_chat = byte_apply_chat;
	t.encode_rendered = byte_encode_rendered;
	return t;
}

/* n bytes of text (0 bytes included) as tmp/name. */
static char *write_file_n(const char *name, const char *text, size_t n)
{
	static char path[8][1024];
	static int k;
	char *p = path[k++ % 8];
	snprintf(p, 1024, "%s/%s", tmp, name);
	FILE *f = fopen(p, "wb");
	fwrite(text, 1, n, f);
	fclose(f);
	return p;
}

static char *write_file(const char *name, const char *text)
{
	return write_file_n(name, text, strlen(text));
}

/* Parse text as a data file and render record i. 0 or -1 (error set). */
static int render_text(const char *text, int64_t i, enum td_format fmt,
		       enum td_template tpl, const char *cols,
		       struct td_sample *s)
{
	struct td_tok t = byte_tok();
	char *path = write_file("data.jsonl", text);
	struct td_buf b;
	struct td_records r;
	struct td_columns c;
	int rc = td_read_file(path, &b);
	if (rc)
		return rc;
	rc = td_parse_records(path, &b, &r) || td_columns_parse(cols, &c);
	if (!rc && fmt == TD_FMT_AUTO)
		rc = td_detect_format(&r, &c, &fmt);
	if (!rc)
		rc = td_render(&r, i, fmt, tpl, &c, &t, s);
	td_records_free(&r);
	td_buf_free(&b);
	return rc;
}

static void check_render(const char *data, enum td_format fmt,
			 enum td_template tpl, const char *cols,
			 const char *expect)
{
	struct td_sample s = {0};
	if (render_text(data, 0, fmt, tpl, cols, &s)) {
		fail("render %s: %s", data, mg_last_error());
		return;
	}
	char *j = td_sample_join(&s);
	CHECK_STR(j, expect);
	free(j);
	td_sample_free(&s);
}

static void case_templates(void)
{
	check_render(
		"{\"instruction\": \"Add the numbers.\", \"input\": \"2 and "
		"3\", \"output\": \"5\"}\n",
		TD_FMT_AUTO, TD_TPL_AUTO, "",
		"<|begin_of_text|>Below is an instruction that describes a "
		"task, paired with an input that provides further context. "
		"Write a response that appropriately completes the "
		"request.\n\n### Instruction:\nAdd the numbers.\n\n### "
		"Input:\n2 and 3\n\n### Response:\n5<|end_of_text|>");
	check_render(
		"{\"instruction\": \"Name a colour.\", \"input\": \"\", "
		"\"output\": \"Blue.\"}\n",
		TD_FMT_ALPACA, TD_TPL_AUTO, "",
		"<|begin_of_text|>Below is an instruction that describes a "
		"task. Write a response that appropriately completes the "
		"request.\n\n### Instruction:\nName a colour.\n\n### "
		"Response:\nBlue.<|end_of_text|>");
	check_render("{\"dialogue\": \"A: hi\\nB: hello\", \"summary\": "
		     "\"They greet.\"}",
		     TD_FMT_AUTO, TD_TPL_AUTO, "",
		     "<|begin_of_text|>Summarize this dialogue:\nA: "
		     "hi\nB: hello\n---\nSummary:\nThey "
		     "greet.<|end_of_text|>");
	check_render("{\"input\": \"he go home\", \"output\": \"He goes "
		     "home.\"}",
		     TD_FMT_AUTO, TD_TPL_AUTO, "",
		     "<|begin_of_text|>Correct this to standard English: he "
		     "go home\n---\nCorrected: He goes home.<|end_of_text|>");
	const char *conv =
		"{\"conversations\": [{\"from\": \"system\", \"value\": \"Be "
		"brief.\"}, {\"from\": \"human\", \"value\": \"Hi?\"}, "
		"{\"from\": \"gpt\", \"value\": \"Hello.\"}, {\"from\": "
		"\"human\", \"value\": \"Bye?\"}, {\"from\": \"gpt\", "
		"\"value\": \"Bye.\"}]}";
	check_render(conv, TD_FMT_AUTO, TD_TPL_LLAMA3, "",
		     "<|begin_of_text|><|start_header_id|>system<|end_header_"
		     "id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|"
		     "end_header_id|>\n\nHi?<|eot_id|><|start_header_id|>"
		     "assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_"
		     "header_id|>user<|end_header_id|>\n\nBye?<|eot_id|><|"
		     "start_header_id|>assistant<|end_header_id|>\n\nBye.<|"
		     "eot_id|>");
	check_render(conv, TD_FMT_SHAREGPT, TD_TPL_LLAMA2, "",
		     "<|begin_of_text|>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n"
		     "Hi? [/INST] Hello. <|end_of_text|><|begin_of_text|>"
		     "[INST] Bye? [/INST] Bye. <|end_of_text|>");
	check_render("{\"messages\": [{\"role\": \"user\", \"content\": "
		     "\"2+2?\"}, {\"role\": \"assistant\", \"content\": "
		     "\"4\"}]}",
		     TD_FMT_AUTO, TD_TPL_CHATML, "",
		     "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>"
		     "assistant\n4<|im_end|>\n");
	check_render("{\"messages\": [{\"role\": \"user\", \"content\": "
		     "\"2+2?\"}, {\"role\": \"assistant\", \"content\": "
		     "\"4\"}]}",
		     TD_FMT_AUTO, TD_TPL_NONE, "",
		     "<|begin_of_text|>2+2?\n4<|end_of_text|>");
	/* Column map. */
	check_render("{\"question\": \"Why?\", \"answer\": \"Because.\"}",
		     TD_FMT_ALPACA, TD_TPL_AUTO,
		     "instruction=question, output=answer",
		     "<|begin_of_text|>Below is an instruction that describes "
		     "a task. Write a response that appropriately completes "
		     "the request.\n\n### Instruction:\nWhy?\n\n### "
		     "Response:\nBecause.<|end_of_text|>");
	check_render("{\"chat\": [{\"speaker\": \"user\", \"text\": \"a\"}, "
		     "{\"speaker\": \"assistant\", \"text\": \"b\"}]}",
		     TD_FMT_MESSAGES, TD_TPL_LLAMA3,
		     "messages=chat,role=speaker,content=text",
		     "<|begin_of_text|><|start_header_id|>user<|end_header_id|"
		     ">\n\na<|eot_id|><|start_header_id|>assistant<|end_"
		     "header_id|>\n\nb<|eot_id|>");
	/* Template picking from chat_template and special tokens. */
	/* Template picking: the tokenizer's own chat_template when it can
	 * render it, else by the special tokens the vocabulary has, else
	 * unresolved (an error naming dataset.template when a chat sample
	 * needs it, never a guess). */
	struct td_tok t = byte_tok();
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_LLAMA3);
	t.apply_chat = byte_apply_chat;
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_MODEL);
	t.chat_template = NULL;
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_LLAMA3);
	CHECK_INT(td_pick_template(TD_TPL_CHATML, &t), TD_TPL_CHATML);
	t.token_id = no_token_id;
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_AUTO);
	struct td_sample s = {0};
	const struct td_msg m[2] = {{TD_ROLE_USER, "a", false},
				    {TD_ROLE_ASSISTANT, "b", false}};
	CHECK(td_render_chat(TD_TPL_AUTO, &t, m, 2, &s) != 0);
	CHECK(strstr(mg_last_error(), "set dataset.template =") != NULL);
	td_sample_free(&s);
}

/* Render every record of text and encode: the corpus. */
static int corpus_of(const char *text, enum td_template tpl, int64_t max_len,
		     bool drop, bool train_all, struct td_corpus *c)
{
	struct td_tok t = byte_tok();
	char *path = write_file("c.jsonl", text);
	struct td_buf b;
	struct td_records r;
	struct td_columns cols = {0};
	enum td_format fmt;
	if (td_read_file(path, &b))
		return -1;
	int rc = td_parse_records(path, &b, &r) ||
		 td_detect_format(&r, &cols, &fmt);
	struct td_sample *s = calloc((size_t)r.n + 1, sizeof *s);
	for (int64_t i = 0; !rc && i < r.n; i++)
		rc = td_render(&r, i, fmt, tpl, &cols, &t, &s[i]);
	if (!rc)
		rc = td_encode_samples(&t, s, r.n, max_len, drop, train_all,
				       NULL, c);
	for (int64_t i = 0; i < r.n; i++)
		td_sample_free(&s[i]);
	free(s);
	td_records_free(&r);
	td_buf_free(&b);
	return rc;
}

/* The labelled targets of row k as bytes ("<E>" for special ids). */
static void targets(const struct td_rows *r, int64_t k, char *out, size_t n)
{
	size_t w = 0;
	out[0] = 0;
	for (int64_t t = r->off[k]; t < r->off[k + 1] && w + 8 < n; t++) {
		int32_t y = r->labels[t];
		if (y == MG_IGNORE_INDEX)
			continue;
		if (t + 1 >= r->off[k + 1] || y != r->ids[t + 1])
			fail("label at %lld is not the next id", (long long)t);
		if (y < 256)
			out[w++] = (char)y;
		else
			w += (size_t)snprintf(out + w, n - w, "<%d>", y);
		out[w] = 0;
	}
}

static void case_masks(void)
{
	const char *data =
		"{\"instruction\": \"Say hi\", \"output\": \"hi there\"}\n"
		"{\"conversations\": [{\"from\": \"human\", \"value\": \"q1 "
		"<|eot_id|>\"}, {\"from\": \"gpt\", \"value\": \"a1\"}, "
		"{\"from\": \"human\", \"value\": \"q2\"}, {\"from\": "
		"\"gpt\", \"value\": \"a2\"}]}\n";
	/* alpaca (auto by the first record) */
	struct td_corpus c;
	struct td_rows r;
	char got[4096];
	if (corpus_of("{\"instruction\": \"Say hi\", \"output\": \"hi "
		      "there\"}\n",
		      TD_TPL_LLAMA3, 0, false, false, &c)) {
		fail("%s", mg_last_error());
		return;
	}
	int64_t sel[4] = {0, 1, 2, 3};
	CHECK(!td_rows_samples(&c, sel, c.n, 4096, false, &r));
	targets(&r, 0, got, sizeof got);
	CHECK_STR(got, "hi there<257>");
	CHECK_INT(r.ids[0], BOT);
	CHECK_INT(r.labels[r.off[1] - 1], MG_IGNORE_INDEX);
	td_rows_free(&r);
	td_corpus_free(&c);
	/* chat: both assistant turns and their <|eot_id|>; the eot typed
	 * in the user's text is text (bytes), not the control token */
	(void)data;
	if (corpus_of(strchr(data, '\n') + 1, TD_TPL_LLAMA3, 0, false, false,
		      &c)) {
		fail("%s", mg_last_error());
		return;
	}
	CHECK(!td_rows_samples(&c, sel, c.n, 4096, false, &r));
	targets(&r, 0, got, sizeof got);
	CHECK_STR(got, "a1<260>a2<260>");
	int eots = 0;
	for (int64_t t = 0; t < c.off[1]; t++)
		eots += c.ids[t] == EOT;
	CHECK_INT(eots, 4);
	td_rows_free(&r);
	td_corpus_free(&c);
	/* llama2: the space before and after the reply and </s> */
	if (corpus_of(strchr(data, '\n') + 1, TD_TPL_LLAMA2, 0, false, false,
		      &c)) {
		fail("%s", mg_last_error());
		return;
	}
	CHECK(!td_rows_samples(&c, sel, c.n, 4096, false, &r));
	targets(&r, 0, got, sizeof got);
	CHECK_STR(got, " a1 <257> a2 <257>");
	td_rows_free(&r);
	td_corpus_free(&c);
	/* train_on_input: every next token */
	if (corpus_of("{\"input\": \"x\", \"output\": \"y\"}\n", TD_TPL_NONE, 0,
		      false, true, &c)) {
		fail("%s", mg_last_error());
		return;
	}
	CHECK(!td_rows_samples(&c, sel, c.n, 4096, false, &r));
	int64_t n = r.off[1], lab = 0;
	for (int64_t t = 0; t < n; t++)
		lab += r.labels[t] != MG_IGNORE_INDEX;
	CHECK_INT(lab, n - 1);
	td_rows_free(&r);
	td_corpus_free(&c);
	/* a chat without an assistant reply has no target: left out and
	 * counted */
	if (corpus_of("{\"messages\": [{\"role\": \"user\", \"content\": "
		      "\"q\"}]}\n{\"messages\": [{\"role\": \"user\", "
		      "\"content\": \"q\"}, {\"role\": \"assistant\", "
		      "\"content\": \"a\"}]}\n",
		      TD_TPL_LLAMA3, 0, false, false, &c)) {
		fail("%s", mg_last_error());
		return;
	}
	CHECK_INT(c.n, 1);
	CHECK_INT(c.unlabeled, 1);
	td_corpus_free(&c);
}

static char *many_samples(int n)
{
	size_t cap = (size_t)n * 200 + 16, w = 0;
	char *s = malloc(cap);
	for (int i = 0; i < n; i++)
		w += (size_t)snprintf(
			s + w, cap - w,
			"{\"input\": \"in%d %.*s\", \"output\": "
			"\"out%d\"}\n",
			i, i % 37, "abcdefghijklmnopqrstuvwxyz0123456789", i);
	return s;
}

static void case_packing(void)
{
	char *data = many_samples(60);
	struct td_corpus c;
	if (corpus_of(data, TD_TPL_NONE, 0, false, false, &c)) {
		fail("%s", mg_last_error());
		free(data);
		return;
	}
	CHECK_INT(c.n, 60);
	int64_t sel[60];
	for (int i = 0; i < 60; i++)
		sel[i] = i;
	struct td_rows r;
	int64_t L = 256;
	CHECK(!td_rows_samples(&c, sel, 60, L, true, &r));
	CHECK(r.n < 60);
	/* Walk rows: each sample appears whole, in order, positions from 0,
	 * the last token of each sample unlabelled, no label pointing into
	 * the next sample. */
	int64_t k = 0, t = 0, tot = 0;
	for (int64_t row = 0; row < r.n; row++) {
		int64_t a = r.off[row], b = r.off[row + 1];
		CHECK(b - a <= L);
		CHECK_INT(r.pos[a], 0);
		t = a;
		while (t < b && k < 60) {
			int64_t s0 = c.off[k], len = c.off[k + 1] - s0;
			CHECK(t + len <= b);
			for (int64_t j = 0; j < len; j++) {
				CHECK_INT(r.pos[t + j], j);
				CHECK_INT(r.ids[t + j], c.ids[s0 + j]);
			}
			CHECK_INT(r.labels[t + len - 1], MG_IGNORE_INDEX);
			t += len;
			tot += len;
			k++;
		}
		CHECK_INT(t, b);
	}
	CHECK_INT(k, 60);
	CHECK_INT(tot, c.off[60]);
	/* rows copied out through td_rows_read, padding included */
	int64_t idx[2] = {1, 0};
	int32_t ids[2 * 300], lab[2 * 300], pos[2 * 300], lens[2];
	struct mg_token_rows out = {300, ids, lab, pos, lens};
	CHECK(!td_rows_read(&r, idx, 2, &out));
	CHECK_INT(lens[0], r.off[2] - r.off[1]);
	CHECK_INT(ids[0], r.ids[r.off[1]]);
	CHECK_INT(lab[300 + lens[1]], MG_IGNORE_INDEX);
	CHECK_INT(ids[300 + 255], 0);
	td_rows_free(&r);
	/* A sample longer than the rows is refused. */
	CHECK(td_rows_samples(&c, sel, 60, 20, true, &r) != 0);
	CHECK_HAS(mg_last_error(), "longer than the rows");
	td_corpus_free(&c);
	free(data);
}

static void case_truncation(void)
{
	char *data = many_samples(40);
	struct td_corpus c;
	/* The grammar prompt alone is 56 bytes + BOS: 70 cuts the longer
	 * inputs, leaving responses partly or wholly outside. */
	CHECK(!corpus_of(data, TD_TPL_NONE, 80, false, false, &c));
	int64_t longest = 0;
	for (int64_t i = 0; i < c.n; i++)
		if (c.off[i + 1] - c.off[i] > longest)
			longest = c.off[i + 1] - c.off[i];
	CHECK_INT(longest, 80);
	CHECK(c.truncated > 0);
	CHECK_INT(c.n + c.unlabeled, 40);
	int64_t trunc = c.truncated, unl = c.unlabeled;
	td_corpus_free(&c);
	CHECK(!corpus_of(data, TD_TPL_NONE, 80, true, false, &c));
	CHECK_INT(c.dropped, trunc + unl);
	CHECK_INT(c.n + c.dropped, 40);
	CHECK_INT(c.truncated, 0);
	td_corpus_free(&c);
	free(data);
}

static void expect_error_n(const char *name, const char *text, size_t n,
			   const char *want)
{
	char *path = write_file_n(name, text, n);
	struct td_buf b;
	struct td_records r;
	int rc = td_read_file(path, &b);
	if (!rc) {
		rc = td_parse_records(path, &b, &r);
		if (!rc) {
			struct td_sample s = {0};
			struct td_columns c = {0};
			struct td_tok t = byte_tok();
			enum td_format f;
			rc = td_detect_format(&r, &c, &f);
			for (int64_t i = 0; !rc && i < r.n; i++)
				rc = td_render(&r, i, f, TD_TPL_LLAMA3, &c, &t,
					       &s);
			td_sample_free(&s);
		}
		td_records_free(&r);
		td_buf_free(&b);
	}
	if (!rc)
		fail("%s: no error, expected '%s'", name, want);
	else
		CHECK_HAS(mg_last_error(), want);
}

static void expect_error(const char *name, const char *text, const char *want)
{
	expect_error_n(name, text, strlen(text), want);
}

static void case_bad_data(void)
{
	expect_error("bad.jsonl",
		     "{\"input\": \"a\", \"output\": \"b\"}\n\n{\"input\": "
		     "\"a\", \"output\": \"b\"\n",
		     "bad.jsonl:3: invalid JSON");
	expect_error("bad.json",
		     "[{\"input\": \"a\", \"output\": \"b\"},\n {\"input\": "
		     "\"a\" \"output\": \"b\"}]",
		     "bad.json: invalid JSON at byte offset 47 (line 2)");
	expect_error("missing.jsonl",
		     "{\"instruction\": \"a\", \"output\": \"b\"}\n"
		     "{\"instruction\": \"a\", \"outptu\": \"b\"}\n",
		     "missing.jsonl:2: sample 1 has no field \"output\"");
	expect_error("nonstring.json",
		     "[{\"dialogue\": \"a\", \"summary\": \"b\"}, "
		     "{\"dialogue\": \"a\", \"summary\": 7}]",
		     "nonstring.json: sample 1: field \"summary\" is a number, "
		     "not a string");
	expect_error("empty.jsonl", "\n  \n", "empty.jsonl: empty file");
	expect_error("utf8.jsonl",
		     "{\"input\": \"ok\", \"output\": \"b\"}\n{\"input\": "
		     "\"bad \xc3\x28\", \"output\": \"b\"}\n",
		     "utf8.jsonl: invalid UTF-8 at byte offset 46 (line 2)");
	expect_error("role.jsonl",
		     "{\"messages\": [{\"role\": \"robot\", \"content\": "
		     "\"x\"}]}\n",
		     "role.jsonl:1: sample 0: message 0: role \"robot\"");
	expect_error("notobj.jsonl", "[1, 2]\n",
		     "sample 0 is not a JSON object");
	expect_error("unknown.jsonl", "{\"text\": \"x\"}\n",
		     "cannot tell the format");
	/* cJSON stops after the first value: a second record on a line, or
	 * text after the array, would be dropped unseen (fuzz_instruct) */
	expect_error("two.jsonl",
		     "{\"input\": \"a\", \"output\": \"b\"} \r\n"
		     "{\"input\": \"a\", \"output\": \"b\"} {\"input\": \"c\", "
		     "\"output\": \"d\"}\n",
		     "two.jsonl:2: text after the JSON object (column 31)");
	expect_error("after.json",
		     "[{\"input\": \"a\", \"output\": \"b\"}]\n\n"
		     "[{\"input\": \"c\", \"output\": \"d\"}]\n",
		     "after.json: text after the JSON array at byte offset "
		     "33 (line 3)");
	/* A NUL in a string (escaped or raw) would cut the field there:
	 * refused with the line and the field, nested ones by their key;
	 * an escaped backslash before u0000 is no NUL. */
	expect_error(
		"nul.jsonl",
		"{\"instruction\": \"a\", \"output\": \"b\"}\n"
		"{\"instruction\": \"a\\u0000 cut\", \"output\": \"b\"}\n",
		"nul.jsonl:2: field \"instruction\" holds a NUL character");
	static const char raw[] = "[{\"input\": \"a\", \"output\": \"b\"},\n"
				  "\n{\"input\": \"a\", \"output\": \"b\0c\"}]";
	expect_error_n("nul.json", raw, sizeof raw - 1,
		       "nul.json:3: field \"output\" holds a NUL character");
	expect_error("nul_chat.jsonl",
		     "{\"conversations\": [{\"from\": \"human\", \"value\": "
		     "\"x\"}, {\"from\": \"gpt\", \"value\": \"y\\u0000\"}]}\n",
		     "nul_chat.jsonl:1: field \"value\" holds a NUL");
	expect_error("nul_list.jsonl", "{\"tags\": [\"x\", \"\\u0000\"]}\n",
		     "nul_list.jsonl:1: field \"tags\" holds a NUL");
	struct td_buf nb;
	struct td_records nr;
	char *np = write_file("backslash.jsonl",
			      "{\"instruction\": \"a\\\\u0000\", "
			      "\"output\": \"b\"}\n");
	CHECK(!td_read_file(np, &nb));
	CHECK(!td_parse_records(np, &nb, &nr));
	td_records_free(&nr);
	td_buf_free(&nb);
	struct td_columns c;
	CHECK(td_columns_parse("instruction", &c) != 0);
	CHECK_HAS(mg_last_error(), "not field=column");
	/* UTF-8 checker edge cases: overlong, surrogate, past U+10FFFF,
	 * cut sequence, valid 4-byte. */
	size_t bad = 0;
	CHECK(td_utf8_check("ab\xc0\xaf", 4, &bad) && bad == 2);
	CHECK(td_utf8_check("\xed\xa0\x80", 3, &bad) && bad == 0);
	CHECK(td_utf8_check("x\xf4\x90\x80\x80", 5, &bad) && bad == 1);
	CHECK(td_utf8_check("xy\xe2\x82", 4, &bad) && bad == 2);
	CHECK(td_utf8_check("\xf0\x9f\x98\x80 \xc3\xa9", 7, &bad) == 0);
}

static void case_gzip(void)
{
	const char *text = "[{\"instruction\": \"a\", \"output\": \"b\"}, "
			   "{\"instruction\": \"c\", \"output\": \"d\"}]";
	char path[1024];
	snprintf(path, sizeof path, "%s/data.json.gz", tmp);
	gzFile g = gzopen(path, "wb");
	gzputs(g, text);
	gzclose(g);
	struct td_buf b;
	struct td_records r;
	CHECK(!td_read_file(path, &b));
	CHECK_STR(b.data, text);
	CHECK(!td_parse_records(path, &b, &r));
	CHECK_INT(r.n, 2);
	td_records_free(&r);
	td_buf_free(&b);
	/* A gzip file cut anywhere (JSON Lines: a cut at a row boundary
	 * would parse as fewer rows) is an error naming the file and saying
	 * it ends early, and a byte changed anywhere past the 10-byte header
	 * (deflate data, CRC, length) is an error too, never a shorter or
	 * an "empty" file. Every cut and every byte is tried. */
	snprintf(path, sizeof path, "%s/rows.jsonl.gz", tmp);
	g = gzopen(path, "wb");
	for (int i = 0; i < 200; i++)
		gzprintf(g, "{\"instruction\": \"q%d\", \"output\": \"a%d\"}\n",
			 i, i * 7);
	gzclose(g);
	FILE *f = fopen(path, "rb");
	static unsigned char gz[1 << 16];
	size_t n = fread(gz, 1, sizeof gz, f);
	fclose(f);
	CHECK(n > 20 && n < sizeof gz);
	char cut[1024];
	snprintf(cut, sizeof cut, "%s/cut.jsonl.gz", tmp);
	for (size_t k = 2; k < n; k++) {
		f = fopen(cut, "wb");
		fwrite(gz, 1, k, f);
		fclose(f);
		if (!td_read_file(cut, &b)) {
			fail("gzip cut at %zu of %zu bytes: read as %zu bytes",
			     k, n, b.len);
			td_buf_free(&b);
			break;
		}
		if (!strstr(mg_last_error(), "cut.jsonl.gz: gzip data ends "
					     "early")) {
			fail("gzip cut at %zu: '%s'", k, mg_last_error());
			break;
		}
	}
	for (size_t k = 10; k < n; k++) {
		gz[k] ^= 0x55;
		f = fopen(cut, "wb");
		fwrite(gz, 1, n, f);
		fclose(f);
		gz[k] ^= 0x55;
		if (!td_read_file(cut, &b)) {
			fail("gzip byte %zu of %zu changed: read as %zu bytes",
			     k, n, b.len);
			td_buf_free(&b);
			break;
		}
		const char *e = mg_last_error();
		if (!strstr(e, "cut.jsonl.gz: ") || strstr(e, "empty file") ||
		    !(strstr(e, "corrupt gzip data") ||
		      strstr(e, "ends early"))) {
			fail("gzip byte %zu changed: '%s'", k, e);
			break;
		}
	}
	/* A FIFO is refused at once, not waited on. */
	snprintf(cut, sizeof cut, "%s/fifo.jsonl", tmp);
	CHECK(!mkfifo(cut, 0600));
	alarm(20);
	CHECK(td_read_file(cut, &b) != 0);
	alarm(0);
	CHECK_HAS(mg_last_error(), "fifo.jsonl: not a regular file");
}

static void case_cache(void)
{
	char *data = many_samples(30);
	struct td_corpus c, d;
	CHECK(!corpus_of(data, TD_TPL_NONE, 64, false, false, &c));
	char dir[1024], path[1200];
	snprintf(dir, sizeof dir, "%s/cache", tmp);
	CHECK_INT(td_cache_load(dir, "k1", &d), 0); /* absent */
	CHECK(!td_cache_store(dir, "k1", &c));
	CHECK_INT(td_cache_load(dir, "k1", &d), 1);
	CHECK_INT(d.n, c.n);
	CHECK_INT(d.truncated, c.truncated);
	CHECK(!memcmp(d.off, c.off, (size_t)(c.n + 1) * 8));
	CHECK(!memcmp(d.ids, c.ids, (size_t)c.off[c.n] * 4));
	CHECK(!memcmp(d.train, c.train, (size_t)c.off[c.n]));
	td_corpus_free(&d);
	/* A flipped byte: checksum mismatch, reported as absent. */
	snprintf(path, sizeof path, "%s/tokens/k1.bin", dir);
	FILE *f = fopen(path, "r+b");
	fseek(f, 100, SEEK_SET);
	int ch = fgetc(f);
	fseek(f, 100, SEEK_SET);
	fputc(ch ^ 1, f);
	fclose(f);
	CHECK_INT(td_cache_load(dir, "k1", &d), 0);
	/* Cut short. */
	CHECK(!td_cache_store(dir, "k1", &c));
	CHECK(!truncate(path, 77));
	CHECK_INT(td_cache_load(dir, "k1", &d), 0);
	/* No temporary file is left behind by a store. */
	CHECK(!td_cache_store(dir, "k1", &c));
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "test $(ls %s/tokens | wc -l) = 1", dir);
	CHECK(system(cmd) == 0);
	/* Keys: any changed part changes the key. */
	struct td_hash h1, h2;
	char k1[33], k2[33];
	td_hash_init(&h1);
	td_hash_str(&h1, "ab");
	td_hash_str(&h1, "c");
	td_hash_init(&h2);
	td_hash_str(&h2, "a");
	td_hash_str(&h2, "bc");
	td_hash_hex(&h1, k1);
	td_hash_hex(&h2, k2);
	CHECK(strcmp(k1, k2) != 0);
	CHECK_INT(strlen(k1), 32);
	td_corpus_free(&c);
	free(data);
}

static void case_split(void)
{
	uint8_t a[1000], b[1000];
	td_split(1000, 0.1, 42, a);
	td_split(1000, 0.1, 42, b);
	CHECK(!memcmp(a, b, sizeof a));
	int n = 0;
	for (int i = 0; i < 1000; i++)
		n += a[i];
	CHECK(n > 60 && n < 140);
	td_split(1000, 0.1, 43, b);
	CHECK(memcmp(a, b, sizeof a) != 0);
	td_split(3, 0.01, 1, a);
	CHECK_INT(a[0] + a[1] + a[2], 1);
	td_split(2, 0.9, 1, a);
	CHECK_INT(a[0] + a[1], 1);
}

static void case_text(void)
{
	/* Fortune-style file: "%" lines separate; blank entries skipped. */
	const char *f = "First one.\nTwo lines.\n%\nSecond.\n%\n%\n  \n%\nLast "
			"without newline";
	struct td_buf b = {(char *)f, strlen(f)};
	struct td_sample *docs = NULL;
	int64_t n = 0, cap = 0;
	CHECK(!td_split_docs(&b, "%", &docs, &n, &cap));
	CHECK_INT(n, 3);
	if (n == 3) {
		char *j = td_sample_join(&docs[0]);
		CHECK_STR(j, "First one.\nTwo lines.");
		free(j);
		j = td_sample_join(&docs[1]);
		CHECK_STR(j, "Second.");
		free(j);
		j = td_sample_join(&docs[2]);
		CHECK_STR(j, "Last without newline");
		free(j);
	}
	/* No separator: the whole file. */
	CHECK(!td_split_docs(&b, "", &docs, &n, &cap));
	CHECK_INT(n, 4);
	struct td_tok t = byte_tok();
	struct td_corpus c;
	CHECK(!td_encode_samples(&t, docs, n, 0, false, true, NULL, &c));
	for (int64_t i = 0; i < n; i++)
		td_sample_free(&docs[i]);
	free(docs);
	/* Blocks: BOS doc EOS ... cut every 8 tokens, labels inside the
	 * block only. */
	int64_t sel[2] = {0, 1};
	struct td_rows r;
	CHECK(!td_rows_blocks(&c, sel, 2, 8, BOT, EOT_TEXT, &r));
	int64_t total = (c.off[2] - c.off[0]) + 4;
	CHECK_INT(r.n, (total + 7) / 8);
	CHECK_INT(r.ids[0], BOT);
	CHECK_INT(r.ids[1], 'F');
	CHECK_INT(r.labels[0], 'F');
	CHECK_INT(r.labels[7], MG_IGNORE_INDEX);
	CHECK_INT(r.pos[8], 0);
	CHECK_INT(r.ids[8], c.ids[7]);
	/* The first document ends with EOS then BOS starts the second. */
	int64_t e = 1 + (c.off[1] - c.off[0]);
	CHECK_INT(r.ids[e], EOT_TEXT);
	CHECK_INT(r.ids[e + 1], BOT);
	td_rows_free(&r);
	td_corpus_free(&c);
}

/* ---- preference pairs (td_pairs.c) ---------------------------------- */

/* Parse text, render every record as a pair and encode the pairs. */
static int pair_corpus(const char *text, enum td_template tpl, int64_t max_len,
		       int64_t max_prompt, bool drop, struct td_corpus *c)
{
	struct td_tok t = byte_tok();
	char *path = write_file("pairs.jsonl", text);
	struct td_buf b;
	struct td_records r;
	struct td_columns cols = {0};
	enum td_format f = TD_FMT_AUTO;
	int rc = td_read_file(path, &b);
	if (rc)
		return rc;
	rc = td_parse_records(path, &b, &r) || td_detect_format(&r, &cols, &f);
	if (!rc && f != TD_FMT_PREFERENCE)
		rc = mg_error("detected format %d, not preference", (int)f);
	struct td_sample *s = rc ? NULL : calloc((size_t)(2 * r.n), sizeof *s);
	for (int64_t i = 0; !rc && i < r.n; i++)
		rc = td_render_pair(&r, i, tpl, &cols, &t, &s[2 * i],
				    &s[2 * i + 1]);
	if (!rc)
		rc = td_encode_pairs(&t, s, r.n, max_len, max_prompt, drop,
				     NULL, c);
	for (int64_t i = 0; s && i < 2 * r.n; i++)
		td_sample_free(&s[i]);
	free(s);
	td_records_free(&r);
	td_buf_free(&b);
	return rc;
}

/* Document d of c as text: bytes as is, targets in [brackets]. */
static void doc_str(const struct td_corpus *c, int64_t d, char *out, size_t cap)
{
	size_t w = 0;
	bool in = false;
	for (int64_t j = c->off[d]; j < c->off[d + 1] && w + 24 < cap; j++) {
		if (c->train[j] != in) {
			out[w++] = in ? ']' : '[';
			in = c->train[j];
		}
		int32_t id = c->ids[j];
		if (id < 256)
			out[w++] = (char)id;
		else
			w += (size_t)snprintf(out + w, cap - w, "<%d>", id);
	}
	if (in)
		out[w++] = ']';
	out[w] = 0;
}

static void check_doc(const struct td_corpus *c, int64_t d, const char *want)
{
	char got[4096];
	doc_str(c, d, got, sizeof got);
	CHECK_STR(got, want);
}

static void case_preference(void)
{
	struct td_corpus c;
	/* Strings: BOS + prompt + response + EOS, the response and EOS the
	 * targets. */
	CHECK(!pair_corpus("{\"prompt\": \"Q?\", \"chosen\": \"yes\", "
			   "\"rejected\": \"no\"}\n",
			   TD_TPL_LLAMA3, 64, 0, false, &c));
	CHECK_INT(c.n, 2);
	check_doc(&c, 0, "<256>Q?[yes<257>]");
	check_doc(&c, 1, "<256>Q?[no<257>]");
	/* One row per pair: positions restart at the rejected sequence,
	 * labels on response tokens only, none across the boundary. */
	int64_t sel[1] = {0};
	struct td_rows r;
	CHECK(!td_rows_pairs(&c, sel, 1, 16, &r));
	CHECK_INT(r.n, 1);
	CHECK_INT(r.off[1], 7 + 6);
	const int32_t pos[] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5};
	const int32_t lab[] = {-100, -100, 'y', 'e', 's', 257, -100,
			       -100, -100, 'n', 'o', 257, -100};
	for (int j = 0; j < 13; j++) {
		CHECK_INT(r.pos[j], pos[j]);
		CHECK_INT(r.labels[j], lab[j]);
	}
	td_rows_free(&r);
	CHECK(td_rows_pairs(&c, sel, 1, 12, &r) != 0);
	CHECK_HAS(mg_last_error(), "longer than the rows");
	td_corpus_free(&c);
	/* Message lists, implicit prompt: the shared history (an earlier
	 * assistant turn included) is prompt in both. */
	const char *conv =
		"{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}, "
		"{\"role\": \"assistant\", \"content\": \"b\"}, {\"role\": "
		"\"user\", \"content\": \"c\"}, {\"role\": \"assistant\", "
		"\"content\": \"good\"}], \"rejected\": [{\"role\": \"user\", "
		"\"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
		"\"b\"}, {\"role\": \"user\", \"content\": \"c\"}, {\"role\": "
		"\"assistant\", \"content\": \"bad\"}]}\n";
	CHECK(!pair_corpus(conv, TD_TPL_CHATML, 256, 0, false, &c));
	check_doc(&c, 0,
		  "<261>user\na<262>\n<261>assistant\nb<262>\n<261>user\nc<"
		  "262>\n<261>assistant\n[good<262>]\n");
	check_doc(&c, 1,
		  "<261>user\na<262>\n<261>assistant\nb<262>\n<261>user\nc<"
		  "262>\n<261>assistant\n[bad<262>]\n");
	td_corpus_free(&c);
	/* An explicit prompt list goes before both. */
	CHECK(!pair_corpus("{\"prompt\": [{\"role\": \"user\", \"content\": "
			   "\"q\"}], \"chosen\": [{\"role\": \"assistant\", "
			   "\"content\": \"y\"}], \"rejected\": [{\"role\": "
			   "\"assistant\", \"content\": \"n\"}]}\n",
			   TD_TPL_LLAMA3, 256, 0, false, &c));
	check_doc(
		&c, 0,
		"<256><258>user<259>\n\nq<260><258>assistant<259>\n\n[y<260>]");
	check_doc(
		&c, 1,
		"<256><258>user<259>\n\nq<260><258>assistant<259>\n\n[n<260>]");
	td_corpus_free(&c);
}

/* Truncation of a pair that does not fit its row: prompts first (BOS and
 * their end kept), then the longer response, then both alike. */
static void case_preference_truncation(void)
{
	struct td_corpus c;
	const char *data =
		"{\"prompt\": \"0123456789\", \"chosen\": \"abcdef\", "
		"\"rejected\": \"xy\"}\n"
		"{\"prompt\": \"p\", \"chosen\": \"short\", \"rejected\": "
		"\"s\"}\n";
	/* Pair 0: 1 + 10 + 6 + 1 and 1 + 10 + 2 + 1 = 32 tokens; pair 1
	 * 1 + 1 + 5 + 1 and 1 + 1 + 1 + 1 = 12 tokens. */
	CHECK(!pair_corpus(data, TD_TPL_NONE, 32, 0, false, &c));
	CHECK_INT(c.truncated, 0);
	check_doc(&c, 0, "<256>0123456789[abcdef<257>]");
	td_corpus_free(&c);
	/* 28: prompts cut to max_seq_len / 4 = 7 tokens (BOS + the last
	 * 6) leave 14 for the responses (7 + 3): no response cut. */
	CHECK(!pair_corpus(data, TD_TPL_NONE, 28, 0, false, &c));
	CHECK_INT(c.truncated, 1);
	CHECK_INT(c.n, 4);
	check_doc(&c, 0, "<256>456789[abcdef<257>]");
	check_doc(&c, 1, "<256>456789[xy<257>]");
	check_doc(&c, 2, "<256>p[short<257>]"); /* fits: untouched */
	td_corpus_free(&c);
	/* max_prompt_len 3, row 16: prompts BOS + "89"; 10 left for the
	 * responses, the longer (7) gives way down to 10 - 3 = 7: none cut;
	 * row 14: 8 left, the longer cut to 8 - 3 = 5. */
	CHECK(!pair_corpus(data, TD_TPL_NONE, 14, 3, false, &c));
	check_doc(&c, 0, "<256>89[abcde]");
	check_doc(&c, 1, "<256>89[xy<257>]");
	CHECK_INT(c.off[2] - c.off[0], 14);
	td_corpus_free(&c);
	/* Row 10: 4 left after the prompts, both responses cut to 2. */
	CHECK(!pair_corpus(data, TD_TPL_NONE, 10, 3, false, &c));
	check_doc(&c, 0, "<256>89[ab]");
	check_doc(&c, 1, "<256>89[xy]");
	td_corpus_free(&c);
	/* drop: the long pair is left out and counted. */
	CHECK(!pair_corpus(data, TD_TPL_NONE, 28, 0, true, &c));
	CHECK_INT(c.dropped, 1);
	CHECK_INT(c.truncated, 0);
	CHECK_INT(c.n, 2);
	check_doc(&c, 0, "<256>p[short<257>]");
	td_corpus_free(&c);
}

/* Hostile preference records: errors name file:line, sample and field. */
static void expect_pair_error(const char *name, const char *text,
			      const char *want)
{
	char *path = write_file(name, text);
	struct td_tok t = byte_tok();
	struct td_buf b;
	struct td_records r;
	struct td_columns cols = {0};
	int rc = td_read_file(path, &b);
	if (!rc) {
		rc = td_parse_records(path, &b, &r);
		struct td_sample s[2] = {{0}, {0}};
		for (int64_t i = 0; !rc && i < r.n; i++)
			rc = td_render_pair(&r, i, TD_TPL_LLAMA3, &cols, &t,
					    &s[0], &s[1]);
		td_sample_free(&s[0]);
		td_sample_free(&s[1]);
		td_records_free(&r);
		td_buf_free(&b);
	}
	if (!rc)
		fail("%s: no error, expected '%s'", name, want);
	else
		CHECK_HAS(mg_last_error(), want);
}

static void case_preference_errors(void)
{
	const char ok[] =
		"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}\n";
	char buf[1024];
	snprintf(buf, sizeof buf, "%s{\"prompt\": \"p\", \"chosen\": \"a\"}\n",
		 ok);
	expect_pair_error("norej.jsonl", buf,
			  "norej.jsonl:2: sample 1: has no field \"rejected\"");
	snprintf(buf, sizeof buf,
		 "%s{\"chosen\": \"a\", \"rejected\": \"b\"}\n", ok);
	expect_pair_error(
		"noprompt.jsonl", buf,
		"noprompt.jsonl:2: sample 1: has no field \"prompt\"");
	expect_pair_error("numprompt.json",
			  "[{\"prompt\": 3, \"chosen\": \"a\", \"rejected\": "
			  "\"b\"}]",
			  "numprompt.json: sample 0: field \"prompt\" is a "
			  "number, not a string");
	expect_pair_error(
		"mixed.jsonl",
		"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": "
		"[{\"role\": \"assistant\", \"content\": \"b\"}]}\n",
		"mixed.jsonl:1: sample 0: \"chosen\" is a string and "
		"\"rejected\" a list");
	expect_pair_error("same.jsonl",
			  "{\"chosen\": [{\"role\": \"user\", \"content\": "
			  "\"q\"}, {\"role\": \"assistant\", \"content\": "
			  "\"a\"}], \"rejected\": [{\"role\": \"user\", "
			  "\"content\": \"q\"}, {\"role\": \"assistant\", "
			  "\"content\": \"a\"}]}\n",
			  "same.jsonl:1: sample 0: \"chosen\" has no assistant "
			  "reply after the prompt");
	expect_pair_error("role.jsonl",
			  "{\"chosen\": [{\"role\": \"user\", \"content\": "
			  "\"q\"}, {\"role\": \"robot\", \"content\": "
			  "\"a\"}], \"rejected\": []}\n",
			  "role.jsonl:1: sample 0: \"chosen\" message 1: role "
			  "\"robot\"");
	expect_pair_error(
		"emptyrej.jsonl",
		"{\"chosen\": [{\"role\": \"assistant\", \"content\": "
		"\"a\"}], \"rejected\": []}\n",
		"emptyrej.jsonl:1: sample 0: message 0: field "
		"\"rejected\" is not a non-empty array");
	expect_pair_error("objprompt.jsonl",
			  "{\"prompt\": {\"a\": 1}, \"chosen\": [{\"role\": "
			  "\"assistant\", \"content\": \"a\"}], \"rejected\": "
			  "[{\"role\": \"assistant\", \"content\": \"b\"}]}\n",
			  "objprompt.jsonl:1: sample 0: field \"prompt\" is an "
			  "object, not a message list");
	/* A pair whose response has no token (no EOS to train either)
	 * is left out and counted, keeping the others aligned. */
	struct td_tok t = byte_tok();
	t.eos = NULL;
	struct td_sample s[4] = {{0}, {0}, {0}, {0}};
	CHECK(!td_render_single(&s[0], t.bos, NULL, "p", ""));
	CHECK(!td_render_single(&s[1], t.bos, NULL, "p", "b"));
	CHECK(!td_render_single(&s[2], t.bos, NULL, "p", "c"));
	CHECK(!td_render_single(&s[3], t.bos, NULL, "p", "d"));
	struct td_corpus c;
	CHECK(!td_encode_pairs(&t, s, 2, 64, 0, false, NULL, &c));
	CHECK_INT(c.unlabeled, 1);
	CHECK_INT(c.n, 2);
	check_doc(&c, 0, "<256>p[c]");
	check_doc(&c, 1, "<256>p[d]");
	td_corpus_free(&c);
	for (int i = 0; i < 4; i++)
		td_sample_free(&s[i]);
}

/* The text of s's target segments, joined. */
static char *train_text(const struct td_sample *s)
{
	char *r = calloc(s->len + 1, 1);
	size_t n = 0;
	for (int k = 0; k < s->nseg; k++)
		if (s->seg[k].train) {
			memcpy(r + n, s->text + s->seg[k].off, s->seg[k].len);
			n += s->seg[k].len;
		}
	return r;
}

/* One conversation through template src (template = model): the
 * rendering, the targets, and the ids (the typed "<|eot_id|>" of the
 * user's message stays bytes; the template's specials are ids). */
static const char *CONV =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief."
	"\"}, {\"role\": \"user\", \"content\": \"Say <|eot_id|>\"}, "
	"{\"role\": \"assistant\", \"content\": \" Done. \"}, {\"role\": "
	"\"user\", \"content\": \"Thanks\"}, {\"role\": \"assistant\", "
	"\"content\": \"Bye.\"}]}\n";

static void model_case(const char *name, const char *src, const char *text,
		       const char *targets, int controls)
{
	struct td_tok t = model_tok(src);
	char *path = write_file("model.jsonl", CONV);
	struct td_buf b;
	struct td_records r;
	struct td_columns c = {0};
	struct td_sample s = {0};
	if (td_read_file(path, &b)) {
		fail("%s: %s", name, mg_last_error());
		return;
	}
	int rc = td_parse_records(path, &b, &r) ||
		 td_render(&r, 0, TD_FMT_MESSAGES,
			   td_pick_template(TD_TPL_AUTO, &t), &c, &t, &s);
	if (rc) {
		fail("%s: %s", name, mg_last_error());
	} else {
		char *j = td_sample_join(&s), *y = train_text(&s);
		CHECK_STR(j, text);
		CHECK_STR(y, targets);
		free(j);
		free(y);
		struct td_corpus k;
		if (td_encode_samples(&t, &s, 1, 0, false, false, NULL, &k)) {
			fail("%s: %s", name, mg_last_error());
		} else {
			int n = 0, eot_text = 0;
			for (int64_t i = 0; i < k.off[1]; i++) {
				n += k.ids[i] >= 256;
				eot_text += k.ids[i] == '<';
			}
			if (n != controls)
				fail("%s: %d special ids, want %d", name, n,
				     controls);
			CHECK(eot_text >= 1); /* the typed one, as bytes */
			td_corpus_free(&k);
		}
	}
	td_sample_free(&s);
	td_records_free(&r);
	td_buf_free(&b);
}

static void case_model_template(void)
{
	/* ChatML without generation blocks: each reply and its <|im_end|>
	 * (not the newline after) are targets */
	static const char chatml[] =
		"{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + "
		"m.content + '<|im_end|>\\n' }}{% endfor %}{% if "
		"add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
		"endif %}";
	const char *rendered =
		"<|im_start|>system\nBe "
		"brief.<|im_end|>\n<|im_start|>user\nSay "
		"<|eot_id|><|im_end|>\n<|im_start|>assistant\n Done. "
		"<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>"
		"assistant\nBye.<|im_end|>\n";
	model_case("chatml", chatml, rendered,
		   " Done. <|im_end|>Bye.<|im_end|>", 10);
	/* the same with {% generation %} blocks: those are the targets */
	static const char gen[] =
		"{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
		"{% if m.role == 'assistant' %}{% generation %}{{ m.content + "
		"'<|im_end|>' }}{% endgeneration %}{{ '\\n' }}{% else %}{{ "
		"m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}";
	model_case("generation", gen, rendered,
		   " Done. <|im_end|>Bye.<|im_end|>", 10);
	/* Llama 3's first template: contents trimmed, the assistant header
	 * always appended (never a target) */
	static const char l3[] =
		"{{ bos_token }}{% for m in messages %}{{ "
		"'<|start_header_id|>' "
		"+ m.role + '<|end_header_id|>\\n\\n' + m.content | trim + "
		"'<|eot_id|>' }}{% endfor %}{{ '<|start_header_id|>assistant"
		"<|end_header_id|>\\n\\n' }}";
	model_case("llama3", l3,
		   "<|begin_of_text|><|start_header_id|>system<|end_header_id|>"
		   "\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_"
		   "header_id|>\n\nSay <|eot_id|><|eot_id|><|start_header_id|>"
		   "assistant<|end_header_id|>\n\nDone.<|eot_id|><|start_"
		   "header_id|>user<|end_header_id|>\n\nThanks<|eot_id|><|"
		   "start_header_id|>assistant<|end_header_id|>\n\nBye.<|eot_"
		   "id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		   "Done.<|eot_id|>Bye.<|eot_id|>", 18);
	/* a template that rewrites a past reply: refused, naming the way
	 * out */
	static const char rewrite[] =
		"{% for m in messages %}{% if m.role == 'assistant' and not "
		"loop.last %}{{ '<|im_start|>assistant\\n<|im_end|>\\n' }}{% "
		"else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
		"'<|im_end|>\\n' }}{% endif %}{% endfor %}";
	struct td_tok t = model_tok(rewrite);
	struct td_sample s = {0};
	const struct td_msg m[4] = {{TD_ROLE_USER, "a", false},
				    {TD_ROLE_ASSISTANT, "Done.", false},
				    {TD_ROLE_USER, "b", false},
				    {TD_ROLE_ASSISTANT, "c", false}};
	CHECK(td_render_chat(TD_TPL_MODEL, &t, m, 4, &s) != 0);
	CHECK(strstr(mg_last_error(), "dataset.template") != NULL);
	td_sample_free(&s);
	/* generation blocks with a preference pair's shared history: the
	 * history's assistant turn (a prompt message) is no target */
	t = model_tok(gen);
	const struct td_msg hist[4] = {{TD_ROLE_USER, "a", false},
				       {TD_ROLE_ASSISTANT, "old", true},
				       {TD_ROLE_USER, "b", false},
				       {TD_ROLE_ASSISTANT, "new", false}};
	CHECK(td_render_chat(TD_TPL_MODEL, &t, hist, 4, &s) == 0);
	char *y = train_text(&s);
	CHECK_STR(y, "new<|im_end|>");
	free(y);
	td_sample_free(&s);
	/* without generation blocks, the same */
	t = model_tok(chatml);
	CHECK(td_render_chat(TD_TPL_MODEL, &t, hist, 4, &s) == 0);
	y = train_text(&s);
	CHECK_STR(y, "new<|im_end|>");
	free(y);
	td_sample_free(&s);
	/* a template that raises: its message */
	t = model_tok("{{ raise_exception('Conversation roles must "
		      "alternate') }}");
	CHECK(td_render_chat(TD_TPL_MODEL, &t, m, 4, &s) != 0);
	CHECK(strstr(mg_last_error(), "roles must alternate") != NULL);
	td_sample_free(&s);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: test_textdata CASE TMPDIR\n");
		return 2;
	}
	tmp = argv[2];
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp); /* a fresh folder */
	if (system(cmd) != 0 || mkdir(tmp, 0777)) {
		fprintf(stderr, "cannot make %s\n", tmp);
		return 2;
	}
	const char *k = argv[1];
	if (!strcmp(k, "templates"))
		case_templates();
	else if (!strcmp(k, "model_template"))
		case_model_template();
	else if (!strcmp(k, "masks"))
		case_masks();
	else if (!strcmp(k, "packing"))
		case_packing();
	else if (!strcmp(k, "truncation"))
		case_truncation();
	else if (!strcmp(k, "bad_data"))
		case_bad_data();
	else if (!strcmp(k, "gzip"))
		case_gzip();
	else if (!strcmp(k, "cache"))
		case_cache();
	else if (!strcmp(k, "split"))
		case_split();
	else if (!strcmp(k, "text"))
		case_text();
	else if (!strcmp(k, "preference"))
		case_preference();
	else if (!strcmp(k, "preference_truncation"))
		case_preference_truncation();
	else if (!strcmp(k, "preference_errors"))
		case_preference_errors();
	else {
		fprintf(stderr, "unknown case %s\n", k);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures != 0;
}
