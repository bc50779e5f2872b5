/*
 * report.h - the run directory's steps.csv, memory.csv and report.json,
 * and the summary printed at the end of a run (report.c).
 *
 * The report sees the run through struct mg_run_view, a narrow view the
 * trainer fills (mg_run_view() in trainer.c) right before each call:
 * only what the report prints, so report.c does not depend on the
 * trainer's layout. Its own state (the open steps.csv, the step times, the
 * gathered per-rank rows) is struct mg_report, which the trainer keeps.
 */
#ifndef MG_REPORT_H
#define MG_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/session.h"
#include "engine/tb_events.h"
#include "runtime/runtime.h"

struct cJSON;

/* Per-epoch numbers for the report. */
struct mg_epoch_stats {
	int64_t epoch, steps, samples;
	int64_t tokens; /* label tokens (per-token models), else 0 */
	double train_loss, train_acc;
	double test_loss, test_acc;
	/* the model's metric sums, for its declared metrics */
	double train_sums[MG_METRIC_MAX], test_sums[MG_METRIC_MAX];
	double seconds; /* over every process that trained the epoch */
	int has_test;
	/* samples (rows) and label tokens this process trained of it: a
	 * resumed run's epochs include earlier processes' (restored from
	 * the checkpoint), its throughput only this one's */
	int64_t here_samples, here_tokens;
};

/* An evaluation inside an epoch (run.eval_every): after step `step`,
 * the model's metric sums over the part of the test split it covered. */
struct mg_eval_point {
	int64_t step;
	int64_t samples;
	double sums[MG_METRIC_MAX];
};

/* What report.c keeps between calls (zeroed at the start). */
struct mg_report {
	FILE *csv;		 /* steps.csv, rank 0 */
	double *rank_rows;	 /* every rank's statistics */
	double train_s;		 /* wall seconds in training steps */
	struct mg_series step_s; /* steady steps' wall seconds */
	struct mg_tb tb;	 /* run.tensorboard: the event file */
};

/* The run as the report sees it: its state, read-only. (Not named
 * mg_run_state: analysis.h has an enum of that name, and cli.c sees
 * both headers.) */
struct mg_run_view {
	struct mg_report *rep;
	const struct mg_session *s; /* ini, effective config, plugins */
	int rank, world;
	struct mg_comm *comm; /* gathers the per-rank rows */
	struct mg_stats *stats;
	const char *run_dir;
	const char *device; /* "cpu" or the GPU's name */
	enum mg_dtype precision;
	int64_t batch, steps_per_epoch, total_steps;
	int64_t start_step; /* first step this process runs (resume) */
	int64_t skipped_steps, trainable_parameters;
	double t_begin; /* mg_now() at the start */
	double t_loop;	/* mg_now() when the step loop began; 0 before */
	const struct mg_epoch_stats *ep;   /* epochs done */
	const struct mg_eval_point *evals; /* run.eval_every's */
	int nevals;
	const struct mg_metric_spec *metrics; /* what the model declares */
	int nep;
	/* The profiler's part (profile.c), called with profile_arg:
	 * gather (every rank, collective), report.json's "profile" object
	 * (NULL: none) and the summary's table. */
	int (*profile_gather)(void *arg);
	struct cJSON *(*profile_json)(const void *arg);
	void (*profile_summary)(const void *arg, FILE *f);
	void *profile_arg;
};

int mg_report_open(const struct mg_run_view *r, bool resume);
void mg_report_step(const struct mg_run_view *r, int64_t step, double loss,
		    double acc, double lr, double grad_norm, int skipped,
		    double seconds);
/* An epoch ended (its statistics, evaluation included): the event
 * file's held-out and epoch curves. */
void mg_report_epoch(const struct mg_run_view *r,
		     const struct mg_epoch_stats *e);
/* An evaluation inside an epoch: the event file's eval/ curves. */
void mg_report_eval(const struct mg_run_view *r, const struct mg_eval_point *v);
int mg_report_write(const struct mg_run_view *r, bool final);
/* report.json with this status ("running", "finished", "interrupted",
 * "failed") and, when not NULL, an "error" message. collective: every
 * rank calls it (the per-rank rows are gathered); otherwise only rank
 * 0's own numbers are written, for a run that fails on one rank. */
/* True when RUN_DIR/report.json is readable and has this status (how
 * --resume tells a finished run from one a crash cut short). */
bool mg_report_has_status(const char *run_dir, const char *status);
int mg_report_write_status(const struct mg_run_view *r, const char *status,
			   const char *error, bool collective);
/* Closes steps.csv and frees the report's state. */
void mg_report_close(struct mg_report *rep);
/* Account one step's wall time (steady: not a warm-up or capture step,
 * so it enters the step-time distribution). */
int mg_report_step_time(struct mg_report *rep, double seconds, bool steady);
void mg_report_summary(const struct mg_run_view *r, FILE *f);

#endif
