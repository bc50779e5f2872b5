/*
 * fuzz_idx.c - libFuzzer target for the IDX reader
 * (plugins/datasets/mnist/idx.c): the input is one dataset file, plain or
 * gzip, read as an images file (3 dimensions) and as a labels file (1),
 * then as both halves of a split.
 */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	fuzz_write("x-idx-ubyte", data, size, path, sizeof path);
	for (int ndim = 1; ndim <= 3; ndim += 2) {
		struct idx_file f;
		if (!idx_read(path, ndim, &f)) {
			size_t want = 1;
			for (int i = 0; i < f.ndim; i++)
				want *= (size_t)f.dims[i];
			if (f.ndim != ndim || f.bytes != want)
				abort(); /* accepted, but not what was asked */
			volatile uint8_t sum = 0;
			for (size_t i = 0; i < f.bytes; i++)
				sum += f.data[i];
			idx_free(&f);
		}
	}
	struct idx_split s;
	if (!idx_load_split(path, path, 256, 2, &s))
		idx_split_free(&s);
	return 0;
}
