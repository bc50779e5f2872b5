/*
 * trainer.c - one rank's training run: build the context and plugin
 * instances, let the strategy place the model's parameters, then loop
 * plan -> read -> copy -> transform -> forward -> backward -> step, with
 * evaluation, checkpoints and reports.
 */
#include <cblas.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/dist.h"
#include "engine/config_agree.h"
#include "engine/core_schema.h"
#include "engine/crash_point.h"
#include "engine/signals.h"
#include "engine/trainer.h"
#include "ops/ops_tune.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

static int setup_run_dir(struct mg_trainer *t)
{
	const char *name = mg_opt_str(t->s->run, "name");
	char stem[PATH_MAX];
	if (!name[0]) {
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof tmp, "%s", t->s->ini_path);
		snprintf(stem, sizeof stem, "%s", basename(tmp));
		char *dot = strrchr(stem, '.');
		if (dot && dot != stem)
			*dot = 0;
		name = stem;
	}
	snprintf(t->run_dir, sizeof t->run_dir, "%s/%s",
		 mg_run_out_dir(t->s->run), name);

	return mg_mkdir_p(t->run_dir);
}

static int create_instances(struct mg_trainer *t)
{
	/* Dataset and model first: the strategy may size itself on them. */
	static const int order[] = {MG_SEC_DATASET, MG_SEC_MODEL,
				    MG_SEC_STRATEGY};
	for (int k = 0; k < 3; k++) {
		int i = order[k];
		const struct mg_plugin *p = t->s->plugin[i].desc;
		if (p->create(t->s->opts[i], &t->ctx, &t->inst[i]))
			return mg_error_prefix("%s plugin '%s' (%s)",
					       mg_section_names[i], p->name,
					       t->s->plugin[i].path);
	}
	t->model = &t->s->plugin[MG_SEC_MODEL].ops.model;
	t->data = &t->s->plugin[MG_SEC_DATASET].ops.dataset;
	t->strat = &t->s->plugin[MG_SEC_STRATEGY].ops.strategy;
	t->ctx.model = t->inst[MG_SEC_MODEL];
	t->ctx.model_ops = t->model;
	mg_strategy_bind(&t->sbind, &t->ctx,
			 t->s->plugin[MG_SEC_STRATEGY].desc->name, t->strat,
			 t->inst[MG_SEC_STRATEGY]);
	return 0;
}

/* The model's metric declarations, or the classifier's
 * default; checked so a bad declaration is refused naming the model. */
static int load_metric_spec(struct mg_trainer *t)
{
	const struct mg_plugin *mp = t->s->plugin[MG_SEC_MODEL].desc;
	struct mg_metric_spec *ms = &t->mspec;
	memset(ms, 0, sizeof *ms);
	if (!t->model->metrics) {
		mg_metric_spec_classifier(ms);
		return 0;
	}
	if (t->model->metrics(t->inst[MG_SEC_MODEL], ms))
		return mg_error_prefix("model '%s' metrics", mp->name);
	if (ms->nsums < MG_METRIC_N || ms->nsums > MG_METRIC_MAX ||
	    ms->ndecl < 1 || ms->ndecl > MG_METRIC_MAX)
		return mg_error("model '%s' (%s) declares %d metric sums and "
				"%d metrics (%d..%d sums, 1..%d metrics "
				"allowed)",
				mp->name, t->s->plugin[MG_SEC_MODEL].path,
				ms->nsums, ms->ndecl, MG_METRIC_N,
				MG_METRIC_MAX, MG_METRIC_MAX);
	for (int i = 0; i < ms->ndecl; i++) {
		const struct mg_metric_decl *d = &ms->decl[i];
		if (!d->name[0] || memchr(d->name, 0, sizeof d->name) == NULL ||
		    d->num < 0 || d->num >= ms->nsums || d->den >= ms->nsums ||
		    (unsigned)d->show > MG_SHOW_EXP)
			return mg_error("model '%s': metric %d ('%.31s') is "
					"malformed (sums %d/%d of %d)",
					mp->name, i, d->name, d->num, d->den,
					ms->nsums);
	}
	return 0;
}

static int setup(struct mg_trainer *t)
{
	const struct mg_opts *run = t->s->run;
	struct mg_ctx *ctx = &t->ctx;
	t->dev.kind = MG_DEV_CPU;
	t->dev.threads = (int)mg_opt_int(run, "threads");
	if (t->dev.threads > 0)
		omp_set_num_threads(t->dev.threads);
	/* One thread pool: the CPU ops split GEMMs across OpenMP threads
	 * themselves; a second OpenBLAS pool would fight it for the cores
	 * (measured: 948 against 641 samples/s at 28 px on 2 cores). */
	openblas_set_num_threads(1);
	/* Where this process sits in the job (an outer launcher's or our
	 * own variables): rank 0 of 1 without any. */
	struct mg_dist_env env;
	if (mg_dist_env_detect(&env))
		return -1;
	ctx->rank = env.rank;
	ctx->world = env.world;
	ctx->local_rank = env.local_rank;
	ctx->local_world = env.local_world;
	/* Rank 0 tells the story; the others speak up on trouble only. */
	mg_log_configure(env.rank == 0 ? MG_LOG_INFO : MG_LOG_WARN,
			 env.world > 1 ? env.rank : -1);
	if (mg_opt_enum(run, "device") == MG_DEVICE_CUDA) {
#ifdef MG_HAVE_CUDA
		/* One GPU per rank: the rank's local index on its node. */
		if (mg_cuda_device_init(&t->dev, ctx->local_rank))
			return -1;
#else
		return mg_error("run.device = cuda, but this mgrun was built "
				"without CUDA (no CUDA toolkit at build time)");
#endif
	}
	t->comm = mg_comm_create(&env, &t->dev);
	if (!t->comm)
		return mg_error_prefix("communicator for rank %d of %d (%s)",
				       env.rank, env.world, env.source);
	/* A rank that stalls must not hang the others: from the first
	 * collective on (configuration agreement included). */
	double wd_s = mg_opt_float(run, "collective_timeout_s");
	if (env.world > 1 && wd_s > 0) {
		struct mg_comm *w = mg_watchdog_wrap(t->comm, wd_s);
		if (!w)
			return -1;
		t->comm = w;
		t->watchdog = true;
	}
	/* before any collective whose size the configuration sets */
	if (mg_config_agree(t->s, t->comm, env.rank, env.world))
		return -1;
	ctx->struct_size = sizeof *ctx;
	ctx->core = t;
	ctx->micro_count = 1;
	snprintf(t->cache_dir, sizeof t->cache_dir, "%s/cache",
		 mg_run_out_dir(run));
	ctx->cache_dir = t->cache_dir;
	ctx->dev = &t->dev;
	ctx->comm = t->comm;
	if (mgo_allow_tf32(ctx, mg_opt_bool(run, "tf32")))
		return -1;
	switch (mg_opt_enum(run, "precision")) {
	case MG_PREC_FP64:
		ctx->compute_dtype = ctx->master_dtype = MG_F64;
		break;
	case MG_PREC_FP16:
	case MG_PREC_BF16:
		if (t->dev.kind != MG_DEV_CUDA)
			return mg_error("run.precision = %s needs run.device = "
					"cuda (the CPU computes in fp32 or "
					"fp64)",
					mg_opt_str(run, "precision"));
		ctx->master_dtype = MG_F32;
		ctx->compute_dtype =
			mg_opt_enum(run, "precision") == MG_PREC_FP16 ? MG_F16
								      : MG_BF16;
		break;
	default:
		ctx->compute_dtype = ctx->master_dtype = MG_F32;
	}
	/* fp16's narrow range needs loss scaling (PyTorch GradScaler's
	 * defaults); bf16 has fp32's range. */
	t->dynamic_scale = ctx->compute_dtype == MG_F16;
	t->loss_scale = t->dynamic_scale ? 65536.0 : 1.0;
	ctx->seed = (uint64_t)mg_opt_int(run, "seed");
	ctx->stats = &t->stats;
	/* Memory over time for memory.csv: setup's allocations are most of
	 * the rows, so a bounded log holds a whole run. */
	if (mg_stats_mem_log_start(&t->stats, 1 << 16))
		return -1;
#ifdef MG_HAVE_CUDA
	/* the cuBLAS workspace accounted, the driver's view sampled */
	if (t->dev.kind == MG_DEV_CUDA && mg_cuda_device_bind(ctx))
		return -1;
#endif
	mg_optim_from_opts(&t->hp, t->s->optim);
	ctx->optim = &t->hp;
	t->batch = mg_opt_int(run, "batch_size");
	t->epochs = mg_opt_int(run, "epochs");
	if (create_instances(t))
		return -1;
	if (t->model->declare(t->inst[MG_SEC_MODEL], &t->spec))
		return mg_error_prefix("model declare");
	if (t->spec.nunits <= 0 || mg_spec_numel(&t->spec, MG_P_TRAIN) <= 0)
		return mg_error("model plugin '%s' declared %d units and %lld "
				"trainable parameters: declare() must add at "
				"least one unit with a trainable parameter",
				t->s->plugin[MG_SEC_MODEL].desc->name,
				t->spec.nunits,
				(long long)mg_spec_numel(&t->spec, MG_P_TRAIN));
	if (load_metric_spec(t))
		return -1;
	t->accum = mg_opt_int(run, "grad_accum");
	const struct mg_plugin *stp = t->s->plugin[MG_SEC_STRATEGY].desc;
	if (t->accum > 1 && !(t->strat->caps & MG_STRATEGY_GRAD_ACCUM))
		return mg_error(
			"run.grad_accum = %lld: strategy '%s' (%s) does "
			"not declare gradient accumulation "
			"(MG_STRATEGY_GRAD_ACCUM)",
			(long long)t->accum, stp->name,
			t->s->plugin[MG_SEC_STRATEGY].path);
	ctx->micro_count = (int)t->accum;
	const double t_setup = mg_now();
	if (t->strat->setup(t->inst[MG_SEC_STRATEGY], &t->spec))
		return mg_error_prefix(
			"strategy '%s' setup",
			t->s->plugin[MG_SEC_STRATEGY].desc->name);
	/* a large model's start (initial values, pinned host state) is
	 * worth knowing apart from the steps */
	const double setup_s = mg_now() - t_setup;
	if (setup_s >= 1.0)
		mg_info("strategy '%s': setup took %.1f s (initial values, "
			"storage)",
			t->s->plugin[MG_SEC_STRATEGY].desc->name, setup_s);
	int64_t cap = t->batch;
	const struct mg_plugin *sp = t->s->plugin[MG_SEC_STRATEGY].desc;
	if (t->strat->max_read)
		cap = t->strat->max_read(t->inst[MG_SEC_STRATEGY], t->batch);
	if (cap < t->batch)
		return mg_error("strategy '%s' reads %lld samples a step, "
				"fewer than the batch of %lld",
				sp->name, (long long)cap, (long long)t->batch);
	int64_t eb = mg_opt_int(run, "eval_batch_size");
	if (eb > cap)
		cap = eb;
	if (mg_input_init(t, cap, (int)t->accum))
		return -1;
	if (t->mspec.per_token && !t->in.tokens)
		return mg_error("model '%s' averages its loss per token, but "
				"dataset '%s' does not hand out token rows",
				t->s->plugin[MG_SEC_MODEL].desc->name,
				t->s->plugin[MG_SEC_DATASET].desc->name);
	t->plans = calloc((size_t)t->accum, sizeof *t->plans);
	t->next_plans = calloc((size_t)t->accum, sizeof *t->next_plans);
	/* the captured graph's key, then the previous step's */
	t->graph_key = calloc((size_t)t->accum * 6, sizeof *t->graph_key);
	if (!t->plans || !t->next_plans || !t->graph_key)
		return mg_error("out of memory");
	int64_t one = 1;
	size_t mbytes = (size_t)t->accum * MG_METRIC_MAX * sizeof(float);
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
		t->dev.kind == MG_DEV_CUDA && mg_opt_bool(run, "cuda_graph");
	ctx->optim_vals = t->vals_dev.ptr;
	ctx->grad_scale = mg_tensor_make(t->grad_scale.ptr, MG_F32,
					 ctx->dev->kind, 1, &one);
	int64_t ntrain =
		t->data->count(t->inst[MG_SEC_DATASET], MG_SPLIT_TRAIN);
	/* The sampler plans micro-batches; K of them make a step. */
	t->steps_per_epoch = t->strat->steps_per_epoch(t->inst[MG_SEC_STRATEGY],
						       ntrain, t->batch) /
			     t->accum;
	if (t->steps_per_epoch <= 0)
		return mg_error("the training set has %lld samples, fewer than "
				"one step of %lld x %lld (batch_size x "
				"grad_accum)",
				(long long)ntrain, (long long)t->batch,
				(long long)t->accum);
	t->total_steps = t->steps_per_epoch * t->epochs;
	int64_t max_steps = mg_opt_int(run, "max_steps");
	if (max_steps > 0 && max_steps < t->total_steps)
		t->total_steps = max_steps;
	return setup_run_dir(t);
}

const char *mg_device_desc(const struct mg_trainer *t)
{
#ifdef MG_HAVE_CUDA
	if (t->dev.kind == MG_DEV_CUDA)
		return mg_cuda_device_name(&t->dev);
#endif
	(void)t;
	return "cpu";
}

/* The metrics row micro-batch `micro` writes. */
static struct mg_tensor metrics_row(struct mg_trainer *t, int micro)
{
	int64_t n = t->mspec.nsums;
	return mg_tensor_make((float *)t->metrics.ptr + micro * MG_METRIC_MAX,
			      MG_F32, t->ctx.dev->kind, 1, &n);
}

/* Read the F32 metric sums of `rows` micro-batches, added up. */
static int read_metrics(struct mg_trainer *t, int rows, double m[MG_METRIC_MAX])
{
	float f[MG_METRIC_MAX * 64];
	memset(m, 0, MG_METRIC_MAX * sizeof *m);
	for (int r0 = 0; r0 < rows; r0 += 64) {
		int nr = rows - r0 < 64 ? rows - r0 : 64;
		if (mg_copy_d2h(&t->ctx, f,
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
static double max_count(const struct mg_trainer *t, int64_t samples)
{
	return (double)samples *
	       (t->in.tokens ? (double)t->in.lay.seq_len : 1.0);
}

/* What the model's forward() wrote: a count in [1, most] (per-token
 * models: [0, most], a step may be all prompt) and a number correct in
 * [0, count], or the plugin is named as at fault. */
static int check_metrics(const struct mg_trainer *t, const double *m,
			 double most, const char *what)
{
	double n = m[MG_METRIC_COUNT], c = m[MG_METRIC_CORRECT];
	double least = t->mspec.per_token ? 0 : 1;
	if (n >= least && n <= most && c >= 0 && c <= n)
		return 0;
	return mg_error("model plugin '%s' wrote bad metrics %s: count %g "
			"(expected 1..%g), correct %g (expected 0..count); "
			"its forward() must fill loss_sum, correct and count",
			t->s->plugin[MG_SEC_MODEL].desc->name, what, n, most,
			c);
}

/* The test split's metric sums over every rank into tot. */
static int evaluate(struct mg_trainer *t, double tot[MG_METRIC_MAX])
{
	struct mg_ctx *ctx = &t->ctx;
	void *data = t->inst[MG_SEC_DATASET];
	int64_t n = t->data->count(data, MG_SPLIT_TEST);
	int64_t eb = mg_opt_int(t->s->run, "eval_batch_size");
	struct mg_tensor mrow = metrics_row(t, 0);
	memset(tot, 0, MG_METRIC_MAX * sizeof *tot);
	ctx->training = false;
	mg_watchdog_at(ctx->step, "evaluation");
	t->stats.paused = true; /* the report times training steps */
	/* Each rank evaluates every world-th batch; sums are reduced. Every
	 * rank runs the same number of forwards, as a sharded model's
	 * forward is collective (fsdp gathers each unit): a rank left
	 * without a batch in the last round forwards the first one again
	 * and drops its sums, instead of leaving the others waiting. */
	const int64_t stride = eb * ctx->world;
	const int64_t rounds = (n + stride - 1) / stride;
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
		    t->model->forward(t->inst[MG_SEC_MODEL], ctx, &batch,
				      &mrow) ||
		    read_metrics(t, 1, m))
			return mg_error_prefix("evaluation");
		for (int i = 0; i < MG_METRIC_MAX && !spare; i++)
			tot[i] += m[i];
	}
	t->stats.paused = false;
	if (t->comm->all_reduce_host(t->comm, tot, MG_METRIC_MAX, MG_F64,
				     MG_REDUCE_SUM))
		return mg_error_prefix("evaluation metrics");
	if (n > 0 && check_metrics(t, tot, max_count(t, n), "in evaluation"))
		return -1;
	mg_watchdog_at(ctx->step, "training");
	return 0;
}

/* Plan step `step`'s micro-batches and fetch them (host read, queued
 * copy), one input slot each. */
static int fetch_step(struct mg_trainer *t, int64_t step, struct mg_plan *ps)
{
	int64_t ntrain =
		t->data->count(t->inst[MG_SEC_DATASET], MG_SPLIT_TRAIN);
	for (int m = 0; m < t->accum; m++) {
		struct mg_plan *p = &ps[m];
		/* Micro-batch m of step s is the sampler's step s*K+m: the
		 * same samples, in the same order, as one K-times batch. */
		int64_t micro = step * t->accum + m;
		int64_t mpe = t->steps_per_epoch * t->accum;
		memset(p, 0, sizeof *p);
		p->read_idx = t->in.idx + m * t->in.cap;
		p->read_cap = t->in.cap;
		if (t->strat->plan(t->inst[MG_SEC_STRATEGY], ntrain, t->batch,
				   micro / mpe, micro % mpe, p))
			return mg_error_prefix("strategy plan");
		const char *sn = t->s->plugin[MG_SEC_STRATEGY].desc->name;
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

/*
 * The device work of one step: for each micro-batch transform, forward
 * and backward (gradients accumulate), then reductions and optimizer. No
 * host synchronisation happens in here (every per-step value is read
 * from device memory), so it can be captured once as a CUDA graph and
 * replayed.
 */
static int step_compute(struct mg_trainer *t, const struct mg_plan *ps,
			struct mg_step_report *sr)
{
	struct mg_ctx *ctx = &t->ctx;
	void *strat = t->inst[MG_SEC_STRATEGY];
	if (t->strat->begin_step(strat))
		return mg_error_prefix("strategy begin_step");
	/* Token-weighted loss over several ranks: the step's label tokens
	 * summed over ranks, then grad_scale = loss scale / tokens, all on
	 * the device before the first backward. */
	if (t->mspec.per_token && ctx->world > 1) {
		int64_t one = 1;
		struct mg_tensor cnt = mg_tensor_make(t->count_dev.ptr, MG_F32,
						      ctx->dev->kind, 1, &one);
		if (t->comm->all_reduce(t->comm, t->count_dev.ptr, 1, MG_F32,
					MG_REDUCE_SUM) ||
		    t->comm->wait(t->comm) ||
		    mg_op_reciprocal_scale(ctx, &cnt, t->loss_scale,
					   &ctx->grad_scale))
			return mg_error_prefix("label-token count");
	}
	int64_t offset = 0; /* of micro-batch m in the step's global batch */
	for (int m = 0; m < t->accum; m++) {
		const struct mg_plan *p = &ps[m];
		struct mg_batch batch;
		struct mg_tensor mrow = metrics_row(t, m);
		ctx->micro = m;
		mg_timer_start(ctx, MG_T_FORWARD);
		if (mg_input_transform(t, m, p->compute_begin, p->compute_count,
				       &batch))
			return -1;
		batch.global_offset = offset + p->global_offset;
		offset += p->global_count;
		int rc = t->model->forward(t->inst[MG_SEC_MODEL], ctx, &batch,
					   &mrow);
		mg_timer_stop(ctx, MG_T_FORWARD);
		if (rc)
			return mg_error_prefix("forward at step %lld",
					       (long long)ctx->step);
		/* The step's metrics over all ranks, reduced while the last
		 * backward runs (the strategy's wait or ours below orders
		 * it). */
		if (m + 1 == t->accum && ctx->world > 1 &&
		    t->comm->all_reduce(t->comm, t->metrics.ptr,
					t->accum * MG_METRIC_MAX, MG_F32,
					MG_REDUCE_SUM))
			return mg_error_prefix("metrics all-reduce");
		mg_timer_start(ctx, MG_T_BACKWARD);
		mg_strategy_bind_reset(&t->sbind);
		rc = t->model->backward(t->inst[MG_SEC_MODEL], ctx);
		mg_timer_stop(ctx, MG_T_BACKWARD);
		/* The strategy's grads_ready failing is the strategy's. */
		if (mg_strategy_bind_check(&t->sbind, (long long)ctx->step))
			return -1;
		if (rc)
			return mg_error_prefix("backward at step %lld",
					       (long long)ctx->step);
	}
	ctx->micro = 0;
	mg_timer_start(ctx, MG_T_OPTIM);
	int rc = t->strat->step(strat, &t->hp, sr);
	if (!rc && ctx->world > 1)
		rc = t->comm->wait(t->comm);
	mg_timer_stop(ctx, MG_T_OPTIM);
	if (rc)
		return mg_error_prefix("optimizer step %lld",
				       (long long)ctx->step);
	return 0;
}

#ifdef MG_HAVE_CUDA
/* Does key (3 values a micro-batch: slice and token length) describe
 * these micro-batches? With `set`, make it so. */
static bool graph_key_same(struct mg_trainer *t, int64_t *key,
			   const struct mg_plan *ps, bool set)
{
	bool same = true;
	for (int m = 0; m < t->accum; m++) {
		int64_t k[3] = {ps[m].compute_begin, ps[m].compute_count,
				t->in.slot[m].seq};
		for (int j = 0; j < 3; j++) {
			same = same && key[3 * m + j] == k[j];
			if (set)
				key[3 * m + j] = k[j];
		}
	}
	return same;
}
#endif

/* Run step_compute eagerly, or as a CUDA graph once the first steps have
 * reserved every buffer and chosen every algorithm. */
static int launch_compute(struct mg_trainer *t, int64_t step,
			  const struct mg_plan *ps, struct mg_step_report *sr)
{
#ifdef MG_HAVE_CUDA
	struct mg_device *dev = t->ctx.dev;
	/* A graph replays the addresses it captured. An eager step since
	 * (a longer token batch, evaluation, a checkpoint) that freed any
	 * buffer - a model's arena growing through mg_buf_reserve frees
	 * the old one - may have taken some away: drop the graph and
	 * capture again once the shape repeats. */
	if (t->graph && mg_buf_frees() != t->graph_frees) {
		mg_cuda_graph_free(t->graph);
		t->graph = NULL;
	}
	if (t->use_graph && mg_buf_windows_live()) {
		mg_info("run.cuda_graph: steps run eagerly while copy-engine "
			"windows are lent (strategy.copy_engine): NCCL's "
			"copy-engine all-gathers hung when replayed from a "
			"captured step");
		t->use_graph = false;
		mg_cuda_graph_free(t->graph); /* captured before the windows */
		t->graph = NULL;
	}
	bool same = t->graph && graph_key_same(t, t->graph_key, ps, false);
	/* Capture only a shape seen twice in a row: ragged token batches
	 * change shape most steps, and a capture costs more than the eager
	 * step it replaces. */
	bool repeat = graph_key_same(t, t->graph_key + 3 * t->accum, ps, true);
	if (t->use_graph && !same && repeat && step >= t->start_step + 2) {
		mg_cuda_graph_free(t->graph);
		t->graph = NULL;
		const uint64_t frees = mg_buf_frees();
		if (mg_cuda_graph_begin(dev))
			return -1;
		t->comm->capture(t->comm, MG_COMM_CAPTURE_BEGIN);
		mg_stats_capture(&t->stats, true, false);
		int rc = step_compute(t, ps, sr);
		void *g = NULL;
		int rc2 = mg_cuda_graph_end(dev, &g);
		t->comm->capture(t->comm, rc || rc2 ? MG_COMM_CAPTURE_ABORT
						    : MG_COMM_CAPTURE_END);
		mg_stats_capture(&t->stats, false, !rc && !rc2);
		if (rc || rc2) {
			/* Something in the step cannot be captured: say
			 * what, and go on without graphs. */
			mg_warn("run.cuda_graph: the step could not be "
				"captured (%s); running without CUDA graphs",
				mg_last_error());
			mg_cuda_graph_free(g);
			t->use_graph = false;
			return step_compute(t, ps, sr);
		}
		if (mg_buf_frees() != frees) {
			/* A buffer was freed (and another taken) while
			 * capturing: kernels captured before that point
			 * would replay its old address. Run this step
			 * eagerly; the next repeat captures with every
			 * buffer in place. */
			mg_cuda_graph_free(g);
			return step_compute(t, ps, sr);
		}
		mg_cuda_timers_mark_captured(dev);
		t->graph = g;
		t->graph_frees = frees;
		graph_key_same(t, t->graph_key, ps, true);
		mg_info("run.cuda_graph: step captured at step %lld; replaying",
			(long long)step);
		same = true;
	}
	if (t->use_graph && same) {
		mg_cuda_timers_arm(dev);
		t->comm->capture(t->comm, MG_COMM_REPLAY);
		mg_stats_replay(&t->stats);
		return mg_cuda_graph_launch(dev, t->graph);
	}
#else
	(void)step;
#endif
	return step_compute(t, ps, sr);
}

/* Upload this step's values, read on the device by the loss and the
 * optimizer (so a captured step needs no new kernel arguments). */
static int upload_step_values(struct mg_trainer *t, int64_t step,
			      const struct mg_plan *ps)
{
	struct mg_ctx *ctx = &t->ctx;
	/* The loss is a mean over the step's samples, or over its label
	 * tokens (every rank and micro-batch). */
	double divisor = 0, tokens = 0;
	for (int m = 0; m < t->accum; m++) {
		divisor += (double)ps[m].global_count;
		tokens += (double)t->in.slot[m].label_tokens;
	}
	if (t->mspec.per_token) {
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
	v->bias1 = (float)(1.0 - pow(t->hp.beta1, (double)k));
	v->bias2 = (float)(1.0 - pow(t->hp.beta2, (double)k));
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
	struct mg_stats *st = &t->stats;
	if (t->comm->collect(t->comm, &cs))
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
	struct mg_ctx *ctx = &t->ctx;
	struct mg_optim_vals *v = t->vals_host.ptr;
	int rc = read_metrics(t, (int)t->accum, m);
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
	bool tok = t->mspec.per_token;
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
		if (evaluate(t, e.test_sums))
			return -1;
		e.test_loss = ratio(e.test_sums, MG_METRIC_LOSS_SUM);
		e.test_acc = ratio(e.test_sums, MG_METRIC_CORRECT);
		e.has_test = 1;
#ifdef MG_HAVE_CUDA
		/* Evaluation may have grown the model's buffers: the graph
		 * would replay stale addresses. Capture anew next step. */
		mg_cuda_graph_free(t->graph);
		t->graph = NULL;
#endif
	}
	void *p = realloc(t->ep, (size_t)(t->nep + 1) * sizeof *t->ep);
	if (!p)
		return mg_error("out of memory");
	t->ep = p;
	t->ep[t->nep++] = e;
	if (t->ctx.rank != 0)
		return 0;
	char tr[256], te[256], rate[64];
	mg_metric_format(&t->mspec, e.train_sums, tr, sizeof tr);
	mg_metric_format(&t->mspec, e.test_sums, te, sizeof te);
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
	if (t->ctx.world > 1) {
		struct mg_comm_stats drop;
		if (t->comm->all_reduce_host(t->comm, v, 2, MG_F64,
					     MG_REDUCE_MAX) ||
		    t->comm->collect(t->comm, &drop))
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
	if (!rc && t->watchdog) {
		mg_watchdog_untimed(true);
		if (t->comm->barrier(t->comm))
			rc = mg_error_prefix(
				"after the checkpoint at step %lld",
				(long long)next_step);
		mg_watchdog_untimed(false);
	}
	mg_watchdog_at(next_step - 1, "training");
	return rc;
}

/* A new epoch opens: nothing of it trained yet. */
static void epoch_reset(struct mg_trainer *t)
{
	memset(t->ep_m, 0, sizeof t->ep_m);
	memset(t->ep_base_m, 0, sizeof t->ep_base_m);
	t->ep_steps = t->ep_samples = t->ep_base_samples = 0;
	t->ep_secs = 0;
	t->ep_t0 = mg_now();
}

static int run_loop(struct mg_trainer *t)
{
	struct mg_ctx *ctx = &t->ctx;
	const struct mg_opts *run = t->s->run;
	int64_t ck_every = mg_opt_int(run, "checkpoint_every");
	double ck_secs = mg_opt_float(run, "checkpoint_every_s");
	t->ck_last = t->t_loop = mg_now();
	bool ck_on = mg_opt_bool(run, "checkpoint");
	bool eval_on = mg_opt_bool(run, "eval");
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
		mg_stats_step_begin(&t->stats, step);
		if (!fetched && fetch_step(t, step, t->plans))
			return -1;
		ctx->epoch = step / t->steps_per_epoch;
		ctx->step = step;
		ctx->training = true;
		mg_watchdog_at(step, "training");
		int64_t step_samples = 0; /* over every rank */
		for (int mi = 0; mi < t->accum; mi++) {
			mg_count(ctx, MG_C_SAMPLES_COMPUTED,
				 t->plans[mi].compute_count);
			if (t->in.tokens)
				mg_count(ctx, MG_C_TOKENS_COMPUTED,
					 t->in.slot[mi].row_tokens);
			step_samples += t->plans[mi].global_count;
		}
		if (upload_step_values(t, step, t->plans) ||
		    launch_compute(t, step, t->plans, &sr))
			return -1;
		/* Read the next batch while the device computes this one
		 * (not across an epoch end: evaluation uses the buffers). */
		fetched = false;
		if (!epoch_end && step + 1 < end) {
			if (fetch_step(t, step + 1, t->next_plans))
				return -1;
			fetched = true;
		}
		if (finish_step(t, m, &lr, &gnorm, &skipped) ||
		    check_metrics(
			    t, m,
			    max_count(t, t->batch * ctx->world * t->accum),
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
		if (epoch_end) {
			if (end_of_epoch(t, step, eval_on))
				return -1;
			mg_crash_point("epoch_end");
			epoch_reset(t);
		}
		/* SIGINT/SIGTERM: this step is the last (not when it ends
		 * the run anyway), with a checkpoint. */
		bool ck_due = false;
		int stop = step_agreed(t, ck_secs, &ck_due);
		if (stop < 0)
			return -1;
		stop = step + 1 < end ? stop : 0;
		bool ck_now = ck_on &&
			      (stop || ck_due || epoch_end || step + 1 == end ||
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
	}
	t->stopped = end < t->total_steps;
	if (t->stopped && t->ctx.rank == 0)
		mg_info("stopped after step %lld of %lld (run.stop_after); "
			"continue with --resume",
			(long long)end, (long long)t->total_steps);
	return 0;
}

/* --resume of a checkpoint at the run's last step whose final writes a
 * crash cut short: the last epoch's end (its evaluation) when the
 * checkpoint does not record it, then the checkpoint again (it writes
 * the adapter folder); mg_train writes the final report. */
static int finish_run(struct mg_trainer *t)
{
	int64_t last = t->total_steps - 1;
	bool recorded = t->nep > 0 && !t->ep_steps &&
			t->ep[t->nep - 1].epoch == last / t->steps_per_epoch;
	if (!recorded && end_of_epoch(t, last, mg_opt_bool(t->s->run, "eval")))
		return -1;
	epoch_reset(t);
	if (mg_opt_bool(t->s->run, "checkpoint") &&
	    save_checkpoint(t, t->total_steps))
		return -1;
	if (t->ctx.rank == 0)
		mg_info("the run's last step was checkpointed: its final "
			"writes completed");
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
		.s = t->s,
		.rank = t->ctx.rank,
		.world = t->ctx.world,
		.comm = t->comm,
		.stats = &t->stats,
		.run_dir = t->run_dir,
		.device = mg_device_desc(t),
		.precision = t->ctx.compute_dtype,
		.batch = t->batch,
		.steps_per_epoch = t->steps_per_epoch,
		.total_steps = t->total_steps,
		.start_step = t->start_step,
		.skipped_steps = t->skipped_steps,
		.trainable_parameters = mg_spec_numel(&t->spec, MG_P_TRAIN),
		.t_begin = t->t_begin,
		.t_loop = t->t_loop,
		.ep = t->ep,
		.nep = t->nep,
		.metrics = &t->mspec,
		.profile_gather = profile_gather,
		.profile_json = profile_json,
		.profile_summary = profile_summary,
		.profile_arg = t,
	};
	return &t->rs;
}

static void teardown(struct mg_trainer *t)
{
	struct mg_ctx *ctx = &t->ctx;
	mg_profile_free(t); /* CUPTI flushes while the device is alive */
	mg_input_free(t);
#ifdef MG_HAVE_CUDA
	mg_cuda_graph_free(t->graph);
	t->graph = NULL;
#endif
	if (ctx->dev) {
		mg_buf_free(ctx, &t->scale_host);
		mg_buf_free(ctx, &t->metrics);
		mg_buf_free(ctx, &t->grad_scale);
		mg_buf_free(ctx, &t->vals_dev);
		mg_buf_free(ctx, &t->vals_host);
		mg_buf_free(ctx, &t->count_dev);
		mg_buf_free(ctx, &t->count_host);
	}
	static const int order[] = {MG_SEC_STRATEGY, MG_SEC_MODEL,
				    MG_SEC_DATASET};
	for (int k = 0; k < 3; k++) {
		int i = order[k];
		if (t->inst[i])
			t->s->plugin[i].desc->destroy(t->inst[i]);
	}
	mg_spec_free(&t->spec);
	mg_fingerprint_free(&t->fp);
#ifdef MG_HAVE_CUDA
	mg_cuda_device_free(&t->dev);
#endif
	if (t->comm)
		t->comm->destroy(t->comm);
	mg_report_close(&t->rep);
	mg_stats_free(&t->stats);
	free(t->ep);
	free(t->plans);
	free(t->next_plans);
	free(t->graph_key);
}

/* eval.json beside the checkpoint: what --eval-only measured. */
static int write_eval_json(const struct mg_trainer *t, const char *source,
			   const double *sums, int64_t samples)
{
	char path[PATH_MAX + 16], tmp[PATH_MAX + 48];
	snprintf(path, sizeof path, "%s/eval.json", t->run_dir);
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
	for (int i = 0; i < t->mspec.ndecl; i++) {
		double v = mg_metric_value(&t->mspec.decl[i], sums);
		fprintf(f, "%s\n    \"%s\": ", i ? "," : "",
			t->mspec.decl[i].name);
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
	t.s = s;
	t.t_begin = mg_now();
	t.eval_only = true; /* a finished run's checkpoint loads too */
	int rc = setup(&t);
	char ck[PATH_MAX + 32], source[PATH_MAX + 64] = "initial weights";
	/* a model started from a weights folder says which */
	const char *hf = mg_session_plugin_str(s, MG_SEC_MODEL, "hf_dir");
	if (hf[0])
		snprintf(source, sizeof source, "initial weights of %s", hf);
	if (!rc) {
		snprintf(ck, sizeof ck, "%s/" MG_CKPT_FILE, t.run_dir);
		if (access(ck, F_OK) == 0) {
			rc = mg_trainer_load_checkpoint(&t);
			snprintf(source, sizeof source, "%s", ck);
		}
	}
	double sums[MG_METRIC_MAX];
	if (!rc)
		rc = evaluate(&t, sums);
	if (!rc && t.ctx.rank == 0) {
		char m[256];
		int64_t n =
			t.data->count(t.inst[MG_SEC_DATASET], MG_SPLIT_TEST);
		mg_info("eval (%s, step %lld): test %s over %lld samples, "
			"%.0f %s",
			source, (long long)t.start_step,
			mg_metric_format(&t.mspec, sums, m, sizeof m),
			(long long)n, sums[MG_METRIC_COUNT],
			t.mspec.per_token ? "label tokens" : "counted");
		rc = write_eval_json(&t, source, sums, n);
	}
	if (rc) {
		mg_log(MG_LOG_ERROR, "%s", mg_last_error());
		if (t.comm && t.ctx.world > 1)
			t.comm->abort(t.comm, 1);
	}
	teardown(&t);
	return rc ? 1 : 0;
}

/* The run stopped on SIGINT/SIGTERM after a step (every rank): report
 * it as interrupted, say what was kept. */
static int end_interrupted(struct mg_trainer *t)
{
	int rc = mg_report_write_status(mg_run_view(t), "interrupted", NULL,
					true);
	if (rc || t->ctx.rank != 0)
		return rc;
	mg_report_summary(mg_run_view(t), stdout);
	fflush(stdout);
	if (mg_opt_bool(t->s->run, "checkpoint"))
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
	if (t->ctx.rank == 0 &&
	    mg_report_write_status(mg_run_view(t), "failed", error, false))
		mg_log(MG_LOG_ERROR, "run report not updated: %s",
		       mg_last_error());
}

/* ---- inference (`mgrun generate`): the --eval-only setup, kept ---- */

int mg_inference_open(struct mg_session *s, struct mg_trainer **out, char *ckpt,
		      size_t len, bool load_ckpt)
{
	struct mg_trainer *t = calloc(1, sizeof *t);
	if (!t)
		return mg_error("out of memory");
	t->s = s;
	t->t_begin = mg_now();
	t->eval_only = true; /* a finished run's checkpoint loads too */
	int rc = setup(t);
	char path[PATH_MAX + 32];
	ckpt[0] = 0;
	if (!rc) {
		snprintf(path, sizeof path, "%s/" MG_CKPT_FILE, t->run_dir);
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
		teardown(t);
		free(t);
		return mg_error("%s", why);
	}
	t->ctx.training = false;
	*out = t;
	return 0;
}

void mg_inference_close(struct mg_trainer *t)
{
	if (!t)
		return;
	teardown(t);
	free(t);
}

int mg_train(struct mg_session *s, bool resume)
{
	struct mg_trainer t;
	memset(&t, 0, sizeof t);
	t.s = s;
	t.t_begin = mg_now();
	int rc = mg_crash_points_check();
	if (rc > 0) /* MG_TEST_CRASH_AT=list */
		return 0;
	if (rc) {
		mg_log(MG_LOG_ERROR, "%s", mg_last_error());
		return 1;
	}
	mg_stop_install();
	rc = setup(&t);
	/* before reading the checkpoint another run may be writing */
	if (!rc && t.ctx.rank == 0)
		rc = mg_run_lock_take(&t.lock, t.run_dir);
	/* after setup: the plugins have read their files */
	if (!rc && (resume || t.ctx.rank == 0))
		rc = mg_fingerprint_make(&t.fp, s, t.run_dir, t.cache_dir);
	if (!rc && resume)
		rc = mg_trainer_load_checkpoint(&t);
	bool reporting = false;
	if (!rc) {
		/* A QLoRA base says so: frozen parameters stored as NF4. */
		int64_t nf4 = 0;
		for (int i = 0; i < t.spec.nparams; i++)
			if (t.spec.params[i].dtype == MG_NF4)
				nf4 += t.spec.params[i].numel;
		char base[64] = "";
		if (nf4)
			snprintf(base, sizeof base, ", %lld frozen in NF4",
				 (long long)nf4);
		mg_info("mgrun: %s: model %s (%lld parameters%s, %d units), "
			"dataset %s, strategy %s, %s on %s, %lld steps of "
			"%lld, run dir %s",
			s->ini_path, s->plugin[MG_SEC_MODEL].desc->name,
			(long long)mg_spec_numel(&t.spec, MG_P_TRAIN), base,
			t.spec.nunits, s->plugin[MG_SEC_DATASET].desc->name,
			s->plugin[MG_SEC_STRATEGY].desc->name,
			mg_dtype_name(t.ctx.compute_dtype), mg_device_desc(&t),
			(long long)t.total_steps, (long long)t.batch,
			t.run_dir);
		rc = mg_report_open(mg_run_view(&t), resume);
		reporting = !rc;
	}
	if (!rc) /* before the first CUDA graph capture */
		rc = mg_profile_init(&t);
	if (!rc)
		rc = t.finishing ? finish_run(&t) : run_loop(&t);
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
	if (!rc && !t.stop_sig && t.ctx.rank == 0)
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
		if (t.comm && t.ctx.world > 1)
			t.comm->abort(t.comm, 1);
	}
	teardown(&t);
	mg_run_lock_release(&t.lock);
	mg_stop_restore();
	if (rc)
		return 1;
	/* as a shell reports a process the signal ended */
	return t.stop_sig ? 128 + t.stop_sig : 0;
}
