/*
 * run.h - a run's start-up, shared by training, --eval-only, `mgrun
 * generate` and `mgrun export`: where this process sits in the job, its
 * device and communicator, the context, the plugin instances, the model's
 * declarations and the strategy holding the parameters. The engine's
 * entry points are here too, so the CLI needs no other engine header.
 */
#ifndef MG_RUN_H
#define MG_RUN_H

#include "mg_internal.h"

#include <limits.h>
#include <stdbool.h>

#include "engine/session.h"
#include "engine/strategy_bind.h"
#include "runtime/runtime.h"

struct mg_run {
	struct mg_session *s;
	struct mg_ctx ctx;
	struct mg_device dev;
	struct mg_stats stats;
	struct mg_comm *comm;
	bool watchdog; /* comm is wrapped by the collective watchdog */
	void *inst[MG_SEC_PLUGIN_COUNT];
	/* the loader's copies of the plugins' callback tables */
	const struct mg_model_ops *model;
	const struct mg_dataset_ops *data;
	const struct mg_strategy_ops *strat;
	struct mg_strategy_bind sbind; /* what ctx->strategy points at */
	struct mg_model_spec spec;
	struct mg_metric_spec mspec; /* what the model reports */
	struct mg_optim_hparams hp;
	int64_t accum; /* run.grad_accum: micro-batches a step */
	char run_dir[PATH_MAX];
	char cache_dir[PATH_MAX]; /* ctx->cache_dir: out_dir/cache */
};

/*
 * Start the run of session s: environment, device, communicator (with
 * the collective watchdog when run.collective_timeout_s says so),
 * configuration agreement between ranks, context and precision, plugin
 * instances, the model's declarations, the strategy's setup (parameters
 * placed, initial values drawn) and the run directory. r must be zeroed.
 * Returns 0, or -1 with the error set (mg_run_close frees what was
 * made).
 */
MG_INTERNAL int mg_run_open(struct mg_run *r, struct mg_session *s);
MG_INTERNAL void mg_run_close(struct mg_run *r);
/* schedule.c: the [optim] section's hyper-parameters. */
void mg_optim_from_opts(struct mg_optim_hparams *h, const struct mg_opts *o);
/* "cpu" or the GPU's name. */
MG_INTERNAL const char *mg_run_device_desc(const struct mg_run *r);

/* ---- the engine's entry points (trainer.c, eval.c) ---- */

MG_INTERNAL int mg_train(struct mg_session *s, bool resume);
/* --eval-only: the test split's metrics of the run directory's
 * checkpoint, or of the initial weights when there is none; printed and
 * written to RUN_DIR/eval.json. */
MG_INTERNAL int mg_eval_only(struct mg_session *s);
/*
 * `mgrun generate`, `mgrun export` and other inference: the run started
 * as --eval-only starts it, with the run directory's checkpoint loaded
 * when there is one and load_ckpt (false: the model's initial weights
 * whatever the run holds, as `generate --adapter` wants the base). ckpt
 * gets that checkpoint's path, or "" when the model kept its initial
 * weights (the caller decides whether those will do). Training is off.
 * Returns 0 with *out to close with mg_inference_close, or -1 (error
 * set, everything freed).
 */
MG_INTERNAL int mg_inference_open(struct mg_session *s, struct mg_run **out,
				  char *ckpt, size_t len, bool load_ckpt);
MG_INTERNAL void mg_inference_close(struct mg_run *r);

#endif
