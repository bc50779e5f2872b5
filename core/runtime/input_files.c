/*
 * input_files.c - the list behind input_files.h. mg_file_read and
 * mg_st_open note every file they open, so the list is what the run
 * read rather than what its options might point at (a text dataset's
 * globs, a tokenizer found inside model.hf_dir).
 */
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/input_files.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char **files;
static size_t nfiles, capfiles;

void mg_input_files_note(const char *path)
{
	char real[PATH_MAX];
	if (!realpath(path, real))
		return;
	pthread_mutex_lock(&lock);
	bool seen = false;
	for (size_t i = 0; i < nfiles && !seen; i++)
		seen = !strcmp(files[i], real);
	if (!seen && nfiles == capfiles) {
		size_t cap = capfiles ? 2 * capfiles : 16;
		char **nf = realloc(files, cap * sizeof *nf);
		if (nf) {
			files = nf;
			capfiles = cap;
		}
	}
	if (!seen && nfiles < capfiles && (files[nfiles] = strdup(real)))
		nfiles++;
	pthread_mutex_unlock(&lock);
}

const char *const *mg_input_files(size_t *n)
{
	*n = nfiles;
	return (const char *const *)files;
}
