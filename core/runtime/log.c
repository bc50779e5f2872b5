/*
 * log.c - logging with a rank prefix, and the thread-local last error.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

static enum mg_log_level log_level = MG_LOG_INFO;
static int log_rank = -1; /* -1: single rank, no prefix */
static _Thread_local char last_error[2048];

void mg_log_configure(enum mg_log_level lvl, int rank)
{
	log_level = lvl;
	log_rank = rank;
}

void mg_log(enum mg_log_level lvl, const char *fmt, ...)
{
	static const char *const tag[] = {"error: ", "warning: ", "", ""};
	if (lvl > log_level)
		return;
	char line[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	FILE *f = lvl <= MG_LOG_WARN ? stderr : stdout;
	if (log_rank >= 0)
		fprintf(f, "[rank %d] %s%s\n", log_rank, tag[lvl], line);
	else
		fprintf(f, "%s%s\n", tag[lvl], line);
	fflush(f);
}

int mg_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	va_end(ap);
	return -1;
}

int mg_error_prefix(const char *fmt, ...)
{
	char prefix[1024], old[sizeof last_error];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, last_error, sizeof old);
	snprintf(last_error, sizeof last_error, "%s: %s", prefix,
		 old[0] ? old : "unknown error");
	return -1;
}

const char *mg_last_error(void)
{
	return last_error[0] ? last_error : "unknown error";
}

void mg_clear_error(void)
{
	last_error[0] = 0;
}
