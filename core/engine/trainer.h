/*
 * trainer.h - one rank's training run: the context, plugin instances,
 * input buffers, schedule and report state shared by the engine's files.
 */
#ifndef MG_TRAINER_H
#define MG_TRAINER_H

#include "mg_internal.h"

#include <limits.h>
#include <stdio.h>

#include "engine/fingerprint.h"
#include "engine/report.h"
#include "engine/run.h"
#include "engine/run_lock.h"
#include "runtime/runtime.h"

/* One micro-batch slot of the input buffers: what was fetched into it. */
struct mg_input_slot {
	int64_t fetched; /* samples read into the slot */
	int64_t seq;	 /* token data: padded row length T of the slot */
	/* token data: label tokens (labels != MG_IGNORE_INDEX) in the rows
	 * this rank computes, counted on the host at fetch */
	int64_t label_tokens;
	/* tokens (not padding) of the rows this rank computes */
	int64_t row_tokens;
	/* run.static_batch: the slot holds its batch for good (read once;
	 * images transformed once, into the slot's own input buffer) */
	bool kept;
};

/*
 * Host staging and device buffers for one step: `slots` micro-batches
 * (run.grad_accum) of up to `cap` samples each, so a whole step is read
 * before its first backward (token-weighted losses need every label
 * count up front). Image data is transformed into one input buffer per
 * micro-batch; token rows are copied as they are, trimmed to the slot's
 * longest row.
 */
struct mg_input {
	struct mg_sample_layout lay;
	bool tokens;	     /* lay.seq_len > 0 */
	int64_t cap;	     /* samples a slot holds */
	int slots;	     /* micro-batch slots */
	size_t raw_sample;   /* bytes of one raw sample */
	size_t input_sample; /* bytes of one transformed (model input) sample */
	struct mg_buf raw_host, labels_host; /* host staging */
	struct mg_buf raw_dev, labels_dev, input_dev;
	/* token data: positions (I32 rows) and row lengths (I32) */
	struct mg_buf pos_host, lens_host, pos_dev, lens_dev;
	int64_t *idx; /* plan indices, cap per slot */
	struct mg_input_slot *slot;
	void *copied; /* CUDA event: staging buffer copied out */
	bool copy_pending;
	/* run.static_batch: every step trains on the first step's batch */
	bool static_batch;
};

struct mg_profile; /* profile.c */
struct cJSON;

struct mg_trainer {
	struct mg_run r; /* start-up: context, plugins, spec (run.h) */
	struct mg_input in;
	/* F32 [grad_accum][MG_METRIC_MAX]: each micro-batch's forward writes
	 * its sums into its own row */
	struct mg_buf metrics, grad_scale;
	struct mg_plan *plans;	    /* [accum]: the step's micro-batches */
	struct mg_plan *next_plans; /* [accum]: the prefetched step's */
	/* Token-weighted loss on several ranks: this rank's label tokens
	 * (F32, uploaded each step), summed over ranks on the device and
	 * turned into grad_scale there */
	struct mg_buf count_dev, count_host;
	struct mg_buf vals_dev, vals_host; /* struct mg_optim_vals */
	struct mg_buf scale_host;	   /* pinned source of grad_scale */
	int64_t opt_step;		   /* optimizer steps applied so far */
	double loss_scale;		   /* fp16: dynamic; otherwise 1 */
	int64_t good_steps; /* fp16: steps since the scale last changed */
	bool dynamic_scale;
	void *graph; /* CUDA graph of the step's compute */
	/* What it was built for, (begin, count, seq) per micro-batch, then
	 * the previous step's (a shape is captured when it repeats) */
	int64_t *graph_key;
	uint64_t graph_frees; /* mg_buf_frees() when it was captured */
	bool use_graph;

	int64_t batch, epochs, steps_per_epoch, total_steps;
	int64_t start_step; /* first step this process runs (resume) */
	bool eval_only;	    /* --eval-only: loads, evaluates, trains not */
	struct mg_epoch_stats *ep; /* epochs done, for report.json */
	int nep;
	/* run.eval_every's evaluations inside epochs (report.json evals) */
	struct mg_eval_point *evals;
	int nevals;
	/* run.early_stop_patience: the best held-out loss so far and the
	 * evaluations since it */
	double best_eval_loss;
	int64_t evals_since_best;
	double t_begin;
	double t_loop; /* the step loop's start: the progress line's ETA
			* counts from here, not from setup */
	int64_t skipped_steps;
	struct mg_report rep;	 /* report.c's state */
	struct mg_profile *prof; /* [profile]: CUPTI window, NVTX */
	struct mg_run_view rs;	 /* mg_run_view()'s */
	struct mg_run_lock lock; /* rank 0: the run directory's */
	int stop_sig;		 /* SIGINT/SIGTERM that stopped the loop */
	int64_t stop_step;	 /* the step it stopped before */
	double ck_last;		 /* mg_now() of the last checkpoint */
	/* the experiment, recorded in checkpoints, compared on --resume */
	struct mg_fingerprint fp;
	/* The open epoch's sums, steps and samples (all ranks), with what
	 * earlier processes trained of it (restored from the checkpoint):
	 * its train loss averages every step, not only this process's. */
	double ep_m[MG_METRIC_MAX], ep_base_m[MG_METRIC_MAX];
	int64_t ep_steps, ep_samples, ep_base_samples;
	double ep_t0, ep_secs; /* this process's start of it; seconds before */
	bool finishing; /* the checkpoint is the run's last step: complete
			 * the final writes (evaluation, adapter, report) */
	bool stopped;	/* run.stop_after ended this process early */
};

/* input.c */
int mg_input_init(struct mg_trainer *t, int64_t cap, int slots);
void mg_input_free(struct mg_trainer *t);
/* Read samples idx[0..n) of split on the host into slot `slot` and queue
 * their copy to the device (the staging buffer is reused once the last
 * copy is done). Token data: [cbegin, cbegin+ccount) are the rows this
 * rank computes, whose label tokens are counted. */
int mg_input_fetch(struct mg_trainer *t, enum mg_split split, int slot,
		   const int64_t *idx, int64_t n, int64_t cbegin,
		   int64_t ccount);
/* Samples [begin, begin+count) of a fetched slot as the model's input,
 * transformed on the device (capturable: no host synchronisation). */
int mg_input_transform(struct mg_trainer *t, int slot, int64_t begin,
		       int64_t count, struct mg_batch *batch);
/* fetch + transform, slot 0, computing every sample read. */
int mg_input_load(struct mg_trainer *t, enum mg_split split, const int64_t *idx,
		  int64_t n, struct mg_batch *batch);

/* schedule.c */
double mg_schedule_lr(const struct mg_trainer *t, int64_t step);

/* report.c (report.h) sees the run through this view, filled from t. */
const struct mg_run_view *mg_run_view(struct mg_trainer *t);

/* profile.c: the [profile] window (docs/ARCHITECTURE.md, Profiler). */
int mg_profile_init(struct mg_trainer *t);
/* Around each training step (seconds: its wall time). step_end fails if
 * the window could not open or close. */
void mg_profile_step_begin(struct mg_trainer *t, int64_t step);
int mg_profile_step_end(struct mg_trainer *t, int64_t step,
			double step_seconds);
/* After the loop: close a window the run ended inside. */
int mg_profile_finish(struct mg_trainer *t);
/* Every rank (collective when profiling): every rank's table to rank 0. */
int mg_profile_gather(struct mg_trainer *t);
/* report.json's "profile" object (NULL when there is none), and the
 * summary's profile table (rank 0, after mg_profile_gather). */
struct cJSON *mg_profile_json(const struct mg_trainer *t);
void mg_profile_summary(const struct mg_trainer *t, FILE *f);
void mg_profile_free(struct mg_trainer *t);

/* progress.c */
void mg_progress_step(struct mg_trainer *t, int64_t step, const double *sums,
		      double lr, double rate);
void mg_progress_end(struct mg_trainer *t);

/* trainer_ckpt.c: RUN_DIR/MG_CKPT_FILE written (rank 0 writes what every
 * rank's strategy saved; next_step is where a resume starts) and read
 * back for --resume, --eval-only and inference. */
#define MG_CKPT_FILE "checkpoint.safetensors"
#define MG_CKPT_FORMAT "mgrun-checkpoint-1"
int mg_trainer_save_checkpoint(struct mg_trainer *t, int64_t next_step);
int mg_trainer_load_checkpoint(struct mg_trainer *t);
/* trainer_epochs.c: the epochs done and the open one's sums, as
 * checkpoint metadata text and back (report.json covers the whole run) */
char *mg_epochs_text(const struct mg_trainer *t);
int mg_epochs_parse(struct mg_trainer *t, const char *text, const char *path);

/* eval.c: the metric sums forward() writes, read back and checked */
/* The metrics row micro-batch `micro` writes. */
struct mg_tensor mg_metrics_row(struct mg_trainer *t, int micro);
/* The F32 metric sums of `rows` micro-batches, added up. */
int mg_metrics_read(struct mg_trainer *t, int rows, double m[MG_METRIC_MAX]);
/* The most a forward over `samples` rows may count: the rows, or their
 * tokens for token data. */
double mg_metrics_max_count(const struct mg_trainer *t, int64_t samples);
/* What forward() wrote: a count in [1, most] (per-token models: [0,
 * most]) and a number correct in [0, count], or the plugin is named as
 * at fault. */
int mg_metrics_check(const struct mg_trainer *t, const double *m, double most,
		     const char *what);
/* The test split's metric sums over every rank into tot. */
/* limit > 0: at most that many batches a rank (run.eval_limit). */
int mg_evaluate(struct mg_trainer *t, double tot[MG_METRIC_MAX], int64_t limit);

/* step.c: one step's device work, eagerly or as a replayed CUDA graph */
int mg_step_launch(struct mg_trainer *t, int64_t step, const struct mg_plan *ps,
		   struct mg_step_report *sr);
/* The captured graph no longer matches the buffers: capture anew. */
void mg_step_graph_drop(struct mg_trainer *t);

/* train_loop.c */
/* The steps from t->start_step on, with evaluation, checkpoints and the
 * report; returns early (0) on a stop signal or run.stop_after. */
int mg_train_loop(struct mg_trainer *t);
/* --resume of a checkpoint at the run's last step whose final writes a
 * crash cut short: complete them. */
int mg_train_finish(struct mg_trainer *t);
/* A new epoch opens: nothing of it trained yet. */
void mg_epoch_reset(struct mg_trainer *t);

/* trainer.c */
/* The run's start-up (run.c), then the training half: input buffers for a
 * step's micro-batches, the step's device values, the schedule's length.
 * t zeroed but for t->r.s. -1: error set; mg_trainer_teardown frees. */
int mg_trainer_setup(struct mg_trainer *t);
void mg_trainer_teardown(struct mg_trainer *t);

#endif
