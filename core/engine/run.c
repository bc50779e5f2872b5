/*
 * run.c - a run's start-up and teardown (run.h), shared by training,
 * --eval-only, `mgrun generate` and `mgrun export`.
 */
#include <cblas.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "dist/dist.h"
#include "engine/config_agree.h"
#include "engine/core_schema.h"
#include "engine/run.h"
#include "ops/ops_tune.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

static int setup_run_dir(struct mg_run *t)
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

static int create_instances(struct mg_run *t)
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
static int load_metric_spec(struct mg_run *t)
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

int mg_run_open(struct mg_run *t, struct mg_session *s)
{
	t->s = s;
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
	return setup_run_dir(t);
}

void mg_run_close(struct mg_run *t)
{
	static const int order[] = {MG_SEC_STRATEGY, MG_SEC_MODEL,
				    MG_SEC_DATASET};
	for (int k = 0; k < 3; k++) {
		int i = order[k];
		if (t->inst[i])
			t->s->plugin[i].desc->destroy(t->inst[i]);
		t->inst[i] = NULL;
	}
	mg_spec_free(&t->spec);
#ifdef MG_HAVE_CUDA
	mg_cuda_device_free(&t->dev);
#endif
	if (t->comm)
		t->comm->destroy(t->comm);
	t->comm = NULL;
	mg_stats_free(&t->stats);
}

const char *mg_run_device_desc(const struct mg_run *t)
{
#ifdef MG_HAVE_CUDA
	if (t->dev.kind == MG_DEV_CUDA)
		return mg_cuda_device_name(&t->dev);
#endif
	(void)t;
	return "cpu";
}
