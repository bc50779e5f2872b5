/*
 * single.c - the single-rank strategy: one full replica, the whole global
 * batch on this rank, the optimizer on the local device. Every run with
 * one process goes through the same model/strategy contract as the
 * distributed strategies.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/kit/replica.h"
#include "mg/kit/sampler.h"
#include "mg/mg.h"

struct single {
	struct mg_ctx *ctx;
	struct mg_replica rep;
	struct mg_sampler sampler;
	bool drop_last;
};

static const struct mg_option single_options[] = {
	MG_OPT_B("shuffle", "true", "shuffle the training set every epoch"),
	MG_OPT_B("drop_last", "true",
		 "skip the last incomplete batch of an epoch"),
	MG_OPT_END,
};

static int single_create(const struct mg_opts *o, struct mg_ctx *ctx,
			 void **self)
{
	if (ctx->world != 1)
		return mg_error("strategy 'single' runs on one rank, the job "
				"has %d (use ddp_ds or fsdp)",
				ctx->world);
	struct single *s = calloc(1, sizeof *s);
	if (!s)
		return mg_error("out of memory");
	s->ctx = ctx;
	s->drop_last = mg_opt_bool(o, "drop_last");
	mg_sampler_init(&s->sampler, ctx->seed, mg_opt_bool(o, "shuffle"));
	*self = s;
	return 0;
}

static void single_destroy(void *self)
{
	struct single *s = self;
	mg_replica_free(&s->rep);
	mg_sampler_free(&s->sampler);
	free(s);
}

static int single_setup(void *self, const struct mg_model_spec *spec)
{
	struct single *s = self;
	return mg_replica_init(&s->rep, s->ctx, spec);
}

static int64_t single_steps(void *self, int64_t n, int64_t batch)
{
	struct single *s = self;
	return s->drop_last ? n / batch : (n + batch - 1) / batch;
}

static int single_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		       int64_t step, struct mg_plan *p)
{
	struct single *s = self;
	const int64_t *order = mg_sampler_order(&s->sampler, n, epoch);
	if (!order)
		return -1;
	int64_t begin = step * batch, count = batch;
	if (begin + count > n)
		count = n - begin;
	if (count <= 0 || count > p->read_cap)
		return mg_error("single: step %lld of epoch %lld is outside "
				"the epoch",
				(long long)step, (long long)epoch);
	memcpy(p->read_idx, order + begin, (size_t)count * sizeof *order);
	p->n_read = count;
	p->compute_begin = 0;
	p->compute_count = count;
	p->global_count = count;
	p->global_offset = 0;
	return 0;
}

static int single_begin(void *self)
{
	struct single *s = self;
	return mg_replica_zero_grads(&s->rep);
}

static struct mg_unit_view *single_acquire(void *self, int unit,
					   enum mg_phase ph)
{
	struct single *s = self;
	return mg_replica_view(&s->rep, unit, ph);
}

static void single_release(void *self, int unit, enum mg_phase ph)
{
	(void)self;
	(void)unit;
	(void)ph;
}

static int single_grads_ready(void *self, int unit)
{
	(void)self;
	(void)unit;
	return 0; /* nothing to reduce on one rank */
}

static int single_step(void *self, const struct mg_optim_hparams *h,
		       struct mg_step_report *r)
{
	struct single *s = self;
	r->comm_seconds = 0;
	return mg_replica_step(&s->rep, h);
}

static int single_save(void *self, struct mg_ckpt *ck)
{
	struct single *s = self;
	return mg_replica_save(&s->rep, ck);
}

static int single_load(void *self, struct mg_ckpt *ck)
{
	struct single *s = self;
	return mg_replica_load(&s->rep, ck);
}

static const struct mg_strategy_ops single_ops = {
	.setup = single_setup,
	.steps_per_epoch = single_steps,
	.plan = single_plan,
	.begin_step = single_begin,
	.acquire = single_acquire,
	.release = single_release,
	.grads_ready = single_grads_ready,
	.step = single_step,
	.save = single_save,
	.load = single_load,
	/* Gradients live in the replica from begin_step to step. */
	.caps = MG_STRATEGY_GRAD_ACCUM,
};

static const struct mg_plugin single_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "single",
	.version = "1.0",
	.description = "one rank, one full replica: the reference every "
		       "distributed strategy must match",
	.options = single_options,
	.create = single_create,
	.destroy = single_destroy,
	.ops = &single_ops,
};

MG_PLUGIN_DEFINE(single_plugin)
