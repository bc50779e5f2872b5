/*
 * zero2_host.c - an example third-party strategy: ZeRO-2 with the
 * optimizer state in host memory, built only against an installed mgrun
 * and its strategy kit (mg/kit.h). Parameters stay whole on the device;
 * each unit's gradients are reduce-scattered as backward produces them
 * (the kit's unit pipeline), so a rank keeps only its shard of the
 * gradient; the fp32 master weights and the optimizer state of that
 * shard live in host memory, updated there by the kit's host optimizer,
 * and the updated blocks go back to the device and are all-gathered (the
 * kit's shard store). Device memory for gradients is 1/N a rank, for
 * optimizer state none.
 *
 * Against offload (the in-tree ZeRO-Offload): the same reduce-scatters,
 * the same norm (the shards summed in the same order) and the same host
 * update, so the parameters are equal bit for bit, clipping or not.
 */
#include <stdlib.h>

#include <mg/kit.h>

struct zero2_host {
	struct mg_zero zero; /* first: MG_ZERO_OPS */
	int threads;
};

static const struct mg_option options[] = {
	MG_UNIT_STRATEGY_OPTIONS,
	MG_OPT_I("threads", "0", 0, 4096,
		 "host optimizer threads (0: this rank's share of the cores)"),
	MG_OPT_END,
};

static int z2_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct zero2_host *z = calloc(1, sizeof *z);
	if (!z)
		return mg_error("out of memory");
	mg_unit_strategy_init(&z->zero.base, o, ctx);
	z->threads = (int)mg_opt_int(o, "threads");
	*self = z;
	return 0;
}

/* The policies: gradients reduce-scattered (kept as shards), the master
 * weights and optimizer state in host memory. */
static int z2_setup(void *self, const struct mg_model_spec *spec)
{
	struct zero2_host *z = self;
	return mg_zero_setup(&z->zero, spec, 0, true, z->threads, "zero2_host");
}

static const struct mg_strategy_ops ops = {
	MG_ZERO_OPS,
	.setup = z2_setup,
};

static const struct mg_plugin plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "zero2_host",
	.version = "0.1",
	.description = "example: ZeRO-2 with the optimizer state and master "
		       "weights in host memory (gradients reduce-scattered)",
	.options = options,
	.create = z2_create,
	.destroy = mg_zero_destroy,
	.ops = &ops,
};

MG_PLUGIN_DEFINE(plugin)
