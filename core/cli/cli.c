/*
 * cli.c - mgrun's command line: run an experiment, a sweep or a compare,
 * tokenize text (tokenize.c), generate text (generate.c), export a model
 * (export.c), or inspect plugins and the effective configuration. Part
 * of the mgrun executable, not libmg: it is what links the analysis
 * library.
 * Exit codes: 0 success, 1 the run failed, 2 bad usage or configuration
 * (nothing run).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "dist/dist.h"
#include "engine/core_schema.h"
#include "engine/run.h"

int mg_main(int argc, char **argv);
int mg_tokenize_main(int argc, char **argv);  /* tokenize.c */
int mg_generate_main(int argc, char **argv);  /* generate.c */
int mg_export_main(int argc, char **argv);    /* export.c */
int mg_ckpt_diff_main(int argc, char **argv); /* ckpt_diff.c */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mgrun -c FILE [--set SECTION.KEY=VALUE]... [--resume]\n"
		"       mgrun -c FILE [--sweep S.K=V1,V2,...]... [--repeats "
		"N]\n"
		"       mgrun -c FILE --replot [--sweep ...] [--repeats N]\n"
		"       mgrun compare RUN_A RUN_B [--csv]\n"
		"       mgrun tokenize --tokenizer PATH [--json] "
		"[--no-special] [--decode]\n"
		"       mgrun generate -c FILE [--prompt TEXT | --prompt-file "
		"F | --prompts F]\n"
		"              [--ids [\"ID ...\"]] [--max-new-tokens N] "
		"[--temperature T] "
		"[--top-k K]\n"
		"              [--top-p P] [--seed S] [--greedy] [--tokenizer "
		"PATH] (mgrun generate -h)\n"
		"       mgrun export -c FILE --out DIR [--dtype "
		"bf16|fp16|fp32] "
		"(mgrun export -h)\n"
		"       mgrun ckpt-diff A B [--tolerance X] [--prefix P]\n"
		"       mgrun -c FILE --eval-only\n"
		"       mgrun -c FILE --print-config\n"
		"       mgrun --list-plugins\n"
		"       mgrun --help-plugin NAME\n"
		"       mgrun --help-config\n"
		"\n"
		"  -c, --config FILE     experiment INI file\n"
		"  --set S.K=V           override a key (repeatable); --set "
		"@SECTION applies\n"
		"                        the S.K = V lines of the file's "
		"[SECTION] (a sweep\n"
		"                        group value) as if written in "
		"their sections\n"
		"  --resume              continue from the run directory's "
		"checkpoint; refused\n"
		"                        when an option that changes what is "
		"trained or a\n"
		"                        file the run reads differs from the "
		"checkpoint's\n"
		"  --resume-changed LIST with --resume: the options "
		"(SECTION.KEY) and files\n"
		"                        that were changed on purpose, "
		"comma-separated\n"
		"  --eval-only           the test split's metrics of the run "
		"directory's\n"
		"                        checkpoint (or of the initial "
		"weights), also in\n"
		"                        RUN_DIR/eval.json\n"
		"  --sweep S.K=V1,V2     sweep axis: one run per value "
		"(repeatable; replaces\n"
		"                        the [sweep] axis of that key; see "
		"docs/SWEEPS.md)\n"
		"  --repeats N           runs per sweep point\n"
		"  --no-sweep            ignore [sweep]: one ordinary run\n"
		"  --replot              rebuild a sweep's tables and charts "
		"from its finished\n"
		"                        points, running nothing\n"
		"  --plugin-path DIRS    colon-separated plugin folders, "
		"searched first\n"
		"  --print-config        print the effective configuration "
		"and exit\n"
		"  --list-plugins        list the plugins found on the plugin "
		"path\n"
		"  --help-plugin NAME    a plugin's options\n"
		"  --help-config         the [run], [optimizer] and [profile] "
		"options\n"
		"  --version             print the version and plugin ABI\n");
}

static void list_one(const struct mg_loaded_plugin *p, void *arg)
{
	(void)arg;
	printf("  %-9s %-14s %-6s %s\n      %s\n",
	       mg_plugin_kind_name(p->desc->kind), p->desc->name,
	       p->desc->version,
	       p->desc->description ? p->desc->description : "", p->path);
}

struct help_arg {
	const char *name;
	int found;
};

static void help_one(const struct mg_loaded_plugin *p, void *arg)
{
	struct help_arg *h = arg;
	if (h->found || strcmp(p->desc->name, h->name))
		return;
	h->found = 1;
	printf("%s plugin '%s' %s (%s)\n%s\n\n[%s]\n",
	       mg_plugin_kind_name(p->desc->kind), p->desc->name,
	       p->desc->version, p->path,
	       p->desc->description ? p->desc->description : "",
	       p->desc->kind == MG_PLUGIN_MODEL	    ? "model"
	       : p->desc->kind == MG_PLUGIN_DATASET ? "dataset"
						    : "strategy");
	/* One table: the core's name/path keys, then the plugin's own. */
	size_t n = 0, k = 0;
	for (const struct mg_option *o = mg_plugin_section_schema; o->name; o++)
		n++;
	for (const struct mg_option *o = p->desc->options; o && o->name; o++)
		n++;
	struct mg_option *all = calloc(n + 1, sizeof *all);
	if (!all)
		return;
	for (const struct mg_option *o = mg_plugin_section_schema; o->name; o++)
		all[k++] = *o;
	for (const struct mg_option *o = p->desc->options; o && o->name; o++)
		all[k++] = *o;
	mg_schema_print_help(stdout, all);
	free(all);
}

/*
 * Does this process start the ranks itself (run.gpus > 1 and no outer
 * launcher set a rank)? *rc becomes 2 when the request cannot be met.
 */
static bool wants_launcher(const struct mg_session *s, int *rc)
{
	struct mg_dist_env e;
	int64_t gpus = mg_opt_int(s->run, "gpus");
	*rc = 0;
	if (gpus <= 1)
		return false;
	if (mg_dist_env_detect(&e)) {
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		*rc = 2;
		return true;
	}
	if (strcmp(e.source, "none"))
		return false; /* srun/mpirun/our launcher made this a rank */
	if (mg_opt_enum(s->run, "device") != MG_DEVICE_CUDA) {
		fprintf(stderr,
			"mgrun: run.gpus = %lld needs run.device = cuda; CPU "
			"ranks communicate through MPI: mpirun -np %lld mgrun "
			"-c %s\n",
			(long long)gpus, (long long)gpus, s->ini_path);
		*rc = 2;
	}
	return true;
}

/* Re-run this very command line as run.gpus supervised ranks. */
static int launch_ranks(const struct mg_session *s, int argc, char **argv)
{
	char **av = calloc((size_t)argc + 1, sizeof *av);
	if (!av)
		return 1;
	av[0] = "/proc/self/exe";
	for (int i = 1; i < argc; i++)
		av[i] = argv[i];
	struct mg_launch_opts o = {
		.argv = av,
		.nranks = (int)mg_opt_int(s->run, "gpus"),
	};
	fprintf(stderr, "mgrun: starting %d ranks, one per GPU\n", o.nranks);
	int rc = mg_launch(&o);
	free(av);
	return rc;
}

int mg_main(int argc, char **argv)
{
	enum {
		OPT_SET = 256,
		OPT_RESUME,
		OPT_PATH,
		OPT_PRINT,
		OPT_LIST,
		OPT_HELP_PLUGIN,
		OPT_HELP_CONFIG,
		OPT_VERSION,
		OPT_SWEEP,
		OPT_REPEATS,
		OPT_NO_SWEEP,
		OPT_REPLOT,
		OPT_EVAL_ONLY,
		OPT_RESUME_CHANGED,
	};
	static const struct option longopts[] = {
		{"config", required_argument, 0, 'c'},
		{"set", required_argument, 0, OPT_SET},
		{"resume", no_argument, 0, OPT_RESUME},
		{"plugin-path", required_argument, 0, OPT_PATH},
		{"print-config", no_argument, 0, OPT_PRINT},
		{"list-plugins", no_argument, 0, OPT_LIST},
		{"help-plugin", required_argument, 0, OPT_HELP_PLUGIN},
		{"help-config", no_argument, 0, OPT_HELP_CONFIG},
		{"version", no_argument, 0, OPT_VERSION},
		{"sweep", required_argument, 0, OPT_SWEEP},
		{"repeats", required_argument, 0, OPT_REPEATS},
		{"no-sweep", no_argument, 0, OPT_NO_SWEEP},
		{"replot", no_argument, 0, OPT_REPLOT},
		{"eval-only", no_argument, 0, OPT_EVAL_ONLY},
		{"resume-changed", required_argument, 0, OPT_RESUME_CHANGED},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *ini = NULL, *plugin_path = NULL, *help_plugin = NULL,
		   *resume_changed = NULL;
	const char **sets = calloc((size_t)argc + 1, sizeof *sets);
	int nsets = 0, resume = 0, print = 0, list = 0, help_config = 0, c;
	const char *sweeps[MG_SWEEP_MAX_AXES];
	int nsweeps = 0, repeats = 0, no_sweep = 0, replot = 0, eval_only = 0;
	if (argc > 1 && !strcmp(argv[1], "compare")) {
		free(sets);
		return mg_compare_main(argc - 1, argv + 1);
	}
	if (argc > 1 && !strcmp(argv[1], "tokenize")) {
		free(sets);
		return mg_tokenize_main(argc - 1, argv + 1);
	}
	if (argc > 1 && !strcmp(argv[1], "generate")) {
		free(sets);
		return mg_generate_main(argc - 1, argv + 1);
	}
	if (argc > 1 && !strcmp(argv[1], "ckpt-diff")) {
		free(sets);
		return mg_ckpt_diff_main(argc - 1, argv + 1);
	}
	if (argc > 1 && !strcmp(argv[1], "export")) {
		free(sets);
		return mg_export_main(argc - 1, argv + 1);
	}
	if (!sets)
		return 1;
	while ((c = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			ini = optarg;
			break;
		case OPT_SET:
			sets[nsets++] = optarg;
			break;
		case OPT_RESUME:
			resume = 1;
			break;
		case OPT_EVAL_ONLY:
			eval_only = 1;
			break;
		case OPT_RESUME_CHANGED:
			resume_changed = optarg;
			break;
		case OPT_SWEEP:
			if (nsweeps == MG_SWEEP_MAX_AXES) {
				fprintf(stderr, "mgrun: more than %d --sweep\n",
					MG_SWEEP_MAX_AXES);
				free(sets);
				return 2;
			}
			sweeps[nsweeps++] = optarg;
			break;
		case OPT_REPEATS: {
			char *end;
			long n = strtol(optarg, &end, 10);
			if (*end || n < 1 || n > 1000) {
				fprintf(stderr,
					"mgrun: --repeats %s: expected a "
					"whole number in [1, 1000]\n",
					optarg);
				free(sets);
				return 2;
			}
			repeats = (int)n;
			break;
		}
		case OPT_NO_SWEEP:
			no_sweep = 1;
			break;
		case OPT_REPLOT:
			replot = 1;
			break;
		case OPT_PATH:
			plugin_path = optarg;
			break;
		case OPT_PRINT:
			print = 1;
			break;
		case OPT_LIST:
			list = 1;
			break;
		case OPT_HELP_PLUGIN:
			help_plugin = optarg;
			break;
		case OPT_HELP_CONFIG:
			help_config = 1;
			break;
		case OPT_VERSION:
			printf("mgrun %s (plugin ABI %d.%d)\n", MG_VERSION,
			       MG_ABI_MAJOR, MG_ABI_MINOR);
			free(sets);
			return 0;
		case 'h':
			usage(stdout);
			free(sets);
			return 0;
		default:
			usage(stderr);
			free(sets);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mgrun: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		free(sets);
		return 2;
	}
	int rc = 0;
	if (list || help_plugin) {
		struct mg_search_path sp;
		mg_search_path_init(&sp, plugin_path);
		if (list) {
			printf("plugins (search path:");
			for (int i = 0; i < sp.n; i++)
				printf(" %s", sp.dirs[i]);
			printf(")\n");
			mg_plugin_foreach(&sp, list_one, NULL);
		} else {
			struct help_arg h = {help_plugin, 0};
			mg_plugin_foreach(&sp, help_one, &h);
			if (!h.found) {
				fprintf(stderr,
					"mgrun: no plugin '%s' on the plugin "
					"path (see mgrun --list-plugins)\n",
					help_plugin);
				rc = 2;
			}
		}
		mg_search_path_free(&sp);
		free(sets);
		return rc;
	}
	if (help_config) {
		printf("[run]\n");
		mg_schema_print_help(stdout, mg_run_schema);
		printf("\n[optimizer]\n");
		mg_schema_print_help(stdout, mg_optimizer_schema);
		printf("\n[profile]\n");
		mg_schema_print_help(stdout, mg_profile_schema);
		free(sets);
		return 0;
	}
	if (!ini) {
		fprintf(stderr, "mgrun: no experiment file (-c FILE)\n");
		usage(stderr);
		free(sets);
		return 2;
	}
	/* Sweep axes ([sweep] or --sweep) make this a sweep of child runs;
	 * without any it is an ordinary run. */
	struct mg_sweep_plan plan = {0};
	if (no_sweep && (nsweeps || repeats)) {
		fprintf(stderr, "mgrun: --no-sweep with --sweep/--repeats\n");
		rc = 2;
	} else if (!no_sweep) {
		rc = mg_sweep_plan_load(&plan, ini, sets, nsets, sweeps,
					nsweeps, repeats);
	}
	if (!rc && repeats && !plan.naxes) {
		fprintf(stderr, "mgrun: --repeats needs a sweep axis "
				"([sweep] S.K = V1, V2 or --sweep)\n");
		rc = 2;
	}
	if (!rc && replot && (no_sweep || resume || print)) {
		fprintf(stderr, "mgrun: --replot with --no-sweep, --resume or "
				"--print-config\n");
		rc = 2;
	}
	if (!rc && eval_only && (resume || replot || plan.naxes)) {
		fprintf(stderr, "mgrun: --eval-only runs one evaluation: not "
				"with --resume, --replot or a sweep\n");
		rc = 2;
	}
	if (!rc && resume_changed && !resume) {
		fprintf(stderr, "mgrun: --resume-changed goes with --resume\n");
		rc = 2;
	}
	if (!rc && plan.naxes && resume) {
		fprintf(stderr, "mgrun: --resume does not apply to a sweep: "
				"run it again to continue it\n");
		rc = 2;
	}
	if (rc || (plan.naxes && !print) || replot) {
		if (!rc && replot)
			rc = mg_sweep_replot(&plan, ini, sets, nsets);
		else if (!rc)
			rc = mg_sweep_main(&plan, ini, sets, nsets,
					   plugin_path);
		mg_sweep_plan_free(&plan);
		free(sets);
		return rc;
	}
	struct mg_session s;
	rc = mg_session_open(&s, ini, sets, nsets, plugin_path);
	if (rc == 0) {
		if (print && plan.naxes) {
			/* every point's values checked, as a sweep run
			 * would before starting */
			char *dir = NULL;
			rc = mg_sweep_validate(&plan, ini, sets, nsets,
					       plugin_path, &dir);
			free(dir);
			if (!rc) {
				mg_session_print(&s, stdout);
				mg_sweep_plan_print(&plan, stdout);
			}
		} else if (print)
			mg_session_print(&s, stdout);
		else if (wants_launcher(&s, &rc))
			rc = rc ? rc : launch_ranks(&s, argc, argv);
		else if (eval_only)
			rc = mg_eval_only(&s);
		else {
			s.resume_changed = resume_changed;
			rc = mg_train(&s, resume);
		}
	} else if (rc < 0) {
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		rc = 1;
	}
	mg_session_close(&s);
	mg_sweep_plan_free(&plan);
	free(sets);
	return rc;
}
