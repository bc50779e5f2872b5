/*
 * fuzz_adapter.c - libFuzzer target for a PEFT adapter_config.json as
 * `mgrun generate --adapter DIR` reads it (core/cli/adapter.c,
 * mg_cli_adapter_read): r, lora_alpha, use_rslora, target_modules and the
 * fields whose use mgrun refuses. What it accepts becomes the model's
 * --set overrides, so each must be a "model.KEY=VALUE" with a value
 * (checked here).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	fuzz_write("adapter_config.json", data, size, path, sizeof path);
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
	mg_cli_adapter_free(&a);
	return 0;
}
