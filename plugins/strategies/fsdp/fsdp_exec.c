/*
 * fsdp_exec.c - the pipeline behind acquire / release / grads_ready: a
 * unit's full parameters all-gathered into a slot before it computes (the
 * next unit's gather started while this one computes), freed after, and
 * its gradients reduce-scattered into this rank's shard (then, in hybrid
 * mode, all-reduced across replica groups) while backward goes on.
 *
 * With update_in_backward a unit whose gradient shard is final is
 * updated at once (done(): fsdp.h says when, and what it saves).
 *
 * Overlap comes from one rule: every collective is issued right after a
 * wait on the communicators, at an acquire, so it runs while the unit
 * being acquired computes, and the next acquire's wait is the first thing
 * that needs it. A reduction the model reports ready is therefore issued
 * at the following acquire, and its gradient slot is reused only after the
 * wait that completes it. On a GPU the collectives run on the
 * communicators' streams and the waits are stream waits; on CPU ranks the
 * waits complete MPI's non-blocking requests.
 */
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

int fsdp_wait_all(struct fsdp *d)
{
	if (d->sc && d->sc->wait(d->sc))
		return mg_error_prefix("fsdp: shard group");
	if (d->rc && d->rc != d->sc && d->rc->wait(d->rc))
		return mg_error_prefix("fsdp: replica group");
	d->epoch++;
	return 0;
}

/* A free slot of `bytes` from pool (growing it, as memory category
 * cat); its index or -1. */
static int take_slot(struct fsdp *d, struct fsdp_slot **pool, int *n,
		     size_t bytes, int owner, enum mg_mem_cat cat)
{
	for (int i = 0; i < *n; i++)
		if ((*pool)[i].owner < 0 && (*pool)[i].buf.bytes >= bytes) {
			(*pool)[i].owner = owner;
			return i;
		}
	struct fsdp_slot *p = realloc(*pool, (size_t)(*n + 1) * sizeof *p);
	if (!p) {
		mg_error("fsdp: out of memory for slots");
		return -1;
	}
	*pool = p;
	memset(&p[*n], 0, sizeof p[*n]);
	if (cat == MG_MEM_GATHER
		    ? fsdp_alloc_gathered(d, &p[*n].buf, bytes ? bytes : 1, cat)
		    : mg_buf_alloc(d->ctx, &p[*n].buf, bytes ? bytes : 1,
				   cat)) {
		mg_error_prefix("fsdp: %s buffer of %zu bytes",
				cat == MG_MEM_GRADS ? "gradient shard"
						    : "gather",
				bytes);
		return -1;
	}
	p[*n].owner = owner;
	return (*n)++;
}

/* Parameter slot for unit u: its own buffer (grad_op keeps every unit's
 * full parameters from forward to backward) or one from the shared pool,
 * each as large as the largest unit. */
static int take_pslot(struct fsdp *d, int u)
{
	struct fsdp_unit *un = &d->units[u];
	if (d->dedicated) {
		struct fsdp_slot *s = &d->pslots[u];
		if (!s->buf.ptr &&
		    fsdp_alloc_gathered(d, &s->buf,
					d->L.unit_full_bytes[u]
						? d->L.unit_full_bytes[u]
						: 1,
					MG_MEM_GATHER))
			return mg_error_prefix("fsdp: gather buffer");
		s->owner = u;
		un->slot = u;
		return 0;
	}
	un->slot = take_slot(d, &d->pslots, &d->npslots, d->L.max_full_bytes, u,
			     MG_MEM_GATHER);
	return un->slot < 0 ? -1 : 0;
}

static void drop_pslot(struct fsdp *d, int u)
{
	struct fsdp_unit *un = &d->units[u];
	un->gathered = false;
	if (un->slot < 0)
		return;
	d->pslots[un->slot].owner = -1;
	if (!d->dedicated)
		un->slot = -1;
}

/* Issue the all-gathers of unit u's flats into its slot. A dedicated
 * slot (grad_op) is the unit's alone for the whole run, so a frozen
 * flat gathered there once (a LoRA or QLoRA base, DPO's reference)
 * stays whole: only the trained flats are gathered again each step. */
static int gather(struct fsdp *d, int u)
{
	struct fsdp_unit *un = &d->units[u];
	const struct mg_flat_layout *L = &d->L;
	if (d->group == 1 || un->gathered)
		return 0;
	if (un->slot < 0 && take_pslot(d, u))
		return -1;
	char *base = d->pslots[un->slot].buf.ptr;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train && un->frozen_held)
			continue;
		const void *mine = fsdp_shard(d, f);
		if (d->sc->all_gather(d->sc, mine, base + f->full_byte,
				      f->shard, f->lent))
			return mg_error_prefix("fsdp: all-gather of %s",
					       d->spec->units[u].name);
	}
	un->gathered = true;
	un->frozen_held = d->dedicated;
	return 0;
}

/* Reduce-scatter unit u's full gradients into this rank's shards: the
 * step's first contribution straight into the gradient shard, a later
 * micro-batch's into the slot's scratch (added when it completes). */
static int scatter(struct fsdp *d, int u)
{
	const struct mg_flat_layout *L = &d->L;
	struct fsdp_unit *un = &d->units[u];
	char *base = d->gslots[un->gslot].buf.ptr;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		size_t off = f->gfull_byte;
		if (f->grad != f->lent) /* the converted copy follows */
			off += (f->shard * L->group * mg_dtype_size(f->lent) +
				255) &
			       ~(size_t)255;
		char *dst =
			un->acc ? base + d->scratch_base + d->scratch_byte[k]
				: fsdp_gshard(d, u, k);
		if (d->sc->reduce_scatter(d->sc, base + off, dst, f->shard,
					  f->grad, MG_REDUCE_SUM))
			return mg_error_prefix("fsdp: reduce-scatter of %s",
					       d->spec->units[u].name);
	}
	un->scratch = un->acc;
	un->acc = true;
	return 0;
}

/* Add a completed reduce-scatter's scratch into unit u's shards (on the
 * compute stream, which waited for the collective). */
static int accumulate(struct fsdp *d, int u)
{
	const struct mg_flat_layout *L = &d->L;
	struct fsdp_unit *un = &d->units[u];
	char *base = (char *)d->gslots[un->gslot].buf.ptr + d->scratch_base;
	enum mg_device_kind dev = d->ctx->dev->kind;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		const int64_t n = f->shard;
		struct mg_tensor acc = mg_tensor_make(fsdp_gshard(d, u, k),
						      f->grad, dev, 1, &n);
		struct mg_tensor add = mg_tensor_make(base + d->scratch_byte[k],
						      f->grad, dev, 1, &n);
		if (mg_op_add(d->ctx, &acc, &add, &acc))
			return mg_error_prefix("fsdp: accumulating %s",
					       d->spec->units[u].name);
	}
	un->scratch = false;
	return 0;
}

/* Sum unit u's gradient shards over the replica groups. */
static int replicate(struct fsdp *d, int u)
{
	const struct mg_flat_layout *L = &d->L;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->train &&
		    d->rc->all_reduce(d->rc, fsdp_gshard(d, u, k), f->shard,
				      f->grad, MG_REDUCE_SUM))
			return mg_error_prefix("fsdp: all-reduce of %s",
					       d->spec->units[u].name);
	}
	return 0;
}

/* Unit u's pooled gradient shard slot (update_in_backward, G > 1). */
static int take_uslot(struct fsdp *d, int u)
{
	struct fsdp_unit *un = &d->units[u];
	if (!d->pooled || un->uslot >= 0)
		return 0;
	un->uslot = take_slot(d, &d->uslots, &d->nuslots, d->uslot_bytes, u,
			      MG_MEM_GRADS);
	return un->uslot < 0 ? -1 : 0;
}

/* Unit u's gradient shard is final for this micro-batch: with
 * update_in_backward, the step's last one updates the unit now. */
static int done(struct fsdp *d, int u)
{
	d->units[u].gs = G_DONE;
	return d->ubw && d->final ? fsdp_update_unit(d, u) : 0;
}

/* Move every unit's reduction one stage on. A collective issued in an
 * earlier wait epoch has completed (a wait came since). Units go in index
 * order, so every rank issues the same collectives in the same order. */
static int progress(struct fsdp *d)
{
	for (int u = 0; u < d->spec->nunits; u++) {
		struct fsdp_unit *un = &d->units[u];
		if (un->gepoch == d->epoch && un->gs != G_READY)
			continue; /* issued since the last wait */
		switch (un->gs) {
		case G_READY:
			un->gepoch = d->epoch;
			if (d->group > 1) {
				if (take_uslot(d, u) || scatter(d, u))
					return -1;
				un->gs = G_SCATTER;
			} else {
				if (replicate(d, u))
					return -1;
				un->gs = G_REPLICA;
			}
			break;
		case G_SCATTER:
			if (un->scratch && accumulate(d, u))
				return -1;
			d->gslots[un->gslot].owner = -1;
			un->gslot = -1;
			un->gepoch = d->epoch;
			/* Replica groups sum the step's shard once. */
			if (d->replicas > 1 && d->final) {
				if (replicate(d, u))
					return -1;
				un->gs = G_REPLICA;
			} else if (done(d, u)) {
				return -1;
			}
			break;
		case G_REPLICA:
			if (done(d, u))
				return -1;
			break;
		default:
			break;
		}
	}
	return 0;
}

static int enter_micro(struct fsdp *d);

static int next_in_order(struct fsdp *d, int oi, int u)
{
	struct fsdp_order *o = &d->order[oi];
	if (!o->final)
		return -1;
	int pos = -1;
	if (o->cur < o->n && o->seq[o->cur] == u)
		pos = o->cur;
	else
		for (int i = 0; i < o->n && pos < 0; i++)
			if (o->seq[i] == u)
				pos = i;
	if (pos < 0)
		return -1;
	o->cur = pos + 1;
	return pos + 1 < o->n ? o->seq[pos + 1] : -1;
}

static void record(struct fsdp *d, int oi, int u)
{
	struct fsdp_order *o = &d->order[oi];
	if (o->final || o->n == o->cap)
		return;
	o->seq[o->n++] = u;
}

/* Point the unit's lent tensors at where its data is now. */
static void point(struct fsdp *d, int u, bool grads)
{
	const struct mg_flat_layout *L = &d->L;
	const struct mg_unit_decl *ud = &d->spec->units[u];
	struct fsdp_unit *un = &d->units[u];
	for (int k = 0; k < ud->nparams; k++) {
		int i = ud->first_param + k, fi = L->param_flat[i];
		struct mg_tensor *pt = &d->V.ptensor[i], *gt = &d->V.gtensor[i];
		gt->data = NULL;
		if (fi < 0) {
			pt->data = fsdp_at(&d->buffers, L->param_off[i],
					   d->master);
			continue;
		}
		const struct mg_flat *f = &L->flats[fi];
		size_t es = mg_dtype_size(f->lent);
		char *pb;
		if (d->group > 1)
			pb = (char *)d->pslots[un->slot].buf.ptr + f->full_byte;
		else
			pb = fsdp_shard(d, f);
		pt->data = pb + (size_t)L->param_off[i] * es;
		if (!grads || !f->train)
			continue;
		char *gb = d->direct_grads
				   ? (char *)d->gshard.ptr + f->gshard_byte
				   : (char *)d->gslots[un->gslot].buf.ptr +
					     f->gfull_byte;
		gt->data = gb + (size_t)L->param_off[i] * es;
	}
}

struct mg_unit_view *fsdp_acquire(void *self, int u, enum mg_phase ph)
{
	struct fsdp *d = self;
	if (u < 0 || u >= d->spec->nunits) {
		mg_error("acquire: unit %d out of range (model has %d)", u,
			 d->spec->nunits);
		return NULL;
	}
	struct fsdp_unit *un = &d->units[u];
	const int oi = ph == MG_PHASE_BACKWARD;
	if (ph != MG_PHASE_EVAL && enter_micro(d))
		return NULL;
	if (ph != MG_PHASE_EVAL)
		record(d, oi, u);
	/* This unit's gather (normally prefetched, so already issued), then
	 * one wait for everything issued so far. */
	if (gather(d, u) || fsdp_wait_all(d) || progress(d))
		return NULL;
	/* Prefetch: the next `prefetch` units of the recorded order (the
	 * same on every rank, so the all-gathers still match). */
	if (d->prefetch > 0 && d->group > 1) {
		const struct fsdp_order *o = &d->order[oi];
		int nx = next_in_order(d, oi, u);
		for (int k = 0; nx >= 0 && k < d->prefetch; k++) {
			if (nx != u && gather(d, nx))
				return NULL;
			const int pos = o->cur + k + 1;
			nx = pos < o->n ? o->seq[pos] : -1;
		}
	}
	const bool grads = ph == MG_PHASE_BACKWARD && d->V.trains[u];
	if (grads && !d->direct_grads && un->gslot < 0) {
		if (un->gs != G_IDLE) {
			mg_error("fsdp: unit '%s' acquired for backward after "
				 "it reported its gradients ready",
				 d->spec->units[u].name);
			return NULL;
		}
		/* no_sync keeps a slot per unit all step: its own size. */
		un->gslot = take_slot(d, &d->gslots, &d->ngslots,
				      d->nosync ? d->L.unit_grad_bytes[u]
						: d->gslot_bytes,
				      u, MG_MEM_GATHER);
		if (un->gslot < 0 ||
		    mg_memset_dev(d->ctx, d->gslots[un->gslot].buf.ptr, 0,
				  d->L.unit_grad_bytes[u]))
			return NULL;
	}
	point(d, u, grads);
	return &d->V.views[u];
}

void fsdp_release(void *self, int u, enum mg_phase ph)
{
	struct fsdp *d = self;
	if (u < 0 || u >= d->spec->nunits || d->group == 1)
		return;
	/* grad_op keeps the gathered parameters for backward. */
	if (ph == MG_PHASE_FORWARD && d->mode == FSDP_GRAD_OP)
		return;
	/* Nor does any mode free the unit backward starts with (the output
	 * head, once the order is known): it would be gathered again at
	 * once, with nothing to overlap (FSDP2 keeps its root so). */
	const struct fsdp_order *bo = &d->order[1];
	if (ph == MG_PHASE_FORWARD && bo->final && bo->n > 0 && bo->seq[0] == u)
		return;
	drop_pslot(d, u);
}

/* Unit u's gradients are complete for this micro-batch; `final`: for the
 * step (the last micro-batch, or the step's flush). */
static int ready(struct fsdp *d, int u, bool final)
{
	struct fsdp_unit *un = &d->units[u];
	const struct mg_flat_layout *L = &d->L;
	if (!d->V.trains[u])
		return 0;
	if (un->gs != G_IDLE)
		return mg_error("unit '%s' reported its gradients ready twice "
				"in one %s",
				d->spec->units[u].name,
				d->accum > 1 ? "micro-batch" : "step");
	if (!d->direct_grads && un->gslot < 0)
		return mg_error("unit '%s' reported its gradients ready "
				"without being acquired for backward",
				d->spec->units[u].name);
	/* no_sync: the gradients stay where the model summed them. */
	if (d->nosync && !final) {
		un->gs = G_HELD;
		return 0;
	}
	/* Gradients reduced in another dtype: convert now, on the compute
	 * stream, while the unit's gradients are fresh. */
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train || f->grad == f->lent)
			continue;
		char *src =
			(char *)d->gslots[un->gslot].buf.ptr + f->gfull_byte;
		int64_t n = f->shard * L->group;
		size_t lb = ((size_t)n * mg_dtype_size(f->lent) + 255) &
			    ~(size_t)255;
		void *dst = d->group > 1
				    ? src + lb
				    : (char *)d->gshard.ptr + f->gshard_byte;
		if (mg_op_convert(d->ctx, dst, f->grad, src, f->lent, n))
			return mg_error_prefix("fsdp: gradient of %s",
					       d->spec->units[u].name);
	}
	if (d->group == 1 && !d->direct_grads) {
		/* Converted into the shard: the slot is free at once. */
		d->gslots[un->gslot].owner = -1;
		un->gslot = -1;
	}
	if (d->group > 1 || d->replicas > 1) {
		un->gs = G_READY;
		return 0;
	}
	return done(d, u);
}

int fsdp_grads_ready(void *self, int u)
{
	struct fsdp *d = self;
	return ready(d, u, d->ctx->micro + 1 >= d->accum);
}

/* Finish this micro-batch's reductions; `final`: the step's, so every
 * trained unit's shard is complete (else no_sync units stay held and the
 * pipeline is made ready for the next micro-batch). */
static int flush(struct fsdp *d, bool final)
{
	const struct mg_flat_layout *L = &d->L;
	/* Units the model never reported: reduce what they accumulated, or
	 * zero gradients if backward never reached them. Same on every
	 * rank, so the collectives still match. */
	for (int u = 0; u < d->spec->nunits; u++) {
		struct fsdp_unit *un = &d->units[u];
		if (!d->V.trains[u] || un->gs != G_IDLE)
			continue;
		if (d->direct_grads || un->gslot >= 0) {
			if (ready(d, u, final))
				return -1;
			continue;
		}
		if (!final) /* nothing this micro-batch */
			continue;
		un->gepoch = d->epoch;
		if (un->acc) {
			/* Summed from earlier micro-batches only. */
			if (d->replicas > 1) {
				if (replicate(d, u))
					return -1;
				un->gs = G_REPLICA;
			} else if (done(d, u)) {
				return -1;
			}
			continue;
		}
		if (take_uslot(d, u))
			return -1;
		for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
			const struct mg_flat *f = &L->flats[k];
			if (f->train &&
			    mg_memset_dev(d->ctx, fsdp_gshard(d, u, k), 0,
					  (size_t)f->shard *
						  mg_dtype_size(f->grad)))
				return -1;
		}
		if (done(d, u))
			return -1;
	}
	/* At most three stages (scatter, replica all-reduce, done). */
	for (int round = 0; round < 4; round++)
		if (fsdp_wait_all(d) || progress(d))
			return -1;
	for (int u = 0; u < d->spec->nunits; u++) {
		struct fsdp_unit *un = &d->units[u];
		if (!d->V.trains[u])
			continue;
		bool ok = un->gs == G_DONE ||
			  (!final && (un->gs == G_HELD || un->gs == G_IDLE));
		if (!ok)
			return mg_error("fsdp: internal: gradients of unit %d "
					"not reduced",
					u);
		if (!final) {
			un->gs = G_IDLE;
			un->gepoch = -1;
		}
	}
	return 0;
}

int fsdp_exec_finish(struct fsdp *d)
{
	d->final = true;
	return flush(d, true);
}

/* At a training acquire: a new micro-batch finishes the last one's
 * reductions first (the order learned in the first micro-batch is the
 * next one's too). */
static int enter_micro(struct fsdp *d)
{
	const int m = d->ctx->micro;
	if (d->accum > 1 && m != d->micro) {
		if (flush(d, false))
			return -1;
		for (int k = 0; k < 2; k++) {
			if (d->order[k].n > 0)
				d->order[k].final = true;
			d->order[k].cur = 0;
		}
		d->micro = m;
	}
	d->final = m + 1 >= d->accum;
	return 0;
}

void fsdp_exec_reset(struct fsdp *d)
{
	for (int k = 0; k < 2; k++) {
		if (d->order[k].n > 0)
			d->order[k].final = true;
		d->order[k].cur = 0;
	}
	for (int u = 0; u < d->spec->nunits; u++) {
		struct fsdp_unit *un = &d->units[u];
		if (d->group > 1)
			drop_pslot(d, u);
		un->gs = G_IDLE;
		un->gepoch = -1;
		un->acc = un->scratch = false;
	}
	d->epoch = 0;
	d->micro = 0;
	d->final = d->accum <= 1;
}

int fsdp_exec_init(struct fsdp *d)
{
	const struct mg_model_spec *s = d->spec;
	size_t nu = (size_t)s->nunits + 1;
	d->units = calloc(nu, sizeof *d->units);
	for (int k = 0; k < 2; k++) {
		d->order[k].cap = 4 * s->nunits + 4;
		d->order[k].seq = calloc((size_t)d->order[k].cap, sizeof(int));
	}
	if (!d->units || !d->order[0].seq || !d->order[1].seq)
		return mg_error("out of memory");
	if (mg_flat_views_init(&d->V, &d->L, d->ctx->dev->kind))
		return -1;
	/* Gradient slots: a unit's full gradients (and their converted
	 * copy); accumulating by reduce-scatter adds a scratch for the
	 * unit's shards after them. */
	const struct mg_flat_layout *L = &d->L;
	d->gslot_bytes = L->max_grad_bytes;
	d->scratch_base = (L->max_grad_bytes + 255) & ~(size_t)255;
	d->scratch_byte = calloc((size_t)L->nflats + 1, sizeof(size_t));
	if (!d->scratch_byte)
		return mg_error("out of memory");
	if (d->accum > 1 && !d->nosync) {
		size_t most = 0;
		for (int u = 0; u < s->nunits; u++) {
			size_t at = 0;
			for (int k = L->unit_first[u]; k < L->unit_first[u + 1];
			     k++) {
				const struct mg_flat *f = &L->flats[k];
				if (!f->train)
					continue;
				d->scratch_byte[k] = at;
				at += ((size_t)f->shard *
					       mg_dtype_size(f->grad) +
				       255) &
				      ~(size_t)255;
			}
			if (at > most)
				most = at;
		}
		d->gslot_bytes = d->scratch_base + most;
	}
	/* Pooled gradient shards: per unit, its trained flats' shards one
	 * after another (256-byte aligned), as large as the largest. */
	d->ushard_byte = calloc((size_t)L->nflats + 1, sizeof(size_t));
	if (!d->ushard_byte)
		return mg_error("out of memory");
	for (int u = 0; d->pooled && u < s->nunits; u++) {
		size_t at = 0;
		for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
			const struct mg_flat *f = &L->flats[k];
			if (!f->train)
				continue;
			d->ushard_byte[k] = at;
			at += ((size_t)f->shard * mg_dtype_size(f->grad) +
			       255) &
			      ~(size_t)255;
		}
		if (at > d->uslot_bytes)
			d->uslot_bytes = at;
	}
	d->micro = 0;
	d->final = d->accum <= 1;
	if (d->dedicated) {
		d->pslots = calloc(nu, sizeof *d->pslots);
		if (!d->pslots)
			return mg_error("out of memory");
		d->npslots = s->nunits;
		for (int u = 0; u < s->nunits; u++)
			d->pslots[u].owner = -1;
		/* lp_inplace: the slots hold the lp shards from the start. */
		for (int u = 0; d->lp_inplace && u < s->nunits; u++)
			if (fsdp_alloc_gathered(d, &d->pslots[u].buf,
						L->unit_full_bytes[u]
							? L->unit_full_bytes[u]
							: 1,
						MG_MEM_GATHER))
				return mg_error_prefix("fsdp: gather buffer");
	}
	for (int u = 0; u < s->nunits; u++) {
		d->units[u].slot = d->units[u].gslot = d->units[u].uslot = -1;
		d->units[u].gepoch = -1;
	}
	return 0;
}

void fsdp_exec_free(struct fsdp *d)
{
	for (int i = 0; i < d->npslots; i++)
		mg_buf_free(d->ctx, &d->pslots[i].buf);
	for (int i = 0; i < d->ngslots; i++)
		mg_buf_free(d->ctx, &d->gslots[i].buf);
	for (int i = 0; i < d->nuslots; i++)
		mg_buf_free(d->ctx, &d->uslots[i].buf);
	free(d->pslots);
	free(d->gslots);
	free(d->uslots);
	free(d->ushard_byte);
	free(d->units);
	free(d->scratch_byte);
	mg_flat_views_free(&d->V);
	free(d->order[0].seq);
	free(d->order[1].seq);
}
