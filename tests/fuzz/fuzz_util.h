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

/* Cut data[0..size) at lines "%%" into at most max parts (the targets
 * whose input is several files); returns the number of parts, the last
 * running to the end. */
static inline int fuzz_split(const uint8_t *data, size_t size, int max,
			     const uint8_t **part, size_t *len)
{
	const uint8_t *p = data, *end = data + size;
	int n = 0;
	while (n < max - 1) {
		const uint8_t *q = p;
		while (q + 4 <= end && memcmp(q, "\n%%\n", 4))
			q++;
		if (q + 4 > end)
			break;
		part[n] = p;
		len[n++] = (size_t)(q - p);
		p = q + 4;
	}
	part[n] = p;
	len[n++] = (size_t)(end - p);
	return n;
}

#endif
