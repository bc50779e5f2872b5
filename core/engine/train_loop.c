/*
 * train_loop.c - the training loop: plan -> read -> copy -> transform ->
 * forward -> backward -> step, the next step's batch read while the
 * device computes, the loss scale, epochs with their evaluation, the
 * stop signals every rank agrees on, and checkpoints.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "engine/crash_point.h"
#include "engine/signals.h"
#include "engine/trainer.h"

/* Plan step `step`'s micro-batches and fetch them (host read, queued
 * copy), one input slot each. */
static int fetch_step(struct mg_trainer *t, int64_t step, struct mg_plan *ps)
{
	int64_t ntrain =
		t->r.data->count(t->r.inst[MG_SEC_DATASET], MG_SPLIT_TRAIN);
	for (int m = 0; m < t->r.accum; m++) {
		struct mg_plan *p = &ps[m];
		/* Micro-batch m of step s is the sampler's step s*K+m: the
		 * same samples, in the same order, as one K-times batch. */
		int64_t micro = step * t->r.accum + m;
		int64_t mpe = t->steps_per_epoch * t->r.accum;
		memset(p, 0, sizeof *p);
		p->read_idx = t->in.idx + m * t->in.cap;
		p->read_cap = t->in.cap;
		if (t->r.strat->plan(t->r.inst[MG_SEC_STRATEGY], ntrain,
				     t->batch, micro / mpe, micro % mpe, p))
			return mg_error_prefix("strategy plan");
		const char *sn = t->r.s->plugin[MG_SEC_STRATEGY].desc->name;
		if (p->global_count <= 0 || p->compute_count < 0 ||
		    p->n_read < 0 || p->n_read > p->read_cap ||
		    p->compute_begin < 0 ||
		    p->compute_begin + p->compute_count > p->n_read)
			return mg_error("strategy '%s' plan() for step %lld: "
					"reads %lld, computes %lld from %lld, "
					"global count %lld: out of range",
					sn, (long long)micro,
					(long long)p->n_read,
					(long long)p->compute_count,
					(long long)p->compute_begin,
					(long long)p->global_count);
		if (mg_input_fetch(t, MG_SPLIT_TRAIN, m, p->read_idx, p->n_read,
				   p->compute_begin, p->compute_count))
			return -1;
	}
	return 0;
}

/* Upload this step's values, read on the device by the loss and the
 * optimizer (so a captured step needs no new kernel arguments). */
static int upload_step_values(struct mg_trainer *t, int64_t step,
			      const struct mg_plan *ps)
{
	struct mg_ctx *ctx = &t->r.ctx;
	/* The loss is a mean over the step's samples, or over its label
	 * tokens (every rank and micro-batch). */
	double divisor = 0, tokens = 0;
	for (int m = 0; m < t->r.accum; m++) {
		divisor += (double)ps[m].global_count;
		tokens += (double)t->in.slot[m].label_tokens;
	}
	if (t->r.mspec.per_token) {
		/* One rank knows the total; several sum it on the device
		 * (step_compute), from this rank's count. */
		divisor = tokens > 0 ? tokens : 1;
		*(float *)t->count_host.ptr = (float)tokens;
		if (ctx->world > 1 &&
		    mg_copy_h2d(ctx, t->count_dev.ptr, t->count_host.ptr,
				sizeof(float)))
			return -1;
	}
	float gs = (float)(t->loss_scale / divisor);
	struct mg_optim_vals *v = t->vals_host.ptr;
	int64_t k = t->opt_step + 1;
	memset(v, 0, sizeof *v);
	v->lr = (float)mg_schedule_lr(t, step);
	v->grad_mul = (float)(1.0 / t->loss_scale);
	v->bias1 = (float)(1.0 - pow(t->r.hp.beta1, (double)k));
	v->bias2 = (float)(1.0 - pow(t->r.hp.beta2, (double)k));
	v->first = t->opt_step == 0;
	v->step = step;
	*(float *)t->scale_host.ptr = gs;
	return mg_copy_h2d(ctx, t->grad_scale.ptr, t->scale_host.ptr,
			   sizeof gs) ||
	       mg_copy_h2d(ctx, t->vals_dev.ptr, v, sizeof *v);
}

/* Fold the step's collectives into the stats: the exposed part is the
 * comm phase (and came out of the optimizer phase, where the strategy
 * waited for it); the rest ran under compute. */
static int collect_comm(struct mg_trainer *t)
{
	struct mg_comm_stats cs = {0};
	struct mg_stats *st = &t->r.stats;
	if (t->r.comm->collect(t->r.comm, &cs))
		return mg_error_prefix("communication statistics");
	double optim = st->t_step[MG_T_OPTIM];
	double exposed =
		cs.exposed_seconds < optim ? cs.exposed_seconds : optim;
	st->t_step[MG_T_OPTIM] -= exposed;
	st->t_total[MG_T_OPTIM] -= exposed;
	st->t_step[MG_T_COMM] += cs.exposed_seconds;
	st->t_total[MG_T_COMM] += cs.exposed_seconds;
	st->comm_busy_total += cs.busy_seconds;
	st->comm_busy_step += cs.busy_seconds;
	st->counters[MG_C_COMM_BYTES] += cs.bytes;
	st->counters[MG_C_COMM_CALLS] += cs.calls;
	mg_stats_comm_device(st, cs.device_bytes);
	return 0;
}

/* After the step: read its metrics and values, adjust the loss scale. */
static int finish_step(struct mg_trainer *t, double *m, double *lr,
		       double *grad_norm, int *skipped)
{
	struct mg_ctx *ctx = &t->r.ctx;
	struct mg_optim_vals *v = t->vals_host.ptr;
	int rc = mg_metrics_read(t, (int)t->r.accum, m);
	if (!rc)
		rc = mg_copy_d2h(ctx, v, t->vals_dev.ptr, sizeof *v);
	mg_stats_step_end(ctx);
	if (!rc)
		rc = collect_comm(t);
	if (rc)
		return rc;
	*lr = v->lr;
	*grad_norm = v->grad_norm;
	*skipped = v->skip;
	if (v->skip) {
		/* Overflow: the update was not applied; retry smaller. */
		t->skipped_steps++;
		t->good_steps = 0;
		if (t->dynamic_scale)
			t->loss_scale =
				t->loss_scale / 2 < 1 ? 1 : t->loss_scale / 2;
	} else {
		t->opt_step++;
		if (t->dynamic_scale && ++t->good_steps == 2000) {
			t->loss_scale *= 2;
			t->good_steps = 0;
		}
	}
	return 0;
}

/* Loss and accuracy as the report's fixed fields show them. */
static double ratio(const double *m, int num)
{
	return m[MG_METRIC_COUNT] > 0 ? m[num] / m[MG_METRIC_COUNT] : NAN;
}

/* The epoch of `step` ends: its statistics over every process that
 * trained it (t->ep_*), the evaluation, the line on stdout. */
static int end_of_epoch(struct mg_trainer *t, int64_t step, bool eval_on)
{
	mg_progress_end(t);
	const double *ep_m = t->ep_m, *base = t->ep_base_m;
	bool tok = t->r.mspec.per_token;
	struct mg_epoch_stats e = {
		.epoch = step / t->steps_per_epoch,
		.steps = t->ep_steps,
		/* per-token: rows; otherwise what the loss counted (as
		 * before ABI 1.3) */
		.samples = tok ? t->ep_samples : (int64_t)ep_m[MG_METRIC_COUNT],
		.tokens = tok ? (int64_t)ep_m[MG_METRIC_COUNT] : 0,
		.train_loss = ratio(ep_m, MG_METRIC_LOSS_SUM),
		.train_acc = ratio(ep_m, MG_METRIC_CORRECT),
		.seconds = t->ep_secs + mg_now() - t->ep_t0,
		.here_samples = tok ? t->ep_samples - t->ep_base_samples
				    : (int64_t)(ep_m[MG_METRIC_COUNT] -
						base[MG_METRIC_COUNT]),
		.here_tokens = tok ? (int64_t)(ep_m[MG_METRIC_COUNT] -
					       base[MG_METRIC_COUNT])
				   : 0,
	};
	memcpy(e.train_sums, ep_m, sizeof e.train_sums);
	if (eval_on) {
		if (mg_evaluate(t, e.test_sums, 0))
			return -1;
		e.test_loss = ratio(e.test_sums, MG_METRIC_LOSS_SUM);
		e.test_acc = ratio(e.test_sums, MG_METRIC_CORRECT);
		e.has_test = 1;
		/* Evaluation may have grown the model's buffers: the graph
		 * would replay stale addresses. Capture anew next step. */
		mg_step_graph_drop(t);
	}
	void *p = realloc(t->ep, (size_t)(t->nep + 1) * sizeof *t->ep);
	if (!p)
		return mg_error("out of memory");
	t->ep = p;
	t->ep[t->nep++] = e;
	mg_report_epoch(mg_run_view(t), &e);
	if (t->r.ctx.rank != 0)
		return 0;
	char tr[256], te[256], rate[64];
	mg_metric_format(&t->r.mspec, e.train_sums, tr, sizeof tr);
	mg_metric_format(&t->r.mspec, e.test_sums, te, sizeof te);
	if (e.tokens)
		snprintf(rate, sizeof rate, "%.0f samples/s, %.0f tokens/s",
			 (double)e.samples / e.seconds,
			 (double)e.tokens / e.seconds);
	else
		snprintf(rate, sizeof rate, "%.0f samples/s",
			 (double)e.samples / e.seconds);
	if (e.has_test)
		mg_info("epoch %lld: train %s, test %s, %.1f s, %s",
			(long long)e.epoch + 1, tr, te, e.seconds, rate);
	else
		mg_info("epoch %lld: train %s, %.1f s, %s",
			(long long)e.epoch + 1, tr, e.seconds, rate);
	return 0;
}

/*
 * What every rank agrees on after a step: the stop signal (the largest
 * one any rank got, signals.c; 0 for none) as the return value, and in
 * *ck_due whether run.checkpoint_every_s has passed since the last
 * checkpoint on any rank (clocks differ; a checkpoint is collective for
 * sharded strategies, so all must take it). -1 on a communication
 * failure. With several ranks this is one small host all-reduce a step,
 * outside the step's timing and its communication statistics (collected
 * away), so that all stop or checkpoint after the same step.
 */
static int step_agreed(struct mg_trainer *t, double ck_secs, bool *ck_due)
{
	double v[2] = {mg_stop_signal(),
		       ck_secs > 0 && mg_now() - t->ck_last >= ck_secs};
	if (t->r.ctx.world > 1) {
		struct mg_comm_stats drop;
		if (t->r.comm->all_reduce_host(t->r.comm, v, 2, MG_F64,
					       MG_REDUCE_MAX) ||
		    t->r.comm->collect(t->r.comm, &drop))
			return mg_error_prefix("agreeing on a stop signal");
	}
	*ck_due = v[1] > 0;
	return (int)v[0];
}

/*
 * The checkpoint after step `next_step - 1`. Only rank 0 writes, so with
 * the collective watchdog on, the others would wait for the write (minutes
 * for a large model) in their next collective and could be stopped as
 * stalled: they wait for it in an untimed barrier here instead.
 */
static int save_checkpoint(struct mg_trainer *t, int64_t next_step)
{
	mg_watchdog_at(next_step - 1, "checkpoint");
	int rc = mg_trainer_save_checkpoint(t, next_step);
	if (!rc && t->r.watchdog) {
		mg_watchdog_untimed(true);
		if (t->r.comm->barrier(t->r.comm))
			rc = mg_error_prefix(
				"after the checkpoint at step %lld",
				(long long)next_step);
		mg_watchdog_untimed(false);
	}
	mg_watchdog_at(next_step - 1, "training");
	return rc;
}

/* A new epoch opens: nothing of it trained yet. */
void mg_epoch_reset(struct mg_trainer *t)
{
	memset(t->ep_m, 0, sizeof t->ep_m);
	memset(t->ep_base_m, 0, sizeof t->ep_base_m);
	t->ep_steps = t->ep_samples = t->ep_base_samples = 0;
	t->ep_secs = 0;
	t->ep_t0 = mg_now();
}

/*
 * run.eval_every's evaluation after step `step` (at most run.eval_limit
 * batches a rank): kept for report.json, drawn in TensorBoard and
 * printed. The captured step is dropped (evaluation may grow buffers).
 * NULL on failure.
 */
static const struct mg_eval_point *eval_point(struct mg_trainer *t,
					      int64_t step)
{
	struct mg_eval_point v = {.step = step};
	const int64_t limit = mg_opt_int(t->r.s->run, "eval_limit");
	if (mg_evaluate(t, v.sums, limit))
		return NULL;
	mg_step_graph_drop(t);
	const int64_t n =
		t->r.data->count(t->r.inst[MG_SEC_DATASET], MG_SPLIT_TEST);
	const int64_t most = limit *
			     mg_opt_int(t->r.s->run, "eval_batch_size") *
			     t->r.ctx.world;
	v.samples = limit > 0 && most < n ? most : n;
	void *p = realloc(t->evals, (size_t)(t->nevals + 1) * sizeof *t->evals);
	if (!p) {
		mg_error("out of memory");
		return NULL;
	}
	t->evals = p;
	t->evals[t->nevals++] = v;
	mg_report_eval(mg_run_view(t), &v);
	if (t->r.ctx.rank == 0) {
		char m[256];
		mg_info("eval after step %lld: test %s over %lld samples",
			(long long)step + 1,
			mg_metric_format(&t->r.mspec, v.sums, m, sizeof m),
			(long long)v.samples);
	}
	return &t->evals[t->nevals - 1];
}

/* run.early_stop_patience: has the held-out loss (sums of an evaluation
 * after step `step`) failed to improve on the best for that many
 * evaluations in a row? Every rank holds the same reduced sums, so every
 * rank decides the same. (An evaluation over run.eval_limit batches and
 * an epoch end's over the whole split are compared alike: keep the limit
 * large enough for the loss to be a fair sample.) */
static bool early_stop(struct mg_trainer *t, const double *sums)
{
	const int64_t patience = mg_opt_int(t->r.s->run, "early_stop_patience");
	const double count = sums[MG_METRIC_COUNT];
	if (patience <= 0 || !(count > 0))
		return false;
	const double loss = sums[MG_METRIC_LOSS_SUM] / count;
	if (loss < t->best_eval_loss) {
		t->best_eval_loss = loss;
		t->evals_since_best = 0;
		return false;
	}
	return ++t->evals_since_best >= patience;
}

int mg_train_loop(struct mg_trainer *t)
{
	struct mg_ctx *ctx = &t->r.ctx;
	const struct mg_opts *run = t->r.s->run;
	int64_t ck_every = mg_opt_int(run, "checkpoint_every");
	double ck_secs = mg_opt_float(run, "checkpoint_every_s");
	t->ck_last = t->t_loop = mg_now();
	bool ck_on = mg_opt_bool(run, "checkpoint");
	bool eval_on = mg_opt_bool(run, "eval");
	const int64_t eval_every = eval_on ? mg_opt_int(run, "eval_every") : 0;
	int64_t stop_after = mg_opt_int(run, "stop_after");
	int64_t end = t->total_steps;
	if (stop_after > 0 && t->start_step + stop_after < end)
		end = t->start_step + stop_after;
	t->ep_t0 = mg_now();
	bool fetched = false;
	for (int64_t step = t->start_step; step < end; step++) {
		mg_profile_step_begin(t, step); /* before t0: opens CUPTI */
		double m[MG_METRIC_MAX] = {0}, t0 = mg_now(), lr = 0, gnorm = 0;
		struct mg_step_report sr = {0};
		int skipped = 0;
		bool epoch_end = (step + 1) % t->steps_per_epoch == 0 ||
				 step + 1 == t->total_steps;
		/* run.eval_every inside an epoch (its end evaluates anyway) */
		bool eval_now = eval_every > 0 &&
				(step + 1) % eval_every == 0 && !epoch_end;
		mg_stats_step_begin(&t->r.stats, step);
		if (!fetched && fetch_step(t, step, t->plans))
			return -1;
		ctx->epoch = step / t->steps_per_epoch;
		ctx->step = step;
		ctx->training = true;
		mg_watchdog_at(step, "training");
		int64_t step_samples = 0; /* over every rank */
		for (int mi = 0; mi < t->r.accum; mi++) {
			mg_count(ctx, MG_C_SAMPLES_COMPUTED,
				 t->plans[mi].compute_count);
			if (t->in.tokens)
				mg_count(ctx, MG_C_TOKENS_COMPUTED,
					 t->in.slot[mi].row_tokens);
			step_samples += t->plans[mi].global_count;
		}
		if (upload_step_values(t, step, t->plans) ||
		    mg_step_launch(t, step, t->plans, &sr))
			return -1;
		/* Read the next batch while the device computes this one
		 * (not before an evaluation: it uses the buffers). */
		fetched = false;
		if (!epoch_end && !eval_now && step + 1 < end) {
			if (fetch_step(t, step + 1, t->next_plans))
				return -1;
			fetched = true;
		}
		if (finish_step(t, m, &lr, &gnorm, &skipped) ||
		    mg_metrics_check(
			    t, m,
			    mg_metrics_max_count(t, t->batch * ctx->world *
							    t->r.accum),
			    "in training"))
			return -1;
		if (fetched) {
			struct mg_plan *tmp = t->plans;
			t->plans = t->next_plans;
			t->next_plans = tmp;
		}
		double dt = mg_now() - t0;
		if (mg_profile_step_end(t, step, dt))
			return -1;
		double loss = m[MG_METRIC_LOSS_SUM] / m[MG_METRIC_COUNT];
		double acc = m[MG_METRIC_CORRECT] / m[MG_METRIC_COUNT];
		if (!isfinite(loss) && !t->dynamic_scale)
			return mg_error("loss is %g at step %lld: training "
					"diverged (lower optimizer.lr?)",
					loss, (long long)step);
		for (int i = 0; i < MG_METRIC_MAX; i++)
			t->ep_m[i] += m[i];
		t->ep_steps++;
		t->ep_samples += step_samples;
		/* Steady steps exclude the eager warm-up and capture steps
		 * and the re-capture after each evaluation. */
		if (mg_report_step_time(&t->rep, dt,
					step >= t->start_step + 3 &&
						step % t->steps_per_epoch != 0))
			return -1;
		mg_report_step(mg_run_view(t), step, loss, acc, lr, gnorm,
			       skipped, dt);
		mg_progress_step(t, step, m, lr, m[MG_METRIC_COUNT] / dt);
		bool early = false; /* run.early_stop_patience */
		if (epoch_end) {
			if (end_of_epoch(t, step, eval_on))
				return -1;
			mg_crash_point("epoch_end");
			mg_epoch_reset(t);
			const struct mg_epoch_stats *e = &t->ep[t->nep - 1];
			early = e->has_test && early_stop(t, e->test_sums);
		} else if (eval_now) {
			const struct mg_eval_point *v = eval_point(t, step);
			if (!v)
				return -1;
			early = early_stop(t, v->sums);
		}
		/* SIGINT/SIGTERM: this step is the last (not when it ends
		 * the run anyway), with a checkpoint. */
		bool ck_due = false;
		int stop = step_agreed(t, ck_secs, &ck_due);
		if (stop < 0)
			return -1;
		stop = step + 1 < end ? stop : 0;
		early = early && step + 1 < end;
		bool ck_now =
			ck_on && (stop || early || ck_due || epoch_end ||
				  step + 1 == end ||
				  (ck_every > 0 && (step + 1) % ck_every == 0));
		/* The rows a checkpoint covers reach the disk before it. */
		if (ck_now && t->rep.csv) {
			fflush(t->rep.csv);
			mg_crash_point("steps_csv");
		}
		if (ck_now && save_checkpoint(t, step + 1))
			return -1;
		if (ck_now)
			t->ck_last = mg_now();
		if (epoch_end && mg_report_write(mg_run_view(t), false))
			return -1;
		if (epoch_end)
			mg_crash_point("report_epoch");
		if (stop) {
			t->stop_sig = stop;
			t->stop_step = step + 1;
			return 0;
		}
		if (early) {
			/* not finished: "stopped", continued by --resume */
			t->stopped = true;
			if (ctx->rank == 0)
				mg_info("early stop after step %lld of %lld: "
					"the held-out loss has not improved "
					"for %lld evaluations (best %.6g; "
					"run.early_stop_patience)",
					(long long)step + 1,
					(long long)t->total_steps,
					(long long)t->evals_since_best,
					t->best_eval_loss);
			if (!ck_on && mg_report_write(mg_run_view(t), false))
				return -1;
			return 0;
		}
	}
	t->stopped = end < t->total_steps;
	if (t->stopped && t->r.ctx.rank == 0)
		mg_info("stopped after step %lld of %lld (run.stop_after); "
			"continue with --resume",
			(long long)end, (long long)t->total_steps);
	return 0;
}

/* --resume of a checkpoint at the run's last step whose final writes a
 * crash cut short: the last epoch's end (its evaluation) when the
 * checkpoint does not record it, then the checkpoint again (it writes
 * the adapter folder); mg_train writes the final report. */
int mg_train_finish(struct mg_trainer *t)
{
	int64_t last = t->total_steps - 1;
	bool recorded = t->nep > 0 && !t->ep_steps &&
			t->ep[t->nep - 1].epoch == last / t->steps_per_epoch;
	if (!recorded &&
	    end_of_epoch(t, last, mg_opt_bool(t->r.s->run, "eval")))
		return -1;
	mg_epoch_reset(t);
	if (mg_opt_bool(t->r.s->run, "checkpoint") &&
	    save_checkpoint(t, t->total_steps))
		return -1;
	if (t->r.ctx.rank == 0)
		mg_info("the run's last step was checkpointed: its final "
			"writes completed");
	return 0;
}
