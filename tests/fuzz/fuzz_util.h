/*
 * fuzz_util.h - helpers shared by the libFuzzer targets: a private
 * scratch folder per process and writing the input to a file there (the
 * readers under test take paths, as mgrun gives them).
 */
#ifndef MG_FUZZ_UTIL_H
#define MG_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A folder of this process's own, made once, removed at exit. */
static char fuzz_dir[64];

static void fuzz_cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
	if (system(cmd)) {
	}
}

static const char *fuzz_scratch(void)
{
	if (!fuzz_dir[0]) {
		const char *t = getenv("TMPDIR");
		snprintf(fuzz_dir, sizeof fuzz_dir, "%s/mgfuzz.XXXXXX",
			 t && strlen(t) < 40 ? t : "/tmp");
		if (!mkdtemp(fuzz_dir))
			abort();
		atexit(fuzz_cleanup);
	}
	return fuzz_dir;
}

/* Write n bytes to fuzz_dir/name (path returned in out); data NULL:
 * remove the file instead. */
static void fuzz_write(const char *name, const uint8_t *data, size_t n,
		       char *out, size_t outsz)
{
	snprintf(out, outsz, "%s/%s", fuzz_scratch(), name);
	if (!data) {
		unlink(out);
		return;
	}
	FILE *f = fopen(out, "wb");
	if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f))
		abort();
}

#endif
