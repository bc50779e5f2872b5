/*
 * bf16_ddp.c - an example third-party strategy: DDP with bf16 gradient
 * compression (PyTorch's bf16_compress_hook), built only against an
 * installed mgrun and its strategy kit (mg/kit.h). The kit's DDP core
 * keeps the replica, buckets the gradients and steps the optimizer; its
 * sampler gives each rank its own block of every global batch (ddp_ds's
 * split); this file only picks the communication hook. With
 * compress = false it trains exactly what ddp_ds trains.
 */
#include <mg/kit.h>

static const struct mg_option options[] = {
	MG_DDP_OPTIONS,
	MG_OPT_B("compress", "true",
		 "all-reduce gradients in bf16 (false: in their own dtype, "
		 "as ddp_ds)"),
	MG_OPT_END,
};

static int bf_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	if (mg_ddp_create(o, ctx, self))
		return -1;
	if (mg_opt_bool(o, "compress") &&
	    mg_ddp_register_comm_hook(*self, &mg_ddp_hook_bf16)) {
		mg_ddp_destroy(*self);
		return -1;
	}
	return 0;
}

static int64_t bf_steps(void *self, int64_t n, int64_t batch)
{
	struct mg_ddp *d = self;
	return mg_ddp_steps(d, n, batch * d->ctx->world);
}

static int bf_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		   int64_t step, struct mg_plan *p)
{
	struct mg_ddp *d = self;
	return mg_sampler_plan_own(&d->sampler, d->ctx->world, d->ctx->rank, n,
				   batch, epoch, step, p);
}

static const struct mg_strategy_ops ops = {
	MG_DDP_COMMON_OPS,
	.steps_per_epoch = bf_steps,
	.plan = bf_plan,
};

static const struct mg_plugin plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "bf16_ddp",
	.version = "0.1",
	.description = "example: DDP with bf16-compressed gradient all-reduce",
	.options = options,
	.create = bf_create,
	.destroy = mg_ddp_destroy,
	.ops = &ops,
};

MG_PLUGIN_DEFINE(plugin)
