/*
 * config.h - the experiment file: parsing (inih), --set overrides,
 * diagnostics, and validation of sections against declared option schemas.
 *
 * Private to libmg. The engine's sequence is:
 *
 *	struct mg_diag d = {0};
 *	struct mg_config *cfg = mg_config_parse_file(path, &d);
 *	for each --set ARG: mg_config_set(cfg, ARG, &d);
 *	mg_config_check_sections(cfg, known, nknown, &d);
 *	read name/path of each plugin section (mg_config_get,
 *	mg_config_resolve_path), load the plugins;
 *	opts = mg_opts_build(cfg, "strategy", schemas, n, &d); ...
 *	if (mg_diag_count(&d)) { mg_diag_print(stderr, &d); exit 2; }
 *
 * Every problem in the user's input becomes a diagnostic located at
 * file:line (or at the --set argument); nothing here prints or exits.
 * Out of memory aborts: this runs once at start-up.
 */
#ifndef MG_CONFIG_CONFIG_H
#define MG_CONFIG_CONFIG_H

#include "mg_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <mg/options.h>

/* Where a value (or section, or problem) came from. */
struct mg_loc {
	const char *file; /* INI file as given; NULL: nowhere in a file */
	int line; /* 1-based; 0: the file as a whole. For --set: which one
		     (1-based), so they are reported in the order given */
	const char *set; /* non-NULL: from `--set <set>` (file is NULL) */
};

/* ---- diagnostics ----------------------------------------------------- */

struct mg_diag_item {
	struct mg_loc loc; /* strings owned by the item */
	char *section;	   /* NULL: not about one section */
	char *key;	   /* NULL: not about one key */
	char *message;
	size_t seq; /* insertion order, to keep sorting stable */
};

/* A list of problems. Zero-initialised is empty: struct mg_diag d = {0}. */
struct mg_diag {
	struct mg_diag_item *items;
	size_t n, cap;
};

/* Add one diagnostic. loc may be NULL (no location); strings are copied. */
MG_INTERNAL void mg_diag_add(struct mg_diag *d, const struct mg_loc *loc,
			     const char *section, const char *key,
			     const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
MG_INTERNAL size_t mg_diag_count(const struct mg_diag *d);
/*
 * Print every diagnostic, one a line, as
 *	file:line: [section] key: message
 *	--set run.epochs=x: [run] epochs: message
 * ("file: ..." when the line is 0; parts that are NULL are left out).
 * Order: file diagnostics by file then line, then --set ones in the order
 * given, then those without a location; ties keep insertion order.
 */
MG_INTERNAL void mg_diag_print(FILE *f, const struct mg_diag *d);
/* Release the items; d is empty (and reusable) afterwards. */
MG_INTERNAL void mg_diag_free(struct mg_diag *d);

/*
 * The candidate closest to word by edit distance (transpositions count
 * one), when it is close enough to be a plausible typo; NULL otherwise.
 * For "did you mean" hints on keys, sections, enum values, plugin names.
 */
MG_INTERNAL const char *mg_suggest(const char *word,
				   const char *const *candidates, size_t n);

/* ---- the parsed file --------------------------------------------------- */

struct mg_config_entry {
	char *key;
	char *value; /* whitespace-trimmed; inline "; comment" removed */
	struct mg_loc loc;
};

struct mg_config_section {
	char *name;
	struct mg_loc loc; /* the [header] line, or the --set that made it */
	struct mg_config_entry **entries; /* in file order */
	size_t nentries, cap;
	/* open-addressing index of entries by key (entry index + 1, 0:
	 * free), so a file of many keys parses in linear time */
	size_t *slots, nslots;
};

/*
 * Read-only to users. Pointers to sections and entries stay valid until
 * mg_config_free; mg_config_set replaces an entry's value and location
 * in place (so take values after applying every --set).
 */
struct mg_config {
	char *path; /* the file as given; NULL for a string without a name */
	char *dir;  /* absolute folder PATH values are relative to */
	int nset;   /* --set arguments seen */
	struct mg_config_section **sections; /* in file order */
	size_t nsections, cap;
};

/*
 * Parse an INI file with inih. Problems (syntax errors: all of them, not
 * only inih's first; a duplicate key or section; a key before any section;
 * an empty key or section name; an over-long line) are added to diag and
 * the rest of the file is still parsed, so the result is usable for further
 * checks. Returns NULL only when the file cannot be read (diag says why).
 */
MG_INTERNAL struct mg_config *mg_config_parse_file(const char *path,
						   struct mg_diag *diag);
/*
 * The same for text in memory. name is used in locations (NULL: none);
 * dir is the folder relative PATH values are resolved against (NULL: the
 * current directory). Never returns NULL.
 */
MG_INTERNAL struct mg_config *mg_config_parse_string(const char *text,
						     const char *name,
						     const char *dir,
						     struct mg_diag *diag);
MG_INTERNAL void mg_config_free(struct mg_config *cfg);

/*
 * Apply a command-line override "section.key=value" (the section is what
 * precedes the first '.', the key what lies between it and the first '=';
 * the value is trimmed). Replaces the entry, or adds it (and its section),
 * located at `--set <arg>`. Returns 0, or -1 after adding a diagnostic for
 * a malformed argument. "@NAME" applies the SECTION.KEY = VALUE lines of
 * the file's section [NAME] (a sweep's [sweep.AXIS.VALUE]) as if written
 * in their sections at their lines: relative paths from the INI's folder,
 * errors at those lines.
 */
MG_INTERNAL int mg_config_set(struct mg_config *cfg, const char *arg,
			      struct mg_diag *diag);

MG_INTERNAL const struct mg_config_section *
mg_config_section(const struct mg_config *cfg, const char *section);
/* The entry for section.key, NULL when absent. */
const struct mg_config_entry *mg_config_get(const struct mg_config *cfg,
					    const char *section,
					    const char *key);
/*
 * Resolve an entry's value as a path: absolute values are returned as is;
 * relative ones are joined to the INI's folder, or to the current
 * directory for --set values. Returns a malloc'd string.
 */
char *mg_config_resolve_path(const struct mg_config *cfg,
			     const struct mg_config_entry *e);
/*
 * Add "unknown section [x] (did you mean [y]?)" for every section whose
 * name is not in known[0..n). Known names may end with patterns, after
 * the plain names: "sweep.*" admits every section named "sweep.<...>"
 * (a sweep's group sections). Returns how many were unknown.
 */
size_t mg_config_check_sections(const struct mg_config *cfg,
				const char *const *known, size_t n,
				struct mg_diag *diag);

/* ---- validation ------------------------------------------------------ */

/*
 * Validate one section against the union of schemas[0..nschemas) (NULL
 * schemas are skipped), e.g. { core_plugin_keys, plugin->options }. Adds a
 * diagnostic for every unknown key (with a suggestion), empty value, value
 * of the wrong type, value out of range, missing required key (located at
 * the section header, or the file when the section is absent), and for
 * schema bugs (a key declared twice, a default that does not validate).
 * Absent keys take their defaults; PATH values are resolved (relative to
 * the INI's folder, or the current directory for --set values) and made
 * absolute. An absent section validates as an empty one. An empty value
 * is an error for every type but STRING; a PATH default of "" means "no
 * path" and stays "". mg_opt_str() works on every type (canonical text).
 *
 * Returns the values, or NULL when this section had any problem. The
 * result does not refer to cfg or to the schemas (plugins may be unloaded
 * before it is freed).
 */
MG_INTERNAL struct mg_opts *
mg_opts_build(const struct mg_config *cfg, const char *section,
	      const struct mg_option *const *schemas, size_t nschemas,
	      struct mg_diag *diag);
MG_INTERNAL void mg_opts_free(struct mg_opts *o);

const char *mg_opts_section(const struct mg_opts *o);
/* The section's values in schema order, for whoever must see them all
 * (the checkpoint's fingerprint of the experiment): the count (0 for
 * NULL), and value i's name, canonical text (PATH: resolved) and type. */
size_t mg_opts_count(const struct mg_opts *o);
const char *mg_opts_at(const struct mg_opts *o, size_t i, const char **text,
		       enum mg_opt_type *type);
/* Where a key's value was written; NULL when it was defaulted. Aborts for
 * an undeclared key, like the accessors. For the engine's cross-key checks:
 *	mg_diag_add(d, mg_opts_where(o, "batch"), "run", "batch", ...) */
MG_INTERNAL const struct mg_loc *mg_opts_where(const struct mg_opts *o,
					       const char *key);

/*
 * Write the effective section as INI text that parses back to the same
 * values:
 *	[run]
 *	epochs = 3          ; --set
 *	lr     = 0.1        ; default
 * (schema order; INT/FLOAT/BOOL in canonical form, PATH values absolute).
 */
void mg_opts_print(FILE *f, const struct mg_opts *o); /* NULL: nothing */

/*
 * Describe a schema for --help-plugin, one option a line in aligned
 * columns: name, type, default (or "required"), range or choices, help.
 */
MG_INTERNAL void mg_schema_print_help(FILE *f, const struct mg_option *schema);

#endif
