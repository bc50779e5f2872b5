/*
 * offload_pipe.c - the gradient pipeline of the offload strategy: a unit's
 * full gradients made in a transient slot, reduce-scattered over the
 * ranks, and this rank's shard copied to pinned host memory, each stage
 * started at the acquire that follows the previous one (fsdp_exec.c has
 * the same rule: issue right after a wait, so it runs under the next
 * unit's compute). The copies run on the device's side stream.
 */
#include <stdlib.h>
#include <string.h>

#include "offload.h"

static int wait_all(struct offload *d)
{
	struct mg_comm *c = d->ctx->comm;
	if ((d->world > 1 && c->wait(c)) || mg_copy_join(d->ctx))
		return mg_error_prefix("offload");
	d->epoch++;
	return 0;
}

static int take_gslot(struct offload *d, int u)
{
	for (int i = 0; i < d->ngslots; i++)
		if (d->gslot_owner[i] < 0) {
			d->gslot_owner[i] = u;
			return i;
		}
	int n = d->ngslots;
	struct mg_buf *b = realloc(d->gslots, (size_t)(n + 1) * sizeof *b);
	if (!b)
		return mg_error("offload: out of memory");
	d->gslots = b;
	int *o = realloc(d->gslot_owner, (size_t)(n + 1) * sizeof *o);
	if (!o)
		return mg_error("offload: out of memory");
	d->gslot_owner = o;
	if (mg_buf_alloc(d->ctx, &d->gslots[n],
			 d->gslot_bytes ? d->gslot_bytes : 1, MG_MEM_GATHER))
		return mg_error_prefix("offload: gradient buffer");
	d->gslot_owner[n] = u;
	d->ngslots = n + 1;
	return n;
}

static void drop_gslot(struct offload *d, int u)
{
	struct off_unit *un = &d->units[u];
	if (un->gslot >= 0)
		d->gslot_owner[un->gslot] = -1;
	un->gslot = -1;
}

/* Flat f's reduced-dtype full gradient inside unit u's slot. */
static char *slot_grad(struct offload *d, int u, const struct mg_flat *f)
{
	char *p = (char *)d->gslots[d->units[u].gslot].ptr + f->gfull_byte;
	if (f->grad != f->lent) /* the converted copy follows */
		p += ((size_t)(f->shard * d->L.group) * mg_dtype_size(f->lent) +
		      255) &
		     ~(size_t)255;
	return p;
}

/* Flat k's shard in unit u's scratch. */
static char *slot_scratch(struct offload *d, int u, int k)
{
	return (char *)d->gslots[d->units[u].gslot].ptr + d->scratch_base +
	       d->scratch_byte[k];
}

/* Accumulating: add what unit u's last reduction left (the scratch, or
 * with one rank the slot's gradient) to its shard, on the compute stream
 * (which waited for the collective). `from_slot`: one rank's slot. */
static int accumulate(struct offload *d, int u, bool from_slot)
{
	const struct mg_flat_layout *L = &d->L;
	struct off_unit *un = &d->units[u];
	enum mg_device_kind dev = d->ctx->dev->kind;
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		const int64_t n = f->shard;
		char *dst = (char *)d->gshard.ptr + f->gshard_byte;
		char *src =
			from_slot ? slot_grad(d, u, f) : slot_scratch(d, u, k);
		struct mg_tensor ta = mg_tensor_make(dst, f->grad, dev, 1, &n);
		struct mg_tensor tb = mg_tensor_make(src, f->grad, dev, 1, &n);
		int rc = from_slot && !un->acc
				 ? mg_copy_d2d(d->ctx, dst, src,
					       (size_t)n *
						       mg_dtype_size(f->grad))
				 : mg_op_add(d->ctx, &ta, &tb, &ta);
		if (rc)
			return mg_error_prefix("offload: accumulating %s",
					       d->spec->units[u].name);
	}
	un->acc = true;
	un->scratch = false;
	return 0;
}

/* Issue stage `gs` for unit u's trained flats. */
static int issue(struct offload *d, int u, enum off_gstate gs)
{
	const struct mg_flat_layout *L = &d->L;
	struct mg_comm *c = d->ctx->comm;
	struct off_unit *un = &d->units[u];
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		size_t bytes = (size_t)f->shard * mg_dtype_size(f->grad);
		char *dev = (char *)d->gshard.ptr + f->gshard_byte;
		if (gs == O_SCATTER) {
			/* The step's first contribution into the shard,
			 * later ones into the scratch. */
			char *dst = un->acc ? slot_scratch(d, u, k) : dev;
			if (c->reduce_scatter(c, slot_grad(d, u, f), dst,
					      f->shard, f->grad, MG_REDUCE_SUM))
				return mg_error_prefix(
					"offload: reduce-scatter of %s",
					d->spec->units[u].name);
			continue;
		}
		const char *src = off_uses_gshard(d) ? dev : slot_grad(d, u, f);
		if (mg_copy_async(d->ctx,
				  (char *)d->h_grads.ptr + f->gshard_byte, src,
				  bytes))
			return mg_error_prefix("offload: gradient copy of %s",
					       d->spec->units[u].name);
		mg_count(d->ctx, MG_C_D2H_BYTES, (int64_t)bytes);
	}
	if (gs == O_SCATTER) {
		un->scratch = un->acc;
		un->acc = true;
	}
	/* The shard is the step's whole gradient (O_COPY only comes in
	 * the last micro-batch): update the unit now. */
	if (gs == O_COPY && d->ubw && off_update_unit(d, u))
		return -1;
	return 0;
}

/* Move every unit one stage on; what was issued in an earlier wait epoch
 * has completed. Index order keeps the ranks' collectives in step. */
static int progress(struct offload *d)
{
	for (int u = 0; u < d->spec->nunits; u++) {
		struct off_unit *un = &d->units[u];
		if (un->gs == O_IDLE || un->gs == O_DONE ||
		    (un->gs != O_READY && un->gepoch == d->epoch))
			continue;
		/* Accumulating, a micro-batch before the last stops at
		 * the device shard; the last copies it to the host. */
		enum off_gstate next = O_DONE;
		if (un->gs == O_READY && d->world > 1) {
			next = O_SCATTER;
		} else if (un->gs == O_READY && d->accum > 1) {
			if (accumulate(d, u, true))
				return -1;
			drop_gslot(d, u);
			next = d->final ? O_COPY : O_DONE;
		} else if (un->gs == O_READY) {
			next = O_COPY;
		} else if (un->gs == O_SCATTER) {
			if (un->scratch && accumulate(d, u, false))
				return -1;
			drop_gslot(d, u);
			next = d->final ? O_COPY : O_DONE;
		} else if (un->gs == O_COPY && !off_uses_gshard(d)) {
			drop_gslot(d, u);
		}
		if (next != O_DONE && issue(d, u, next))
			return -1;
		un->gs = next;
		un->gepoch = d->epoch;
	}
	return 0;
}

static int enter_micro(struct offload *d);

static void point(struct offload *d, int u, bool grads)
{
	const struct mg_flat_layout *L = &d->L;
	const struct mg_unit_decl *ud = &d->spec->units[u];
	for (int k = 0; k < ud->nparams; k++) {
		int i = ud->first_param + k, fi = L->param_flat[i];
		struct mg_tensor *pt = &d->V.ptensor[i], *gt = &d->V.gtensor[i];
		gt->data = NULL;
		if (fi < 0) {
			pt->data = (char *)d->buffers.ptr +
				   (size_t)L->param_off[i] *
					   mg_dtype_size(d->master);
			continue;
		}
		const struct mg_flat *f = &L->flats[fi];
		size_t off = (size_t)L->param_off[i] * mg_dtype_size(f->lent);
		pt->data = off_dev_full(d, fi) + off;
		if (grads && f->train)
			gt->data = (char *)d->gslots[d->units[u].gslot].ptr +
				   f->gfull_byte + off;
	}
}

struct mg_unit_view *off_acquire(void *self, int u, enum mg_phase ph)
{
	struct offload *d = self;
	if (u < 0 || u >= d->spec->nunits) {
		mg_error("acquire: unit %d out of range (model has %d)", u,
			 d->spec->nunits);
		return NULL;
	}
	struct off_unit *un = &d->units[u];
	if (ph != MG_PHASE_EVAL && enter_micro(d))
		return NULL;
	const bool grads = ph == MG_PHASE_BACKWARD && d->V.trains[u];
	if (grads && (wait_all(d) || progress(d)))
		return NULL;
	if (grads && un->gslot < 0) {
		if (un->gs != O_IDLE) {
			mg_error("offload: unit '%s' acquired for backward "
				 "after it reported its gradients ready",
				 d->spec->units[u].name);
			return NULL;
		}
		if ((un->gslot = take_gslot(d, u)) < 0 ||
		    mg_memset_dev(d->ctx, d->gslots[un->gslot].ptr, 0,
				  d->L.unit_grad_bytes[u]))
			return NULL;
	}
	point(d, u, grads);
	return &d->V.views[u];
}

void off_release(void *self, int u, enum mg_phase ph)
{
	(void)self, (void)u, (void)ph;
}

int off_grads_ready(void *self, int u)
{
	struct offload *d = self;
	struct off_unit *un = &d->units[u];
	const struct mg_flat_layout *L = &d->L;
	if (!d->V.trains[u])
		return 0;
	if (un->gs != O_IDLE)
		return mg_error("unit '%s' reported its gradients ready twice "
				"in one step",
				d->spec->units[u].name);
	if (un->gslot < 0)
		return mg_error("unit '%s' reported its gradients ready "
				"without being acquired for backward",
				d->spec->units[u].name);
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		if (!f->train)
			continue;
		int64_t n = f->shard * L->group;
		char *src = (char *)d->gslots[un->gslot].ptr + f->gfull_byte;
		if (f->grad != f->lent &&
		    mg_op_convert(d->ctx, slot_grad(d, u, f), f->grad, src,
				  f->lent, n))
			return mg_error_prefix("offload: gradient of %s",
					       d->spec->units[u].name);
		/* One rank holds whole gradients here: its norm now
		 * (accumulating: of the summed shard, in step()). */
		if (!off_uses_gshard(d) &&
		    mg_optim_sumsq(d->ctx, d->ctx->optim_vals, f->grad,
				   slot_grad(d, u, f), n))
			return -1;
	}
	un->gs = O_READY;
	return 0;
}

/* Finish this micro-batch's pipeline; `final`: the step's, every unit's
 * shard then on the host (else the pipeline is ready for the next
 * micro-batch). */
static int flush(struct offload *d, bool final)
{
	/* Units the model never reported go through the pipeline too (zero
	 * gradients if backward never reached them in the step), the same
	 * on every rank so the collectives still match. */
	for (int u = 0; u < d->spec->nunits; u++) {
		struct off_unit *un = &d->units[u];
		if (!d->V.trains[u] || un->gs != O_IDLE)
			continue;
		if (un->gslot < 0 && !final)
			continue; /* nothing this micro-batch */
		if (un->gslot < 0 && un->acc) {
			/* Summed in earlier micro-batches: to the host. */
			if (issue(d, u, O_COPY))
				return -1;
			un->gs = O_COPY;
			un->gepoch = d->epoch;
			continue;
		}
		if (un->gslot < 0 &&
		    ((un->gslot = take_gslot(d, u)) < 0 ||
		     mg_memset_dev(d->ctx, d->gslots[un->gslot].ptr, 0,
				   d->L.unit_grad_bytes[u])))
			return -1;
		if (off_grads_ready(d, u))
			return -1;
	}
	for (int round = 0; round < 4; round++)
		if (wait_all(d) || progress(d))
			return -1;
	for (int u = 0; u < d->spec->nunits; u++) {
		struct off_unit *un = &d->units[u];
		if (!d->V.trains[u])
			continue;
		if (un->gs != O_DONE && (final || un->gs != O_IDLE))
			return mg_error("offload: internal: gradients of unit "
					"%d not %s",
					u, final ? "on the host" : "summed");
		if (!final) {
			un->gs = O_IDLE;
			un->gepoch = -1;
		}
	}
	return 0;
}

int off_pipe_finish(struct offload *d)
{
	d->final = true;
	return flush(d, true);
}

/* At a training acquire: a new micro-batch finishes the last one's
 * pipeline first. */
static int enter_micro(struct offload *d)
{
	const int m = d->ctx->micro;
	if (d->accum > 1 && m != d->micro) {
		if (flush(d, false))
			return -1;
		d->micro = m;
	}
	d->final = m + 1 >= d->accum;
	return 0;
}

void off_pipe_begin_step(struct offload *d)
{
	for (int u = 0; u < d->spec->nunits; u++) {
		d->units[u].gs = O_IDLE;
		d->units[u].gepoch = -1;
		d->units[u].acc = d->units[u].scratch = false;
	}
	d->epoch = 0;
	d->micro = 0;
	d->final = d->accum <= 1;
	d->vals_sent = false;
}

int off_pipe_init(struct offload *d)
{
	d->units = calloc((size_t)d->spec->nunits + 1, sizeof *d->units);
	if (!d->units)
		return mg_error("out of memory");
	for (int u = 0; u < d->spec->nunits; u++) {
		d->units[u].gslot = -1;
		d->units[u].gepoch = -1;
	}
	/* Gradient slots: a unit's full gradients (and their converted
	 * copy), then, accumulating over several ranks, a scratch for the
	 * unit's shards. */
	const struct mg_flat_layout *L = &d->L;
	d->gslot_bytes = L->max_grad_bytes;
	d->scratch_base = (L->max_grad_bytes + 255) & ~(size_t)255;
	d->scratch_byte = calloc((size_t)L->nflats + 1, sizeof(size_t));
	if (!d->scratch_byte)
		return mg_error("out of memory");
	if (d->accum > 1 && d->world > 1) {
		size_t most = 0;
		for (int u = 0; u < d->spec->nunits; u++) {
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
	d->micro = 0;
	d->final = d->accum <= 1;
	return mg_flat_views_init(&d->V, &d->L, d->ctx->dev->kind);
}

void off_pipe_free(struct offload *d)
{
	for (int i = 0; i < d->ngslots; i++)
		mg_buf_free(d->ctx, &d->gslots[i]);
	free(d->gslots);
	free(d->gslot_owner);
	free(d->units);
	free(d->scratch_byte);
	mg_flat_views_free(&d->V);
}
