/*
 * tokenize.c - `mgrun tokenize`: text on standard input to ids (one line
 * of space-separated ids per input line), or ids back to text with
 * --decode (one JSON string per line). With --json each input line is a
 * JSON string, so texts may hold newlines. With --chat each input line is
 * a JSON object {"messages": [...], "add_generation_prompt": ..., "tools":
 * ...} rendered with the tokenizer's chat_template (mg/chat.h), printed
 * as a JSON string (--text) or as ids encoded as transformers'
 * apply_chat_template(tokenize=True) encodes it: special tokens in the
 * text recognised, add_special_tokens=False (the template writes the
 * BOS). Exit 0, 1 on bad input or a template that raises (the line
 * named), 2 on bad usage or a template that does not parse.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "mg/chat.h"
#include "mg/log.h"
#include "mg/tokenizer.h"

int mg_tokenize_main(int argc, char **argv);

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mgrun tokenize --tokenizer PATH [--json] "
		"[--no-special] [--no-added]\n"
		"       mgrun tokenize --tokenizer PATH --decode "
		"[--skip-special]\n"
		"       mgrun tokenize --tokenizer PATH --chat [--text] "
		"[--no-added]\n"
		"\n"
		"Reads standard input one line at a time and prints one line "
		"per input line.\n"
		"  --tokenizer PATH  a tokenizer.json or the folder holding "
		"it\n"
		"  --json            each input line is a JSON string (texts "
		"with newlines)\n"
		"  --no-special      add_special_tokens=False: no "
		"post-processor (no BOS)\n"
		"  --no-added        do not match added/special tokens in the "
		"text\n"
		"  --decode          input lines are ids; print each text as "
		"a JSON string\n"
		"  --skip-special    with --decode: leave special tokens "
		"out\n"
		"  --chat            input lines are JSON objects "
		"{\"messages\": "
		"[...],\n"
		"                    \"add_generation_prompt\": true|false, "
		"\"tools\": [...]}\n"
		"                    rendered with tokenizer_config.json's "
		"chat_template;\n"
		"                    prints their ids (no BOS added: the "
		"template "
		"writes it)\n"
		"  --text            with --chat: print the rendered text as a "
		"JSON string\n");
}

static int hex4(const char *p, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return -1;
		*v = *v << 4 | (unsigned)d;
	}
	return 0;
}

/* Decode the JSON string in line[0..n) in place (it only shrinks);
 * returns its length or -1 with *why set. Lone surrogates are refused:
 * they have no UTF-8 form. */
static long json_string(char *line, size_t n, const char **why)
{
	while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' ||
		     line[n - 1] == '\r'))
		n--;
	if (n < 2 || line[0] != '"' || line[n - 1] != '"')
		return *why = "not a JSON string", -1;
	size_t o = 0;
	for (size_t i = 1; i < n - 1; i++) {
		char c = line[i];
		if (c == '"')
			return *why = "unescaped quote", -1;
		if ((unsigned char)c < 0x20)
			return *why = "control character in a JSON string", -1;
		if (c != '\\') {
			line[o++] = c;
			continue;
		}
		if (++i >= n - 1)
			return *why = "dangling backslash", -1;
		switch (line[i]) {
		case '"':
		case '\\':
		case '/':
			line[o++] = line[i];
			break;
		case 'b':
			line[o++] = '\b';
			break;
		case 'f':
			line[o++] = '\f';
			break;
		case 'n':
			line[o++] = '\n';
			break;
		case 'r':
			line[o++] = '\r';
			break;
		case 't':
			line[o++] = '\t';
			break;
		case 'u': {
			unsigned cp, lo;
			if (i + 4 >= n || hex4(line + i + 1, &cp))
				return *why = "bad \\u escape", -1;
			i += 4;
			if (cp >= 0xDC00 && cp <= 0xDFFF)
				return *why = "lone low surrogate", -1;
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (i + 6 >= n || line[i + 1] != '\\' ||
				    line[i + 2] != 'u' ||
				    hex4(line + i + 3, &lo) || lo < 0xDC00 ||
				    lo > 0xDFFF)
					return *why = "lone high surrogate", -1;
				i += 6;
				cp = 0x10000 + ((cp - 0xD800) << 10) +
				     (lo - 0xDC00);
			}
			o += mg_utf8_put(cp, line + o);
			break;
		}
		default:
			return *why = "bad escape", -1;
		}
	}
	return (long)o;
}

static void print_json(FILE *f, const char *s, size_t n)
{
	putc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			putc('\\', f), putc(c, f);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c < 0x20 || c == 0x7F)
			fprintf(f, "\\u%04x", c);
		else
			putc(c, f);
	}
	fputs("\"\n", f);
}

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}
/* The thread's CPU time: on a shared machine, wall time also counts the
 * time other processes held the core. */
static double cpu_now(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* --stats: text bytes, ids, and the wall and CPU seconds of the whole
 * loop (reading, encoding, writing: clocks around each encode call would
 * cost a tenth of it), the load excluded. */
struct enc_stats {
	double bytes, ids, secs, cpu;
};

static int encode_lines(const struct mg_tokenizer *t, int json, unsigned flags,
			struct enc_stats *st)
{
	char *line = NULL, num[16];
	size_t cap = 0;
	ssize_t n;
	long lineno = 0;
	struct mg_ids ids = {0};
	int rc = 0;
	double t0 = now(), c0 = cpu_now();
	while ((n = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		if (n && line[n - 1] == '\n')
			n--;
		if (json) {
			const char *why;
			n = json_string(line, (size_t)n, &why);
			if (n < 0) {
				fprintf(stderr,
					"mgrun tokenize: line %ld: %s\n",
					lineno, why);
				rc = 1;
				break;
			}
		}
		ids.n = 0;
		int bad = mg_tokenizer_encode(t, line, (size_t)n, flags, &ids);
		st->bytes += (double)n;
		st->ids += (double)ids.n;
		if (bad) {
			fprintf(stderr, "mgrun tokenize: line %ld: %s\n",
				lineno, mg_last_error());
			rc = 1;
			break;
		}
		for (int64_t i = 0; i < ids.n; i++) {
			/* by hand: printf is a tenth of the encode time */
			char *e = num + sizeof num, *p = e;
			uint32_t v = (uint32_t)ids.v[i];
			do
				*--p = (char)('0' + v % 10);
			while (v /= 10);
			if (i)
				*--p = ' ';
			fwrite(p, 1, (size_t)(e - p), stdout);
		}
		putchar('\n');
	}
	fflush(stdout);
	st->secs = now() - t0;
	st->cpu = cpu_now() - c0;
	free(line);
	free(ids.v);
	return rc;
}

static int decode_lines(const struct mg_tokenizer *t, unsigned flags)
{
	char *line = NULL;
	size_t cap = 0;
	long lineno = 0;
	struct mg_ids ids = {0};
	int rc = 0;
	while (!rc && getline(&line, &cap, stdin) >= 0) {
		lineno++;
		ids.n = 0;
		char *p = line, *end;
		for (;;) {
			while (*p == ' ' || *p == '\t' || *p == '\r' ||
			       *p == '\n')
				p++;
			if (!*p)
				break;
			long v = strtol(p, &end, 10);
			if (end == p || v < 0 || v > 0x7fffffff) {
				fprintf(stderr,
					"mgrun tokenize: line %ld: '%.*s' is "
					"not an id\n",
					lineno, (int)strcspn(p, " \t\r\n"), p);
				rc = 1;
				break;
			}
			if (ids.n == ids.cap) {
				ids.cap = ids.cap ? ids.cap * 2 : 256;
				int32_t *nv = realloc(
					ids.v, (size_t)ids.cap * sizeof *nv);
				if (!nv) {
					rc = 1;
					break;
				}
				ids.v = nv;
			}
			ids.v[ids.n++] = (int32_t)v;
			p = end;
		}
		if (rc)
			break;
		char *text;
		size_t len;
		if (mg_tokenizer_decode(t, ids.v, ids.n, flags, &text, &len)) {
			fprintf(stderr, "mgrun tokenize: line %ld: %s\n",
				lineno, mg_last_error());
			rc = 1;
			break;
		}
		print_json(stdout, text, len);
		free(text);
	}
	free(line);
	free(ids.v);
	return rc;
}

static void print_ids(const struct mg_ids *ids)
{
	for (int64_t i = 0; i < ids->n; i++)
		printf(i ? " %d" : "%d", ids->v[i]);
	putchar('\n');
}

/* --chat: one JSON object per line, rendered with the chat template. */
static int chat_lines(const struct mg_tokenizer *t, int text, unsigned flags)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	long lineno = 0;
	struct mg_ids ids = {0};
	int rc = 0;
	while (!rc && (n = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		cJSON *j = cJSON_ParseWithLength(line, (size_t)n);
		const cJSON *m =
			cJSON_GetObjectItemCaseSensitive(j, "messages");
		const cJSON *g = cJSON_GetObjectItemCaseSensitive(
			j, "add_generation_prompt");
		const char *bad = !cJSON_IsObject(j)  ? "not a JSON object"
				  : !cJSON_IsArray(m) ? "no \"messages\" array"
				  : g && !cJSON_IsBool(g)
					  ? "\"add_generation_prompt\" is not "
					    "true or false"
					  : NULL;
		char key[64];
		if (!bad && mg_json_nul_string(line, (size_t)n, key,
					       sizeof key) < (size_t)n)
			bad = "a string holds a NUL character";
		cJSON_Delete(j);
		if (bad) {
			fprintf(stderr, "mgrun tokenize: line %ld: %s\n",
				lineno, bad);
			rc = 1;
			break;
		}
		char *out;
		size_t len;
		int r = mg_tokenizer_apply_chat_template(
			t, line, (size_t)n, &out, &len, NULL, NULL);
		if (r) {
			fprintf(stderr, "mgrun tokenize: line %ld: %s\n",
				lineno, mg_last_error());
			rc = r == -2 ? 2 : 1;
			break;
		}
		if (text) {
			print_json(stdout, out, len);
		} else {
			ids.n = 0;
			if (mg_tokenizer_encode(t, out, len, flags, &ids)) {
				fprintf(stderr,
					"mgrun tokenize: line %ld: %s\n",
					lineno, mg_last_error());
				rc = 1;
			} else {
				print_ids(&ids);
			}
		}
		free(out);
	}
	free(line);
	free(ids.v);
	return rc;
}

int mg_tokenize_main(int argc, char **argv)
{
	enum {
		O_TOK = 256,
		O_JSON,
		O_NOSP,
		O_NOADD,
		O_DEC,
		O_SKIP,
		O_STATS,
		O_CHAT,
		O_TEXT
	};
	static const struct option longopts[] = {
		{"tokenizer", required_argument, 0, O_TOK},
		{"json", no_argument, 0, O_JSON},
		{"no-special", no_argument, 0, O_NOSP},
		{"no-added", no_argument, 0, O_NOADD},
		{"decode", no_argument, 0, O_DEC},
		{"skip-special", no_argument, 0, O_SKIP},
		{"stats", no_argument, 0, O_STATS},
		{"chat", no_argument, 0, O_CHAT},
		{"text", no_argument, 0, O_TEXT},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *path = NULL;
	int json = 0, decode = 0, stats = 0, chat = 0, text = 0, nosp = 0, c;
	unsigned eflags = MG_TOK_ADD_SPECIAL, dflags = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_TOK:
			path = optarg;
			break;
		case O_JSON:
			json = 1;
			break;
		case O_NOSP:
			eflags &= ~(unsigned)MG_TOK_ADD_SPECIAL;
			nosp = 1;
			break;
		case O_NOADD:
			eflags |= MG_TOK_NO_ADDED;
			break;
		case O_DEC:
			decode = 1;
			break;
		case O_SKIP:
			dflags |= MG_TOK_SKIP_SPECIAL;
			break;
		case O_STATS:
			stats = 1;
			break;
		case O_CHAT:
			chat = 1;
			break;
		case O_TEXT:
			text = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!path || optind != argc) {
		fprintf(stderr, "mgrun tokenize: %s\n",
			!path ? "--tokenizer PATH is required"
			      : "unexpected argument");
		usage(stderr);
		return 2;
	}
	if (decode && json) {
		fprintf(stderr, "mgrun tokenize: --json is for encoding; "
				"--decode always prints JSON\n");
		return 2;
	}
	if (chat && (decode || json || nosp)) {
		fprintf(stderr, "mgrun tokenize: --chat reads JSON objects and "
				"never adds special tokens: not with --decode, "
				"--json or --no-special\n");
		return 2;
	}
	if (text && !chat) {
		fprintf(stderr, "mgrun tokenize: --text goes with --chat\n");
		return 2;
	}
	double t0 = now();
	struct mg_tokenizer *t = mg_tokenizer_load(path);
	double load = now() - t0;
	if (!t) {
		fprintf(stderr, "mgrun tokenize: %s\n", mg_last_error());
		return 1;
	}
	static char obuf[1 << 16];
	setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
	struct enc_stats st = {0};
	int rc = chat	  ? chat_lines(t, text, eflags & MG_TOK_NO_ADDED)
		 : decode ? decode_lines(t, dflags)
			  : encode_lines(t, json, eflags, &st);
	if (stats && !decode)
		fprintf(stderr,
			"mgrun tokenize: load %.3f s; encoded %.0f bytes to "
			"%.0f ids in %.4f s, CPU %.4f s: %.2f MB/s, CPU %.2f "
			"MB/s\n",
			load, st.bytes, st.ids, st.secs, st.cpu,
			st.secs > 0 ? st.bytes / st.secs / 1e6 : 0.0,
			st.cpu > 0 ? st.bytes / st.cpu / 1e6 : 0.0);
	else if (stats)
		fprintf(stderr, "mgrun tokenize: load %.3f s\n", load);
	if (fflush(stdout)) {
		fprintf(stderr, "mgrun tokenize: write error\n");
		rc = 1;
	}
	mg_tokenizer_free(t);
	return rc;
}
