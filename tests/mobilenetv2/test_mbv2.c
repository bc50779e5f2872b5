/*
 * test_mbv2.c - the mobilenetv2 model plugin through the real contract.
 *
 *   test_mobilenetv2 PLUGIN.so TEST
 *
 * The plugin .so is dlopen()ed and created from INI text through the
 * core's option code (compiled in), and driven by a test-local strategy
 * that keeps every unit in host memory and checks the contract: acquire
 * and release pair up per phase, gradients are lent only in backward, and
 * grads_ready comes once per unit, in reverse unit order.
 *
 * Tests: params (declared counts and names against torchvision), init
 * (distributions, determinism), gradcheck (fp64 finite differences on a
 * sample of every unit's parameters), gradcheck_dropout, bn_modes (train
 * vs eval batch norm), precision (fp32 vs fp64), sizes (many input sizes,
 * channels, options), determinism, errors.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test_strategy.h"
#include "../common/test_util.h"
#include "config/config.h"
#include "mg/mg.h"

/* Seed of parameters and data in the gradient checks (MG_TEST_SEED). */
static uint64_t seed = 11;

static const struct mg_plugin *P;
static const struct mg_model_ops *M;

/* ------------------------------------------------------------------ */
/* Options from INI text, as the core builds them.                      */

static struct mg_opts *opts_q(const char *lines, bool quiet)
{
	return ts_opts(P->options, lines, quiet);
}

/* ------------------------------------------------------------------ */
/* A test-local strategy: full host storage, contract checks.           */

/* ------------------------------------------------------------------ */
/* A model instance with its context.                                  */

struct env {
	struct mg_device dev;
	struct mg_ctx ctx;
	float grad_scale;
	void *model;
	struct tstrat st;
};

static int env_open(struct env *e, const char *lines, enum mg_dtype dt,
		    uint64_t seed)
{
	memset(e, 0, sizeof *e);
	e->dev.kind = MG_DEV_CPU;
	e->ctx.struct_size = sizeof e->ctx;
	e->ctx.world = 1;
	e->ctx.dev = &e->dev;
	e->ctx.compute_dtype = e->ctx.master_dtype = dt;
	e->ctx.seed = seed;
	e->ctx.grad_scale =
		mg_tensor_make(&e->grad_scale, MG_F32, MG_DEV_CPU, 0, NULL);
	e->grad_scale = 1;
	struct mg_opts *o = opts_q(lines, false);
	if (!o) {
		fail("options '%s' do not validate", lines);
		return -1;
	}
	int rc = P->create(o, &e->ctx, &e->model);
	mg_opts_free(o);
	if (rc) {
		fail("create: %s", mg_last_error());
		return -1;
	}
	e->ctx.model = e->model;
	e->ctx.model_ops = M;
	if (ts_setup(&e->st, &e->ctx, M)) {
		fail("setup: %s", mg_last_error());
		return -1;
	}
	return 0;
}

static void env_close(struct env *e)
{
	ts_free(&e->st);
	if (e->model)
		P->destroy(e->model);
}

/* A batch [n, C, H, W] of random values in [-1, 1) and random labels. */
struct batch {
	struct mg_batch b;
	int64_t shape[4];
};

static void batch_make(struct batch *bt, enum mg_dtype dt, int64_t n, int64_t C,
		       int64_t H, int64_t W, int classes, uint64_t key)
{
	int64_t s[4] = {n, C, H, W}, ls[1] = {n};
	memset(bt, 0, sizeof *bt);
	bt->b.input = host_tensor(dt, 4, s);
	bt->b.labels = host_tensor(MG_I32, 1, ls);
	bt->b.n = n;
	for (int64_t i = 0; i < n * C * H * W; i++) {
		double v = 2 * mg_rng_uniform(key, (uint64_t)i) - 1;
		if (dt == MG_F64)
			((double *)bt->b.input.data)[i] = v;
		else
			((float *)bt->b.input.data)[i] = (float)v;
	}
	for (int64_t i = 0; i < n; i++)
		((int32_t *)bt->b.labels.data)[i] =
			(int32_t)(mg_rng_uniform(key + 1, (uint64_t)i) *
				  classes);
}

static void batch_free(struct batch *bt)
{
	free(bt->b.input.data);
	free(bt->b.labels.data);
}

/* Forward (training or eval); the loss sum, NAN on error. */
static double fwd(struct env *e, const struct mg_batch *b, bool training,
		  double metrics[MG_METRIC_N])
{
	double m[MG_METRIC_N];
	int64_t s[1] = {MG_METRIC_N};
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, s);
	e->ctx.training = training;
	if (M->forward(e->model, &e->ctx, b, &mt)) {
		fail("forward: %s", mg_last_error());
		return NAN;
	}
	ts_check_step(&e->st, false);
	if (metrics)
		memcpy(metrics, m, sizeof m);
	return m[MG_METRIC_LOSS_SUM];
}

/* One training forward and backward into zeroed gradients. */
static int step(struct env *e, const struct mg_batch *b, double *loss)
{
	ts_zero_grads(&e->st);
	double l = fwd(e, b, true, NULL);
	if (isnan(l))
		return -1;
	if (M->backward(e->model, &e->ctx)) {
		fail("backward: %s", mg_last_error());
		return -1;
	}
	ts_check_step(&e->st, true);
	if (loss)
		*loss = l;
	return 0;
}

static double elem(const struct mg_tensor *t, int64_t i)
{
	return t->dtype == MG_F64 ? ((double *)t->data)[i]
				  : ((float *)t->data)[i];
}

/* ------------------------------------------------------------------ */
/* params: counts and names against torchvision.                        */

/* torchvision's _make_divisible, written out again here. */
static int tv_div(double v, int d)
{
	int n = (int)(v + d / 2.0) / d * d;
	if (n < d)
		n = d;
	if (n < 0.9 * v)
		n += d;
	return n;
}

/* Trainable parameters of torchvision.models.mobilenet_v2 with the first
 * conv taking `in` channels, counted from the architecture. */
static int64_t tv_trainable(int in, int classes, double w)
{
	static const int tab[7][4] = {
		{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
		{6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
	int64_t inp = tv_div(32 * w, 8), last = tv_div(1280 * fmax(1, w), 8);
	int64_t n = 9 * in * inp + 2 * inp;
	for (int r = 0; r < 7; r++) {
		int64_t oup = tv_div(tab[r][1] * w, 8);
		for (int i = 0; i < tab[r][2]; i++) {
			int64_t hid = inp * tab[r][0];
			if (tab[r][0] != 1)
				n += inp * hid + 2 * hid;
			n += 9 * hid + 2 * hid + hid * oup + 2 * oup;
			inp = oup;
		}
	}
	return n + inp * last + 2 * last + last * classes + classes;
}

/* Option lines as one line, for messages. */
static const char *flat(const char *lines, char *buf, size_t len)
{
	snprintf(buf, len, "%s", lines);
	for (char *c = buf; *c; c++)
		if (*c == '\n')
			*c = c[1] ? ',' : 0;
	return buf;
}

static void expect_count(const char *lines, int in, int classes, double w,
			 int64_t known)
{
	struct env e;
	if (env_open(&e, lines, MG_F32, 1))
		return;
	const int64_t got = mg_spec_numel(&e.st.spec, MG_P_TRAIN);
	const int64_t want = tv_trainable(in, classes, w);
	if (got != want)
		fail("'%s': %lld trainable parameters, architecture says %lld",
		     lines, (long long)got, (long long)want);
	if (known && got != known)
		fail("'%s': %lld trainable parameters, torchvision has %lld",
		     lines, (long long)got, (long long)known);
	char b[256];
	printf("  [%s] %lld trainable\n", flat(lines, b, sizeof b),
	       (long long)got);
	env_close(&e);
}

static void test_params(void)
{
	/* torchvision mobilenet_v2(): 3,504,872 parameters (its docs). */
	expect_count("in_channels = 3\nnum_classes = 1000\n", 3, 1000, 1,
		     3504872);
	/* 10 classes: 3504872 - 1280 * 990 - 990 */
	expect_count("in_channels = 3\nnum_classes = 10\n", 3, 10, 1, 2236682);
	/* 1 input channel: 32 * 9 * 2 fewer stem weights than 3 channels */
	expect_count("in_channels = 1\nnum_classes = 10\n", 1, 10, 1, 2236106);
	expect_count("width_mult = 0.25\n", 1, 10, 0.25, 0);
	expect_count("width_mult = 0.5\n", 1, 10, 0.5, 0);
	expect_count("width_mult = 0.75\nin_channels = 3\n", 3, 10, 0.75, 0);
	/* torchvision mobilenet_v2(width_mult=1.4): 6,108,776. */
	expect_count("width_mult = 1.4\nnum_classes = 1000\nin_channels = 3\n",
		     3, 1000, 1.4, 6108776);

	struct env e;
	if (env_open(&e, "", MG_F32, 1))
		return;
	const struct mg_model_spec *sp = &e.st.spec;
	CHECK(sp->nunits == 20);
	CHECK(!strcmp(sp->units[0].name, "features.0"));
	CHECK(!strcmp(sp->units[18].name, "features.18"));
	CHECK(!strcmp(sp->units[19].name, "classifier"));
	/* torchvision state_dict keys and shapes. */
	static const struct {
		const char *name;
		int ndim;
		int64_t shape[4];
		int flags;
	} keys[] = {
		{"features.0.0.weight", 4, {32, 1, 3, 3}, MG_P_TRAIN},
		{"features.0.1.weight",
		 1,
		 {32},
		 MG_P_TRAIN | MG_P_NO_DECAY | MG_P_FP32},
		{"features.0.1.running_var", 1, {32}, MG_P_BUFFER},
		{"features.1.conv.0.0.weight", 4, {32, 1, 3, 3}, MG_P_TRAIN},
		{"features.1.conv.1.weight", 4, {16, 32, 1, 1}, MG_P_TRAIN},
		{"features.1.conv.2.running_mean", 1, {16}, MG_P_BUFFER},
		{"features.2.conv.0.0.weight", 4, {96, 16, 1, 1}, MG_P_TRAIN},
		{"features.2.conv.1.0.weight", 4, {96, 1, 3, 3}, MG_P_TRAIN},
		{"features.2.conv.2.weight", 4, {24, 96, 1, 1}, MG_P_TRAIN},
		{"features.2.conv.3.bias",
		 1,
		 {24},
		 MG_P_TRAIN | MG_P_NO_DECAY | MG_P_FP32},
		{"features.17.conv.2.weight", 4, {320, 960, 1, 1}, MG_P_TRAIN},
		{"features.18.0.weight", 4, {1280, 320, 1, 1}, MG_P_TRAIN},
		{"features.18.1.running_mean", 1, {1280}, MG_P_BUFFER},
		{"classifier.1.weight", 2, {10, 1280}, MG_P_TRAIN},
		{"classifier.1.bias", 1, {10}, MG_P_TRAIN | MG_P_NO_DECAY},
	};
	for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
		int i = find_param(sp, keys[k].name);
		if (i < 0) {
			fail("no parameter %s", keys[k].name);
			continue;
		}
		const struct mg_param_decl *d = &sp->params[i];
		bool ok = d->ndim == keys[k].ndim && d->flags == keys[k].flags;
		for (int j = 0; ok && j < d->ndim; j++)
			ok = d->shape[j] == keys[k].shape[j];
		if (!ok)
			fail("parameter %s: wrong shape or flags",
			     keys[k].name);
	}
	/* 52 batch norms, two buffers each; 158 trained tensors (torchvision
	 * has 158 parameters and 156 buffers with num_batches_tracked). */
	int nbuf = 0, ntrain = 0;
	for (int i = 0; i < sp->nparams; i++) {
		nbuf += !!(sp->params[i].flags & MG_P_BUFFER);
		ntrain += !!(sp->params[i].flags & MG_P_TRAIN);
	}
	CHECK(nbuf == 104);
	CHECK(ntrain == 158);
	env_close(&e);
}

/* ------------------------------------------------------------------ */
/* init                                                                */

static void test_init(void)
{
	struct env a, b, c;
	if (env_open(&a, "", MG_F64, 5) || env_open(&b, "", MG_F64, 5) ||
	    env_open(&c, "", MG_F64, 6))
		return;
	const struct mg_model_spec *sp = &a.st.spec;
	bool same = true, diff = false;
	for (int i = 0; i < sp->nparams; i++) {
		const size_t bytes = mg_tensor_bytes(&a.st.p[i]);
		same &= !memcmp(a.st.p[i].data, b.st.p[i].data, bytes);
		diff |= !!memcmp(a.st.p[i].data, c.st.p[i].data, bytes);
	}
	CHECK(same); /* same seed, same values */
	CHECK(diff); /* another seed, other values */
	/* Distributions: kaiming normal fan_out for convs, N(0, 0.01) for
	 * the linear layer, BN 1/0, running stats 0/1. */
	struct {
		const char *name;
		double std;
	} w[] = {
		{"features.18.0.weight", sqrt(2.0 / 1280)},
		{"features.17.conv.1.0.weight", sqrt(2.0 / (960 * 9))},
		{"features.16.conv.0.0.weight", sqrt(2.0 / 960)},
		{"classifier.1.weight", 0.01},
	};
	for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
		int i = find_param(sp, w[k].name);
		if (i < 0) {
			fail("no %s", w[k].name);
			continue;
		}
		const int64_t n = mg_tensor_numel(&a.st.p[i]);
		double s = 0, ss = 0;
		for (int64_t j = 0; j < n; j++) {
			s += elem(&a.st.p[i], j);
			ss += elem(&a.st.p[i], j) * elem(&a.st.p[i], j);
		}
		double mean = s / n, sd = sqrt(ss / n - mean * mean);
		/* Standard error of sd is sd / sqrt(2n): allow 6 of them. */
		if (fabs(sd - w[k].std) > 6 * w[k].std / sqrt(2.0 * n) ||
		    fabs(mean) > 6 * w[k].std / sqrt((double)n))
			fail("%s: mean %g sd %g, want 0 and %g", w[k].name,
			     mean, sd, w[k].std);
	}
	for (int i = 0; i < sp->nparams; i++) {
		const char *nm = sp->params[i].name;
		const size_t ln = strlen(nm);
		double want = NAN;
		if (ln > 7 && !strcmp(nm + ln - 7, ".weight") &&
		    sp->params[i].ndim == 1)
			want = 1;
		else if (ln > 5 && !strcmp(nm + ln - 5, ".bias"))
			want = 0;
		else if (strstr(nm, "running_mean"))
			want = 0;
		else if (strstr(nm, "running_var"))
			want = 1;
		if (isnan(want))
			continue;
		for (int64_t j = 0; j < sp->params[i].numel; j++)
			if (elem(&a.st.p[i], j) != want) {
				fail("%s[%lld] = %g, want %g", nm, (long long)j,
				     elem(&a.st.p[i], j), want);
				break;
			}
	}
	env_close(&a);
	env_close(&b);
	env_close(&c);
}

/* ------------------------------------------------------------------ */
/* gradcheck                                                            */

/*
 * Central differences of the scaled training loss through the strategy's
 * storage, for `per` random elements of every trained tensor. ReLU6 kinks
 * can sit within h of a pre-activation; a mismatch is retried with h/10
 * and h*10 and counted as a kink if one of those agrees.
 */
static void gradcheck(const char *lines, int64_t n, int64_t H, int per)
{
	struct env e;
	if (env_open(&e, lines, MG_F64, seed))
		return;
	/* Batch-norm affine parameters away from the init (gamma 1, beta
	 * 0): gamma in [0.5, 1.5] and beta in [2.5, 3.5] keep most ReLU6
	 * inputs away from the kinks at 0 and 6, so that finite differences
	 * rarely straddle one, and exercise general values. */
	const struct mg_model_spec *sp = &e.st.spec;
	for (int i = 0; i < sp->nparams; i++) {
		const struct mg_param_decl *d = &sp->params[i];
		if (d->ndim != 1 || !(d->flags & MG_P_NO_DECAY) ||
		    strstr(d->name, "1.bias") == d->name)
			continue; /* not a BN (the classifier's is "1.bias") */
		const bool beta = strstr(d->name, ".bias") != NULL;
		for (int64_t j = 0; j < d->numel; j++)
			((double *)e.st.p[i].data)[j] =
				(beta ? 2.5 : 0.5) +
				mg_rng_uniform(1000 + (uint64_t)i, (uint64_t)j);
	}
	struct batch bt;
	batch_make(&bt, MG_F64, n, 1, H, H, 10, seed * 7919 + 99);
	e.grad_scale = 1.0f / (float)n;
	const double scale = (double)e.grad_scale; /* as the model sees it */
	double loss0;
	if (step(&e, &bt.b, &loss0))
		goto out;
	/* Largest gradient: scales the absolute tolerance below. */
	double gmax = 0;
	for (int i = 0; i < sp->nparams; i++)
		for (int64_t j = 0; e.st.g[i].data && j < sp->params[i].numel;
		     j++)
			gmax = fmax(gmax, fabs(elem(&e.st.g[i], j)));
	int checked = 0, kinks = 0, bad = 0;
	double worst = 0;
	for (int u = 0; u < sp->nunits; u++) {
		int unit_checked = 0;
		const struct mg_unit_decl *ud = &sp->units[u];
		for (int pi = ud->first_param;
		     pi < ud->first_param + ud->nparams; pi++) {
			if (!(sp->params[pi].flags & MG_P_TRAIN))
				continue;
			struct mg_tensor *p = &e.st.p[pi];
			double *pd = p->data, *gd = e.st.g[pi].data;
			const int64_t n = mg_tensor_numel(p);
			for (int k = 0; k < per && k < n; k++) {
				int64_t j = (int64_t)(mg_rng_uniform(
							      7 + (uint64_t)pi,
							      (uint64_t)k) *
						      (double)n);
				const double an = gd[j], save = pd[j];
				bool ok = false;
				double err = 0;
				for (int tries = 0; tries < 3 && !ok; tries++) {
					const double h = tries == 0   ? 1e-6
							 : tries == 1 ? 1e-7
								      : 1e-8;
					pd[j] = save + h;
					double lp = fwd(&e, &bt.b, true, NULL);
					pd[j] = save - h;
					double lm = fwd(&e, &bt.b, true, NULL);
					pd[j] = save;
					const double fd =
						scale * (lp - lm) / (2 * h);
					const double d = fabs(fd - an);
					if (tries == 0)
						err = d / (fabs(fd) + fabs(an) +
							   1e-8);
					/* Absolute slack: rounding of the
					 * loss over 2h, and 1e-7 of the
					 * largest gradient (exactly-zero
					 * gradients, e.g. of a bias before a
					 * BN, show as amplified noise). */
					ok = d <= 1e-5 * (fabs(fd) + fabs(an)) +
							  1e-14 / h +
							  1e-7 * gmax;
					if (ok && tries > 0)
						kinks++;
					if (!ok && tries == 2) {
						fail("%s.%s[%lld]: analytic "
						     "%.10g, "
						     "finite difference %.10g",
						     ud->name,
						     sp->params[pi].name,
						     (long long)j, an, fd);
						bad++;
					}
				}
				if (err > worst && ok && fabs(an) > 1e-4 * gmax)
					worst = err;
				checked++;
				unit_checked++;
			}
		}
		if (!unit_checked)
			fail("unit %s: nothing checked", ud->name);
	}
	/* Kinks are rare; many would mean a real error hidden by retries. */
	if (kinks > checked / 5)
		fail("%d of %d checks needed another step size", kinks,
		     checked);
	char fl[256];
	printf("  [%s] n=%lld %lldx%lld loss %.6g max|g| %.3g: %d elements "
	       "of %d units, %d kink retries, %d bad, worst first-try "
	       "relative error %.3g\n",
	       flat(lines, fl, sizeof fl), (long long)n, (long long)H,
	       (long long)H, loss0, gmax, checked, sp->nunits, kinks, bad,
	       worst);
	/* Gradients of a step accumulate: a second backward without zeroing
	 * doubles every one of them. */
	{
		double **g1 = calloc((size_t)sp->nparams, sizeof *g1);
		for (int i = 0; i < sp->nparams; i++) {
			if (!e.st.g[i].data)
				continue;
			g1[i] = malloc(mg_tensor_bytes(&e.st.g[i]));
			memcpy(g1[i], e.st.g[i].data,
			       mg_tensor_bytes(&e.st.g[i]));
		}
		ts_zero_grads(&e.st);
		for (int r = 0; r < 2; r++) {
			fwd(&e, &bt.b, true, NULL);
			memset(e.st.ready, 0, sizeof(int) * (size_t)sp->nunits);
			e.st.last_ready = sp->nunits;
			if (M->backward(e.model, &e.ctx))
				fail("backward: %s", mg_last_error());
		}
		for (int i = 0; i < sp->nparams; i++) {
			double mx = 0;
			for (int64_t j = 0; g1[i] && j < sp->params[i].numel;
			     j++)
				mx = fmax(mx, fabs(elem(&e.st.g[i], j) -
						   2 * g1[i][j]) /
						      (fabs(g1[i][j]) +
						       1e-9 * gmax));
			if (mx > 1e-9)
				fail("gradient of %s does not accumulate: "
				     "relative error %g",
				     sp->params[i].name, mx);
			free(g1[i]);
		}
		free(g1);
	}
out:
	batch_free(&bt);
	env_close(&e);
}

static void test_gradcheck(void)
{
	/*
	 * Finite differences need a loss that is smooth at their scale. At
	 * 16 px the last 12 units run on 1x1 maps, where training-mode batch
	 * norm normalises over only `batch` values per channel: with batch 3
	 * or 4 the loss is chaotic there (gradients of 1e2..1e4 that finite
	 * differences reach only below h = 1e-9, checked by hand). So:
	 *
	 * the whole architecture (all 20 units) at 28 px with a stride-1 stem,
	 * every map at least 2x2;
	 */
	gradcheck("width_mult = 0.25\ndropout = 0\nstem_stride = 1\n", 3, 28,
		  2);
	/* and a shorter table at 16 px that reaches 1x1 maps (the GEMM as a
	 * linear layer, a stride-2 depthwise 2x2 -> 1x1, a residual at 1x1)
	 * with 6 values per channel. */
	gradcheck("width_mult = 0.25\ndropout = 0\n"
		  "setting = 1,16,1,1;6,24,1,2;6,32,1,2;6,64,2,2;6,96,1,1\n",
		  6, 16, 4);
}

static void test_gradcheck_dropout(void)
{
	/* The same step (seed, epoch, step, offset) draws the same mask, so
	 * finite differences see a fixed function. */
	gradcheck("width_mult = 0.25\ndropout = 0.5\n"
		  "setting = 1,16,1,1;6,24,2,2\nlast_channel = 64\n",
		  3, 16, 4);
}

/* ------------------------------------------------------------------ */
/* bn_modes                                                            */

/* Copy of all BN buffers. */
static double *save_buffers(struct env *e)
{
	const struct mg_model_spec *sp = &e->st.spec;
	int64_t n = mg_spec_numel(sp, MG_P_BUFFER), k = 0;
	double *b = malloc(sizeof(double) * (size_t)n);
	for (int i = 0; i < sp->nparams; i++)
		if (sp->params[i].flags & MG_P_BUFFER)
			for (int64_t j = 0; j < sp->params[i].numel; j++)
				b[k++] = elem(&e->st.p[i], j);
	return b;
}

static void test_bn_modes(void)
{
	struct env e;
	if (env_open(&e, "width_mult = 0.5\n", MG_F64, 3))
		return;
	const struct mg_model_spec *sp = &e.st.spec;
	struct batch bt;
	batch_make(&bt, MG_F64, 4, 1, 20, 20, 10, 5);

	/* Training forward: stem BN running stats move toward the batch
	 * statistics of the stem conv output, computed here naively. */
	const int pw = find_param(sp, "features.0.0.weight");
	const int prm = find_param(sp, "features.0.1.running_mean");
	const int prv = find_param(sp, "features.0.1.running_var");
	double *w = e.st.p[pw].data;
	const int64_t K = sp->params[pw].shape[0], H = 20, OH = 10;
	double *before = save_buffers(&e);
	fwd(&e, &bt.b, true, NULL);
	const double *x = bt.b.input.data;
	for (int64_t k = 0; k < K; k++) {
		double s = 0, ss = 0, m = 4 * OH * OH;
		for (int64_t n = 0; n < 4; n++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OH; ow++) {
					double v = 0;
					for (int i = 0; i < 3; i++)
						for (int j = 0; j < 3; j++) {
							int64_t ih = 2 * oh -
								     1 + i,
								iw = 2 * ow -
								     1 + j;
							if (ih < 0 || iw < 0 ||
							    ih >= H || iw >= H)
								continue;
							v += w[k * 9 + i * 3 +
							       j] *
							     x[(n * H + ih) *
								       H +
							       iw];
						}
					s += v;
					ss += v * v;
				}
		double mean = s / m, var = (ss - m * mean * mean) / (m - 1);
		double rm = elem(&e.st.p[prm], k), rv = elem(&e.st.p[prv], k);
		if (fabs(rm - 0.1 * mean) > 1e-10 ||
		    fabs(rv - (0.9 + 0.1 * var)) > 1e-10 * (1 + var)) {
			fail("stem channel %lld: running %g %g, want %g %g",
			     (long long)k, rm, rv, 0.1 * mean, 0.9 + 0.1 * var);
			break;
		}
	}
	/* Every BN's running stats moved. */
	double *after = save_buffers(&e);
	int64_t nb = mg_spec_numel(sp, MG_P_BUFFER), moved = 0;
	for (int64_t i = 0; i < nb; i++)
		moved += after[i] != before[i];
	if (moved < nb * 9 / 10)
		fail("a training forward moved only %lld of %lld buffer values",
		     (long long)moved, (long long)nb);
	/* A few more steps so running stats differ from the init. */
	for (int r = 0; r < 3; r++)
		step(&e, &bt.b, NULL);
	free(after);
	after = save_buffers(&e);

	/* Eval: buffers untouched; each sample's loss independent of the
	 * batch (running statistics), unlike training mode. */
	double m_eval[MG_METRIC_N];
	double l_eval = fwd(&e, &bt.b, false, m_eval);
	double *ev = save_buffers(&e);
	if (memcmp(ev, after, sizeof(double) * (size_t)nb))
		fail("an eval forward changed batch-norm buffers");
	double sum1 = 0;
	for (int64_t i = 0; i < 4; i++) {
		struct mg_batch one = bt.b;
		one.n = 1;
		one.input.shape[0] = 1;
		one.input.data = (double *)bt.b.input.data + i * H * H;
		one.labels.shape[0] = 1;
		one.labels.data = (int32_t *)bt.b.labels.data + i;
		sum1 += fwd(&e, &one, false, NULL);
	}
	if (fabs(sum1 - l_eval) > 1e-10 * fabs(l_eval))
		fail("eval loss of the batch %.12g != sum over samples %.12g",
		     l_eval, sum1);
	if (m_eval[MG_METRIC_COUNT] != 4)
		fail("eval counted %g samples", m_eval[MG_METRIC_COUNT]);
	/* Training mode couples samples through batch statistics. */
	double l_tr = fwd(&e, &bt.b, true, NULL);
	if (fabs(l_tr - l_eval) < 1e-6)
		fail("training and eval forwards agree (%g): BN mode ignored",
		     l_tr);
	/* Backward after an eval forward is refused. */
	fwd(&e, &bt.b, false, NULL);
	e.ctx.training = true;
	if (M->backward(e.model, &e.ctx) == 0)
		fail("backward after an eval forward was accepted");
	/* A batch of one with 1x1 maps cannot train (like PyTorch)... */
	struct batch one;
	batch_make(&one, MG_F64, 1, 1, 16, 16, 10, 8);
	int64_t s[1] = {MG_METRIC_N};
	double mm[MG_METRIC_N];
	struct mg_tensor mt = mg_tensor_make(mm, MG_F64, MG_DEV_CPU, 1, s);
	e.ctx.training = true;
	if (M->forward(e.model, &e.ctx, &one.b, &mt) == 0)
		fail("training on one sample with 1x1 maps was accepted");
	else if (!strstr(mg_last_error(), "features."))
		fail("error does not name the unit: %s", mg_last_error());
	ts_check_step(&e.st, false);
	/* ...but evaluates. */
	if (isnan(fwd(&e, &one.b, false, NULL)))
		fail("eval of one sample failed");
	batch_free(&one);
	free(before);
	free(after);
	free(ev);
	batch_free(&bt);
	env_close(&e);
}

/* ------------------------------------------------------------------ */
/* reference: an independent naive forward of torchvision's network    */

/* Naive reference state: the parameters by torchvision name. */
struct ref {
	const struct mg_model_spec *sp;
	struct mg_tensor *p;
	bool training;
	double eps, momentum;
	int bad;
	double run_err; /* largest error of predicted running stats */
	double *pred;	/* predicted running stats, or NULL (eval) */
};

static double *ref_param(struct ref *r, const char *fmt, ...)
{
	char name[MG_NAME_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	int i = find_param(r->sp, name);
	if (i < 0) {
		if (!r->bad++)
			fail("reference: no parameter %s", name);
		static double zero[1 << 16];
		return zero;
	}
	return r->p[i].data;
}

/* x [N, C, H, W] -> conv k x k, stride s, pad (k - 1) / 2, groups g. */
static double *ref_conv(const double *x, int64_t N, int64_t C, int64_t *H,
			int64_t *W, const double *w, int64_t K, int k, int s,
			int g)
{
	const int p = (k - 1) / 2;
	const int64_t OH = (*H + 2 * p - k) / s + 1,
		      OW = (*W + 2 * p - k) / s + 1;
	const int64_t Cg = C / g, Kg = K / g;
	double *y = calloc((size_t)(N * K * OH * OW), sizeof *y);
	for (int64_t n = 0; n < N; n++)
		for (int64_t o = 0; o < K; o++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					double acc = 0;
					for (int64_t cg = 0; cg < Cg; cg++)
						for (int i = 0; i < k; i++)
							for (int j = 0; j < k;
							     j++) {
								int64_t ih = oh * s -
									     p +
									     i,
									iw = ow * s -
									     p +
									     j;
								if (ih < 0 ||
								    iw < 0 ||
								    ih >= *H ||
								    iw >= *W)
									continue;
								int64_t c =
									o / Kg *
										Cg +
									cg;
								acc += w[((o * Cg +
									   cg) * k +
									  i) * k +
									 j] *
								       x[((n * C +
									   c) * *H +
									  ih) * *W +
									 iw];
							}
					y[((n * K + o) * OH + oh) * OW + ow] =
						acc;
				}
	*H = OH;
	*W = OW;
	return y;
}

/* BN (+ReLU6) in place, by the PyTorch definition; in training also
 * checks the running statistics the model stored against momentum
 * updates of the batch statistics (r->pred holds the pre-step values). */
static void ref_bn(struct ref *r, double *y, int64_t N, int64_t C, int64_t HW,
		   const char *bn, bool relu6)
{
	const double *g = ref_param(r, "%s.weight", bn);
	const double *b = ref_param(r, "%s.bias", bn);
	const double *rm = ref_param(r, "%s.running_mean", bn);
	const double *rv = ref_param(r, "%s.running_var", bn);
	for (int64_t c = 0; c < C; c++) {
		double mean = 0, var = 0, m = (double)(N * HW);
		if (r->training) {
			for (int64_t n = 0; n < N; n++)
				for (int64_t q = 0; q < HW; q++)
					mean += y[(n * C + c) * HW + q];
			mean /= m;
			for (int64_t n = 0; n < N; n++)
				for (int64_t q = 0; q < HW; q++) {
					double d =
						y[(n * C + c) * HW + q] - mean;
					var += d * d;
				}
			var /= m;
			/* Running stats start at 0 and 1 in these tests. */
			double em = r->momentum * mean;
			double ev = 1 - r->momentum +
				    r->momentum * var * m / (m - 1);
			r->run_err = fmax(r->run_err,
					  fabs(rm[c] - em) / (fabs(em) + 1e-3));
			r->run_err = fmax(r->run_err, fabs(rv[c] - ev) / ev);
		} else {
			mean = rm[c];
			var = rv[c];
		}
		for (int64_t n = 0; n < N; n++)
			for (int64_t q = 0; q < HW; q++) {
				double *v = &y[(n * C + c) * HW + q];
				*v = (*v - mean) / sqrt(var + r->eps) * g[c] +
				     b[c];
				if (relu6)
					*v = fmin(fmax(*v, 0), 6);
			}
	}
}

/* The loss sum of torchvision's mobilenet_v2 (default table) on x. */
static double ref_forward(struct ref *r, const double *x0, const int32_t *lab,
			  int64_t N, int64_t C, int64_t H, int64_t W, double w,
			  int stem_stride, int classes)
{
	static const int tab[7][4] = {
		{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
		{6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
	int64_t inp = tv_div(32 * w, 8), last = tv_div(1280 * fmax(1, w), 8);
	double *x =
		ref_conv(x0, N, C, &H, &W, ref_param(r, "features.0.0.weight"),
			 inp, 3, stem_stride, 1);
	ref_bn(r, x, N, inp, H * W, "features.0.1", true);
	int idx = 1;
	for (int row = 0; row < 7; row++) {
		int64_t oup = tv_div(tab[row][1] * w, 8);
		for (int i = 0; i < tab[row][2]; i++, idx++) {
			int s = i == 0 ? tab[row][3] : 1;
			int64_t hid = inp * tab[row][0], h = H, wd = W;
			const double *in = x;
			double *t = NULL;
			int li = 0;
			char nm[64];
			if (tab[row][0] != 1) {
				t = ref_conv(
					in, N, inp, &h, &wd,
					ref_param(r,
						  "features.%d.conv.0.0.weight",
						  idx),
					hid, 1, 1, 1);
				snprintf(nm, sizeof nm, "features.%d.conv.0.1",
					 idx);
				ref_bn(r, t, N, hid, h * wd, nm, true);
				li = 1;
			}
			double *d = ref_conv(
				t ? t : in, N, hid, &h, &wd,
				ref_param(r, "features.%d.conv.%d.0.weight",
					  idx, li),
				hid, 3, s, (int)hid);
			snprintf(nm, sizeof nm, "features.%d.conv.%d.1", idx,
				 li);
			ref_bn(r, d, N, hid, h * wd, nm, true);
			double *o = ref_conv(
				d, N, hid, &h, &wd,
				ref_param(r, "features.%d.conv.%d.weight", idx,
					  li + 1),
				oup, 1, 1, 1);
			snprintf(nm, sizeof nm, "features.%d.conv.%d", idx,
				 li + 2);
			ref_bn(r, o, N, oup, h * wd, nm, false);
			if (s == 1 && inp == oup)
				for (int64_t q = 0; q < N * oup * h * wd; q++)
					o[q] += in[q];
			free(t);
			free(d);
			free(x);
			x = o;
			H = h;
			W = wd;
			inp = oup;
		}
	}
	double *f = ref_conv(x, N, inp, &H, &W,
			     ref_param(r, "features.%d.0.weight", idx), last, 1,
			     1, 1);
	char nm[64];
	snprintf(nm, sizeof nm, "features.%d.1", idx);
	ref_bn(r, f, N, last, H * W, nm, true);
	const double *lw = ref_param(r, "classifier.1.weight");
	const double *lb = ref_param(r, "classifier.1.bias");
	double loss = 0;
	for (int64_t n = 0; n < N; n++) {
		double logit[64], mx = -INFINITY, se = 0;
		for (int k = 0; k < classes; k++) {
			double z = lb[k];
			for (int64_t c = 0; c < last; c++) {
				double avg = 0;
				for (int64_t q = 0; q < H * W; q++)
					avg += f[(n * last + c) * H * W + q];
				z += lw[k * last + c] * avg / (double)(H * W);
			}
			logit[k] = z;
			mx = fmax(mx, z);
		}
		for (int k = 0; k < classes; k++)
			se += exp(logit[k] - mx);
		loss += mx + log(se) - logit[lab[n]];
	}
	free(x);
	free(f);
	return loss;
}

static void reference_case(const char *lines, double w, int stem_stride,
			   int64_t n, int64_t C, int64_t H, int64_t W)
{
	struct env e;
	if (env_open(&e, lines, MG_F64, 4))
		return;
	struct batch bt;
	batch_make(&bt, MG_F64, n, C, H, W, 10, 17);
	struct ref r = {&e.st.spec, e.st.p, true, 1e-5, 0.1, 0, 0, NULL};
	/* Training: the loss, and every BN's running statistics. */
	double got = fwd(&e, &bt.b, true, NULL);
	double want = ref_forward(&r, bt.b.input.data, bt.b.labels.data, n, C,
				  H, W, w, stem_stride, 10);
	char b[256];
	flat(lines, b, sizeof b);
	if (!(fabs(got - want) <= 1e-10 * fabs(want)))
		fail("[%s] training loss %.15g, reference %.15g", b, got, want);
	if (!(r.run_err < 1e-9))
		fail("[%s] running statistics off the reference by %g", b,
		     r.run_err);
	/* Eval with the running statistics just stored. */
	r.training = false;
	got = fwd(&e, &bt.b, false, NULL);
	want = ref_forward(&r, bt.b.input.data, bt.b.labels.data, n, C, H, W, w,
			   stem_stride, 10);
	if (!(fabs(got - want) <= 1e-10 * fabs(want)))
		fail("[%s] eval loss %.15g, reference %.15g", b, got, want);
	printf("  [%s] %lldx%lldx%lld batch %lld: loss matches the "
	       "reference (%.12g)\n",
	       b, (long long)C, (long long)H, (long long)W, (long long)n, got);
	batch_free(&bt);
	env_close(&e);
}

static void test_reference(void)
{
	reference_case("width_mult = 0.25\ndropout = 0\n", 0.25, 2, 3, 1, 32,
		       32);
	reference_case("width_mult = 0.35\ndropout = 0\nin_channels = 3\n"
		       "stem_stride = 1\n",
		       0.35, 1, 2, 3, 20, 17);
	/* Dropout is identity in eval mode only; the train loss differs. */
}

/* ------------------------------------------------------------------ */
/* precision, sizes, determinism, errors                               */

static void test_precision(void)
{
	struct env a, b;
	const char *o = "width_mult = 0.5\ndropout = 0.2\n";
	if (env_open(&a, o, MG_F64, 21) || env_open(&b, o, MG_F32, 21))
		return;
	/* 48 px: the smallest maps are 2x2 (4 x 4 values per BN channel), so
	 * rounding differences are not amplified chaotically (see
	 * test_gradcheck). */
	struct batch b64, b32;
	batch_make(&b64, MG_F64, 4, 1, 48, 48, 10, 3);
	batch_make(&b32, MG_F32, 4, 1, 48, 48, 10, 3);
	double l64, l32, m64[MG_METRIC_N], m32[MG_METRIC_N];
	a.grad_scale = b.grad_scale = 1.0f / 4;
	if (step(&a, &b64.b, &l64) || step(&b, &b32.b, &l32))
		goto out;
	if (fabs(l64 - l32) > 1e-5 * fabs(l64))
		fail("training loss f64 %.10g vs f32 %.10g", l64, l32);
	/* Gradients of every trained tensor agree to f32 accuracy, judged
	 * per tensor (normwise) with a floor of 1e-3 of the largest tensor
	 * norm: biases before a batch norm have exactly zero gradient, which
	 * each precision represents as its own rounding noise. */
	const struct mg_model_spec *sp = &a.st.spec;
	double worst = 0, nmax = 0;
	double *dn = calloc((size_t)sp->nparams, sizeof *dn);
	double *gn = calloc((size_t)sp->nparams, sizeof *gn);
	for (int i = 0; i < sp->nparams; i++) {
		if (!(sp->params[i].flags & MG_P_TRAIN))
			continue;
		for (int64_t j = 0; j < sp->params[i].numel; j++) {
			double g64 = elem(&a.st.g[i], j);
			double d = g64 - elem(&b.st.g[i], j);
			gn[i] += g64 * g64;
			dn[i] += d * d;
		}
		nmax = fmax(nmax, sqrt(gn[i]));
	}
	for (int i = 0; i < sp->nparams; i++)
		worst = fmax(worst, sqrt(dn[i]) / (sqrt(gn[i]) + 1e-3 * nmax));
	free(dn);
	free(gn);
	if (worst > 1e-4)
		fail("f32 gradients differ from f64 by %g (normwise)", worst);
	fwd(&a, &b64.b, false, m64);
	fwd(&b, &b32.b, false, m32);
	if (fabs(m64[0] - m32[0]) > 1e-5 * fabs(m64[0]))
		fail("eval loss f64 %.10g vs f32 %.10g", m64[0], m32[0]);
	printf("  loss f64 %.10g f32 %.10g; worst gradient difference %.3g "
	       "(normwise)\n",
	       l64, l32, worst);
out:
	batch_free(&b64);
	batch_free(&b32);
	env_close(&a);
	env_close(&b);
}

static void test_sizes(void)
{
	static const struct {
		const char *opts;
		int C, H, W, n;
	} cs[] = {
		{"width_mult = 0.25\n", 1, 16, 16, 2},
		{"width_mult = 0.25\n", 1, 17, 17, 2},
		{"width_mult = 0.25\n", 1, 28, 28, 3},
		{"width_mult = 0.25\nin_channels = 3\n", 3, 20, 31, 2},
		{"width_mult = 0.35\nin_channels = 3\nnum_classes = 7\n", 3, 64,
		 64, 2},
		{"width_mult = 0.25\nstem_stride = 1\n", 1, 16, 16, 2},
		{"width_mult = 0.25\nsetting = 6,16,2,2;6,24,1,1\n", 1, 33, 18,
		 2},
	};
	for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
		struct env e;
		if (env_open(&e, cs[k].opts, MG_F32, 2))
			continue;
		int classes = 10;
		if (strstr(cs[k].opts, "num_classes = 7"))
			classes = 7;
		struct batch bt;
		batch_make(&bt, MG_F32, cs[k].n, cs[k].C, cs[k].H, cs[k].W,
			   classes, 4);
		double l;
		e.grad_scale = 1.0f / (float)cs[k].n;
		if (step(&e, &bt.b, &l) == 0) {
			bool finite = isfinite(l);
			for (int i = 0; i < e.st.spec.nparams; i++)
				for (int64_t j = 0;
				     e.st.g[i].data &&
				     j < e.st.spec.params[i].numel;
				     j++)
					finite &= isfinite(elem(&e.st.g[i], j));
			if (!finite)
				fail("size %dx%dx%d: non-finite loss or "
				     "gradient",
				     cs[k].C, cs[k].H, cs[k].W);
		}
		double m[MG_METRIC_N];
		fwd(&e, &bt.b, false, m);
		CHECK(isfinite(m[0]) && m[2] == cs[k].n);
		/* A smaller batch after a larger one reuses the arena. */
		bt.b.n = 1;
		bt.b.input.shape[0] = 1;
		bt.b.labels.shape[0] = 1;
		fwd(&e, &bt.b, false, NULL);
		batch_free(&bt);
		env_close(&e);
	}
}

static void test_determinism(void)
{
	struct env a, b;
	const char *o = "width_mult = 0.5\n";
	if (env_open(&a, o, MG_F32, 9) || env_open(&b, o, MG_F32, 9))
		return;
	struct batch bt;
	batch_make(&bt, MG_F32, 8, 1, 28, 28, 10, 1);
	a.grad_scale = b.grad_scale = 0.125f;
	/* Model b runs an eval and a different-size batch in between: the
	 * arena layout changes must not leak into results. */
	struct batch other;
	batch_make(&other, MG_F32, 5, 1, 40, 40, 10, 2);
	fwd(&b, &other.b, false, NULL);
	step(&b, &other.b, NULL);
	double la, lb;
	if (step(&a, &bt.b, &la) || step(&b, &bt.b, &lb))
		goto out;
	CHECK(la == lb);
	for (int i = 0; i < a.st.spec.nparams; i++)
		if (a.st.g[i].data && memcmp(a.st.g[i].data, b.st.g[i].data,
					     mg_tensor_bytes(&a.st.g[i])))
			fail("gradient %d differs between identical runs", i);
out:
	batch_free(&bt);
	batch_free(&other);
	env_close(&a);
	env_close(&b);
}

static void test_errors(void)
{
	/* Option validation by the schema, and create()'s own checks. */
	CHECK(opts_q("width_mult = 0\n", true) == NULL);
	CHECK(opts_q("dropout = 1.5\n", true) == NULL);
	CHECK(opts_q("in_channel = 3\n", true) == NULL); /* typo */
	static const char *bad[] = {
		"setting = 6,16,1\n",	"setting = 6,16,1,1;x\n",
		"setting = 6,16,0,1\n", "setting = 6,16.5,1,1\n",
		"setting = ;\n",
	};
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		struct mg_opts *o = opts_q(bad[k], false);
		struct mg_device dev = {.kind = MG_DEV_CPU};
		struct mg_ctx ctx = {.struct_size = sizeof ctx, .dev = &dev};
		void *self = NULL;
		if (!o)
			continue;
		if (P->create(o, &ctx, &self) == 0) {
			fail("create accepted '%s'", bad[k]);
			P->destroy(self);
		} else if (!strstr(mg_last_error(), "setting")) {
			fail("error for '%s' does not name the option: %s",
			     bad[k], mg_last_error());
		}
		mg_opts_free(o);
	}
	/* Schema: every option has help and a default in range. */
	int n = 0;
	for (const struct mg_option *o = P->options; o->name; o++, n++) {
		CHECK(o->help && strlen(o->help) > 10);
		CHECK(o->def != NULL);
		if (o->type == MG_OPT_INT || o->type == MG_OPT_FLOAT) {
			double v = strtod(o->def, NULL);
			CHECK(o->min < o->max && v >= o->min && v <= o->max);
		}
	}
	CHECK(n >= 6);
	/* Bad batches are refused with a message. */
	struct env e;
	if (env_open(&e, "width_mult = 0.25\n", MG_F32, 1))
		return;
	struct batch bt;
	batch_make(&bt, MG_F32, 2, 3, 16, 16, 10, 1);
	int64_t s[1] = {MG_METRIC_N};
	float mm[MG_METRIC_N];
	struct mg_tensor mt = mg_tensor_make(mm, MG_F32, MG_DEV_CPU, 1, s);
	e.ctx.training = true;
	if (M->forward(e.model, &e.ctx, &bt.b, &mt) == 0 ||
	    !strstr(mg_last_error(), "in_channels"))
		fail("3-channel input to a 1-channel model: %s",
		     mg_last_error());
	batch_free(&bt);
	batch_make(&bt, MG_F64, 2, 1, 16, 16, 10, 1);
	if (M->forward(e.model, &e.ctx, &bt.b, &mt) == 0)
		fail("f64 input to an f32 context was accepted");
	batch_free(&bt);
	batch_make(&bt, MG_F32, 2, 1, 16, 16, 10, 1);
	((int32_t *)bt.b.labels.data)[1] = 10;
	if (M->forward(e.model, &e.ctx, &bt.b, &mt) == 0 ||
	    !strstr(mg_last_error(), "label"))
		fail("label 10 of 10 classes: %s", mg_last_error());
	ts_check_step(&e.st, false);
	/* Backward before any forward. */
	if (M->backward(e.model, &e.ctx) == 0)
		fail("backward without forward was accepted");
	batch_free(&bt);
	env_close(&e);
}

/*
 * Not a ctest test: time forward + backward steps.
 *   test_mobilenetv2 PLUGIN bench [SIZE [BATCH [STEPS [f32|f64 [OPTS]]]]]
 * OPTS are option lines separated by ';;' (e.g. "width_mult = 0.5").
 * Prints the mean step time and the time per unit and phase (measured
 * between acquire and release).
 */
static int bench(int argc, char **argv)
{
	const int H = argc > 0 ? atoi(argv[0]) : 28;
	const int n = argc > 1 ? atoi(argv[1]) : 64;
	const int steps = argc > 2 ? atoi(argv[2]) : 10;
	const enum mg_dtype dt =
		argc > 3 && !strcmp(argv[3], "f64") ? MG_F64 : MG_F32;
	char lines[512] = "";
	if (argc > 4)
		for (const char *p = argv[4]; *p && strlen(lines) < 500; p++) {
			size_t l = strlen(lines);
			if (p[0] == ';' && p[1] == ';') {
				lines[l] = '\n';
				p++;
			} else {
				lines[l] = *p;
			}
			lines[l + 1] = 0;
		}
	strcat(lines, "\n");
	struct env e;
	if (env_open(&e, lines, dt, 1))
		return 1;
	/* Input channels and classes from the declared stem and head. */
	const struct mg_model_spec *sp = &e.st.spec;
	const int64_t C = sp->params[0].shape[1];
	const int classes = (int)sp->params[sp->nparams - 1].shape[0];
	struct batch bt;
	batch_make(&bt, dt, n, C, H, H, classes, 3);
	e.grad_scale = 1.0f / (float)n;
	step(&e, &bt.b, NULL); /* warm-up: arena, workspaces */
	const int nu = e.st.spec.nunits;
	e.st.t_unit = calloc((size_t)nu * 3, sizeof(double));
	double tf = 0, tb = 0;
	for (int i = 0; i < steps; i++) {
		ts_zero_grads(&e.st);
		double t0 = mg_now();
		fwd(&e, &bt.b, true, NULL);
		double t1 = mg_now();
		if (M->backward(e.model, &e.ctx))
			fail("backward: %s", mg_last_error());
		double t2 = mg_now();
		tf += t1 - t0;
		tb += t2 - t1;
	}
	printf("mobilenetv2 %s %dx%d batch %d (%s): forward %.2f ms, "
	       "backward %.2f ms, step %.2f ms, %.0f img/s\n",
	       mg_dtype_name(dt), H, H, n, flat(lines, (char[256]){0}, 256),
	       1e3 * tf / steps, 1e3 * tb / steps, 1e3 * (tf + tb) / steps,
	       n * steps / (tf + tb));
	for (int u = 0; u < nu; u++)
		printf("  %-12s fwd %7.2f ms  bwd %7.2f ms\n",
		       e.st.spec.units[u].name,
		       1e3 * e.st.t_unit[u * 3 + MG_PHASE_FORWARD] / steps,
		       1e3 * e.st.t_unit[u * 3 + MG_PHASE_BACKWARD] / steps);
	batch_free(&bt);
	env_close(&e);
	return failures ? 1 : 0;
}

/*
 * Not a ctest test: write a training step of a small fp64 model (width
 * 0.25, stride-1 stem, 3 x 1 x 32 x 32, no dropout) as text,
 * for a cross-check against torchvision (a script loads the parameters by
 * their torchvision names):
 *   test_mobilenetv2 PLUGIN dump FILE
 * Sections "tensor NAME N" followed by N values: every parameter before
 * the step, the input and labels, loss/train and loss/eval, every
 * gradient (grad/NAME) and buffer after the training forward (after/NAME).
 */
static void dump_tensor(FILE *f, const char *name, const struct mg_tensor *t)
{
	const int64_t n = mg_tensor_numel(t);
	fprintf(f, "tensor %s %lld\n", name, (long long)n);
	for (int64_t i = 0; i < n; i++)
		fprintf(f, "%.17g\n",
			t->dtype == MG_I32 ? (double)((int32_t *)t->data)[i]
					   : elem(t, i));
}

static int dump(const char *path)
{
	struct env e;
	if (env_open(&e, "width_mult = 0.25\ndropout = 0\nstem_stride = 1\n",
		     MG_F64, 5))
		return 1;
	FILE *f = fopen(path, "w");
	if (!f)
		return 1;
	const struct mg_model_spec *sp = &e.st.spec;
	char name[2 * MG_NAME_MAX + 8];
	for (int u = 0; u < sp->nunits; u++)
		for (int i = 0; i < sp->units[u].nparams; i++) {
			int pi = sp->units[u].first_param + i;
			snprintf(name, sizeof name, "%s.%s", sp->units[u].name,
				 sp->params[pi].name);
			dump_tensor(f, name, &e.st.p[pi]);
		}
	struct batch bt;
	batch_make(&bt, MG_F64, 3, 1, 32, 32, 10, 17);
	dump_tensor(f, "input", &bt.b.input);
	dump_tensor(f, "labels", &bt.b.labels);
	e.grad_scale = 1.0f / 3;
	double loss;
	step(&e, &bt.b, &loss);
	double ev = fwd(&e, &bt.b, false, NULL);
	fprintf(f, "tensor loss/train 1\n%.17g\ntensor loss/eval 1\n%.17g\n",
		loss, ev);
	fprintf(f, "tensor grad_scale 1\n%.17g\n", (double)e.grad_scale);
	for (int u = 0; u < sp->nunits; u++)
		for (int i = 0; i < sp->units[u].nparams; i++) {
			int pi = sp->units[u].first_param + i;
			bool g = e.st.g[pi].data != NULL;
			snprintf(name, sizeof name, "%s/%s.%s",
				 g ? "grad" : "after", sp->units[u].name,
				 sp->params[pi].name);
			dump_tensor(f, name, g ? &e.st.g[pi] : &e.st.p[pi]);
		}
	fclose(f);
	batch_free(&bt);
	env_close(&e);
	return failures ? 1 : 0;
}

/* fail()'s context: the seed to rerun with. */
static void print_context(FILE *f)
{
	fprintf(f, " (seed %llu)", (unsigned long long)seed);
}

int main(int argc, char **argv)
{
	fail_context = print_context;
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"params", test_params},
		{"init", test_init},
		{"reference", test_reference},
		{"gradcheck", test_gradcheck},
		{"gradcheck_dropout", test_gradcheck_dropout},
		{"bn_modes", test_bn_modes},
		{"precision", test_precision},
		{"sizes", test_sizes},
		{"determinism", test_determinism},
		{"errors", test_errors},
	};
	if (argc < 2) {
		fprintf(stderr, "usage: %s PLUGIN.so [TEST]\n", argv[0]);
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 1;
	}
	mg_plugin_entry_fn entry =
		(mg_plugin_entry_fn)dlsym(h, MG_PLUGIN_ENTRY_SYMBOL);
	if (!entry || !(P = entry())) {
		fprintf(stderr, "%s: no plugin entry\n", argv[1]);
		return 1;
	}
	if (P->abi_major != MG_ABI_MAJOR || P->kind != MG_PLUGIN_MODEL ||
	    strcmp(P->name, "mobilenetv2") ||
	    P->struct_size != sizeof(struct mg_plugin) || !P->ops) {
		fprintf(stderr, "%s: unexpected descriptor\n", argv[1]);
		return 1;
	}
	M = P->ops;
	if (getenv("MG_TEST_SEED"))
		seed = strtoull(getenv("MG_TEST_SEED"), NULL, 0);
	if (argc > 2 && !strcmp(argv[2], "bench"))
		return bench(argc - 3, argv + 3);
	if (argc > 3 && !strcmp(argv[2], "dump"))
		return dump(argv[3]);
	int ran = 0;
	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
		if (argc > 2 && strcmp(argv[2], tests[i].name))
			continue;
		int before = failures;
		tests[i].fn();
		printf("%s: %s\n", tests[i].name,
		       failures == before ? "ok" : "FAILED");
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "unknown test '%s'\n", argv[2]);
		return 2;
	}
	dlclose(h);
	return failures ? 1 : 0;
}
