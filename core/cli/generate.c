/*
 * generate.c - `mgrun generate`: text from a trained (or Hugging Face)
 * language model. The run is set up as --eval-only sets it up, in one
 * process (mg_inference_open), with the run directory's checkpoint, or
 * the model's own HF weights when there is no checkpoint; the prompt is
 * tokenized, prefilled in one call of the model's decode op (ABI 1.4),
 * then one token at a time is sampled (temperature, top-k, top-p, from
 * the counter-based rng, so a seed fixes the output) and fed back, the
 * model keeping its key/value cache. Text streams to stdout as it grows;
 * everything else (setup chatter, the weights used, tokens/s) goes to
 * stderr, so stdout is just the continuation. --ids takes and prints
 * token ids and needs no tokenizer.
 * Exit codes as mgrun's: 0 done, 1 the run failed, 2 bad usage or
 * configuration.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/generate.h"
#include "dist/dist.h"
#include "engine/run.h"
#include "mg/rng.h"
#include "mg/tokenizer.h"

int mg_generate_main(int argc, char **argv);

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mgrun generate (-c FILE | --model DIR) [--prompt TEXT "
		"| "
		"--prompt-file F |\n"
		"                      --prompts FILE] [options]\n"
		"\n"
		"Continues a prompt with the run's trained model (its "
		"checkpoint in the run\n"
		"directory, or the model's Hugging Face weights when it has "
		"no checkpoint), or\n"
		"with a Hugging Face model folder. The continuation streams "
		"to stdout; the rest\n"
		"goes to stderr. Stops at the tokenizer's EOS and every "
		"eos_token_id of the\n"
		"model's generation_config.json.\n"
		"  -c, --config FILE       experiment INI file of the run\n"
		"  --model DIR             a Hugging Face model folder (llama, "
		"mistral, qwen2,\n"
		"                          qwen3), no experiment file; with "
		"--device cpu|cuda\n"
		"                          (cpu) and --precision P (fp32)\n"
		"  --chat                  the prompt is messages (a JSON "
		"list, "
		"or an object with\n"
		"                          \"messages\"), rendered by the "
		"tokenizer's chat template\n"
		"                          with the generation prompt\n"
		"  --set S.K=V             override a key (repeatable)\n"
		"  --prompt TEXT           the prompt\n"
		"  --prompt-file F         read the prompt from a file ('-': "
		"stdin)\n"
		"  --prompts FILE          JSON Lines, one prompt a line "
		"({\"prompt\": TEXT} or\n"
		"                          {\"ids\": [ID, ...]}; '-': stdin): "
		"the model loaded once,\n"
		"                          one JSON line printed per prompt "
		"(index, completion,\n"
		"                          completion_ids, prompt_tokens, "
		"new_tokens, stop)\n"
		"  --ids [\"ID ID ...\"]     the prompt is token ids (spaces "
		"or "
		"commas), after the\n"
		"                          flag or in --prompt; print ids\n"
		"  --max-new-tokens N      tokens to generate at most "
		"(128)\n"
		"  --temperature T         sampling temperature (0.8; 0: "
		"greedy)\n"
		"  --top-k K               sample among the K likeliest "
		"tokens (50; 0: all)\n"
		"  --top-p P               ... within the smallest set of "
		"probability >= P (0.95)\n"
		"  --seed S                sampling seed (run.seed by "
		"default)\n"
		"  --greedy                always the likeliest token\n"
		"  --tokenizer PATH        tokenizer.json or its folder "
		"(default: the dataset's\n"
		"                          tokenizer option, else the model's "
		"hf_dir)\n"
		"  --adapter DIR           a PEFT LoRA adapter folder applied "
		"on the run's base\n"
		"                          (model.hf_dir or the seeded "
		"weights; the run's\n"
		"                          checkpoint is not read)\n"
		"  --plugin-path DIRS      colon-separated plugin folders, "
		"searched first\n");
}

/* A whole number in [lo, hi] (all of the text), else a usage error. */
static int parse_ll(const char *opt, const char *s, long long lo, long long hi,
		    long long *out)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi) {
		fprintf(stderr,
			"mgrun generate: %s %s: expected a whole number in "
			"[%lld, %lld]\n",
			opt, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_d(const char *opt, const char *s, double lo, double hi,
		   double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !(v >= lo && v <= hi)) {
		fprintf(stderr,
			"mgrun generate: %s %s: expected a number in [%g, "
			"%g]\n",
			opt, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* Returns 0, or 2 after printing the usage error (1 for -h: exit 0). */
static int parse_args(int argc, char **argv, struct gen_opts *g)
{
	enum {
		O_SET = 256,
		O_PROMPT,
		O_PROMPT_FILE,
		O_IDS,
		O_MAX_NEW,
		O_TEMP,
		O_TOPK,
		O_TOPP,
		O_SEED,
		O_GREEDY,
		O_TOK,
		O_PATH,
		O_ADAPTER,
		O_PROMPTS,
		O_MODEL,
		O_DEVICE,
		O_PRECISION,
		O_CHAT,
	};
	static const struct option lo[] = {
		{"config", required_argument, 0, 'c'},
		{"set", required_argument, 0, O_SET},
		{"prompt", required_argument, 0, O_PROMPT},
		{"prompt-file", required_argument, 0, O_PROMPT_FILE},
		{"ids", no_argument, 0, O_IDS},
		{"max-new-tokens", required_argument, 0, O_MAX_NEW},
		{"temperature", required_argument, 0, O_TEMP},
		{"top-k", required_argument, 0, O_TOPK},
		{"top-p", required_argument, 0, O_TOPP},
		{"seed", required_argument, 0, O_SEED},
		{"greedy", no_argument, 0, O_GREEDY},
		{"tokenizer", required_argument, 0, O_TOK},
		{"plugin-path", required_argument, 0, O_PATH},
		{"adapter", required_argument, 0, O_ADAPTER},
		{"prompts", required_argument, 0, O_PROMPTS},
		{"model", required_argument, 0, O_MODEL},
		{"device", required_argument, 0, O_DEVICE},
		{"precision", required_argument, 0, O_PRECISION},
		{"chat", no_argument, 0, O_CHAT},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	g->max_new = 128;
	g->temperature = 0.8;
	g->top_k = 50;
	g->top_p = 0.95;
	optind = 1;
	int c;
	long long v;
	while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			g->ini = optarg;
			break;
		case O_SET:
			g->sets[g->nsets++] = optarg;
			break;
		case O_PROMPT:
			if (g->ids_mode && g->prompt) {
				fprintf(stderr,
					"mgrun generate: --ids IDS and "
					"--prompt both give the prompt: "
					"give one\n");
				return 2;
			}
			g->prompt = optarg;
			break;
		case O_PROMPT_FILE:
			g->prompt_file = optarg;
			break;
		case O_IDS:
			g->ids_mode = true;
			/* `--ids "5 17 42"`: the prompt's ids may follow the
			 * flag itself (else --prompt or --prompt-file gives
			 * them) */
			if (optind < argc && argv[optind][0] != '-') {
				if (g->prompt) {
					fprintf(stderr,
						"mgrun generate: --ids IDS and "
						"--prompt both give the "
						"prompt: give one\n");
					return 2;
				}
				g->prompt = argv[optind++];
			}
			break;
		case O_MAX_NEW:
			if (parse_ll("--max-new-tokens", optarg, 0, 1 << 24,
				     &g->max_new))
				return 2;
			break;
		case O_TEMP:
			if (parse_d("--temperature", optarg, 0, 1e4,
				    &g->temperature))
				return 2;
			break;
		case O_TOPK:
			if (parse_ll("--top-k", optarg, 0, 1 << 30, &g->top_k))
				return 2;
			break;
		case O_TOPP:
			if (parse_d("--top-p", optarg, 1e-9, 1, &g->top_p))
				return 2;
			break;
		case O_SEED:
			if (parse_ll("--seed", optarg, 0, INT64_MAX, &v))
				return 2;
			g->seed = (uint64_t)v;
			g->have_seed = true;
			break;
		case O_GREEDY:
			g->greedy = true;
			break;
		case O_TOK:
			g->tokenizer = optarg;
			break;
		case O_PATH:
			g->plugin_path = optarg;
			break;
		case O_ADAPTER:
			g->adapter = optarg;
			break;
		case O_PROMPTS:
			g->prompts = optarg;
			break;
		case O_MODEL:
			g->model = optarg;
			break;
		case O_DEVICE:
			g->device = optarg;
			break;
		case O_PRECISION:
			g->precision = optarg;
			break;
		case O_CHAT:
			g->chat = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mgrun generate: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	if ((g->device || g->precision) && !g->model) {
		fprintf(stderr, "mgrun generate: --device and --precision go "
				"with --model (a run's INI sets them: --set "
				"run.device=...)\n");
		return 2;
	}
	if (g->chat && (g->ids_mode || g->prompts)) {
		fprintf(stderr, "mgrun generate: --chat renders a text "
				"prompt of messages: not with --ids or "
				"--prompts\n");
		return 2;
	}
	if (!g->ini && !g->model) {
		fprintf(stderr, "mgrun generate: no experiment file (-c "
				"FILE) or model folder (--model DIR)\n");
		usage(stderr);
		return 2;
	}
	if (!!g->prompt + !!g->prompt_file + !!g->prompts != 1) {
		fprintf(stderr, "mgrun generate: give the prompt with one of "
				"--prompt TEXT, --prompt-file F or --prompts "
				"FILE\n");
		return 2;
	}
	if (g->temperature == 0)
		g->greedy = true;
	return 0;
}

int gen_parse_ids(const char *what, const char *s, struct mg_ids *out)
{
	while (*s) {
		if (isspace((unsigned char)*s) || *s == ',') {
			s++;
			continue;
		}
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (end == s || errno || v < 0 || v > INT32_MAX) {
			fprintf(stderr,
				"mgrun generate: %s: '%.20s' is not a token "
				"id\n",
				what, s);
			return -1;
		}
		if (out->n == out->cap) {
			int64_t cap = out->cap ? out->cap * 2 : 64;
			int32_t *nv = realloc(out->v, (size_t)cap * sizeof *nv);
			if (!nv)
				return -1;
			out->v = nv;
			out->cap = cap;
		}
		out->v[out->n++] = (int32_t)v;
		s = end;
	}
	return 0;
}

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * Sampling. Greedy: the largest logit (the lowest id on a tie).
 * Otherwise logits / temperature -> softmax, the top_k likeliest (0:
 * all), of those the smallest prefix whose probability reaches top_p,
 * renormalised; one uniform draw mg_rng_uniform(key, step) picks, so
 * (seed, step) fixes the token.
 */

static int cand_cmp(const void *a, const void *b)
{
	const struct gen_cand *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Keep the k best of c[0..V) in c[0..k) (unordered): a min-heap of the
 * k best seen so far, O(V log k), instead of sorting the vocabulary. */
static void heap_down(struct gen_cand *h, int64_t k, int64_t i)
{
	for (;;) {
		int64_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < k && cand_cmp(&h[l], &h[m]) > 0)
			m = l;
		if (r < k && cand_cmp(&h[r], &h[m]) > 0)
			m = r;
		if (m == i)
			return;
		struct gen_cand tmp = h[i];
		h[i] = h[m];
		h[m] = tmp;
		i = m;
	}
}

static void keep_best(struct gen_cand *c, int64_t V, int64_t k)
{
	/* heap order: the worst kept candidate at the root */
	for (int64_t i = k / 2 - 1; i >= 0; i--)
		heap_down(c, k, i);
	for (int64_t i = k; i < V; i++)
		if (cand_cmp(&c[i], &c[0]) < 0) {
			c[0] = c[i];
			heap_down(c, k, 0);
		}
}

static int32_t sample(const float *z, int64_t V, const struct gen_opts *g,
		      uint64_t key, uint64_t step, struct gen_cand *c)
{
	int64_t best = 0;
	for (int64_t i = 1; i < V; i++)
		if (z[i] > z[best])
			best = i;
	if (g->greedy)
		return (int32_t)best;
	const double m = z[best];
	double sum = 0;
	for (int64_t i = 0; i < V; i++) {
		c[i].p = exp(((double)z[i] - m) / g->temperature);
		c[i].id = (int32_t)i;
		sum += c[i].p;
	}
	int64_t k = g->top_k > 0 && g->top_k < V ? g->top_k : V;
	if (k < V)
		keep_best(c, V, k);
	qsort(c, (size_t)k, sizeof *c, cand_cmp);
	double keep = 0;
	int64_t n = 0;
	while (n < k) {
		keep += c[n].p;
		n++;
		if (keep >= g->top_p * sum)
			break;
	}
	double u = mg_rng_uniform(key, step) * keep, acc = 0;
	for (int64_t i = 0; i < n; i++) {
		acc += c[i].p;
		if (u < acc)
			return c[i].id;
	}
	return c[n - 1].id;
}

/* Bytes of s that make whole UTF-8 characters: a trailing incomplete
 * sequence, or a trailing U+FFFD (a byte-fallback token waiting for the
 * rest of its character), is held back until more tokens arrive. */
static size_t complete_prefix(const char *s, size_t n)
{
	if (n >= 3 && (unsigned char)s[n - 3] == 0xEF &&
	    (unsigned char)s[n - 2] == 0xBF && (unsigned char)s[n - 1] == 0xBD)
		return n - 3;
	size_t i = n, back = 0;
	while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
		i--;
		back++;
	}
	if (i == 0)
		return n;
	unsigned char lead = (unsigned char)s[i - 1];
	size_t need = lead >= 0xF0   ? 4
		      : lead >= 0xE0 ? 3
		      : lead >= 0xC0 ? 2
				     : 1;
	return back + 1 < need ? i - 1 : n;
}

/* Streams the decoded text: decode the whole id list, print what is new
 * since last time (as whole characters). */
struct streamer {
	const struct mg_tokenizer *tok;
	size_t printed; /* bytes of the decoded text already out */
};

static int stream_text(struct streamer *st, const struct mg_ids *all,
		       bool final)
{
	char *text = NULL;
	size_t len = 0;
	if (mg_tokenizer_decode(st->tok, all->v, all->n, MG_TOK_SKIP_SPECIAL,
				&text, &len)) {
		fprintf(stderr, "mgrun generate: decoding the text: %s\n",
			mg_last_error());
		return -1;
	}
	size_t upto = final ? len : complete_prefix(text, len);
	if (upto > st->printed) {
		fwrite(text + st->printed, 1, upto - st->printed, stdout);
		fflush(stdout);
		st->printed = upto;
	}
	free(text);
	return 0;
}

/* Point stdout at stderr while the run is set up (plugins log progress
 * to stdout), so that stdout carries only the generated text. Returns the
 * saved descriptor, or -1. */
int mg_cli_stdout_to_stderr(void)
{
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	if (saved >= 0)
		dup2(STDERR_FILENO, STDOUT_FILENO);
	return saved;
}

void mg_cli_stdout_restore(int saved)
{
	if (saved < 0)
		return;
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
}

/* The run and its model, loaded; tokenizer and prompt ready. */

/* One process only: a launcher's rank variables or run.gpus > 1 are
 * refused (exit 2, the reason on stderr under cmd's name). */
int mg_cli_single_process(const struct mg_session *s, const char *cmd)
{
	struct mg_dist_env e;
	if (mg_dist_env_detect(&e)) {
		fprintf(stderr, "mgrun %s: %s\n", cmd, mg_last_error());
		return 2;
	}
	const int64_t gpus = mg_opt_int(s->run, "gpus");
	if (e.world > 1 || gpus > 1) {
		fprintf(stderr,
			"mgrun %s: runs in one process on one device, "
			"but %s (%s %d); run it without a launcher with --set "
			"run.gpus=1\n",
			cmd,
			e.world > 1 ? "this is a rank of a multi-process job"
				    : "run.gpus asks for several",
			e.world > 1 ? "world" : "run.gpus",
			e.world > 1 ? e.world : (int)gpus);
		return 2;
	}
	return 0;
}

/* The model must implement decode (ABI 1.4). */
static int check_decode(struct gen *g)
{
	const struct mg_loaded_plugin *lp = &g->s.plugin[MG_SEC_MODEL];
	const struct mg_model_ops *ops = &lp->ops.model;
	if (!ops->decode) {
		fprintf(stderr,
			"mgrun generate: model plugin '%s' (%s, ABI %u.%u) "
			"has no decode op (ABI 1.4 model op decode), so it "
			"cannot generate\n",
			lp->desc->name, lp->path, lp->desc->abi_major,
			lp->desc->abi_minor);
		return 2;
	}
	return 0;
}

/* --tokenizer, else the dataset's tokenizer option, else the model's
 * hf_dir when it holds a tokenizer.json; NULL when none. */
static const char *tokenizer_path(struct gen *g, char *buf, size_t len)
{
	if (g->o.tokenizer)
		return g->o.tokenizer;
	const char *d =
		mg_session_plugin_str(&g->s, MG_SEC_DATASET, "tokenizer");
	if (d[0])
		return d;
	const char *hf = mg_session_plugin_str(&g->s, MG_SEC_MODEL, "hf_dir");
	if (hf[0]) {
		snprintf(buf, len, "%s/tokenizer.json", hf);
		if (is_file(buf))
			return hf;
	}
	return NULL;
}

static int load_prompt(struct gen *g)
{
	const char *text = g->o.prompt;
	char *file = NULL;
	size_t len = text ? strlen(text) : 0;
	if (g->o.prompt_file) {
		file = mg_cli_read_all("generate", g->o.prompt_file,
				       MG_CLI_PROMPTS_MAX, &len);
		if (!file)
			return 2;
		text = file;
	}
	int rc = 0;
	const char *nul = memchr(text, 0, len);
	if (g->o.ids_mode && nul) {
		/* the ids are parsed as a C string: those past it lost */
		fprintf(stderr,
			"mgrun generate: %s: a NUL byte at byte offset %zu "
			"would cut the ids there\n",
			g->o.prompt_file, (size_t)(nul - text));
		rc = 2;
	} else if (g->o.ids_mode) {
		rc = gen_parse_ids("--ids", text, &g->ids) ? 2 : 0;
	} else if (g->o.chat) {
		rc = gen_chat_prompt(g->tok, text, len, &g->ids);
	} else if (mg_tokenizer_encode(g->tok, text, len, MG_TOK_ADD_SPECIAL,
				       &g->ids)) {
		fprintf(stderr, "mgrun generate: the prompt: %s\n",
			mg_last_error());
		rc = 2;
	}
	free(file);
	if (!rc && g->ids.n == 0) {
		fprintf(stderr, "mgrun generate: the prompt has no tokens\n");
		rc = 2;
	}
	return rc;
}

/* Text mode: the tokenizer is needed. --ids: only when --tokenizer is
 * given, for its end-of-text tokens. --prompts: the one text mode would
 * find, when there is one. */
static int load_tokenizer(struct gen *g)
{
	char buf[4200];
	const char *path = g->o.ids_mode ? g->o.tokenizer
					 : tokenizer_path(g, buf, sizeof buf);
	if (!path) {
		/* --prompts: needed only by text prompts (said at their
		 * line) and for the completions' text */
		if (g->o.ids_mode || g->o.prompts)
			return 0;
		fprintf(stderr,
			"mgrun generate: no tokenizer: give --tokenizer PATH "
			"(the dataset has no tokenizer option and the model "
			"no hf_dir with a tokenizer.json), or prompt with "
			"token ids (--ids)\n");
		return 2;
	}
	g->tok = mg_tokenizer_load(path);
	if (!g->tok) {
		fprintf(stderr, "mgrun generate: tokenizer %s: %s\n", path,
			mg_last_error());
		return 2;
	}
	struct mg_tokenizer_specials sp;
	mg_tokenizer_specials(g->tok, &sp);
	if (sp.eos >= 0)
		g->stop[g->nstop++] = sp.eos;
	int32_t eot = mg_tokenizer_token_id(g->tok, "<|eot_id|>");
	if (eot >= 0 && eot != sp.eos)
		g->stop[g->nstop++] = eot;
	fprintf(stderr, "generate: tokenizer %s (%lld tokens)\n", path,
		(long long)mg_tokenizer_vocab_size(g->tok));
	return 0;
}

/* The model's own stop tokens (generation_config.json), with or
 * without a tokenizer. */
static int model_stops(struct gen *g)
{
	const char *hf = mg_session_plugin_str(&g->s, MG_SEC_MODEL, "hf_dir");
	return hf[0] ? gen_stops_from_config(
			       hf, g->stop, &g->nstop,
			       (int)(sizeof g->stop / sizeof *g->stop))
		     : 0;
}

/* Set the run up and load its weights; says which weights. */
static int open_model(struct gen *g)
{
	char ckpt[4200];
	const int saved = mg_cli_stdout_to_stderr();
	int rc = mg_inference_open(&g->s, &g->t, ckpt, sizeof ckpt,
				   !g->o.adapter);
	mg_cli_stdout_restore(saved);
	if (rc) {
		fprintf(stderr, "mgrun generate: %s%s%s%s\n",
			g->o.adapter ? "--adapter " : "",
			g->o.adapter ? g->o.adapter : "",
			g->o.adapter ? ": " : "", mg_last_error());
		return 1;
	}
	const char *hf = mg_session_plugin_str(&g->s, MG_SEC_MODEL, "hf_dir");
	if (g->o.adapter) {
		fprintf(stderr,
			"generate: adapter %s (%s) on %s%s; the run's "
			"checkpoint is not read\n",
			g->o.adapter, g->adapter.desc,
			hf[0] ? "the weights of hf_dir "
			      : "the run's seeded "
				"initial weights",
			hf);
	} else if (ckpt[0]) {
		fprintf(stderr,
			"generate: weights from the run's checkpoint "
			"%s\n",
			ckpt);
	} else if (hf[0]) {
		fprintf(stderr,
			"generate: no checkpoint in %s: the model's own "
			"weights (hf_dir %s)\n",
			g->t->run_dir, hf);
	} else {
		fprintf(stderr,
			"mgrun generate: no checkpoint "
			"%s/checkpoint.safetensors "
			"and model '%s' has no weights of its own (hf_dir): "
			"train the run first (mgrun -c %s)\n",
			g->t->run_dir, g->s.plugin[MG_SEC_MODEL].desc->name,
			g->o.ini);
		return 1;
	}
	return 0;
}

static bool is_stop(const struct gen *g, int32_t id)
{
	for (int i = 0; i < g->nstop; i++)
		if (g->stop[i] == id)
			return true;
	return false;
}

int gen_setup(struct gen *g)
{
	struct mg_run *t = g->t;
	const uint64_t seed = g->o.have_seed ? g->o.seed : t->ctx.seed;
	g->key = mg_rng_key(seed, 0x67656e65726174ull);
	if (!g->o.greedy)
		fprintf(stderr, "generate: seed %llu\n",
			(unsigned long long)seed);
	/* The embedding's rows bound the ids; the logits are as many. */
	g->vocab = t->spec.nunits > 0 ? t->spec.params[0].shape[0] : 0;
	if (g->vocab <= 0 || t->spec.params[0].ndim != 2) {
		fprintf(stderr,
			"mgrun generate: cannot tell the vocabulary of model "
			"'%s' from its first parameter\n",
			g->s.plugin[MG_SEC_MODEL].desc->name);
		return 1;
	}
	if (g->tok && mg_tokenizer_vocab_size(g->tok) != g->vocab)
		fprintf(stderr,
			"generate: warning: the tokenizer has %lld tokens, the "
			"model %lld (is it the model's tokenizer?)\n",
			(long long)mg_tokenizer_vocab_size(g->tok),
			(long long)g->vocab);
	g->z = malloc((size_t)g->vocab * sizeof *g->z);
	g->cand = malloc((size_t)g->vocab * sizeof *g->cand);
	if (!g->z || !g->cand) {
		fprintf(stderr, "mgrun generate: out of memory\n");
		return 1;
	}
	return 0;
}

int gen_continue(struct gen *g, struct mg_ids *ids, uint64_t key, bool stream,
		 struct gen_done *d)
{
	struct mg_run *t = g->t;
	const struct mg_model_ops *ops = t->model;
	void *model = t->inst[MG_SEC_MODEL];
	const int64_t n0 = ids->n, max_len = n0 + g->o.max_new, V = g->vocab;
	const bool text_out = stream && !g->o.ids_mode;
	struct streamer st = {g->tok, 0};
	int rc = 0;
	memset(d, 0, sizeof *d);
	d->why = "max-new-tokens";
	const double t0 = mg_now();
	/* position 0: a new sequence (the model restarts its cache) */
	if (ops->decode(model, &t->ctx, ids->v, n0, 0, max_len, g->z)) {
		fprintf(stderr,
			"mgrun generate: prefill of the %lld-token "
			"prompt: %s\n",
			(long long)n0, mg_last_error());
		rc = 1;
	}
	if (!rc && text_out) {
		/* what the prompt decodes to is not printed */
		char *text = NULL;
		size_t len = 0;
		if (mg_tokenizer_decode(g->tok, ids->v, n0, MG_TOK_SKIP_SPECIAL,
					&text, &len)) {
			fprintf(stderr, "mgrun generate: the prompt: %s\n",
				mg_last_error());
			rc = 1;
		}
		st.printed = complete_prefix(text ? text : "", len);
		free(text);
	}
	const double t1 = mg_now();
	while (!rc && d->made < g->o.max_new) {
		/* NaN or infinite weights (or adapters) make NaN logits, which
		 * every comparison in sample() passes over: it would print id
		 * 0 and succeed. */
		int64_t bad = 0;
		while (bad < V && isfinite(g->z[bad]))
			bad++;
		if (bad < V) {
			fprintf(stderr,
				"mgrun generate: token %lld: the model's "
				"logits are not finite (id %lld: %g); are its "
				"weights or adapter NaN or infinite?\n",
				(long long)d->made + 1, (long long)bad,
				(double)g->z[bad]);
			rc = 1;
			break;
		}
		const int32_t id =
			sample(g->z, V, &g->o, key, (uint64_t)d->made, g->cand);
		if (is_stop(g, id)) {
			d->why = "end of text token";
			break;
		}
		if (gen_append(ids, id)) {
			fprintf(stderr, "mgrun generate: out of memory\n");
			rc = 1;
			break;
		}
		d->made++;
		if (text_out) {
			rc = stream_text(&st, ids, false) ? 1 : 0;
		} else if (stream) {
			printf("%s%d", d->made > 1 ? " " : "", (int)id);
			fflush(stdout);
		}
		if (!rc && d->made < g->o.max_new &&
		    ops->decode(model, &t->ctx, &ids->v[ids->n - 1], 1,
				ids->n - 1, max_len, g->z)) {
			fprintf(stderr, "mgrun generate: token %lld: %s\n",
				(long long)d->made, mg_last_error());
			rc = 1;
		}
	}
	if (text_out && !rc && stream_text(&st, ids, true))
		rc = 1;
	d->prefill_s = t1 - t0;
	d->decode_s = mg_now() - t1;
	return rc;
}

char *gen_new_text(const struct gen *g, const struct mg_ids *ids, int64_t n0)
{
	char *p = NULL, *all = NULL, *r = NULL;
	size_t plen = 0, alen = 0;
	if (mg_tokenizer_decode(g->tok, ids->v, n0, MG_TOK_SKIP_SPECIAL, &p,
				&plen) ||
	    mg_tokenizer_decode(g->tok, ids->v, ids->n, MG_TOK_SKIP_SPECIAL,
				&all, &alen)) {
		fprintf(stderr, "mgrun generate: decoding the text: %s\n",
			mg_last_error());
	} else {
		size_t from = complete_prefix(p ? p : "", plen);
		if (from > alen)
			from = alen;
		r = malloc(alen - from + 1);
		if (r) {
			memcpy(r, all + from, alen - from);
			r[alen - from] = 0;
		} else {
			fprintf(stderr, "mgrun generate: out of memory\n");
		}
	}
	free(p);
	free(all);
	return r;
}

/* One prompt (--prompt / --prompt-file), streamed to stdout. */
static int run_generation(struct gen *g)
{
	struct gen_done d;
	const int64_t n0 = g->ids.n;
	int rc = gen_continue(g, &g->ids, g->key, true, &d);
	printf("\n");
	fflush(stdout);
	if (!rc)
		fprintf(stderr,
			"generate: %lld prompt tokens in %.3f s, %lld new "
			"tokens in %.3f s (%.1f tokens/s), stopped at %s\n",
			(long long)n0, d.prefill_s, (long long)d.made,
			d.decode_s,
			d.decode_s > 0 ? (double)d.made / d.decode_s : 0.0,
			d.why);
	return rc;
}

int mg_generate_main(int argc, char **argv)
{
	struct gen g;
	memset(&g, 0, sizeof g);
	g.o.sets = calloc((size_t)argc + MG_CLI_ADAPTER_SETS + 5,
			  sizeof *g.o.sets);
	if (!g.o.sets)
		return 1;
	int rc = parse_args(argc, argv, &g.o);
	if (rc) {
		free(g.o.sets);
		return rc == 1 ? 0 : rc;
	}
	/* the adapter's values after the user's --set, so they win */
	if (g.o.adapter) {
		rc = mg_cli_adapter_read(g.o.adapter, &g.adapter);
		for (int i = 0; !rc && i < g.adapter.nsets; i++)
			g.o.sets[g.o.nsets++] = g.adapter.sets[i];
	}
	if (rc) {
		mg_cli_adapter_free(&g.adapter);
		free(g.o.sets);
		return rc;
	}
	char tmpdir[4200] = "";
	if (!rc && g.o.model)
		rc = gen_model_setup(&g.o, tmpdir, sizeof tmpdir);
	if (rc) {
		gen_model_cleanup(&g.o, tmpdir);
		mg_cli_adapter_free(&g.adapter);
		free(g.o.sets);
		return rc;
	}
	rc = mg_session_open(&g.s, g.o.ini, g.o.sets, g.o.nsets,
			     g.o.plugin_path);
	if (rc < 0) {
		fprintf(stderr, "mgrun generate: %s\n", mg_last_error());
		rc = 1;
	}
	if (!rc)
		rc = mg_cli_single_process(&g.s, "generate");
	if (!rc)
		rc = check_decode(&g);
	if (!rc)
		rc = load_tokenizer(&g);
	if (!rc)
		rc = model_stops(&g);
	if (!rc)
		rc = g.o.prompts ? gen_read_prompts(&g) : load_prompt(&g);
	if (!rc)
		rc = open_model(&g);
	if (!rc)
		rc = gen_setup(&g);
	if (!rc)
		rc = g.o.prompts ? gen_run_prompts(&g) : run_generation(&g);
	const int saved = mg_cli_stdout_to_stderr(); /* teardown's messages */
	mg_inference_close(g.t);
	mg_cli_stdout_restore(saved);
	mg_tokenizer_free(g.tok);
	free(g.ids.v);
	free(g.z);
	free(g.cand);
	gen_free_prompts(&g);
	mg_session_close(&g.s);
	mg_cli_adapter_free(&g.adapter);
	gen_model_cleanup(&g.o, tmpdir);
	free(g.o.sets);
	return rc;
}
