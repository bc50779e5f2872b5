/*
 * bad_strategy.c - strategies that break the contract one way each, for
 * the loader and trainer tests (tests/plugins/CMakeLists.txt): ddp_ds
 * from the kit with one callback missing or one answer wrong. Each
 * BAD_* macro builds one variant; the core must refuse it with a message
 * naming the strategy and the callback. BAD_OLD_ABI breaks nothing: a
 * correct strategy that says it was built for ABI 1.0, so the core must
 * train with it and read nothing a later minor added (its `caps`).
 */
#include "mg/kit.h"

static const struct mg_option options[] = {
	MG_DDP_OPTIONS,
	MG_OPT_END,
};

static int64_t bad_steps(void *self, int64_t n, int64_t batch)
{
	struct mg_ddp *d = self;
	return mg_ddp_steps(d, n, batch * d->ctx->world);
}

static int bad_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		    int64_t step, struct mg_plan *p)
{
	struct mg_ddp *d = self;
	if (mg_sampler_plan_own(&d->sampler, d->ctx->world, d->ctx->rank, n,
				batch, epoch, step, p))
		return -1;
#if defined(BAD_ZERO_GLOBAL)
	p->global_count = 0; /* nothing to divide by */
#elif defined(BAD_RANGE)
	p->compute_begin = 1; /* past the end of what it reads */
#endif
	return 0;
}

#ifdef BAD_GRADS_FAIL
/* Refuses every unit: the error must be reported as this strategy's. */
static int bad_grads_ready(void *self, int unit)
{
	(void)self;
	return mg_error("bad_strategy refuses the gradients of unit %d", unit);
}
#else
#define bad_grads_ready mg_ddp_grads_ready
#endif

/* MG_DDP_COMMON_OPS spelled out, so a variant can leave one out. */
static const struct mg_strategy_ops ops = {
	.setup = mg_ddp_setup,
	.steps_per_epoch = bad_steps,
	.plan = bad_plan,
	.begin_step = mg_ddp_begin_step,
	.acquire = mg_ddp_acquire,
	.release = mg_ddp_release,
	.grads_ready = bad_grads_ready,
#ifndef BAD_NO_STEP
	.step = mg_ddp_step,
#endif
	.save = mg_ddp_save,
	.load = mg_ddp_load,
	.caps = MG_STRATEGY_GRAD_ACCUM,
};

static const struct mg_plugin plugin = {
#ifdef BAD_OLD_ABI
	.abi_major = MG_ABI_MAJOR,
	.abi_minor = 0,
	.struct_size = sizeof(struct mg_plugin),
#else
	MG_PLUGIN_HEADER,
#endif
	.kind = MG_PLUGIN_STRATEGY,
	.name = PLUGIN_NAME,
	.version = "0",
	.description = "a strategy that breaks the contract, for tests",
	.options = options,
	.create = mg_ddp_create,
	.destroy = mg_ddp_destroy,
	.ops = &ops,
};

MG_PLUGIN_DEFINE(plugin)
