/*
 * test_plan.c - the sweep plan (core/analysis/sweep_plan.c): cartesian
 * order and point ids, --sweep replacing or adding an axis, repeats from
 * the file and from --repeats, the chart and efficiency options, and the
 * exact file:line diagnostics for bad keys and values.
 *
 * Usage: test_plan [CASE...]   (no argument: every case)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/test_util.h"
#include "analysis/analysis.h"

/* Build a plan from INI text named "sweep.ini"; *diag gets the printed
 * diagnostics (malloc'd, "" when none). */
static int plan_from(struct mg_sweep_plan *p, const char *ini,
		     const char *const *sweeps, int nsweeps, int repeats,
		     char **diag)
{
	struct mg_diag d = {0};
	struct mg_config *cfg =
		mg_config_parse_string(ini, "sweep.ini", NULL, &d);
	int n = mg_sweep_plan_build(p, cfg, sweeps, nsweeps, repeats, &d);
	size_t len;
	FILE *f = open_memstream(diag, &len);
	mg_diag_print(f, &d);
	fclose(f);
	mg_diag_free(&d);
	mg_config_free(cfg);
	return n;
}

static const char base[] = "[run]\n"
			   "epochs = 1\n"
			   "[sweep]\n"
			   "run.gpus = 1, 2, 3, 4\n"
			   "strategy.name = ddp_ds, ddp_rr, ddp\n";

/* A run directory of report.json (its run object from `run`) and a
 * steps.csv of n steps of epoch 0 taking secs[i]. */
static void write_run(const char *dir, const char *run, const double *secs,
		      int n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/report.json", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fprintf(f,
		"{\"schema\": \"mgrun-report-2\", \"status\": \"finished\", "
		"\"run\": {%s}, \"ranks\": [{}]}\n",
		run);
	fclose(f);
	snprintf(path, sizeof path, "%s/steps.csv", dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fprintf(f, "step,epoch,step_s\n");
	for (int i = 0; i < n; i++)
		fprintf(f, "%d,0,%g\n", i, secs[i]);
	fclose(f);
}

/* epoch_s: a whole epoch measured (train_s per epoch), or, for a run
 * that max_steps stopped early, steps_per_epoch x the steady median
 * (the first three steps are warm-up); a sweep takes it as its metric. */
static void t_epoch_metric(void)
{
	char dir[] = "/tmp/mg_test_plan_XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	static const double secs[] = {9, 9, 9, 1.0, 1.5, 1.25, 1.25, 2.0};
	static const struct {
		const char *run;
		double epoch_s; /* NAN: none */
	} cases[] = {
		/* 8 of 40 steps: 40 x median(1.0, 1.5, 1.25, 1.25, 2.0) */
		{"\"steps_per_epoch\": 40, \"total_steps\": 8", 50},
		/* two whole epochs of 4 steps in 34 s */
		{"\"steps_per_epoch\": 4, \"total_steps\": 8", 17},
		/* no steps_per_epoch (an older report): no estimate */
		{"\"total_steps\": 8", NAN},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char run[160];
		snprintf(run, sizeof run, "\"world\": 1, \"train_s\": 34, %s",
			 cases[i].run);
		write_run(dir, run, secs, 8);
		struct mg_run_record r;
		CHECK(mg_run_load(&r, dir) == 0);
		const double want = cases[i].epoch_s, got = r.epoch_s;
		CHECK(isnan(want) ? isnan(got) : fabs(got - want) < 1e-12);
		CHECK(isnan(want) ? isnan(mg_run_metric(&r, "epoch_s"))
				  : mg_run_metric(&r, "epoch_s") == got);
		CHECK(mg_run_metric(&r, "train_s") == 34);
		mg_run_free(&r);
	}
	struct mg_sweep_plan p;
	char *diag;
	CHECK(plan_from(&p, "[sweep]\nrun.gpus = 1, 2\nmetric = epoch_s\n",
			NULL, 0, 0, &diag) == 0);
	CHECK_STR(p.metric, "epoch_s");
	free(diag);
	mg_sweep_plan_free(&p);
	char path[512];
	snprintf(path, sizeof path, "%s/report.json", dir);
	remove(path);
	snprintf(path, sizeof path, "%s/steps.csv", dir);
	remove(path);
	rmdir(dir);
}

static void t_cartesian_order(void)
{
	struct mg_sweep_plan p;
	char *diag, id[256], label[256];
	int vi[MG_SWEEP_MAX_AXES];
	CHECK(plan_from(&p, base, NULL, 0, 0, &diag) == 0);
	CHECK_STR(diag, "");
	CHECK(p.naxes == 2 && p.npoints == 12 && p.repeats == 1);
	CHECK_STR(p.axes[0].label, "gpus");
	CHECK_STR(p.axes[1].label, "strategy");
	CHECK_STR(p.axes[0].where, "sweep.ini:4");
	CHECK(p.axes[0].numeric && !p.axes[1].numeric);
	/* first axis outermost, as nested loops in the order written */
	mg_sweep_point_values(&p, 0, vi);
	CHECK(vi[0] == 0 && vi[1] == 0);
	mg_sweep_point_values(&p, 1, vi);
	CHECK(vi[0] == 0 && vi[1] == 1);
	mg_sweep_point_values(&p, 4, vi);
	CHECK(vi[0] == 1 && vi[1] == 1);
	CHECK(mg_sweep_point_index(&p, vi) == 4);
	mg_sweep_point_values(&p, 11, vi);
	CHECK(vi[0] == 3 && vi[1] == 2);
	mg_sweep_point_id(&p, 4, 0, id, sizeof id);
	CHECK_STR(id, "p05-gpus2-ddp_rr-r1");
	mg_sweep_point_id(&p, 11, 2, id, sizeof id);
	CHECK_STR(id, "p12-gpus4-ddp-r3");
	mg_sweep_point_label(&p, 4, -1, label, sizeof label);
	CHECK_STR(label, "gpus=2 strategy=ddp_rr");
	mg_sweep_point_label(&p, 4, 0, label, sizeof label);
	CHECK_STR(label, "strategy=ddp_rr");
	/* defaults: x the first axis, series the second, train_s */
	CHECK(p.x == 0 && p.series == 1 && p.nrel == 0);
	CHECK_STR(p.metric, "train_s");
	CHECK(p.nprofile == 4);
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_sweep_arg_replaces(void)
{
	struct mg_sweep_plan p;
	char *diag;
	const char *sw[] = {"run.gpus=4,8", "run.precision = fp32 , fp16"};
	CHECK(plan_from(&p, base, sw, 2, 0, &diag) == 0);
	CHECK_STR(diag, "");
	CHECK(p.naxes == 3 && p.npoints == 2 * 3 * 2);
	CHECK_STR(p.axes[0].key, "run.gpus"); /* in its place */
	CHECK(p.axes[0].nvalues == 2);
	CHECK_STR(p.axes[0].values[1], "8");
	CHECK_STR(p.axes[0].where, "--sweep run.gpus=4,8");
	CHECK_STR(p.axes[2].key, "run.precision");
	CHECK_STR(p.axes[2].values[1], "fp16");
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_repeats(void)
{
	struct mg_sweep_plan p;
	char *diag;
	static const char ini[] = "[sweep]\nrun.gpus = 1, 2\nrepeats = 3\n";
	CHECK(plan_from(&p, ini, NULL, 0, 0, &diag) == 0);
	CHECK(p.repeats == 3);
	free(diag);
	mg_sweep_plan_free(&p);
	CHECK(plan_from(&p, ini, NULL, 0, 2, &diag) == 0); /* --repeats 2 */
	CHECK(p.repeats == 2);
	free(diag);
	mg_sweep_plan_free(&p);
	CHECK(plan_from(&p, "[sweep]\nrun.gpus = 1\nrepeats = 0\n", NULL, 0, 0,
			&diag) == 1);
	CHECK_STR(diag, "sweep.ini:3: [sweep] repeats: '0': expected a whole "
			"number in [1, 1000]\n");
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_bad_option_key(void)
{
	struct mg_sweep_plan p;
	char *diag;
	static const char ini[] = "[sweep]\n"
				  "run.gpus = 1, 2\n"
				  "repeets = 2\n"
				  "relative = run.gpus=1\n"
				  "metric = wal_s\n";
	CHECK(plan_from(&p, ini, NULL, 0, 0, &diag) == 3);
	CHECK_STR(diag,
		  "sweep.ini:3: [sweep] repeets: unknown key 'repeets' (did "
		  "you mean 'repeats'?)\n"
		  "sweep.ini:4: [sweep] relative: unknown key 'relative' (did "
		  "you mean 'relative_to'?)\n"
		  "sweep.ini:5: [sweep] metric: 'wal_s' is not train_s, "
		  "wall_s or epoch_s (did you mean 'wall_s'?)\n");
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_empty_value(void)
{
	struct mg_sweep_plan p;
	char *diag;
	static const char ini[] = "[sweep]\n"
				  "run.gpus =\n"
				  "run.precision = fp32,,fp16\n"
				  "run.seed = 1, 2, 1\n"
				  "gpus = 1\n";
	const char *sw[] = {"run.batch_size=", "nodot=1"};
	CHECK(plan_from(&p, ini, sw, 2, 0, &diag) == 6);
	CHECK_STR(diag,
		  "sweep.ini:2: [sweep] run.gpus: empty value: give one or "
		  "more values separated by commas\n"
		  "sweep.ini:3: [sweep] run.precision: empty value (item 2 of "
		  "'fp32,,fp16')\n"
		  "sweep.ini:4: [sweep] run.seed: value '1' given twice\n"
		  "sweep.ini:5: [sweep] gpus: unknown key 'gpus' (axes are "
		  "SECTION.KEY; options: repeats, x, series, relative_to, "
		  "metric, profile_metrics, title, test_metrics; a group axis "
		  "needs [sweep.gpus.VALUE] sections)\n"
		  "--sweep run.batch_size=: empty value: give one or more "
		  "values separated by commas\n"
		  "--sweep nodot=1: an axis is SECTION.KEY = V1, V2, ... (like "
		  "--set), or NAME = V1, V2, ... with a section "
		  "[sweep.NAME.V] per value (a group axis)\n");
	CHECK(p.naxes == 0 && p.npoints == 0);
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_options(void)
{
	struct mg_sweep_plan p;
	char *diag;
	static const char ini[] =
		"[sweep]\n"
		"run.precision = fp64, fp32, fp16\n"
		"run.gpus = 1, 2, 4\n"
		"x = gpus\n"
		"relative_to = run.gpus=1, precision=fp64\n"
		"metric = wall_s\n"
		"profile_metrics = memcpy_h2d, nccl_AllReduce\n"
		"title = Table 2 & <friends>\n";
	CHECK(plan_from(&p, ini, NULL, 0, 0, &diag) == 0);
	CHECK_STR(diag, "");
	CHECK(p.x == 1 && p.series == 0); /* series: the first other axis */
	CHECK(p.nrel == 2);
	CHECK(p.rel[0].axis == 1 && p.rel[0].value == 0);
	CHECK_STR(p.rel[1].text, "precision=fp64");
	CHECK_STR(p.metric, "wall_s");
	CHECK(p.nprofile == 2);
	CHECK_STR(p.profile_metrics[1], "nccl_AllReduce");
	CHECK_STR(p.title, "Table 2 & <friends>");
	free(diag);
	mg_sweep_plan_free(&p);

	static const char bad[] = "[sweep]\n"
				  "run.gpus = 1, 2\n"
				  "x = run.gpu\n"
				  "relative_to = run.gpus=3, run.gpus\n"
				  "series = none\n";
	CHECK(plan_from(&p, bad, NULL, 0, 0, &diag) == 3);
	CHECK_STR(diag,
		  "sweep.ini:3: [sweep] x: 'run.gpu' is not an axis (did you "
		  "mean 'run.gpus'?)\n"
		  "sweep.ini:4: [sweep] relative_to: '3' is not a value of "
		  "run.gpus (1, 2)\n"
		  "sweep.ini:4: [sweep] relative_to: 'run.gpus': expected "
		  "AXIS=VALUE\n");
	CHECK(p.series == -1);
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_ids_and_lists(void)
{
	struct mg_sweep_plan p;
	char *diag, id[256];
	static const char ini[] = "[sweep]\n"
				  "model.hidden = 128,64 | 256\n"
				  "run.pin_memory = false, true\n"
				  "dataset.dir = ../data/a b, ./x\n"
				  "[run]\n";
	CHECK(plan_from(&p, ini, NULL, 0, 0, &diag) == 0);
	CHECK_STR(diag, "");
	CHECK(p.axes[0].nvalues == 2);
	CHECK_STR(p.axes[0].values[0], "128,64");
	mg_sweep_point_id(&p, 0, 0, id, sizeof id);
	CHECK_STR(id, "p01-hidden128_64-pin_memory_false-_._data_a_b-r1");
	mg_sweep_point_id(&p, 7, 1, id, sizeof id);
	CHECK_STR(id, "p08-hidden256-pin_memory_true-__x-r2");
	free(diag);
	mg_sweep_plan_free(&p);
	/* reserved axes, and no sweep at all */
	CHECK(plan_from(&p, "[sweep]\nrun.name = a, b\n", NULL, 0, 0, &diag) ==
	      1);
	CHECK_STR(diag, "sweep.ini:2: [sweep] run.name: cannot be swept: the "
			"sweep sets it for every point\n");
	free(diag);
	mg_sweep_plan_free(&p);
	CHECK(plan_from(&p, "[run]\nepochs = 1\n[sweep]\nrepeats = 2\n", NULL,
			0, 0, &diag) == 0);
	CHECK(p.naxes == 0 && p.npoints == 0);
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_bootstrap(void)
{
	double a[40], b[40], c[40], lo, hi;
	for (int i = 0; i < 40; i++) {
		a[i] = 1.0 + 0.01 * ((i * 7) % 10);
		b[i] = 1.0 + 0.01 * ((i * 3) % 10); /* same distribution */
		c[i] = 1.2 + 0.01 * ((i * 3) % 10); /* 20% slower */
	}
	CHECK(mg_bootstrap_ratio(a, 40, b, 40, &lo, &hi) == 0);
	CHECK(lo <= 1 && hi >= 1);
	CHECK(mg_bootstrap_ratio(a, 40, c, 40, &lo, &hi) == 1);
	CHECK(lo > 1.1 && hi < 1.3);
	CHECK(mg_bootstrap_ratio(a, 4, c, 40, &lo, &hi) == -1);
	double q[] = {4, 1, 3, 2};
	CHECK(mg_median(q, 4) == 2.5);
	CHECK(mg_quantile(q, 4, 0) == 1 && mg_quantile(q, 4, 1) == 4);
}

/* A group axis: each value sets the keys of its [sweep.AXIS.VALUE]. */
static const char group_ini[] = "[sweep]\n"
				"technique = lora, dpo\n"
				"run.seed = 1, 2\n"
				"test_metrics = loss, rewards/accuracies\n"
				"[sweep.technique.lora]\n"
				"model.lora_rank = 8\n"
				"[sweep.technique.dpo]\n"
				"model.objective = dpo\n"
				"dataset.pairs = true\n";

static void t_group_axis(void)
{
	struct mg_sweep_plan p;
	char *diag, id[256], *set;
	CHECK(plan_from(&p, group_ini, NULL, 0, 0, &diag) == 0);
	CHECK_STR(diag, "");
	CHECK(p.naxes == 2 && p.npoints == 4);
	CHECK_STR(p.axes[0].key, "technique");
	CHECK_STR(p.axes[0].label, "technique");
	CHECK(!p.axes[0].numeric && p.axes[0].groups && !p.axes[1].groups);
	CHECK(mg_sweep_axis_nsets(&p.axes[0], 0) == 1);
	CHECK(mg_sweep_axis_nsets(&p.axes[0], 1) == 2);
	set = mg_sweep_axis_set(&p.axes[0], 1, 1);
	CHECK_STR(set, "dataset.pairs=true");
	free(set);
	CHECK_STR(p.axes[0].groups[1].where[0], "sweep.ini:8");
	CHECK(mg_sweep_axis_nsets(&p.axes[1], 1) == 1);
	set = mg_sweep_axis_set(&p.axes[1], 1, 0);
	CHECK_STR(set, "run.seed=2");
	free(set);
	mg_sweep_point_id(&p, 2, 0, id, sizeof id);
	CHECK_STR(id, "p03-dpo-seed1-r1");
	CHECK(p.ntest == 2);
	CHECK_STR(p.test_metrics[1], "rewards/accuracies");
	free(diag);
	mg_sweep_plan_free(&p);
	/* --sweep narrows a group axis to some of its values */
	const char *sw[] = {"technique=dpo"};
	CHECK(plan_from(&p, group_ini, sw, 1, 0, &diag) == 0);
	CHECK(p.naxes == 2 && p.npoints == 2 && p.axes[0].nvalues == 1);
	CHECK(mg_sweep_axis_nsets(&p.axes[0], 0) == 2);
	free(diag);
	mg_sweep_plan_free(&p);
}

static void t_group_errors(void)
{
	struct mg_sweep_plan p;
	char *diag;
	static const char ini[] = "[sweep]\n"
				  "technique = lora, qat\n"
				  "model.lora_rank = 4, 8\n"
				  "[sweep.technique.lora]\n"
				  "model.lora_rank = 8\n"
				  "nodot = 1\n"
				  "run.name = x\n"
				  "[sweep.other.v]\n"
				  "run.seed = 1\n"
				  "[sweep.technique]\n";
	CHECK(plan_from(&p, ini, NULL, 0, 0, &diag) == 5);
	CHECK_STR(diag,
		  "sweep.ini:2: [sweep] technique: value 'qat': no section "
		  "[sweep.technique.qat] saying what it sets\n"
		  "sweep.ini:6: [sweep.technique.lora] nodot: expected "
		  "SECTION.KEY = VALUE (like --set)\n"
		  "sweep.ini:7: [sweep.technique.lora] run.name: cannot be "
		  "set per point: the sweep sets it for every point\n"
		  "sweep.ini:8: [sweep.other.v] no group axis 'other' in "
		  "[sweep] (give other = v, ... there)\n"
		  "sweep.ini:10: [sweep.technique] a group section is "
		  "[sweep.AXIS.VALUE]\n");
	free(diag);
	mg_sweep_plan_free(&p);
	/* a key set by a group and by an axis of its own */
	static const char both[] = "[sweep]\n"
				   "technique = lora\n"
				   "model.lora_rank = 4, 8\n"
				   "[sweep.technique.lora]\n"
				   "model.lora_rank = 8\n";
	CHECK(plan_from(&p, both, NULL, 0, 0, &diag) == 1);
	CHECK_STR(diag, "sweep.ini:5: [sweep.technique.lora] "
			"model.lora_rank: also the axis model.lora_rank "
			"(sweep.ini:3): set it in one place\n");
	free(diag);
	mg_sweep_plan_free(&p);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"cartesian_order", t_cartesian_order},
	{"sweep_arg_replaces", t_sweep_arg_replaces},
	{"repeats", t_repeats},
	{"bad_option_key", t_bad_option_key},
	{"empty_value", t_empty_value},
	{"options", t_options},
	{"ids_and_lists", t_ids_and_lists},
	{"bootstrap", t_bootstrap},
	{"group_axis", t_group_axis},
	{"group_errors", t_group_errors},
	{"epoch_metric", t_epoch_metric},
};

int main(int argc, char **argv)
{
	int ran = 0;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		bool want = argc < 2;
		for (int j = 1; j < argc; j++)
			want = want || !strcmp(argv[j], cases[i].name);
		if (!want)
			continue;
		int before = failures;
		cases[i].fn();
		printf("%s %s\n", failures == before ? "ok  " : "FAIL",
		       cases[i].name);
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "test_plan: no such case\n");
		return 2;
	}
	return failures ? 1 : 0;
}
