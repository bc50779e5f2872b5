/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader
 * (core/runtime/safetensors.c): the input is a checkpoint file, opened
 * and validated as --resume opens it; every accepted tensor is read end
 * to end and every metadata value looked up.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "runtime/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	fuzz_write("x.safetensors", data, size, path, sizeof path);
	struct mg_st_file f;
	if (mg_st_open(&f, path))
		return 0;
	for (int i = 0; i < f.nentries; i++) {
		const struct mg_st_entry *e = &f.entries[i];
		if (!e->name || mg_st_find(&f, e->name) == NULL)
			abort();
		volatile uint8_t sum = 0;
		const uint8_t *p = e->data;
		for (size_t k = 0; k < e->bytes; k++)
			sum += p[k];
	}
	for (int i = 0; i < f.nmeta; i++) {
		const char *v = mg_st_meta(&f, f.meta_keys[i]);
		if (!v || strlen(v) != strlen(f.meta_vals[i]))
			abort();
	}
	mg_st_close(&f);
	return 0;
}
