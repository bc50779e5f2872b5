/*
 * util.h - allocation and string helpers shared by the config layer.
 * Allocation failure aborts with a message (start-up code, tiny sizes).
 */
#ifndef MG_CONFIG_UTIL_H
#define MG_CONFIG_UTIL_H

#include "mg_internal.h"

#include <stdarg.h>
#include <stddef.h>

MG_INTERNAL void *mgc_malloc(size_t n);
MG_INTERNAL void *mgc_calloc(size_t n, size_t size);
MG_INTERNAL void *mgc_realloc(void *p, size_t n);
MG_INTERNAL char *mgc_strdup(const char *s);
MG_INTERNAL char *mgc_strdup_or_null(const char *s);
MG_INTERNAL char *mgc_strndup(const char *s, size_t n);
MG_INTERNAL char *mgc_vasprintf(const char *fmt, va_list ap)
	__attribute__((format(printf, 1, 0)));
MG_INTERNAL char *mgc_asprintf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

#endif
