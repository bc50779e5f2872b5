/*
 * ddp_rr.c - the seed paper's DDP with round-robin workload distribution:
 * every rank reads and copies the whole global batch to its GPU, then
 * computes only its own share of it. Same samples per rank as ddp_ds (so
 * the same model), but world times the reading and host-to-device
 * traffic: the report's h2d_bytes shows the cost.
 */
#include "mg/kit/ddp.h"

static const struct mg_option rr_options[] = {
	MG_DDP_OPTIONS,
	MG_OPT_END,
};

static int64_t rr_steps(void *self, int64_t n, int64_t batch)
{
	struct mg_ddp *d = self;
	return mg_ddp_steps(d, n, batch * d->ctx->world);
}

/* Read all world blocks of the global batch; compute block `rank`. */
static int rr_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		   int64_t step, struct mg_plan *p)
{
	struct mg_ddp *d = self;
	const int world = d->ctx->world;
	int64_t c = mg_ddp_blocks(d, n, batch, world, epoch, step, 0, world,
				  p->read_idx, p->read_cap);
	if (c < 0)
		return mg_error_prefix("ddp_rr");
	p->n_read = world * c;
	p->compute_begin = d->ctx->rank * c;
	p->compute_count = c;
	p->global_count = world * c;
	p->global_offset = d->ctx->rank * c;
	return 0;
}

static int64_t rr_max_read(void *self, int64_t batch)
{
	struct mg_ddp *d = self;
	return batch * d->ctx->world;
}

static const struct mg_strategy_ops rr_ops = {
	MG_DDP_COMMON_OPS,
	.steps_per_epoch = rr_steps,
	.plan = rr_plan,
	.max_read = rr_max_read,
};

static const struct mg_plugin rr_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "ddp_rr",
	.version = "1.0",
	.description = "DDP, round robin: every rank receives the whole global "
		       "batch and computes its share",
	.options = rr_options,
	.create = mg_ddp_create,
	.destroy = mg_ddp_destroy,
	.ops = &rr_ops,
};

MG_PLUGIN_DEFINE(rr_plugin)
