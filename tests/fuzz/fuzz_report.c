/*
 * fuzz_report.c - libFuzzer target for the run loader of `mgrun compare`
 * (core/analysis/run_load.c). The input is a run directory: report.json,
 * steps.csv, memory.csv and profile_memcpy.csv, in that order, separated
 * by lines "%%" (files after the last part are absent).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "fuzz_util.h"

static const char *const files[] = {"report.json", "steps.csv", "memory.csv",
				    "profile_memcpy.csv"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	const uint8_t *p = data, *end = data + size;
	for (int i = 0; i < 4; i++) {
		if (!p) {
			fuzz_write(files[i], NULL, 0, path, sizeof path);
			continue;
		}
		const uint8_t *q = p;
		while (q + 4 <= end && memcmp(q, "\n%%\n", 4))
			q++;
		if (q + 4 > end)
			q = end;
		fuzz_write(files[i], p, (size_t)(q - p), path, sizeof path);
		p = q < end ? q + 4 : NULL;
	}
	struct mg_run_record r;
	if (!mg_run_load(&r, fuzz_scratch())) {
		double *v = NULL;
		int n = mg_run_steady(&r, "step_s", &v);
		volatile double s = 0;
		for (int i = 0; i < n; i++)
			s += v[i];
		free(v);
		s += mg_run_metric(&r, "train_s") + mg_run_metric(&r, "wall_s");
	}
	mg_run_free(&r);
	char *config = NULL;
	mg_run_finished(fuzz_scratch(), &config);
	free(config);
	return 0;
}
