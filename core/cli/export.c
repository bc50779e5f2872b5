/*
 * export.c - `mgrun export`: a finished run's model as a folder its
 * ecosystem loads directly (a Hugging Face folder for llama: config.json,
 * model.safetensors or, past --max-shard-size (5GB by default, as
 * transformers), its shards and model.safetensors.index.json, LoRA
 * adapters merged into the base). The run is set
 * up as `mgrun generate` sets it up (mg_inference_open, one process),
 * with its checkpoint loaded, and the model's save_hf op (ABI 1.4)
 * writes the files; the dataset's tokenizer files are copied beside them
 * so the folder is self-contained. Exit codes as mgrun's: 0 done, 1 the
 * run failed, 2 bad usage or configuration.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/cli_common.h"
#include "engine/run.h"
#include "mg/tensor_file.h"

int mg_export_main(int argc, char **argv);

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mgrun export -c FILE --out DIR [--dtype "
		"bf16|fp16|fp32|nf4|int4]\n"
		"                    [--max-shard-size SIZE] [--set S.K=V]..."
		"\n"
		"\n"
		"Writes the run's trained model (its checkpoint) as a Hugging "
		"Face folder:\n"
		"config.json and model.safetensors (or its shards), LoRA "
		"adapters merged\n"
		"into the base, and the dataset's tokenizer.json / "
		"tokenizer_config.json\n"
		"when it has a "
		"tokenizer option. Load it with transformers or model.hf_dir.\n"
		"  -c, --config FILE   experiment INI file of the run\n"
		"  --out DIR           the folder to write (created)\n"
		"  --dtype D           tensors in bf16, fp16 or fp32 (default: "
		"the run's\n"
		"                      compute dtype; fp32 when that is "
		"fp64); nf4: a\n"
		"                      bitsandbytes 4-bit folder (NF4 "
		"projections, the\n"
		"                      rest bf16); int4: the projections as "
		"packed int4\n"
		"                      with f32 scales per group (8da4w, "
		"model.quant = int4\n"
		"                      runs it), the rest bf16\n"
		"  --max-shard-size S  tensor bytes per file (default 5GB, as "
		"transformers):\n"
		"                      bytes, or with a unit: 500MB, 2GB "
		"(powers of 1000),\n"
		"                      512MiB, 2GiB (of 1024); larger models "
		"are written as\n"
		"                      model-00001-of-0000N.safetensors and\n"
		"                      model.safetensors.index.json\n"
		"  --set S.K=V         override a key (repeatable)\n"
		"  --plugin-path DIRS  colon-separated plugin folders, "
		"searched first\n");
}

struct exp_opts {
	const char *ini, *out, *plugin_path;
	const char **sets;
	int nsets;
	enum mg_dtype dtype; /* MG_DTYPE_AUTO: the run's */
	uint64_t max_shard;  /* bytes of tensor data per file */
	bool shard_given;    /* --max-shard-size on the command line */
};

/* transformers' default max_shard_size, "5GB" */
#define DEFAULT_SHARD 5000000000ULL

/* A size as transformers' max_shard_size takes it: plain bytes, or an
 * integer with a unit, B, KB, MB, GB, TB (powers of 1000) or KiB, MiB,
 * GiB, TiB (of 1024), case-insensitive; 0 if not one (or 0 bytes or
 * past 2^64). */
static uint64_t parse_size(const char *s)
{
	static const struct {
		const char *unit;
		uint64_t mul;
	} units[] = {
		{"", 1},
		{"b", 1},
		{"kb", 1000ULL},
		{"mb", 1000000ULL},
		{"gb", 1000000000ULL},
		{"tb", 1000000000000ULL},
		{"kib", 1ULL << 10},
		{"mib", 1ULL << 20},
		{"gib", 1ULL << 30},
		{"tib", 1ULL << 40},
	};
	if (!isdigit((unsigned char)s[0]))
		return 0;
	errno = 0;
	char *end;
	const unsigned long long v = strtoull(s, &end, 10);
	if (errno || !v)
		return 0;
	for (size_t i = 0; i < sizeof units / sizeof *units; i++)
		if (!strcasecmp(end, units[i].unit))
			return v > UINT64_MAX / units[i].mul
				       ? 0
				       : (uint64_t)v * units[i].mul;
	return 0;
}

static int parse_args(int argc, char **argv, struct exp_opts *o)
{
	enum { O_SET = 256, O_OUT, O_DTYPE, O_PATH, O_SHARD };
	static const struct option lo[] = {
		{"config", required_argument, 0, 'c'},
		{"set", required_argument, 0, O_SET},
		{"out", required_argument, 0, O_OUT},
		{"dtype", required_argument, 0, O_DTYPE},
		{"plugin-path", required_argument, 0, O_PATH},
		{"max-shard-size", required_argument, 0, O_SHARD},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	o->dtype = MG_DTYPE_AUTO;
	o->max_shard = DEFAULT_SHARD;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->ini = optarg;
			break;
		case O_SET:
			o->sets[o->nsets++] = optarg;
			break;
		case O_OUT:
			o->out = optarg;
			break;
		case O_DTYPE:
			if (!strcmp(optarg, "bf16"))
				o->dtype = MG_BF16;
			else if (!strcmp(optarg, "fp16"))
				o->dtype = MG_F16;
			else if (!strcmp(optarg, "fp32"))
				o->dtype = MG_F32;
			else if (!strcmp(optarg, "nf4"))
				o->dtype = MG_NF4;
			else if (!strcmp(optarg, "int4"))
				o->dtype = MG_INT4;
			else {
				fprintf(stderr,
					"mgrun export: --dtype %s: one of "
					"bf16, fp16, fp32, nf4, int4\n",
					optarg);
				return 2;
			}
			break;
		case O_PATH:
			o->plugin_path = optarg;
			break;
		case O_SHARD:
			o->max_shard = parse_size(optarg);
			o->shard_given = true;
			if (!o->max_shard) {
				fprintf(stderr,
					"mgrun export: --max-shard-size '%s': "
					"give a positive size in bytes, or "
					"with a unit: 500MB, 2GB (powers of "
					"1000), 512MiB, 2GiB (of 1024)\n",
					optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mgrun export: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	if (!o->ini || !o->out || !o->out[0]) {
		fprintf(stderr, "mgrun export: give the run (-c FILE) and the "
				"folder to write (--out DIR)\n");
		usage(stderr);
		return 2;
	}
	return 0;
}

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* One file of the export named with its size on stdout. */
static void said(const char *dir, const char *name)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	struct stat st;
	if (!stat(path, &st))
		printf("export: %s (%lld bytes)\n", path,
		       (long long)st.st_size);
}

/* The weights files written: model.safetensors, or the index and the
 * shards in order (the writer removed those of an earlier export). */
static void said_weights(const char *dir)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	if (!is_file(path)) {
		said(dir, "model.safetensors");
		return;
	}
	said(dir, "model.safetensors.index.json");
	int n = 0;
	DIR *d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		int k, m;
		char c;
		if (sscanf(e->d_name, "model-%5d-of-%5d.safetenso%c", &k, &m,
			   &c) == 3 &&
		    m > n)
			n = m;
	}
	if (d)
		closedir(d);
	for (int k = 1; k <= n; k++) {
		char name[64];
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k,
			 n);
		said(dir, name);
	}
}

/* src copied to DIR/name (atomically). */
static int copy_file(const char *src, const char *dir, const char *name)
{
	size_t len;
	char *b = mg_cli_read_all("export", src, MG_CLI_COPY_MAX, &len);
	if (!b)
		return 1;
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int rc = mg_file_write_atomic(path, b, len);
	free(b);
	if (rc) {
		fprintf(stderr, "mgrun export: %s\n", mg_last_error());
		return 1;
	}
	said(dir, name);
	return 0;
}

/* The dataset's tokenizer (tokenizer.json or its folder) and the
 * tokenizer_config.json beside it, so the folder loads without it. */
static int copy_tokenizer(const struct mg_session *s, const char *dir)
{
	const char *tok = mg_session_plugin_str(s, MG_SEC_DATASET, "tokenizer");
	if (!tok[0])
		return 0;
	char folder[4096], json[4200], cfg[4200];
	if (is_file(tok)) {
		snprintf(folder, sizeof folder, "%s", tok);
		char *slash = strrchr(folder, '/');
		snprintf(json, sizeof json, "%s", tok);
		if (slash)
			*slash = 0;
		else
			snprintf(folder, sizeof folder, ".");
	} else {
		snprintf(folder, sizeof folder, "%s", tok);
		snprintf(json, sizeof json, "%s/tokenizer.json", folder);
	}
	snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", folder);
	int rc = copy_file(json, dir, "tokenizer.json");
	if (!rc && is_file(cfg))
		rc = copy_file(cfg, dir, "tokenizer_config.json");
	return rc;
}

/* --out must not be the model's own hf_dir: the base a LoRA run (or a
 * later run of this configuration) starts from would be replaced. (An
 * --out that does not exist yet is no hf_dir.) */
static int not_the_source(const struct mg_session *s, const char *out)
{
	const char *hf = mg_session_plugin_str(s, MG_SEC_MODEL, "hf_dir");
	char a[PATH_MAX], b[PATH_MAX];
	if (hf[0] && realpath(hf, a) && realpath(out, b) && !strcmp(a, b)) {
		fprintf(stderr,
			"mgrun export: --out %s is the model's hf_dir, the "
			"weights the run starts from; write elsewhere\n",
			out);
		return 2;
	}
	return 0;
}

/* The dtype to write: --dtype, else the run's compute dtype where HF
 * has it, else fp32. */
static enum mg_dtype out_dtype(const struct exp_opts *o, const struct mg_run *t)
{
	if (o->dtype != MG_DTYPE_AUTO)
		return o->dtype;
	const enum mg_dtype c = t->ctx.compute_dtype;
	return c == MG_BF16 || c == MG_F16 ? c : MG_F32;
}

static int run_export(struct exp_opts *o, struct mg_session *s)
{
	const struct mg_loaded_plugin *lp = &s->plugin[MG_SEC_MODEL];
	const struct mg_model_ops *ops = &lp->ops.model;
	const bool sharded = ops->save_hf_sharded != NULL;
	if (o->shard_given && !sharded && ops->save_hf) {
		fprintf(stderr,
			"mgrun export: model plugin '%s' (%s, ABI %u.%u) has "
			"no save_hf_sharded op (ABI 1.6): it writes one file; "
			"leave out --max-shard-size\n",
			lp->desc->name, lp->path, lp->desc->abi_major,
			lp->desc->abi_minor);
		return 2;
	}
	if (!ops->save_hf) {
		fprintf(stderr,
			"mgrun export: model plugin '%s' (%s, ABI %u.%u) has "
			"no save_hf op (ABI 1.4), so it cannot be exported\n",
			lp->desc->name, lp->path, lp->desc->abi_major,
			lp->desc->abi_minor);
		return 2;
	}
	if (not_the_source(s, o->out))
		return 2;
	struct mg_run *t = NULL;
	char ckpt[4200];
	int saved = mg_cli_stdout_to_stderr();
	int rc = mg_inference_open(s, &t, ckpt, sizeof ckpt, true);
	mg_cli_stdout_restore(saved);
	if (rc) {
		fprintf(stderr, "mgrun export: %s\n", mg_last_error());
		return 1;
	}
	if (!ckpt[0]) {
		fprintf(stderr,
			"mgrun export: no checkpoint "
			"%s/checkpoint.safetensors: "
			"train the run first (mgrun -c %s)\n",
			t->run_dir, o->ini);
		rc = 1;
	}
	if (!rc && mg_mkdir_p(o->out)) {
		fprintf(stderr, "mgrun export: %s\n", mg_last_error());
		rc = 1;
	}
	const enum mg_dtype dt = out_dtype(o, t);
	if (!rc) {
		fprintf(stderr, "export: weights from %s, %s\n", ckpt,
			mg_dtype_name(dt));
		void *self = t->inst[MG_SEC_MODEL];
		if (sharded ? ops->save_hf_sharded(self, &t->ctx, o->out, dt,
						   o->max_shard)
			    : ops->save_hf(self, &t->ctx, o->out, dt)) {
			fprintf(stderr, "mgrun export: %s\n", mg_last_error());
			rc = 1;
		}
	}
	if (!rc) {
		said(o->out, "config.json");
		said_weights(o->out);
		rc = copy_tokenizer(s, o->out);
	}
	saved = mg_cli_stdout_to_stderr(); /* teardown's messages */
	mg_inference_close(t);
	mg_cli_stdout_restore(saved);
	return rc;
}

int mg_export_main(int argc, char **argv)
{
	struct exp_opts o;
	memset(&o, 0, sizeof o);
	o.sets = calloc((size_t)argc + 1, sizeof *o.sets);
	if (!o.sets)
		return 1;
	int rc = parse_args(argc, argv, &o);
	if (rc) {
		free(o.sets);
		return rc == 1 ? 0 : rc;
	}
	struct mg_session s;
	memset(&s, 0, sizeof s);
	rc = mg_session_open(&s, o.ini, o.sets, o.nsets, o.plugin_path);
	if (rc < 0) {
		fprintf(stderr, "mgrun export: %s\n", mg_last_error());
		rc = 1;
	}
	if (!rc)
		rc = mg_cli_single_process(&s, "export");
	if (!rc)
		rc = run_export(&o, &s);
	mg_session_close(&s);
	free(o.sets);
	return rc;
}
