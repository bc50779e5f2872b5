/*
 * test_textdata_hf.c - the text dataset pieces with the real Llama 3 and
 * Llama 2 tokenizer.json files: rendered chats decode back byte for byte
 * (control tokens where the template put them, a "<|eot_id|>" typed in
 * the data kept as text), and the labelled tokens decode to exactly the
 * responses and the tokens that end them.
 *
 *   test_textdata_hf CASE TOKENIZERS_DIR TMPDIR
 * Exit 77 (skipped) when TOKENIZERS_DIR is missing.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test_util.h"
#include "mg/tokenizer.h"
#include "textdata.h"

static const char *tmp;

/* Render the one record in `json` and encode it: corpus of 1. */
static int one(const struct td_tok *t, const char *json, enum td_template tpl,
	       bool train_all, struct td_corpus *c, char **rendered)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/one.jsonl", tmp);
	FILE *f = fopen(path, "w");
	fputs(json, f);
	fclose(f);
	struct td_buf b;
	struct td_records r;
	struct td_columns cols = {0};
	struct td_sample s = {0};
	enum td_format fmt;
	if (td_read_file(path, &b))
		return -1;
	int rc = td_parse_records(path, &b, &r) ||
		 td_detect_format(&r, &cols, &fmt) ||
		 td_render(&r, 0, fmt, td_pick_template(tpl, t), &cols, t, &s);
	if (!rc) {
		*rendered = td_sample_join(&s);
		rc = td_encode_samples(t, &s, 1, 0, false, train_all, NULL, c);
	}
	td_sample_free(&s);
	td_records_free(&r);
	td_buf_free(&b);
	return rc;
}

static char *decode(const struct td_tok *t, const int32_t *ids, int64_t n)
{
	char *s = NULL;
	if (mg_tokenizer_decode(t->self, ids, n, 0, &s, NULL)) {
		fail("decode: %s", mg_last_error());
		return strdup("");
	}
	return s;
}

/* The labelled target ids of sample 0 (next-token labels of a row). */
static char *targets(const struct td_tok *t, const struct td_corpus *c)
{
	int64_t sel = 0;
	struct td_rows r;
	if (td_rows_samples(c, &sel, 1, 1 << 20, false, &r)) {
		fail("rows: %s", mg_last_error());
		return strdup("");
	}
	int32_t *y = malloc((size_t)r.off[1] * 4);
	int64_t n = 0;
	for (int64_t k = 0; k < r.off[1]; k++)
		if (r.labels[k] != MG_IGNORE_INDEX)
			y[n++] = r.labels[k];
	char *s = decode(t, y, n);
	free(y);
	td_rows_free(&r);
	return s;
}

/* Segment-wise ids equal the ids of the whole rendered string encoded in
 * one piece (special tokens matched), as HF's tokenizer(chat_text, add_
 * special_tokens=False) gives them: the masks cut no token in two. */
static void same_as_whole(const struct td_tok *t, const char *text,
			  const struct td_corpus *c)
{
	struct mg_ids w = {0};
	if (mg_tokenizer_encode(t->self, text, strlen(text), 0, &w)) {
		fail("encode: %s", mg_last_error());
		return;
	}
	CHECK_INT(w.n, c->off[1]);
	if (w.n == c->off[1])
		CHECK(!memcmp(w.v, c->ids, (size_t)w.n * 4));
	free(w.v);
}

static const char *CHAT_PLAIN =
	"{\"conversations\": [{\"from\": \"system\", \"value\": \"You are "
	"an AI assistant.\"}, {\"from\": \"human\", \"value\": \"What is "
	"2 + 2?\\nAnswer briefly.\"}, {\"from\": \"gpt\", \"value\": \"2 "
	"+ 2 = 4.\"}, {\"from\": \"human\", \"value\": \"And 3 + 3?\"}, "
	"{\"from\": \"gpt\", \"value\": \"6, since 3 * 2 = 6.\"}]}\n";

static const char *CHAT =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
	"{\"role\": \"user\", \"content\": \"Say <|eot_id|> please\"}, "
	"{\"role\": \"assistant\", \"content\": \"Done: <|eot_id|>\"}, "
	"{\"role\": \"user\", \"content\": \"Thanks!\"}, {\"role\": "
	"\"assistant\", \"content\": \"You're welcome.\"}]}\n";

static void case_llama3(const char *dir)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/llama3", dir);
	struct td_tok t;
	if (td_tok_hf_load(path, &t)) {
		fail("load %s: %s", path, mg_last_error());
		return;
	}
	/* This tokenizer.json's post-processor is ByteLevel only: no BOS
	 * from tokenizer(text) (the Hub's has a TemplateProcessing one). */
	CHECK(!t.add_bos);
	CHECK(!t.prepend_space);
	/* auto: the tokenizer's own chat_template (Llama 3's first, which
	 * always ends with the assistant header); the built-in llama3
	 * format renders the same turns without it */
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_MODEL);
	struct td_corpus c;
	char *text = NULL;
	if (one(&t, CHAT, TD_TPL_LLAMA3, false, &c, &text)) {
		fail("%s", mg_last_error());
	} else {
		char *model = NULL;
		struct td_corpus cm;
		if (one(&t, CHAT, TD_TPL_AUTO, false, &cm, &model)) {
			fail("%s", mg_last_error());
		} else {
			char *want = malloc(strlen(text) + 64);
			sprintf(want,
				"%s<|start_header_id|>assistant<|end_header_"
				"id|>\n\n",
				text);
			CHECK_STR(model, want);
			/* the same ids and targets, and the header's four
			 * prompt ids after them */
			CHECK_INT(cm.off[1], c.off[1] + 4);
			CHECK(!memcmp(cm.ids, c.ids, (size_t)c.off[1] * 4));
			char *y0 = targets(&t, &c), *y1 = targets(&t, &cm);
			CHECK_STR(y1, y0);
			free(y0), free(y1), free(want), free(model);
			td_corpus_free(&cm);
		}
		free(text);
		td_corpus_free(&c);
	}
	if (one(&t, CHAT, TD_TPL_LLAMA3, false, &c, &text)) {
		fail("%s", mg_last_error());
		td_tok_hf_free(&t);
		return;
	}
	const char *want =
		"<|begin_of_text|><|start_header_id|>system<|end_header_id|>"
		"\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_"
		"id|>\n\nSay <|eot_id|> please<|eot_id|><|start_header_id|>"
		"assistant<|end_header_id|>\n\nDone: <|eot_id|><|eot_id|><|"
		"start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|><"
		"|start_header_id|>assistant<|end_header_id|>\n\nYou're "
		"welcome.<|eot_id|>";
	CHECK_STR(text, want);
	char *dec = decode(&t, c.ids, c.off[1]);
	CHECK_STR(dec, want);
	free(dec);
	/* Only the template's five end-of-turn tokens (one per message)
	 * are the control id; the two typed in the data are text. */
	int32_t eot = mg_tokenizer_token_id(t.self, "<|eot_id|>");
	int n = 0;
	for (int64_t k = 0; k < c.off[1]; k++)
		n += c.ids[k] == eot;
	CHECK_INT(n, 5);
	CHECK_INT(c.ids[0], t.bos_id);
	/* Typed specials aside, the ids are those of the whole string. */
	free(text);
	td_corpus_free(&c);
	if (!one(&t, CHAT_PLAIN, TD_TPL_AUTO, false, &c, &text)) {
		same_as_whole(&t, text, &c);
		free(text);
		td_corpus_free(&c);
	}
	if (one(&t, CHAT, TD_TPL_AUTO, false, &c, &text)) {
		fail("%s", mg_last_error());
		td_tok_hf_free(&t);
		return;
	}
	char *y = targets(&t, &c);
	CHECK_STR(y, "Done: <|eot_id|><|eot_id|>You're welcome.<|eot_id|>");
	free(y);
	free(text);
	td_corpus_free(&c);
	/* alpaca: BOS + prompt + response + EOS, loss on response + EOS */
	if (one(&t,
		"{\"instruction\": \"Name a colour.\", \"input\": \"\", "
		"\"output\": \"Blue.\"}\n",
		TD_TPL_AUTO, false, &c, &text)) {
		fail("%s", mg_last_error());
	} else {
		y = targets(&t, &c);
		CHECK_STR(y, "Blue.<|end_of_text|>");
		free(y);
		dec = decode(&t, c.ids, c.off[1]);
		CHECK_STR(dec, text);
		free(dec);
		free(text);
		td_corpus_free(&c);
	}
	td_tok_hf_free(&t);
}

/* The Llama 2 tokenizer with Llama 2's own chat_template beside it
 * (a copy of the folder): template = model renders the built-in llama2
 * format's text, and a SentencePiece tokenizer's cut pieces encode to
 * the built-in's ids (the leading space of a piece cut at a target
 * dropped, as for the built-in pieces), targets alike. */
static const char LLAMA2_TEMPLATE[] =
	"{% if messages[0]['role'] == 'system' %}{% set loop_messages = "
	"messages[1:] %}{% set system_message = messages[0]['content'] %}{% "
	"else %}{% set loop_messages = messages %}{% set system_message = "
	"false %}{% endif %}{% for message in loop_messages %}{% if "
	"(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
	"raise_exception('Conversation roles must alternate') }}{% endif %}"
	"{% if loop.index0 == 0 and system_message != false %}{% set "
	"content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
	"message['content'] %}{% else %}{% set content = message['content'] "
	"%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
	"'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
	"== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% "
	"endif %}{% endfor %}";

static void model_llama2(const char *src)
{
	char dir[1100], cmd[2400], path[1200];
	snprintf(dir, sizeof dir, "%s/llama2_model", tmp);
	snprintf(cmd, sizeof cmd,
		 "mkdir -p '%s' && cp '%s/tokenizer.json' '%s/'", dir, src,
		 dir);
	if (system(cmd) != 0) {
		fail("%s failed", cmd);
		return;
	}
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	FILE *f = fopen(path, "w");
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "add_bos_token", 1);
	cJSON_AddStringToObject(j, "bos_token", "<s>");
	cJSON_AddStringToObject(j, "eos_token", "</s>");
	cJSON_AddStringToObject(j, "unk_token", "<unk>");
	cJSON_AddStringToObject(j, "chat_template", LLAMA2_TEMPLATE);
	char *js = cJSON_Print(j);
	fputs(js, f);
	fclose(f);
	free(js);
	cJSON_Delete(j);
	struct td_tok t;
	if (td_tok_hf_load(dir, &t)) {
		fail("load %s: %s", dir, mg_last_error());
		return;
	}
	CHECK(t.prepend_space);
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_MODEL);
	const char *const data[] = {CHAT, CHAT_PLAIN};
	for (int k = 0; k < 2; k++) {
		struct td_corpus cb, cm;
		char *tb = NULL, *tm = NULL;
		if (one(&t, data[k], TD_TPL_LLAMA2, false, &cb, &tb) ||
		    one(&t, data[k], TD_TPL_AUTO, false, &cm, &tm)) {
			fail("%s", mg_last_error());
			break;
		}
		CHECK_STR(tm, tb);
		CHECK_INT(cm.off[1], cb.off[1]);
		if (cm.off[1] == cb.off[1])
			CHECK(!memcmp(cm.ids, cb.ids, (size_t)cb.off[1] * 4));
		char *yb = targets(&t, &cb), *ym = targets(&t, &cm);
		CHECK_STR(ym, yb);
		free(yb), free(ym), free(tb), free(tm);
		td_corpus_free(&cb);
		td_corpus_free(&cm);
	}
	td_tok_hf_free(&t);
}

static void case_llama2(const char *dir)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/llama2", dir);
	struct td_tok t;
	if (td_tok_hf_load(path, &t)) {
		fail("load %s: %s", path, mg_last_error());
		return;
	}
	CHECK(t.add_bos);
	CHECK(t.prepend_space);
	/* no chat_template and no chat special tokens: auto is refused for
	 * chat data, naming the option; llama2 chosen explicitly */
	CHECK_INT(td_pick_template(TD_TPL_AUTO, &t), TD_TPL_AUTO);
	struct td_corpus c;
	char *text = NULL;
	CHECK(one(&t, CHAT, TD_TPL_AUTO, false, &c, &text) != 0);
	CHECK(strstr(mg_last_error(), "set dataset.template") != NULL);
	if (one(&t, CHAT, TD_TPL_LLAMA2, false, &c, &text)) {
		fail("%s", mg_last_error());
		td_tok_hf_free(&t);
		return;
	}
	CHECK_STR(text, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nSay "
			"<|eot_id|> please [/INST] Done: <|eot_id|> </s><s>"
			"[INST] Thanks! [/INST] You're welcome. </s>");
	/* SentencePiece: each piece starts a word ("▁[INST]" after <s>, as
	 * HF encodes "<s>[INST]"), which decodes as a space after <s>, as
	 * HF's decode of the same ids does. */
	char *dec = decode(&t, c.ids, c.off[1]);
	CHECK_STR(dec, "<s> [INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nSay "
		       "<|eot_id|> please [/INST] Done: <|eot_id|> </s><s> "
		       "[INST] Thanks! [/INST] You're welcome. </s>");
	free(dec);
	int n = 0;
	for (int64_t k = 0; k < c.off[1]; k++)
		n += c.ids[k] == t.eos_id;
	CHECK_INT(n, 2);
	char *y = targets(&t, &c);
	/* The reply after "[/INST]" is one word boundary ("▁Done"), not
	 * two: the space before it is the tokenizer's. */
	CHECK_STR(y, "Done: <|eot_id|> </s> You're welcome. </s>");
	CHECK(strcmp(mg_tokenizer_token(t.self, c.ids[c.off[1] - 1]), "</s>") ==
	      0);
	/* "<|eot_id|>" is no token of this vocabulary: the whole string
	 * encodes to the same ids. */
	same_as_whole(&t, text, &c);
	free(text);
	td_corpus_free(&c);
	if (!one(&t, CHAT_PLAIN, TD_TPL_LLAMA2, false, &c, &text))
		same_as_whole(&t, text, &c);
	free(y);
	free(text);
	td_corpus_free(&c);
	td_tok_hf_free(&t);
	model_llama2(path);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: test_textdata_hf CASE DIR TMPDIR\n");
		return 2;
	}
	struct stat st;
	if (stat(argv[2], &st)) {
		printf("skipped: no %s (scripts/fetch-tokenizers.sh)\n",
		       argv[2]);
		return 77;
	}
	tmp = argv[3];
	mkdir(tmp, 0777);
	if (!strcmp(argv[1], "llama3"))
		case_llama3(argv[2]);
	else if (!strcmp(argv[1], "llama2"))
		case_llama2(argv[2]);
	else
		return 2;
	return failures != 0;
}
