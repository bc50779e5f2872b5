/*
 * file_read.c - mg_file_read, the one reader of whole user files
 * (tokenizer.json, configs, adapters, prompts, text data). Why one: each
 * reader used to open with fopen() and read to EOF, so a FIFO blocked
 * forever, a link to /dev/zero read until memory ran out, and a gzip file
 * cut short read as a shorter file. Here every file is opened O_NONBLOCK
 * and refused by fstat unless regular, read at most max bytes (gunzipped
 * too), and a gzip stream must end where its trailer says.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mg/log.h"
#include "mg/tensor_file.h"
#include "runtime/input_files.h"

/* Read all of fd (plain bytes) into a NUL-terminated buffer of at most
 * max bytes; hint: the expected size. */
static char *read_plain(int fd, const char *path, size_t max, size_t hint,
			size_t *len)
{
	size_t cap = (hint < max ? hint : max) + 4096, n = 0;
	char *buf = malloc(cap + 1);
	ssize_t got = 0;
	while (buf) {
		if (n == cap) {
			if (cap > max) /* grew past max */
				break;
			cap = 2 * cap > max + 1 ? max + 1 : 2 * cap;
			char *nb = realloc(buf, cap + 1);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
		}
		got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
	}
	int e = got < 0 ? errno : 0;
	if (!buf) {
		mg_error("%s: out of memory", path);
		return NULL;
	}
	if (e || n > max) {
		free(buf);
		if (e)
			mg_error("%s: %s", path, strerror(e));
		else
			mg_error("%s: more than %zu bytes, more than this "
				 "file may have",
				 path, max);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

/* Gunzip fd (gzread passes plain data through) into at most max bytes.
 * gzread reports a stream that stops before its trailer only through
 * gzerror's Z_BUF_ERROR ("unexpected end of file") after a short read,
 * and a stream cut inside its header as no data at all: both checked,
 * with gzclose's status, so a truncated file is never a shorter one. */
static char *read_gzip(int fd, const char *path, size_t max, size_t hint,
		       size_t *len)
{
	gzFile f = gzdopen(fd, "rb");
	if (!f) {
		close(fd);
		mg_error("%s: out of memory", path);
		return NULL;
	}
	gzbuffer(f, 1 << 17);
	size_t cap = (hint < max / 2 ? hint * 2 : max) + 4096, n = 0;
	char *p = malloc(cap + 1);
	int rc = p ? 0 : mg_error("%s: out of memory", path);
	while (!rc) {
		if (n == cap) {
			if (cap > max) {
				rc = mg_error("%s: more than %zu bytes "
					      "gunzipped, more than this file "
					      "may have",
					      path, max);
				break;
			}
			cap = 2 * cap > max + 1 ? max + 1 : 2 * cap;
			char *q = realloc(p, cap + 1);
			if (!q) {
				rc = mg_error("%s: out of memory", path);
				break;
			}
			p = q;
		}
		size_t want = cap - n > (1u << 30) ? (1u << 30) : cap - n;
		int k = gzread(f, p + n, (unsigned)want);
		int e = Z_OK;
		const char *m = gzerror(f, &e);
		if (k < 0 || (e != Z_OK && e != Z_BUF_ERROR)) {
			rc = mg_error("%s: corrupt gzip data near byte offset "
				      "%lld of the file (%s)",
				      path, (long long)gzoffset(f), m);
		} else if (e == Z_BUF_ERROR) {
			rc = mg_error("%s: gzip data ends early (the file is "
				      "truncated after %lld bytes, %zu bytes "
				      "gunzipped)",
				      path, (long long)gzoffset(f),
				      n + (size_t)k);
		} else if (k == 0) {
			break;
		} else {
			n += (size_t)k;
		}
	}
	int zc = gzclose(f); /* closes fd */
	if (!rc && zc != Z_OK)
		rc = mg_error("%s: %s", path,
			      zc == Z_BUF_ERROR
				      ? "gzip data ends early (the file is "
					"truncated)"
			      : zc == Z_ERRNO ? strerror(errno)
					      : "corrupt gzip data");
	if (rc) {
		free(p);
		return NULL;
	}
	p[n] = 0;
	*len = n;
	return p;
}

char *mg_file_read(const char *path, size_t max, unsigned flags, size_t *len)
{
	*len = 0;
	if ((flags & MG_FILE_DASH_STDIN) && !strcmp(path, "-"))
		return read_plain(0, "standard input", max, 0, len);
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		mg_error("%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	int e = fstat(fd, &st) ? errno : 0;
	if (e || !S_ISREG(st.st_mode)) {
		bool dir = !e && S_ISDIR(st.st_mode);
		close(fd);
		mg_error("%s: %s", path,
			 e     ? strerror(e)
			 : dir ? "a directory, not a file"
			       : "not a regular file (a FIFO or a device?), "
				 "refused");
		return NULL;
	}
	if ((uintmax_t)st.st_size > max) {
		close(fd);
		mg_error("%s: %lld bytes, more than this file may have (%zu)",
			 path, (long long)st.st_size, max);
		return NULL;
	}
	unsigned char magic[2];
	bool gz = (flags & MG_FILE_GUNZIP) && pread(fd, magic, 2, 0) == 2 &&
		  magic[0] == 0x1f && magic[1] == 0x8b;
	char *b = gz ? read_gzip(fd, path, max, (size_t)st.st_size, len)
		     : read_plain(fd, path, max, (size_t)st.st_size, len);
	if (!gz)
		close(fd);
	if (b) /* what the run read, for the checkpoint's fingerprint */
		mg_input_files_note(path);
	return b;
}
