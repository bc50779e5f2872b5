/*
 * llama_env.h - what the llama plugin's tests share (test_llama.c,
 * test_qlora.c, test_llama_dpo.c): the plugin loaded by main, a model
 * created from INI text on the CPU under the contract-checking host
 * strategy of tests/common/test_strategy.h, and a small ragged token
 * batch.
 */
#ifndef MG_TEST_LLAMA_ENV_H
#define MG_TEST_LLAMA_ENV_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/test_strategy.h"
#include "../common/test_util.h"
#include "config/config.h"
#include "llama_plugin.h"
#include "mg/mg.h"

/* The float type env_open's contexts compute in (fp64 unless a test
 * says otherwise). */
static enum mg_dtype env_dtype = MG_F64;

static inline struct mg_opts *opts(const char *lines)
{
	return ts_opts(P->options, lines, false);
}

struct env {
	struct mg_device dev;
	struct mg_ctx ctx;
	float grad_scale;
	void *model;
	struct tstrat st;
};

static inline int env_open(struct env *e, const char *lines)
{
	memset(e, 0, sizeof *e);
	e->dev.kind = MG_DEV_CPU;
	e->dev.threads = 2;
	e->ctx.struct_size = sizeof e->ctx;
	e->ctx.world = 1;
	e->ctx.micro_count = 1;
	e->ctx.dev = &e->dev;
	e->ctx.compute_dtype = e->ctx.master_dtype = env_dtype;
	e->ctx.seed = 3;
	e->ctx.grad_scale =
		mg_tensor_make(&e->grad_scale, MG_F32, MG_DEV_CPU, 0, NULL);
	e->grad_scale = 1;
	struct mg_opts *o = opts(lines);
	if (!o)
		return -1;
	int rc = P->create(o, &e->ctx, &e->model);
	mg_opts_free(o);
	if (rc)
		return -1;
	e->ctx.model = e->model;
	e->ctx.model_ops = M;
	if (ts_setup(&e->st, &e->ctx, M)) {
		fail("setup: %s", mg_last_error());
		return -1;
	}
	return 0;
}

static inline void env_close(struct env *e)
{
	ts_free(&e->st);
	if (e->model)
		P->destroy(e->model);
}

/* Two rows of T = 12: row 0 ten tokens of one document with a masked
 * prompt, row 1 two packed documents (7 + 5 tokens). */
#define BN 2
#define BT 12
struct tbatch {
	struct mg_batch b;
	int32_t ids[BN * BT], labels[BN * BT], pos[BN * BT], lens[BN];
};

static inline void tbatch_make(struct tbatch *t, int vocab)
{
	memset(t, 0, sizeof *t);
	int64_t s2[2] = {BN, BT}, s1[1] = {BN};
	for (int i = 0; i < BN * BT; i++) {
		t->ids[i] = (int32_t)((i * 7 + 3) % vocab);
		t->labels[i] = (int32_t)((i * 5 + 1) % vocab);
	}
	t->lens[0] = 10;
	t->lens[1] = 12;
	for (int j = 0; j < BT; j++) {
		t->pos[j] = j;
		t->pos[BT + j] = j < 7 ? j : j - 7;
	}
	for (int j = 0; j < 3; j++)
		t->labels[j] = MG_IGNORE_INDEX; /* prompt */
	for (int j = 10; j < BT; j++) {		/* padding of row 0 */
		t->ids[j] = 0;
		t->labels[j] = MG_IGNORE_INDEX;
		t->pos[j] = 0;
	}
	t->labels[BT + 6] = MG_IGNORE_INDEX; /* end of the first document */
	t->b.input = mg_tensor_make(t->ids, MG_I32, MG_DEV_CPU, 2, s2);
	t->b.labels = mg_tensor_make(t->labels, MG_I32, MG_DEV_CPU, 2, s2);
	t->b.positions = mg_tensor_make(t->pos, MG_I32, MG_DEV_CPU, 2, s2);
	t->b.lens = mg_tensor_make(t->lens, MG_I32, MG_DEV_CPU, 1, s1);
	t->b.lens_host = t->lens;
	t->b.n = BN;
	t->b.seq = BT;
}

/* Forwards of loss_of run in training mode (dropout on). */
static bool fd_training;

/* The per-token mean loss of a forward (training mode off unless
 * fd_training). */
static inline double loss_of(struct env *e, const struct mg_batch *b,
			     double *count)
{
	double m[MG_METRIC_N];
	int64_t nm = MG_METRIC_N;
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	e->ctx.training = fd_training;
	if (M->forward(e->model, &e->ctx, b, &mt)) {
		fail("forward: %s", mg_last_error());
		return NAN;
	}
	ts_check_step(&e->st, false);
	if (count)
		*count = m[MG_METRIC_COUNT];
	return m[MG_METRIC_LOSS_SUM] / m[MG_METRIC_COUNT];
}

/* Every trained tensor's gradient from the step just run (times gfix,
 * the F32 grad_scale's correction) against central differences of
 * loss_of at h = 1e-5, at `per` elements of each drawn with `seed`;
 * relative errors over tol fail (the first five named with `what`).
 * Returns the values checked; *worst the largest relative error. */
static inline int fd_check(struct env *e, const struct mg_batch *b, double gfix,
			   int per, uint64_t seed, double tol, const char *what,
			   double *worst)
{
	int checked = 0, bad = 0;
	*worst = 0;
	for (int i = 0; i < e->st.spec.nparams; i++) {
		struct mg_tensor *p = &e->st.p[i], *g = &e->st.g[i];
		const int64_t n = mg_tensor_numel(p);
		if (!g->data)
			continue; /* frozen */
		for (int k = 0; k < per; k++) {
			int64_t j = (int64_t)(mg_rng_u64(seed + (uint64_t)i,
							 (uint64_t)k) %
					      (uint64_t)n);
			double *w = (double *)p->data + j, w0 = *w, h = 1e-5;
			*w = w0 + h;
			double lp = loss_of(e, b, NULL);
			*w = w0 - h;
			double lm = loss_of(e, b, NULL);
			*w = w0;
			double fd = (lp - lm) / (2 * h);
			double an = ((double *)g->data)[j] * gfix;
			double err = fabs(fd - an) / (fabs(fd) + 1e-6);
			*worst = fmax(*worst, err);
			if (err > tol && bad++ < 5)
				fail("%s: %s[%lld]: backward %.10g, finite "
				     "difference %.10g",
				     what, e->st.spec.params[i].name,
				     (long long)j, an, fd);
			checked++;
		}
	}
	if (bad > 5)
		fail("%s: %d more gradients off", what, bad - 5);
	return checked;
}

#endif
