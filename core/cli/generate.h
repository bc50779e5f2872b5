/*
 * generate.h - what `mgrun generate`'s two drivers share: one prompt
 * streamed to stdout (generate.c) and a file of prompts answered one JSON
 * line each (generate_batch.c), both over the same loaded model and the
 * same decode loop, so a prompt gets the same tokens either way.
 */
#ifndef MG_CLI_GENERATE_H
#define MG_CLI_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/cli_common.h"
#include "engine/session.h"
#include "mg/tokenizer.h"

struct gen_opts {
	const char *ini, *prompt, *prompt_file, *tokenizer, *plugin_path;
	const char *prompts; /* --prompts FILE (JSON Lines), or NULL */
	const char *adapter; /* --adapter DIR, or NULL */
	/* --model DIR: a Hugging Face folder without an INI, with --device
	 * and --precision (generate_model.c); --chat: messages prompt */
	const char *model, *device, *precision;
	bool chat;
	const char **sets;
	int nsets;
	bool ids_mode, greedy, have_seed;
	long long max_new;
	double temperature, top_p;
	long long top_k;
	uint64_t seed;
};

/* One line of --prompts: its ids (tokenized text or given ids), its line
 * and its "id" member (echoed back), or NULL. */
struct gen_prompt {
	struct mg_ids ids;
	int line;
	struct cJSON *id;
};

/* A sampling candidate (probability mass, token id). */
struct gen_cand {
	double p;
	int32_t id;
};

struct gen {
	struct gen_opts o;
	struct mg_session s;
	struct mg_run *t;
	struct mg_tokenizer *tok;
	struct mg_ids ids; /* prompt, then generated tokens appended */
	struct mg_cli_adapter adapter; /* --adapter's overrides */
	int32_t stop[16]; /* the tokenizer's EOS, <|eot_id|>, the model's */
	int nstop;
	/* the decode loop's buffers (gen_setup): V logits and candidates */
	int64_t vocab;
	float *z;
	struct gen_cand *cand;
	uint64_t key;		    /* the sampling key of the run's seed */
	struct gen_prompt *prompts; /* --prompts, read (prompts.c) */
	int nprompts;
};

/* What one continuation did. */
struct gen_done {
	int64_t made;		    /* new tokens */
	double prefill_s, decode_s; /* wall time of each part */
	const char *why;	    /* what stopped it */
};

/* generate_model.c. --model: a throwaway run folder (dir, cap bytes)
 * with its INI, the folder, device and precision as sets before the
 * user's; 0, or the exit code after a message. cleanup removes it. */
int gen_model_setup(struct gen_opts *o, char *dir, size_t cap);
void gen_model_cleanup(struct gen_opts *o, const char *dir);
/* --chat: text (a JSON list of messages or an object with "messages")
 * through the tokenizer's chat template with the generation prompt,
 * encoded as transformers encodes the rendering, into ids; 0 or 2. */
int gen_chat_prompt(struct mg_tokenizer *tok, const char *text, size_t len,
		    struct mg_ids *ids);
/* Every eos_token_id of hf_dir/generation_config.json (none: nothing)
 * added to stop[0..*n) up to cap; 0, or 2 after a message. */
int gen_stops_from_config(const char *hf_dir, int32_t *stop, int *n, int cap);

/* The vocabulary, the buffers and the sampling key; 1 after a message. */
int gen_setup(struct gen *g);
/* Continue ids (a prompt; the new tokens are appended) from position 0
 * until a stop token or --max-new-tokens, sampling with `key`; stream:
 * print the new text (or ids) to stdout as it grows. 1 after a message. */
int gen_continue(struct gen *g, struct mg_ids *ids, uint64_t key, bool stream,
		 struct gen_done *d);
/* The text the tokens ids[n0..] add after the prompt ids[0..n0), as the
 * streamed output shows it; NULL after a message. Caller frees. */
char *gen_new_text(const struct gen *g, const struct mg_ids *ids, int64_t n0);
/* id appended to ids (grown); -1 out of memory. */
int gen_append(struct mg_ids *ids, int32_t id);
/* "1 2, 3" -> ids appended to out; -1 after a message naming `what`. */
int gen_parse_ids(const char *what, const char *s, struct mg_ids *out);
/* --prompts: every line of the file read and tokenized, before the model
 * is loaded; 2 after a FILE:LINE message. */
int gen_read_prompts(struct gen *g);
/* The parser of gen_read_prompts (prompts.c): the JSON Lines of buf[0..len)
 * (NUL-terminated) into *out, *nout prompts (set even on failure: free
 * them with gen_prompts_free); text prompts need tok (NULL: an error at
 * that line). 0, or 2 after a FILE:LINE message on stderr. */
int gen_parse_prompts(const char *file, const char *buf, size_t len,
		      const struct mg_tokenizer *tok, struct gen_prompt **out,
		      int *nout);
void gen_prompts_free(struct gen_prompt *ps, int n);
/* Every prompt answered, one JSON line each (after gen_setup). */
int gen_run_prompts(struct gen *g);
void gen_free_prompts(struct gen *g);

#endif
