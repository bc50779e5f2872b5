/*
 * abi.h - the versioned plugin descriptor every mgrun plugin exports.
 *
 * A plugin is a shared object with one exported function, mg_plugin_entry(),
 * returning a pointer to a static struct mg_plugin. The core checks the ABI
 * major (must match), the minor (must not exceed the core's) and struct_size
 * before touching anything else, so an old core refuses a newer plugin with a
 * message instead of crashing on a layout it does not know.
 */
#ifndef MG_ABI_H
#define MG_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Minor versions only append (struct fields at the end, optional
 * callbacks, new functions), so older plugins keep loading; what each
 * minor added is docs/ABI.md's changelog. Only the core's loader reads a
 * plugin's minor.
 */
#define MG_ABI_MAJOR 1
#define MG_ABI_MINOR 13

/* Symbols the core exports to plugins (libmg.so) and plugins export to it. */
#if defined(__GNUC__)
#define MG_EXPORT __attribute__((visibility("default")))
#else
#define MG_EXPORT
#endif

#define MG_PLUGIN_ENTRY_SYMBOL "mg_plugin_entry"

enum mg_plugin_kind {
	MG_PLUGIN_STRATEGY = 1,
	MG_PLUGIN_MODEL = 2,
	MG_PLUGIN_DATASET = 3,
};

struct mg_ctx;
struct mg_opts;
struct mg_option;

struct mg_plugin {
	uint32_t abi_major;   /* MG_ABI_MAJOR the plugin was built against */
	uint32_t abi_minor;   /* MG_ABI_MINOR the plugin was built against */
	uint32_t struct_size; /* sizeof(struct mg_plugin) at build time */
	enum mg_plugin_kind kind;
	const char
		*name; /* the name used in INI files: [strategy] name = ... */
	const char *version;		 /* the plugin's own version string */
	const char *description;	 /* one line for --list-plugins */
	const struct mg_option *options; /* schema, terminated by {0} */

	/*
	 * create: build an instance from validated options. ctx is the run
	 * context; it stays valid until destroy. Valid already in create():
	 * rank, world, local ranks, dev, comm (collectives work), dtypes,
	 * seed, optim, cache_dir; optim_vals, grad_scale and the
	 * model/strategy binding come later (docs/PLUGINS.md).
	 * Returns 0, or a negative value after mg_error() said why.
	 */
	int (*create)(const struct mg_opts *opts, struct mg_ctx *ctx,
		      void **self);
	void (*destroy)(void *self);

	/* The kind's callback table: struct mg_strategy_ops, mg_model_ops or
	 * mg_dataset_ops. */
	const void *ops;
};

typedef const struct mg_plugin *(*mg_plugin_entry_fn)(void);

/* Fill the three version fields; use as the first line of a descriptor. */
#define MG_PLUGIN_HEADER                                                       \
	.abi_major = MG_ABI_MAJOR, .abi_minor = MG_ABI_MINOR,                  \
	.struct_size = sizeof(struct mg_plugin)

/* Define the exported entry point returning desc. */
#define MG_PLUGIN_DEFINE(desc)                                                 \
	MG_EXPORT const struct mg_plugin *mg_plugin_entry(void);               \
	MG_EXPORT const struct mg_plugin *mg_plugin_entry(void)                \
	{                                                                      \
		return &(desc);                                                \
	}

#ifdef __cplusplus
}
#endif
#endif
