/*
 * ddp.c - the seed paper's plain DDP: every rank reads, copies and
 * computes the whole dataset in the same order (no distributed sampler),
 * so N GPUs do N times the work of one for the same model; gradients are
 * all-reduced as in every DDP-family strategy. Kept as the baseline that
 * shows why sharding the data matters.
 */
#include "mg/kit/ddp.h"

static const struct mg_option ddp_options[] = {
	MG_DDP_OPTIONS,
	MG_OPT_END,
};

static int64_t ddp_steps(void *self, int64_t n, int64_t batch)
{
	return mg_ddp_steps(self, n, batch);
}

/* The batch one rank alone would take at this step, on every rank. */
static int ddp_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		    int64_t step, struct mg_plan *p)
{
	struct mg_ddp *d = self;
	int64_t c = mg_ddp_blocks(d, n, batch, 1, epoch, step, 0, 1,
				  p->read_idx, p->read_cap);
	if (c < 0)
		return mg_error_prefix("ddp");
	p->n_read = c;
	p->compute_begin = 0;
	p->compute_count = c;
	/* Every rank computes the same c samples: the summed gradient over
	 * world x c divides back to the mean over c. Dropout masks key on
	 * the position in that one batch, identical on every rank. */
	p->global_count = (int64_t)d->ctx->world * c;
	p->global_offset = 0;
	return 0;
}

static const struct mg_strategy_ops ddp_ops = {
	MG_DDP_COMMON_OPS,
	.steps_per_epoch = ddp_steps,
	.plan = ddp_plan,
};

static const struct mg_plugin ddp_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "ddp",
	.version = "1.0",
	.description = "DDP without a distributed sampler: every rank "
		       "processes the whole dataset (N GPUs, N times the work)",
	.options = ddp_options,
	.create = mg_ddp_create,
	.destroy = mg_ddp_destroy,
	.ops = &ddp_ops,
};

MG_PLUGIN_DEFINE(ddp_plugin)
