/*
 * sweep.c - `mgrun -c FILE` when the experiment has sweep axes: read the
 * plan, validate every point, run them (sweep_run.c), then read every
 * run directory back and write the sweep's table, JSON and charts.
 * `--replot` does only the last part, from the run directories already
 * there (a sweep copied from another machine, or charts after an
 * upgrade of mgrun).
 */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <mg/log.h>

#include "analysis/analysis.h"
#include "config/util.h"
#include "dist/dist.h"
#include "engine/core_schema.h"
#include "engine/run_lock.h"

int mg_sweep_plan_load(struct mg_sweep_plan *p, const char *ini,
		       const char *const *sets, int nsets,
		       const char *const *sweeps, int nsweeps, int repeats)
{
	struct mg_diag ignored = {0}, d = {0};
	memset(p, 0, sizeof *p);
	struct mg_config *cfg = mg_config_parse_file(ini, &ignored);
	if (!cfg) { /* the session reports why, as for any run */
		mg_diag_free(&ignored);
		return 0;
	}
	/* File and --set problems are the session's to report (once);
	 * here only the sweep's own. */
	for (int i = 0; i < nsets; i++)
		mg_config_set(cfg, sets[i], &ignored);
	mg_sweep_plan_build(p, cfg, sweeps, nsweeps, repeats, &d);
	int rc = 0;
	if (mg_diag_count(&d)) {
		mg_diag_print(stderr, &d);
		fprintf(stderr,
			"mgrun: %zu error%s in the sweep, nothing run\n",
			mg_diag_count(&d), mg_diag_count(&d) == 1 ? "" : "s");
		rc = 2;
	}
	mg_diag_free(&d);
	mg_diag_free(&ignored);
	mg_config_free(cfg);
	return rc;
}

void mg_sweep_plan_print(const struct mg_sweep_plan *p, FILE *f)
{
	fprintf(f,
		"\n; [sweep]: %d point%s x %d repeat%s, each a child mgrun "
		"with "
		"these overrides\n",
		p->npoints, p->npoints == 1 ? "" : "s", p->repeats,
		p->repeats == 1 ? "" : "s");
	for (int pt = 0; pt < p->npoints; pt++) {
		char id[512];
		int vi[MG_SWEEP_MAX_AXES];
		mg_sweep_point_id(p, pt, 0, id, sizeof id);
		*strrchr(id, '-') = 0;
		mg_sweep_point_values(p, pt, vi);
		fprintf(f, ";   %-28s", id);
		for (int a = 0; a < p->naxes; a++)
			for (int j = 0;
			     j < mg_sweep_axis_nsets(&p->axes[a], vi[a]); j++) {
				char *set = mg_sweep_axis_set(&p->axes[a],
							      vi[a], j);
				fprintf(f, " %s", set);
				free(set);
			}
		fputc('\n', f);
	}
}

/* Read back every run that finished; one that cannot be read counts as
 * failed, with the reason as its last line. */
static void load_runs(struct mg_sweep *sw)
{
	const struct mg_sweep_plan *p = sw->plan;
	for (int i = 0; i < p->npoints * p->repeats; i++) {
		struct mg_sweep_run *r = &sw->runs[i];
		if (r->state != MG_RUN_FINISHED && r->state != MG_RUN_SKIPPED)
			continue;
		if (mg_run_load(&r->run, r->dir) == 0) {
			r->loaded = true;
			continue;
		}
		mg_run_free(&r->run); /* what was read before the error */
		r->state = MG_RUN_FAILED;
		snprintf(r->last, sizeof r->last, "%s", mg_last_error());
		fprintf(stderr, "mgrun: sweep: %s\n", r->last);
	}
}

/* What load_runs and the summaries allocated (runs and pts may be NULL). */
static void sweep_free(struct mg_sweep *sw)
{
	const struct mg_sweep_plan *p = sw->plan;
	for (int i = 0; sw->runs && i < p->npoints * p->repeats; i++)
		if (sw->runs[i].loaded)
			mg_run_free(&sw->runs[i].run);
	for (int pt = 0; sw->pts && pt < p->npoints; pt++) {
		free(sw->pts[pt].eff);
		free(sw->pts[pt].prof);
		free(sw->pts[pt].mem_cat);
		free(sw->pts[pt].tmet);
	}
	free(sw->pts);
	for (int k = 0; k < sw->nmem_cats; k++)
		free(sw->mem_cats[k]);
	free(sw->mem_cats);
	free(sw->runs);
}

static int write_results(struct mg_sweep *sw)
{
	char path[4300];
	int rc = 0;
	printf("\n== sweep results (%s)\n", sw->dir);
	mg_sweep_print_table(sw, stdout);
	printf("\nfiles:\n");
#define OUT(name, fn)                                                          \
	do {                                                                   \
		snprintf(path, sizeof path, "%s/" name, sw->dir);              \
		if (fn(sw, path)) {                                            \
			fprintf(stderr, "mgrun: %s\n", mg_last_error());       \
			rc = 1;                                                \
		} else {                                                       \
			printf("  %s\n", path);                                \
		}                                                              \
	} while (0)
	OUT("sweep.json", mg_sweep_write_json);
	OUT("table.csv", mg_sweep_write_csv);
	OUT("table.md", mg_sweep_write_md);
#undef OUT
	if (mg_sweep_charts(sw, stdout)) {
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		rc = 1;
	}
	fflush(stdout);
	return rc;
}

int mg_sweep_main(const struct mg_sweep_plan *p, const char *ini,
		  const char *const *sets, int nsets, const char *plugin_path)
{
	struct mg_dist_env env;
	if (mg_dist_env_detect(&env) == 0 && strcmp(env.source, "none")) {
		fprintf(stderr,
			"mgrun: a sweep starts its points itself, one after "
			"the other; run it without %s (each point may use "
			"several GPUs of this machine: run.gpus)\n",
			env.source);
		return 2;
	}
	struct mg_sweep sw = {.plan = p, .ini = ini};
	char *dir;
	int rc = mg_sweep_validate(p, ini, sets, nsets, plugin_path, &dir);
	if (rc)
		return rc;
	snprintf(sw.dir, sizeof sw.dir, "%s", dir);
	free(dir);
	char points[4200];
	snprintf(points, sizeof points, "%s/points", sw.dir);
	if (mg_mkdir_p(points)) {
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		return 1;
	}
	/* Two sweeps of one directory would run the same points twice and
	 * write the same tables: the second is refused, as for a run. */
	struct mg_run_lock lock;
	if (mg_run_lock_take(&lock, sw.dir)) {
		fprintf(stderr, "mgrun: sweep: %s\n", mg_last_error());
		return 1;
	}
	printf("mgrun: sweep of %d point%s x %d repeat%s in %s\n", p->npoints,
	       p->npoints == 1 ? "" : "s", p->repeats,
	       p->repeats == 1 ? "" : "s", sw.dir);
	fflush(stdout);
	sw.runs = calloc((size_t)p->npoints * (size_t)p->repeats,
			 sizeof *sw.runs);
	if (!sw.runs) {
		mg_run_lock_release(&lock);
		return 1;
	}
	rc = mg_sweep_execute(&sw, sets, nsets, plugin_path);
	load_runs(&sw);
	mg_sweep_summarise(&sw);
	int wrc = write_results(&sw);
	int failed = 0;
	for (int i = 0; i < p->npoints * p->repeats; i++)
		failed += sw.runs[i].state == MG_RUN_FAILED;
	if (failed) {
		printf("\nmgrun: sweep: %d run%s failed:\n", failed,
		       failed == 1 ? "" : "s");
		for (int i = 0; i < p->npoints * p->repeats; i++)
			if (sw.runs[i].state == MG_RUN_FAILED) {
				char how[64];
				printf("  %s: %s: %s\n", sw.runs[i].dir,
				       mg_sweep_run_how(&sw.runs[i], how,
							sizeof how),
				       sw.runs[i].last);
			}
		if (!rc)
			rc = 1;
	}
	sweep_free(&sw);
	mg_run_lock_release(&lock);
	return rc ? rc : wrc;
}

/* ---- --replot ------------------------------------------------------ */

/*
 * The sweep directory, <run.out_dir>/<run.name or INI stem>, from the
 * file and the --set list alone: only [run] is validated, no plugin is
 * loaded (they may live elsewhere on this machine). 0, or 2 after
 * printing why.
 */
static int sweep_dir(const char *ini, const char *const *sets, int nsets,
		     char *dir, size_t n)
{
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file(ini, &d);
	struct mg_opts *run = NULL;
	if (cfg) {
		for (int i = 0; i < nsets; i++)
			mg_config_set(cfg, sets[i], &d);
		const struct mg_option *schema[] = {mg_run_schema};
		run = mg_opts_build(cfg, "run", schema, 1, &d);
	}
	int rc = 0;
	if (!run || mg_diag_count(&d)) {
		mg_diag_print(stderr, &d);
		fprintf(stderr, "mgrun: replot: cannot tell the sweep's "
				"directory, nothing done\n");
		rc = 2;
	} else {
		const char *name = mg_opt_str(run, "name");
		char *tmp = mgc_strdup(ini), *stem = basename(tmp);
		char *dot = strrchr(stem, '.');
		if (!name[0] && dot && dot != stem)
			*dot = 0;
		snprintf(dir, n, "%s/%s", mg_run_out_dir(run),
			 name[0] ? name : stem);
		free(tmp);
	}
	mg_opts_free(run);
	mg_config_free(cfg);
	mg_diag_free(&d);
	return rc;
}

/* Why dir's run is not there: for the message of a missing run. */
static const char *missing_why(const char *dir)
{
	char path[4200];
	struct stat st;
	if (stat(dir, &st))
		return "no run directory";
	snprintf(path, sizeof path, "%s/report.json", dir);
	if (stat(path, &st))
		return "no report.json";
	return "report.json not finished (or not valid JSON)";
}

int mg_sweep_replot(const struct mg_sweep_plan *p, const char *ini,
		    const char *const *sets, int nsets)
{
	struct mg_sweep sw = {.plan = p, .ini = ini};
	int rc = sweep_dir(ini, sets, nsets, sw.dir, sizeof sw.dir);
	if (rc)
		return rc;
	if (!p->naxes) {
		fprintf(stderr,
			"mgrun: --replot: %s has no sweep axes ([sweep] S.K = "
			"V1, V2, or --sweep S.K=V1,V2)\n",
			ini);
		return 2;
	}
	char points[4200];
	struct stat st;
	snprintf(points, sizeof points, "%s/points", sw.dir);
	if (stat(points, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"mgrun: replot: %s: no such directory (has this "
			"sweep run? run.out_dir and run.name give its "
			"place), nothing done\n",
			points);
		return 1;
	}
	int nruns = p->npoints * p->repeats;
	printf("mgrun: replot of %d point%s x %d repeat%s from %s: nothing "
	       "is run\n",
	       p->npoints, p->npoints == 1 ? "" : "s", p->repeats,
	       p->repeats == 1 ? "" : "s", sw.dir);
	sw.runs = mgc_calloc((size_t)nruns, sizeof *sw.runs);
	/* Whatever configuration a finished run had: it is this point's
	 * result (the sweep's ids name the values). */
	for (int pt = 0; pt < p->npoints; pt++)
		for (int rep = 0; rep < p->repeats; rep++) {
			struct mg_sweep_run *r = MG_SWEEP_RUN(&sw, pt, rep);
			char id[512], *config;
			mg_sweep_point_id(p, pt, rep, id, sizeof id);
			snprintf(r->dir, sizeof r->dir, "%s/%s", points, id);
			bool done = mg_run_finished(r->dir, &config);
			free(config);
			r->state = done ? MG_RUN_SKIPPED : MG_RUN_MISSING;
			if (!done)
				snprintf(r->last, sizeof r->last, "%s",
					 missing_why(r->dir));
		}
	load_runs(&sw);
	int loaded = 0, missing = 0, bad = 0, wrc = 1;
	for (int i = 0; i < nruns; i++) {
		loaded += sw.runs[i].loaded;
		missing += sw.runs[i].state == MG_RUN_MISSING;
		bad += sw.runs[i].state == MG_RUN_FAILED; /* unreadable */
	}
	mg_sweep_summarise(&sw);
	if (loaded) /* else keep whatever results are there */
		wrc = write_results(&sw);
	printf("\nmgrun: replot: %d of %d run%s loaded, nothing run\n", loaded,
	       nruns, nruns == 1 ? "" : "s");
	for (int k = 0; k < 2; k++) {
		int cnt = k ? bad : missing;
		if (cnt)
			printf("mgrun: replot: %d run%s %s:\n", cnt,
			       cnt == 1 ? "" : "s",
			       k ? "unreadable" : "missing");
		for (int i = 0; i < nruns && cnt; i++)
			if (sw.runs[i].state ==
			    (k ? MG_RUN_FAILED : MG_RUN_MISSING))
				printf("  %s: %s\n", sw.runs[i].dir,
				       sw.runs[i].last);
	}
	fflush(stdout);
	if (!loaded)
		fprintf(stderr,
			"mgrun: replot: no finished run in %s: nothing "
			"written\n",
			points);
	sweep_free(&sw);
	return loaded ? wrc : 1;
}
