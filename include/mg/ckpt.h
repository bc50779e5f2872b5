/*
 * ckpt.h - named-tensor checkpoint access for strategies.
 *
 * Checkpoints hold full (unsharded) tensors by name, so they load into any
 * rank count or strategy. Names: "param/<unit>.<param>" for parameters and
 * buffers, "optim/<slot>/<unit>.<param>" for optimizer state. The file is
 * safetensors; the core writes it atomically (temp file, then rename).
 */
#ifndef MG_CKPT_H
#define MG_CKPT_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_ckpt;

/* Save: add a tensor (host or device memory; copied now). Only rank 0's
 * puts are written; other ranks may call it and it does nothing. */
MG_EXPORT int mg_ckpt_put(struct mg_ckpt *ck, const char *name,
			  const struct mg_tensor *t);
/* Load: copy the named tensor into t (host or device), converting between
 * F32 and F64; its shape must equal t's. Error names the tensor. */
MG_EXPORT int mg_ckpt_get(struct mg_ckpt *ck, const char *name,
			  struct mg_tensor *t);
/* Load: does the checkpoint contain name? */
MG_EXPORT int mg_ckpt_has(struct mg_ckpt *ck, const char *name);

#ifdef __cplusplus
}
#endif
#endif
