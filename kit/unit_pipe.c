/*
 * unit_pipe.c - the unit gradient pipeline (unit_pipe.h): gather before
 * use, gradient slots, reductions issued as units become ready, micro-
 * batch accumulation, the flush and the final action. One state machine
 * for every sharded strategy (fsdp, offload, the ZeRO examples).
 *
 * Overlap comes from one rule: every collective is issued right after a
 * wait on the communicators, at an acquire, so it runs while the unit
 * being acquired computes, and the next acquire's wait is the first thing
 * that needs it. A reduction the model reports ready is therefore issued
 * at the following acquire, and its gradient slot is reused only after
 * the wait that completes it. On a GPU the collectives run on the
 * communicators' streams and the waits are stream waits; on CPU ranks the
 * waits complete MPI's non-blocking requests.
 */
#include <stdlib.h>
#include <string.h>

#include "mg/kit/unit_pipe.h"

#define ALIGN256(x) (((x) + 255) & ~(size_t)255)

static bool has(const struct mg_unit_pipe *P, unsigned f)
{
	return (P->cfg.flags & f) != 0;
}

/* Full gradients kept in their slot until the step's last micro-batch. */
static bool nosync(const struct mg_unit_pipe *P)
{
	return has(P, MG_UP_NO_SYNC) || has(P, MG_UP_WHOLE_GRADS);
}

static const char *uname(const struct mg_unit_pipe *P, int u)
{
	return P->spec->units[u].name;
}

int mg_unit_pipe_wait(struct mg_unit_pipe *P)
{
	struct mg_comm *sc = P->cfg.sc, *rc = P->cfg.rc;
	if (sc && sc->wait(sc))
		return mg_error_prefix("%s: shard group", P->cfg.who);
	if (rc && rc != sc && rc->wait(rc))
		return mg_error_prefix("%s: replica group", P->cfg.who);
	if (P->cfg.hooks->wait && P->cfg.hooks->wait(P->cfg.self))
		return mg_error_prefix("%s", P->cfg.who);
	P->epoch++;
	return 0;
}

/* A free slot of at least `bytes` from pool (grown when none is, as
 * memory category cat); its index or -1. A zero-byte request still gets
 * a real (1-byte) buffer, so every slot has an address. */
static int take_slot(struct mg_unit_pipe *P, struct mg_up_slot **pool, int *n,
		     size_t bytes, int owner, enum mg_mem_cat cat)
{
	for (int i = 0; i < *n; i++)
		if ((*pool)[i].owner < 0 && (*pool)[i].buf.bytes >= bytes) {
			(*pool)[i].owner = owner;
			return i;
		}
	struct mg_up_slot *p = realloc(*pool, (size_t)(*n + 1) * sizeof *p);
	if (!p) {
		mg_error("%s: out of memory for slots", P->cfg.who);
		return -1;
	}
	*pool = p;
	memset(&p[*n], 0, sizeof p[*n]);
	size_t b = bytes ? bytes : 1;
	int rc = cat == MG_MEM_GATHER && P->cfg.alloc_slot
			 ? P->cfg.alloc_slot(P->cfg.self, &p[*n].buf, b, cat)
			 : mg_buf_alloc(P->cfg.ctx, &p[*n].buf, b, cat);
	if (rc) {
		mg_error_prefix("%s: %s buffer of %zu bytes", P->cfg.who,
				cat == MG_MEM_GRADS ? "gradient shard"
						    : "gather",
				bytes);
		return -1;
	}
	p[*n].owner = owner;
	return (*n)++;
}

static void free_slot(struct mg_up_slot *pool, int *idx)
{
	if (*idx >= 0)
		pool[*idx].owner = -1;
	*idx = -1;
}

/* Unit u's gather slot: its own (KEEP_GATHERED) or a pooled one, each as
 * large as the largest unit. */
static int take_pslot(struct mg_unit_pipe *P, int u)
{
	struct mg_up_unit *un = &P->units[u];
	const struct mg_flat_layout *L = P->cfg.L;
	if (has(P, MG_UP_KEEP_GATHERED)) {
		struct mg_up_slot *s = &P->pslots[u];
		size_t b = L->unit_full_bytes[u] ? L->unit_full_bytes[u] : 1;
		if (!s->buf.ptr &&
		    (P->cfg.alloc_slot ? P->cfg.alloc_slot(P->cfg.self, &s->buf,
							   b, MG_MEM_GATHER)
				       : mg_buf_alloc(P->cfg.ctx, &s->buf, b,
						      MG_MEM_GATHER)))
			return mg_error_prefix("%s: gather buffer", P->cfg.who);
		s->owner = u;
		un->pslot = u;
		return 0;
	}
	un->pslot = take_slot(P, &P->pslots, &P->npslots, L->max_full_bytes, u,
			      MG_MEM_GATHER);
	return un->pslot < 0 ? -1 : 0;
}

/* Gradient slots: transient buffers, or the gradients themselves when
 * kept whole all step. */
static enum mg_mem_cat slot_cat(const struct mg_unit_pipe *P)
{
	return has(P, MG_UP_WHOLE_GRADS) ? MG_MEM_GRADS : MG_MEM_GATHER;
}

static void drop_pslot(struct mg_unit_pipe *P, int u)
{
	struct mg_up_unit *un = &P->units[u];
	un->gathered = false;
	if (un->pslot < 0)
		return;
	P->pslots[un->pslot].owner = -1;
	if (!has(P, MG_UP_KEEP_GATHERED))
		un->pslot = -1;
}

int mg_unit_pipe_gather_flat(void *self, struct mg_unit_pipe *P, int u, int k,
			     void *dst)
{
	const struct mg_flat *f = &P->cfg.L->flats[k];
	struct mg_comm *sc = P->cfg.sc;
	(void)u;
	return sc->all_gather(sc, P->cfg.hooks->params(self, k), dst, f->shard,
			      f->lent);
}

int mg_unit_pipe_reduce_flat(void *self, struct mg_unit_pipe *P, int u, int k,
			     enum mg_up_reduce op, const void *src, void *dst,
			     int64_t n)
{
	const struct mg_flat *f = &P->cfg.L->flats[k];
	(void)self, (void)u;
	if (op == MG_UP_REDUCE_SCATTER)
		return P->cfg.sc->reduce_scatter(P->cfg.sc, src, dst, n,
						 f->grad, MG_REDUCE_SUM);
	if (op == MG_UP_ALL_REDUCE_WHOLE)
		return P->cfg.sc->all_reduce(P->cfg.sc, dst, n * P->group,
					     f->grad, MG_REDUCE_SUM);
	return P->cfg.rc->all_reduce(P->cfg.rc, dst, n, f->grad, MG_REDUCE_SUM);
}

/* Issue the all-gathers of unit u's flats into its slot. A kept slot is
 * the unit's alone for the whole run, so a frozen flat gathered there
 * once (a LoRA or QLoRA base, DPO's reference) stays whole: only the
 * trained flats are gathered again each step. */
static int gather(struct mg_unit_pipe *P, int u)
{
	struct mg_up_unit *un = &P->units[u];
	const struct mg_flat_layout *L = P->cfg.L;
	const struct mg_unit_hooks *h = P->cfg.hooks;
	if (!has(P, MG_UP_SHARD_PARAMS) || un->gathered)
		return 0;
	if (un->pslot < 0 && take_pslot(P, u))
		return -1;
	char *base = P->pslots[un->pslot].buf.ptr;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train && un->frozen_held)
			continue;
		if ((h->gather ? h->gather : mg_unit_pipe_gather_flat)(
			    P->cfg.self, P, u, k, base + f->full_byte))
			return mg_error_prefix("%s: all-gather of %s",
					       P->cfg.who, uname(P, u));
	}
	un->gathered = true;
	un->frozen_held = has(P, MG_UP_KEEP_GATHERED);
	return 0;
}

/* Flat f's full gradient in the reduce dtype inside unit u's slot. */
static char *slot_grad(const struct mg_unit_pipe *P, int u,
		       const struct mg_flat *f)
{
	const int g = has(P, MG_UP_WHOLE_GRADS) ? u : P->units[u].gslot;
	char *p = (char *)P->gslots[g].buf.ptr + f->gfull_byte;
	if (f->grad != f->lent) /* the converted copy follows */
		p += ALIGN256((size_t)(f->shard * P->group) *
			      mg_dtype_size(f->lent));
	return p;
}

void *mg_unit_pipe_gshard(const struct mg_unit_pipe *P, int u, int k)
{
	const struct mg_flat *f = &P->cfg.L->flats[k];
	if (has(P, MG_UP_TRANSIENT_GRADS)) {
		if (P->group == 1)
			return slot_grad(P, u, f);
		return (char *)P->uslots[P->units[u].uslot].buf.ptr +
		       P->ushard_byte[k];
	}
	if (has(P, MG_UP_WHOLE_GRADS))
		return slot_grad(P, u, f) + (size_t)(P->cfg.srank * f->shard) *
						    mg_dtype_size(f->grad);
	return (char *)P->gshard.ptr + f->gshard_byte;
}

void *mg_unit_pipe_slot(const struct mg_unit_pipe *P, int u)
{
	if (has(P, MG_UP_KEEP_GATHERED))
		return P->pslots[u].buf.ptr;
	int s = P->units[u].pslot;
	return s >= 0 ? P->pslots[s].buf.ptr : NULL;
}

static int reduce(struct mg_unit_pipe *P, int u, int k, enum mg_up_reduce op,
		  const void *src, void *dst)
{
	const struct mg_unit_hooks *h = P->cfg.hooks;
	const struct mg_flat *f = &P->cfg.L->flats[k];
	if ((h->reduce ? h->reduce : mg_unit_pipe_reduce_flat)(
		    P->cfg.self, P, u, k, op, src, dst, f->shard))
		return mg_error_prefix("%s: %s of %s", P->cfg.who,
				       op == MG_UP_REDUCE_SCATTER
					       ? "reduce-scatter"
					       : "all-reduce",
				       uname(P, u));
	return 0;
}

/* Reduce-scatter unit u's full gradients into this rank's shards: the
 * step's first contribution straight into the gradient shard, a later
 * micro-batch's into the slot's scratch (added when it completes). */
static int scatter(struct mg_unit_pipe *P, int u)
{
	const struct mg_flat_layout *L = P->cfg.L;
	struct mg_up_unit *un = &P->units[u];
	char *scr = (char *)P->gslots[un->gslot].buf.ptr + P->scratch_base;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		if (has(P, MG_UP_WHOLE_GRADS)) {
			char *g = slot_grad(P, u, f);
			if (reduce(P, u, k, MG_UP_ALL_REDUCE_WHOLE, g, g))
				return -1;
			continue;
		}
		char *dst = un->acc ? scr + P->scratch_byte[k]
				    : mg_unit_pipe_gshard(P, u, k);
		if (reduce(P, u, k, MG_UP_REDUCE_SCATTER, slot_grad(P, u, f),
			   dst))
			return -1;
	}
	un->scratch = un->acc;
	un->acc = true;
	return 0;
}

/* Sum unit u's gradient shards over the replica groups. */
static int replicate(struct mg_unit_pipe *P, int u)
{
	const struct mg_flat_layout *L = P->cfg.L;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		void *g = mg_unit_pipe_gshard(P, u, k);
		if (L->flats[k].train &&
		    reduce(P, u, k, MG_UP_ALL_REDUCE, g, g))
			return -1;
	}
	return 0;
}

/* shard (+)= src for each trained flat of unit u, on the compute stream:
 * `add` false copies (the step's first contribution). */
static int sum_into_shard(struct mg_unit_pipe *P, int u, bool from_scratch,
			  bool add)
{
	const struct mg_flat_layout *L = P->cfg.L;
	struct mg_up_unit *un = &P->units[u];
	struct mg_ctx *ctx = P->cfg.ctx;
	enum mg_device_kind dev = ctx->dev->kind;
	char *scr = (char *)P->gslots[un->gslot].buf.ptr + P->scratch_base;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		const int64_t n = f->shard;
		char *dst = mg_unit_pipe_gshard(P, u, k);
		char *src = from_scratch ? scr + P->scratch_byte[k]
					 : slot_grad(P, u, f);
		struct mg_tensor td = mg_tensor_make(dst, f->grad, dev, 1, &n);
		struct mg_tensor ts = mg_tensor_make(src, f->grad, dev, 1, &n);
		if (add ? mg_op_add(ctx, &td, &ts, &td)
			: mg_copy_d2d(ctx, dst, src,
				      (size_t)n * mg_dtype_size(f->grad)))
			return mg_error_prefix("%s: accumulating %s",
					       P->cfg.who, uname(P, u));
	}
	un->scratch = false;
	un->acc = true;
	return 0;
}

/* Unit u's transient gradient shard slot (group > 1). */
static int take_uslot(struct mg_unit_pipe *P, int u)
{
	struct mg_up_unit *un = &P->units[u];
	if (!has(P, MG_UP_TRANSIENT_GRADS) || P->group == 1 || un->uslot >= 0)
		return 0;
	un->uslot = take_slot(P, &P->uslots, &P->nuslots, P->uslot_bytes, u,
			      MG_MEM_GRADS);
	return un->uslot < 0 ? -1 : 0;
}

/* A transient shard is gone after its final action. */
static void drop_transient(struct mg_unit_pipe *P, int u)
{
	if (!has(P, MG_UP_TRANSIENT_GRADS))
		return;
	struct mg_up_unit *un = &P->units[u];
	if (P->group == 1)
		free_slot(P->gslots, &un->gslot);
	else
		free_slot(P->uslots, &un->uslot);
}

/* Unit u's gradient shard is final for this micro-batch; the step's last
 * runs the final hook. */
static int done(struct mg_unit_pipe *P, int u)
{
	struct mg_up_unit *un = &P->units[u];
	un->gs = MG_UP_DONE;
	if (!P->final)
		return 0;
	int rc = P->cfg.hooks->final ? P->cfg.hooks->final(P->cfg.self, u) : 0;
	if (rc < 0)
		return -1;
	if (rc == MG_UP_ASYNC) {
		un->gs = MG_UP_FINAL;
		un->gepoch = P->epoch;
	} else {
		drop_transient(P, u);
	}
	return 0;
}

/* Move every unit's reduction one stage on. A collective issued in an
 * earlier wait epoch has completed (a wait came since). Units go in index
 * order, so every rank issues the same collectives in the same order. */
static int progress(struct mg_unit_pipe *P)
{
	for (int u = 0; u < P->spec->nunits; u++) {
		struct mg_up_unit *un = &P->units[u];
		if (un->gepoch == P->epoch && un->gs != MG_UP_READY)
			continue; /* issued since the last wait */
		switch (un->gs) {
		case MG_UP_READY:
			un->gepoch = P->epoch;
			if (P->group > 1) {
				if (take_uslot(P, u) || scatter(P, u))
					return -1;
				un->gs = MG_UP_SCATTER;
			} else {
				if (replicate(P, u))
					return -1;
				un->gs = MG_UP_REPLICA;
			}
			break;
		case MG_UP_SCATTER:
			if (un->scratch && sum_into_shard(P, u, true, true))
				return -1;
			if (!has(P, MG_UP_WHOLE_GRADS)) /* kept all step */
				free_slot(P->gslots, &un->gslot);
			un->gepoch = P->epoch;
			/* Replica groups sum the step's shard once. */
			if (P->cfg.replicas > 1 && P->final) {
				if (replicate(P, u))
					return -1;
				un->gs = MG_UP_REPLICA;
			} else if (done(P, u)) {
				return -1;
			}
			break;
		case MG_UP_REPLICA:
			if (done(P, u))
				return -1;
			break;
		case MG_UP_FINAL:
			drop_transient(P, u);
			un->gs = MG_UP_DONE;
			break;
		default:
			break;
		}
	}
	return 0;
}

static int next_in_order(struct mg_unit_pipe *P, int oi, int u)
{
	struct mg_up_order *o = &P->order[oi];
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

static void record(struct mg_unit_pipe *P, int oi, int u)
{
	struct mg_up_order *o = &P->order[oi];
	if (o->final || o->n == o->cap)
		return;
	o->seq[o->n++] = u;
}

/* The orders learned so far are final; replay from their start. */
static void rewind_orders(struct mg_unit_pipe *P)
{
	for (int k = 0; k < 2; k++) {
		if (P->order[k].n > 0)
			P->order[k].final = true;
		P->order[k].cur = 0;
	}
}

/* Point the unit's lent tensors at where its data is now. */
static void point(struct mg_unit_pipe *P, int u, bool grads)
{
	const struct mg_flat_layout *L = P->cfg.L;
	const struct mg_unit_decl *ud = &P->spec->units[u];
	struct mg_up_unit *un = &P->units[u];
	const bool direct = has(P, MG_UP_DIRECT_GRADS);
	for (int j = 0; j < ud->nparams; j++) {
		int i = ud->first_param + j, fi = L->param_flat[i];
		struct mg_tensor *pt = &P->V.ptensor[i], *gt = &P->V.gtensor[i];
		gt->data = NULL;
		if (fi < 0) {
			pt->data = (char *)P->cfg.buffers +
				   (size_t)L->param_off[i] *
					   mg_dtype_size(L->master);
			continue;
		}
		const struct mg_flat *f = &L->flats[fi];
		size_t off = (size_t)L->param_off[i] * mg_dtype_size(f->lent);
		char *pb = has(P, MG_UP_SHARD_PARAMS)
				   ? (char *)P->pslots[un->pslot].buf.ptr +
					     f->full_byte
				   : P->cfg.hooks->params(P->cfg.self, fi);
		pt->data = pb + off;
		if (!grads || !f->train)
			continue;
		char *gb = direct ? (char *)P->gshard.ptr + f->gshard_byte
				  : (char *)P->gslots[un->gslot].buf.ptr +
					    f->gfull_byte;
		gt->data = gb + off;
	}
}

static int flush(struct mg_unit_pipe *P, bool final);

/* At a training acquire: a new micro-batch finishes the last one's
 * reductions first (the order learned in the first micro-batch is the
 * next one's too). */
static int enter_micro(struct mg_unit_pipe *P)
{
	const int m = P->cfg.ctx->micro;
	if (P->accum > 1 && m != P->micro) {
		if (flush(P, false))
			return -1;
		rewind_orders(P);
		P->micro = m;
	}
	P->final = m + 1 >= P->accum;
	return 0;
}

/* Prefetch: the next `prefetch` units of the recorded order (the same on
 * every rank, so the all-gathers still match). */
static int prefetch(struct mg_unit_pipe *P, int oi, int u)
{
	const struct mg_up_order *o = &P->order[oi];
	int nx = next_in_order(P, oi, u);
	for (int k = 0; nx >= 0 && k < P->cfg.prefetch; k++) {
		if (nx != u && gather(P, nx))
			return -1;
		const int pos = o->cur + k + 1;
		nx = pos < o->n ? o->seq[pos] : -1;
	}
	return 0;
}

struct mg_unit_view *mg_unit_pipe_acquire(struct mg_unit_pipe *P, int u,
					  enum mg_phase ph)
{
	if (u < 0 || u >= P->spec->nunits) {
		mg_error("acquire: unit %d out of range (model has %d)", u,
			 P->spec->nunits);
		return NULL;
	}
	struct mg_up_unit *un = &P->units[u];
	const int oi = ph == MG_PHASE_BACKWARD;
	if (ph != MG_PHASE_EVAL) {
		if (enter_micro(P))
			return NULL;
		record(P, oi, u);
	}
	const bool grads = ph == MG_PHASE_BACKWARD && P->V.trains[u];
	/* Gathering: this unit's gather (normally prefetched, so issued
	 * already), then one wait for everything issued so far. Resident
	 * parameters: only backward has anything to wait for. */
	if (has(P, MG_UP_SHARD_PARAMS)) {
		if (gather(P, u) || mg_unit_pipe_wait(P) || progress(P))
			return NULL;
		if (P->cfg.prefetch > 0 && prefetch(P, oi, u))
			return NULL;
	} else if (grads && (mg_unit_pipe_wait(P) || progress(P))) {
		return NULL;
	}
	if (grads && !has(P, MG_UP_DIRECT_GRADS) && un->gslot < 0) {
		if (un->gs != MG_UP_IDLE) {
			mg_error("%s: unit '%s' acquired for backward after "
				 "it reported its gradients ready",
				 P->cfg.who, uname(P, u));
			return NULL;
		}
		/* no_sync keeps a slot per unit all step: its own size;
		 * whole gradients have theirs for the run. */
		un->gslot =
			has(P, MG_UP_WHOLE_GRADS)
				? u
				: take_slot(
					  P, &P->gslots, &P->ngslots,
					  nosync(P)
						  ? P->cfg.L->unit_grad_bytes[u]
						  : P->gslot_bytes,
					  u, slot_cat(P));
		if (un->gslot < 0 ||
		    mg_memset_dev(P->cfg.ctx, P->gslots[un->gslot].buf.ptr, 0,
				  P->cfg.L->unit_grad_bytes[u]))
			return NULL;
	}
	point(P, u, grads);
	return &P->V.views[u];
}

void mg_unit_pipe_release(struct mg_unit_pipe *P, int u, enum mg_phase ph)
{
	if (u < 0 || u >= P->spec->nunits || !has(P, MG_UP_SHARD_PARAMS))
		return;
	/* KEEP_GATHERED keeps the gathered parameters for backward. */
	if (ph == MG_PHASE_FORWARD && has(P, MG_UP_KEEP_GATHERED))
		return;
	/* Nor is the unit backward starts with freed (the output head,
	 * once the order is known): it would be gathered again at once,
	 * with nothing to overlap (FSDP2 keeps its root so). */
	const struct mg_up_order *bo = &P->order[1];
	if (ph == MG_PHASE_FORWARD && bo->final && bo->n > 0 && bo->seq[0] == u)
		return;
	drop_pslot(P, u);
}

/* Unit u's gradients are complete for this micro-batch, converted to the
 * reduce dtype; with one rank a shard, summed into the kept shard now. */
static int convert(struct mg_unit_pipe *P, int u)
{
	const struct mg_flat_layout *L = P->cfg.L;
	struct mg_up_unit *un = &P->units[u];
	/* Group 1 with a kept shard: the first contribution converted (or
	 * copied) straight into it, later ones converted in the slot and
	 * added; the slot is then free at once. */
	const bool local = P->group == 1 && !has(P, MG_UP_TRANSIENT_GRADS) &&
			   !has(P, MG_UP_DIRECT_GRADS);
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train || (!local && f->grad == f->lent))
			continue; /* reduced where the model left it */
		char *src =
			(char *)P->gslots[un->gslot].buf.ptr + f->gfull_byte;
		const int64_t n = f->shard * L->group;
		if (local && !un->acc) {
			void *dst = mg_unit_pipe_gshard(P, u, k);
			int rc =
				f->grad != f->lent
					? mg_op_convert(P->cfg.ctx, dst,
							f->grad, src, f->lent,
							n)
					: mg_copy_d2d(P->cfg.ctx, dst, src,
						      (size_t)n *
							      mg_dtype_size(
								      f->grad));
			if (rc)
				return mg_error_prefix("%s: gradient of %s",
						       P->cfg.who, uname(P, u));
			continue;
		}
		if (f->grad != f->lent &&
		    mg_op_convert(P->cfg.ctx, slot_grad(P, u, f), f->grad, src,
				  f->lent, n))
			return mg_error_prefix("%s: gradient of %s", P->cfg.who,
					       uname(P, u));
	}
	if (local) {
		if (un->acc && sum_into_shard(P, u, false, true))
			return -1;
		un->acc = true;
		free_slot(P->gslots, &un->gslot);
	}
	return 0;
}

/* Unit u's gradients are complete for this micro-batch; `final`: for the
 * step (the last micro-batch, or the step's flush). */
static int ready(struct mg_unit_pipe *P, int u, bool final)
{
	struct mg_up_unit *un = &P->units[u];
	if (!P->V.trains[u])
		return 0;
	if (un->gs != MG_UP_IDLE)
		return mg_error("unit '%s' reported its gradients ready twice "
				"in one %s",
				uname(P, u),
				P->accum > 1 ? "micro-batch" : "step");
	if (!has(P, MG_UP_DIRECT_GRADS) && un->gslot < 0)
		return mg_error("unit '%s' reported its gradients ready "
				"without being acquired for backward",
				uname(P, u));
	/* no_sync: the gradients stay where the model summed them. */
	if (nosync(P) && !final) {
		un->gs = MG_UP_HELD;
		return 0;
	}
	if (convert(P, u))
		return -1;
	if (P->group > 1 || (P->cfg.replicas > 1 && final)) {
		un->gs = MG_UP_READY;
		return 0;
	}
	return done(P, u);
}

int mg_unit_pipe_grads_ready(struct mg_unit_pipe *P, int u)
{
	if (u < 0 || u >= P->spec->nunits)
		return mg_error("grads_ready: unit %d out of range", u);
	return ready(P, u, P->cfg.ctx->micro + 1 >= P->accum);
}

struct mg_unit_view *mg_unit_pipe_acquire_op(void *self, int unit,
					     enum mg_phase ph)
{
	return mg_unit_pipe_acquire(self, unit, ph);
}

void mg_unit_pipe_release_op(void *self, int unit, enum mg_phase ph)
{
	mg_unit_pipe_release(self, unit, ph);
}

int mg_unit_pipe_grads_ready_op(void *self, int unit)
{
	return mg_unit_pipe_grads_ready(self, unit);
}

void mg_unit_strategy_init(struct mg_unit_strategy *s, const struct mg_opts *o,
			   struct mg_ctx *ctx)
{
	s->ctx = ctx;
	s->drop_last = mg_opt_bool(o, "drop_last");
	mg_sampler_init(&s->sampler, ctx->seed, mg_opt_bool(o, "shuffle"));
}

void mg_unit_strategy_free(struct mg_unit_strategy *s)
{
	mg_unit_pipe_free(&s->pipe);
	mg_sampler_free(&s->sampler);
}

int mg_unit_strategy_begin_step(void *self)
{
	return mg_unit_pipe_begin_step(self);
}

int64_t mg_unit_strategy_steps(void *self, int64_t n, int64_t batch)
{
	struct mg_unit_strategy *s = self;
	return mg_sampler_steps(n, batch * s->ctx->world, s->drop_last);
}

/* Each rank reads and computes its block of the global batch. */
int mg_unit_strategy_plan(void *self, int64_t n, int64_t batch, int64_t epoch,
			  int64_t step, struct mg_plan *p)
{
	struct mg_unit_strategy *s = self;
	return mg_sampler_plan_own(&s->sampler, s->ctx->world, s->ctx->rank, n,
				   batch, epoch, step, p);
}

/* Units the model never reported this micro-batch, at the step's end:
 * zero gradient shards (backward never reached them), the same on every
 * rank, so the collectives still match; or what earlier micro-batches
 * summed, all-reduced over the replicas. */
static int unreported(struct mg_unit_pipe *P, int u)
{
	const struct mg_flat_layout *L = P->cfg.L;
	struct mg_up_unit *un = &P->units[u];
	un->gepoch = P->epoch;
	if (un->acc) {
		if (P->cfg.replicas > 1) {
			un->gs = MG_UP_REPLICA;
			return replicate(P, u);
		}
		return done(P, u);
	}
	if (has(P, MG_UP_WHOLE_GRADS)) {
		un->gslot = u;
		if (mg_memset_dev(P->cfg.ctx, P->gslots[u].buf.ptr, 0,
				  L->unit_grad_bytes[u]))
			return -1;
	} else if (has(P, MG_UP_TRANSIENT_GRADS) && P->group == 1) {
		un->gslot = take_slot(P, &P->gslots, &P->ngslots,
				      L->unit_grad_bytes[u], u, slot_cat(P));
		if (un->gslot < 0)
			return -1;
	} else if (take_uslot(P, u)) {
		return -1;
	}
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (f->train &&
		    mg_memset_dev(P->cfg.ctx, mg_unit_pipe_gshard(P, u, k), 0,
				  (size_t)f->shard * mg_dtype_size(f->grad)))
			return -1;
	}
	return done(P, u);
}

/* Finish this micro-batch's reductions; `final`: the step's, so every
 * trained unit's shard is complete (else no_sync units stay held and the
 * pipeline is made ready for the next micro-batch). */
static int flush(struct mg_unit_pipe *P, bool final)
{
	for (int u = 0; u < P->spec->nunits; u++) {
		struct mg_up_unit *un = &P->units[u];
		if (!P->V.trains[u] || un->gs != MG_UP_IDLE)
			continue;
		if (has(P, MG_UP_DIRECT_GRADS) || un->gslot >= 0) {
			if (ready(P, u, final))
				return -1;
		} else if (final && unreported(P, u)) {
			return -1;
		}
	}
	/* At most four stages (scatter, replica all-reduce, final action,
	 * done). */
	for (int round = 0; round < 4; round++)
		if (mg_unit_pipe_wait(P) || progress(P))
			return -1;
	for (int u = 0; u < P->spec->nunits; u++) {
		struct mg_up_unit *un = &P->units[u];
		if (!P->V.trains[u])
			continue;
		bool ok = un->gs == MG_UP_DONE ||
			  (!final &&
			   (un->gs == MG_UP_HELD || un->gs == MG_UP_IDLE));
		if (!ok)
			return mg_error("%s: internal: gradients of unit %d "
					"not reduced",
					P->cfg.who, u);
		if (!final) {
			un->gs = MG_UP_IDLE;
			un->gepoch = -1;
		}
	}
	return 0;
}

int mg_unit_pipe_finish(struct mg_unit_pipe *P)
{
	P->final = true;
	return flush(P, true);
}

int mg_unit_pipe_begin_step(struct mg_unit_pipe *P)
{
	if (has(P, MG_UP_DIRECT_GRADS))
		return mg_memset_dev(P->cfg.ctx, P->gshard.ptr, 0,
				     P->gshard.bytes);
	return 0;
}

void mg_unit_pipe_reset(struct mg_unit_pipe *P)
{
	rewind_orders(P);
	for (int u = 0; u < P->spec->nunits; u++) {
		struct mg_up_unit *un = &P->units[u];
		if (has(P, MG_UP_SHARD_PARAMS))
			drop_pslot(P, u);
		if (has(P, MG_UP_WHOLE_GRADS))
			free_slot(P->gslots, &un->gslot);
		un->gs = MG_UP_IDLE;
		un->gepoch = -1;
		un->acc = un->scratch = false;
	}
	P->epoch = 0;
	P->micro = 0;
	P->final = P->accum <= 1;
}

void mg_unit_pipe_invalidate(struct mg_unit_pipe *P)
{
	for (int u = 0; u < P->spec->nunits; u++)
		P->units[u].frozen_held = false;
}

int mg_unit_pipe_sumsq(const struct mg_unit_pipe *P)
{
	const struct mg_flat_layout *L = P->cfg.L;
	struct mg_ctx *ctx = P->cfg.ctx;
	struct mg_optim_vals *v = ctx->optim_vals;
	if (has(P, MG_UP_TRANSIENT_GRADS))
		return mg_error("%s: no kept gradient shards to take the "
				"norm of",
				P->cfg.who);
	if (has(P, MG_UP_WHOLE_GRADS)) { /* this rank's blocks, by flat */
		for (int k = 0; k < L->nflats; k++) {
			const struct mg_flat *f = &L->flats[k];
			if (f->train &&
			    mg_optim_sumsq(ctx, v, f->grad,
					   mg_unit_pipe_gshard(P, f->unit, k),
					   f->shard))
				return -1;
		}
		return 0;
	}
	const size_t lpb = L->gshard_lent_bytes, mb = L->gshard_bytes - lpb;
	const enum mg_dtype lent = ctx->compute_dtype;
	if (lpb && mg_optim_sumsq(ctx, v, lent, P->gshard.ptr,
				  (int64_t)(lpb / mg_dtype_size(lent))))
		return -1;
	if (mb && mg_optim_sumsq(ctx, v, L->master, (char *)P->gshard.ptr + lpb,
				 (int64_t)(mb / mg_dtype_size(L->master))))
		return -1;
	return 0;
}

/* Per flat, its shard's place in a per-unit run of shards (256-byte
 * aligned, trained flats only): the scratch of the reduce-scatter path,
 * the transient shard slot. Returns the largest unit's run. */
static size_t shard_runs(const struct mg_flat_layout *L, int nunits,
			 size_t *byte)
{
	size_t most = 0;
	for (int u = 0; u < nunits; u++) {
		size_t at = 0;
		for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
			const struct mg_flat *f = &L->flats[k];
			if (!f->train)
				continue;
			byte[k] = at;
			at += ALIGN256((size_t)f->shard *
				       mg_dtype_size(f->grad));
		}
		if (at > most)
			most = at;
	}
	return most;
}

/* The refusals: policies that contradict each other or the layout. */
static int check_cfg(const struct mg_unit_pipe *P)
{
	const struct mg_unit_pipe_cfg *c = &P->cfg;
	const struct mg_flat_layout *L = c->L;
	if (!c->hooks || !c->hooks->params)
		return mg_error("%s: unit pipeline without a params hook",
				c->who);
	if ((P->group > 1) != (c->sc != NULL) ||
	    (c->replicas > 1) != (c->rc != NULL))
		return mg_error("%s: unit pipeline: communicators do not match "
				"group %d, replicas %d",
				c->who, P->group, c->replicas);
	if (has(P, MG_UP_SHARD_PARAMS) && P->group == 1)
		return mg_error("%s: sharded parameters over one rank", c->who);
	if ((has(P, MG_UP_KEEP_GATHERED) && !has(P, MG_UP_SHARD_PARAMS)) ||
	    (has(P, MG_UP_SLOTS_AT_INIT) && !has(P, MG_UP_KEEP_GATHERED)))
		return mg_error("%s: unit pipeline: kept gather slots need "
				"sharded parameters",
				c->who);
	if (has(P, MG_UP_WHOLE_GRADS) &&
	    (P->group == 1 || has(P, MG_UP_TRANSIENT_GRADS) ||
	     has(P, MG_UP_DIRECT_GRADS)))
		return mg_error("%s: whole gradients need a shard group and a "
				"slot per unit",
				c->who);
	if (has(P, MG_UP_TRANSIENT_GRADS) &&
	    (P->accum > 1 || has(P, MG_UP_DIRECT_GRADS)))
		return mg_error("%s: transient gradient shards with gradient "
				"accumulation or direct gradients",
				c->who);
	if (has(P, MG_UP_DIRECT_GRADS)) {
		bool same = P->group == 1;
		for (int k = 0; k < L->nflats; k++)
			same &= !L->flats[k].train ||
				L->flats[k].grad == L->flats[k].lent;
		if (!same)
			return mg_error("%s: direct gradients need one rank a "
					"shard and no dtype change",
					c->who);
	}
	return 0;
}

int mg_unit_pipe_init(struct mg_unit_pipe *P,
		      const struct mg_unit_pipe_cfg *cfg)
{
	memset(P, 0, sizeof *P);
	P->cfg = *cfg;
	const struct mg_flat_layout *L = cfg->L;
	const struct mg_model_spec *s = L->spec;
	struct mg_ctx *ctx = cfg->ctx;
	P->spec = s;
	P->group = L->group;
	P->accum = ctx->micro_count > 1 ? ctx->micro_count : 1;
	if (!P->cfg.who)
		P->cfg.who = "unit pipeline";
	if (check_cfg(P))
		return -1;
	const size_t nu = (size_t)s->nunits + 1;
	P->units = calloc(nu, sizeof *P->units);
	P->scratch_byte = calloc((size_t)L->nflats + 1, sizeof(size_t));
	P->ushard_byte = calloc((size_t)L->nflats + 1, sizeof(size_t));
	for (int k = 0; k < 2; k++) {
		P->order[k].cap = 4 * s->nunits + 4;
		P->order[k].seq = calloc((size_t)P->order[k].cap, sizeof(int));
	}
	if (!P->units || !P->scratch_byte || !P->ushard_byte ||
	    !P->order[0].seq || !P->order[1].seq)
		return mg_error("out of memory");
	for (int u = 0; u < s->nunits; u++) {
		struct mg_up_unit *un = &P->units[u];
		un->pslot = un->gslot = un->uslot = -1;
		un->gepoch = -1;
	}
	if (mg_flat_views_init(&P->V, L, ctx->dev->kind))
		return -1;
	/* Gradient slots: a unit's full gradients (and their converted
	 * copy); summing reduce-scatters over micro-batches adds a scratch
	 * for the unit's shards after them. */
	P->gslot_bytes = L->max_grad_bytes;
	P->scratch_base = ALIGN256(L->max_grad_bytes);
	if (P->accum > 1 && !nosync(P) && P->group > 1)
		P->gslot_bytes = P->scratch_base +
				 shard_runs(L, s->nunits, P->scratch_byte);
	if (has(P, MG_UP_TRANSIENT_GRADS) && P->group > 1)
		P->uslot_bytes = shard_runs(L, s->nunits, P->ushard_byte);
	if (!has(P, MG_UP_TRANSIENT_GRADS) && !has(P, MG_UP_WHOLE_GRADS) &&
	    (mg_buf_alloc(ctx, &P->gshard, L->gshard_bytes + 1, MG_MEM_GRADS) ||
	     mg_memset_dev(ctx, P->gshard.ptr, 0, P->gshard.bytes)))
		return mg_error_prefix("%s: gradient shards", P->cfg.who);
	P->final = P->accum <= 1;
	/* Whole gradients: a slot of its own per unit, for the run, so a
	 * unit's gradient shard has one address (mg_shard_store_bind). */
	if (has(P, MG_UP_WHOLE_GRADS)) {
		P->gslots = calloc(nu, sizeof *P->gslots);
		if (!P->gslots)
			return mg_error("out of memory");
		P->ngslots = s->nunits;
		for (int u = 0; u < s->nunits; u++) {
			P->gslots[u].owner = -1;
			if (mg_buf_alloc(ctx, &P->gslots[u].buf,
					 L->unit_grad_bytes[u] + 1,
					 MG_MEM_GRADS) ||
			    mg_memset_dev(ctx, P->gslots[u].buf.ptr, 0,
					  L->unit_grad_bytes[u] + 1))
				return mg_error_prefix("%s: gradients",
						       P->cfg.who);
		}
	}
	if (has(P, MG_UP_KEEP_GATHERED)) {
		P->pslots = calloc(nu, sizeof *P->pslots);
		if (!P->pslots)
			return mg_error("out of memory");
		P->npslots = s->nunits;
		for (int u = 0; u < s->nunits; u++) {
			P->pslots[u].owner = -1;
			if (has(P, MG_UP_SLOTS_AT_INIT) && take_pslot(P, u))
				return -1;
			P->pslots[u].owner = -1;
			P->units[u].pslot = -1;
		}
	}
	return 0;
}

void mg_unit_pipe_free(struct mg_unit_pipe *P)
{
	struct mg_ctx *ctx = P->cfg.ctx;
	if (!ctx) /* never initialised */
		return;
	for (int i = 0; i < P->npslots; i++)
		mg_buf_free(ctx, &P->pslots[i].buf);
	for (int i = 0; i < P->ngslots; i++)
		mg_buf_free(ctx, &P->gslots[i].buf);
	for (int i = 0; i < P->nuslots; i++)
		mg_buf_free(ctx, &P->uslots[i].buf);
	mg_buf_free(ctx, &P->gshard);
	free(P->pslots);
	free(P->gslots);
	free(P->uslots);
	free(P->scratch_byte);
	free(P->ushard_byte);
	free(P->units);
	free(P->order[0].seq);
	free(P->order[1].seq);
	mg_flat_views_free(&P->V);
	memset(P, 0, sizeof *P);
}
