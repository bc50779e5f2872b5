/*
 * spec.c - building a model's unit/parameter declaration.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static int grow(void **p, int *cap, int need, size_t elem)
{
	if (need <= *cap)
		return 0;
	int ncap = *cap ? *cap * 2 : 16;
	while (ncap < need)
		ncap *= 2;
	void *q = realloc(*p, (size_t)ncap * elem);
	if (!q)
		return mg_error("out of memory growing the model spec");
	*p = q;
	*cap = ncap;
	return 0;
}

int mg_spec_add_unit(struct mg_model_spec *s, const char *name)
{
	if (strlen(name) >= MG_NAME_MAX)
		return mg_error("unit name '%s' longer than %d", name,
				MG_NAME_MAX - 1);
	if (grow((void **)&s->units, &s->cap_units, s->nunits + 1,
		 sizeof *s->units))
		return -1;
	struct mg_unit_decl *u = &s->units[s->nunits];
	memset(u, 0, sizeof *u);
	strcpy(u->name, name);
	u->first_param = s->nparams;
	return s->nunits++;
}

int mg_spec_add_param(struct mg_model_spec *s, const char *name,
		      enum mg_dtype dtype, int flags, int ndim,
		      const int64_t *shape)
{
	if (s->nunits == 0)
		return mg_error("parameter '%s' declared before any unit",
				name);
	if (strlen(name) >= MG_NAME_MAX)
		return mg_error("parameter name '%s' longer than %d", name,
				MG_NAME_MAX - 1);
	if (ndim < 1 || ndim > MG_MAX_DIMS)
		return mg_error("parameter '%s': %d dimensions (1..%d)", name,
				ndim, MG_MAX_DIMS);
	if ((flags & MG_P_TRAIN) && (flags & MG_P_BUFFER))
		return mg_error("parameter '%s' is both trained and a buffer",
				name);
	if (dtype != MG_DTYPE_AUTO && dtype != MG_NF4)
		return mg_error("parameter '%s': dtype %s (declare auto, or "
				"NF4 for a frozen 4-bit weight)",
				name, mg_dtype_name(dtype));
	/* NF4 is a storage format, not an arithmetic one: no gradient,
	 * no optimizer, no in-place update (QLoRA's frozen base). */
	if (dtype == MG_NF4 && (flags & (MG_P_TRAIN | MG_P_BUFFER)))
		return mg_error("parameter '%s' is declared NF4 and %s; NF4 "
				"parameters must be frozen (no MG_P_TRAIN, "
				"no MG_P_BUFFER)",
				name,
				(flags & MG_P_TRAIN) ? "trained" : "a buffer");
	if (grow((void **)&s->params, &s->cap_params, s->nparams + 1,
		 sizeof *s->params))
		return -1;
	struct mg_param_decl *p = &s->params[s->nparams];
	memset(p, 0, sizeof *p);
	strcpy(p->name, name);
	p->dtype = dtype;
	p->flags = flags;
	p->ndim = ndim;
	p->numel = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] <= 0)
			return mg_error("parameter '%s': dimension %d is %lld",
					name, i, (long long)shape[i]);
		p->shape[i] = shape[i];
		p->numel *= shape[i];
	}
	s->nparams++;
	return s->units[s->nunits - 1].nparams++;
}

void mg_spec_free(struct mg_model_spec *s)
{
	free(s->units);
	free(s->params);
	memset(s, 0, sizeof *s);
}

int64_t mg_spec_numel(const struct mg_model_spec *s, int flag_mask)
{
	int64_t n = 0;
	for (int i = 0; i < s->nparams; i++)
		if (!flag_mask || (s->params[i].flags & flag_mask))
			n += s->params[i].numel;
	return n;
}
