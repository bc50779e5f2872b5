/*
 * tensor_file.h - reading named tensors from safetensors files (Hugging
 * Face weights, mgrun checkpoints) for plugins: memory-mapped, so a
 * loader converts straight from the file's pages and the host never
 * holds a second copy; validated when opened (header, dtypes, shapes,
 * offsets), with errors naming the file and the offset or tensor.
 */
#ifndef MG_TENSOR_FILE_H
#define MG_TENSOR_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_tensor_file; /* opaque */

/* Open path; NULL after mg_error() said why. */
MG_EXPORT struct mg_tensor_file *mg_tensor_file_open(const char *path);
MG_EXPORT void mg_tensor_file_close(struct mg_tensor_file *f);
MG_EXPORT const char *mg_tensor_file_path(const struct mg_tensor_file *f);
/* A host view of tensor `name` (data read-only, valid until close):
 * 1 found, 0 absent (no error set). */
MG_EXPORT int mg_tensor_file_get(const struct mg_tensor_file *f,
				 const char *name, struct mg_tensor *view);
/* The file's __metadata__ value for key, or NULL. */
MG_EXPORT const char *mg_tensor_file_meta(const struct mg_tensor_file *f,
					  const char *key);
/* Copy src (host; F32, F64, F16 or BF16) into dst (host, F32 or F64; or,
 * since ABI 1.4, F16 or BF16, rounding to nearest even: what an export
 * writes), the same element count, converting. */
MG_EXPORT int mg_tensor_convert_host(struct mg_tensor *dst,
				     const struct mg_tensor *src);

/*
 * Added in ABI 1.4: writing safetensors files, for models that save
 * their weights in another layout (llama's Hugging Face export). The
 * tensors are copied in as added, and the file written at save.
 */
struct mg_tensor_writer; /* opaque */
/* NULL after mg_error() when out of memory. */
MG_EXPORT struct mg_tensor_writer *mg_tensor_writer_new(void);
/* Add host tensor t (copied) under name; names are unique. */
MG_EXPORT int mg_tensor_writer_add(struct mg_tensor_writer *w, const char *name,
				   const struct mg_tensor *t);
/* A __metadata__ entry (HF files carry "format": "pt"). */
MG_EXPORT int mg_tensor_writer_meta(struct mg_tensor_writer *w, const char *key,
				    const char *value);
/* Write path atomically: path.tmp, fsync, rename. */
MG_EXPORT int mg_tensor_writer_save(const struct mg_tensor_writer *w,
				    const char *path);
MG_EXPORT void mg_tensor_writer_free(struct mg_tensor_writer *w);
/* mkdir -p: path and its missing parents (0755); an existing folder is
 * fine, anything else in the way is an error naming it. */
MG_EXPORT int mg_mkdir_p(const char *path);
/* Write len bytes to path atomically (path.tmp, then rename), so a
 * reader never sees half a file; errors name the file. */
MG_EXPORT int mg_file_write_atomic(const char *path, const void *data,
				   size_t len);

/*
 * Added in ABI 1.10: the whole of file path in memory, NUL-terminated
 * (the NUL not counted in *len; free() it), the one reader of user files
 * (tokenizers, configs, adapters, prompts, text data). NULL after
 * mg_error() naming the file when it cannot be opened, is not a regular
 * file (a FIFO, a device such as /dev/zero, a directory: refused without
 * blocking), holds more than max bytes, or cannot be read. Flags:
 * MG_FILE_GUNZIP gunzips a file starting with the gzip magic (at most max
 * bytes out), and a stream that is corrupt or ends before its trailer
 * (a truncated file) is an error naming the file and the offset;
 * MG_FILE_DASH_STDIN reads path "-" from standard input (a pipe too).
 */
#define MG_FILE_GUNZIP 1u
#define MG_FILE_DASH_STDIN 2u
MG_EXPORT char *mg_file_read(const char *path, size_t max, unsigned flags,
			     size_t *len);

/*
 * Added in ABI 1.6: a model's weights as transformers' save_pretrained
 * writes them, in files of at most max_shard_bytes of tensor data.
 * Tensors come in groups (an mg_tensor_writer filled as above, whose
 * tensors are moved in, in order, leaving it empty for the next group);
 * a group is never split across files (bitsandbytes' weight.absmax etc.
 * beside their weight). Groups fill a file in order while its bytes stay
 * within max_shard_bytes; a group larger than that gets a file of its
 * own. One file: DIR/STEM.safetensors; more:
 * DIR/STEM-00001-of-0000N.safetensors ... and
 * DIR/STEM.safetensors.index.json ({"metadata": {"total_size": the
 * tensors' bytes}, "weight_map": {name: file}}, keys sorted, as
 * transformers writes it). Each file is complete on disk before it
 * appears under its name (written as STEM-0000k.safetensors.part, fsync,
 * renamed once N is known; the index last); then the files of an earlier
 * export in DIR that this one does not name (STEM.safetensors,
 * STEM-*-of-*.safetensors, the index) are removed. The host holds one
 * file's tensors at most, plus the group being added.
 */
struct mg_shard_writer; /* opaque */
/* NULL after mg_error(); max_shard_bytes >= 1 (UINT64_MAX: one file). */
MG_EXPORT struct mg_shard_writer *mg_shard_writer_new(const char *dir,
						      const char *stem,
						      uint64_t max_shard_bytes);
/* A __metadata__ entry of every file ("format": "pt"). */
MG_EXPORT int mg_shard_writer_meta(struct mg_shard_writer *s, const char *key,
				   const char *value);
/* Move g's tensors in as one group (g is left empty, reusable); a file
 * whose next group would overflow it is written out first. */
MG_EXPORT int mg_shard_writer_take(struct mg_shard_writer *s,
				   struct mg_tensor_writer *g);
/* Write the last file, name them all, write the index, remove stale
 * files; returns the number of files (>= 1) or -1 after mg_error(). */
MG_EXPORT int mg_shard_writer_finish(struct mg_shard_writer *s);
/* Frees; an unfinished writer's .part files are removed. */
MG_EXPORT void mg_shard_writer_free(struct mg_shard_writer *s);

#ifdef __cplusplus
}
#endif
#endif
