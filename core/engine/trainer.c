/*
 * trainer.c - one rank's training run from start to end: the start-up
 * (the run's, then the input buffers and the step's device values), the
 * report opened, the loop (train_loop.c) or the final writes a crash cut
 * short, the run's end (finished, stopped, interrupted or failed, said
 * in report.json), and the same start-up kept open for inference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"
#include "engine/crash_point.h"
#include "engine/signals.h"
#include "engine/trainer.h"

/* The training half of the start-up, after the run's (run.c): input
 * buffers for a step's micro-batches, the step's device values, the
 * schedule's length. */
int mg_trainer_setup(struct mg_trainer *t)
{
	if (mg_run_open(&t->r, t->r.s))
		return -1;
	const struct mg_opts *run = t->r.s->run;
	struct mg_ctx *ctx = &t->r.ctx;
	/* fp16's narrow range needs loss scaling (PyTorch GradScaler's
	 * defaults); bf16 has fp32's range. */
	t->best_eval_loss = INFINITY; /* run.early_stop_patience */
	t->dynamic_scale = ctx->compute_dtype == MG_F16;
	t->loss_scale = t->dynamic_scale ? 65536.0 : 1.0;
	t->batch = mg_opt_int(run, "batch_size");
	t->epochs = mg_opt_int(run, "epochs");
	int64_t cap = t->batch;
	const struct mg_plugin *sp = t->r.s->plugin[MG_SEC_STRATEGY].desc;
	if (t->r.strat->max_read)
		cap = t->r.strat->max_read(t->r.inst[MG_SEC_STRATEGY],
					   t->batch);
	if (cap < t->batch)
		return mg_error("strategy '%s' reads %lld samples a step, "
				"fewer than the batch of %lld",
				sp->name, (long long)cap, (long long)t->batch);
	int64_t eb = mg_opt_int(run, "eval_batch_size");
	if (eb > cap)
		cap = eb;
	if (mg_input_init(t, cap, (int)t->r.accum))
		return -1;
	if (t->r.mspec.per_token && !t->in.tokens)
		return mg_error("model '%s' averages its loss per token, but "
				"dataset '%s' does not hand out token rows",
				t->r.s->plugin[MG_SEC_MODEL].desc->name,
				t->r.s->plugin[MG_SEC_DATASET].desc->name);
	t->plans = calloc((size_t)t->r.accum, sizeof *t->plans);
	t->next_plans = calloc((size_t)t->r.accum, sizeof *t->next_plans);
	/* the captured graph's key, then the previous step's */
	t->graph_key = calloc((size_t)t->r.accum * 6, sizeof *t->graph_key);
	if (!t->plans || !t->next_plans || !t->graph_key)
		return mg_error("out of memory");
	int64_t one = 1;
	size_t mbytes = (size_t)t->r.accum * MG_METRIC_MAX * sizeof(float);
	if (mg_buf_alloc(ctx, &t->metrics, mbytes, MG_MEM_OTHER) ||
	    mg_memset_dev(ctx, t->metrics.ptr, 0, mbytes) ||
	    mg_buf_alloc(ctx, &t->count_dev, sizeof(float), MG_MEM_OTHER) ||
	    mg_buf_alloc_host(ctx, &t->count_host, sizeof(float), MG_MEM_OTHER,
			      true) ||
	    mg_buf_alloc(ctx, &t->grad_scale, sizeof(float), MG_MEM_OTHER) ||
	    mg_buf_alloc(ctx, &t->vals_dev, sizeof(struct mg_optim_vals),
			 MG_MEM_OTHER) ||
	    mg_buf_alloc_host(ctx, &t->vals_host, sizeof(struct mg_optim_vals),
			      MG_MEM_OTHER, true) ||
	    mg_buf_alloc_host(ctx, &t->scale_host, sizeof(float), MG_MEM_OTHER,
			      true))
		return -1;
	t->use_graph =
		t->r.dev.kind == MG_DEV_CUDA && mg_opt_bool(run, "cuda_graph");
	ctx->optim_vals = t->vals_dev.ptr;
	ctx->grad_scale = mg_tensor_make(t->grad_scale.ptr, MG_F32,
					 ctx->dev->kind, 1, &one);
	int64_t ntrain =
		t->r.data->count(t->r.inst[MG_SEC_DATASET], MG_SPLIT_TRAIN);
	/* The sampler plans micro-batches; K of them make a step. */
	t->steps_per_epoch =
		t->r.strat->steps_per_epoch(t->r.inst[MG_SEC_STRATEGY], ntrain,
					    t->batch) /
		t->r.accum;
	if (t->steps_per_epoch <= 0)
		return mg_error("the training set has %lld samples, fewer than "
				"one step of %lld x %lld (batch_size x "
				"grad_accum)",
				(long long)ntrain, (long long)t->batch,
				(long long)t->r.accum);
	t->total_steps = t->steps_per_epoch * t->epochs;
	int64_t max_steps = mg_opt_int(run, "max_steps");
	if (max_steps > 0 && max_steps < t->total_steps)
		t->total_steps = max_steps;
	return 0;
}

/* The profiler's part of the report (report.h: profile_*). */
static int profile_gather(void *t)
{
	return mg_profile_gather(t);
}

static struct cJSON *profile_json(const void *t)
{
	return mg_profile_json(t);
}

static void profile_summary(const void *t, FILE *f)
{
	mg_profile_summary(t, f);
}

const struct mg_run_view *mg_run_view(struct mg_trainer *t)
{
	t->rs = (struct mg_run_view){
		.rep = &t->rep,
		.s = t->r.s,
		.rank = t->r.ctx.rank,
		.world = t->r.ctx.world,
		.comm = t->r.comm,
		.stats = &t->r.stats,
		.run_dir = t->r.run_dir,
		.device = mg_run_device_desc(&t->r),
		.precision = t->r.ctx.compute_dtype,
		.batch = t->batch,
		.steps_per_epoch = t->steps_per_epoch,
		.total_steps = t->total_steps,
		.start_step = t->start_step,
		.skipped_steps = t->skipped_steps,
		.trainable_parameters = mg_spec_numel(&t->r.spec, MG_P_TRAIN),
		.t_begin = t->t_begin,
		.t_loop = t->t_loop,
		.ep = t->ep,
		.nep = t->nep,
		.evals = t->evals,
		.nevals = t->nevals,
		.metrics = &t->r.mspec,
		.profile_gather = profile_gather,
		.profile_json = profile_json,
		.profile_summary = profile_summary,
		.profile_arg = t,
	};
	return &t->rs;
}

void mg_trainer_teardown(struct mg_trainer *t)
{
	struct mg_ctx *ctx = &t->r.ctx;
	mg_profile_free(t); /* CUPTI flushes while the device is alive */
	mg_input_free(t);
	mg_step_graph_drop(t);
	if (ctx->dev) {
		mg_buf_free(ctx, &t->scale_host);
		mg_buf_free(ctx, &t->metrics);
		mg_buf_free(ctx, &t->grad_scale);
		mg_buf_free(ctx, &t->vals_dev);
		mg_buf_free(ctx, &t->vals_host);
		mg_buf_free(ctx, &t->count_dev);
		mg_buf_free(ctx, &t->count_host);
	}
	mg_fingerprint_free(&t->fp);
	mg_report_close(&t->rep);
	mg_run_close(&t->r);
	free(t->ep);
	free(t->evals);
	free(t->plans);
	free(t->next_plans);
	free(t->graph_key);
}

/* The run stopped on SIGINT/SIGTERM after a step (every rank): report
 * it as interrupted, say what was kept. */
static int end_interrupted(struct mg_trainer *t)
{
	int rc = mg_report_write_status(mg_run_view(t), "interrupted", NULL,
					true);
	if (rc || t->r.ctx.rank != 0)
		return rc;
	mg_report_summary(mg_run_view(t), stdout);
	fflush(stdout);
	if (mg_opt_bool(t->r.s->run, "checkpoint"))
		mg_info("interrupted by %s after step %lld of %lld; "
			"checkpoint, steps.csv and report.json written: "
			"continue with --resume",
			mg_stop_signal_name(t->stop_sig),
			(long long)t->stop_step, (long long)t->total_steps);
	else
		mg_info("interrupted by %s after step %lld of %lld; no "
			"checkpoint (run.checkpoint = false), steps.csv and "
			"report.json written",
			mg_stop_signal_name(t->stop_sig),
			(long long)t->stop_step, (long long)t->total_steps);
	return 0;
}

/* A run that failed after its report was opened: report.json says so
 * (status "failed" and the error) rather than staying "running" or
 * missing, e.g. when the final checkpoint could not be written. Rank 0
 * only, without collectives (the other ranks may be gone). */
static void end_failed(struct mg_trainer *t, const char *error)
{
	if (t->r.ctx.rank == 0 &&
	    mg_report_write_status(mg_run_view(t), "failed", error, false))
		mg_log(MG_LOG_ERROR, "run report not updated: %s",
		       mg_last_error());
}

int mg_inference_open(struct mg_session *s, struct mg_run **out, char *ckpt,
		      size_t len, bool load_ckpt)
{
	struct mg_trainer *t = calloc(1, sizeof *t);
	if (!t)
		return mg_error("out of memory");
	t->r.s = s;
	t->t_begin = mg_now();
	t->eval_only = true; /* a finished run's checkpoint loads too */
	int rc = mg_trainer_setup(t);
	char path[PATH_MAX + 32];
	ckpt[0] = 0;
	if (!rc) {
		snprintf(path, sizeof path, "%s/" MG_CKPT_FILE, t->r.run_dir);
		if (load_ckpt && access(path, F_OK) == 0) {
			rc = mg_trainer_load_checkpoint(t);
			if (!rc)
				snprintf(ckpt, len, "%s", path);
		}
	}
	if (rc) {
		/* teardown may log: keep the reason */
		char why[1024];
		snprintf(why, sizeof why, "%s", mg_last_error());
		mg_trainer_teardown(t);
		free(t);
		return mg_error("%s", why);
	}
	t->r.ctx.training = false;
	*out = &t->r; /* the first member: mg_inference_close finds t */
	return 0;
}

void mg_inference_close(struct mg_run *r)
{
	if (!r)
		return;
	struct mg_trainer *t = (struct mg_trainer *)r;
	mg_trainer_teardown(t);
	free(t);
}

int mg_train(struct mg_session *s, bool resume)
{
	struct mg_trainer t;
	memset(&t, 0, sizeof t);
	t.r.s = s;
	t.t_begin = mg_now();
	int rc = mg_crash_points_check();
	if (rc > 0) /* MG_TEST_CRASH_AT=list */
		return 0;
	if (rc) {
		mg_log(MG_LOG_ERROR, "%s", mg_last_error());
		return 1;
	}
	mg_stop_install();
	rc = mg_trainer_setup(&t);
	/* before reading the checkpoint another run may be writing */
	if (!rc && t.r.ctx.rank == 0)
		rc = mg_run_lock_take(&t.lock, t.r.run_dir);
	/* after setup: the plugins have read their files */
	if (!rc && (resume || t.r.ctx.rank == 0))
		rc = mg_fingerprint_make(&t.fp, s, t.r.run_dir, t.r.cache_dir);
	if (!rc && resume)
		rc = mg_trainer_load_checkpoint(&t);
	bool reporting = false;
	if (!rc) {
		/* A QLoRA base says so: frozen parameters stored as NF4. */
		int64_t nf4 = 0;
		for (int i = 0; i < t.r.spec.nparams; i++)
			if (t.r.spec.params[i].dtype == MG_NF4)
				nf4 += t.r.spec.params[i].numel;
		char base[64] = "";
		if (nf4)
			snprintf(base, sizeof base, ", %lld frozen in NF4",
				 (long long)nf4);
		mg_info("mgrun: %s: model %s (%lld parameters%s, %d units), "
			"dataset %s, strategy %s, %s on %s, %lld steps of "
			"%lld, run dir %s",
			s->ini_path, s->plugin[MG_SEC_MODEL].desc->name,
			(long long)mg_spec_numel(&t.r.spec, MG_P_TRAIN), base,
			t.r.spec.nunits, s->plugin[MG_SEC_DATASET].desc->name,
			s->plugin[MG_SEC_STRATEGY].desc->name,
			mg_dtype_name(t.r.ctx.compute_dtype),
			mg_run_device_desc(&t.r), (long long)t.total_steps,
			(long long)t.batch, t.r.run_dir);
		rc = mg_report_open(mg_run_view(&t), resume);
		reporting = !rc;
	}
	if (!rc) /* before the first CUDA graph capture */
		rc = mg_profile_init(&t);
	if (!rc)
		rc = t.finishing ? mg_train_finish(&t) : mg_train_loop(&t);
	if (!rc)
		rc = mg_profile_finish(&t);
	if (!rc && t.stop_sig)
		rc = end_interrupted(&t);
	else if (!rc && t.stopped) /* not finished: "stopped" */
		rc = mg_report_write_status(mg_run_view(&t), "stopped", NULL,
					    true);
	else if (!rc)
		rc = mg_report_write(mg_run_view(&t), true);
	if (!rc)
		mg_crash_point("report_final");
	if (!rc && !t.stop_sig && t.r.ctx.rank == 0)
		mg_report_summary(mg_run_view(&t), stdout);
	if (rc) {
		char err[1024];
		snprintf(err, sizeof err, "%s", mg_last_error());
		mg_log(MG_LOG_ERROR, "%s", err);
		if (reporting)
			end_failed(&t, err);
		/* The other ranks would wait for this one in their next
		 * collective: stop the whole job now (the SIGTERM an MPI
		 * abort sends ends this process at once again). */
		mg_stop_restore();
		if (t.r.comm && t.r.ctx.world > 1)
			t.r.comm->abort(t.r.comm, 1);
	}
	mg_trainer_teardown(&t);
	mg_run_lock_release(&t.lock);
	mg_stop_restore();
	if (rc)
		return 1;
	/* as a shell reports a process the signal ended */
	return t.stop_sig ? 128 + t.stop_sig : 0;
}
