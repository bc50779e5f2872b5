/*
 * strategy_bind.h - how the core binds a strategy into the run context
 * (ctx->strategy, ctx->strategy_ops) so that a failure of the strategy
 * inside a call the model makes (mg_grads_ready during backward) is
 * reported as the strategy's, not as the model's backward failing.
 */
#ifndef MG_STRATEGY_BIND_H
#define MG_STRATEGY_BIND_H

#include <stdbool.h>

#include "mg/mg.h"

struct mg_strategy_bind {
	/* What models reach through ctx: acquire, release and grads_ready
	 * forward to the plugin's; nothing else is reachable from ctx. */
	struct mg_strategy_ops ops;
	const struct mg_strategy_ops *real;
	void *self;
	const char *name;
	/* The first grads_ready failure since mg_strategy_bind_reset. */
	bool failed;
	char err[1024];
};

/* Point ctx at b, which forwards to the plugin `name`'s ops and self. */
void mg_strategy_bind(struct mg_strategy_bind *b, struct mg_ctx *ctx,
		      const char *name, const struct mg_strategy_ops *ops,
		      void *self);
void mg_strategy_bind_reset(struct mg_strategy_bind *b);
/* After the model's backward: if the strategy's grads_ready failed in
 * it (whatever the model returned, even 0), set the error to say so and
 * return -1; else 0. */
int mg_strategy_bind_check(const struct mg_strategy_bind *b, long long step);

#endif
