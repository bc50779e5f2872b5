/*
 * tensor_file.h - reading named tensors from safetensors files (Hugging
 * Face weights, mgrun checkpoints) for plugins: memory-mapped, so a
 * loader converts straight from the file's pages and the host never
 * holds a second copy; validated when opened (header, dtypes, shapes,
 * offsets), with errors naming the file and the offset or tensor.
 */
#ifndef MG_TENSOR_FILE_H
#define MG_TENSOR_FILE_H

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
/* Copy src (host; F32, F64, F16 or BF16) into dst (host, F32 or F64, the
 * same element count), converting. */
MG_EXPORT int mg_tensor_convert_host(struct mg_tensor *dst,
				     const struct mg_tensor *src);

#ifdef __cplusplus
}
#endif
#endif
