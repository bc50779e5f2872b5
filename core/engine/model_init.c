/*
 * model_init.c - the strategies' way to a unit's initial values: the
 * model's init_unit, or init_unit_part for the element ranges a shard
 * needs, where the model has it.
 */
#include "mg_internal.h"

#include "mg/mg.h"

int mg_init_unit_part(struct mg_ctx *ctx, const struct mg_model_spec *s,
		      int unit, struct mg_tensor *params_host,
		      const int64_t *lo, const int64_t *hi)
{
	if (unit < 0 || unit >= s->nunits)
		return mg_error("init: unit %d out of range", unit);
	/* (the loader's copy of the ops: NULL for a model older than the
	 * op) */
	const struct mg_model_ops *o = ctx->model_ops;
	const bool part = lo && hi && o->init_unit_part;
	const uint64_t seed = mg_rng_key(ctx->seed, (uint64_t)unit);
	int rc = part ? o->init_unit_part(ctx->model, unit, params_host, seed,
					  lo, hi)
		      : o->init_unit(ctx->model, unit, params_host, seed);
	if (rc)
		return mg_error_prefix("model init of unit '%s'",
				       s->units[unit].name);
	return 0;
}

int mg_init_unit(struct mg_ctx *ctx, const struct mg_model_spec *s, int unit,
		 struct mg_tensor *params_host)
{
	return mg_init_unit_part(ctx, s, unit, params_host, NULL, NULL);
}
