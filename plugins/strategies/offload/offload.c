/*
 * offload.c - the offload strategy plugin (ZeRO-Offload, see offload.h):
 * options, device and pinned host storage (the kit's strategy head gives
 * the sampler: each rank reads its block of the global batch), the step
 * (gradient norm on the device, the optimizer on the host in chunks,
 * updated parameters copied back and all-gathered) and the hooks of the
 * kit's unit pipeline (the gradient shard's copy to the host as each
 * unit's final action).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"

static const struct mg_option off_options[] = {
	MG_OPT_E("reduce_dtype", "param", "param|fp32",
		 "dtype gradients are reduced and copied to the host in: the "
		 "compute dtype (param) or fp32"),
	MG_OPT_I("threads", "0", 0, 4096,
		 "host threads for the optimizer (0: the cores this rank may "
		 "use)"),
	MG_UNIT_STRATEGY_OPTIONS,
	MG_OPT_B("update_in_backward", "false",
		 "run each unit's host optimizer as soon as its gradient "
		 "shard is on the host, and copy its parameters back, while "
		 "backward computes the next units (no gradient clipping, "
		 "not with fp16)"),
	MG_OPT_END,
};

static int off_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct offload *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("out of memory");
	d->ctx = ctx;
	d->reduce_fp32 = mg_opt_enum(o, "reduce_dtype") == 1;
	d->threads = (int)mg_opt_int(o, "threads");
	d->ubw = mg_opt_bool(o, "update_in_backward");
	mg_unit_strategy_init(&d->base, o, ctx);
	*self = d;
	return 0;
}

static void off_destroy(void *self)
{
	struct offload *d = self;
	mg_unit_strategy_free(&d->base);
	struct mg_buf *bufs[] = {&d->params,	 &d->buffers,	&d->h_master,
				 &d->h_lp,	 &d->h_grads,	&d->h_vals,
				 &d->h_state[0], &d->h_state[1]};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		mg_buf_free(d->ctx, bufs[i]);
	for (int c = 0; c < d->nchunks; c++)
		free(d->chunks[c].slices);
	for (int u = 0; d->uchunks && u < d->spec->nunits; u++)
		free(d->uchunks[u].slices);
	free(d->uchunks);
	if (d->hopt)
		mg_host_optim_destroy(d->hopt);
	free(d->unit_base);
	mg_flat_free(&d->L);
	free(d);
}

static int alloc_storage(struct offload *d)
{
	struct mg_ctx *ctx = d->ctx;
	const struct mg_flat_layout *L = &d->L;
	size_t ms = mg_dtype_size(d->master), cs = mg_dtype_size(d->compute);
	int nu = d->spec->nunits;
	d->unit_base = calloc((size_t)nu + 1, sizeof *d->unit_base);
	if (!d->unit_base)
		return mg_error("out of memory");
	for (int u = 0; u < nu; u++)
		d->unit_base[u + 1] = d->unit_base[u] + L->unit_full_bytes[u];
	d->nslots_state = ctx->optim ? mg_optim_state_slots(ctx->optim) : 0;
	if (mg_buf_alloc(ctx, &d->params, d->unit_base[nu] + 1,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &d->buffers, (size_t)L->n_buffers * ms + 1,
			 MG_MEM_PARAMS))
		return -1;
	/* Pinned: what copies read or write (the low-precision copy going
	 * up, the gradient shards coming down, and the master where a
	 * trained flat is lent in the master dtype, uploaded from it). The
	 * moments and a master only the host reads stay pageable: pinning
	 * them would only cost setup time and locked memory (54 GB of
	 * moments at 7B). place_host_state zeroes them. */
	bool master_dma = false;
	for (int k = 0; k < L->nflats; k++)
		master_dma |= L->flats[k].train && !L->flats[k].lp;
	if (mg_buf_alloc_host(ctx, &d->h_master, (size_t)L->n_master * ms + 1,
			      MG_MEM_PARAMS, master_dma) ||
	    mg_buf_alloc_host(ctx, &d->h_lp, (size_t)L->n_lp * cs + 1,
			      MG_MEM_PARAMS, true) ||
	    mg_buf_alloc_host(ctx, &d->h_grads, L->gshard_bytes + 1,
			      MG_MEM_GRADS, true) ||
	    mg_buf_alloc_host(ctx, &d->h_vals, sizeof(struct mg_optim_vals),
			      MG_MEM_OTHER, true))
		return -1;
	memset(d->h_grads.ptr, 0, d->h_grads.bytes);
	for (int k = 0; k < d->nslots_state; k++)
		if (mg_buf_alloc_host(ctx, &d->h_state[k],
				      (size_t)L->n_train * ms + 1, MG_MEM_OPTIM,
				      false))
			return -1;
	return 0;
}

/* Where chunk ch's slices start in host buffer `which` (-1: the master,
 * j >= 0: state slot j). */
static char *chunk_start(const struct off_chunk *ch, int which)
{
	const struct mg_optim_slice *s = &ch->slices[0];
	return (char *)(which < 0 ? s->param : s->state[which]);
}

/* Zero the pageable host state (the moments, and the master unless it
 * is pinned) on the optimizer's threads, chunk by chunk as the step
 * updates them: a page lands on the memory node of the thread that
 * first touches it, so each chunk's pages are spread as its update
 * reads them (mg_host_optim_zero). Runs before the initial values are
 * written. Every byte of each buffer is zeroed, the gaps included.
 * Chunks hold flats in order and the layout places shards in flat order
 * (kit/flat.c place_shards), so each chunk starts past the one before. */
static int place_host_state(struct offload *d)
{
	const int nch = d->ubw ? d->spec->nunits : d->nchunks;
	const struct off_chunk *chunks = d->ubw ? d->uchunks : d->chunks;
	for (int which = -1; which < d->nslots_state; which++) {
		const struct mg_buf *b =
			which < 0 ? &d->h_master : &d->h_state[which];
		if (b->pinned_host)
			continue; /* already touched by the allocation */
		char *from = b->ptr, *end = (char *)b->ptr + b->bytes;
		for (int c = 0; c < nch; c++) {
			if (!chunks[c].nslices)
				continue;
			int next = c + 1;
			while (next < nch && !chunks[next].nslices)
				next++;
			char *to = next < nch
					   ? chunk_start(&chunks[next], which)
					   : end;
			if (mg_host_optim_zero(d->hopt, from,
					       (size_t)(to - from)))
				return -1;
			from = to;
		}
		if (from < end &&
		    mg_host_optim_zero(d->hopt, from, (size_t)(end - from)))
			return -1;
	}
	return 0;
}

void off_refresh_host_lp(struct offload *d)
{
	const struct mg_flat_layout *L = &d->L;
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->lp || !f->train)
			continue;
		const float *m = (const float *)off_host(
			&d->h_master, f->master_off, d->master);
		uint16_t *lp =
			(uint16_t *)off_host(&d->h_lp, f->lp_off, d->compute);
		for (int64_t i = 0; i < f->shard; i++)
			lp[i] = d->compute == MG_BF16 ? mg_float_to_bf16(m[i])
						      : mg_float_to_half(m[i]);
	}
}

int off_upload_full(struct offload *d, int k, const void *full_host)
{
	return mg_flat_upload(d->ctx, &d->L, &d->L.flats[k], off_dev_full(d, k),
			      full_host, d->L.flats[k].shard * d->L.group);
}

/* Every rank's shard of each trained flat into every rank's full device
 * copy, in place (after the update, and after the initial values). */
static int gather_params(struct offload *d)
{
	struct mg_comm *c = d->ctx->comm;
	for (int k = 0; k < d->L.nflats; k++) {
		const struct mg_flat *f = &d->L.flats[k];
		if (f->train &&
		    c->all_gather(c, off_dev_mine(d, k), off_dev_full(d, k),
				  f->shard, f->lent))
			return mg_error_prefix("offload: all-gather");
	}
	return 0;
}

/* Initial values: this rank's shard of a trained flat to the host master
 * and to its place on the device (the full device copy is gathered once
 * every unit is made, so the ranks share the random draws). A frozen
 * flat lives on the device only, made whole on every rank: it has no
 * host master (lent in a lower dtype or packed NF4: none in the layout;
 * in the master dtype: its host shard is never read, never updated). */
static int keep_flat(void *arg, int k, const char *full)
{
	struct offload *d = arg;
	const struct mg_flat *f = &d->L.flats[k];
	size_t ms = mg_dtype_size(d->master);
	if (!f->train)
		return off_upload_full(d, k, full);
	const char *mine = full + (size_t)(d->srank * f->shard) * ms;
	memcpy(off_host(&d->h_master, f->master_off, d->master), mine,
	       (size_t)f->shard * ms);
	return mg_flat_upload(d->ctx, &d->L, f, off_dev_mine(d, k), mine,
			      f->shard);
}

/* Chunk c takes trained flat k: its host slices (at most two, with
 * weight decay and without); room for them was made by chunk_open. */
static void chunk_add(struct offload *d, struct off_chunk *c, int k)
{
	const struct mg_flat *f = &d->L.flats[k];
	void *state[2] = {NULL, NULL};
	for (int j = 0; j < d->nslots_state; j++)
		state[j] = off_host(&d->h_state[j], f->train_off, d->master);
	c->last = k + 1;
	c->nslices += mg_flat_slices(
		&d->L, f, d->srank, false,
		off_host(&d->h_master, f->master_off, d->master),
		(char *)d->h_grads.ptr + f->gshard_byte,
		f->lp ? off_host(&d->h_lp, f->lp_off, d->compute) : NULL, state,
		d->nslots_state, &c->slices[c->nslices]);
}

static int chunk_open(struct offload *d, struct off_chunk *c, int first,
		      int nflats)
{
	c->d = d;
	c->first = c->last = first;
	c->nslices = 0;
	c->slices = calloc(2 * (size_t)(nflats > 0 ? nflats : 1),
			   sizeof *c->slices);
	return c->slices ? 0 : mg_error("out of memory");
}

/* Host slices of trained flats, cut into chunks of about equal size: the
 * upload of one chunk overlaps the optimizer on the next. With
 * update_in_backward, one chunk a unit instead (its trained flats),
 * updated as soon as the unit's gradient shard is on the host. */
static int build_chunks(struct offload *d)
{
	const struct mg_flat_layout *L = &d->L;
	if (d->ubw) {
		const int nu = d->spec->nunits;
		d->uchunks = calloc((size_t)nu + 1, sizeof *d->uchunks);
		if (!d->uchunks)
			return mg_error("out of memory");
		for (int u = 0; u < nu; u++) {
			const int k0 = L->unit_first[u],
				  k1 = L->unit_first[u + 1];
			if (chunk_open(d, &d->uchunks[u], k0, k1 - k0))
				return -1;
			for (int k = k0; k < k1; k++)
				if (L->flats[k].train)
					chunk_add(d, &d->uchunks[u], k);
		}
		return 0;
	}
	int64_t total = L->n_train, per = total / OFFLOAD_CHUNKS + 1, acc = 0;
	struct off_chunk *c = NULL;
	for (int k = 0; k < L->nflats; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		if (!c || (acc >= per && d->nchunks < OFFLOAD_CHUNKS)) {
			c = &d->chunks[d->nchunks++];
			if (chunk_open(d, c, k, L->nflats))
				return -1;
			acc = 0;
		}
		acc += f->shard;
		chunk_add(d, c, k);
	}
	return 0;
}

static int off_pipe_init(struct offload *d);

static int off_setup(void *self, const struct mg_model_spec *spec)
{
	struct offload *d = self;
	struct mg_ctx *ctx = d->ctx;
	d->spec = spec;
	d->master = ctx->master_dtype;
	d->compute = ctx->compute_dtype;
	d->world = ctx->world;
	d->srank = ctx->rank;
	if (d->master != MG_F32 && d->master != MG_F64)
		return mg_error("offload: master dtype %s (fp32 or fp64 only)",
				mg_dtype_name(d->master));
	if (d->ubw && mg_flat_ubw_check(ctx, "offload"))
		return -1;
	d->hp = ctx->optim;
	int threads =
		d->threads ? d->threads : mg_host_optim_default_threads(ctx);
	/* Where setup time goes (a 7B model on one GPU took 153 s to its
	 * first step, 37 s on four): storage, most of it pinned host
	 * memory, against drawing and placing the initial values. */
	const double t0 = mg_now();
	if (mg_flat_build(&d->L, spec, d->master, d->compute, d->world,
			  d->reduce_fp32) ||
	    alloc_storage(d) || off_pipe_init(d) ||
	    mg_host_optim_create(threads, &d->hopt) || build_chunks(d) ||
	    place_host_state(d))
		return mg_error_prefix("offload");
	const double t1 = mg_now();
	if (mg_flat_init_shard(&d->L, ctx, d->srank, MG_FLAT_INIT_FROZEN_WHOLE,
			       keep_flat, d, d->buffers.ptr) ||
	    (d->world > 1 && (gather_params(d) || ctx->comm->wait(ctx->comm))))
		return mg_error_prefix("offload");
	off_refresh_host_lp(d);
	if (d->ubw)
		mg_info("offload: update_in_backward: each unit's host update "
			"starts as its gradient shard reaches the host, while "
			"backward goes on");
	mg_info("offload: optimizer state in host memory (%.1f MiB, %.1f MiB "
		"of it pinned), %d host thread(s), %s; storage %.1f s, "
		"initial values %.1f s",
		(double)(d->h_master.bytes + d->h_state[0].bytes +
			 d->h_state[1].bytes) /
			1048576.0,
		(double)(d->h_master.pinned_host ? d->h_master.bytes : 0) /
			1048576.0,
		mg_host_optim_threads(d->hopt), mg_host_optim_isa(d->hopt),
		t1 - t0, mg_now() - t1);
	return 0;
}

static int off_begin_step(void *self)
{
	struct offload *d = self;
	if (d->host_error)
		return mg_error("offload: host optimizer: %s", d->host_msg);
	mg_unit_pipe_reset(&d->base.pipe);
	d->vals_sent = false;
	return mg_unit_pipe_begin_step(&d->base.pipe);
}

/* Host call: the optimizer over one chunk (runs when the device reaches
 * it, after the gradients and this step's values are on the host). */
static void chunk_update(void *arg)
{
	struct off_chunk *c = arg;
	struct offload *d = c->d;
	if (d->host_error)
		return;
	if (mg_host_optim_run(d->hopt, d->hp, d->h_vals.ptr, c->slices,
			      c->nslices)) {
		snprintf(d->host_msg, sizeof d->host_msg, "%s",
			 mg_last_error());
		d->host_error = 1;
	}
}

/* Chunk ch's updated parameter shards back to the device, on the side
 * stream after its host update. */
static int chunk_upload(struct offload *d, const struct off_chunk *ch)
{
	const struct mg_flat_layout *L = &d->L;
	for (int fi = ch->first; fi < ch->last; fi++) {
		const struct mg_flat *f = &L->flats[fi];
		if (!f->train)
			continue;
		size_t bytes = (size_t)f->shard * mg_dtype_size(f->lent);
		const void *src =
			f->lp ? off_host(&d->h_lp, f->lp_off, d->compute)
			      : off_host(&d->h_master, f->master_off,
					 d->master);
		if (mg_copy_async(d->ctx, off_dev_mine(d, fi), src, bytes))
			return -1;
		mg_count(d->ctx, MG_C_H2D_BYTES, (int64_t)bytes);
	}
	return 0;
}

/* update_in_backward: unit u's gradient shard is being copied to the
 * host (off_final, the step's last micro-batch). On the side stream,
 * after that copy: the step's optimizer values (once a step: the trainer
 * wrote them to the device before compute), the unit's host update, and
 * its parameters back, while the compute stream goes on with backward.
 * The ranks all-gather the updated shards in off_step as without it. */
static int off_update_unit(struct offload *d, int u)
{
	struct mg_ctx *ctx = d->ctx;
	struct off_chunk *ch = &d->uchunks[u];
	if (!ch->nslices)
		return 0;
	if (!d->vals_sent && mg_copy_async(ctx, d->h_vals.ptr, ctx->optim_vals,
					   sizeof(struct mg_optim_vals)))
		return -1;
	d->vals_sent = true;
	if (mg_host_call_side(ctx, chunk_update, ch) || chunk_upload(d, ch))
		return mg_error_prefix("offload: update of %s",
				       d->spec->units[u].name);
	return 0;
}

static void *off_params(void *self, int k)
{
	return off_dev_full(self, k);
}

/* The pipeline's final action: unit u's gradient shard to the host on
 * the side stream (and, with update_in_backward, its host update queued
 * after it); asynchronous, so the pipeline keeps the shard until its next
 * wait joins the copies. With one rank and no accumulation the shard is
 * the slot's whole gradient: its norm is taken here, unit by unit. */
static int off_final(void *self, int u)
{
	struct offload *d = self;
	struct mg_ctx *ctx = d->ctx;
	const struct mg_flat_layout *L = &d->L;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		size_t bytes = (size_t)f->shard * mg_dtype_size(f->grad);
		const char *src = mg_unit_pipe_gshard(&d->base.pipe, u, k);
		if (d->transient && mg_optim_sumsq(ctx, ctx->optim_vals,
						   f->grad, src, f->shard))
			return -1;
		if (mg_copy_async(ctx, (char *)d->h_grads.ptr + f->gshard_byte,
				  src, bytes))
			return mg_error_prefix("offload: gradient copy of %s",
					       d->spec->units[u].name);
		mg_count(ctx, MG_C_D2H_BYTES, (int64_t)bytes);
	}
	if (d->ubw && off_update_unit(d, u))
		return -1;
	return MG_UP_ASYNC;
}

/* The pipeline's waits join the side stream's copies too. */
static int off_wait(void *self)
{
	struct offload *d = self;
	return mg_copy_join(d->ctx);
}

static const struct mg_unit_hooks off_hooks = {
	.params = off_params,
	.final = off_final,
	.wait = off_wait,
};

/* The pipeline over this layout: gradients reduce-scattered over every
 * rank, parameters resident (the full copy on the device). */
static int off_pipe_init(struct offload *d)
{
	const int accum = d->ctx->micro_count > 1 ? d->ctx->micro_count : 1;
	d->transient = d->world == 1 && accum == 1;
	const struct mg_unit_pipe_cfg cfg = {
		.ctx = d->ctx,
		.L = &d->L,
		.sc = d->world > 1 ? d->ctx->comm : NULL,
		.srank = d->srank,
		.replicas = 1,
		.flags = d->transient ? MG_UP_TRANSIENT_GRADS : 0,
		.buffers = d->buffers.ptr,
		.hooks = &off_hooks,
		.self = d,
		.who = "offload",
	};
	return mg_unit_pipe_init(&d->base.pipe, &cfg);
}

static int off_step(void *self, const struct mg_optim_hparams *h,
		    struct mg_step_report *r)
{
	struct offload *d = self;
	struct mg_ctx *ctx = d->ctx;
	struct mg_comm *c = ctx->comm;
	const struct mg_flat_layout *L = &d->L;
	struct mg_optim_vals *v = ctx->optim_vals;
	r->comm_seconds = 0;
	d->hp = h;
	if (mg_unit_pipe_finish(&d->base.pipe))
		return -1;
	/* The norm over all shards: each rank's, summed (one rank without
	 * accumulation took it unit by unit, off_final). */
	if (!d->transient &&
	    (mg_unit_pipe_sumsq(&d->base.pipe) ||
	     (d->world > 1 &&
	      (c->all_reduce(c, &v->sumsq, 1, MG_F32, MG_REDUCE_SUM) ||
	       c->wait(c)))))
		return mg_error_prefix("offload: gradient norm");
	/* update_in_backward: every unit was updated and sent back on the
	 * side stream during backward, even in a step that finalize marks
	 * skipped (as fsdp's); the norm is still taken for the report. */
	if (mg_optim_finalize(ctx, h, v) ||
	    (!d->ubw && (mg_copy_async(ctx, d->h_vals.ptr, v, sizeof *v) ||
			 mg_copy_join(ctx))))
		return -1;
	/* Chunk by chunk: the optimizer on the host, then its parameters
	 * back to the device while the next chunk is updated. */
	for (int k = 0; !d->ubw && k < d->nchunks; k++) {
		struct off_chunk *ch = &d->chunks[k];
		if (mg_host_call(ctx, chunk_update, ch) || chunk_upload(d, ch))
			return -1;
	}
	if (mg_copy_join(ctx))
		return -1;
	if (d->world > 1) {
		if (gather_params(d))
			return -1;
		if (L->n_buffers &&
		    c->broadcast(c, d->buffers.ptr, L->n_buffers, d->master, 0))
			return mg_error_prefix("offload: buffer broadcast");
	}
	if (d->host_error)
		return mg_error("offload: host optimizer: %s", d->host_msg);
	return 0;
}

static const struct mg_strategy_ops off_ops = {
	.setup = off_setup,
	MG_UNIT_STRATEGY_OPS,
	.begin_step = off_begin_step,
	.step = off_step,
	.save = off_save,
	.load = off_load,
	.caps = MG_STRATEGY_GRAD_ACCUM,
};

static const struct mg_plugin off_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_STRATEGY,
	.name = "offload",
	.version = "1.0",
	.description = "ZeRO-Offload: master weights and optimizer state in "
		       "host memory, gradients copied out as backward "
		       "completes each unit, a SIMD multi-threaded optimizer "
		       "on the CPU; sharded across ranks",
	.options = off_options,
	.create = off_create,
	.destroy = off_destroy,
	.ops = &off_ops,
};

MG_PLUGIN_DEFINE(off_plugin)
