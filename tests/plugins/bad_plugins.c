/*
 * bad_plugins.c - deliberately broken plugins for the loader tests. One
 * source, one variant per BAD_* macro, each built as its own .so.
 */
#include "mg/mg.h"

static int create(const struct mg_opts *o, struct mg_ctx *c, void **self)
{
	(void)o, (void)c;
	*self = 0;
	return 0;
}

static void destroy(void *self)
{
	(void)self;
}

static const struct mg_dataset_ops dataset_ops; /* all NULL */

#ifndef BAD_NO_ENTRY
static const struct mg_plugin desc = {
#if defined(BAD_MAJOR)
	.abi_major = MG_ABI_MAJOR + 1,
	.abi_minor = 0,
	.struct_size = sizeof(struct mg_plugin),
#elif defined(BAD_MINOR)
	.abi_major = MG_ABI_MAJOR,
	.abi_minor = MG_ABI_MINOR + 1,
	.struct_size = sizeof(struct mg_plugin),
#elif defined(BAD_SIZE)
	.abi_major = MG_ABI_MAJOR,
	.abi_minor = MG_ABI_MINOR,
	.struct_size = 8,
#else
	MG_PLUGIN_HEADER,
#endif
	.kind = MG_PLUGIN_DATASET,
	.name = PLUGIN_NAME,
#ifndef BAD_NO_VERSION
	.version = "0",
#endif
	.description = "a broken plugin for tests",
	.create = create,
	.destroy = destroy,
	.ops = &dataset_ops,
};
MG_PLUGIN_DEFINE(desc)
#else
MG_EXPORT int not_an_entry(void);
int not_an_entry(void)
{
	return (int)sizeof(dataset_ops) + (create(0, 0, 0) != 0) +
	       (destroy(0), 0);
}
#endif
