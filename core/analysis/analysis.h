/*
 * analysis.h - what mgrun does with finished runs: sweeps over
 * configuration axes (plan, children, tables, charts) and the A/B
 * comparison of two run directories. The mg_analysis library, linked
 * into the mgrun executable (core/cli), not into libmg.
 *
 * The pieces, one file each:
 *	sweep_plan.c	[sweep] + --sweep/--repeats -> axes and points (pure)
 *	sweep_run.c	validate every point, run each as a child mgrun
 *	sweep.c		mgrun -c FILE with axes: plan, run, summarise;
 *			--replot
 *	run_load.c	a run directory -> struct mg_run_record
 *	stats.c		the bootstrap noise test (quantiles: runtime/series.c)
 *	sweep_table.c	per-point summary: sweep.json, table.csv/.md
 *	sweep_charts.c	the SVG charts of a sweep
 *	svg.c		a minimal SVG writer (axes, lines, bars, legend)
 *	compare.c	mgrun compare RUN_A RUN_B
 */
#ifndef MG_ANALYSIS_H
#define MG_ANALYSIS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "runtime/runtime.h"

/* ---- sweep plan (sweep_plan.c) ------------------------------------- */

#define MG_SWEEP_MAX_AXES 16

/* What one value of a group axis sets: the entries of its section
 * [sweep.AXIS.VALUE], as --set takes them. */
struct mg_sweep_group {
	char **sets;  /* "model.quant=nf4" */
	char **where; /* "conf.ini:40", each entry's line */
	int n;
};

struct mg_sweep_axis {
	/* section.key, as --set takes it: "run.gpus"; a group axis's name
	 * ("technique"): each value then sets the keys of its section
	 * [sweep.technique.VALUE] (groups[value]). */
	char *key;
	char *label; /* short name for ids, tables, charts: "gpus" */
	char **values;
	int nvalues;
	char *where;  /* "conf.ini:12", "--sweep run.gpus=1,2" or
			 "--set sweep.run.gpus=1,2": for messages */
	bool numeric; /* every value is a number (a numeric chart axis) */
	struct mg_sweep_group *groups; /* a group axis: per value; or NULL */
};

/* relative_to = key=value: an efficiency column against that value. */
struct mg_sweep_rel {
	int axis, value;
	char *text; /* "gpus=1" */
};

struct mg_sweep_plan {
	struct mg_sweep_axis *axes; /* in the order given */
	int naxes;
	int npoints; /* product of the axes' value counts */
	int repeats;
	int x;	    /* the chart's x axis (an axis index) */
	int series; /* one line per value of this axis; -1: none */
	struct mg_sweep_rel *rel;
	int nrel;
	char *metric; /* "train_s", "wall_s" or "epoch_s" */
	char **profile_metrics;
	int nprofile;
	char *title; /* "" when not given */
	/* test_metrics: the models' declared test metrics to tabulate and
	 * chart ("loss", "rewards/accuracies"); none by default */
	char **test_metrics;
	int ntest;
};

/* The --set arguments of value v of axis a: one for a plain axis
 * ("run.gpus=2"), the group's entries for a group axis. */
int mg_sweep_axis_nsets(const struct mg_sweep_axis *a, int v);
char *mg_sweep_axis_set(const struct mg_sweep_axis *a, int v,
			int i); /* malloc'd */

/*
 * Build the plan from cfg's [sweep] section (keys with a dot are axes,
 * the others options), then the --sweep KEY=V1,V2,... arguments (each
 * adds an axis or replaces the one with the same key) and --repeats
 * (repeats > 0 overrides the file). Problems are added to d at the
 * entry's file:line (or the argument); returns the number added. A plan
 * with naxes == 0 means an ordinary run.
 */
int mg_sweep_plan_build(struct mg_sweep_plan *p, const struct mg_config *cfg,
			const char *const *sweeps, int nsweeps, int repeats,
			struct mg_diag *d);
void mg_sweep_plan_free(struct mg_sweep_plan *p);
/* Value index of every axis for point (0-based; first axis outermost). */
void mg_sweep_point_values(const struct mg_sweep_plan *p, int point, int *vi);
/* The point whose value indices are vi; -1 when one is out of range. */
int mg_sweep_point_index(const struct mg_sweep_plan *p, const int *vi);
/* "p03-gpus2-ddp_rr-r1" (repeat is 0-based), filesystem-safe. */
void mg_sweep_point_id(const struct mg_sweep_plan *p, int point, int repeat,
		       char *buf, size_t n);
/* "gpus=2 strategy=ddp_rr": for output lines and chart labels; axis
 * skip (-1: none) is left out. */
void mg_sweep_point_label(const struct mg_sweep_plan *p, int point, int skip,
			  char *buf, size_t n);

/* ---- numbers (stats.c) --------------------------------------------- */

/*
 * Is the ratio of medians median(b) / median(a) distinguishable from 1?
 * A percentile bootstrap (2000 resamples, fixed seed: the same inputs
 * give the same answer): lo..hi is its 95% interval. Returns 1 when the
 * interval excludes 1 (a real difference), 0 when it contains 1 (within
 * noise), -1 when either side has fewer than 5 samples.
 */
int mg_bootstrap_ratio(const double *a, int na, const double *b, int nb,
		       double *lo, double *hi);

/* ---- run directories (run_load.c) ---------------------------------- */

/* A CSV file with a header row, every cell a number (NAN when empty or
 * not a number), looked up by column name. */
struct mg_csv {
	char **names;
	int ncols, nrows;
	double *v; /* row-major, nrows x ncols */
};
int mg_csv_col(const struct mg_csv *c, const char *name); /* -1: absent */

struct mg_kv {
	char *name;
	double v;
};

enum {
	MG_PH_DATA,
	MG_PH_H2D,
	MG_PH_FWD,
	MG_PH_BWD,
	MG_PH_COMM,
	MG_PH_OPT,
	MG_PH_COUNT
};
extern const char *const mg_phase_names[MG_PH_COUNT];

/* A profiled metric of report.json's "profile", averaged over ranks. */
struct mg_prof_metric {
	char *name;
	double count, seconds, bytes;
};

/* One memory copy of profile_memcpy.csv (rank 0, profiling window). */
enum mg_copy_kind { MG_COPY_H2D, MG_COPY_D2H, MG_COPY_D2D, MG_COPY_OTHER };
struct mg_copy {
	double t;     /* s from the window's opening (may be < 0) */
	double dur;   /* s, device time */
	double bytes; /* >= 0 */
	enum mg_copy_kind kind;
};

/* One run directory as a record, read once (report.json, steps.csv, memory.csv,
 * profile_memcpy.csv). */
struct mg_run_record {
	char *dir;
	char *schema, *status, *config, *device, *precision;
	int world;
	double batch_size, total_steps;
	/* setup_s: NAN in reports written before it existed */
	double wall_s, setup_s, train_s, samples_per_s;
	double step_median; /* s: steady steps of steps.csv, or the report */
	/* report.json steps_per_epoch; epoch_s one epoch's training seconds:
	 * train_s per epoch trained when the run trained one or more, else
	 * (run.max_steps stopped it inside its first epoch) steps_per_epoch
	 * times step_median, an estimate from the steady steps it ran (NAN
	 * without them) */
	double steps_per_epoch, epoch_s;
	double test_acc; /* 0..1; NAN when not evaluated */
	/* The model's declared metrics (report.json test_metrics) of the
	 * last evaluated epoch: DPO's rewards/margins, ... */
	struct mg_kv *tmet;
	int ntmet;
	/* Mean seconds per steady step of each phase (steps.csv; rank 0's
	 * time_s / steps without it); step_mean the whole step's. */
	double phase_step[MG_PH_COUNT], step_mean;
	/* rank 0's collectives: totals over the run */
	double comm_bytes, comm_calls, comm_busy_s, comm_exposed_s,
		comm_overlapped_s;
	double h2d_bytes, d2h_bytes; /* rank 0 */
	/* token rows: tokens computed (all ranks, counters.tokens_computed)
	 * per train_s second; NAN without token data */
	double tokens_per_s;
	double mem_peak; /* device memory: the largest rank's total */
	struct mg_kv *mem;
	int nmem; /* rank 0's peak by category, as the report lists them */
	struct mg_prof_metric *prof;
	int nprof; /* 0: not profiled */
	struct mg_csv steps;
	struct mg_csv memory; /* nrows == 0 without memory.csv */
	/* profile_memcpy.csv: has_copies when the file exists (it may list
	 * none); window_s the profiling window's length from report.json
	 * (profile.window.seconds), NAN when not given. */
	bool has_copies;
	struct mg_copy *copies;
	int ncopies;
	double window_s;
};

/* Read dir; -1 after mg_error() naming the file that is missing or
 * malformed (profile_memcpy.csv: with the line). r is zeroed first and
 * must be freed either way. */
int mg_run_load(struct mg_run_record *r, const char *dir);
void mg_run_free(struct mg_run_record *r);
/*
 * The steady-state values of a steps.csv column (the first alternative
 * name present, "|"-separated: "comm_exposed_s|comm_s"): rows after the
 * first 3 of the run, not the first of an epoch, not skipped. Returns
 * their count (0 when the column is absent); *out is malloc'd.
 */
int mg_run_steady(const struct mg_run_record *r, const char *cols,
		  double **out);
/* The time metric a sweep reports: "train_s", "wall_s" or "epoch_s". */
double mg_run_metric(const struct mg_run_record *r, const char *metric);
/* Does dir's report.json say "finished"? *config gets its "config"
 * text (malloc'd; NULL when absent), to tell which run it was. */
bool mg_run_finished(const char *dir, char **config);

/* ---- sweeps (sweep.c, sweep_run.c, sweep_table.c, sweep_charts.c) -- */

enum mg_run_state {
	MG_RUN_NOT_RUN = 0,
	MG_RUN_FINISHED, /* by this sweep */
	MG_RUN_SKIPPED,	 /* finished earlier, not run again */
	MG_RUN_FAILED,
	MG_RUN_INTERRUPTED,
	MG_RUN_MISSING, /* --replot: no finished report.json */
	MG_RUN_NSTATES
};

/* One child run: a point's repeat. */
struct mg_sweep_run {
	enum mg_run_state state;
	int exit_code;	/* failed: the exit code, or 128 + signal */
	int signal;	/* failed: the signal that killed it, or 0 */
	char last[240]; /* failed: the child's last output line */
	char dir[4096]; /* its run directory */
	bool loaded;	/* run holds the run directory */
	struct mg_run_record run;
};

/* How a failed run ended: "exit 3" or "killed by SIGSEGV" (into buf). */
const char *mg_sweep_run_how(const struct mg_sweep_run *r, char *buf, size_t n);

/* A point summarised over its finished repeats (sweep_table.c). */
struct mg_sweep_point {
	int nok;		    /* repeats with a finished report */
	double t_med, t_min, t_max; /* the time metric */
	double sps, acc;	    /* medians; acc NAN when not evaluated */
	double mem_peak;	    /* largest over repeats */
	double step_med, tps;	    /* medians: steady step s, tokens/s */
	double h2d, d2h;	    /* medians: rank 0's bytes */
	double *mem_cat;	    /* per sweep mem category: largest */
	double *tmet;		    /* per plan test_metrics: medians */
	double phase[MG_PH_COUNT], step_mean; /* medians of the per-step
						  means */
	double *eff;  /* per relative_to: percent, NAN without reference */
	double *prof; /* per profile metric: median seconds; NAN: absent */
	bool has_prof;
};

struct mg_sweep {
	const struct mg_sweep_plan *plan;
	const char *ini;
	char dir[4096];		   /* the sweep directory */
	struct mg_sweep_run *runs; /* npoints x repeats, point-major */
	struct mg_sweep_point *pts;
	/* rank 0's memory categories over every run, in first-seen order
	 * ("total" and "host_pinned" left out) */
	char **mem_cats;
	int nmem_cats;
};

#define MG_SWEEP_RUN(sw, point, rep)                                           \
	(&(sw)->runs[(size_t)(point) * (sw)->plan->repeats + (rep)])

/*
 * The plan of `mgrun -c ini [--set S]... [--sweep A]... [--repeats N]`.
 * Problems of the [sweep] section and the arguments are printed; those
 * of the rest of the file are left to the session. 0, or 2.
 */
int mg_sweep_plan_load(struct mg_sweep_plan *p, const char *ini,
		       const char *const *sets, int nsets,
		       const char *const *sweeps, int nsweeps, int repeats);
/* For --print-config: the points as INI comments. */
void mg_sweep_plan_print(const struct mg_sweep_plan *p, FILE *f);
/* The whole sweep: validate, run, summarise. Returns the exit code. */
int mg_sweep_main(const struct mg_sweep_plan *p, const char *ini,
		  const char *const *sets, int nsets, const char *plugin_path);

/* Open a session for every point; print every problem once, located at
 * the sweep axis that caused it. 0, or 2 after printing. *dir gets the
 * sweep directory, <run.out_dir>/<run.name or INI stem> (malloc'd). */
int mg_sweep_validate(const struct mg_sweep_plan *p, const char *ini,
		      const char *const *sets, int nsets,
		      const char *plugin_path, char **dir);
/*
 * --replot: rebuild sweep.json, the tables and the charts from the run
 * directories already in the sweep's folder, running nothing and
 * opening no session (the points' configuration is not compared with
 * this machine's). Runs without a finished report.json are "missing".
 * Returns 0 when at least one run was loaded (and the files written).
 */
int mg_sweep_replot(const struct mg_sweep_plan *p, const char *ini,
		    const char *const *sets, int nsets);
/* Run every point and repeat not finished yet, one child at a time.
 * Returns 0, 1 when a point failed, 130 when interrupted. */
int mg_sweep_execute(struct mg_sweep *sw, const char *const *sets, int nsets,
		     const char *plugin_path);

void mg_sweep_summarise(struct mg_sweep *sw);
int mg_sweep_write_json(const struct mg_sweep *sw, const char *path);
int mg_sweep_write_csv(const struct mg_sweep *sw, const char *path);
int mg_sweep_write_md(const struct mg_sweep *sw, const char *path);
void mg_sweep_print_table(const struct mg_sweep *sw, FILE *f);
/* Writes the charts into sw->dir; prints one line per chart written. */
int mg_sweep_charts(const struct mg_sweep *sw, FILE *log);

/* ---- compare (compare.c) ------------------------------------------- */

/* mgrun compare RUN_A RUN_B [--csv]: argv[0] is "compare". */
int mg_compare_main(int argc, char **argv);

#endif
