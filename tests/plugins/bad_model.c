/*
 * bad_model.c - model plugins that load but hand back nothing usable:
 * BAD_NO_UNITS declares no units; BAD_NO_METRICS declares one unit and
 * never writes its metrics. The trainer must refuse both, naming them.
 * BAD_CRASH dies of SIGSEGV in its first forward(): a sweep must report
 * such a child by the signal's name (tests/analysis/sweep_signal.sh).
 * BAD_PART_OLD and BAD_PART_NEW never write their metrics either, and
 * have an init_unit_part (ABI 1.7) that fails when called: built as
 * ABI 1.6 (OLD) the core must not read it (a 1.6 plugin's ops end
 * before it) and the run gets past setup to the metrics error; built
 * as 1.7 (NEW) fsdp's setup calls it.
 */
#include <signal.h>
#include <string.h>

#include "mg/mg.h"

static int create(const struct mg_opts *o, struct mg_ctx *c, void **self)
{
	(void)o, (void)c;
	static int dummy;
	*self = &dummy;
	return 0;
}

static void destroy(void *self)
{
	(void)self;
}

static int declare(void *self, struct mg_model_spec *spec)
{
	(void)self;
#ifdef BAD_NO_UNITS
	(void)spec;
	return 0;
#else
	int64_t shape[1] = {4};
	return mg_spec_add_unit(spec, "u") < 0 ||
			       mg_spec_add_param(spec, "w", MG_DTYPE_AUTO,
						 MG_P_TRAIN, 1, shape) < 0
		       ? -1
		       : 0;
#endif
}

static int init_unit(void *self, int unit, struct mg_tensor *params,
		     uint64_t seed)
{
	(void)self, (void)unit, (void)seed;
	memset(params[0].data, 0, mg_tensor_bytes(&params[0]));
	return 0;
}

#if defined(BAD_PART_OLD) || defined(BAD_PART_NEW)
static int init_part(void *self, int unit, struct mg_tensor *params,
		     uint64_t seed, const int64_t *lo, const int64_t *hi)
{
	(void)self, (void)unit, (void)params, (void)seed, (void)lo, (void)hi;
	return mg_error("init_unit_part called");
}
#endif

static int forward(void *self, struct mg_ctx *ctx, const struct mg_batch *b,
		   struct mg_tensor *metrics)
{
	(void)self, (void)ctx, (void)b, (void)metrics;
#ifdef BAD_CRASH
	raise(SIGSEGV);
#endif
	return 0;
}

static int backward(void *self, struct mg_ctx *ctx)
{
	(void)self, (void)ctx;
	return 0;
}

static const struct mg_model_ops ops = {
	.declare = declare,
	.init_unit = init_unit,
	.forward = forward,
	.backward = backward,
#if defined(BAD_PART_OLD) || defined(BAD_PART_NEW)
	.init_unit_part = init_part,
#endif
};

static const struct mg_plugin desc = {
#ifdef BAD_PART_OLD
	.abi_major = MG_ABI_MAJOR,
	.abi_minor = 6,
	.struct_size = sizeof(struct mg_plugin),
#else
	MG_PLUGIN_HEADER,
#endif
	.kind = MG_PLUGIN_MODEL,
	.name = PLUGIN_NAME,
	.version = "0",
	.description = "a model plugin that hands back nothing usable",
	.create = create,
	.destroy = destroy,
	.ops = &ops,
};
MG_PLUGIN_DEFINE(desc)
