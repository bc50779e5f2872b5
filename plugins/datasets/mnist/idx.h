/*
 * idx.h - reader for MNIST-style IDX files (plain or gzip-compressed).
 *
 * An IDX file is a 4-byte magic (0x00 0x00 type ndims), ndims big-endian
 * uint32 dimensions, then the elements row-major. Only type 0x08 (unsigned
 * byte) is supported, which covers MNIST, Fashion-MNIST, KMNIST and EMNIST.
 * Every failure sets mg_error() with the file name, what is wrong and,
 * where it applies, the byte offset (in the decompressed stream).
 */
#ifndef MNIST_IDX_H
#define MNIST_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 3

/* Upper bounds for a plausible file: a corrupted header must not make
 * the reader wait for, or allocate, terabytes. */
#define IDX_MAX_DIM 100000000LL	    /* any single dimension */
#define IDX_MAX_PAYLOAD (4LL << 30) /* total element bytes: 4 GiB */

struct idx_file {
	int ndim;
	int64_t dims[IDX_MAX_DIMS];
	uint8_t *data; /* dims[0] * ... * dims[ndim-1] bytes */
	size_t bytes;
};

/* Read a whole IDX file of unsigned bytes with exactly ndim dimensions
 * (images: 3, labels: 1). Returns 0, or -1 with the error set. */
int idx_read(const char *path, int ndim, struct idx_file *out);
void idx_free(struct idx_file *f);

/* One split: images [count, rows, cols] and their labels. */
struct idx_split {
	int64_t count, rows, cols;
	uint8_t *images; /* count * rows * cols */
	uint8_t *labels; /* count */
};

/*
 * Read an images file and a labels file, check that they agree on the
 * sample count and that every label is in [0, num_classes). limit > 0
 * keeps only the first limit samples (after validating all of them).
 * Returns 0, or -1 with the error set.
 */
int idx_load_split(const char *images_path, const char *labels_path,
		   int num_classes, int64_t limit, struct idx_split *out);
void idx_split_free(struct idx_split *s);

#endif
