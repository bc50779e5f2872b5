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

#ifdef __cplusplus
}
#endif
#endif
