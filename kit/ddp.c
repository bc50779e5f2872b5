/*
 * ddp.c - data-parallel training over full replicas (see kit/ddp.h):
 * bucketed gradient reduction overlapped with backward through a
 * communication hook, buffer broadcast, and the block sampler the DDP
 * plugins select samples with.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/kit/ddp.h"

int mg_ddp_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct mg_ddp *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("out of memory");
	d->ctx = ctx;
	d->drop_last = mg_opt_bool(o, "drop_last");
	d->bucket_bytes = (int64_t)(mg_opt_float(o, "bucket_mb") * 1048576.0);
	if (d->bucket_bytes < 1)
		d->bucket_bytes = 1;
	mg_sampler_init(&d->sampler, ctx->seed, mg_opt_bool(o, "shuffle"));
	*self = d;
	return 0;
}

int mg_ddp_register_comm_hook(struct mg_ddp *d,
			      const struct mg_ddp_comm_hook *h)
{
	if (!h || !h->launch)
		return mg_error("ddp: communication hook '%s' has no launch "
				"function",
				h && h->name ? h->name : "(null)");
	d->hook = h;
	return 0;
}

void mg_ddp_destroy(void *self)
{
	struct mg_ddp *d = self;
	if (d->hook && d->hook->destroy)
		d->hook->destroy(d);
	mg_replica_free(&d->rep);
	mg_sampler_free(&d->sampler);
	free(d->buckets);
	free(d->param_bucket);
	free(d);
}

int64_t mg_ddp_steps(const struct mg_ddp *d, int64_t n, int64_t global)
{
	return mg_sampler_steps(n, global, d->drop_last);
}

int64_t mg_ddp_blocks(struct mg_ddp *d, int64_t n, int64_t per_rank, int world,
		      int64_t epoch, int64_t step, int first, int count,
		      int64_t *out, int64_t cap)
{
	return mg_sampler_blocks(&d->sampler, n, per_rank, world, epoch, step,
				 first, count, out, cap);
}

/* Where parameter i's gradient lives: buffer base, offset, dtype. */
static void *grad_at(const struct mg_replica *r, int i, enum mg_dtype *dt)
{
	int64_t off = r->off[i];
	if (off >= r->group_off[2]) {
		*dt = r->master;
		return (char *)r->grads32.ptr +
		       (size_t)(off - r->group_off[2]) * mg_dtype_size(*dt);
	}
	*dt = r->compute;
	return (char *)r->grads.ptr + (size_t)off * mg_dtype_size(*dt);
}

/*
 * Cut each optimizer group of the gradient storage into buckets of at
 * most bucket_bytes, walking parameters from the last declared to the
 * first: backward finishes them in that order, so the tail buckets fill
 * (and start their all-reduce) first, as in PyTorch DDP. A parameter
 * larger than the cap gets a bucket of its own.
 */
static int build_buckets(struct mg_ddp *d)
{
	const struct mg_replica *r = &d->rep;
	const struct mg_model_spec *s = r->spec;
	d->param_bucket = malloc(((size_t)s->nparams + 1) * sizeof(int));
	d->buckets = calloc((size_t)s->nparams + 1, sizeof *d->buckets);
	if (!d->param_bucket || !d->buckets)
		return mg_error("out of memory");
	for (int i = 0; i < s->nparams; i++)
		d->param_bucket[i] = -1;
	for (int g = 0; g < MG_REPLICA_GROUPS; g++) {
		struct mg_ddp_bucket *b = NULL;
		int64_t bytes = 0;
		for (int i = s->nparams - 1; i >= 0; i--) {
			const struct mg_param_decl *p = &s->params[i];
			if (!(p->flags & MG_P_TRAIN) ||
			    (p->flags & MG_P_BUFFER) || r->off[i] < 0 ||
			    r->off[i] < r->group_off[g] ||
			    r->off[i] >= r->group_off[g + 1])
				continue;
			enum mg_dtype dt;
			void *at = grad_at(r, i, &dt);
			int64_t pb = p->numel * (int64_t)mg_dtype_size(dt);
			if (!b || bytes + pb > d->bucket_bytes) {
				b = &d->buckets[d->nbuckets++];
				b->dtype = dt;
				bytes = 0;
			}
			b->data =
				at; /* parameters descend: the lowest so far */
			b->n += p->numel;
			b->nparams++;
			bytes += pb;
			d->param_bucket[i] = (int)(b - d->buckets);
		}
	}
	return 0;
}

/* Make every rank's replica rank 0's (PyTorch DDP does this when it wraps
 * a module): master parameters, buffers, then the low-precision copy.
 * Frozen parameters are a pure function of the model's source, equal on
 * every rank already (replica.h). */
static int sync_from_rank0(struct mg_ddp *d)
{
	struct mg_replica *r = &d->rep;
	struct mg_comm *c = d->ctx->comm;
	if (d->ctx->world == 1)
		return 0;
	if ((r->n_params &&
	     c->broadcast(c, r->params.ptr, r->n_params, r->master, 0)) ||
	    (r->n_buffers &&
	     c->broadcast(c, r->buffers.ptr, r->n_buffers, r->master, 0)) ||
	    c->wait(c))
		return mg_error_prefix("broadcast of rank 0's parameters");
	return mg_replica_refresh_lp(r);
}

int mg_ddp_setup(void *self, const struct mg_model_spec *spec)
{
	struct mg_ddp *d = self;
	if (mg_replica_init(&d->rep, d->ctx, spec) || build_buckets(d))
		return -1;
	if (d->hook && d->hook->setup && d->hook->setup(d))
		return mg_error_prefix("ddp communication hook '%s'",
				       d->hook->name);
	return sync_from_rank0(d);
}

int mg_ddp_begin_step(void *self)
{
	struct mg_ddp *d = self;
	for (int b = 0; b < d->nbuckets; b++) {
		d->buckets[b].pending = d->buckets[b].nparams;
		d->buckets[b].launched = false;
	}
	return mg_replica_zero_grads(&d->rep);
}

struct mg_unit_view *mg_ddp_acquire(void *self, int unit, enum mg_phase ph)
{
	struct mg_ddp *d = self;
	return mg_replica_view(&d->rep, unit, ph);
}

void mg_ddp_release(void *self, int unit, enum mg_phase ph)
{
	(void)self, (void)unit, (void)ph;
}

/* Sum the bucket over ranks. Gradients are already divided by the global
 * sample count (ctx->grad_scale), so the sum is the global mean. */
static int hook_allreduce(struct mg_ddp *d, struct mg_ddp_bucket *b)
{
	struct mg_comm *c = d->ctx->comm;
	return c->all_reduce(c, b->data, b->n, b->dtype, MG_REDUCE_SUM);
}

const struct mg_ddp_comm_hook mg_ddp_hook_allreduce = {
	.name = "allreduce",
	.launch = hook_allreduce,
};

static int launch(struct mg_ddp *d, struct mg_ddp_bucket *b)
{
	const struct mg_ddp_comm_hook *h =
		d->hook ? d->hook : &mg_ddp_hook_allreduce;
	b->launched = true;
	if (h->launch(d, b))
		return mg_error_prefix("gradient reduction (hook '%s') of "
				       "bucket %d",
				       h->name, (int)(b - d->buckets));
	return 0;
}

int mg_ddp_grads_ready(void *self, int unit)
{
	struct mg_ddp *d = self;
	const struct mg_unit_decl *u = &d->rep.spec->units[unit];
	/* Gradient accumulation: the replica's gradients persist across
	 * micro-batches, so only the last one's backward reduces (PyTorch
	 * DDP's no_sync() around the others). */
	if (d->ctx->micro + 1 < d->ctx->micro_count)
		return 0;
	for (int k = 0; k < u->nparams; k++) {
		int bi = d->param_bucket[u->first_param + k];
		if (bi < 0)
			continue;
		struct mg_ddp_bucket *b = &d->buckets[bi];
		if (b->pending <= 0)
			return mg_error("unit '%s' reported its gradients "
					"ready twice in one step",
					u->name);
		if (--b->pending == 0 && launch(d, b))
			return -1;
	}
	return 0;
}

int mg_ddp_step(void *self, const struct mg_optim_hparams *h,
		struct mg_step_report *r)
{
	struct mg_ddp *d = self;
	struct mg_replica *rep = &d->rep;
	struct mg_comm *c = d->ctx->comm;
	r->comm_seconds = 0;
	/* Buckets of units the model never reported, in a fixed order so
	 * every rank issues the same collectives. */
	for (int b = 0; b < d->nbuckets; b++)
		if (!d->buckets[b].launched && launch(d, &d->buckets[b]))
			return -1;
	/* Buffers as PyTorch DDP keeps them: rank 0's everywhere. */
	if (d->ctx->world > 1 && rep->n_buffers &&
	    c->broadcast(c, rep->buffers.ptr, rep->n_buffers, rep->master, 0))
		return mg_error_prefix("buffer broadcast");
	if (c->wait(c))
		return -1;
	for (int b = 0; d->hook && d->hook->finish && b < d->nbuckets; b++)
		if (d->hook->finish(d, &d->buckets[b]))
			return mg_error_prefix("ddp communication hook '%s', "
					       "bucket %d",
					       d->hook->name, b);
	return mg_replica_step(rep, h);
}

int mg_ddp_save(void *self, struct mg_ckpt *ck)
{
	struct mg_ddp *d = self;
	return mg_replica_save(&d->rep, ck);
}

int mg_ddp_load(void *self, struct mg_ckpt *ck)
{
	struct mg_ddp *d = self;
	return mg_replica_load(&d->rep, ck);
}
