/*
 * ddp_ds.c - the seed paper's DDP with a distributed sampler: the epoch's
 * order (one seed on every rank) is cut into global batches of world x
 * batch_size, and each rank reads, copies and computes only its block.
 * With the same global batch this trains the model a single rank would.
 */
#include "mg/kit/ddp.h"

static const struct mg_option ds_options[] = {
	MG_DDP_OPTIONS,
	MG_OPT_END,
};

static int64_t ds_steps(void *self, int64_t n, int64_t batch)
{
	struct mg_ddp *d = self;
	return mg_ddp_steps(d, n, batch * d->ctx->world);
}

/* Read and compute block `rank` of the global batch. */
static int ds_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		   int64_t step, struct mg_plan *p)
{
	struct mg_ddp *d = self;
	if (mg_sampler_plan_own(&d->sampler, d->ctx->world, d->ctx->rank, n,
				batch, epoch, step, p))
		return mg_error_prefix("ddp_ds");
	return 0;
}

static const struct mg_strategy_ops ds_ops = {
	MG_DDP_COMMON_OPS,
	.steps_per_epoch = ds_steps,
	.plan = ds_plan,
};

static const struct mg_plugin ds_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "ddp_ds",
	.version = "1.0",
	.description =
		"DDP with a distributed sampler: each rank reads, copies and "
		"computes only its share of every global batch",
	.options = ds_options,
	.create = mg_ddp_create,
	.destroy = mg_ddp_destroy,
	.ops = &ds_ops,
};

MG_PLUGIN_DEFINE(ds_plugin)
