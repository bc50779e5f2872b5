/*
 * config.c - parse the experiment INI with inih, apply --set overrides.
 *
 * inih (libinih 55) hands its handler no line numbers and reports only the
 * first bad line, so we feed it through our own reader: inih asks for one
 * line per call and counts one line per call, which gives every key its
 * line. The reader also sees the lines inih never reports to the handler:
 * section headers (to remember where a section starts, and catch duplicate
 * ones) and lines that are neither a header, a comment nor a key = value
 * pair (every syntax error, not only the first).
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "config/config.h"
#include "config/util.h"

/* Longest line accepted, newline excluded. */
#define MAX_LINE 16384

enum line_kind {
	LINE_NONE,   /* blank, comment, header or an ignored line */
	LINE_KEYVAL, /* must reach the handler, or it is a syntax error */
};

struct parse_state {
	struct mg_config *cfg;
	struct mg_diag *diag;
	const char *text;
	size_t len, pos;
	int lineno;		       /* lines handed to inih so far */
	enum line_kind kind;	       /* of line lineno */
	bool handled;		       /* the handler saw line lineno */
	struct mg_config_section *cur; /* NULL before any header */
	bool in_bad_header; /* after a broken header: ignore its keys */
};

static struct mg_loc file_loc(const struct mg_config *cfg, int line)
{
	struct mg_loc l = {cfg->path, line, NULL};

	return l;
}

/* ---- building the structure ------------------------------------------ */

static struct mg_config_section *
section_add(struct mg_config *cfg, const char *name, struct mg_loc loc)
{
	struct mg_config_section *s = mgc_calloc(1, sizeof(*s));

	s->name = mgc_strdup(name);
	s->loc = loc;
	if (cfg->nsections == cfg->cap) {
		cfg->cap = cfg->cap ? 2 * cfg->cap : 8;
		cfg->sections = mgc_realloc(cfg->sections,
					    cfg->cap * sizeof(*cfg->sections));
	}
	cfg->sections[cfg->nsections++] = s;
	return s;
}

static size_t key_hash(const char *key)
{
	size_t h = 1469598103934665603u; /* FNV-1a */

	while (*key)
		h = (h ^ (unsigned char)*key++) * 1099511628211u;
	return h;
}

/* Put entry i into the index (slots has room). */
static void slot_put(struct mg_config_section *s, size_t i)
{
	size_t m = s->nslots - 1, j = key_hash(s->entries[i]->key) & m;

	while (s->slots[j])
		j = (j + 1) & m;
	s->slots[j] = i + 1;
}

static struct mg_config_entry *entry_add(struct mg_config_section *s,
					 const char *key, const char *value,
					 struct mg_loc loc)
{
	struct mg_config_entry *e = mgc_calloc(1, sizeof(*e));
	size_t i;

	e->key = mgc_strdup(key);
	e->value = mgc_strdup(value);
	e->loc = loc;
	if (s->nentries == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 8;
		s->entries =
			mgc_realloc(s->entries, s->cap * sizeof(*s->entries));
	}
	s->entries[s->nentries++] = e;
	if (2 * s->nentries > s->nslots) { /* at most half full */
		free(s->slots);
		s->nslots = s->nslots ? 2 * s->nslots : 32;
		s->slots = mgc_calloc(s->nslots, sizeof(*s->slots));
		for (i = 0; i < s->nentries; i++)
			slot_put(s, i);
	} else {
		slot_put(s, s->nentries - 1);
	}
	return e;
}

static struct mg_config_entry *entry_find(const struct mg_config_section *s,
					  const char *key)
{
	size_t m, j;

	if (!s->nslots)
		return NULL;
	m = s->nslots - 1;
	for (j = key_hash(key) & m; s->slots[j]; j = (j + 1) & m)
		if (strcmp(s->entries[s->slots[j] - 1]->key, key) == 0)
			return s->entries[s->slots[j] - 1];
	return NULL;
}

const struct mg_config_section *mg_config_section(const struct mg_config *cfg,
						  const char *section)
{
	size_t i;

	if (!cfg || !section)
		return NULL;
	for (i = 0; i < cfg->nsections; i++)
		if (strcmp(cfg->sections[i]->name, section) == 0)
			return cfg->sections[i];
	return NULL;
}

const struct mg_config_entry *
mg_config_get(const struct mg_config *cfg, const char *section, const char *key)
{
	const struct mg_config_section *s = mg_config_section(cfg, section);

	return s && key ? entry_find(s, key) : NULL;
}

void mg_config_free(struct mg_config *cfg)
{
	size_t i, j;

	if (!cfg)
		return;
	for (i = 0; i < cfg->nsections; i++) {
		struct mg_config_section *s = cfg->sections[i];

		for (j = 0; j < s->nentries; j++) {
			free(s->entries[j]->key);
			free(s->entries[j]->value);
			free((char *)s->entries[j]->loc.set);
			free(s->entries[j]);
		}
		free(s->entries);
		free(s->slots);
		free(s->name);
		free((char *)s->loc.set);
		free(s);
	}
	free(cfg->sections);
	free(cfg->path);
	free(cfg->dir);
	free(cfg);
}

/* ---- paths ------------------------------------------------------------- */

static char *cwd_or_dot(void)
{
	char *cwd = getcwd(NULL, 0);

	return cwd ? cwd : mgc_strdup(".");
}

/* base + "/" + rel, dropping leading "./" components of rel. */
static char *path_join(const char *base, const char *rel)
{
	size_t bl = strlen(base);

	while (rel[0] == '.' && (rel[1] == '/' || rel[1] == '\0')) {
		rel += rel[1] ? 2 : 1;
		while (*rel == '/')
			rel++;
	}
	while (bl > 1 && base[bl - 1] == '/')
		bl--;
	if (!*rel)
		return mgc_strndup(base, bl);
	return mgc_asprintf("%.*s/%s", (int)bl, base, rel);
}

static char *absolute_dir(const char *dir)
{
	char *real = realpath(dir, NULL);
	char *cwd, *r;

	if (real)
		return real;
	if (dir[0] == '/')
		return mgc_strdup(dir);
	cwd = cwd_or_dot();
	r = path_join(cwd, dir);
	free(cwd);
	return r;
}

char *mg_config_resolve_path(const struct mg_config *cfg,
			     const struct mg_config_entry *e)
{
	char *base, *r;

	if (e->value[0] == '/')
		return mgc_strdup(e->value);
	if (e->loc.set || !cfg->dir) {
		base = cwd_or_dot();
		r = path_join(base, e->value);
		free(base);
		return r;
	}
	return path_join(cfg->dir, e->value);
}

/* ---- parsing ------------------------------------------------------------ */

static const char *skip_space(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return s;
}

/* Length of s without trailing white space. */
static size_t trimmed_len(const char *s, size_t n)
{
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		n--;
	return n;
}

static void open_section(struct parse_state *st, const char *name)
{
	struct mg_config *cfg = st->cfg;
	struct mg_loc here = file_loc(cfg, st->lineno);
	struct mg_config_section *s;

	s = (struct mg_config_section *)mg_config_section(cfg, name);
	if (s)
		mg_diag_add(st->diag, &here, name, NULL,
			    "duplicate section (first at line %d)",
			    s->loc.line);
	else
		s = section_add(cfg, name, here);
	st->cur = s;
	st->in_bad_header = false;
}

/*
 * A "[...]" line, as inih reads it: the name ends at the first ']' that
 * is not inside an inline comment (';' after white space).
 */
static void header_line(struct parse_state *st, const char *start)
{
	struct mg_loc here = file_loc(st->cfg, st->lineno);
	const char *p = start + 1, *rest;
	bool was_space = false;
	char *name;
	size_t n;

	while (*p && *p != ']' && !(was_space && *p == ';')) {
		was_space = isspace((unsigned char)*p);
		p++;
	}
	if (*p != ']') {
		mg_diag_add(st->diag, &here, NULL, NULL,
			    "syntax error: section header without ']'");
		st->cur = NULL;
		st->in_bad_header = true;
		return;
	}
	start = skip_space(start + 1);
	n = trimmed_len(start, (size_t)(p - start));
	name = mgc_strndup(start, n);
	rest = skip_space(p + 1);
	if (*rest && *rest != ';' && *rest != '#')
		mg_diag_add(st->diag, &here, name[0] ? name : NULL, NULL,
			    "syntax error: unexpected text after ']'");
	if (!name[0]) {
		mg_diag_add(st->diag, &here, NULL, NULL,
			    "syntax error: empty section name");
		st->cur = NULL;
		st->in_bad_header = true;
	} else {
		open_section(st, name);
	}
	free(name);
}

/* The line inih was given last is complete: was it understood? */
static void finish_line(struct parse_state *st)
{
	struct mg_loc here = file_loc(st->cfg, st->lineno);

	if (st->kind == LINE_KEYVAL && !st->handled)
		mg_diag_add(st->diag, &here,
			    st->cur && !st->in_bad_header ? st->cur->name
							  : NULL,
			    NULL,
			    "syntax error: expected 'key = value', "
			    "'[section]' or a comment");
	st->kind = LINE_NONE;
}

static char *reader(char *buf, int num, void *stream)
{
	struct parse_state *st = stream;
	const char *s, *nl, *start;
	size_t n, avail;
	struct mg_loc here;

	finish_line(st);
	if (st->pos >= st->len)
		return NULL;
	s = st->text + st->pos;
	avail = st->len - st->pos;
	nl = memchr(s, '\n', avail);
	n = nl ? (size_t)(nl - s) : avail;
	st->pos += nl ? n + 1 : n;
	st->lineno++;
	st->handled = false;
	here = file_loc(st->cfg, st->lineno);

	if (memchr(s, '\0', n) || n + 2 > (size_t)num) {
		if (memchr(s, '\0', n))
			mg_diag_add(st->diag, &here, NULL, NULL,
				    "NUL byte in line");
		else
			mg_diag_add(st->diag, &here, NULL, NULL,
				    "line too long (over %d characters)",
				    num - 2);
		strcpy(buf, "\n"); /* keep inih's line count in step */
		return buf;
	}
	memcpy(buf, s, n);
	buf[n] = '\n';
	buf[n + 1] = '\0';

	start = skip_space(buf);
	if (!*start || *start == ';' || *start == '#')
		return buf;
	if (*start == '[')
		header_line(st, start);
	else
		st->kind = LINE_KEYVAL;
	return buf;
}

static int handler(void *user, const char *section, const char *key,
		   const char *value)
{
	struct parse_state *st = user;
	struct mg_loc here = file_loc(st->cfg, st->lineno);
	struct mg_config_entry *first;

	(void)section; /* inih's copy is truncated; st->cur is ours */
	st->handled = true;
	if (st->in_bad_header)
		return 1;
	if (!*key) {
		mg_diag_add(st->diag, &here, st->cur ? st->cur->name : NULL,
			    NULL, "syntax error: no key before '='");
		return 1;
	}
	if (!st->cur) {
		mg_diag_add(st->diag, &here, NULL, key,
			    "key outside any section (put it under a "
			    "[section] header)");
		return 1;
	}
	first = entry_find(st->cur, key);
	if (first) {
		mg_diag_add(st->diag, &here, st->cur->name, key,
			    "duplicate key (first set at line %d)",
			    first->loc.line);
		return 1;
	}
	entry_add(st->cur, key, value, here);
	return 1;
}

/* Run inih with the options this file format is defined by, whatever the
 * process had set them to. */
static int run_inih(struct parse_state *st)
{
	static char start_prefixes[] = ";#";
	static char inline_prefixes[] = ";";
	bool multiline = ini_allow_multiline, bom = ini_allow_bom;
	bool inl = ini_allow_inline_comments, stack = ini_use_stack;
	bool novalue = ini_allow_no_value, stop = ini_stop_on_first_error;
	char *sp = ini_start_comment_prefixes;
	char *ip = ini_inline_comment_prefixes;
	int max_line = ini_max_line;
	int r;

	ini_allow_multiline = false; /* indented lines are ordinary lines */
	ini_allow_bom = false;	     /* stripped before */
	ini_allow_inline_comments = true;
	ini_start_comment_prefixes = start_prefixes;
	ini_inline_comment_prefixes = inline_prefixes;
	ini_use_stack = true;
	ini_max_line = MAX_LINE + 2; /* '\n' and '\0' */
	ini_allow_no_value = false;
	ini_stop_on_first_error = false;

	r = ini_parse_stream(reader, st, handler, st);

	ini_allow_multiline = multiline;
	ini_allow_bom = bom;
	ini_allow_inline_comments = inl;
	ini_start_comment_prefixes = sp;
	ini_inline_comment_prefixes = ip;
	ini_use_stack = stack;
	ini_max_line = max_line;
	ini_allow_no_value = novalue;
	ini_stop_on_first_error = stop;
	return r;
}

static bool diag_has_line(const struct mg_diag *d, const char *file, int line)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		if (d->items[i].loc.line == line && !d->items[i].loc.set &&
		    (!file || (d->items[i].loc.file &&
			       strcmp(d->items[i].loc.file, file) == 0)))
			return true;
	return false;
}

static struct mg_config *parse_text(const char *text, size_t len,
				    const char *name, char *absdir,
				    struct mg_diag *diag)
{
	struct mg_config *cfg = mgc_calloc(1, sizeof(*cfg));
	struct parse_state st = {0};
	int r;

	cfg->path = mgc_strdup_or_null(name);
	cfg->dir = absdir;
	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
		text += 3;
		len -= 3;
	}
	st.cfg = cfg;
	st.diag = diag;
	st.text = text;
	st.len = len;
	r = run_inih(&st);
	if (r == -2) {
		fprintf(stderr, "mgrun: out of memory parsing %s\n",
			name ? name : "the configuration");
		abort();
	}
	if (r > 0 && !diag_has_line(diag, cfg->path, r)) {
		/* inih saw a problem our reader did not classify */
		struct mg_loc here = file_loc(cfg, r);

		mg_diag_add(diag, &here, NULL, NULL, "syntax error");
	}
	return cfg;
}

struct mg_config *mg_config_parse_string(const char *text, const char *name,
					 const char *dir, struct mg_diag *diag)
{
	char *absdir = dir ? absolute_dir(dir) : cwd_or_dot();

	return parse_text(text, strlen(text), name, absdir, diag);
}

static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return mgc_strdup(".");
	if (slash == path)
		return mgc_strdup("/");
	return mgc_strndup(path, (size_t)(slash - path));
}

/* The largest experiment file read (a guard against /dev/zero-like
 * input; real ones are a few KiB). */
#define MG_CONFIG_MAX_BYTES (16u << 20)

/* A configuration from a pipe (-c /dev/stdin, -c <(...)) can be read
 * only once, but the sweep planner and the session both parse it: the
 * text read is kept here for the second parse of the same path. */
static struct {
	char *path, *text; /* text NULL: it was too long */
	size_t len;
} piped;

static int read_config(const char *path, char **text_out, size_t *len_out,
		       struct mg_diag *diag)
{
	struct mg_loc here = {path, 0, NULL};
	struct stat st;
	char *text = NULL;
	size_t len = 0, cap = 0, got;
	FILE *f;
	int err;

	if (stat(path, &st) != 0) {
		mg_diag_add(diag, &here, NULL, NULL, "cannot open: %s",
			    strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
		if (S_ISDIR(st.st_mode))
			mg_diag_add(diag, &here, NULL, NULL, "cannot read: %s",
				    strerror(EISDIR));
		else
			mg_diag_add(diag, &here, NULL, NULL,
				    "not a regular file or a pipe");
		return -1;
	}
	if (S_ISFIFO(st.st_mode) && piped.path && !strcmp(piped.path, path)) {
		if (!piped.text) {
			mg_diag_add(diag, &here, NULL, NULL,
				    "more than %u MiB, more than an "
				    "experiment file may have",
				    MG_CONFIG_MAX_BYTES >> 20);
			return -1;
		}
		text = mgc_realloc(NULL, piped.len + 1);
		memcpy(text, piped.text, piped.len + 1);
		*text_out = text;
		*len_out = piped.len;
		return 0;
	}
	if (S_ISREG(st.st_mode) && st.st_size > (off_t)MG_CONFIG_MAX_BYTES) {
		mg_diag_add(diag, &here, NULL, NULL,
			    "%lld bytes, more than an experiment file may "
			    "have (%u MiB)",
			    (long long)st.st_size, MG_CONFIG_MAX_BYTES >> 20);
		return -1;
	}
	f = fopen(path, "rb");
	if (!f) {
		mg_diag_add(diag, &here, NULL, NULL, "cannot open: %s",
			    strerror(errno));
		return -1;
	}
	do {
		if (cap - len < 4096) {
			cap = cap ? 2 * cap : 8192;
			text = mgc_realloc(text, cap);
		}
		got = fread(text + len, 1, cap - len - 1, f);
		len += got;
	} while (got > 0 && len <= MG_CONFIG_MAX_BYTES);
	err = ferror(f) ? errno : 0;
	fclose(f);
	if (S_ISFIFO(st.st_mode) && !err) {
		free(piped.path);
		free(piped.text);
		piped.path = mgc_strdup(path);
		piped.text = NULL;
		piped.len = 0;
		if (len <= MG_CONFIG_MAX_BYTES) {
			piped.text = mgc_realloc(NULL, len + 1);
			memcpy(piped.text, text, len);
			piped.text[len] = '\0';
			piped.len = len;
		}
	}
	if (err || len > MG_CONFIG_MAX_BYTES) {
		if (err)
			mg_diag_add(diag, &here, NULL, NULL, "cannot read: %s",
				    strerror(err));
		else
			mg_diag_add(diag, &here, NULL, NULL,
				    "more than %u MiB, more than an "
				    "experiment file may have",
				    MG_CONFIG_MAX_BYTES >> 20);
		free(text);
		return -1;
	}
	text[len] = '\0';
	*text_out = text;
	*len_out = len;
	return 0;
}

struct mg_config *mg_config_parse_file(const char *path, struct mg_diag *diag)
{
	struct mg_config *cfg;
	char *text = NULL, *dir;
	size_t len = 0;

	if (read_config(path, &text, &len, diag))
		return NULL;
	dir = dir_of(path);
	cfg = parse_text(text, len, path, absolute_dir(dir), diag);
	free(dir);
	free(text);
	return cfg;
}

/* ---- --set ----------------------------------------------------------- */

static char *trim_dup(const char *s, size_t n)
{
	while (n > 0 && isspace((unsigned char)*s)) {
		s++;
		n--;
	}
	return mgc_strndup(s, trimmed_len(s, n));
}

/* "@NAME": the SECTION.KEY = VALUE lines of section [NAME] (a sweep's
 * group section) applied as if each were written in its own section at
 * its own line, so a relative path is the INI folder's and an error
 * names that line. */
static int apply_section(struct mg_config *cfg, const char *name,
			 struct mg_loc where, struct mg_diag *diag)
{
	const struct mg_config_section *g = mg_config_section(cfg, name);
	int r = 0;
	if (!g) {
		mg_diag_add(diag, &where, NULL, NULL,
			    "no section [%s] in the file", name);
		return -1;
	}
	for (size_t i = 0; i < g->nentries; i++) {
		const struct mg_config_entry *e = g->entries[i];
		const char *dot = strchr(e->key, '.');
		if (!dot || dot == e->key || !dot[1]) {
			mg_diag_add(diag, &e->loc, name, e->key,
				    "expected SECTION.KEY = VALUE");
			r = -1;
			continue;
		}
		char *section = mgc_strndup(e->key, (size_t)(dot - e->key));
		struct mg_config_section *s =
			(struct mg_config_section *)mg_config_section(cfg,
								      section);
		if (!s)
			s = section_add(cfg, section, e->loc);
		struct mg_config_entry *t = entry_find(s, dot + 1);
		if (t) {
			free(t->value);
			free((char *)t->loc.set);
			t->value = mgc_strdup(e->value);
			t->loc = e->loc;
		} else {
			entry_add(s, dot + 1, e->value, e->loc);
		}
		free(section);
	}
	return r;
}

int mg_config_set(struct mg_config *cfg, const char *arg, struct mg_diag *diag)
{
	struct mg_loc where = {NULL, ++cfg->nset, arg};
	if (arg[0] == '@')
		return apply_section(cfg, arg + 1, where, diag);
	const char *eq = strchr(arg, '='), *dot = strchr(arg, '.');
	char *section, *key, *value;
	struct mg_config_section *s;
	struct mg_config_entry *e;
	struct mg_loc loc = {NULL, cfg->nset, NULL};
	int r = 0;

	if (!eq || !dot || dot > eq) {
		mg_diag_add(diag, &where, NULL, NULL,
			    "expected section.key=value");
		return -1;
	}
	section = trim_dup(arg, (size_t)(dot - arg));
	key = trim_dup(dot + 1, (size_t)(eq - dot - 1));
	value = trim_dup(eq + 1, strlen(eq + 1));
	if (!*section || !*key) {
		mg_diag_add(diag, &where, NULL, NULL,
			    "expected section.key=value (empty %s)",
			    *section ? "key" : "section");
		r = -1;
		goto out;
	}
	s = (struct mg_config_section *)mg_config_section(cfg, section);
	if (!s) {
		loc.set = mgc_strdup(arg);
		s = section_add(cfg, section, loc);
	}
	loc.set = mgc_strdup(arg);
	e = entry_find(s, key);
	if (e) {
		free(e->value);
		free((char *)e->loc.set);
		e->value = value;
		value = NULL;
		e->loc = loc;
	} else {
		entry_add(s, key, value, loc);
	}
out:
	free(section);
	free(key);
	free(value);
	return r;
}

size_t mg_config_check_sections(const struct mg_config *cfg,
				const char *const *known, size_t n,
				struct mg_diag *diag)
{
	size_t i, j, unknown = 0;

	for (i = 0; i < cfg->nsections; i++) {
		const struct mg_config_section *s = cfg->sections[i];
		const char *hint;

		for (j = 0; j < n; j++) {
			size_t kl = strlen(known[j]);
			/* "sweep.*": any section whose name starts "sweep." */
			if (kl >= 2 && !strcmp(known[j] + kl - 2, ".*")
				    ? !strncmp(s->name, known[j], kl - 1)
				    : !strcmp(s->name, known[j]))
				break;
		}
		if (j < n)
			continue;
		unknown++;
		/* patterns are not names to suggest */
		size_t nn = 0;
		while (nn < n && !strstr(known[nn], ".*"))
			nn++;
		hint = mg_suggest(s->name, known, nn);
		if (hint)
			mg_diag_add(diag, &s->loc, s->name, NULL,
				    "unknown section (did you mean [%s]?)",
				    hint);
		else
			mg_diag_add(diag, &s->loc, s->name, NULL,
				    "unknown section");
	}
	return unknown;
}
