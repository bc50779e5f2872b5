/*
 * fuzz_ini.c - libFuzzer target for the INI reader (core/config): the
 * input is an experiment file, read as `mgrun -c FILE` reads it, then
 * validated against a schema with one key of every type (the value
 * parsers), with every diagnostic printed. The first line is also
 * applied as a --set argument.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "fuzz_util.h"

static const struct mg_option schema[] = {
	MG_OPT_I("i", "1", 1, 1000, "int"),
	MG_OPT_I("j", "0", 0, 0, "int, unbounded"),
	MG_OPT_F("f", "0.1", 0, 10, "float"),
	MG_OPT_B("b", "true", "bool"),
	MG_OPT_E("e", "fp32", "fp32|bf16|fp16", "enum"),
	MG_OPT_S("s", "", "string"),
	MG_OPT_P("p", "", "path"),
	MG_OPT_S("r", NULL, "required"),
	MG_OPT_END,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	fuzz_write("x.ini", data, size, path, sizeof path);
	FILE *devnull = fopen("/dev/null", "w");
	if (!devnull)
		abort();
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file(path, &d);
	if (cfg) {
		/* the first line as a --set argument */
		size_t n = 0;
		while (n < size && data[n] != '\n')
			n++;
		char *arg = malloc(n + 1);
		memcpy(arg, data, n);
		arg[n] = 0;
		mg_config_set(cfg, arg, &d);
		free(arg);
		static const char *const known[] = {"run", "model", "s"};
		mg_config_check_sections(cfg, known, 3, &d);
		for (size_t i = 0; i < cfg->nsections; i++) {
			const struct mg_config_section *s = cfg->sections[i];
			for (size_t k = 0; k < s->nentries; k++) {
				const struct mg_config_entry *e = mg_config_get(
					cfg, s->name, s->entries[k]->key);
				if (!e)
					abort(); /* a parsed key not found */
				free(mg_config_resolve_path(cfg, e));
			}
		}
		const struct mg_option *const schemas[] = {schema};
		for (size_t i = 0; i < cfg->nsections && i < 4; i++) {
			struct mg_opts *o = mg_opts_build(
				cfg, cfg->sections[i]->name, schemas, 1, &d);
			mg_opts_print(devnull, o);
			mg_opts_free(o);
		}
		mg_config_free(cfg);
	}
	/* the same text from memory (NUL-terminated, as a pipe gives it) */
	char *text = malloc(size + 1);
	memcpy(text, data, size);
	text[size] = 0;
	mg_config_free(mg_config_parse_string(text, "mem", NULL, &d));
	free(text);
	mg_diag_print(devnull, &d);
	mg_diag_free(&d);
	fclose(devnull);
	return 0;
}
