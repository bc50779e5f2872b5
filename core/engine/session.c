/*
 * session.c - from an INI file (plus --set overrides) to loaded plugins
 * and validated options, collecting every problem as file:line
 * diagnostics before anything runs.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/core_schema.h"
#include "engine/session.h"

const char *const mg_section_names[MG_SEC_PLUGIN_COUNT] = {"model", "dataset",
							   "strategy"};

static const enum mg_plugin_kind section_kind[MG_SEC_PLUGIN_COUNT] = {
	MG_PLUGIN_MODEL, MG_PLUGIN_DATASET, MG_PLUGIN_STRATEGY};

/* Plugin used when a section does not name one. */
static const char *const section_default[MG_SEC_PLUGIN_COUNT] = {NULL, NULL,
								 "single"};

/* Load the plugin a section names (name = or path =). Problems become
 * diagnostics at the key's line. */
static void load_section_plugin(struct mg_session *s, int i, struct mg_diag *d)
{
	const char *sec = mg_section_names[i];
	const struct mg_config_entry *name = mg_config_get(s->cfg, sec, "name");
	const struct mg_config_entry *path = mg_config_get(s->cfg, sec, "path");
	const struct mg_config_section *cs = mg_config_section(s->cfg, sec);
	int rc;
	if (name && path) {
		/* An override on the command line replaces the file's choice
		 * (A/B: --set strategy.path=./mine.so); both in the file is
		 * ambiguous. */
		if (path->loc.set && !name->loc.set)
			name = NULL;
		else if (name->loc.set && !path->loc.set)
			path = NULL;
		else {
			mg_diag_add(d, &path->loc, sec, "path",
				    "give either name or path, not both");
			return;
		}
	}
	if (path && path->value[0]) {
		char *p = mg_config_resolve_path(s->cfg, path);
		rc = mg_plugin_open(p, section_kind[i], NULL, &s->plugin[i]);
		free(p);
		if (rc)
			mg_diag_add(d, &path->loc, sec, "path", "%s",
				    mg_last_error());
		return;
	}
	const char *n =
		name && name->value[0] ? name->value : section_default[i];
	if (!n) {
		struct mg_loc file = {.file = s->cfg->path};
		mg_diag_add(d, cs ? &cs->loc : &file, sec, "name",
			    "required: which %s plugin to use (see mgrun "
			    "--list-plugins)",
			    mg_plugin_kind_name(section_kind[i]));
		return;
	}
	if (mg_plugin_find(&s->sp, section_kind[i], n, &s->plugin[i]))
		mg_diag_add(d, name ? &name->loc : (cs ? &cs->loc : NULL), sec,
			    "name", "%s", mg_last_error());
}

/* run.name is a folder under run.out_dir: refuse one that leaves it
 * (absolute, or with a ".." component) or is out_dir itself. */
static void check_run_name(const struct mg_opts *run, struct mg_diag *d)
{
	const char *name = mg_opt_str(run, "name");
	bool bad = name[0] == '/' || !strcmp(name, ".");
	for (const char *p = name; *p && !bad; p++)
		bad = (p == name || p[-1] == '/') && p[0] == '.' &&
		      p[1] == '.' && (p[2] == '/' || !p[2]);
	if (bad)
		mg_diag_add(d, mg_opts_where(run, "name"), "run", "name",
			    "'%s' is not a folder inside run.out_dir "
			    "(use a name without '..', not "
			    "starting with '/')",
			    name);
}

int mg_session_open(struct mg_session *s, const char *ini,
		    const char *const *sets, int nsets, const char *plugin_path)
{
	memset(s, 0, sizeof *s);
	s->ini_path = ini;
	struct mg_diag d = {0};
	mg_search_path_init(&s->sp, plugin_path);
	s->cfg = mg_config_parse_file(ini, &d);
	if (!s->cfg) {
		mg_diag_print(stderr, &d);
		mg_diag_free(&d);
		return 2;
	}
	for (int i = 0; i < nsets; i++)
		mg_config_set(s->cfg, sets[i], &d);
	/* [sweep.AXIS.VALUE]: a sweep's group sections (sweep_plan.c) */
	static const char *const known[] = {"run",     "optimizer", "model",
					    "dataset", "strategy",  "profile",
					    "sweep",   "sweep.*"};
	mg_config_check_sections(s->cfg, known, sizeof known / sizeof *known,
				 &d);
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++)
		load_section_plugin(s, i, &d);

	const struct mg_option *run_s[] = {mg_run_schema};
	const struct mg_option *opt_s[] = {mg_optimizer_schema};
	s->run = mg_opts_build(s->cfg, "run", run_s, 1, &d);
	s->optim = mg_opts_build(s->cfg, "optimizer", opt_s, 1, &d);
	const struct mg_option *prof_s[] = {mg_profile_schema};
	s->profile = mg_opts_build(s->cfg, "profile", prof_s, 1, &d);
	if (s->run) {
		check_run_name(s->run, &d);
		int prec = mg_opt_enum(s->run, "precision");
		if ((prec == MG_PREC_FP16 || prec == MG_PREC_BF16) &&
		    mg_opt_enum(s->run, "device") != MG_DEVICE_CUDA)
			mg_diag_add(&d, mg_opts_where(s->run, "precision"),
				    "run", "precision",
				    "%s needs run.device = cuda (the CPU "
				    "computes in fp32 or fp64)",
				    mg_opt_str(s->run, "precision"));
	}
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++) {
		/* Without the plugin its keys cannot be checked; the load
		 * error already says why. */
		if (!s->plugin[i].desc)
			continue;
		const struct mg_option *sch[] = {mg_plugin_section_schema,
						 s->plugin[i].desc->options};
		s->opts[i] =
			mg_opts_build(s->cfg, mg_section_names[i], sch, 2, &d);
	}
	int rc = 0;
	if (mg_diag_count(&d)) {
		mg_diag_print(stderr, &d);
		fprintf(stderr,
			"mgrun: %zu configuration error%s, nothing run\n",
			mg_diag_count(&d), mg_diag_count(&d) == 1 ? "" : "s");
		rc = 2;
	}
	mg_diag_free(&d);
	return rc;
}

void mg_session_close(struct mg_session *s)
{
	mg_opts_free(s->run);
	mg_opts_free(s->optim);
	mg_opts_free(s->profile);
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++) {
		mg_opts_free(s->opts[i]);
		mg_plugin_close(&s->plugin[i]);
	}
	mg_config_free(s->cfg);
	mg_search_path_free(&s->sp);
	memset(s, 0, sizeof *s);
}

void mg_session_print(const struct mg_session *s, FILE *f)
{
	fprintf(f, "; effective configuration of %s\n", s->ini_path);
	mg_opts_print(f, s->run);
	fputc('\n', f);
	mg_opts_print(f, s->optim);
	fputc('\n', f);
	mg_opts_print(f, s->profile);
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++) {
		fprintf(f, "\n; %s plugin '%s' %s from %s\n",
			mg_section_names[i], s->plugin[i].desc->name,
			s->plugin[i].desc->version, s->plugin[i].path);
		mg_opts_print(f, s->opts[i]);
	}
}

/* Does plugin p declare option `name`? */
static bool declares(const struct mg_plugin *p, const char *name)
{
	for (const struct mg_option *o = p->options; o && o->name; o++)
		if (!strcmp(o->name, name))
			return true;
	return false;
}

const char *mg_session_plugin_str(const struct mg_session *s, int sec,
				  const char *name)
{
	if (!declares(s->plugin[sec].desc, name))
		return "";
	return mg_opt_str(s->opts[sec], name);
}
