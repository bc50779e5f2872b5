/*
 * cli_common.h - what the one-process subcommands (`mgrun generate`,
 * `mgrun export`) share: one process on one device, plugin options read
 * safely, stdout kept for the command's own output. In generate.c.
 */
#ifndef MG_CLI_COMMON_H
#define MG_CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/session.h"

/* A launcher's rank variables or run.gpus > 1 refused: 2 with the
 * reason on stderr under "mgrun CMD:", else 0. */
int mg_cli_single_process(const struct mg_session *s, const char *cmd);
/* Point stdout at stderr while the run is set up (plugins log to
 * stdout); returns the saved descriptor (or -1) for restore. */
int mg_cli_stdout_to_stderr(void);
void mg_cli_stdout_restore(int saved);
/* The whole file (or stdin for "-"), NUL-terminated, through
 * mg_file_read (FIFOs and devices refused, at most max bytes); NULL after
 * an error on stderr under "mgrun CMD:". */
#define MG_CLI_PROMPTS_MAX (1ull << 30) /* --prompt-file, --prompts */
#define MG_CLI_COPY_MAX (1ull << 30)	/* export's tokenizer files */
char *mg_cli_read_all(const char *cmd, const char *path, size_t max,
		      size_t *len);

/* generate --adapter DIR (adapter.c): a PEFT adapter's config as the
 * model's --set overrides (lora_rank, lora_alpha, lora_targets, rslora,
 * lora_dropout, lora_adapter). */
#define MG_CLI_ADAPTER_SETS 8
struct mg_cli_adapter {
	char *sets[MG_CLI_ADAPTER_SETS];
	int nsets;
	char desc[1024]; /* "r 8, lora_alpha 16, ..." for stderr */
};
/* 0, or 2 after stderr named the file and the field it cannot honour
 * (1 when out of memory). */
int mg_cli_adapter_read(const char *dir, struct mg_cli_adapter *a);
void mg_cli_adapter_free(struct mg_cli_adapter *a);

#endif
