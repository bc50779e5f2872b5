/*
 * fuzz_dataset.h - what the dataset plugins' fuzz targets share (instruct,
 * token_jsonl, text): the plugin's source is linked into the target and
 * reached through its public entry (mg_plugin_entry), with options built
 * from an INI text as mgrun builds them, so the fuzzed file goes through
 * exactly what a run does with it: create (read, parse, render, tokenize,
 * split, rows), then every row of both splits read, then destroy.
 */
#ifndef MG_FUZZ_DATASET_H
#define MG_FUZZ_DATASET_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "fuzz_util.h"
#include "mg/mg.h"

#ifndef MG_FUZZ_DATA
#error "MG_FUZZ_DATA: the folder of the test tokenizers (fuzz.sh sets it)"
#endif

/* The plugin's entry (MG_PLUGIN_DEFINE in its source, linked in). */
const struct mg_plugin *mg_plugin_entry(void);

/* Token datasets are run on one thread: the machine's cores are shared
 * (OMP_NUM_THREADS is read when the first parallel region starts). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("OMP_NUM_THREADS", "1", 1);
	return 0;
}

/* Every row of split s read back; what the rows say must hold. */
static void read_rows(const struct mg_plugin *p, void *self, enum mg_split s,
		      int64_t seq_len, int64_t vocab)
{
	const struct mg_dataset_ops *ops = p->ops;
	int64_t n = ops->count(self, s);
	if (n < 0)
		abort();
	int32_t *buf = malloc((size_t)seq_len * 3 * sizeof *buf);
	if (!buf)
		abort();
	for (int64_t i = 0; i < n; i++) {
		int32_t len = 0;
		struct mg_token_rows r = {seq_len, buf, buf + seq_len,
					  buf + 2 * seq_len, &len};
		if (ops->read_tokens(self, s, &i, 1, &r))
			abort(); /* a row it counted */
		if (len < 1 || len > seq_len)
			abort();
		for (int32_t k = 0; k < len; k++)
			if (r.ids[k] < 0 || r.ids[k] >= vocab ||
			    (r.labels[k] != MG_IGNORE_INDEX &&
			     (r.labels[k] < 0 || r.labels[k] >= vocab)) ||
			    r.positions[k] < 0 || r.positions[k] >= seq_len)
				abort();
	}
	free(buf);
}

/* Options from ini (a [dataset] section) and the plugin run on them. */
static void fuzz_dataset_run(const char *ini)
{
	char path[128];
	fuzz_write("x.ini", (const uint8_t *)ini, strlen(ini), path,
		   sizeof path);
	const struct mg_plugin *p = mg_plugin_entry();
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file(path, &d);
	const struct mg_option *const schemas[] = {p->options};
	struct mg_opts *o =
		cfg ? mg_opts_build(cfg, "dataset", schemas, 1, &d) : NULL;
	if (!o || mg_diag_count(&d)) {
		mg_diag_print(stderr, &d);
		abort(); /* the options are the target's own */
	}
	struct mg_ctx ctx = {.struct_size = sizeof ctx};
	ctx.cache_dir = fuzz_scratch();
	void *self = NULL;
	if (p->create(o, &ctx, &self) == 0) {
		struct mg_sample_layout l = {0};
		if (((const struct mg_dataset_ops *)p->ops)->layout(self, &l) ||
		    l.seq_len < 1 || l.vocab_size < 1)
			abort();
		read_rows(p, self, MG_SPLIT_TRAIN, l.seq_len, l.vocab_size);
		read_rows(p, self, MG_SPLIT_TEST, l.seq_len, l.vocab_size);
		p->destroy(self);
	}
	mg_opts_free(o);
	mg_config_free(cfg);
	mg_diag_free(&d);
}

#endif
