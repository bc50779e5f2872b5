/*
 * read_all.c - mg_cli_read_all, the whole-file reader of the one-process
 * subcommands (generate's prompts and adapter config, export's tokenizer
 * files): mg_file_read with the error on stderr under "mgrun CMD:". In a
 * file of its own so the fuzz targets of those readers link it alone.
 */
#include <stdio.h>

#include "cli/cli_common.h"
#include "mg/log.h"
#include "mg/tensor_file.h"

char *mg_cli_read_all(const char *cmd, const char *path, size_t max,
		      size_t *len)
{
	char *b = mg_file_read(path, max, MG_FILE_DASH_STDIN, len);
	if (!b)
		fprintf(stderr, "mgrun %s: %s\n", cmd, mg_last_error());
	return b;
}
