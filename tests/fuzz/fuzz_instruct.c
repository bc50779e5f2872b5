/*
 * fuzz_instruct.c - libFuzzer target for the instruction / chat data
 * reader (plugins/datasets/instruct and common/td_*.c): a JSON array or
 * JSON Lines file (gzipped or not) of alpaca, samsum, grammar, ShareGPT,
 * messages or preference records, read, rendered, tokenized with the
 * project's small test tokenizer (tests/text/data/sp) and cut into rows
 * by the plugin itself (fuzz_dataset.h). The first two input bytes pick
 * the options (format, template, train_on_input, truncation, packed,
 * held-out share, max_seq_len, max_prompt_len, a column map); the rest is
 * the file.
 */
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	static const char *const fmt[] = {"auto",      "alpaca",   "samsum",
					  "grammar",   "sharegpt", "messages",
					  "preference"};
	static const char *const tpl[] = {"auto", "llama3", "llama2", "chatml",
					  "none"};
	const unsigned a = data[0], b = data[1];
	char path[128], ini[1024];
	fuzz_write("data.jsonl", data + 2, size - 2, path, sizeof path);
	snprintf(ini, sizeof ini,
		 "[dataset]\ntrain = data.jsonl\ntokenizer = %s/sp\n"
		 "format = %s\ntemplate = %s\ntrain_on_input = %s\n"
		 "truncation = %s\npacked = %s\nval_fraction = %s\n"
		 "max_seq_len = %u\nmax_prompt_len = %u\ncolumns = %s\n"
		 "cache = false\n",
		 MG_FUZZ_DATA, fmt[a % 7], tpl[a / 7 % 5],
		 a & 0x80 ? "true" : "false", b & 1 ? "drop" : "truncate",
		 b & 2 ? "true" : "false", b & 4 ? "0.3" : "0",
		 8 + (b >> 3) * 4, b & 0x80 ? 3u : 0u,
		 a / 35 % 2 ? "instruction=question,output=answer" : "");
	fuzz_dataset_run(ini);
	return 0;
}
