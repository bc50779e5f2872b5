/*
 * ckpt.h (engine) - the checkpoint object behind include/mg/ckpt.h.
 */
#ifndef MG_ENGINE_CKPT_H
#define MG_ENGINE_CKPT_H

#include "mg/mg.h"
#include "runtime/safetensors.h"

struct mg_ckpt {
	struct mg_ctx *ctx;
	int writing;
	struct mg_st_writer w; /* writing (rank 0) */
	struct mg_st_file f;   /* reading */
	void *scratch;	       /* host staging for device tensors */
	size_t scratch_bytes;
	bool *got; /* reading: [f.nentries], entries mg_ckpt_get took */
};

void mg_ckpt_begin_write(struct mg_ckpt *ck, struct mg_ctx *ctx);
int mg_ckpt_open_read(struct mg_ckpt *ck, struct mg_ctx *ctx, const char *path);
void mg_ckpt_free(struct mg_ckpt *ck);
/* Reading: the name of a tensor no mg_ckpt_get took, else NULL. */
const char *mg_ckpt_unread(const struct mg_ckpt *ck);

#endif
