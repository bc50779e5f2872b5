/*
 * cli_common.h - what the one-process subcommands (`mgrun generate`,
 * `mgrun export`) share: one process on one device, plugin options read
 * safely, stdout kept for the command's own output. In generate.c.
 */
#ifndef MG_CLI_COMMON_H
#define MG_CLI_COMMON_H

#include <stddef.h>

#include "engine/session.h"

/* A launcher's rank variables or run.gpus > 1 refused: 2 with the
 * reason on stderr under "mgrun CMD:", else 0. */
int mg_cli_single_process(const struct mg_session *s, const char *cmd);
/* A plugin's string/path option, or "" when it declares no such option
 * (mg_opt_* abort on an undeclared key). */
const char *mg_cli_plugin_opt(const struct mg_session *s, int sec,
			      const char *name);
/* Point stdout at stderr while the run is set up (plugins log to
 * stdout); returns the saved descriptor (or -1) for restore. */
int mg_cli_stdout_to_stderr(void);
void mg_cli_stdout_restore(int saved);
/* The whole file (or stdin for "-"), NUL-terminated; NULL after an
 * error on stderr under "mgrun CMD:". */
char *mg_cli_read_all(const char *cmd, const char *path, size_t *len);

#endif
