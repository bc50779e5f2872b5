/*
 * test_chat_template.c - the chat-template interpreter (mg/chat.h)
 * against the corpus of tests/text/data/chat/corpus.jsonl: each template
 * rendered with each conversation must equal, byte for byte, what jinja2
 * 3.1 configured as transformers configures it rendered
 * (tests/text/make_chat_corpus.py wrote it), and fail where jinja2
 * failed, with raise_exception's message. Then what the corpus cannot
 * show: syntax and runtime errors naming their line, the caps that stop
 * hostile templates (endless loops, runaway recursion, huge output,
 * deep nesting), {% generation %} spans, and renders of one template on
 * several threads at once.
 *
 * usage: test_chat_template CORPUS.jsonl
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/chat.h"
#include "mg/log.h"

static int fails;

static void show_diff(const char *got, const char *want)
{
	size_t i = 0;
	while (got[i] && got[i] == want[i])
		i++;
	size_t b = i > 40 ? i - 40 : 0;
	fprintf(stderr,
		"  first difference at byte %zu\n  got:  [%.300s]\n"
		"  want: [%.300s]\n",
		i, got + b, want + b);
}

static int run_corpus(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "FAIL: cannot open %s\n", path);
		return 1;
	}
	char *line = NULL;
	size_t cap = 0;
	long lineno = 0;
	int cases = 0, templates = 0, bad_before = fails;
	struct mg_chat_template *t = NULL;
	char name[128] = "";
	while (getline(&line, &cap, f) >= 0) {
		lineno++;
		cJSON *j = cJSON_Parse(line);
		const cJSON *tn = cJSON_GetObjectItem(j, "template");
		const cJSON *src = cJSON_GetObjectItem(j, "source");
		if (!cJSON_IsString(tn)) {
			fprintf(stderr, "FAIL: %s:%ld: not a corpus line\n",
				path, lineno);
			fails++;
			cJSON_Delete(j);
			continue;
		}
		if (cJSON_IsString(src)) {
			mg_chat_template_free(t);
			snprintf(name, sizeof name, "%s", tn->valuestring);
			t = mg_chat_template_parse(src->valuestring,
						   strlen(src->valuestring));
			templates++;
			if (!t) {
				fprintf(stderr, "FAIL: template %s: %s\n", name,
					mg_last_error());
				fails++;
			}
			cJSON_Delete(j);
			continue;
		}
		cases++;
		const char *cs = cJSON_GetObjectItem(j, "case")->valuestring;
		char *vars =
			cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "vars"));
		const cJSON *want = cJSON_GetObjectItem(j, "output");
		const cJSON *err = cJSON_GetObjectItem(j, "error");
		int raised = cJSON_IsTrue(cJSON_GetObjectItem(j, "raised"));
		char *out = NULL;
		int rc = t ? mg_chat_template_render(t, vars, strlen(vars),
						     &out, NULL, NULL, NULL)
			   : -1;
		if (!t) {
			/* counted at the template */
		} else if (cJSON_IsString(want)) {
			if (rc) {
				fprintf(stderr, "FAIL: %s %s: %s\n", name, cs,
					mg_last_error());
				fails++;
			} else if (strcmp(out, want->valuestring)) {
				fprintf(stderr,
					"FAIL: %s %s: rendering "
					"differs\n",
					name, cs);
				show_diff(out, want->valuestring);
				fails++;
			}
		} else if (!rc) {
			fprintf(stderr,
				"FAIL: %s %s: rendered, jinja2 failed "
				"with: %s\n",
				name, cs, err->valuestring);
			fails++;
		} else if (raised &&
			   !strstr(mg_last_error(), err->valuestring)) {
			fprintf(stderr, "FAIL: %s %s: error [%s] lacks [%s]\n",
				name, cs, mg_last_error(), err->valuestring);
			fails++;
		} else if (!strstr(mg_last_error(), "line ")) {
			fprintf(stderr,
				"FAIL: %s %s: error [%s] names no "
				"line\n",
				name, cs, mg_last_error());
			fails++;
		}
		free(out);
		free(vars);
		cJSON_Delete(j);
	}
	mg_chat_template_free(t);
	free(line);
	fclose(f);
	printf("corpus: %d templates, %d cases, %d failures\n", templates,
	       cases, fails - bad_before);
	if (templates < 10 || cases < 300) {
		fprintf(stderr, "FAIL: the corpus is too small\n");
		fails++;
	}
	return 0;
}

/* Render src with vars; want_out (NULL: expect an error containing
 * want_err). */
static void check(const char *what, const char *src, const char *vars,
		  const char *want_out, const char *want_err)
{
	struct mg_chat_template *t = mg_chat_template_parse(src, strlen(src));
	char *out = NULL;
	int rc = -1;
	if (t)
		rc = mg_chat_template_render(t, vars, strlen(vars), &out, NULL,
					     NULL, NULL);
	if (want_out) {
		if (rc || strcmp(out, want_out)) {
			fprintf(stderr, "FAIL: %s: got [%s] want [%s]\n", what,
				rc ? mg_last_error() : out, want_out);
			fails++;
		}
	} else if (!rc) {
		fprintf(stderr, "FAIL: %s: rendered [%.60s], want an error\n",
			what, out);
		fails++;
	} else if (!strstr(mg_last_error(), want_err)) {
		fprintf(stderr, "FAIL: %s: error [%s] lacks [%s]\n", what,
			mg_last_error(), want_err);
		fails++;
	}
	free(out);
	mg_chat_template_free(t);
}

static void errors_and_caps(void)
{
	/* syntax errors, with their lines */
	check("unclosed if", "a\n{% if x %}\nb", "{}", NULL,
	      "line 3: unexpected end of template");
	check("unknown tag", "\n\n{% frobnicate %}", "{}", NULL,
	      "line 3: unknown tag 'frobnicate'");
	check("stray endfor", "{% endfor %}", "{}", NULL,
	      "line 1: unexpected 'endfor'");
	check("bad expression", "x\n{{ 1 + }}", "{}", NULL, "line 2: ");
	check("unclosed tag", "{{ x", "{}", NULL, "unclosed {{ tag");
	check("unclosed comment", "{# x", "{}", NULL, "comment");
	check("unclosed string", "{{ 'abc }}", "{}", NULL, "string");
	/* runtime errors, with their lines */
	check("raise", "one\n{{ raise_exception('Bad role: ' ~ r) }}",
	      "{\"r\": \"narrator\"}", NULL, "line 2: Bad role: narrator");
	check("undefined attr", "\n{{ nope.x }}", "{}", NULL,
	      "line 2: 'nope' is undefined");
	check("str + int", "{{ 'a' + 1 }}", "{}", NULL, "unsupported operand");
	check("division by zero", "{{ 1 / 0 }}", "{}", NULL, "division");
	check("unknown filter", "{{ 1 | frob }}", "{}", NULL,
	      "no filter named 'frob'");
	check("sandbox", "{{ [1].append(2) }}", "{}", NULL, "append");
	check("bad vars", "x", "[1]", NULL, "not a JSON object");
	/* number literals: 63 characters are read whole, longer ones are
	 * refused, not cut to another value (a '.' past 63 digits wrote
	 * beyond the lexer's buffer: fuzz_tokconfig) */
	check("long float",
	      "{{ 0.000000000000000000000000000000000000000000000000000000000"
	      "0002 > 0 }}",
	      "{}", "True", NULL);
	check("too long float",
	      "{{ 1111111111111111111111111111111111111111111111111111111111111"
	      "11.5 }}",
	      "{}", NULL, "number literal of more than 63 characters");
	/* caps: none of these may hang or crash */
	check("endless loops",
	      "{% for a in range(100000) %}{% for b in range(100000) %}"
	      "{% endfor %}{% endfor %}",
	      "{}", NULL, "loop iterations");
	check("recursion",
	      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}"
	      "{{ f(0) }}",
	      "{}", NULL, "macro calls nest deeper");
	check("huge output",
	      "{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}"
	      "{% endfor %}",
	      "{}", NULL, "longer than");
	check("huge range", "{{ range(1000000000) | length }}", "{}", NULL,
	      "range()");
	check("huge repeat", "{{ 'ab' * 1000000000000 }}", "{}", NULL,
	      "repetition too large");
	char deep[4096] = "{{ ";
	for (int i = 0; i < 1000; i++)
		strcat(deep, "(");
	strcat(deep, "1");
	for (int i = 0; i < 1000; i++)
		strcat(deep, ")");
	strcat(deep, " }}");
	check("deep nesting", deep, "{}", NULL, "nests too deeply");
	check("int overflow", "{{ 9223372036854775807 + 1 }}", "{}", NULL,
	      "overflow");
	/* a few exact renderings the corpus covers only indirectly */
	check("trailing newline", "a\n", "{}", "a", NULL);
	check("two trailing newlines", "a\n\n", "{}", "a\n", NULL);
	check("crlf", "a\r\nb{% if 1 %}\r\nc{% endif %}", "{}", "a\nbc", NULL);
	check("json ints", "{{ x }} {{ y }} {{ z | tojson }}",
	      "{\"x\": 3, \"y\": 2.5, \"z\": [1, 1e100]}", "3 2.5 [1, 1e+100]",
	      NULL);
}

static void spans(void)
{
	const char *src = "{% for m in messages %}<{{ m.role }}>"
			  "{% if m.role == 'assistant' %}{% generation %}"
			  "{{ m.content }}</s>{% endgeneration %}{% else %}"
			  "{{ m.content }}{% endif %}{% endfor %}";
	const char *vars = "{\"messages\": [{\"role\": \"user\", \"content\":"
			   " \"hi\"}, {\"role\": \"assistant\", \"content\":"
			   " \"yo\"}, {\"role\": \"user\", \"content\": "
			   "\"q\"}, {\"role\": \"assistant\", \"content\": "
			   "\"é\"}]}";
	struct mg_chat_template *t = mg_chat_template_parse(src, strlen(src));
	char *out = NULL;
	size_t n = 0, ns = 0;
	struct mg_chat_span *sp = NULL;
	if (!t || mg_chat_template_render(t, vars, strlen(vars), &out, &n, &sp,
					  &ns)) {
		fprintf(stderr, "FAIL: spans: %s\n", mg_last_error());
		fails++;
		mg_chat_template_free(t);
		return;
	}
	const char *want = "<user>hi<assistant>yo</s><user>q<assistant>é</s>";
	if (strcmp(out, want) || n != strlen(want) || ns != 2 ||
	    sp[0].start != 19 || sp[0].end != 25 || sp[1].start != 43 ||
	    sp[1].end != 49) {
		fprintf(stderr, "FAIL: spans: [%s] %zu spans\n", out, ns);
		fails++;
	}
	free(out);
	free(sp);
	mg_chat_template_free(t);
}

struct job {
	const struct mg_chat_template *t;
	int bad;
};

static void *render_many(void *arg)
{
	struct job *j = arg;
	for (int i = 0; i < 200; i++) {
		char vars[128], want[64], *out = NULL;
		snprintf(vars, sizeof vars, "{\"n\": %d}", i);
		snprintf(want, sizeof want, "%d:%d", i, i * 2);
		if (mg_chat_template_render(j->t, vars, strlen(vars), &out,
					    NULL, NULL, NULL) ||
		    strcmp(out, want))
			j->bad++;
		free(out);
	}
	return NULL;
}

static void threads(void)
{
	const char *src = "{% set ns = namespace(x=0) %}{% for i in range(2) "
			  "%}{% set ns.x = ns.x + n %}{% endfor %}{{ n }}:{{ "
			  "ns.x }}";
	struct mg_chat_template *t = mg_chat_template_parse(src, strlen(src));
	struct job j[4] = {{t, 0}, {t, 0}, {t, 0}, {t, 0}};
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, render_many, &j[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		if (j[i].bad) {
			fprintf(stderr, "FAIL: thread %d: %d bad renders\n", i,
				j[i].bad);
			fails++;
		}
	}
	mg_chat_template_free(t);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_chat_template CORPUS.jsonl\n");
		return 2;
	}
	if (run_corpus(argv[1]))
		return 1;
	errors_and_caps();
	spans();
	threads();
	if (fails) {
		fprintf(stderr, "%d failures\n", fails);
		return 1;
	}
	printf("ok\n");
	return 0;
}
