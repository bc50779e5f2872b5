/*
 * llama_plugin.h - the llama plugin as its test programs load it: P and
 * M, and the main() they share (test_llama.c, test_qlora.c through
 * llama_env.h; test_llama_dpo.c).
 */
#ifndef MG_TEST_LLAMA_PLUGIN_H
#define MG_TEST_LLAMA_PLUGIN_H

#include <dlfcn.h>
#include <stdio.h>

#include "../common/test_util.h"
#include "mg/mg.h"

static const struct mg_plugin *P;
static const struct mg_model_ops *M;

/* main() of a llama plugin test program: `PROG PLUGIN.so CASE` loads
 * the plugin into P and M, then runs the case (test_run_cases). */
static inline int llama_test_main(const char *prog,
				  const struct test_case *cases, size_t n,
				  int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s PLUGIN.so TEST\n", prog);
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW);
	mg_plugin_entry_fn entry =
		h ? (mg_plugin_entry_fn)dlsym(h, MG_PLUGIN_ENTRY_SYMBOL) : NULL;
	if (!entry) {
		fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
		return 1;
	}
	P = entry();
	M = P->ops;
	return test_run_cases(prog, cases, n, argv[2]);
}

#endif
