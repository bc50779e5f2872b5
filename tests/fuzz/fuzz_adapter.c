/*
 * fuzz_adapter.c - libFuzzer target for a PEFT adapter_config.json, read
 * by both of mgrun's readers: `mgrun generate --adapter DIR`'s
 * (core/cli/adapter.c, mg_cli_adapter_read: r, lora_alpha, use_rslora,
 * target_modules and the fields whose use mgrun refuses), which turns it
 * into the model's --set overrides, and the llama plugin's lora_adapter
 * check (plugins/models/llama/llama_adapter.c), which then compares the
 * same file with those options. What the first accepts must be well
 * formed overrides, and, where the modules are llama's, must pass the
 * second: otherwise `generate --adapter` would refuse a folder it took.
 * Also the llama check with fixed options (r 4, alpha 8, q and v).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "fuzz_util.h"
#include "llama.h"

/* The value of override "model.KEY=VALUE" in a, or NULL. */
static const char *set_of(const struct mg_cli_adapter *a, const char *key)
{
	size_t n = strlen(key);
	for (int i = 0; i < a->nsets; i++)
		if (!strncmp(a->sets[i] + 6, key, n) &&
		    a->sets[i][6 + n] == '=')
			return a->sets[i] + 7 + n;
	return NULL;
}

/* lora_targets "q_proj,v_proj" (or "all") as LT_* bits; 0 when a name is
 * not a llama module (the plugin refuses it by name: no agreement to
 * check). */
static unsigned target_bits(const char *s)
{
	if (!strcmp(s, "all"))
		return (1u << LT_HEAD) - 1;
	unsigned bits = 0;
	while (*s) {
		size_t n = strcspn(s, ",");
		int found = -1;
		for (int t = 0; t < LT_COUNT && found < 0; t++)
			if (strlen(llama_lora_module[t]) == n &&
			    !strncmp(s, llama_lora_module[t], n))
				found = t;
		if (found < 0)
			return 0;
		bits |= 1u << found;
		s += n + (s[n] == ',');
	}
	return bits;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	fuzz_write("adapter_config.json", data, size, path, sizeof path);
	volatile int fixed = llama_adapter_config(path, 4, 8, false,
						  1u << LT_Q | 1u << LT_V);
	(void)fixed;
	struct mg_cli_adapter a;
	if (mg_cli_adapter_read(fuzz_scratch(), &a))
		return 0;
	if (a.nsets < 1 || a.nsets > MG_CLI_ADAPTER_SETS ||
	    strlen(a.desc) >= sizeof a.desc)
		abort();
	for (int i = 0; i < a.nsets; i++) {
		const char *eq = strchr(a.sets[i], '=');
		if (strncmp(a.sets[i], "model.", 6) || !eq || !eq[1] ||
		    strchr(a.sets[i], '\n'))
			abort();
	}
	const char *r = set_of(&a, "lora_rank"), *al = set_of(&a, "lora_alpha"),
		   *rs = set_of(&a, "rslora"), *tg = set_of(&a, "lora_targets");
	if (!r || !al || !rs || !tg)
		abort();
	unsigned bits = target_bits(tg);
	if (bits && llama_adapter_config(path, atoi(r), strtod(al, NULL),
					 !strcmp(rs, "true"), bits)) {
		fprintf(stderr, "generate's reader took it, llama's not: %s\n",
			mg_last_error());
		abort();
	}
	mg_cli_adapter_free(&a);
	return 0;
}
