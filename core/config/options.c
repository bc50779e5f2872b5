/*
 * options.c - validate a section against declared schemas, and the typed
 * accessors plugins read their validated options with (public ABI).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"
#include "config/util.h"

struct opt_val {
	char *name;
	enum mg_opt_type type;
	bool set;   /* has a value (given or defaulted) */
	bool given; /* written in the INI or --set */
	char *text; /* canonical text; PATH: resolved */
	int64_t i;
	double f;
	bool b;
	int e;		   /* ENUM: index within choices */
	struct mg_loc loc; /* when given; strings owned */
};

struct mg_opts {
	char *section;
	size_t n;
	struct opt_val *v;
};

static const char *type_name(enum mg_opt_type t)
{
	switch (t) {
	case MG_OPT_INT:
		return "int";
	case MG_OPT_FLOAT:
		return "float";
	case MG_OPT_BOOL:
		return "bool";
	case MG_OPT_STRING:
		return "string";
	case MG_OPT_ENUM:
		return "enum";
	case MG_OPT_PATH:
		return "path";
	}
	return "?";
}

static bool bounded(const struct mg_option *opt)
{
	return !(opt->min == 0 && opt->max == 0);
}

/* A bound as text: integral values without an exponent. */
static char *num_text(double x)
{
	if (x == floor(x) && fabs(x) < 1e15)
		return mgc_asprintf("%.0f", x);
	return mgc_asprintf("%g", x);
}

static char *range_text(const struct mg_option *opt)
{
	char *lo = num_text(opt->min), *hi = num_text(opt->max);
	char *r = mgc_asprintf("[%s, %s]", lo, hi);

	free(lo);
	free(hi);
	return r;
}

/* "a|b|c" -> "a, b, c" */
static char *choices_text(const char *choices)
{
	char *r = mgc_malloc(2 * strlen(choices) + 1), *p = r;

	for (; *choices; choices++) {
		if (*choices == '|') {
			*p++ = ',';
			*p++ = ' ';
		} else {
			*p++ = *choices;
		}
	}
	*p = '\0';
	return r;
}

/* Index of value in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *value)
{
	size_t vl = strlen(value);
	const char *p = choices;
	int i = 0;

	for (;;) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);

		if (n == vl && strncmp(p, value, n) == 0)
			return i;
		if (!bar)
			return -1;
		p = bar + 1;
		i++;
	}
}

static const char *suggest_choice(const char *choices, const char *value,
				  char **storage)
{
	char *copy = mgc_strdup(choices), *save = NULL, *tok;
	const char *list[64];
	size_t n = 0;
	const char *hint;

	for (tok = strtok_r(copy, "|", &save); tok && n < 64;
	     tok = strtok_r(NULL, "|", &save))
		list[n++] = tok;
	hint = mg_suggest(value, list, n);
	*storage = copy;
	return hint;
}

static const char *expected_text(enum mg_opt_type t)
{
	switch (t) {
	case MG_OPT_INT:
		return "an integer";
	case MG_OPT_FLOAT:
		return "a number";
	case MG_OPT_BOOL:
		return "true or false";
	case MG_OPT_STRING:
		return "text";
	case MG_OPT_ENUM:
		return "one of";
	case MG_OPT_PATH:
		return "a path";
	}
	return "?";
}

static char *fmt_double(double x)
{
	char buf[64];
	int prec;

	for (prec = 15; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	return mgc_strdup(buf);
}

static bool parse_bool(const char *s, bool *b)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	size_t i;

	for (i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*b = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*b = false;
			return true;
		}
	}
	return false;
}

/*
 * Parse text as opt's type into v. base: folder for relative PATH values
 * (NULL: the current directory). Returns NULL, or a malloc'd message.
 */
static char *parse_value(const struct mg_option *opt, const char *text,
			 const char *base, struct opt_val *v)
{
	char *end;

	if (!*text && opt->type != MG_OPT_STRING) {
		if (opt->type == MG_OPT_ENUM) {
			char *c = choices_text(opt->choices);
			char *m = mgc_asprintf("empty value (expected one of: "
					       "%s)",
					       c);

			free(c);
			return m;
		}
		return mgc_asprintf("empty value (expected %s)",
				    expected_text(opt->type));
	}
	switch (opt->type) {
	case MG_OPT_INT: {
		long long x;

		errno = 0;
		x = strtoll(text, &end, 10);
		if (end == text || *end ||
		    !(*text == '-' || *text == '+' ||
		      (*text >= '0' && *text <= '9')))
			return mgc_asprintf("'%s' is not an integer", text);
		if (errno == ERANGE && !bounded(opt))
			return mgc_asprintf("%s does not fit in 64 bits", text);
		if (bounded(opt) && (errno == ERANGE || (double)x < opt->min ||
				     (double)x > opt->max)) {
			char *r = range_text(opt);
			char *m =
				mgc_asprintf("%s is out of range %s", text, r);

			free(r);
			return m;
		}
		v->i = x;
		v->text = mgc_asprintf("%" PRId64, v->i);
		return NULL;
	}
	case MG_OPT_FLOAT: {
		double x;

		x = strtod(text, &end);
		/* Decimal only: strtod also reads hex ("0x10" is 16). */
		if (end == text || *end || strpbrk(text, "xXpP") ||
		    (text[0] != '-' && text[0] != '+' && text[0] != '.' &&
		     !(text[0] >= '0' && text[0] <= '9')))
			return mgc_asprintf("'%s' is not a number", text);
		if (!isfinite(x))
			return mgc_asprintf("%s is not a finite number", text);
		if (bounded(opt) && (x < opt->min || x > opt->max)) {
			char *r = range_text(opt);
			char *m =
				mgc_asprintf("%s is out of range %s", text, r);

			free(r);
			return m;
		}
		v->f = x;
		v->text = fmt_double(x);
		return NULL;
	}
	case MG_OPT_BOOL:
		if (!parse_bool(text, &v->b))
			return mgc_asprintf("'%s' is not a boolean (use "
					    "true/false, yes/no, on/off or "
					    "1/0)",
					    text);
		v->text = mgc_strdup(v->b ? "true" : "false");
		return NULL;
	case MG_OPT_STRING:
		v->text = mgc_strdup(text);
		return NULL;
	case MG_OPT_ENUM: {
		int idx = choice_index(opt->choices, text);
		char *c, *m, *storage;
		const char *hint;

		if (idx >= 0) {
			v->e = idx;
			v->text = mgc_strdup(text);
			return NULL;
		}
		c = choices_text(opt->choices);
		hint = suggest_choice(opt->choices, text, &storage);
		if (hint)
			m = mgc_asprintf("'%s' is not one of: %s (did you "
					 "mean '%s'?)",
					 text, c, hint);
		else
			m = mgc_asprintf("'%s' is not one of: %s", text, c);
		free(storage);
		free(c);
		return m;
	}
	case MG_OPT_PATH: {
		struct mg_config tmp = {0};
		struct mg_config_entry e = {0};

		tmp.dir = (char *)base;
		e.value = (char *)text;
		if (!base)
			e.loc.set = ""; /* relative to the current directory */
		v->text = mg_config_resolve_path(&tmp, &e);
		return NULL;
	}
	}
	return mgc_asprintf("option has an unknown type %d", (int)opt->type);
}

/* Problems in the schema itself (a plugin bug); NULL when fine. */
static char *schema_problem(const struct mg_option *opt)
{
	switch (opt->type) {
	case MG_OPT_INT:
	case MG_OPT_FLOAT:
		if (opt->min > opt->max)
			return mgc_strdup("schema range has min > max");
		return NULL;
	case MG_OPT_ENUM:
		if (!opt->choices || !*opt->choices)
			return mgc_strdup("schema enum has no choices");
		return NULL;
	case MG_OPT_BOOL:
	case MG_OPT_STRING:
	case MG_OPT_PATH:
		return NULL;
	}
	return mgc_asprintf("schema has an unknown type %d", (int)opt->type);
}

static void val_clear(struct opt_val *v)
{
	free(v->text);
	free((char *)v->loc.file);
	free((char *)v->loc.set);
}

void mg_opts_free(struct mg_opts *o)
{
	size_t i;

	if (!o)
		return;
	for (i = 0; i < o->n; i++) {
		free(o->v[i].name);
		val_clear(&o->v[i]);
	}
	free(o->v);
	free(o->section);
	free(o);
}

struct mg_opts *mg_opts_build(const struct mg_config *cfg, const char *section,
			      const struct mg_option *const *schemas,
			      size_t nschemas, struct mg_diag *diag)
{
	const struct mg_config_section *sec = mg_config_section(cfg, section);
	struct mg_loc file_loc = {cfg->path, 0, NULL};
	const struct mg_loc *sec_loc = &file_loc;
	size_t before = diag->n, nopt = 0, i, j;
	const struct mg_option **opts;
	const char **names;
	struct mg_opts *o;

	/* A section made by --set has no header: report at the file. */
	if (sec && !sec->loc.set)
		sec_loc = &sec->loc;

	for (i = 0; i < nschemas; i++)
		for (j = 0; schemas[i] && schemas[i][j].name; j++)
			nopt++;
	opts = mgc_calloc(nopt, sizeof(*opts));
	names = mgc_calloc(nopt, sizeof(*names));
	o = mgc_calloc(1, sizeof(*o));
	o->section = mgc_strdup(section);
	o->v = mgc_calloc(nopt, sizeof(*o->v));
	for (i = 0; i < nschemas; i++) {
		for (j = 0; schemas[i] && schemas[i][j].name; j++) {
			const struct mg_option *opt = &schemas[i][j];
			char *bad = schema_problem(opt);
			size_t k;

			for (k = 0; k < o->n; k++)
				if (strcmp(names[k], opt->name) == 0)
					break;
			if (k < o->n) {
				mg_diag_add(diag, NULL, section, opt->name,
					    "declared twice in the option "
					    "schemas (plugin bug)");
			} else if (bad) {
				mg_diag_add(diag, NULL, section, opt->name,
					    "%s (plugin bug)", bad);
			} else {
				opts[o->n] = opt;
				names[o->n] = opt->name;
				o->v[o->n].name = mgc_strdup(opt->name);
				o->v[o->n].type = opt->type;
				o->n++;
			}
			free(bad);
		}
	}

	for (i = 0; sec && i < sec->nentries; i++) {
		const struct mg_config_entry *e = sec->entries[i];
		const char *base;
		struct opt_val *v;
		char *msg;
		size_t k;

		for (k = 0; k < o->n; k++)
			if (strcmp(names[k], e->key) == 0)
				break;
		if (k == o->n) {
			const char *hint = mg_suggest(e->key, names, o->n);

			if (hint)
				mg_diag_add(diag, &e->loc, section, e->key,
					    "unknown key '%s' (did you mean "
					    "'%s'?)",
					    e->key, hint);
			else
				mg_diag_add(diag, &e->loc, section, e->key,
					    "unknown key '%s'", e->key);
			continue;
		}
		v = &o->v[k];
		base = e->loc.set ? NULL : cfg->dir;
		msg = parse_value(opts[k], e->value, base, v);
		if (msg) {
			mg_diag_add(diag, &e->loc, section, e->key, "%s", msg);
			free(msg);
			continue;
		}
		v->set = v->given = true;
		v->loc.file = mgc_strdup_or_null(e->loc.file);
		v->loc.line = e->loc.line;
		v->loc.set = mgc_strdup_or_null(e->loc.set);
	}

	for (i = 0; i < o->n; i++) {
		struct opt_val *v = &o->v[i];
		char *msg;

		if (v->given)
			continue;
		if (sec) {
			/* given but invalid: already reported */
			const struct mg_config_entry *e =
				mg_config_get(cfg, section, v->name);

			if (e)
				continue;
		}
		if (!opts[i]->def) {
			if (opts[i]->help && *opts[i]->help)
				mg_diag_add(diag, sec_loc, section, v->name,
					    "missing required key (%s: %s)",
					    type_name(v->type), opts[i]->help);
			else
				mg_diag_add(diag, sec_loc, section, v->name,
					    "missing required key (%s)",
					    type_name(v->type));
			continue;
		}
		if (v->type == MG_OPT_PATH && !*opts[i]->def) {
			v->text = mgc_strdup(""); /* no path by default */
			v->set = true;
			continue;
		}
		/* A relative default path is relative to the INI file's
		 * folder, where the files it names are (run.out_dir has an
		 * empty default for that reason: mg_run_out_dir). */
		msg = parse_value(opts[i], opts[i]->def, cfg->dir, v);
		if (msg) {
			mg_diag_add(diag, NULL, section, v->name,
				    "invalid default '%s' in the option "
				    "schema: %s (plugin bug)",
				    opts[i]->def, msg);
			free(msg);
			continue;
		}
		v->set = true;
	}
	free(opts);
	free(names);
	if (diag->n > before) {
		mg_opts_free(o);
		return NULL;
	}
	return o;
}

/* ---- accessors ------------------------------------------------------- */

static const struct opt_val *lookup(const struct mg_opts *o, const char *name,
				    const char *fn)
{
	size_t i;

	if (!o || !name) {
		fprintf(stderr, "mgrun: %s(%s): no options\n", fn,
			name ? name : "NULL");
		abort();
	}
	for (i = 0; i < o->n; i++)
		if (strcmp(o->v[i].name, name) == 0)
			return &o->v[i];
	fprintf(stderr,
		"mgrun: %s: option '%s' is not declared in the schema of "
		"[%s]\n",
		fn, name, o->section);
	abort();
}

static const struct opt_val *lookup_typed(const struct mg_opts *o,
					  const char *name,
					  enum mg_opt_type type, const char *fn)
{
	const struct opt_val *v = lookup(o, name, fn);

	if (v->type != type) {
		fprintf(stderr,
			"mgrun: %s: option '%s' of [%s] is declared %s, not "
			"%s\n",
			fn, name, o->section, type_name(v->type),
			type_name(type));
		abort();
	}
	return v;
}

MG_EXPORT int64_t mg_opt_int(const struct mg_opts *o, const char *name)
{
	return lookup_typed(o, name, MG_OPT_INT, __func__)->i;
}

MG_EXPORT double mg_opt_float(const struct mg_opts *o, const char *name)
{
	return lookup_typed(o, name, MG_OPT_FLOAT, __func__)->f;
}

MG_EXPORT bool mg_opt_bool(const struct mg_opts *o, const char *name)
{
	return lookup_typed(o, name, MG_OPT_BOOL, __func__)->b;
}

/* Any type: the canonical text (STRING, ENUM and PATH are the useful
 * ones; PATH comes back absolute). */
MG_EXPORT const char *mg_opt_str(const struct mg_opts *o, const char *name)
{
	return lookup(o, name, __func__)->text;
}

MG_EXPORT int mg_opt_enum(const struct mg_opts *o, const char *name)
{
	return lookup_typed(o, name, MG_OPT_ENUM, __func__)->e;
}

MG_EXPORT bool mg_opt_given(const struct mg_opts *o, const char *name)
{
	return lookup(o, name, __func__)->given;
}

const char *mg_opts_section(const struct mg_opts *o)
{
	return o->section;
}

size_t mg_opts_count(const struct mg_opts *o)
{
	return o ? o->n : 0;
}

const char *mg_opts_at(const struct mg_opts *o, size_t i, const char **text,
		       enum mg_opt_type *type)
{
	*text = o->v[i].text ? o->v[i].text : "";
	*type = o->v[i].type;
	return o->v[i].name;
}

const struct mg_loc *mg_opts_where(const struct mg_opts *o, const char *key)
{
	const struct opt_val *v = lookup(o, key, __func__);

	return v->given ? &v->loc : NULL;
}

/* ---- printing ---------------------------------------------------------- */

void mg_opts_print(FILE *f, const struct mg_opts *o)
{
	size_t i, kw = 0, lw = 0;

	if (!o)
		return;
	for (i = 0; i < o->n; i++)
		if (strlen(o->v[i].name) > kw)
			kw = strlen(o->v[i].name);
	/* comments line up after the longest "key = value" up to 40 wide */
	for (i = 0; i < o->n; i++) {
		size_t l = kw + 3 + strlen(o->v[i].text);

		if (l > lw && l <= 40)
			lw = l;
	}
	fprintf(f, "[%s]\n", o->section);
	for (i = 0; i < o->n; i++) {
		const struct opt_val *v = &o->v[i];
		int n;

		n = fprintf(f, "%-*s = %s", (int)kw, v->name, v->text);
		if (v->given && !v->loc.set) {
			fputc('\n', f);
			continue;
		}
		fprintf(f, "%*s ; %s\n", n < (int)lw ? (int)lw - n : 0, "",
			v->given ? "--set" : "default");
	}
}

void mg_schema_print_help(FILE *f, const struct mg_option *schema)
{
	static const char *const head[4] = {"option", "type", "default",
					    "range/choices"};
	size_t w[4], i, n = 0;
	char *(*cells)[4];

	for (i = 0; schema && schema[i].name; i++)
		n++;
	if (!n) {
		fprintf(f, "  (no options)\n");
		return;
	}
	cells = mgc_calloc(n, sizeof(*cells));
	for (i = 0; i < 4; i++)
		w[i] = strlen(head[i]);
	for (i = 0; i < n; i++) {
		const struct mg_option *opt = &schema[i];
		size_t c;

		cells[i][0] = mgc_strdup(opt->name);
		cells[i][1] = mgc_strdup(type_name(opt->type));
		if (!opt->def)
			cells[i][2] = mgc_strdup("required");
		else if (!*opt->def)
			cells[i][2] = mgc_strdup("\"\"");
		else
			cells[i][2] = mgc_strdup(opt->def);
		if ((opt->type == MG_OPT_INT || opt->type == MG_OPT_FLOAT) &&
		    bounded(opt))
			cells[i][3] = range_text(opt);
		else if (opt->type == MG_OPT_ENUM && opt->choices)
			cells[i][3] = mgc_strdup(opt->choices);
		else
			cells[i][3] = mgc_strdup("");
		for (c = 0; c < 4; c++)
			if (strlen(cells[i][c]) > w[c])
				w[c] = strlen(cells[i][c]);
	}
	fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s\n", (int)w[0], head[0],
		(int)w[1], head[1], (int)w[2], head[2], (int)w[3], head[3],
		"description");
	for (i = 0; i < n; i++) {
		const char *help = schema[i].help ? schema[i].help : "";
		size_t c;

		fprintf(f, "  %-*s  %-*s  %-*s", (int)w[0], cells[i][0],
			(int)w[1], cells[i][1], (int)w[2], cells[i][2]);
		if (*help)
			fprintf(f, "  %-*s  %s\n", (int)w[3], cells[i][3],
				help);
		else if (*cells[i][3])
			fprintf(f, "  %s\n", cells[i][3]);
		else
			fputc('\n', f);
		for (c = 0; c < 4; c++)
			free(cells[i][c]);
	}
	free(cells);
}
