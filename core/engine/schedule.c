/*
 * schedule.c - optimizer settings from [optimizer] and the learning-rate
 * schedule (linear warmup, then constant or cosine to min_lr).
 */
#include <math.h>

#include "engine/trainer.h"

void mg_optim_from_opts(struct mg_optim_hparams *h, const struct mg_opts *o)
{
	h->kind = mg_opt_enum(o, "name") == 1 ? MG_OPTIM_ADAMW : MG_OPTIM_SGD;
	h->lr = mg_opt_float(o, "lr");
	h->momentum = mg_opt_float(o, "momentum");
	h->dampening = mg_opt_float(o, "dampening");
	h->nesterov = mg_opt_bool(o, "nesterov");
	h->weight_decay = mg_opt_float(o, "weight_decay");
	h->decay_all = mg_opt_bool(o, "decay_norm_and_bias");
	h->beta1 = mg_opt_float(o, "beta1");
	h->beta2 = mg_opt_float(o, "beta2");
	h->eps = mg_opt_float(o, "eps");
	h->max_grad_norm = mg_opt_float(o, "max_grad_norm");
}

double mg_schedule_lr(const struct mg_trainer *t, int64_t step)
{
	const struct mg_opts *o = t->r.s->optim;
	double lr = mg_opt_float(o, "lr"), min_lr = mg_opt_float(o, "min_lr");
	int64_t warm = mg_opt_int(o, "warmup_steps");
	if (step < warm)
		return lr * (double)(step + 1) / (double)warm;
	if (mg_opt_enum(o, "schedule") == 0 || t->total_steps <= warm)
		return lr;
	double x = (double)(step - warm) / (double)(t->total_steps - warm);
	return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * x));
}
