/*
 * util.c - allocation and string helpers shared by the config layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/util.h"

static void oom(size_t n)
{
	fprintf(stderr,
		"mgrun: out of memory (%zu bytes) reading the "
		"configuration\n",
		n);
	abort();
}

void *mgc_malloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		oom(n);
	return p;
}

void *mgc_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		oom(n * size);
	return p;
}

void *mgc_realloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q)
		oom(n);
	return q;
}

char *mgc_strndup(const char *s, size_t n)
{
	char *p = mgc_malloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *mgc_strdup(const char *s)
{
	return mgc_strndup(s, strlen(s));
}

char *mgc_strdup_or_null(const char *s)
{
	return s ? mgc_strdup(s) : NULL;
}

char *mgc_vasprintf(const char *fmt, va_list ap)
{
	va_list aq;
	int n;
	char *p;

	va_copy(aq, ap);
	n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0) {
		fprintf(stderr, "mgrun: bad format '%s'\n", fmt);
		abort();
	}
	p = mgc_malloc((size_t)n + 1);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	return p;
}

char *mgc_asprintf(const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	p = mgc_vasprintf(fmt, ap);
	va_end(ap);
	return p;
}
