/*
 * zero1.c - an example third-party strategy: ZeRO-1, built only against an
 * installed mgrun and its strategy kit (mg/kit.h). Parameters and
 * gradients stay whole on every rank (each unit's gradients all-reduced
 * as backward produces them: the kit's unit pipeline with whole
 * gradients); the master weights and the optimizer state are sharded:
 * each rank updates its block of every flat parameter and the blocks are
 * all-gathered (the kit's shard store, state on the device). Optimizer
 * memory is 1/N a rank.
 *
 * Against ddp_ds: the same all-reduced gradients and the same
 * element-wise update, so without clipping the parameters are equal bit
 * for bit; with clipping the norm is summed in F32 by shard and then
 * across ranks, in another order than ddp_ds sums it, so they differ by
 * the F32 rounding of the norm (tests/strategies, scenario zero).
 */
#include <stdlib.h>

#include <mg/kit.h>

static const struct mg_option options[] = {MG_UNIT_STRATEGY_OPTIONS,
					   MG_OPT_END};

static int z1_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct mg_zero *z = calloc(1, sizeof *z);
	if (!z)
		return mg_error("out of memory");
	mg_unit_strategy_init(&z->base, o, ctx);
	*self = z;
	return 0;
}

/* The policies: gradients kept whole (all-reduced), state on the device. */
static int z1_setup(void *self, const struct mg_model_spec *spec)
{
	return mg_zero_setup(self, spec, MG_UP_WHOLE_GRADS, false, 0, "zero1");
}

static const struct mg_strategy_ops ops = {
	MG_ZERO_OPS,
	.setup = z1_setup,
};

static const struct mg_plugin plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "zero1",
	.version = "0.1",
	.description = "example: ZeRO-1 (optimizer state and master weights "
		       "sharded, gradients all-reduced whole)",
	.options = options,
	.create = z1_create,
	.destroy = mg_zero_destroy,
	.ops = &ops,
};

MG_PLUGIN_DEFINE(plugin)
