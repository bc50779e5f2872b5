/*
 * plugin_loader.h - finding, opening and validating plugin shared objects.
 */
#ifndef MG_PLUGIN_LOADER_H
#define MG_PLUGIN_LOADER_H

#include "mg_internal.h"

#include <limits.h>

#include "mg/mg.h"

/*
 * An opened plugin. `ops` is the loader's copy of the plugin's callback
 * table at this core's size: the fields the plugin's ABI minor did not
 * have yet read as NULL / 0, so the rest of the core tests a callback
 * for NULL and never the plugin's ABI minor (only this loader knows the
 * versions).
 */
struct mg_loaded_plugin {
	void *handle;
	const struct mg_plugin *desc;
	union {
		struct mg_model_ops model;
		struct mg_strategy_ops strategy;
		struct mg_dataset_ops dataset;
	} ops;
	char path[PATH_MAX];
};

/* Directories searched for plugins named in an INI, in order. */
struct mg_search_path {
	int n;
	char *dirs[32];
	const char *origin[32]; /* "--plugin-path", "MG_PLUGIN_PATH", ... */
};

/* Build the search path: --plugin-path entries (colon-separated, may be
 * NULL), then MG_PLUGIN_PATH, then the build tree, then the install dir.
 * The current directory is never searched implicitly. */
MG_INTERNAL void mg_search_path_init(struct mg_search_path *sp,
				     const char *cli_dirs);
MG_INTERNAL void mg_search_path_free(struct mg_search_path *sp);

MG_INTERNAL const char *mg_plugin_kind_name(enum mg_plugin_kind k);

/* Open path and validate its descriptor. want_kind 0 accepts any kind;
 * want_name NULL accepts any name. On error the message names the plugin,
 * the file and what is wrong (ABI versions, missing symbol, kind). */
int mg_plugin_open(const char *path, enum mg_plugin_kind want_kind,
		   const char *want_name, struct mg_loaded_plugin *out);
/* Find libmg_<name>.so along sp and open it. */
int mg_plugin_find(const struct mg_search_path *sp,
		   enum mg_plugin_kind want_kind, const char *name,
		   struct mg_loaded_plugin *out);
void mg_plugin_close(struct mg_loaded_plugin *p);

/* Call fn for every valid plugin found along sp (first one of each name
 * wins, as for loading). Invalid files are reported through warn. */
MG_INTERNAL void mg_plugin_foreach(const struct mg_search_path *sp,
				   void (*fn)(const struct mg_loaded_plugin *,
					      void *),
				   void *arg);

#endif
