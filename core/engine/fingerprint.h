/*
 * fingerprint.h - what a checkpoint's run trained: every option that
 * changes it and the content of every file it read, recorded in the
 * checkpoint and compared on --resume, so a resume never continues a
 * different experiment unnoticed (docs/ARCHITECTURE.md, Checkpoints).
 */
#ifndef MG_ENGINE_FINGERPRINT_H
#define MG_ENGINE_FINGERPRINT_H

#include "engine/session.h"

struct mg_fingerprint {
	char *config; /* "section.key = value" lines */
	char *files;  /* "path\tsize\thash\toption" lines */
};

/* This process's fingerprint, once its plugins have read their files;
 * files under run_dir or cache_dir are the run's own, not inputs. */
int mg_fingerprint_make(struct mg_fingerprint *fp, const struct mg_session *s,
			const char *run_dir, const char *cache_dir);
void mg_fingerprint_free(struct mg_fingerprint *fp);
/* Compare the checkpoint's recorded texts (NULL: a checkpoint from
 * before they were recorded, not checked) with fp: an error naming each
 * option (old and new value) and file that differs, unless named in
 * `changed` (--resume-changed: comma-separated SECTION.KEY or file
 * paths). */
int mg_fingerprint_check(const struct mg_fingerprint *fp, const char *ckpt,
			 const char *config, const char *files,
			 const char *changed);

#endif
