/*
 * shard_store.c - resident full parameters with sharded master weights
 * and optimizer state, on the device or in host memory (shard_store.h):
 * the storage of ZeRO-1/2 strategies, so one is its policies and a step.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/kit/shard_ckpt.h"
#include "mg/kit/shard_store.h"

static char *at(const struct mg_buf *b, int64_t off, enum mg_dtype dt)
{
	return (char *)b->ptr + (size_t)off * mg_dtype_size(dt);
}

void *mg_shard_store_params(void *self, int k)
{
	struct mg_shard_store *S = self;
	const struct mg_flat *f = &S->L->flats[k];
	return (char *)S->params.ptr + S->unit_base[f->unit] + f->full_byte;
}

/* This rank's block of flat k's full parameters (lent dtype). */
static char *mine(struct mg_shard_store *S, int k)
{
	const struct mg_flat *f = &S->L->flats[k];
	return (char *)mg_shard_store_params(S, k) +
	       (size_t)(S->srank * f->shard) * mg_dtype_size(f->lent);
}

/* Flat k's master shard: its block of the parameters on the device when
 * lent in the master dtype, else in the master buffer. */
static char *master_of(struct mg_shard_store *S, int k)
{
	const struct mg_flat *f = &S->L->flats[k];
	if (!S->host && !f->lp)
		return mine(S, k);
	return at(&S->master, f->master_off, S->L->master);
}

static int alloc_storage(struct mg_shard_store *S)
{
	const struct mg_flat_layout *L = S->L;
	struct mg_ctx *ctx = S->ctx;
	const size_t ms = mg_dtype_size(L->master);
	const int nu = L->spec->nunits;
	S->unit_base = calloc((size_t)nu + 1, sizeof *S->unit_base);
	if (!S->unit_base)
		return mg_error("out of memory");
	for (int u = 0; u < nu; u++)
		S->unit_base[u + 1] = S->unit_base[u] + L->unit_full_bytes[u];
	int64_t n_master = 0, n_lp = 0; /* what the store keeps apart */
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->train && (S->host || f->lp))
			n_master = f->master_off + f->shard;
		if (f->train && f->lp && S->host)
			n_lp = f->lp_off + f->shard;
	}
	if (mg_buf_alloc(ctx, &S->params, S->unit_base[nu] + 1,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &S->buffers, (size_t)L->n_buffers * ms + 1,
			 MG_MEM_PARAMS))
		return -1;
	const size_t sb = (size_t)L->n_train * ms + 1;
	if (!S->host) {
		if (mg_buf_alloc(ctx, &S->master, (size_t)n_master * ms + 1,
				 MG_MEM_PARAMS))
			return -1;
		for (int j = 0; j < S->nstate; j++)
			if (mg_buf_alloc(ctx, &S->state[j], sb, MG_MEM_OPTIM) ||
			    mg_memset_dev(ctx, S->state[j].ptr, 0, sb))
				return -1;
		return 0;
	}
	/* Host: pinned where copies go (gradients down, updated lent
	 * values up), the moments pageable. */
	const size_t cs = mg_dtype_size(ctx->compute_dtype);
	if (mg_buf_alloc_host(ctx, &S->master, (size_t)n_master * ms + 1,
			      MG_MEM_PARAMS, true) ||
	    mg_buf_alloc_host(ctx, &S->lp, (size_t)n_lp * cs + 1, MG_MEM_PARAMS,
			      true) ||
	    mg_buf_alloc_host(ctx, &S->grads, L->gshard_bytes + 1, MG_MEM_GRADS,
			      true) ||
	    mg_buf_alloc_host(ctx, &S->vals, sizeof(struct mg_optim_vals),
			      MG_MEM_OTHER, true))
		return -1;
	for (int j = 0; j < S->nstate; j++) {
		if (mg_buf_alloc_host(ctx, &S->state[j], sb, MG_MEM_OPTIM,
				      false))
			return -1;
		memset(S->state[j].ptr, 0, sb);
	}
	return 0;
}

/* The host's lent-dtype copy of an lp flat's master shard. */
static int host_lp(struct mg_shard_store *S, int k)
{
	const struct mg_flat *f = &S->L->flats[k];
	const int64_t n = f->shard;
	struct mg_tensor ts = mg_tensor_make(master_of(S, k), S->L->master,
					     MG_DEV_CPU, 1, &n);
	struct mg_tensor td = mg_tensor_make(at(&S->lp, f->lp_off, f->lent),
					     f->lent, MG_DEV_CPU, 1, &n);
	return mg_tensor_convert_host(&td, &ts);
}

/* Initial values: a trained flat's master shard and its block on the
 * device (the rest is all-gathered); a frozen flat whole on the device. */
static int keep(void *arg, int k, const char *full)
{
	struct mg_shard_store *S = arg;
	const struct mg_flat_layout *L = S->L;
	const struct mg_flat *f = &L->flats[k];
	const size_t ms = mg_dtype_size(L->master);
	if (!f->train)
		return mg_flat_upload(S->ctx, L, f, mg_shard_store_params(S, k),
				      full, f->shard * L->group);
	const char *part = full + (size_t)(S->srank * f->shard) * ms;
	const size_t bytes = (size_t)f->shard * ms;
	if (S->host) {
		memcpy(master_of(S, k), part, bytes);
		if (f->lp && host_lp(S, k))
			return -1;
	} else if (f->lp && mg_copy_h2d(S->ctx, master_of(S, k), part, bytes)) {
		return -1;
	}
	return mg_flat_upload(S->ctx, L, f, mine(S, k), part, f->shard);
}

/* Every rank's block of each trained flat into every rank's full copy,
 * in place; the buffers as rank 0 has them. */
static int gather(struct mg_shard_store *S)
{
	const struct mg_flat_layout *L = S->L;
	struct mg_comm *c = S->comm;
	if (!c)
		return 0;
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->train &&
		    c->all_gather(c, mine(S, k), mg_shard_store_params(S, k),
				  f->shard, f->lent))
			return mg_error_prefix("all-gather of parameters");
	}
	if (L->n_buffers &&
	    S->ctx->comm->broadcast(S->ctx->comm, S->buffers.ptr, L->n_buffers,
				    L->master, 0))
		return mg_error_prefix("buffer broadcast");
	return 0;
}

int mg_shard_store_init(struct mg_shard_store *S, struct mg_ctx *ctx,
			const struct mg_flat_layout *L, struct mg_comm *comm,
			int srank, bool host, int threads)
{
	memset(S, 0, sizeof *S);
	S->ctx = ctx;
	S->L = L;
	S->comm = comm;
	S->srank = srank;
	S->host = host;
	S->nstate = ctx->optim ? mg_optim_state_slots(ctx->optim) : 0;
	if (host && L->master != MG_F32 && L->master != MG_F64)
		return mg_error("host optimizer state: master dtype %s (fp32 "
				"or fp64 only)",
				mg_dtype_name(L->master));
	if (alloc_storage(S) ||
	    (host &&
	     mg_host_optim_create(threads ? threads
					  : mg_host_optim_default_threads(ctx),
				  &S->hopt)) ||
	    mg_flat_init_shard((struct mg_flat_layout *)L, ctx, srank,
			       MG_FLAT_INIT_FROZEN_WHOLE, keep, S,
			       S->buffers.ptr) ||
	    gather(S) || (comm && comm->wait(comm)))
		return -1;
	return 0;
}

void mg_shard_store_free(struct mg_shard_store *S)
{
	if (!S->ctx)
		return;
	struct mg_buf *b[] = {&S->params,   &S->buffers,  &S->master, &S->lp,
			      &S->state[0], &S->state[1], &S->grads,  &S->vals};
	for (size_t i = 0; i < sizeof b / sizeof *b; i++)
		mg_buf_free(S->ctx, b[i]);
	if (S->hopt)
		mg_host_optim_destroy(S->hopt);
	free(S->unit_base);
	free(S->slices);
	memset(S, 0, sizeof *S);
}

int mg_shard_store_bind(struct mg_shard_store *S, struct mg_unit_pipe *P)
{
	const struct mg_flat_layout *L = S->L;
	const struct mg_optim_hparams *h = S->ctx->optim;
	if (P->cfg.flags & MG_UP_TRANSIENT_GRADS)
		return mg_error("shard store: the pipeline keeps no gradient "
				"shards");
	S->P = P;
	S->slices = calloc(2 * (size_t)L->nflats + 1, sizeof *S->slices);
	if (!S->slices)
		return mg_error("out of memory");
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		void *state[2] = {NULL, NULL};
		for (int j = 0; j < S->nstate; j++)
			state[j] = at(&S->state[j], f->train_off, L->master);
		const void *g = S->host ? (char *)S->grads.ptr + f->gshard_byte
					: mg_unit_pipe_gshard(P, f->unit, k);
		void *lp = !f->lp    ? NULL
			   : S->host ? at(&S->lp, f->lp_off, f->lent)
				     : mine(S, k);
		S->nslices += mg_flat_slices(L, f, S->srank, h && h->decay_all,
					     master_of(S, k), g, lp, state,
					     S->nstate, &S->slices[S->nslices]);
	}
	return 0;
}

/* Host call: the optimizer over every slice, once the gradients and the
 * step's values are in host memory. */
static void host_update(void *arg)
{
	struct mg_shard_store *S = arg;
	if (!S->host_rc && mg_host_optim_run(S->hopt, S->h, S->vals.ptr,
					     S->slices, S->nslices))
		S->host_rc = -1;
}

/* Host state: gradient shards down, the update on the host, each trained
 * flat's updated lent values back into its block. */
static int host_step(struct mg_shard_store *S)
{
	const struct mg_flat_layout *L = S->L;
	struct mg_ctx *ctx = S->ctx;
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->train &&
		    mg_copy_async(ctx, (char *)S->grads.ptr + f->gshard_byte,
				  mg_unit_pipe_gshard(S->P, f->unit, k),
				  (size_t)f->shard * mg_dtype_size(f->grad)))
			return -1;
	}
	if (mg_copy_async(ctx, S->vals.ptr, ctx->optim_vals,
			  sizeof(struct mg_optim_vals)) ||
	    mg_copy_join(ctx) || mg_host_call(ctx, host_update, S))
		return -1;
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		const void *src = f->lp ? at(&S->lp, f->lp_off, f->lent)
					: master_of(S, k);
		if (f->train &&
		    mg_copy_async(ctx, mine(S, k), src,
				  (size_t)f->shard * mg_dtype_size(f->lent)))
			return -1;
	}
	return mg_copy_join(ctx);
}

int mg_shard_store_step(struct mg_shard_store *S,
			const struct mg_optim_hparams *h)
{
	struct mg_ctx *ctx = S->ctx;
	struct mg_optim_vals *v = ctx->optim_vals;
	struct mg_comm *c = S->comm;
	S->h = h;
	/* Every gradient shard final, then the norm: this rank's shards
	 * (in F32, mg_optim_sumsq), summed over the group. */
	if (mg_unit_pipe_finish(S->P) || mg_unit_pipe_sumsq(S->P) ||
	    (c && (c->all_reduce(c, &v->sumsq, 1, MG_F32, MG_REDUCE_SUM) ||
		   c->wait(c))) ||
	    mg_optim_finalize(ctx, h, v))
		return -1;
	if (S->host) {
		if (host_step(S))
			return -1;
	} else {
		for (int i = 0; i < S->nslices; i++)
			if (mg_optim_update(S->ctx, h, S->ctx->optim_vals,
					    &S->slices[i]))
				return -1;
	}
	/* On a GPU the host update runs later (a host call): a failure is
	 * seen here on a CPU device, else at the next step's start. */
	if (S->host_rc)
		return mg_error("host optimizer failed");
	mg_unit_pipe_reset(S->P);
	return gather(S);
}

/* Shard of `what` (0: master weights, 1+: optimizer slot) of flat f. */
static void *ckpt_shard(void *self, const struct mg_flat *f, int what)
{
	struct mg_shard_store *S = self;
	if (what == 0)
		return master_of(S, (int)(f - S->L->flats));
	return at(&S->state[what - 1], f->train_off, S->L->master);
}

/* Load: the full parameters follow the loaded master weights. */
static int ckpt_loaded(void *self, int k, int what, const void *full)
{
	struct mg_shard_store *S = self;
	const struct mg_flat *f = &S->L->flats[k];
	if (what)
		return 0;
	if (S->host && f->lp && host_lp(S, k))
		return -1;
	return mg_flat_upload(S->ctx, S->L, f, mg_shard_store_params(S, k),
			      full, f->shard * S->L->group);
}

static struct mg_shard_ckpt ckpt_of(struct mg_shard_store *S)
{
	return (struct mg_shard_ckpt){
		.L = S->L,
		.ctx = S->ctx,
		.master = S->L->master,
		.nslots = S->nstate,
		.group = S->L->group,
		.srank = S->srank,
		.comm = S->comm,
		.host = S->host,
		.buffers = S->buffers.ptr,
		.shard = ckpt_shard,
		.loaded = ckpt_loaded,
		.self = S,
	};
}

int mg_shard_store_save(struct mg_shard_store *S, struct mg_ckpt *ck)
{
	struct mg_shard_ckpt c = ckpt_of(S);
	return mg_device_sync(S->ctx) || mg_shard_ckpt_save(&c, ck) ? -1 : 0;
}

int mg_shard_store_load(struct mg_shard_store *S, struct mg_ckpt *ck)
{
	struct mg_shard_ckpt c = ckpt_of(S);
	return mg_shard_ckpt_load(&c, ck);
}

static const struct mg_unit_hooks zero_hooks = {
	.params = mg_shard_store_params,
};

int mg_zero_setup(struct mg_zero *z, const struct mg_model_spec *spec,
		  unsigned flags, bool host, int threads, const char *who)
{
	struct mg_ctx *ctx = z->base.ctx;
	struct mg_comm *c = ctx->world > 1 ? ctx->comm : NULL;
	if (!c) /* one rank: nothing to share */
		flags &= ~(unsigned)MG_UP_WHOLE_GRADS;
	const struct mg_unit_pipe_cfg cfg = {
		.ctx = ctx,
		.L = &z->L,
		.sc = c,
		.srank = ctx->rank,
		.replicas = 1,
		.flags = flags,
		.hooks = &zero_hooks,
		.self = &z->S,
		.who = who,
	};
	if (mg_flat_build(&z->L, spec, ctx->master_dtype, ctx->compute_dtype,
			  ctx->world, false) ||
	    mg_shard_store_init(&z->S, ctx, &z->L, c, ctx->rank, host, threads))
		return mg_error_prefix("%s", who);
	struct mg_unit_pipe_cfg with_bufs = cfg;
	with_bufs.buffers = z->S.buffers.ptr;
	if (mg_unit_pipe_init(&z->base.pipe, &with_bufs) ||
	    mg_shard_store_bind(&z->S, &z->base.pipe))
		return mg_error_prefix("%s", who);
	return 0;
}

void mg_zero_destroy(void *self)
{
	struct mg_zero *z = self;
	mg_unit_strategy_free(&z->base);
	mg_shard_store_free(&z->S);
	mg_flat_free(&z->L);
	free(z);
}

int mg_zero_begin_step(void *self)
{
	struct mg_zero *z = self;
	if (z->S.host_rc)
		return mg_error("%s: host optimizer failed in the last step",
				z->base.pipe.cfg.who);
	return mg_unit_pipe_begin_step(&z->base.pipe);
}

int mg_zero_step(void *self, const struct mg_optim_hparams *h,
		 struct mg_step_report *r)
{
	r->comm_seconds = 0;
	return mg_shard_store_step(&((struct mg_zero *)self)->S, h);
}

int mg_zero_save(void *self, struct mg_ckpt *ck)
{
	return mg_shard_store_save(&((struct mg_zero *)self)->S, ck);
}

int mg_zero_load(void *self, struct mg_ckpt *ck)
{
	return mg_shard_store_load(&((struct mg_zero *)self)->S, ck);
}
