/*
 * test_plugin_so.c - the built libmg_mnist.so loads with dlopen and
 * exports exactly the entry point, with a descriptor the core accepts.
 *
 * usage: test_plugin_so PATH_TO_LIBMG_MNIST_SO
 */
#include <dlfcn.h>

#include "mg/mg.h"
#include "testutil.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s libmg_mnist.so\n", argv[0]);
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL);
	if (!h) {
		fprintf(stderr, "  %s\n", dlerror());
		return t_done("test_plugin_so");
	}
	mg_plugin_entry_fn entry =
		(mg_plugin_entry_fn)dlsym(h, MG_PLUGIN_ENTRY_SYMBOL);
	CHECK(entry != NULL);
	/* Internal functions stay hidden. */
	CHECK(dlsym(h, "idx_read") == NULL);
	CHECK(dlsym(h, "idx_load_split") == NULL);
	if (entry) {
		const struct mg_plugin *p = entry();
		CHECK(p->abi_major == MG_ABI_MAJOR &&
		      p->abi_minor <= MG_ABI_MINOR &&
		      p->struct_size == sizeof(struct mg_plugin));
		CHECK(p->kind == MG_PLUGIN_DATASET);
		CHECK(strcmp(p->name, "mnist") == 0);
		int n = 0;
		for (const struct mg_option *o = p->options; o->name; o++)
			n++;
		CHECK(n == 10);
		const struct mg_dataset_ops *d = p->ops;
		CHECK(d && d->count && d->layout && d->read && d->transform);
	}
	dlclose(h);
	return t_done("test_plugin_so");
}
