/*
 * replica.c - full parameter, gradient and optimizer storage on one rank,
 * with optional mixed precision (F32 master, F16/BF16 compute copy).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/kit/replica.h"

static bool is_buffer(const struct mg_param_decl *p)
{
	return p->flags & MG_P_BUFFER;
}

static bool is_frozen(const struct mg_param_decl *p)
{
	return !(p->flags & (MG_P_TRAIN | MG_P_BUFFER));
}

/* Optimizer group of a trained parameter (see replica.h), -1 if frozen. */
static int group_of(const struct mg_replica *r, const struct mg_param_decl *p)
{
	if (!(p->flags & MG_P_TRAIN))
		return -1;
	int keep32 = r->mixed && (p->flags & MG_P_FP32);
	return 2 * keep32 + !!(p->flags & MG_P_NO_DECAY);
}

/* Is the lent copy the low-precision one? */
static bool lent_lp(const struct mg_replica *r, const struct mg_param_decl *p)
{
	return r->mixed && !is_buffer(p) && !(p->flags & MG_P_FP32);
}

static int check(struct mg_replica *r)
{
	for (int i = 0; i < r->spec->nparams; i++) {
		const struct mg_param_decl *p = &r->spec->params[i];
		if (p->dtype == MG_NF4 && !is_frozen(p))
			return mg_error("parameter '%s' is NF4 but not frozen; "
					"replicated storage keeps NF4 "
					"parameters only as frozen blobs",
					p->name);
		if (p->dtype != MG_DTYPE_AUTO && p->dtype != MG_NF4)
			return mg_error("parameter '%s' has explicit dtype %s; "
					"replicated storage holds only the "
					"run's float types and frozen NF4",
					p->name, mg_dtype_name(p->dtype));
	}
	if (r->mixed && r->master != MG_F32)
		return mg_error("mixed precision needs an F32 master copy");
	return 0;
}

/* The dtype a parameter is lent in (and a frozen one stored in). */
static enum mg_dtype lent_dtype(const struct mg_replica *r,
				const struct mg_param_decl *p)
{
	if (p->dtype == MG_NF4)
		return MG_NF4;
	return lent_lp(r, p) ? r->compute : r->master;
}

/* Bytes of a frozen parameter as stored: numel x its lent dtype, or the
 * whole NF4 blob (codes and scales, mg_tensor_bytes). */
static size_t frozen_size(const struct mg_replica *r,
			  const struct mg_param_decl *p)
{
	struct mg_tensor t = mg_tensor_make(NULL, lent_dtype(r, p), MG_DEV_CPU,
					    p->ndim, p->shape);
	return mg_tensor_bytes(&t);
}

/* Element offsets: trained parameters by group; buffers apart; frozen
 * ones at byte offsets (256-aligned) of the frozen buffer. The lp copy
 * of groups 0, 1 shares their master offsets. */
static void place(struct mg_replica *r)
{
	const struct mg_model_spec *s = r->spec;
	int64_t count[MG_REPLICA_GROUPS] = {0};
	for (int i = 0; i < s->nparams; i++) {
		const struct mg_param_decl *p = &s->params[i];
		if (is_buffer(p))
			r->n_buffers += p->numel;
		else if (!is_frozen(p))
			count[group_of(r, p)] += p->numel;
	}
	r->group_off[0] = 0;
	for (int g = 0; g < MG_REPLICA_GROUPS; g++)
		r->group_off[g + 1] = r->group_off[g] + count[g];
	r->n_train = r->n_params = r->group_off[MG_REPLICA_GROUPS];
	int64_t next[MG_REPLICA_GROUPS], boff = 0;
	for (int g = 0; g < MG_REPLICA_GROUPS; g++)
		next[g] = r->group_off[g];
	for (int i = 0; i < s->nparams; i++) {
		const struct mg_param_decl *p = &s->params[i];
		if (is_buffer(p)) {
			r->off[i] = boff;
			boff += p->numel;
		} else if (is_frozen(p)) {
			r->off[i] = r->frozen_bytes;
			r->frozen_bytes += ((int64_t)frozen_size(r, p) + 255) &
					   ~(int64_t)255;
		} else {
			int g = group_of(r, p);
			r->off[i] = next[g];
			next[g] += p->numel;
		}
	}
}

static void *at(const struct mg_buf *b, int64_t off, enum mg_dtype dt)
{
	return (char *)b->ptr + (size_t)off * mg_dtype_size(dt);
}

static void make_views(struct mg_replica *r)
{
	const struct mg_model_spec *s = r->spec;
	enum mg_device_kind dev = r->ctx->dev->kind;
	for (int i = 0; i < s->nparams; i++) {
		const struct mg_param_decl *p = &s->params[i];
		void *data;
		enum mg_dtype dt = r->master;
		if (is_buffer(p))
			data = at(&r->buffers, r->off[i], dt);
		else if (is_frozen(p)) {
			dt = lent_dtype(r, p);
			data = (char *)r->frozen.ptr + r->off[i];
		} else if (lent_lp(r, p)) {
			dt = r->compute;
			data = at(&r->params_lp, r->off[i], dt);
		} else
			data = at(&r->params, r->off[i], dt);
		r->ptensor[i] =
			mg_tensor_make(data, dt, dev, p->ndim, p->shape);
		r->gtensor[i] = r->ptensor[i];
		r->gtensor[i].data = NULL;
		int g = group_of(r, p);
		if (g >= 2)
			r->gtensor[i].data = at(
				&r->grads32, r->off[i] - r->group_off[2], dt);
		else if (g >= 0)
			r->gtensor[i].data = at(&r->grads, r->off[i], dt);
	}
	for (int u = 0; u < s->nunits; u++) {
		r->views[u].nparams = s->units[u].nparams;
		r->views[u].params = &r->ptensor[s->units[u].first_param];
		r->views[u].grads = &r->gtensor[s->units[u].first_param];
	}
}

/* A frozen parameter's initial values (master dtype, host) into its lent
 * dtype on the device: converted on the host, so no master-sized device
 * copy ever exists. An NF4 blob is copied as the model filled it. */
static int put_frozen(struct mg_replica *r, int i, const struct mg_tensor *h)
{
	const struct mg_param_decl *p = &r->spec->params[i];
	const enum mg_dtype dt = lent_dtype(r, p);
	void *dst = (char *)r->frozen.ptr + r->off[i];
	if (dt == r->master || dt == MG_NF4)
		return mg_copy_h2d(r->ctx, dst, h->data, frozen_size(r, p));
	/* Mixed precision: the master is F32, dt F16 or BF16. */
	uint16_t *lo = malloc((size_t)p->numel * sizeof *lo);
	if (!lo)
		return mg_error("out of memory");
	/* libmg's host conversion runs on every core. */
	struct mg_tensor t = mg_tensor_make(lo, dt, MG_DEV_CPU, p->ndim,
					    p->shape);
	int rc = mg_tensor_convert_host(&t, h);
	if (!rc)
		rc = mg_copy_h2d(r->ctx, dst, lo,
				 (size_t)p->numel * sizeof *lo);
	free(lo);
	return rc;
}

/* Fill master values unit by unit from the model (host staging). */
static int init_values(struct mg_replica *r)
{
	struct mg_ctx *ctx = r->ctx;
	const struct mg_model_spec *s = r->spec;
	size_t es = mg_dtype_size(r->master);
	for (int u = 0; u < s->nunits; u++) {
		const struct mg_unit_decl *ud = &s->units[u];
		int n = ud->nparams;
		struct mg_tensor host[n > 0 ? n : 1];
		for (int k = 0; k < n; k++) {
			int i = ud->first_param + k;
			const struct mg_param_decl *p = &s->params[i];
			/* NF4: the model fills the blob itself. */
			host[k] = mg_tensor_make(
				NULL, p->dtype == MG_NF4 ? MG_NF4 : r->master,
				MG_DEV_CPU, p->ndim, p->shape);
			host[k].data = malloc(mg_tensor_bytes(&host[k]) + 1);
			if (!host[k].data)
				return mg_error("out of memory");
		}
		int rc = mg_init_unit(ctx, s, u, host);
		for (int k = 0; k < n && !rc; k++) {
			int i = ud->first_param + k;
			const struct mg_param_decl *p = &s->params[i];
			if (is_frozen(p)) {
				rc = put_frozen(r, i, &host[k]);
				continue;
			}
			void *dst =
				is_buffer(p)
					? at(&r->buffers, r->off[i], r->master)
					: at(&r->params, r->off[i], r->master);
			rc = mg_copy_h2d(ctx, dst, host[k].data,
					 (size_t)p->numel * es);
		}
		/* Copies from pageable memory are complete on return. */
		for (int k = 0; k < n; k++)
			free(host[k].data);
		if (rc)
			return rc;
	}
	return mg_replica_refresh_lp(r);
}

int mg_replica_refresh_lp(struct mg_replica *r)
{
	if (!r->mixed || !r->group_off[2])
		return 0;
	/* Groups 0, 1 lie at the same offsets in both buffers. */
	return mg_op_convert(r->ctx, r->params_lp.ptr, r->compute,
			     r->params.ptr, r->master, r->group_off[2]);
}

int mg_replica_init(struct mg_replica *r, struct mg_ctx *ctx,
		    const struct mg_model_spec *spec)
{
	memset(r, 0, sizeof *r);
	r->ctx = ctx;
	r->spec = spec;
	r->master = ctx->master_dtype;
	r->compute = ctx->compute_dtype;
	r->mixed = r->master != r->compute;
	if (check(r))
		return -1;
	size_t n = (size_t)spec->nparams + 1;
	r->off = calloc(n, sizeof *r->off);
	r->ptensor = calloc(n, sizeof *r->ptensor);
	r->gtensor = calloc(n, sizeof *r->gtensor);
	r->views = calloc((size_t)spec->nunits + 1, sizeof *r->views);
	if (!r->off || !r->ptensor || !r->gtensor || !r->views)
		return mg_error("out of memory for parameter tables");
	place(r);
	size_t ms = mg_dtype_size(r->master), cs = mg_dtype_size(r->compute);
	int64_t n_lp_grad = r->group_off[2];
	int64_t n_32_grad = r->n_train - r->group_off[2];
	int64_t n_lp = r->mixed ? n_lp_grad : 0;
	r->nslots = ctx->optim ? mg_optim_state_slots(ctx->optim) : 0;
	if (mg_buf_alloc(ctx, &r->params, (size_t)r->n_params * ms,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &r->params_lp, (size_t)n_lp * cs,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &r->frozen, (size_t)r->frozen_bytes,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &r->buffers, (size_t)r->n_buffers * ms,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &r->grads, (size_t)n_lp_grad * cs,
			 MG_MEM_GRADS) ||
	    mg_buf_alloc(ctx, &r->grads32, (size_t)n_32_grad * ms,
			 MG_MEM_GRADS))
		return -1;
	for (int k = 0; k < r->nslots; k++)
		if (mg_buf_alloc(ctx, &r->state[k], (size_t)r->n_train * ms,
				 MG_MEM_OPTIM) ||
		    mg_memset_dev(ctx, r->state[k].ptr, 0, r->state[k].bytes))
			return -1;
	make_views(r);
	return init_values(r);
}

void mg_replica_free(struct mg_replica *r)
{
	if (!r->ctx)
		return;
	struct mg_buf *bufs[] = {&r->params,  &r->params_lp, &r->frozen,
				 &r->buffers, &r->grads,     &r->grads32};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		mg_buf_free(r->ctx, bufs[i]);
	for (int k = 0; k < MG_REPLICA_MAX_SLOTS; k++)
		mg_buf_free(r->ctx, &r->state[k]);
	free(r->off);
	free(r->ptensor);
	free(r->gtensor);
	free(r->views);
	memset(r, 0, sizeof *r);
}

struct mg_unit_view *mg_replica_view(struct mg_replica *r, int unit,
				     enum mg_phase ph)
{
	(void)ph;
	if (unit < 0 || unit >= r->spec->nunits) {
		mg_error("acquire: unit %d out of range (model has %d)", unit,
			 r->spec->nunits);
		return NULL;
	}
	return &r->views[unit];
}

int mg_replica_zero_grads(struct mg_replica *r)
{
	return mg_memset_dev(r->ctx, r->grads.ptr, 0, r->grads.bytes) ||
	       mg_memset_dev(r->ctx, r->grads32.ptr, 0, r->grads32.bytes);
}

int mg_replica_sumsq(struct mg_replica *r)
{
	struct mg_ctx *ctx = r->ctx;
	return mg_optim_sumsq(ctx, ctx->optim_vals, r->compute, r->grads.ptr,
			      r->group_off[2]) ||
	       mg_optim_sumsq(ctx, ctx->optim_vals, r->master, r->grads32.ptr,
			      r->n_train - r->group_off[2]);
}

int mg_replica_update(struct mg_replica *r, const struct mg_optim_hparams *h)
{
	for (int g = 0; g < MG_REPLICA_GROUPS; g++) {
		int64_t off = r->group_off[g], n = r->group_off[g + 1] - off;
		if (n == 0)
			continue;
		bool lp = g < 2;
		struct mg_optim_slice s = {
			.dtype = r->master,
			.param = at(&r->params, off, r->master),
			.grad = lp ? at(&r->grads, off, r->compute)
				   : at(&r->grads32, off - r->group_off[2],
					r->master),
			.grad_dtype = lp ? r->compute : r->master,
			.param_lp = lp && r->mixed
					    ? at(&r->params_lp, off, r->compute)
					    : NULL,
			.lp_dtype = r->compute,
			.n = n,
			.decay = h->decay_all || !(g & 1),
		};
		for (int k = 0; k < r->nslots; k++)
			s.state[k] = at(&r->state[k], off, r->master);
		if (mg_optim_update(r->ctx, h, r->ctx->optim_vals, &s))
			return -1;
	}
	return 0;
}

int mg_replica_step(struct mg_replica *r, const struct mg_optim_hparams *h)
{
	if (mg_replica_sumsq(r) ||
	    mg_optim_finalize(r->ctx, h, r->ctx->optim_vals))
		return -1;
	return mg_replica_update(r, h);
}

static void full_name(char *out, size_t n, const char *kind,
		      const struct mg_model_spec *s, int unit, int i)
{
	snprintf(out, n, "%s/%s.%s", kind, s->units[unit].name,
		 s->params[s->units[unit].first_param + i].name);
}

/* Visit every (name, tensor) the replica saves: master parameters,
 * buffers, and optimizer slots of trained parameters. Frozen parameters
 * are re-created from the model's source, not saved (replica.h). */
static int visit(struct mg_replica *r, struct mg_ckpt *ck, bool save)
{
	const struct mg_model_spec *s = r->spec;
	char name[3 * MG_NAME_MAX];
	for (int u = 0; u < s->nunits; u++) {
		for (int k = 0; k < s->units[u].nparams; k++) {
			int i = s->units[u].first_param + k;
			const struct mg_param_decl *p = &s->params[i];
			if (is_frozen(p))
				continue;
			struct mg_tensor t = mg_tensor_make(
				at(is_buffer(p) ? &r->buffers : &r->params,
				   r->off[i], r->master),
				r->master, r->ctx->dev->kind, p->ndim,
				p->shape);
			full_name(name, sizeof name, "param", s, u, k);
			if (save ? mg_ckpt_put(ck, name, &t)
				 : mg_ckpt_get(ck, name, &t))
				return -1;
			if (group_of(r, p) < 0)
				continue;
			for (int j = 0; j < r->nslots; j++) {
				char kind[64];
				snprintf(kind, sizeof kind, "optim/%s",
					 mg_optim_slot_name(r->ctx->optim, j));
				full_name(name, sizeof name, kind, s, u, k);
				struct mg_tensor st = t;
				st.data =
					at(&r->state[j], r->off[i], r->master);
				if (save ? mg_ckpt_put(ck, name, &st)
					 : mg_ckpt_get(ck, name, &st))
					return -1;
			}
		}
	}
	return 0;
}

int mg_replica_save(struct mg_replica *r, struct mg_ckpt *ck)
{
	return visit(r, ck, true);
}

int mg_replica_load(struct mg_replica *r, struct mg_ckpt *ck)
{
	return visit(r, ck, false) || mg_replica_refresh_lp(r);
}
