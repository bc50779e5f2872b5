/*
 * fuzz_token_jsonl.c - libFuzzer target for pre-tokenized JSON Lines
 * (plugins/datasets/token_jsonl): rows of input_ids with optional labels
 * and position_ids, read and cut into rows by the plugin itself
 * (fuzz_dataset.h). The first input byte picks the options (seq_len,
 * vocab_size, the same file as the test file or none); the rest is the
 * file.
 */
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const unsigned a = data[0];
	char path[128], ini[512];
	fuzz_write("data.jsonl", data + 1, size - 1, path, sizeof path);
	snprintf(ini, sizeof ini,
		 "[dataset]\ntrain = data.jsonl\n%sseq_len = %u\n"
		 "vocab_size = %u\n",
		 a & 1 ? "test = data.jsonl\n" : "", 2 + (a >> 1 & 15) * 4,
		 a & 0x20   ? 0u
		 : a & 0x40 ? 10u
			    : 1000u);
	fuzz_dataset_run(ini);
	return 0;
}
