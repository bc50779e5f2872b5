/*
 * session.h - a configured experiment: the parsed INI with overrides, the
 * loaded plugins and every section's validated options. Built before
 * anything runs, so all input errors are reported at once.
 */
#ifndef MG_SESSION_H
#define MG_SESSION_H

#include "mg_internal.h"

#include "config/config.h"
#include "engine/plugin_loader.h"

enum mg_section_id {
	MG_SEC_MODEL = 0,
	MG_SEC_DATASET,
	MG_SEC_STRATEGY,
	MG_SEC_PLUGIN_COUNT,
};

struct mg_session {
	const char *ini_path;
	struct mg_config *cfg;
	struct mg_search_path sp;
	struct mg_opts *run, *optim, *profile;
	struct mg_opts *opts[MG_SEC_PLUGIN_COUNT];
	struct mg_loaded_plugin plugin[MG_SEC_PLUGIN_COUNT];
	/* --resume-changed: options and files a resume may find changed */
	const char *resume_changed;
};

extern const char *const mg_section_names[MG_SEC_PLUGIN_COUNT];

/* Parse, apply overrides, load plugins, validate. Returns 0; 2 after
 * printing every configuration error to stderr; -1 on other failures. */
MG_INTERNAL int mg_session_open(struct mg_session *s, const char *ini,
				const char *const *sets, int nsets,
				const char *plugin_path);
MG_INTERNAL void mg_session_close(struct mg_session *s);
/* A plugin's string/path option, or "" when it declares no such option
 * (mg_opt_* abort on an undeclared key): what the core may say about a
 * model's weights folder or a dataset's tokenizer without knowing the
 * plugin. */
MG_INTERNAL const char *mg_session_plugin_str(const struct mg_session *s,
					      int sec, const char *name);
/* --print-config: the effective configuration as INI text. */
MG_INTERNAL void mg_session_print(const struct mg_session *s, FILE *f);

#endif
