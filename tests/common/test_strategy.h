/*
 * test_strategy.h - a test-local strategy for model plugin tests: every
 * unit in host memory, driven through the real contract, checking it as
 * it goes (acquire and release pair up per phase, gradients lent only in
 * backward, grads_ready once per unit in reverse unit order). ts_setup
 * takes the model's ops.
 */
#ifndef MG_TEST_STRATEGY_H
#define MG_TEST_STRATEGY_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "mg/mg.h"
#include "test_util.h"

/* A [model] section's options from INI text, built and validated by the
 * core's config code against the plugin's schema; NULL (diagnostics
 * printed unless quiet) when they do not validate. */
static inline struct mg_opts *ts_opts(const struct mg_option *schema,
				      const char *lines, bool quiet)
{
	const struct mg_option *schemas[1] = {schema};
	struct mg_diag d = {0};
	char text[2048];
	snprintf(text, sizeof text, "[model]\n%s", lines);
	struct mg_config *cfg =
		mg_config_parse_string(text, "test.ini", NULL, &d);
	struct mg_opts *o = mg_opts_build(cfg, "model", schemas, 1, &d);
	if (mg_diag_count(&d)) {
		if (!quiet)
			mg_diag_print(stderr, &d);
		mg_opts_free(o);
		o = NULL;
	}
	mg_diag_free(&d);
	mg_config_free(cfg);
	return o;
}

struct tstrat {
	struct mg_ctx *ctx;
	struct mg_model_spec spec;
	struct mg_tensor *p, *g; /* per parameter; g data NULL if none */
	struct mg_unit_view *views;
	int *held;  /* phase + 1 while acquired */
	int *ready; /* grads_ready calls since zero_grads */
	int *bwd;   /* backward acquires since zero_grads */
	int last_ready;
	double *t_unit; /* bench: seconds per unit and phase (3 per unit) */
	double t_acq;
};

static inline void violation(struct tstrat *s, const char *fmt, ...)
{
	va_list ap;
	char buf[256];
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	(void)s;
	fail("contract: %s", buf);
}

static inline struct mg_unit_view *ts_acquire(void *self, int unit,
					      enum mg_phase ph)
{
	struct tstrat *s = self;
	if (unit < 0 || unit >= s->spec.nunits) {
		violation(s, "acquire of unit %d", unit);
		mg_error("no unit %d", unit);
		return NULL;
	}
	if (s->held[unit])
		violation(s, "unit %d acquired twice", unit);
	if (ph == MG_PHASE_BACKWARD && s->ctx->training == false)
		violation(s, "backward acquire in eval mode");
	s->held[unit] = (int)ph + 1;
	if (ph == MG_PHASE_BACKWARD)
		s->bwd[unit]++;
	if (s->t_unit)
		s->t_acq = mg_now();
	struct mg_unit_view *v = &s->views[unit];
	v->grads = ph == MG_PHASE_BACKWARD
			   ? &s->g[s->spec.units[unit].first_param]
			   : NULL;
	return v;
}

static inline void ts_release(void *self, int unit, enum mg_phase ph)
{
	struct tstrat *s = self;
	if (unit < 0 || unit >= s->spec.nunits || s->held[unit] != (int)ph + 1)
		violation(s, "release of unit %d in phase %d not acquired so",
			  unit, (int)ph);
	else
		s->held[unit] = 0;
	if (s->t_unit)
		s->t_unit[unit * 3 + (int)ph] += mg_now() - s->t_acq;
}

static inline int ts_grads_ready(void *self, int unit)
{
	struct tstrat *s = self;
	if (s->held[unit] != MG_PHASE_BACKWARD + 1)
		violation(s, "grads_ready(%d) outside its backward acquire",
			  unit);
	if (s->ready[unit]++)
		violation(s, "grads_ready(%d) called twice", unit);
	if (unit >= s->last_ready)
		violation(s, "grads_ready(%d) after unit %d: not reverse order",
			  unit, s->last_ready);
	s->last_ready = unit;
	return 0;
}

static const struct mg_strategy_ops tstrat_ops = {
	.acquire = ts_acquire,
	.release = ts_release,
	.grads_ready = ts_grads_ready,
};

static inline struct mg_tensor host_tensor(enum mg_dtype dt, int ndim,
					   const int64_t *shape)
{
	struct mg_tensor t = mg_tensor_make(NULL, dt, MG_DEV_CPU, ndim, shape);
	t.data = calloc(1, mg_tensor_bytes(&t) + 8);
	return t;
}

static inline void ts_zero_grads(struct tstrat *s)
{
	for (int i = 0; i < s->spec.nparams; i++)
		if (s->g[i].data)
			memset(s->g[i].data, 0, mg_tensor_bytes(&s->g[i]));
	memset(s->ready, 0, sizeof(int) * (size_t)s->spec.nunits);
	memset(s->bwd, 0, sizeof(int) * (size_t)s->spec.nunits);
	s->last_ready = s->spec.nunits;
}

static inline int ts_setup(struct tstrat *s, struct mg_ctx *ctx,
			   const struct mg_model_ops *M)
{
	memset(s, 0, sizeof *s);
	s->ctx = ctx;
	if (M->declare(ctx->model, &s->spec))
		return -1;
	const int np = s->spec.nparams, nu = s->spec.nunits;
	s->p = calloc((size_t)np, sizeof *s->p);
	s->g = calloc((size_t)np, sizeof *s->g);
	s->views = calloc((size_t)nu, sizeof *s->views);
	s->held = calloc((size_t)nu, sizeof *s->held);
	s->ready = calloc((size_t)nu, sizeof *s->ready);
	s->bwd = calloc((size_t)nu, sizeof *s->bwd);
	for (int i = 0; i < np; i++) {
		const struct mg_param_decl *d = &s->spec.params[i];
		CHECK(d->dtype == MG_DTYPE_AUTO || d->dtype == MG_NF4);
		/* An NF4 parameter: its blob, filled by init, lent as is. */
		s->p[i] = host_tensor(d->dtype == MG_NF4 ? MG_NF4
							 : ctx->compute_dtype,
				      d->ndim, d->shape);
		s->g[i] = mg_tensor_make(NULL, ctx->compute_dtype, MG_DEV_CPU,
					 d->ndim, d->shape);
		if (d->flags & MG_P_TRAIN)
			s->g[i] = host_tensor(ctx->compute_dtype, d->ndim,
					      d->shape);
	}
	for (int u = 0; u < nu; u++) {
		const struct mg_unit_decl *ud = &s->spec.units[u];
		s->views[u].nparams = ud->nparams;
		s->views[u].params = &s->p[ud->first_param];
		if (mg_init_unit(ctx, &s->spec, u, &s->p[ud->first_param]))
			return -1;
	}
	ctx->strategy = s;
	ctx->strategy_ops = &tstrat_ops;
	ts_zero_grads(s);
	return 0;
}

static inline void ts_free(struct tstrat *s)
{
	for (int i = 0; i < s->spec.nparams; i++) {
		free(s->p[i].data);
		free(s->g[i].data);
	}
	free(s->p);
	free(s->g);
	free(s->views);
	free(s->held);
	free(s->ready);
	free(s->bwd);
	free(s->t_unit);
	mg_spec_free(&s->spec);
}

/* Does unit u hold a trained parameter? */
static inline bool ts_trains(const struct tstrat *s, int u)
{
	const struct mg_unit_decl *d = &s->spec.units[u];
	for (int i = d->first_param; i < d->first_param + d->nparams; i++)
		if (s->spec.params[i].flags & MG_P_TRAIN)
			return true;
	return false;
}

/* Every unit released, and after a backward every unit that holds a
 * trained parameter or that backward acquired reported ready once (a
 * frozen unit backward never visits, such as DPO's reference copy, has
 * nothing to report: strategies reduce nothing for it). */
static inline void ts_check_step(struct tstrat *s, bool after_backward)
{
	for (int u = 0; u < s->spec.nunits; u++) {
		if (s->held[u])
			violation(s, "unit %d still acquired", u);
		const int want = ts_trains(s, u) || s->bwd[u] ? 1 : 0;
		if (after_backward && s->ready[u] != want)
			violation(s, "unit %d reported ready %d times", u,
				  s->ready[u]);
	}
}

/* Index of parameter "unit.param" in the spec, -1 if absent. */
static inline int find_param(const struct mg_model_spec *sp, const char *full)
{
	for (int u = 0; u < sp->nunits; u++) {
		const struct mg_unit_decl *ud = &sp->units[u];
		size_t ln = strlen(ud->name);
		if (strncmp(full, ud->name, ln) || full[ln] != '.')
			continue;
		for (int i = 0; i < ud->nparams; i++)
			if (!strcmp(sp->params[ud->first_param + i].name,
				    full + ln + 1))
				return ud->first_param + i;
	}
	return -1;
}

#endif
