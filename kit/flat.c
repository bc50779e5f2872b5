/*
 * flat.c - packing a model's units into flat parameters and cutting them
 * into per-rank shards (see flat.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/kit/flat.h"

static int64_t round_up(int64_t x, int64_t m)
{
	return (x + m - 1) / m * m;
}

static size_t align_bytes(size_t x)
{
	return (x + 255) & ~(size_t)255;
}

/* Which flat of its unit parameter p joins: key (lent dtype, trained);
 * NF4 blobs join the unit's packed flat, of bytes. */
static enum mg_dtype lent_dtype(const struct mg_param_decl *p,
				enum mg_dtype master, enum mg_dtype compute)
{
	if (p->dtype == MG_NF4)
		return MG_U8;
	return (p->flags & MG_P_FP32) ? master : compute;
}

/* Packed flats align every blob and their shards to this many bytes. */
#define PACKED_ALIGN 256

/* Elements parameter p takes in its flat, before alignment: bytes of its
 * blob for NF4. */
static int64_t flat_numel(const struct mg_param_decl *p)
{
	if (p->dtype != MG_NF4)
		return p->numel;
	struct mg_tensor t =
		mg_tensor_make(NULL, MG_NF4, MG_DEV_CPU, p->ndim, p->shape);
	return (int64_t)mg_tensor_bytes(&t);
}

static bool trained(const struct mg_param_decl *p)
{
	return (p->flags & MG_P_TRAIN) && !(p->flags & MG_P_BUFFER);
}

static bool decays(const struct mg_param_decl *p)
{
	return !(p->flags & MG_P_NO_DECAY);
}

/* Find or add the flat of unit u keyed (lent, train) among flats
 * [first, L->nflats). */
static struct mg_flat *flat_for(struct mg_flat_layout *L, int first, int u,
				enum mg_dtype lent, bool train)
{
	for (int k = first; k < L->nflats; k++)
		if (L->flats[k].lent == lent && L->flats[k].train == train)
			return &L->flats[k];
	struct mg_flat *f = &L->flats[L->nflats++];
	memset(f, 0, sizeof *f);
	f->unit = u;
	f->lent = lent;
	f->train = train;
	f->packed = lent == MG_U8;
	f->lp = lent != L->master && !f->packed;
	return f;
}

/* Place unit u's parameters: decaying trained ones first in each trained
 * flat, then the rest, each at an aligned offset. */
static void place_unit(struct mg_flat_layout *L, int u, enum mg_dtype compute,
		       bool reduce_master)
{
	const struct mg_model_spec *s = L->spec;
	const struct mg_unit_decl *ud = &s->units[u];
	const int first = L->nflats;
	L->unit_first[u] = first;
	for (int pass = 0; pass < 2; pass++) {
		for (int k = 0; k < ud->nparams; k++) {
			int i = ud->first_param + k;
			const struct mg_param_decl *p = &s->params[i];
			if (p->flags & MG_P_BUFFER) {
				if (pass == 0) {
					L->param_flat[i] = -1;
					L->param_off[i] = L->n_buffers;
					L->n_buffers += p->numel;
				}
				continue;
			}
			/* pass 0: trained with decay; pass 1: the rest */
			bool first_pass = trained(p) && decays(p);
			if (first_pass != (pass == 0))
				continue;
			struct mg_flat *f = flat_for(
				L, first, u, lent_dtype(p, L->master, compute),
				trained(p));
			L->param_flat[i] = (int)(f - L->flats);
			L->param_off[i] = f->n;
			f->n += round_up(flat_numel(p),
					 f->packed ? PACKED_ALIGN
						   : MG_FLAT_ALIGN);
			if (pass == 0)
				f->n_decay = f->n;
		}
	}
	size_t full = 0, grad = 0;
	for (int k = first; k < L->nflats; k++) {
		struct mg_flat *f = &L->flats[k];
		f->grad = reduce_master ? L->master : f->lent;
		f->shard = round_up(f->n, (int64_t)L->group *
						  (f->packed ? PACKED_ALIGN
							     : MG_FLAT_ALIGN)) /
			   L->group;
		int64_t padded = f->shard * L->group;
		if (padded > L->max_flat)
			L->max_flat = padded;
		f->full_byte = full;
		full += align_bytes((size_t)padded * mg_dtype_size(f->lent));
		if (!f->train)
			continue;
		f->gfull_byte = grad;
		grad += align_bytes((size_t)padded * mg_dtype_size(f->lent));
		if (f->grad != f->lent)
			grad += align_bytes((size_t)padded *
					    mg_dtype_size(f->grad));
	}
	L->unit_full_bytes[u] = full;
	L->unit_grad_bytes[u] = grad;
	if (full > L->max_full_bytes)
		L->max_full_bytes = full;
	if (grad > L->max_grad_bytes)
		L->max_grad_bytes = grad;
}

/* Shard offsets in the rank's buffers; gradient shards reduced in the
 * compute dtype first, then those in the master dtype. */
static void place_shards(struct mg_flat_layout *L)
{
	size_t gbytes = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < L->nflats; k++) {
			struct mg_flat *f = &L->flats[k];
			if (pass == 0 && f->packed) {
				f->master_off = -1;
				f->packed_off = L->n_packed;
				L->n_packed += f->shard;
			} else if (pass == 0) {
				f->master_off = -1;
				if (!mg_flat_frozen_lp(f)) {
					f->master_off = L->n_master;
					L->n_master += f->shard;
				}
				if (f->lp) {
					f->lp_off = L->n_lp;
					L->n_lp += f->shard;
				}
				if (f->train) {
					f->train_off = L->n_train;
					L->n_train += f->shard;
				}
			}
			if (!f->train || (pass == 0) != (f->grad != L->master))
				continue;
			f->gshard_byte = gbytes;
			gbytes += (size_t)f->shard * mg_dtype_size(f->grad);
			if (pass == 0)
				L->gshard_lent_bytes = gbytes;
		}
	L->gshard_bytes = gbytes;
}

int mg_flat_build(struct mg_flat_layout *L, const struct mg_model_spec *spec,
		  enum mg_dtype master, enum mg_dtype compute, int group,
		  bool reduce_master)
{
	memset(L, 0, sizeof *L);
	L->spec = spec;
	L->master = master;
	L->group = group;
	for (int i = 0; i < spec->nparams; i++) {
		const struct mg_param_decl *p = &spec->params[i];
		if (p->dtype == MG_NF4 &&
		    (p->flags & (MG_P_TRAIN | MG_P_BUFFER)))
			return mg_error("parameter '%s' is NF4 but not frozen; "
					"flat parameters keep NF4 parameters "
					"only as frozen blobs",
					p->name);
		if (p->dtype != MG_DTYPE_AUTO && p->dtype != MG_NF4)
			return mg_error("parameter '%s' has explicit dtype %s; "
					"flat parameters hold only the run's "
					"float types and frozen NF4",
					p->name, mg_dtype_name(p->dtype));
	}
	size_t np = (size_t)spec->nparams + 1, nu = (size_t)spec->nunits + 1;
	/* At most five flats per unit: (compute or master dtype) x
	 * (trained or frozen), and packed. */
	L->flats = calloc(5 * nu, sizeof *L->flats);
	L->unit_first = calloc(nu, sizeof *L->unit_first);
	L->param_flat = calloc(np, sizeof *L->param_flat);
	L->param_off = calloc(np, sizeof *L->param_off);
	L->unit_full_bytes = calloc(nu, sizeof *L->unit_full_bytes);
	L->unit_grad_bytes = calloc(nu, sizeof *L->unit_grad_bytes);
	if (!L->flats || !L->unit_first || !L->param_flat || !L->param_off ||
	    !L->unit_full_bytes || !L->unit_grad_bytes)
		return mg_error("out of memory for the flat parameter layout");
	for (int u = 0; u < spec->nunits; u++)
		place_unit(L, u, compute, reduce_master);
	L->unit_first[spec->nunits] = L->nflats;
	place_shards(L);
	return 0;
}

void mg_flat_free(struct mg_flat_layout *L)
{
	free(L->flats);
	free(L->unit_first);
	free(L->param_flat);
	free(L->param_off);
	free(L->unit_full_bytes);
	free(L->unit_grad_bytes);
	memset(L, 0, sizeof *L);
}

bool mg_flat_shard_range(const struct mg_flat *f, int srank, int64_t lo,
			 int64_t hi, int64_t *a, int64_t *b)
{
	int64_t s0 = (int64_t)srank * f->shard, s1 = s0 + f->shard;
	if (hi > f->n)
		hi = f->n;
	int64_t x = lo > s0 ? lo : s0, y = hi < s1 ? hi : s1;
	if (x >= y)
		return false;
	*a = x - s0;
	*b = y - s0;
	return true;
}

void mg_flat_param_name(char *out, size_t n, const char *kind,
			const struct mg_model_spec *s, int i)
{
	int u = 0;
	while (u + 1 < s->nunits && s->units[u + 1].first_param <= i)
		u++;
	snprintf(out, n, "%s/%s.%s", kind, s->units[u].name, s->params[i].name);
}

/* One named tensor at base + element offset off. */
static int ckpt_one(const struct mg_flat_layout *L, int i, const char *kind,
		    char *base, int64_t off, enum mg_device_kind dev,
		    struct mg_ckpt *ck, bool save)
{
	const struct mg_param_decl *p = &L->spec->params[i];
	char name[3 * MG_NAME_MAX + 64];
	struct mg_tensor t =
		mg_tensor_make(base + (size_t)off * mg_dtype_size(L->master),
			       L->master, dev, p->ndim, p->shape);
	mg_flat_param_name(name, sizeof name, kind, L->spec, i);
	return save ? mg_ckpt_put(ck, name, &t) : mg_ckpt_get(ck, name, &t);
}

int mg_flat_ckpt_flat(const struct mg_flat_layout *L, int k, const char *kind,
		      void *base, enum mg_device_kind dev, struct mg_ckpt *ck,
		      bool save)
{
	const struct mg_unit_decl *ud = &L->spec->units[L->flats[k].unit];
	for (int j = 0; j < ud->nparams; j++) {
		int i = ud->first_param + j;
		if (L->param_flat[i] == k &&
		    ckpt_one(L, i, kind, base, L->param_off[i], dev, ck, save))
			return -1;
	}
	return 0;
}

int mg_flat_ckpt_buffers(const struct mg_flat_layout *L, void *bufs,
			 enum mg_device_kind dev, struct mg_ckpt *ck, bool save)
{
	for (int i = 0; i < L->spec->nparams; i++)
		if (L->param_flat[i] < 0 &&
		    ckpt_one(L, i, "param", bufs, L->param_off[i], dev, ck,
			     save))
			return -1;
	return 0;
}

/* Whether only shard srank of flat f is made. */
static bool part_of(const struct mg_flat *f, int srank, unsigned flags)
{
	return srank >= 0 && !f->packed &&
	       (f->train || !(flags & MG_FLAT_INIT_FROZEN_WHOLE));
}

/* Unit u's values into full flats; with srank >= 0 only that shard of
 * each flat is needed (of trained flats only, with
 * MG_FLAT_INIT_FROZEN_WHOLE), so the model is asked for those elements
 * only (mg_init_unit_part) and the rest of out[] is left unwritten. */
static int init_unit(struct mg_flat_layout *L, struct mg_ctx *ctx, int u,
		     void **out, void *bufs_host, int srank, unsigned flags)
{
	const struct mg_model_spec *s = L->spec;
	const struct mg_unit_decl *ud = &s->units[u];
	const size_t es = mg_dtype_size(L->master);
	int n = ud->nparams;
	struct mg_tensor host[n > 0 ? n : 1];
	int64_t lo[n > 0 ? n : 1], hi[n > 0 ? n : 1];
	for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++) {
		const struct mg_flat *f = &L->flats[k];
		/* gaps and padding are zero; a packed flat is made whole */
		size_t a = 0, b = mg_flat_host_bytes(L, f);
		if (part_of(f, srank, flags)) {
			a = (size_t)(srank * f->shard) * es;
			b = a + (size_t)f->shard * es;
		}
		memset((char *)out[k - L->unit_first[u]] + a, 0, b - a);
	}
	/* Each parameter is made straight into its place in the flat. */
	for (int k = 0; k < n; k++) {
		int i = ud->first_param + k;
		const struct mg_param_decl *p = &s->params[i];
		const int fi = L->param_flat[i];
		char *base = fi < 0 ? (char *)bufs_host
				    : (char *)out[fi - L->unit_first[u]];
		/* An NF4 blob at its byte offset, filled by the model. */
		const bool nf4 = p->dtype == MG_NF4;
		host[k] = mg_tensor_make(base + (size_t)L->param_off[i] *
							 (nf4 ? 1 : es),
					 nf4 ? MG_NF4 : L->master, MG_DEV_CPU,
					 p->ndim, p->shape);
		/* this parameter's elements inside the shard; buffers (not
		 * sharded) and blobs whole */
		const int64_t numel = mg_tensor_numel(&host[k]);
		lo[k] = 0;
		hi[k] = numel;
		if (fi >= 0 && part_of(&L->flats[fi], srank, flags)) {
			const int64_t a = srank * L->flats[fi].shard -
					  L->param_off[i],
				      b = a + L->flats[fi].shard;
			lo[k] = a < 0 ? 0 : a > numel ? numel : a;
			hi[k] = b < lo[k] ? lo[k] : b > numel ? numel : b;
		}
	}
	return srank >= 0 ? mg_init_unit_part(ctx, s, u, host, lo, hi)
			  : mg_init_unit(ctx, s, u, host);
}

int mg_flat_init_unit(struct mg_flat_layout *L, struct mg_ctx *ctx, int u,
		      void **out, void *bufs_host)
{
	return init_unit(L, ctx, u, out, bufs_host, -1, 0);
}

int mg_flat_init_shard(struct mg_flat_layout *L, struct mg_ctx *ctx, int srank,
		       unsigned flags,
		       int (*keep)(void *arg, int k, const char *full),
		       void *arg, void *bufs_dev)
{
	if (srank >= L->group)
		return mg_error("flat init: shard %d of %d", srank, L->group);
	const size_t ms = mg_dtype_size(L->master);
	void *bufs = calloc((size_t)L->n_buffers + 1, ms);
	if (!bufs)
		return mg_error("out of memory");
	int rc = 0;
	for (int u = 0; u < L->spec->nunits && !rc; u++) {
		int first = L->unit_first[u], nf = L->unit_first[u + 1] - first;
		void *full[nf > 0 ? nf : 1];
		for (int k = 0; k < nf; k++) {
			const struct mg_flat *f = &L->flats[first + k];
			full[k] = malloc(mg_flat_host_bytes(L, f));
			if (!full[k] && !rc)
				rc = mg_error("out of memory");
		}
		if (!rc)
			rc = init_unit(L, ctx, u, full, bufs, srank, flags);
		for (int k = 0; k < nf; k++) {
			if (!rc)
				rc = keep(arg, first + k, full[k]);
			free(full[k]);
		}
	}
	if (!rc && L->n_buffers)
		rc = mg_copy_h2d(ctx, bufs_dev, bufs,
				 (size_t)L->n_buffers * ms);
	free(bufs);
	return rc;
}

int mg_flat_init_values(struct mg_flat_layout *L, struct mg_ctx *ctx,
			int (*keep)(void *arg, int k, const char *full),
			void *arg, void *bufs_dev)
{
	return mg_flat_init_shard(L, ctx, -1, 0, keep, arg, bufs_dev);
}

int mg_flat_views_init(struct mg_flat_views *v, const struct mg_flat_layout *L,
		       enum mg_device_kind dev)
{
	const struct mg_model_spec *s = L->spec;
	size_t nu = (size_t)s->nunits + 1, np = (size_t)s->nparams + 1;
	v->ptensor = calloc(np, sizeof *v->ptensor);
	v->gtensor = calloc(np, sizeof *v->gtensor);
	v->views = calloc(nu, sizeof *v->views);
	v->trains = calloc(nu, sizeof *v->trains);
	if (!v->ptensor || !v->gtensor || !v->views || !v->trains)
		return mg_error("out of memory");
	for (int u = 0; u < s->nunits; u++) {
		for (int k = L->unit_first[u]; k < L->unit_first[u + 1]; k++)
			v->trains[u] |= L->flats[k].train;
		v->views[u].nparams = s->units[u].nparams;
		v->views[u].params = &v->ptensor[s->units[u].first_param];
		v->views[u].grads = &v->gtensor[s->units[u].first_param];
	}
	for (int i = 0; i < s->nparams; i++) {
		const struct mg_param_decl *p = &s->params[i];
		int fi = L->param_flat[i];
		enum mg_dtype dt = fi < 0 ? L->master : L->flats[fi].lent;
		if (p->dtype == MG_NF4) /* a blob in a packed flat */
			dt = MG_NF4;
		v->ptensor[i] =
			mg_tensor_make(NULL, dt, dev, p->ndim, p->shape);
		v->gtensor[i] = v->ptensor[i];
	}
	return 0;
}

void mg_flat_views_free(struct mg_flat_views *v)
{
	free(v->ptensor);
	free(v->gtensor);
	free(v->views);
	free(v->trains);
	memset(v, 0, sizeof *v);
}

int mg_flat_ubw_check(const struct mg_ctx *ctx, const char *who)
{
	if (ctx->optim && ctx->optim->max_grad_norm > 0)
		return mg_error("%s: update_in_backward updates each unit "
				"before the norm of the whole gradient is "
				"known, so it cannot clip: set "
				"optimizer.max_grad_norm = 0, or "
				"update_in_backward = false",
				who);
	if (ctx->compute_dtype == MG_F16)
		return mg_error("%s: update_in_backward with fp16: loss "
				"scaling skips a step whose gradients "
				"overflow, and the units updated during "
				"backward cannot be taken back; use bf16 or "
				"fp32",
				who);
	return 0;
}

int mg_flat_slices(const struct mg_flat_layout *L, const struct mg_flat *f,
		   int srank, bool decay_all, void *param, const void *grad,
		   void *param_lp, void *const *state, int nstate,
		   struct mg_optim_slice out[2])
{
	const size_t ms = mg_dtype_size(L->master);
	int n = 0;
	for (int part = 0; part < 2; part++) {
		int64_t a, b;
		int64_t lo = part ? f->n_decay : 0,
			hi = part ? f->n : f->n_decay;
		if (!mg_flat_shard_range(f, srank, lo, hi, &a, &b))
			continue;
		struct mg_optim_slice *s = &out[n++];
		memset(s, 0, sizeof *s);
		s->dtype = L->master;
		s->param = (char *)param + (size_t)a * ms;
		s->grad =
			(const char *)grad + (size_t)a * mg_dtype_size(f->grad);
		s->grad_dtype = f->grad;
		s->param_lp =
			param_lp ? (char *)param_lp +
					   (size_t)a * mg_dtype_size(f->lent)
				 : NULL;
		s->lp_dtype = f->lent;
		s->n = b - a;
		s->decay = decay_all || part == 0;
		for (int j = 0; j < nstate && j < 2; j++)
			s->state[j] = (char *)state[j] + (size_t)a * ms;
	}
	return n;
}

int mg_flat_upload(struct mg_ctx *ctx, const struct mg_flat_layout *L,
		   const struct mg_flat *f, void *dst, const void *src,
		   int64_t n)
{
	const size_t ms = mg_dtype_size(L->master);
	if (f->packed) /* NF4 blobs: bytes, as the model made them */
		return mg_copy_h2d(ctx, dst, src, (size_t)n);
	if (!f->lp)
		return mg_copy_h2d(ctx, dst, src, (size_t)n * ms);
	struct mg_buf tmp;
	if (mg_buf_alloc(ctx, &tmp, (size_t)n * ms, MG_MEM_OTHER))
		return -1;
	int rc = mg_copy_h2d(ctx, tmp.ptr, src, (size_t)n * ms) ||
		 mg_op_convert(ctx, dst, f->lent, tmp.ptr, L->master, n) ||
		 mg_device_sync(ctx);
	mg_buf_free(ctx, &tmp);
	return rc;
}
