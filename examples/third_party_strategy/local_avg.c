/*
 * local_avg.c - an example third-party strategy, built only against the
 * installed public headers (include/mg) and the kit's sampler. It keeps
 * one full replica per rank, trains locally and averages parameters
 * across ranks every `period` steps (local SGD / model averaging). With
 * period = 1 and no gradient clipping the averaged step is the mean of
 * the ranks' steps, which is DDP's (the optimizer is linear in the
 * gradient for SGD), so it trains what ddp_ds trains: CI checks that on
 * 2 ranks.
 *
 * It shows every part of the contract written by hand: storage
 * (setup/acquire/release), gradient readiness, the optimizer step and
 * checkpoints through named full tensors; the sampler (plan) is the
 * kit's, so its order is ddp_ds's.
 */
#include <stdio.h>
#include <stdlib.h>

#include <mg/kit/sampler.h>
#include <mg/mg.h>

struct local_avg {
	struct mg_ctx *ctx;
	const struct mg_model_spec *spec;
	int64_t period, steps;
	struct mg_buf *param, *grad, *state[2]; /* one buffer per parameter */
	struct mg_tensor *pt, *gt;
	struct mg_unit_view *views;
	struct mg_sampler sampler;
};

static const struct mg_option options[] = {
	MG_OPT_I("period", "8", 1, 1000000,
		 "average parameters across ranks every this many steps"),
	MG_OPT_END,
};

static int la_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct local_avg *s = calloc(1, sizeof *s);
	if (!s)
		return mg_error("out of memory");
	s->ctx = ctx;
	s->period = mg_opt_int(o, "period");
	mg_sampler_init(&s->sampler, ctx->seed, true);
	*self = s;
	return 0;
}

static void la_destroy(void *self)
{
	struct local_avg *s = self;
	for (int i = 0; s->spec && i < s->spec->nparams; i++) {
		mg_buf_free(s->ctx, &s->param[i]);
		mg_buf_free(s->ctx, &s->grad[i]);
		for (int k = 0; k < 2; k++)
			mg_buf_free(s->ctx, &s->state[k][i]);
	}
	free(s->param);
	free(s->grad);
	free(s->state[0]);
	free(s->state[1]);
	free(s->pt);
	free(s->gt);
	free(s->views);
	mg_sampler_free(&s->sampler);
	free(s);
}

static int la_setup(void *self, const struct mg_model_spec *spec)
{
	struct local_avg *s = self;
	struct mg_ctx *ctx = s->ctx;
	size_t n = (size_t)spec->nparams, es = mg_dtype_size(ctx->master_dtype);
	if (ctx->compute_dtype != ctx->master_dtype)
		return mg_error("local_avg keeps one copy: compute and master "
				"dtypes must be equal");
	s->spec = spec;
	s->param = calloc(n, sizeof *s->param);
	s->grad = calloc(n, sizeof *s->grad);
	s->state[0] = calloc(n, sizeof(struct mg_buf));
	s->state[1] = calloc(n, sizeof(struct mg_buf));
	s->pt = calloc(n, sizeof *s->pt);
	s->gt = calloc(n, sizeof *s->gt);
	s->views = calloc((size_t)spec->nunits, sizeof *s->views);
	if (!s->param || !s->grad || !s->state[0] || !s->state[1] || !s->pt ||
	    !s->gt || !s->views)
		return mg_error("out of memory");
	int slots = mg_optim_state_slots(ctx->optim);
	for (size_t i = 0; i < n; i++) {
		const struct mg_param_decl *p = &spec->params[i];
		size_t bytes = (size_t)p->numel * es;
		if (mg_buf_alloc(ctx, &s->param[i], bytes, MG_MEM_PARAMS))
			return -1;
		s->pt[i] = mg_tensor_make(s->param[i].ptr, ctx->master_dtype,
					  ctx->dev->kind, p->ndim, p->shape);
		s->gt[i] = s->pt[i];
		s->gt[i].data = NULL;
		if (!(p->flags & MG_P_TRAIN))
			continue;
		if (mg_buf_alloc(ctx, &s->grad[i], bytes, MG_MEM_GRADS))
			return -1;
		s->gt[i].data = s->grad[i].ptr;
		for (int k = 0; k < slots; k++)
			if (mg_buf_alloc(ctx, &s->state[k][i], bytes,
					 MG_MEM_OPTIM) ||
			    mg_memset_dev(ctx, s->state[k][i].ptr, 0, bytes))
				return -1;
	}
	for (int u = 0; u < spec->nunits; u++) {
		int first = spec->units[u].first_param;
		s->views[u].nparams = spec->units[u].nparams;
		s->views[u].params = &s->pt[first];
		s->views[u].grads = &s->gt[first];
		if (ctx->dev->kind != MG_DEV_CPU)
			return mg_error("local_avg example: CPU only");
		if (mg_init_unit(ctx, spec, u, s->views[u].params))
			return -1;
	}
	return 0;
}

static int64_t la_steps(void *self, int64_t n, int64_t batch)
{
	struct local_avg *s = self;
	return mg_sampler_steps(n, batch * s->ctx->world, true);
}

/* Each rank takes its own block of the shuffled global batch (the kit's
 * own-block plan), but divides by its own count: each rank optimises its
 * own replica. */
static int la_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
		   int64_t step, struct mg_plan *p)
{
	struct local_avg *s = self;
	if (mg_sampler_plan_own(&s->sampler, s->ctx->world, s->ctx->rank, n,
				batch, epoch, step, p))
		return -1;
	p->global_count = p->compute_count;
	return 0;
}

static int la_begin(void *self)
{
	struct local_avg *s = self;
	for (int i = 0; i < s->spec->nparams; i++)
		if (s->grad[i].ptr &&
		    mg_memset_dev(s->ctx, s->grad[i].ptr, 0, s->grad[i].bytes))
			return -1;
	return 0;
}

static struct mg_unit_view *la_acquire(void *self, int unit, enum mg_phase ph)
{
	struct local_avg *s = self;
	(void)ph;
	return &s->views[unit];
}

static void la_release(void *self, int unit, enum mg_phase ph)
{
	(void)self, (void)unit, (void)ph;
}

static int la_grads_ready(void *self, int unit)
{
	(void)self, (void)unit;
	return 0; /* no gradient communication: ranks train locally */
}

static int la_step(void *self, const struct mg_optim_hparams *h,
		   struct mg_step_report *r)
{
	struct local_avg *s = self;
	struct mg_ctx *ctx = s->ctx;
	const struct mg_model_spec *sp = s->spec;
	r->comm_seconds = 0;
	/* Local gradient norm, clipping and overflow check, on the device. */
	for (int i = 0; i < sp->nparams; i++)
		if (s->grad[i].ptr &&
		    mg_optim_sumsq(ctx, ctx->optim_vals, ctx->master_dtype,
				   s->grad[i].ptr, sp->params[i].numel))
			return -1;
	if (mg_optim_finalize(ctx, h, ctx->optim_vals))
		return -1;
	for (int i = 0; i < sp->nparams; i++) {
		const struct mg_param_decl *p = &sp->params[i];
		if (!(p->flags & MG_P_TRAIN))
			continue;
		struct mg_optim_slice sl = {
			.dtype = ctx->master_dtype,
			.param = s->param[i].ptr,
			.grad = s->grad[i].ptr,
			.grad_dtype = ctx->master_dtype,
			.state = {s->state[0][i].ptr, s->state[1][i].ptr},
			.n = p->numel,
			.decay = h->decay_all || !(p->flags & MG_P_NO_DECAY),
		};
		if (mg_optim_update(ctx, h, ctx->optim_vals, &sl))
			return -1;
	}
	if (++s->steps % s->period || ctx->world == 1)
		return 0;
	/* Model averaging: sum over ranks, then divide. Collectives are
	 * asynchronous: the sums exist only after wait(). */
	for (int i = 0; i < sp->nparams; i++)
		if (ctx->comm->all_reduce(ctx->comm, s->param[i].ptr,
					  sp->params[i].numel,
					  ctx->master_dtype, MG_REDUCE_SUM))
			return -1;
	if (ctx->comm->wait(ctx->comm))
		return -1;
	for (int i = 0; i < sp->nparams; i++) {
		const struct mg_param_decl *p = &sp->params[i];
		if (ctx->master_dtype == MG_F32) {
			float *x = s->param[i].ptr;
			for (int64_t k = 0; k < p->numel; k++)
				x[k] /= (float)ctx->world;
		} else {
			double *x = s->param[i].ptr;
			for (int64_t k = 0; k < p->numel; k++)
				x[k] /= ctx->world;
		}
	}
	return 0;
}

static int la_visit(struct local_avg *s, struct mg_ckpt *ck, bool save)
{
	char name[512];
	for (int u = 0; u < s->spec->nunits; u++) {
		const struct mg_unit_decl *ud = &s->spec->units[u];
		for (int j = 0; j < ud->nparams; j++) {
			int i = ud->first_param + j;
			snprintf(name, sizeof name, "param/%s.%s", ud->name,
				 s->spec->params[i].name);
			if (save ? mg_ckpt_put(ck, name, &s->pt[i])
				 : mg_ckpt_get(ck, name, &s->pt[i]))
				return -1;
			int slots =
				s->grad[i].ptr
					? mg_optim_state_slots(s->ctx->optim)
					: 0;
			for (int k = 0; k < slots; k++) {
				struct mg_tensor t = s->pt[i];
				t.data = s->state[k][i].ptr;
				snprintf(name, sizeof name, "optim/%s/%s.%s",
					 mg_optim_slot_name(s->ctx->optim, k),
					 ud->name, s->spec->params[i].name);
				if (save ? mg_ckpt_put(ck, name, &t)
					 : mg_ckpt_get(ck, name, &t))
					return -1;
			}
		}
	}
	return 0;
}

static int la_save(void *self, struct mg_ckpt *ck)
{
	return la_visit(self, ck, true);
}

static int la_load(void *self, struct mg_ckpt *ck)
{
	return la_visit(self, ck, false);
}

static const struct mg_strategy_ops ops = {
	.setup = la_setup,
	.steps_per_epoch = la_steps,
	.plan = la_plan,
	.begin_step = la_begin,
	.acquire = la_acquire,
	.release = la_release,
	.grads_ready = la_grads_ready,
	.step = la_step,
	.save = la_save,
	.load = la_load,
};

static const struct mg_plugin plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "local_avg",
	.version = "0.1",
	.description = "example third-party strategy: local SGD with "
		       "periodic parameter averaging",
	.options = options,
	.create = la_create,
	.destroy = la_destroy,
	.ops = &ops,
};

MG_PLUGIN_DEFINE(plugin)
