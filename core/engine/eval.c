/*
 * eval.c - the metric sums each forward() writes (read back and checked,
 * naming the model when they are impossible), the test split's
 * evaluation over every rank, and --eval-only.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"
#include "engine/trainer.h"

/* The metrics row micro-batch `micro` writes. */
struct mg_tensor mg_metrics_row(struct mg_trainer *t, int micro)
{
	int64_t n = t->r.mspec.nsums;
	return mg_tensor_make((float *)t->metrics.ptr + micro * MG_METRIC_MAX,
			      MG_F32, t->r.ctx.dev->kind, 1, &n);
}

/* Read the F32 metric sums of `rows` micro-batches, added up. */
int mg_metrics_read(struct mg_trainer *t, int rows, double m[MG_METRIC_MAX])
{
	float f[MG_METRIC_MAX * 64];
	memset(m, 0, MG_METRIC_MAX * sizeof *m);
	for (int r0 = 0; r0 < rows; r0 += 64) {
		int nr = rows - r0 < 64 ? rows - r0 : 64;
		if (mg_copy_d2h(&t->r.ctx, f,
				(float *)t->metrics.ptr + r0 * MG_METRIC_MAX,
				(size_t)nr * MG_METRIC_MAX * sizeof *f))
			return -1;
		for (int r = 0; r < nr; r++)
			for (int i = 0; i < MG_METRIC_MAX; i++)
				m[i] += f[r * MG_METRIC_MAX + i];
	}
	return 0;
}

/* The most a forward over `samples` rows may count: the rows, or their
 * tokens for token data. */
double mg_metrics_max_count(const struct mg_trainer *t, int64_t samples)
{
	return (double)samples *
	       (t->in.tokens ? (double)t->in.lay.seq_len : 1.0);
}

/* What the model's forward() wrote: a count in [1, most] (per-token
 * models: [0, most], a step may be all prompt) and a number correct in
 * [0, count], or the plugin is named as at fault. */
int mg_metrics_check(const struct mg_trainer *t, const double *m, double most,
		     const char *what)
{
	double n = m[MG_METRIC_COUNT], c = m[MG_METRIC_CORRECT];
	double least = t->r.mspec.per_token ? 0 : 1;
	if (n >= least && n <= most && c >= 0 && c <= n)
		return 0;
	return mg_error("model plugin '%s' wrote bad metrics %s: count %g "
			"(expected 1..%g), correct %g (expected 0..count); "
			"its forward() must fill loss_sum, correct and count",
			t->r.s->plugin[MG_SEC_MODEL].desc->name, what, n, most,
			c);
}

/* The test split's metric sums over every rank into tot. */
int mg_evaluate(struct mg_trainer *t, double tot[MG_METRIC_MAX], int64_t limit)
{
	struct mg_ctx *ctx = &t->r.ctx;
	void *data = t->r.inst[MG_SEC_DATASET];
	int64_t n = t->r.data->count(data, MG_SPLIT_TEST);
	int64_t eb = mg_opt_int(t->r.s->run, "eval_batch_size");
	struct mg_tensor mrow = mg_metrics_row(t, 0);
	memset(tot, 0, MG_METRIC_MAX * sizeof *tot);
	ctx->training = false;
	mg_watchdog_at(ctx->step, "evaluation");
	t->r.stats.paused = true; /* the report times training steps */
	/* Each rank evaluates every world-th batch; sums are reduced. Every
	 * rank runs the same number of forwards, as a sharded model's
	 * forward is collective (fsdp gathers each unit): a rank left
	 * without a batch in the last round forwards the first one again
	 * and drops its sums, instead of leaving the others waiting. */
	const int64_t stride = eb * ctx->world;
	int64_t rounds = (n + stride - 1) / stride;
	if (limit > 0 && limit < rounds)
		rounds = limit;
	for (int64_t k = 0; k < rounds; k++) {
		int64_t b = k * stride + (int64_t)ctx->rank * eb;
		const bool spare = b >= n;
		if (spare)
			b = 0;
		int64_t cnt = n - b < eb ? n - b : eb;
		for (int64_t i = 0; i < cnt; i++)
			t->in.idx[i] = b + i;
		struct mg_batch batch;
		double m[MG_METRIC_MAX];
		if (mg_input_load(t, MG_SPLIT_TEST, t->in.idx, cnt, &batch) ||
		    t->r.model->forward(t->r.inst[MG_SEC_MODEL], ctx, &batch,
					&mrow) ||
		    mg_metrics_read(t, 1, m))
			return mg_error_prefix("evaluation");
		for (int i = 0; i < MG_METRIC_MAX && !spare; i++)
			tot[i] += m[i];
	}
	t->r.stats.paused = false;
	if (t->r.comm->all_reduce_host(t->r.comm, tot, MG_METRIC_MAX, MG_F64,
				       MG_REDUCE_SUM))
		return mg_error_prefix("evaluation metrics");
	if (n > 0 && mg_metrics_check(t, tot, mg_metrics_max_count(t, n),
				      "in evaluation"))
		return -1;
	mg_watchdog_at(ctx->step, "training");
	return 0;
}

/* eval.json beside the checkpoint: what --eval-only measured. */
static int write_eval_json(const struct mg_trainer *t, const char *source,
			   const double *sums, int64_t samples)
{
	char path[PATH_MAX + 16], tmp[PATH_MAX + 48];
	snprintf(path, sizeof path, "%s/eval.json", t->r.run_dir);
	/* --eval-only takes no lock (it may run beside the training): a
	 * temporary name of its own */
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		return mg_error("%s: %s", tmp, strerror(errno));
	fprintf(f, "{\n  \"source\": \"%s\",\n  \"step\": %lld,\n", source,
		(long long)t->start_step);
	fprintf(f, "  \"samples\": %lld,\n  \"count\": %.0f,\n  \"metrics\": {",
		(long long)samples, sums[MG_METRIC_COUNT]);
	for (int i = 0; i < t->r.mspec.ndecl; i++) {
		double v = mg_metric_value(&t->r.mspec.decl[i], sums);
		fprintf(f, "%s\n    \"%s\": ", i ? "," : "",
			t->r.mspec.decl[i].name);
		if (isfinite(v))
			fprintf(f, "%.17g", v);
		else
			fprintf(f, "null");
	}
	fprintf(f, "\n  }\n}\n");
	if (fflush(f) || ferror(f) | fclose(f) || rename(tmp, path)) {
		int e = errno;
		remove(tmp);
		return mg_error("%s: %s", path, strerror(e));
	}
	return 0;
}

int mg_eval_only(struct mg_session *s)
{
	struct mg_trainer t;
	memset(&t, 0, sizeof t);
	t.r.s = s;
	t.t_begin = mg_now();
	t.eval_only = true; /* a finished run's checkpoint loads too */
	int rc = mg_trainer_setup(&t);
	char ck[PATH_MAX + 32], source[PATH_MAX + 64] = "initial weights";
	/* a model started from a weights folder says which */
	const char *hf = mg_session_plugin_str(s, MG_SEC_MODEL, "hf_dir");
	if (hf[0])
		snprintf(source, sizeof source, "initial weights of %s", hf);
	if (!rc) {
		snprintf(ck, sizeof ck, "%s/" MG_CKPT_FILE, t.r.run_dir);
		if (access(ck, F_OK) == 0) {
			rc = mg_trainer_load_checkpoint(&t);
			snprintf(source, sizeof source, "%s", ck);
		}
	}
	double sums[MG_METRIC_MAX];
	if (!rc)
		rc = mg_evaluate(&t, sums, 0);
	if (!rc && t.r.ctx.rank == 0) {
		char m[256];
		int64_t n = t.r.data->count(t.r.inst[MG_SEC_DATASET],
					    MG_SPLIT_TEST);
		mg_info("eval (%s, step %lld): test %s over %lld samples, "
			"%.0f %s",
			source, (long long)t.start_step,
			mg_metric_format(&t.r.mspec, sums, m, sizeof m),
			(long long)n, sums[MG_METRIC_COUNT],
			t.r.mspec.per_token ? "label tokens" : "counted");
		rc = write_eval_json(&t, source, sums, n);
	}
	if (rc) {
		mg_log(MG_LOG_ERROR, "%s", mg_last_error());
		if (t.r.comm && t.r.ctx.world > 1)
			t.r.comm->abort(t.r.comm, 1);
	}
	mg_trainer_teardown(&t);
	return rc ? 1 : 0;
}
