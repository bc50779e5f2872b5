/*
 * fuzz_text.c - libFuzzer target for plain-text corpora (plugins/datasets/
 * text): a text file (gzipped or not), split into documents at lines
 * holding only the separator, checked as UTF-8, tokenized with the
 * project's small test tokenizer (tests/text/data/sp) and cut into
 * blocks by the plugin itself (fuzz_dataset.h). The first input byte
 * picks the options (separator "%" or none, seq_len, held-out share);
 * the rest is the file.
 */
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const unsigned a = data[0];
	char path[128], ini[512];
	fuzz_write("data.txt", data + 1, size - 1, path, sizeof path);
	snprintf(ini, sizeof ini,
		 "[dataset]\nfiles = data.txt\ndir = %s\ntokenizer = %s/sp\n"
		 "separator = %s\nseq_len = %u\nval_fraction = %s\n"
		 "cache = false\n",
		 fuzz_scratch(), MG_FUZZ_DATA, a & 1 ? "%" : "",
		 2 + (a >> 1 & 31) * 2, a & 0x40 ? "0" : "0.3");
	fuzz_dataset_run(ini);
	return 0;
}
