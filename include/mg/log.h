/*
 * log.h - logging and the thread-local "last error" that failing calls set.
 *
 * Functions that can fail return a negative value after calling mg_error()
 * with a message that names what failed and why (a file, an offset, a key).
 * The caller adds context or reports it; nobody prints and continues.
 */
#ifndef MG_LOG_H
#define MG_LOG_H

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_log_level { MG_LOG_ERROR, MG_LOG_WARN, MG_LOG_INFO, MG_LOG_DEBUG };

MG_EXPORT void mg_log(enum mg_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define mg_info(...) mg_log(MG_LOG_INFO, __VA_ARGS__)
#define mg_warn(...) mg_log(MG_LOG_WARN, __VA_ARGS__)
#define mg_debug(...) mg_log(MG_LOG_DEBUG, __VA_ARGS__)

/* Set the calling thread's last error; always returns -1 so callers can
 * write `return mg_error("...")`. */
MG_EXPORT int mg_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/* Prefix the current error with more context ("loading x: <old>"). */
MG_EXPORT int mg_error_prefix(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
MG_EXPORT const char *mg_last_error(void);
MG_EXPORT void mg_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
