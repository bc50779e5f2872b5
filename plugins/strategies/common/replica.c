/*
 * replica.c - full parameter, gradient and optimizer storage on one rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"

static bool is_buffer(const struct mg_param_decl *p)
{
	return p->flags & MG_P_BUFFER;
}

static int check_dtypes(struct mg_replica *r)
{
	const struct mg_ctx *ctx = r->ctx;
	if (ctx->compute_dtype != ctx->master_dtype)
		return mg_error("compute dtype %s differs from master dtype %s: "
				"this strategy keeps one copy and needs them "
				"equal",
				mg_dtype_name(ctx->compute_dtype),
				mg_dtype_name(ctx->master_dtype));
	for (int i = 0; i < r->spec->nparams; i++)
		if (r->spec->params[i].dtype != MG_DTYPE_AUTO)
			return mg_error("parameter '%s' has explicit dtype %s; "
					"this strategy stores only the run's "
					"float type",
					r->spec->params[i].name,
					mg_dtype_name(r->spec->params[i].dtype));
	return 0;
}

/* Lay out tensors inside the flat buffers. */
static void layout(struct mg_replica *r)
{
	const struct mg_model_spec *s = r->spec;
	size_t es = mg_dtype_size(r->dtype);
	int64_t po = 0, bo = 0, go = 0;
	for (int i = 0; i < s->nparams; i++) {
		const struct mg_param_decl *p = &s->params[i];
		char *base = is_buffer(p) ? r->buffers.ptr : r->params.ptr;
		int64_t *off = is_buffer(p) ? &bo : &po;
		r->ptensor[i] = mg_tensor_make(base + (size_t)*off * es,
					       r->dtype, r->ctx->dev->kind,
					       p->ndim, p->shape);
		*off += p->numel;
		r->gtensor[i] = mg_tensor_make(NULL, r->dtype,
					       r->ctx->dev->kind, p->ndim,
					       p->shape);
		r->goff[i] = -1;
		if (p->flags & MG_P_TRAIN) {
			r->goff[i] = go;
			r->gtensor[i].data =
				(char *)r->grads.ptr + (size_t)go * es;
			go += p->numel;
		}
	}
	for (int u = 0; u < s->nunits; u++) {
		r->views[u].nparams = s->units[u].nparams;
		r->views[u].params = &r->ptensor[s->units[u].first_param];
		r->views[u].grads = &r->gtensor[s->units[u].first_param];
	}
}

int mg_replica_init(struct mg_replica *r, struct mg_ctx *ctx,
		    const struct mg_model_spec *spec)
{
	memset(r, 0, sizeof *r);
	r->ctx = ctx;
	r->spec = spec;
	r->dtype = ctx->master_dtype;
	if (check_dtypes(r))
		return -1;
	for (int i = 0; i < spec->nparams; i++) {
		const struct mg_param_decl *p = &spec->params[i];
		if (is_buffer(p))
			r->n_buffers += p->numel;
		else
			r->n_params += p->numel;
		if (p->flags & MG_P_TRAIN)
			r->n_grads += p->numel;
	}
	size_t es = mg_dtype_size(r->dtype);
	r->nslots = ctx->optim ? mg_optim_state_slots(ctx->optim) : 0;
	if (mg_buf_alloc(ctx, &r->params, (size_t)r->n_params * es,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &r->buffers, (size_t)r->n_buffers * es,
			 MG_MEM_PARAMS) ||
	    mg_buf_alloc(ctx, &r->grads, (size_t)r->n_grads * es,
			 MG_MEM_GRADS))
		return -1;
	for (int k = 0; k < r->nslots; k++) {
		if (mg_buf_alloc(ctx, &r->state[k], (size_t)r->n_grads * es,
				 MG_MEM_OPTIM) ||
		    mg_memset_dev(ctx, r->state[k].ptr, 0, r->state[k].bytes))
			return -1;
	}
	r->ptensor = calloc((size_t)spec->nparams + 1, sizeof *r->ptensor);
	r->gtensor = calloc((size_t)spec->nparams + 1, sizeof *r->gtensor);
	r->goff = calloc((size_t)spec->nparams + 1, sizeof *r->goff);
	r->views = calloc((size_t)spec->nunits + 1, sizeof *r->views);
	if (!r->ptensor || !r->gtensor || !r->goff || !r->views)
		return mg_error("out of memory for parameter tables");
	layout(r);
	/* Initial values come from the model, unit by unit, on the host. */
	for (int u = 0; u < spec->nunits; u++) {
		const struct mg_unit_decl *ud = &spec->units[u];
		struct mg_tensor *host = r->views[u].params;
		struct mg_tensor tmp[ud->nparams > 0 ? ud->nparams : 1];
		if (ctx->dev->kind != MG_DEV_CPU) {
			/* Device storage: stage through host memory. */
			for (int i = 0; i < ud->nparams; i++) {
				tmp[i] = host[i];
				tmp[i].device = MG_DEV_CPU;
				tmp[i].data = malloc(mg_tensor_bytes(&host[i]));
				if (!tmp[i].data)
					return mg_error("out of memory");
			}
			host = tmp;
		}
		if (mg_init_unit(ctx, spec, u, host))
			return -1;
		if (ctx->dev->kind != MG_DEV_CPU) {
			for (int i = 0; i < ud->nparams; i++) {
				struct mg_tensor *d = &r->views[u].params[i];
				int rc = mg_copy_h2d(ctx, d->data, tmp[i].data,
						     mg_tensor_bytes(d));
				free(tmp[i].data);
				if (rc)
					return rc;
			}
		}
	}
	return 0;
}

void mg_replica_free(struct mg_replica *r)
{
	if (!r->ctx)
		return;
	mg_buf_free(r->ctx, &r->params);
	mg_buf_free(r->ctx, &r->buffers);
	mg_buf_free(r->ctx, &r->grads);
	for (int k = 0; k < MG_REPLICA_MAX_SLOTS; k++)
		mg_buf_free(r->ctx, &r->state[k]);
	free(r->ptensor);
	free(r->gtensor);
	free(r->goff);
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
	return mg_memset_dev(r->ctx, r->grads.ptr, 0, r->grads.bytes);
}

double mg_replica_grad_norm(struct mg_replica *r, double grad_mul)
{
	double s = 0;
	if (r->dtype == MG_F64) {
		const double *g = r->grads.ptr;
		for (int64_t i = 0; i < r->n_grads; i++)
			s += g[i] * g[i];
	} else {
		const float *g = r->grads.ptr;
		for (int64_t i = 0; i < r->n_grads; i++)
			s += (double)g[i] * g[i];
	}
	return sqrt(s) * fabs(grad_mul);
}

int mg_replica_step(struct mg_replica *r, const struct mg_optim_hparams *h,
		    struct mg_step_report *rep)
{
	struct mg_optim_hparams hh = *h;
	rep->grad_norm = mg_replica_grad_norm(r, h->grad_mul);
	if (!isfinite(rep->grad_norm)) {
		rep->skipped = true;
		return 0;
	}
	if (h->max_grad_norm > 0 && rep->grad_norm > h->max_grad_norm)
		hh.grad_mul *= h->max_grad_norm / (rep->grad_norm + 1e-6);
	size_t es = mg_dtype_size(r->dtype);
	const struct mg_model_spec *s = r->spec;
	for (int i = 0; i < s->nparams; i++) {
		const struct mg_param_decl *p = &s->params[i];
		if (!(p->flags & MG_P_TRAIN))
			continue;
		void *state[MG_REPLICA_MAX_SLOTS] = {0};
		for (int k = 0; k < r->nslots; k++)
			state[k] = (char *)r->state[k].ptr +
				   (size_t)r->goff[i] * es;
		bool decay = hh.decay_all || !(p->flags & MG_P_NO_DECAY);
		if (mg_optim_update(r->ctx, &hh, r->dtype, r->ptensor[i].data,
				    r->gtensor[i].data, state, p->numel, decay,
				    false))
			return -1;
	}
	return 0;
}

static void full_name(char *out, size_t n, const char *kind,
		      const struct mg_model_spec *s, int unit, int i)
{
	snprintf(out, n, "%s/%s.%s", kind, s->units[unit].name,
		 s->params[s->units[unit].first_param + i].name);
}

/* Visit every (name, tensor) the replica saves: parameters, buffers and
 * optimizer slots of trained parameters. */
static int visit(struct mg_replica *r, struct mg_ckpt *ck, bool save)
{
	const struct mg_model_spec *s = r->spec;
	size_t es = mg_dtype_size(r->dtype);
	char name[3 * MG_NAME_MAX];
	for (int u = 0; u < s->nunits; u++) {
		for (int i = 0; i < s->units[u].nparams; i++) {
			int pi = s->units[u].first_param + i;
			full_name(name, sizeof name, "param", s, u, i);
			struct mg_tensor *t = &r->ptensor[pi];
			if (save ? mg_ckpt_put(ck, name, t)
				 : mg_ckpt_get(ck, name, t))
				return -1;
			if (r->goff[pi] < 0)
				continue;
			for (int k = 0; k < r->nslots; k++) {
				char kind[64];
				snprintf(kind, sizeof kind, "optim/%s",
					 mg_optim_slot_name(r->ctx->optim, k));
				full_name(name, sizeof name, kind, s, u, i);
				struct mg_tensor st = *t;
				st.data = (char *)r->state[k].ptr +
					  (size_t)r->goff[pi] * es;
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
	return visit(r, ck, false);
}
