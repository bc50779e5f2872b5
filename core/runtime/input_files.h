/*
 * input_files.h - the user files this process has read (model folder,
 * tokenizer, data), noted by the core's readers so that a checkpoint can
 * record what they held and --resume can refuse files that changed.
 */
#ifndef MG_RUNTIME_INPUT_FILES_H
#define MG_RUNTIME_INPUT_FILES_H

#include <stddef.h>

/* Note a file read successfully (its real path; duplicates once). */
void mg_input_files_note(const char *path);
/* The noted real paths, in the order first read (valid until the next
 * note). */
const char *const *mg_input_files(size_t *n);

#endif
