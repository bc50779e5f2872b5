/*
 * fsdp.c - the fsdp strategy plugin: options, shard groups, storage of
 * this rank's shards, the shard mode as policies and hooks of the kit's
 * unit pipeline (whose strategy head also gives the sampler: each rank
 * reads its block of the global batch, as ddp_ds) and the optimizer step
 * on the local shard. See fsdp.h for the shard modes.
 */
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

static const struct mg_option fsdp_options[] = {
	MG_OPT_E("shard", "full", "full|grad_op|none|hybrid",
		 "what is sharded: full (FULL_SHARD), grad_op "
		 "(SHARD_GRAD_OP: parameters kept gathered from forward to "
		 "backward, a frozen LoRA base gathered once a run), none "
		 "(NO_SHARD: DDP by units), hybrid "
		 "(HYBRID_SHARD: full inside groups, replicated across)"),
	MG_OPT_I("shard_group_size", "0", 0, 1 << 20,
		 "hybrid: ranks per shard group (0: the ranks of one node); "
		 "must divide the number of ranks"),
	MG_OPT_E("reduce_dtype", "param", "param|fp32",
		 "dtype gradients are reduced in: the compute dtype they were "
		 "made in (param), or fp32 (PyTorch MixedPrecision's "
		 "reduce_dtype)"),
	MG_OPT_B("prefetch", "true",
		 "start the next units' all-gathers while this unit computes "
		 "(forward and backward prefetch; false: gather on demand)"),
	MG_OPT_I("prefetch_depth", "1", 1, 16,
		 "units gathered ahead with prefetch: 1 overlaps the next "
		 "unit's all-gather with this one's compute; more keeps the "
		 "links busy past a unit of short compute (an embedding, a "
		 "small layer) at a gather buffer each (each as large as the "
		 "largest unit; shard = grad_op holds every unit anyway)"),
	MG_OPT_B("copy_engine", "false",
		 "run the all-gathers on the GPUs' copy engines instead of "
		 "NCCL kernels (NCCL 2.28 or later, one node): parameter "
		 "shards and gather buffers live in NCCL symmetric windows, "
		 "so the gathers leave every SM to the compute they overlap; "
		 "where the communicator has no windows (CPU ranks, older "
		 "NCCL) the log says so and gathers run as before; steps "
		 "run eagerly, not as CUDA graphs (NCCL's copy-engine "
		 "all-gathers hung on graph replay)"),
	MG_OPT_B("update_in_backward", "false",
		 "run each unit's optimizer update as soon as its gradient "
		 "shard is final, during backward (torchtune's "
		 "optimizer_in_bwd): with G > 1 ranks a shard and no "
		 "gradient accumulation the whole gradient shard is never "
		 "held; needs optimizer.max_grad_norm = 0 and bf16 or fp32 "
		 "(a step with non-finite gradients cannot be skipped)"),
	MG_UNIT_STRATEGY_OPTIONS,
	MG_OPT_END,
};

static int fsdp_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct fsdp *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("out of memory");
	d->ctx = ctx;
	d->mode = (enum fsdp_mode)mg_opt_enum(o, "shard");
	d->reduce_fp32 = mg_opt_enum(o, "reduce_dtype") == 1;
	d->prefetch = mg_opt_bool(o, "prefetch")
			      ? (int)mg_opt_int(o, "prefetch_depth")
			      : 0;
	d->ubw = mg_opt_bool(o, "update_in_backward");
	d->copy_engine = mg_opt_bool(o, "copy_engine");
	d->group_opt = (int)mg_opt_int(o, "shard_group_size");
	mg_unit_strategy_init(&d->base, o, ctx);
	*self = d;
	if (mg_opt_given(o, "shard_group_size") && d->mode != FSDP_HYBRID)
		return mg_error("shard_group_size applies to shard = hybrid "
				"only");
	if (!mg_opt_bool(o, "prefetch") && mg_opt_given(o, "prefetch_depth"))
		return mg_error("prefetch_depth applies to prefetch = true "
				"only");
	return 0;
}

static void fsdp_destroy(void *self)
{
	struct fsdp *d = self;
	mg_unit_strategy_free(&d->base);
	struct mg_buf *bufs[] = {&d->master_buf, &d->lp_buf,   &d->packed_buf,
				 &d->buffers,	 &d->state[0], &d->state[1]};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		mg_buf_free(d->ctx, bufs[i]);
	if (d->own_sc)
		d->sc->destroy(d->sc);
	if (d->own_rc)
		d->rc->destroy(d->rc);
	mg_flat_free(&d->L);
	free(d);
}

/* G, this rank's place in its groups, and the communicators. */
static int make_groups(struct fsdp *d)
{
	struct mg_ctx *ctx = d->ctx;
	const int world = ctx->world, rank = ctx->rank;
	struct mg_comm *c = ctx->comm;
	int g = world;
	if (d->mode == FSDP_NONE)
		g = 1;
	else if (d->mode == FSDP_HYBRID) {
		int node =
			ctx->struct_size >= sizeof *ctx && ctx->local_world > 0
				? ctx->local_world
				: world;
		g = d->group_opt > 0 ? d->group_opt : node;
		if (g > world || world % g)
			return mg_error("fsdp: shard_group_size %d does not "
					"divide the %d ranks into groups",
					g, world);
	}
	d->group = g;
	d->replicas = world / g;
	d->srank = rank % g;
	if (g == world) {
		d->sc = g > 1 ? c : NULL;
	} else if (g > 1) {
		/* Shard groups are consecutive ranks (a node's GPUs). */
		d->sc = c->split(c, rank / g, rank % g);
		d->own_sc = d->sc != NULL;
		if (!d->sc)
			return mg_error_prefix("fsdp: shard group");
	}
	if (d->replicas == world) {
		d->rc = world > 1 ? c : NULL;
	} else if (d->replicas > 1) {
		d->rc = c->split(c, rank % g, rank / g);
		d->own_rc = d->rc != NULL;
		if (!d->rc)
			return mg_error_prefix("fsdp: replica group");
	}
	static const char *names[] = {"full", "grad_op", "none", "hybrid"};
	mg_info("fsdp: shard = %s, %d shard group(s) of %d rank(s)%s",
		names[d->mode], d->replicas, g,
		d->replicas > 1 && g > 1 ? ", gradient shards all-reduced "
					   "across groups"
					 : "");
	return 0;
}

/* Device memory that all-gathers read or write: in a window of the shard
 * group's communicator with copy_engine (their gathers then need no SMs),
 * else ordinary. The unit pipeline's slot allocator too. */
static int fsdp_alloc_gathered(void *self, struct mg_buf *b, size_t bytes,
			       enum mg_mem_cat cat)
{
	struct fsdp *d = self;
	if (!d->copy_engine || d->group == 1)
		return mg_buf_alloc(d->ctx, b, bytes, cat);
	bool windowed = false;
	if (mg_buf_alloc_comm(d->ctx, d->sc, b, bytes, cat, &windowed))
		return -1;
	if (!windowed)
		d->copy_engine = false; /* said in the log; every rank alike */
	return 0;
}

/* Shard storage; a window (copy_engine) only if all-gathers send from
 * it. */
static int alloc_shards(struct fsdp *d, struct mg_buf *b, size_t bytes,
			bool sent)
{
	return sent ? fsdp_alloc_gathered(d, b, bytes, MG_MEM_PARAMS)
		    : mg_buf_alloc(d->ctx, b, bytes, MG_MEM_PARAMS);
}

static int alloc_storage(struct fsdp *d)
{
	struct mg_ctx *ctx = d->ctx;
	const struct mg_flat_layout *L = &d->L;
	size_t ms = mg_dtype_size(d->master), cs = mg_dtype_size(d->compute);
	d->nslots_state = ctx->optim ? mg_optim_state_slots(ctx->optim) : 0;
	/* A flat's shard is sent from its lent dtype's copy (fsdp_shard):
	 * only those buffers need to be windows. */
	bool from_master = false;
	for (int k = 0; k < L->nflats; k++)
		from_master |= !L->flats[k].packed && !L->flats[k].lp;
	size_t lp_bytes = (d->lp_inplace ? 0 : (size_t)L->n_lp * cs) + 1;
	if (alloc_shards(d, &d->master_buf, (size_t)L->n_master * ms + 1,
			 from_master) ||
	    alloc_shards(d, &d->lp_buf, lp_bytes, lp_bytes > 1) ||
	    alloc_shards(d, &d->packed_buf, (size_t)L->n_packed + 1,
			 L->n_packed > 0) ||
	    mg_buf_alloc(ctx, &d->buffers, (size_t)L->n_buffers * ms + 1,
			 MG_MEM_PARAMS))
		return -1;
	for (int k = 0; k < d->nslots_state; k++)
		if (mg_buf_alloc(ctx, &d->state[k], (size_t)L->n_train * ms + 1,
				 MG_MEM_OPTIM) ||
		    mg_memset_dev(ctx, d->state[k].ptr, 0, d->state[k].bytes))
			return -1;
	return 0;
}

int fsdp_refresh_lp(struct fsdp *d)
{
	const struct mg_flat_layout *L = &d->L;
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->lp && !mg_flat_frozen_lp(f) &&
		    mg_op_convert(
			    d->ctx, fsdp_lp(d, f), d->compute,
			    fsdp_at(&d->master_buf, f->master_off, d->master),
			    d->master, f->shard))
			return -1;
	}
	return 0;
}

/* Initial values: keep this rank's shard of each full flat; a frozen lp
 * flat's converted to its lent dtype on the host (it has no master), a
 * packed flat's kept as the bytes it is. */
static int keep_shard(void *arg, int k, const char *full)
{
	struct fsdp *d = arg;
	const struct mg_flat *f = &d->L.flats[k];
	size_t ms = mg_dtype_size(d->master);
	if (f->packed)
		return mg_copy_h2d(
			d->ctx, (char *)d->packed_buf.ptr + f->packed_off,
			full + (size_t)(d->srank * f->shard), (size_t)f->shard);
	if (mg_flat_frozen_lp(f)) {
		/* Mixed precision: master F32, lent F16 or BF16. */
		const float *src =
			(const float *)full + (size_t)(d->srank * f->shard);
		uint16_t *lo = malloc((size_t)f->shard * sizeof *lo + 1);
		if (!lo)
			return mg_error("out of memory");
		/* libmg's host conversion runs on every core. */
		const int64_t n = f->shard;
		struct mg_tensor ts =
			mg_tensor_make((void *)src, MG_F32, MG_DEV_CPU, 1, &n);
		struct mg_tensor td =
			mg_tensor_make(lo, f->lent, MG_DEV_CPU, 1, &n);
		int rc = mg_tensor_convert_host(&td, &ts);
		if (!rc)
			rc = mg_copy_h2d(d->ctx, fsdp_lp(d, f), lo,
					 (size_t)f->shard * sizeof *lo);
		free(lo);
		return rc;
	}
	return mg_copy_h2d(d->ctx,
			   fsdp_at(&d->master_buf, f->master_off, d->master),
			   full + (size_t)(d->srank * f->shard) * ms,
			   (size_t)f->shard * ms);
}

static void *fsdp_params(void *self, int k)
{
	struct fsdp *d = self;
	return fsdp_shard(d, &d->L.flats[k]);
}

static int update_flat(struct fsdp *d, const struct mg_optim_hparams *h,
		       const struct mg_flat *f, const char *grad);

/* The pipeline's final action with update_in_backward: unit u's
 * optimizer update from its final gradient shards, their sum of squares
 * added to the step's. */
static int fsdp_final(void *self, int u)
{
	struct fsdp *d = self;
	const struct mg_flat_layout *L = &d->L;
	struct mg_ctx *ctx = d->ctx;
	if (!d->ubw)
		return 0;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		const char *g = mg_unit_pipe_gshard(&d->base.pipe, u, k);
		if (mg_optim_sumsq(ctx, ctx->optim_vals, f->grad, g,
				   f->shard) ||
		    update_flat(d, ctx->optim, f, g))
			return mg_error_prefix("fsdp: update of %s",
					       d->spec->units[u].name);
	}
	return 0;
}

static const struct mg_unit_hooks fsdp_hooks = {
	.params = fsdp_params,
	.final = fsdp_final,
};

/* The shard mode as the unit pipeline's policies (fsdp.h). */
static int fsdp_pipe_init(struct fsdp *d)
{
	const int accum = d->ctx->micro_count > 1 ? d->ctx->micro_count : 1;
	unsigned fl = 0;
	if (d->group > 1)
		fl |= MG_UP_SHARD_PARAMS;
	if (d->group > 1 && d->mode == FSDP_GRAD_OP)
		fl |= MG_UP_KEEP_GATHERED;
	if (d->lp_inplace)
		fl |= MG_UP_SLOTS_AT_INIT;
	if (accum > 1 && (d->group == 1 || d->mode == FSDP_GRAD_OP))
		fl |= MG_UP_NO_SYNC;
	if (d->ubw && d->group > 1 && accum == 1)
		fl |= MG_UP_TRANSIENT_GRADS;
	bool direct = d->group == 1;
	for (int k = 0; k < d->L.nflats; k++)
		if (d->L.flats[k].train &&
		    d->L.flats[k].grad != d->L.flats[k].lent)
			direct = false;
	if (direct)
		fl |= MG_UP_DIRECT_GRADS;
	const struct mg_unit_pipe_cfg cfg = {
		.ctx = d->ctx,
		.L = &d->L,
		.sc = d->sc,
		.rc = d->rc,
		.srank = d->srank,
		.replicas = d->replicas,
		.flags = fl,
		.prefetch = d->prefetch,
		.buffers = d->buffers.ptr,
		.hooks = &fsdp_hooks,
		.self = d,
		.who = "fsdp",
		.alloc_slot = fsdp_alloc_gathered,
	};
	return mg_unit_pipe_init(&d->base.pipe, &cfg);
}

static int fsdp_setup(void *self, const struct mg_model_spec *spec)
{
	struct fsdp *d = self;
	struct mg_ctx *ctx = d->ctx;
	d->spec = spec;
	d->master = ctx->master_dtype;
	d->compute = ctx->compute_dtype;
	if (d->ubw && mg_flat_ubw_check(ctx, "fsdp"))
		return -1;
	if (make_groups(d))
		return mg_error_prefix("fsdp");
	d->lp_inplace = d->mode == FSDP_GRAD_OP && d->group > 1;
	if (mg_flat_build(&d->L, spec, d->master, d->compute, d->group,
			  d->reduce_fp32) ||
	    alloc_storage(d))
		return mg_error_prefix("fsdp");
	if (d->copy_engine && d->group > 1)
		mg_info("fsdp: copy_engine: parameter shards and gather "
			"buffers are NCCL windows; all-gathers between them "
			"run on the copy engines");
	if (fsdp_pipe_init(d) ||
	    mg_flat_init_shard(&d->L, ctx, d->srank, 0, keep_shard, d,
			       d->buffers.ptr) ||
	    fsdp_refresh_lp(d))
		return mg_error_prefix("fsdp");
	return 0;
}

/* AdamW / SGD on this rank's shard of one flat: at most two slices
 * (weight decay, then none). */
static int update_flat(struct fsdp *d, const struct mg_optim_hparams *h,
		       const struct mg_flat *f, const char *grad)
{
	void *state[2] = {NULL, NULL};
	for (int k = 0; k < d->nslots_state; k++)
		state[k] = fsdp_at(&d->state[k], f->train_off, d->master);
	struct mg_optim_slice sl[2];
	int n = mg_flat_slices(
		&d->L, f, d->srank, h->decay_all,
		fsdp_at(&d->master_buf, f->master_off, d->master), grad,
		f->lp ? fsdp_lp(d, f) : NULL, state, d->nslots_state, sl);
	for (int i = 0; i < n; i++)
		if (mg_optim_update(d->ctx, h, d->ctx->optim_vals, &sl[i]))
			return -1;
	return 0;
}

static int fsdp_step(void *self, const struct mg_optim_hparams *h,
		     struct mg_step_report *r)
{
	struct fsdp *d = self;
	struct mg_ctx *ctx = d->ctx;
	const struct mg_flat_layout *L = &d->L;
	struct mg_optim_vals *v = ctx->optim_vals;
	r->comm_seconds = 0;
	if (mg_unit_pipe_finish(&d->base.pipe))
		return -1;
	/* The global gradient norm: this rank's shards, summed over the
	 * shard group (replica groups hold the same shards);
	 * update_in_backward summed them unit by unit as it updated. */
	if (!d->ubw && mg_unit_pipe_sumsq(&d->base.pipe))
		return -1;
	if (d->sc &&
	    (d->sc->all_reduce(d->sc, &v->sumsq, 1, MG_F32, MG_REDUCE_SUM) ||
	     d->sc->wait(d->sc)))
		return mg_error_prefix("fsdp: gradient norm");
	if (mg_optim_finalize(ctx, h, v))
		return -1;
	/* update_in_backward: the units are updated already, even in a
	 * step that finalize marks skipped (non-finite gradients); the
	 * next step's loss then stops the run (step_compute reads nothing
	 * on the host, so it cannot be checked here). */
	for (int k = 0; !d->ubw && k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->train &&
		    update_flat(d, h, f,
				mg_unit_pipe_gshard(&d->base.pipe, f->unit, k)))
			return -1;
	}
	/* Buffers as DDP keeps them: rank 0's everywhere. */
	if (ctx->world > 1 && L->n_buffers &&
	    ctx->comm->broadcast(ctx->comm, d->buffers.ptr, L->n_buffers,
				 d->master, 0))
		return mg_error_prefix("fsdp: buffer broadcast");
	/* Gathered parameters are stale now: reset for the next step. */
	mg_unit_pipe_reset(&d->base.pipe);
	return 0;
}

static const struct mg_strategy_ops fsdp_ops = {
	.setup = fsdp_setup,
	MG_UNIT_STRATEGY_OPS,
	.begin_step = mg_unit_strategy_begin_step,
	.step = fsdp_step,
	.save = fsdp_save,
	.load = fsdp_load,
	.caps = MG_STRATEGY_GRAD_ACCUM,
};

static const struct mg_plugin fsdp_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "fsdp",
	.version = "1.0",
	.description = "fully sharded data parallel: parameters, gradients "
		       "and optimizer state sharded by unit (full, grad_op, "
		       "none, hybrid), gathers prefetched, reductions "
		       "overlapped with backward",
	.options = fsdp_options,
	.create = fsdp_create,
	.destroy = fsdp_destroy,
	.ops = &fsdp_ops,
};

MG_PLUGIN_DEFINE(fsdp_plugin)
