/*
 * sweep_plan.c - from the [sweep] section and the --sweep / --repeats
 * arguments to a plan: the axes, the cartesian product of their values
 * (the points), and the options that shape tables and charts.
 *
 * Pure: it reads a parsed configuration and writes diagnostics, nothing
 * else, so tests/analysis checks it without running anything.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "config/util.h"

#define MAX_RUNS 10000 /* points x repeats */

static const char *const option_names[] = {
	"repeats",	   "x",	    "series",	    "relative_to", "metric",
	"profile_metrics", "title", "test_metrics",
};
#define NOPTIONS (sizeof option_names / sizeof *option_names)

static const char *const metric_names[] = {"train_s", "wall_s", "epoch_s"};

/* Axes the sweep itself sets for every point. */
static const char *const reserved_axes[] = {"run.out_dir", "run.name"};

static char *trim_dup(const char *s, size_t n)
{
	while (n && isspace((unsigned char)*s)) {
		s++;
		n--;
	}
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	return mgc_strndup(s, n);
}

static void free_list(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/*
 * Split a value list at sep into trimmed items. An empty item is an
 * error (its 1-based position in *bad); returns the item count, or -1.
 */
static int split(const char *text, char sep, char ***out, int *bad)
{
	char **v = NULL;
	int n = 0;
	const char *s = text;
	for (;;) {
		const char *e = strchr(s, sep);
		size_t len = e ? (size_t)(e - s) : strlen(s);
		v = mgc_realloc(v, (size_t)(n + 1) * sizeof *v);
		v[n++] = trim_dup(s, len);
		if (!v[n - 1][0]) {
			*bad = n;
			free_list(v, n);
			return -1;
		}
		if (!e)
			break;
		s = e + 1;
	}
	*out = v;
	return n;
}

static bool is_number(const char *s)
{
	char *end;
	if (!*s)
		return false;
	(void)strtod(s, &end);
	return *end == 0;
}

static char *loc_text(const struct mg_loc *l)
{
	if (l->set)
		return mgc_asprintf("--set %s", l->set);
	if (l->file)
		return mgc_asprintf("%s:%d", l->file, l->line);
	return mgc_strdup("?");
}

/* "run.gpus" -> "gpus"; "strategy.name" -> "strategy". */
static char *axis_label(const char *key)
{
	const char *dot = strchr(key, '.');
	if (!strcmp(dot + 1, "name"))
		return mgc_strndup(key, (size_t)(dot - key));
	return mgc_strdup(dot + 1);
}

/* ---- group axes: NAME = V1, V2 with a section [sweep.NAME.V] each -- */

#define GROUP_PREFIX "sweep."

/* Does cfg have a section [sweep.name.VALUE]? */
static bool has_group(const struct mg_config *cfg, const char *name)
{
	size_t pl = strlen(GROUP_PREFIX), nl = strlen(name);
	for (size_t i = 0; cfg && i < cfg->nsections; i++) {
		const char *s = cfg->sections[i]->name;
		if (!strncmp(s, GROUP_PREFIX, pl) &&
		    !strncmp(s + pl, name, nl) && s[pl + nl] == '.' &&
		    s[pl + nl + 1])
			return true;
	}
	return false;
}

static void free_groups(struct mg_sweep_group *g, int n)
{
	for (int i = 0; g && i < n; i++) {
		free_list(g[i].sets, g[i].n);
		free_list(g[i].where, g[i].n);
	}
	free(g);
}

static bool reserved(const char *key)
{
	for (size_t i = 0; i < sizeof reserved_axes / sizeof *reserved_axes;
	     i++)
		if (!strcmp(key, reserved_axes[i]))
			return true;
	return false;
}

/* The entries of [sweep.name.value] into g; -1 when there is no such
 * section (problems of its entries are added to d, at their lines). */
static int read_group(const struct mg_config *cfg, const char *name,
		      const char *value, struct mg_sweep_group *g,
		      struct mg_diag *d)
{
	char *sname = mgc_asprintf(GROUP_PREFIX "%s.%s", name, value);
	const struct mg_config_section *s = mg_config_section(cfg, sname);
	memset(g, 0, sizeof *g);
	if (!s) {
		free(sname);
		return -1;
	}
	if (!s->nentries)
		mg_diag_add(d, &s->loc, sname, NULL,
			    "sets nothing: give SECTION.KEY = VALUE lines "
			    "(what the sweep value '%s' sets, as --set)",
			    value);
	g->sets = mgc_calloc(s->nentries + 1, sizeof *g->sets);
	g->where = mgc_calloc(s->nentries + 1, sizeof *g->where);
	for (size_t i = 0; i < s->nentries; i++) {
		const struct mg_config_entry *e = s->entries[i];
		const char *dot = strchr(e->key, '.');
		if (!dot || dot == e->key || !dot[1] || strchr(dot + 1, '.')) {
			mg_diag_add(
				d, &e->loc, sname, e->key,
				"expected SECTION.KEY = VALUE (like --set)");
			continue;
		}
		if (reserved(e->key)) {
			mg_diag_add(d, &e->loc, sname, e->key,
				    "cannot be set per point: the sweep sets "
				    "it for every point");
			continue;
		}
		g->sets[g->n] = mgc_asprintf("%s=%s", e->key, e->value);
		g->where[g->n++] = loc_text(&e->loc);
	}
	free(sname);
	return 0;
}

int mg_sweep_axis_nsets(const struct mg_sweep_axis *a, int v)
{
	return a->groups ? a->groups[v].n : 1;
}

char *mg_sweep_axis_set(const struct mg_sweep_axis *a, int v, int i)
{
	if (a->groups)
		return mgc_strdup(a->groups[v].sets[i]);
	return mgc_asprintf("%s=%s", a->key, a->values[v]);
}

/* Every [sweep.X.Y] section must belong to a group axis X; a key a group
 * sets must not be an axis of its own (which would win is the order of
 * the axes: say so instead). */
static void check_groups(const struct mg_sweep_plan *p,
			 const struct mg_config *cfg, struct mg_diag *d)
{
	size_t pl = strlen(GROUP_PREFIX);
	for (size_t i = 0; cfg && i < cfg->nsections; i++) {
		const struct mg_config_section *s = cfg->sections[i];
		if (strncmp(s->name, GROUP_PREFIX, pl))
			continue;
		const char *nm = s->name + pl, *dot = strchr(nm, '.');
		if (!dot || dot == nm || !dot[1]) {
			mg_diag_add(d, &s->loc, s->name, NULL,
				    "a group section is [sweep.AXIS.VALUE]");
			continue;
		}
		/* an axis of [sweep] (rejected or not: its own message
		 * says why), or of --sweep */
		const struct mg_config_section *sw =
			mg_config_section(cfg, "sweep");
		bool found = false;
		for (size_t e = 0; sw && e < sw->nentries && !found; e++)
			found = strlen(sw->entries[e]->key) ==
					(size_t)(dot - nm) &&
				!strncmp(sw->entries[e]->key, nm,
					 (size_t)(dot - nm));
		for (int a = 0; a < p->naxes && !found; a++)
			found = p->axes[a].groups &&
				strlen(p->axes[a].key) == (size_t)(dot - nm) &&
				!strncmp(p->axes[a].key, nm,
					 (size_t)(dot - nm));
		if (!found)
			mg_diag_add(d, &s->loc, s->name, NULL,
				    "no group axis '%.*s' in [sweep] (give "
				    "%.*s = %s, ... there)",
				    (int)(dot - nm), nm, (int)(dot - nm), nm,
				    dot + 1);
	}
	for (int a = 0; a < p->naxes; a++) {
		const struct mg_sweep_axis *ax = &p->axes[a];
		for (int v = 0; ax->groups && v < ax->nvalues; v++)
			for (int j = 0; j < ax->groups[v].n; j++)
				for (int b = 0; b < p->naxes; b++) {
					size_t kl = strlen(p->axes[b].key);
					const char *set = ax->groups[v].sets[j];
					if (b == a || p->axes[b].groups ||
					    strncmp(set, p->axes[b].key, kl) ||
					    set[kl] != '=')
						continue;
					mg_diag_add(
						d, NULL, NULL, NULL,
						"%s: [sweep.%s.%s] %.*s: also "
						"the axis %s (%s): set it "
						"in one place",
						ax->groups[v].where[j], ax->key,
						ax->values[v], (int)kl, set,
						p->axes[b].key,
						p->axes[b].where);
				}
	}
}

/* Add (or replace, by key) an axis from "V1, V2, ..." text. Values are
 * separated by commas, or by '|' when there is one (values that are
 * lists themselves: model.hidden = 128,64 | 256,128). */
static void add_axis(struct mg_sweep_plan *p, const struct mg_config *cfg,
		     const char *key, const char *values, const char *where,
		     const struct mg_loc *loc, const char *arg,
		     struct mg_diag *d)
{
	const char *dot = strchr(key, '.');
	bool group = !dot && has_group(cfg, key);
#define AXIS_ERR(...)                                                          \
	do {                                                                   \
		char *m_ = mgc_asprintf(__VA_ARGS__);                          \
		if (loc)                                                       \
			mg_diag_add(d, loc, "sweep", key, "%s", m_);           \
		else                                                           \
			mg_diag_add(d, NULL, NULL, NULL, "--sweep %s: %s",     \
				    arg, m_);                                  \
		free(m_);                                                      \
	} while (0)
	if (!group && (!dot || dot == key || !dot[1] || strchr(dot + 1, '.'))) {
		AXIS_ERR("an axis is SECTION.KEY = V1, V2, ... (like --set), "
			 "or NAME = V1, V2, ... with a section "
			 "[sweep.NAME.V] per value (a group axis)");
		return;
	}
	for (size_t i = 0; i < sizeof reserved_axes / sizeof *reserved_axes;
	     i++)
		if (!strcmp(key, reserved_axes[i])) {
			AXIS_ERR("cannot be swept: the sweep sets it for "
				 "every point");
			return;
		}
	char **v;
	int bad = 0, n;
	if (!values[0]) {
		AXIS_ERR("empty value: give one or more values separated "
			 "by commas");
		return;
	}
	n = split(values, strchr(values, '|') ? '|' : ',', &v, &bad);
	if (n < 0) {
		AXIS_ERR("empty value (item %d of '%s')", bad, values);
		return;
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(v[i], v[j])) {
				AXIS_ERR("value '%s' given twice", v[i]);
				free_list(v, n);
				return;
			}
	struct mg_sweep_group *groups = NULL;
	if (group) {
		groups = mgc_calloc((size_t)n, sizeof *groups);
		int bad_groups = 0;
		for (int i = 0; i < n; i++)
			if (read_group(cfg, key, v[i], &groups[i], d) < 0) {
				AXIS_ERR("value '%s': no section [sweep.%s.%s] "
					 "saying what it sets",
					 v[i], key, v[i]);
				bad_groups++;
			}
		if (bad_groups) {
			free_groups(groups, n);
			free_list(v, n);
			return;
		}
	}
	struct mg_sweep_axis *a = NULL;
	for (int i = 0; i < p->naxes; i++)
		if (!strcmp(p->axes[i].key, key))
			a = &p->axes[i];
	if (a) { /* --sweep replaces the file's axis, in its place */
		free_groups(a->groups, a->nvalues);
		a->groups = NULL;
		free_list(a->values, a->nvalues);
		free(a->where);
	} else if (p->naxes == MG_SWEEP_MAX_AXES) {
		AXIS_ERR("more than %d axes", MG_SWEEP_MAX_AXES);
		free_groups(groups, n);
		free_list(v, n);
		return;
	} else {
		p->axes = mgc_realloc(p->axes,
				      (size_t)(p->naxes + 1) * sizeof *p->axes);
		a = &p->axes[p->naxes++];
		memset(a, 0, sizeof *a);
		a->key = mgc_strdup(key);
		a->label = group ? mgc_strdup(key) : axis_label(key);
	}
#undef AXIS_ERR
	a->values = v;
	a->nvalues = n;
	a->where = mgc_strdup(where);
	a->groups = groups;
	a->numeric = !group;
	for (int i = 0; i < n; i++)
		a->numeric = a->numeric && is_number(v[i]);
}

/* An axis named by its key ("run.gpus") or label ("gpus"); -1 after a
 * diagnostic with the closest axis. */
static int find_axis(const struct mg_sweep_plan *p, const char *name,
		     const struct mg_config_entry *e, struct mg_diag *d)
{
	for (int i = 0; i < p->naxes; i++)
		if (!strcmp(p->axes[i].key, name) ||
		    !strcmp(p->axes[i].label, name))
			return i;
	const char **keys = mgc_calloc((size_t)p->naxes + 1, sizeof *keys);
	for (int i = 0; i < p->naxes; i++)
		keys[i] = p->axes[i].key;
	const char *hint = mg_suggest(name, keys, (size_t)p->naxes);
	if (hint)
		mg_diag_add(d, &e->loc, "sweep", e->key,
			    "'%s' is not an axis (did you mean '%s'?)", name,
			    hint);
	else
		mg_diag_add(d, &e->loc, "sweep", e->key,
			    "'%s' is not an axis of this sweep", name);
	free(keys);
	return -1;
}

static void parse_relative_to(struct mg_sweep_plan *p,
			      const struct mg_config_entry *e,
			      struct mg_diag *d)
{
	char **items;
	int bad = 0, n = split(e->value, ',', &items, &bad);
	if (n < 0) {
		mg_diag_add(d, &e->loc, "sweep", e->key,
			    "empty item %d: expected AXIS=VALUE, ...", bad);
		return;
	}
	for (int i = 0; i < n; i++) {
		char *eq = strchr(items[i], '=');
		if (!eq) {
			mg_diag_add(d, &e->loc, "sweep", e->key,
				    "'%s': expected AXIS=VALUE", items[i]);
			continue;
		}
		char *key = trim_dup(items[i], (size_t)(eq - items[i]));
		char *val = trim_dup(eq + 1, strlen(eq + 1));
		int a = find_axis(p, key, e, d), v = -1;
		if (a >= 0) {
			const struct mg_sweep_axis *ax = &p->axes[a];
			for (int j = 0; j < ax->nvalues; j++)
				if (!strcmp(ax->values[j], val))
					v = j;
			if (v < 0) {
				char *list = mgc_strdup(ax->values[0]);
				for (int j = 1; j < ax->nvalues; j++) {
					char *l = mgc_asprintf("%s, %s", list,
							       ax->values[j]);
					free(list);
					list = l;
				}
				mg_diag_add(d, &e->loc, "sweep", e->key,
					    "'%s' is not a value of %s (%s)",
					    val, ax->key, list);
				free(list);
			}
		}
		if (a >= 0 && v >= 0) {
			p->rel = mgc_realloc(p->rel, (size_t)(p->nrel + 1) *
							     sizeof *p->rel);
			p->rel[p->nrel].axis = a;
			p->rel[p->nrel].value = v;
			p->rel[p->nrel].text =
				mgc_asprintf("%s=%s", p->axes[a].label,
					     p->axes[a].values[v]);
			p->nrel++;
		}
		free(key);
		free(val);
	}
	free_list(items, n);
}

/* A comma list option (metric names) into *list / *n, replacing an
 * earlier value; an empty item is a diagnostic at the entry. */
static void set_list(struct mg_diag *d, const struct mg_config_entry *e,
		     const char *k, const char *v, char ***list, int *n)
{
	char **m;
	int bad = 0, c = split(v, ',', &m, &bad);
	if (c < 0) {
		mg_diag_add(d, &e->loc, "sweep", k, "empty item %d", bad);
		return;
	}
	free_list(*list, *n);
	*list = m;
	*n = c;
}

/* Options are read after every axis is known (x, series and relative_to
 * name axes, which --sweep may add). */
static void parse_option(struct mg_sweep_plan *p,
			 const struct mg_config_entry *e, bool repeats_given,
			 struct mg_diag *d)
{
	const char *k = e->key, *v = e->value;
	if (!strcmp(k, "title")) {
		free(p->title);
		p->title = mgc_strdup(v);
		return;
	}
	if (!v[0]) {
		mg_diag_add(d, &e->loc, "sweep", k, "empty value");
		return;
	}
	if (!strcmp(k, "repeats")) {
		char *end;
		long r = strtol(v, &end, 10);
		if (*end || r < 1 || r > 1000)
			mg_diag_add(d, &e->loc, "sweep", k,
				    "'%s': expected a whole number in "
				    "[1, 1000]",
				    v);
		else if (!repeats_given)
			p->repeats = (int)r;
	} else if (!strcmp(k, "x")) {
		int a = find_axis(p, v, e, d);
		if (a >= 0)
			p->x = a;
	} else if (!strcmp(k, "series")) {
		if (!strcmp(v, "none"))
			p->series = -2; /* none, explicitly */
		else {
			int a = find_axis(p, v, e, d);
			if (a >= 0)
				p->series = a;
		}
	} else if (!strcmp(k, "relative_to")) {
		parse_relative_to(p, e, d);
	} else if (!strcmp(k, "metric")) {
		const char *hint = mg_suggest(v, metric_names, 3);
		if (strcmp(v, "train_s") && strcmp(v, "wall_s") &&
		    strcmp(v, "epoch_s"))
			mg_diag_add(
				d, &e->loc, "sweep", k,
				"'%s' is not train_s, wall_s or epoch_s%s%s%s",
				v, hint ? " (did you mean '" : "",
				hint ? hint : "", hint ? "'?)" : "");
		else {
			free(p->metric);
			p->metric = mgc_strdup(v);
		}
	} else if (!strcmp(k, "test_metrics")) {
		set_list(d, e, k, v, &p->test_metrics, &p->ntest);
	} else if (!strcmp(k, "profile_metrics")) {
		set_list(d, e, k, v, &p->profile_metrics, &p->nprofile);
	}
}

int mg_sweep_plan_build(struct mg_sweep_plan *p, const struct mg_config *cfg,
			const char *const *sweeps, int nsweeps, int repeats,
			struct mg_diag *d)
{
	size_t before = mg_diag_count(d);
	const struct mg_config_section *s = mg_config_section(cfg, "sweep");
	memset(p, 0, sizeof *p);
	p->repeats = repeats > 0 ? repeats : 1;
	p->series = -1;
	p->metric = mgc_strdup("train_s");
	p->title = mgc_strdup("");
	static const char *const default_profile[] = {
		"memcpy_h2d", "cudaLaunchKernel", "cudaStreamSynchronize",
		"nccl_AllGather"};
	p->nprofile = 4;
	p->profile_metrics = mgc_calloc(4, sizeof *p->profile_metrics);
	for (int i = 0; i < 4; i++)
		p->profile_metrics[i] = mgc_strdup(default_profile[i]);

	/* Axes: the file's in order, then --sweep. */
	for (size_t i = 0; s && i < s->nentries; i++) {
		const struct mg_config_entry *e = s->entries[i];
		if (!strchr(e->key, '.') && !has_group(cfg, e->key))
			continue;
		char *where = loc_text(&e->loc);
		add_axis(p, cfg, e->key, e->value, where, &e->loc, NULL, d);
		free(where);
	}
	for (int i = 0; i < nsweeps; i++) {
		const char *eq = strchr(sweeps[i], '=');
		char *where = mgc_asprintf("--sweep %s", sweeps[i]);
		if (!eq) {
			mg_diag_add(
				d, NULL, NULL, NULL,
				"--sweep %s: expected SECTION.KEY=V1,V2,...",
				sweeps[i]);
		} else {
			char *key =
				trim_dup(sweeps[i], (size_t)(eq - sweeps[i]));
			char *vals = trim_dup(eq + 1, strlen(eq + 1));
			add_axis(p, cfg, key, vals, where, NULL, sweeps[i], d);
			free(key);
			free(vals);
		}
		free(where);
	}
	/* Options. */
	for (size_t i = 0; s && i < s->nentries; i++) {
		const struct mg_config_entry *e = s->entries[i];
		if (strchr(e->key, '.') || has_group(cfg, e->key))
			continue;
		bool known = false;
		for (size_t j = 0; j < NOPTIONS; j++)
			known = known || !strcmp(e->key, option_names[j]);
		if (known) {
			parse_option(p, e, repeats > 0, d);
			continue;
		}
		const char *hint = mg_suggest(e->key, option_names, NOPTIONS);
		if (hint)
			mg_diag_add(d, &e->loc, "sweep", e->key,
				    "unknown key '%s' (did you mean '%s'?)",
				    e->key, hint);
		else
			mg_diag_add(d, &e->loc, "sweep", e->key,
				    "unknown key '%s' (axes are SECTION.KEY; "
				    "options: repeats, x, series, "
				    "relative_to, metric, profile_metrics, "
				    "title, test_metrics; a group axis needs "
				    "[sweep.%s.VALUE] sections)",
				    e->key, e->key);
	}
	check_groups(p, cfg, d);
	if (p->series == -1 && p->naxes > 1)
		p->series = p->x == 0 ? 1 : 0;
	if (p->series == -2 || p->series == p->x)
		p->series = -1;
	long long n = p->naxes ? 1 : 0;
	for (int i = 0; i < p->naxes && n <= MAX_RUNS; i++)
		n *= p->axes[i].nvalues;
	if (n * p->repeats > MAX_RUNS) {
		mg_diag_add(d, NULL, NULL, NULL,
			    "[sweep]: more than %d runs (points x repeats)",
			    MAX_RUNS);
		n = 0;
	}
	p->npoints = (int)n;
	return (int)(mg_diag_count(d) - before);
}

void mg_sweep_plan_free(struct mg_sweep_plan *p)
{
	for (int i = 0; i < p->naxes; i++) {
		free(p->axes[i].key);
		free(p->axes[i].label);
		free(p->axes[i].where);
		free_groups(p->axes[i].groups, p->axes[i].nvalues);
		free_list(p->axes[i].values, p->axes[i].nvalues);
	}
	free(p->axes);
	for (int i = 0; i < p->nrel; i++)
		free(p->rel[i].text);
	free(p->rel);
	free_list(p->profile_metrics, p->nprofile);
	free_list(p->test_metrics, p->ntest);
	free(p->metric);
	free(p->title);
	memset(p, 0, sizeof *p);
}

void mg_sweep_point_values(const struct mg_sweep_plan *p, int point, int *vi)
{
	for (int a = p->naxes - 1; a >= 0; a--) {
		vi[a] = point % p->axes[a].nvalues;
		point /= p->axes[a].nvalues;
	}
}

int mg_sweep_point_index(const struct mg_sweep_plan *p, const int *vi)
{
	int point = 0;
	for (int a = 0; a < p->naxes; a++) {
		if (vi[a] < 0 || vi[a] >= p->axes[a].nvalues)
			return -1;
		point = point * p->axes[a].nvalues + vi[a];
	}
	return point;
}

/* Append s to buf as filesystem-safe characters (at most max of them). */
static void append_safe(char *buf, size_t n, const char *s, size_t max)
{
	size_t len = strlen(buf);
	for (; *s && max && len + 1 < n; s++, max--) {
		char c = *s;
		if (!isalnum((unsigned char)c) && !strchr("._+-", c))
			c = '_';
		buf[len++] = c;
	}
	buf[len] = 0;
}

void mg_sweep_point_id(const struct mg_sweep_plan *p, int point, int repeat,
		       char *buf, size_t n)
{
	int vi[MG_SWEEP_MAX_AXES], width = 2;
	for (int t = p->npoints; t >= 100; t /= 10)
		width++;
	mg_sweep_point_values(p, point, vi);
	snprintf(buf, n, "p%0*d", width, point + 1);
	for (int a = 0; a < p->naxes; a++) {
		const struct mg_sweep_axis *ax = &p->axes[a];
		const char *v = ax->values[vi[a]];
		append_safe(buf, n, "-", 1);
		/* Numbers and booleans mean nothing alone: "gpus2",
		 * "pin_memory_true"; names do: "ddp_rr", "fp16". */
		if (isdigit((unsigned char)v[0]) ||
		    (strchr("+-.", v[0]) && isdigit((unsigned char)v[1]))) {
			append_safe(buf, n, ax->label, 24);
		} else if (!strcmp(v, "true") || !strcmp(v, "false")) {
			append_safe(buf, n, ax->label, 24);
			append_safe(buf, n, "_", 1);
		}
		/* no leading dot: never ".." or a hidden folder */
		append_safe(buf, n, v[0] == '.' ? "_" : "", 1);
		append_safe(buf, n, v[0] == '.' ? v + 1 : v, 40);
	}
	char r[16];
	snprintf(r, sizeof r, "-r%d", repeat + 1);
	append_safe(buf, n, r, sizeof r);
}

void mg_sweep_point_label(const struct mg_sweep_plan *p, int point, int skip,
			  char *buf, size_t n)
{
	int vi[MG_SWEEP_MAX_AXES];
	size_t len = 0;
	mg_sweep_point_values(p, point, vi);
	buf[0] = 0;
	for (int a = 0; a < p->naxes && len < n; a++) {
		if (a == skip)
			continue;
		len += (size_t)snprintf(buf + len, n - len, "%s%s=%s",
					len ? " " : "", p->axes[a].label,
					p->axes[a].values[vi[a]]);
	}
}
