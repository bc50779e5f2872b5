/*
 * test_util.h - the failure counter, fail() and CHECK macros, and the
 * dtype element accessors that the C unit tests share (header-only).
 *
 * A test counts failures in `failures` and returns non-zero from main()
 * when any check failed. fail() prints "FAIL", then the test's context
 * when it set fail_context (a seed, the running case), then the message.
 */
#ifndef MG_TEST_UTIL_H
#define MG_TEST_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mg/mg.h"

static int failures __attribute__((unused));
/* Optional: prints the test's context after "FAIL" (e.g. " (seed 7)"). */
static void (*fail_context)(FILE *f) __attribute__((unused));

static inline void fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static inline void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL", stderr);
	if (fail_context)
		fail_context(stderr);
	fputs(": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	failures++;
}

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			fail("%s:%d: CHECK failed: %s", __FILE__, __LINE__,    \
			     #cond);                                           \
	} while (0)

/* Strings equal (both NULL counts as equal); a failure prints both. */
#define CHECK_STR(actual, expected)                                            \
	check_str(__FILE__, __LINE__, #actual, (actual), (expected))
#define CHECK_INT(actual, expected)                                            \
	check_int(__FILE__, __LINE__, #actual, (long long)(actual),            \
		  (long long)(expected))
/* text contains needle (a failure prints both). */
#define CHECK_HAS(text, needle)                                                \
	check_has(__FILE__, __LINE__, #text, (text), (needle))

static inline void check_str(const char *file, int line, const char *what,
			     const char *actual, const char *expected)
{
	if (actual && expected && strcmp(actual, expected) == 0)
		return;
	if (!actual && !expected)
		return;
	fail("%s:%d: %s\n--- expected:\n%s\n--- actual:\n%s\n---", file, line,
	     what, expected ? expected : "(null)", actual ? actual : "(null)");
}

static inline void check_int(const char *file, int line, const char *what,
			     long long actual, long long expected)
{
	if (actual == expected)
		return;
	fail("%s:%d: %s: expected %lld, got %lld", file, line, what, expected,
	     actual);
}

static inline void check_has(const char *file, int line, const char *what,
			     const char *text, const char *needle)
{
	if (text && strstr(text, needle))
		return;
	fail("%s:%d: %s lacks \"%s\"\n--- it is:\n%s\n---", file, line, what,
	     needle, text ? text : "(null)");
}

/* Element i of a host array of dtype dt, as a double (NAN: a dtype
 * these tests do not hold). */
static inline double test_get(const void *p, enum mg_dtype dt, int64_t i)
{
	switch (dt) {
	case MG_F32:
		return ((const float *)p)[i];
	case MG_F64:
		return ((const double *)p)[i];
	case MG_F16:
		return mg_half_to_float(((const uint16_t *)p)[i]);
	case MG_BF16:
		return mg_bf16_to_float(((const uint16_t *)p)[i]);
	case MG_I32:
		return ((const int32_t *)p)[i];
	case MG_U8:
		return ((const uint8_t *)p)[i];
	default:
		return __builtin_nan("");
	}
}

/* Store v as element i of a host array of dtype dt (rounded to it). */
static inline void test_put(void *p, enum mg_dtype dt, int64_t i, double v)
{
	switch (dt) {
	case MG_F32:
		((float *)p)[i] = (float)v;
		break;
	case MG_F64:
		((double *)p)[i] = v;
		break;
	case MG_F16:
		((uint16_t *)p)[i] = mg_float_to_half((float)v);
		break;
	case MG_BF16:
		((uint16_t *)p)[i] = mg_float_to_bf16((float)v);
		break;
	case MG_I32:
		((int32_t *)p)[i] = (int32_t)v;
		break;
	case MG_U8:
		((uint8_t *)p)[i] = (uint8_t)v;
		break;
	default:
		break;
	}
}

/* A test program's cases, run by name (ctest runs one a process). */
struct test_case {
	const char *name;
	void (*fn)(void);
};

/* Run the case named `which`, or every case when it is NULL; the exit
 * status: 0, 1 after failures, 2 for a name that is no case. */
static inline int test_run_cases(const char *prog,
				 const struct test_case *cases, size_t n,
				 const char *which)
{
	int ran = 0;
	for (size_t i = 0; i < n; i++) {
		if (which && strcmp(which, cases[i].name) != 0)
			continue;
		cases[i].fn();
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "%s: no case %s\n", prog, which);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%s: %d failure(s)\n", prog, failures);
	return failures ? 1 : 0;
}

#endif
