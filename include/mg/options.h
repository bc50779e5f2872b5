/*
 * options.h - declared option schemas and typed access to validated values.
 *
 * Every plugin (and the core's own sections) declares its keys with type,
 * default, range and help. The core validates the INI against the schema
 * before anything runs, so accessors below never fail at run time: asking
 * for an undeclared key is a programming error and aborts with its name.
 */
#ifndef MG_OPTIONS_H
#define MG_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_opt_type {
	MG_OPT_INT = 1, /* int64, range [min, max] */
	MG_OPT_FLOAT,	/* double, range [min, max] */
	MG_OPT_BOOL,	/* true/false/yes/no/on/off/1/0 */
	MG_OPT_STRING,	/* any text */
	MG_OPT_ENUM,	/* one of choices, "a|b|c" */
	MG_OPT_PATH,	/* a file path, relative to the INI file's folder */
};

struct mg_option {
	const char *name;
	enum mg_opt_type type;
	const char *def; /* default as text; NULL means required */
	double min, max; /* for INT/FLOAT; min == max == 0 means unbounded */
	const char *choices; /* for ENUM: "full|grad_op|none|hybrid" */
	const char *help;
};

/* Schema helpers, so a table reads as a table. */
#define MG_OPT_I(n, d, lo, hi, h)                                              \
	{                                                                      \
		(n), MG_OPT_INT, (d), (lo), (hi), 0, (h)                       \
	}
#define MG_OPT_F(n, d, lo, hi, h)                                              \
	{                                                                      \
		(n), MG_OPT_FLOAT, (d), (lo), (hi), 0, (h)                     \
	}
#define MG_OPT_B(n, d, h)                                                      \
	{                                                                      \
		(n), MG_OPT_BOOL, (d), 0, 0, 0, (h)                            \
	}
#define MG_OPT_S(n, d, h)                                                      \
	{                                                                      \
		(n), MG_OPT_STRING, (d), 0, 0, 0, (h)                          \
	}
#define MG_OPT_E(n, d, c, h)                                                   \
	{                                                                      \
		(n), MG_OPT_ENUM, (d), 0, 0, (c), (h)                          \
	}
#define MG_OPT_P(n, d, h)                                                      \
	{                                                                      \
		(n), MG_OPT_PATH, (d), 0, 0, 0, (h)                            \
	}
#define MG_OPT_END                                                             \
	{                                                                      \
		0                                                              \
	}

/* Validated values of one section (opaque; owned by the core). */
struct mg_opts;

MG_EXPORT int64_t mg_opt_int(const struct mg_opts *o, const char *name);
MG_EXPORT double mg_opt_float(const struct mg_opts *o, const char *name);
MG_EXPORT bool mg_opt_bool(const struct mg_opts *o, const char *name);
/* STRING, ENUM and PATH values; PATH values come back resolved. */
MG_EXPORT const char *mg_opt_str(const struct mg_opts *o, const char *name);
/* Index of an ENUM value within its choices. */
MG_EXPORT int mg_opt_enum(const struct mg_opts *o, const char *name);
/* True when the key was written in the INI or --set (not defaulted). */
MG_EXPORT bool mg_opt_given(const struct mg_opts *o, const char *name);

#ifdef __cplusplus
}
#endif
#endif
