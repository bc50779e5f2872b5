/*
 * strategy_bind.c - the strategy as the model sees it (strategy_bind.h).
 * A model calls mg_grads_ready() from inside its backward and returns the
 * error it gets; without this the report would blame the model. The
 * trampolines cost one indirect call per unit and phase.
 */
#include <stdio.h>
#include <string.h>

#include "engine/strategy_bind.h"

static struct mg_unit_view *bind_acquire(void *self, int unit, enum mg_phase ph)
{
	struct mg_strategy_bind *b = self;
	return b->real->acquire(b->self, unit, ph);
}

static void bind_release(void *self, int unit, enum mg_phase ph)
{
	struct mg_strategy_bind *b = self;
	b->real->release(b->self, unit, ph);
}

/* Remember the strategy's own message: the model may prefix it, and the
 * trainer reports it as the strategy's. */
static int bind_grads_ready(void *self, int unit)
{
	struct mg_strategy_bind *b = self;
	int rc = b->real->grads_ready(b->self, unit);
	if (rc && !b->failed) {
		b->failed = true;
		snprintf(b->err, sizeof b->err,
			 "strategy '%s' grads_ready(unit %d) failed during "
			 "the model's backward: %s",
			 b->name, unit, mg_last_error());
	}
	return rc;
}

void mg_strategy_bind(struct mg_strategy_bind *b, struct mg_ctx *ctx,
		      const char *name, const struct mg_strategy_ops *ops,
		      void *self)
{
	memset(b, 0, sizeof *b);
	b->real = ops;
	b->self = self;
	b->name = name;
	b->ops.acquire = bind_acquire;
	b->ops.release = bind_release;
	b->ops.grads_ready = bind_grads_ready;
	ctx->strategy = b;
	ctx->strategy_ops = &b->ops;
}

void mg_strategy_bind_reset(struct mg_strategy_bind *b)
{
	b->failed = false;
	b->err[0] = 0;
}

int mg_strategy_bind_check(const struct mg_strategy_bind *b, long long step)
{
	if (b->failed)
		return mg_error("step %lld: %s", step, b->err);
	return 0;
}
