/*
 * safetensors.h - reading and writing the safetensors format (8-byte
 * little-endian header length, a JSON header of name -> dtype, shape,
 * data_offsets, then the raw bytes). Used for checkpoints and for the
 * Hugging Face weights users already have.
 */
#ifndef MG_SAFETENSORS_H
#define MG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mg/tensor.h"

struct mg_st_entry {
	const char *name;
	enum mg_dtype dtype;
	int ndim;
	int64_t shape[MG_MAX_DIMS];
	const void *data;
	size_t bytes;
};

/* A file opened for reading (memory-mapped, validated at open). */
struct mg_st_file {
	char *path;
	void *map;
	size_t size;
	int nentries;
	struct mg_st_entry *entries;
	/* the entries sorted by name: duplicates found, names looked up, in
	 * O(n log n) */
	const struct mg_st_entry **by_name;
	int nmeta;
	char **meta_keys, **meta_vals;
};

/* Open and validate: header length, JSON, every entry's dtype, shape and
 * offsets (inside the file, matching the shape, not overlapping). Errors
 * name the file and the offset or tensor at fault. */
int mg_st_open(struct mg_st_file *f, const char *path);
const struct mg_st_entry *mg_st_find(const struct mg_st_file *f,
				     const char *name);
const char *mg_st_meta(const struct mg_st_file *f, const char *key);
void mg_st_close(struct mg_st_file *f);

/* A file being assembled for writing (tensors copied in). */
struct mg_st_writer {
	int n, cap;
	struct mg_st_entry *entries; /* data owned by the writer */
	int nmeta, capmeta;
	char **meta_keys, **meta_vals;
};

void mg_st_writer_init(struct mg_st_writer *w);
int mg_st_writer_add(struct mg_st_writer *w, const char *name, enum mg_dtype dt,
		     int ndim, const int64_t *shape, const void *data);
int mg_st_writer_meta(struct mg_st_writer *w, const char *key,
		      const char *value);
/* Write to path atomically: path.tmp, fsync, rename. */
int mg_st_writer_save(const struct mg_st_writer *w, const char *path);
void mg_st_writer_free(struct mg_st_writer *w);

#endif
