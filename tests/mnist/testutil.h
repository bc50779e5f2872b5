/*
 * testutil.h - tiny check macros and IDX fixture writers for the mnist
 * tests. Each test counts failures and exits non-zero when any check
 * failed; 77 means "skipped" (ctest SKIP_RETURN_CODE).
 */
#ifndef MNIST_TESTUTIL_H
#define MNIST_TESTUTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "mg/log.h"

static int t_failures, t_checks;

#define CHECK(c)                                                               \
	do {                                                                   \
		t_checks++;                                                    \
		if (!(c)) {                                                    \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #c);                                 \
			t_failures++;                                          \
		}                                                              \
	} while (0)

/* Checks that the last error contains every NULL-terminated needle. */
#define CHECK_ERR(...) check_err(__FILE__, __LINE__, __VA_ARGS__, NULL)

static inline void check_err(const char *file, int line, int rc, ...)
{
	const char *msg = mg_last_error();
	va_list ap;

	t_checks++;
	if (rc >= 0) {
		fprintf(stderr, "%s:%d: expected an error, got rc %d\n", file,
			line, rc);
		t_failures++;
		return;
	}
	va_start(ap, rc);
	for (const char *s = va_arg(ap, const char *); s;
	     s = va_arg(ap, const char *)) {
		if (!strstr(msg, s)) {
			fprintf(stderr,
				"%s:%d: error \"%s\"\n    lacks \"%s\"\n", file,
				line, msg, s);
			t_failures++;
		}
	}
	va_end(ap);
}

static inline int t_done(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, t_checks, t_failures);
	return t_failures ? 1 : 0;
}

/* Write len bytes to path, gzip-compressed when gz. Aborts on failure:
 * a fixture that cannot be written is a broken test, not a result. */
static inline void write_file(const char *path, int gz, const void *buf,
			      size_t len)
{
	if (gz) {
		gzFile g = gzopen(path, "wb");
		if (!g || (len && gzwrite(g, buf, (unsigned)len) != (int)len) ||
		    gzclose(g) != Z_OK) {
			fprintf(stderr, "cannot write %s\n", path);
			exit(2);
		}
		return;
	}
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(2);
	}
}

static inline uint8_t *read_whole(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "cannot read %s\n", path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
	if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "cannot read %s\n", path);
		exit(2);
	}
	fclose(f);
	*len = (size_t)n;
	return p;
}

/* Build an IDX image: magic 00 00 type ndim, dims big-endian, payload. */
static inline size_t idx_bytes(uint8_t *out, uint8_t type, int ndim,
			       const uint32_t *dims, const uint8_t *payload,
			       size_t payload_len)
{
	size_t o = 0;

	out[o++] = 0;
	out[o++] = 0;
	out[o++] = type;
	out[o++] = (uint8_t)ndim;
	for (int i = 0; i < ndim; i++) {
		out[o++] = (uint8_t)(dims[i] >> 24);
		out[o++] = (uint8_t)(dims[i] >> 16);
		out[o++] = (uint8_t)(dims[i] >> 8);
		out[o++] = (uint8_t)dims[i];
	}
	if (payload_len)
		memcpy(out + o, payload, payload_len);
	return o + payload_len;
}

static inline uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

#endif
