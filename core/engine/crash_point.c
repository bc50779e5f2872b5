/*
 * crash_point.c - see crash_point.h. The table names every write of a
 * run's end in the order they happen; a new write point goes here too,
 * and the test then covers it without being edited.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mg/log.h>

#include "engine/crash_point.h"

static const char *const points[] = {
	"epoch_end",	  /* the epoch's evaluation done, nothing written */
	"steps_csv",	  /* steps.csv flushed before the checkpoint */
	"adapter_model",  /* adapter/adapter_model.safetensors written */
	"adapter_config", /* adapter/adapter_config.json written */
	"checkpoint",	  /* checkpoint.safetensors renamed into place */
	"report_epoch",	  /* report.json of the epoch end (running) */
	"report_final",	  /* report.json with its final status */
};

void mg_crash_point(const char *name)
{
	const char *at = getenv("MG_TEST_CRASH_AT");
	if (at && !strcmp(at, name)) {
		fprintf(stderr, "mgrun: MG_TEST_CRASH_AT=%s: exiting\n", name);
		_exit(MG_CRASH_STATUS);
	}
}

int mg_crash_points_check(void)
{
	const char *at = getenv("MG_TEST_CRASH_AT");
	if (!at)
		return 0;
	size_t n = sizeof points / sizeof *points;
	if (!strcmp(at, "list")) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", points[i]);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(at, points[i]))
			return 0;
	return mg_error("MG_TEST_CRASH_AT=%s: no such write point "
			"(MG_TEST_CRASH_AT=list names them)",
			at);
}
