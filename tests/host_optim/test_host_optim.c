/*
 * test_host_optim.c - the host optimizer engine of offload strategies
 * (plugins/strategies/common/host_optim.c) against the CPU reference,
 * mg_optim_update() on a CPU context.
 *
 *   test_host_optim adamw|sgd|slices|skip|errors|pool
 *
 * Every instruction set this CPU has (forced through MG_HOST_OPTIM_ISA),
 * on 1 and 3 threads, on fresh random inputs: master F32/F64, gradients in
 * the master dtype or F16/BF16, with and without a low-precision copy,
 * sizes 1 to 100003 at unaligned addresses. Low-precision gradients are
 * widened for the reference (which takes master-dtype gradients only) and
 * the reference's low-precision copy is mg_float_to_half/_bf16 of its
 * result. Limits: relative error 1e-6 (F32) and 1e-13 (F64) against the
 * larger of the old value, the new one and the change; for the copies one
 * ulp, none where the master value equals the reference's. And every
 * value bit-identical, as the engine promises (reported as a failure
 * after the tolerance checks, so the largest errors are printed first).
 * MG_TEST_SEED=N reruns on other inputs; failures print it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test_util.h"
#include "mg/kit/host_optim.h"
#include "mg/mg.h"

static struct mg_device dev = {.kind = MG_DEV_CPU};
static struct mg_ctx ctx = {.struct_size = sizeof(struct mg_ctx),
			    .dev = &dev,
			    .compute_dtype = MG_F32,
			    .master_dtype = MG_F32};
static uint64_t seed = 20250117, rng_state;
static const char *where = ""; /* the running case, for messages */

/* What the comparisons saw, for the summary line. */
static double max_err[2]; /* F32, F64 */
static int64_t n_cmp, n_exact;

/* splitmix64 */
static uint64_t next_u64(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double urand(void)
{
	return (double)(next_u64() >> 11) * 0x1.0p-53;
}

static double srand1(void)
{
	return 2 * urand() - 1;
}

/* Signed, magnitudes spread over 2^0 .. 2^-26 (F16 subnormals too). */
static double spread(void)
{
	double v = srand1() * ldexp(1.0, -(int)(next_u64() % 27));
	return next_u64() % 64 == 0 ? 0.0 : v;
}

/* ------------------------------------------------------------------ */
/* Arrays at unaligned addresses.                                      */

struct arr {
	char *base;
	void *d;
	enum mg_dtype t;
	int64_t n;
};

static struct arr mk(enum mg_dtype t, int64_t n)
{
	size_t es = mg_dtype_size(t), bytes = ((size_t)n * es + 127) / 64 * 64;
	struct arr a = {.t = t, .n = n};
	a.base = aligned_alloc(64, bytes);
	if (!a.base) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	a.d = a.base + (next_u64() % 8) * es; /* 0..7 elements in */
	return a;
}

static struct arr dup(const struct arr *s)
{
	struct arr a = mk(s->t, s->n);
	memcpy(a.d, s->d, (size_t)s->n * mg_dtype_size(s->t));
	return a;
}

static double get(const struct arr *a, int64_t i)
{
	return test_get(a->d, a->t, i);
}

static void set(struct arr *a, int64_t i, double v)
{
	test_put(a->d, a->t, i, v);
}

static bool same(const struct arr *a, const struct arr *b)
{
	return memcmp(a->d, b->d, (size_t)a->n * mg_dtype_size(a->t)) == 0;
}

/* ------------------------------------------------------------------ */
/* One slice: the engine's arrays, the reference's, the originals.     */

struct tcase {
	enum mg_dtype mt, gt, lt;
	bool lp;
	int64_t n;
	int slots;
	struct arr p, g, l, s[2];     /* engine */
	struct arr rp, rg, rst[2];    /* reference (rg: master dtype) */
	struct arr p0, g0, l0, s0[2]; /* before */
	struct mg_optim_slice es, rs; /* engine's, reference's */
};

static void tc_init(struct tcase *c, const struct mg_optim_hparams *h,
		    bool first, enum mg_dtype mt, enum mg_dtype gt, bool lp,
		    enum mg_dtype lt, bool decay, int64_t n)
{
	memset(c, 0, sizeof(*c));
	c->mt = mt;
	c->gt = gt;
	c->lt = lt;
	c->lp = lp;
	c->n = n;
	c->slots = mg_optim_state_slots(h);
	c->p0 = mk(mt, n);
	c->g0 = mk(gt, n);
	for (int64_t i = 0; i < n; i++) {
		set(&c->p0, i, srand1() * (urand() < 0.1 ? 1e-4 : 1.0));
		set(&c->g0, i, spread());
	}
	for (int k = 0; k < c->slots; k++) {
		c->s0[k] = mk(mt, n);
		for (int64_t i = 0; i < n; i++) {
			double v;
			if (h->kind == MG_OPTIM_ADAMW)
				/* PyTorch starts the moments at zero */
				v = first    ? 0.0
				    : k == 0 ? 0.1 * srand1()
					     : 0.01 * urand() * urand();
			else /* momentum: overwritten on the first step */
				v = srand1();
			set(&c->s0[k], i, v);
		}
	}
	if (lp) {
		c->l0 = mk(lt, n);
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)c->l0.d)[i] = (uint16_t)next_u64();
	}
	c->p = dup(&c->p0);
	c->g = dup(&c->g0);
	c->rp = dup(&c->p0);
	c->rg = mk(mt, n);
	for (int64_t i = 0; i < n; i++)
		set(&c->rg, i, get(&c->g0, i));
	for (int k = 0; k < c->slots; k++) {
		c->s[k] = dup(&c->s0[k]);
		c->rst[k] = dup(&c->s0[k]);
	}
	if (lp)
		c->l = dup(&c->l0);
	c->es = (struct mg_optim_slice){.dtype = mt,
					.param = c->p.d,
					.grad = c->g.d,
					.grad_dtype = gt,
					.param_lp = lp ? c->l.d : NULL,
					.lp_dtype = lt,
					.state = {c->s[0].d, c->s[1].d},
					.n = n,
					.decay = decay};
	c->rs = (struct mg_optim_slice){.dtype = mt,
					.param = c->rp.d,
					.grad = c->rg.d,
					.grad_dtype = mt,
					.state = {c->rst[0].d, c->rst[1].d},
					.n = n,
					.decay = decay};
}

static void tc_free(struct tcase *c)
{
	struct arr *all[] = {&c->p,  &c->g,  &c->l,	 &c->s[0],   &c->s[1],
			     &c->rp, &c->rg, &c->rst[0], &c->rst[1], &c->p0,
			     &c->g0, &c->l0, &c->s0[0],	 &c->s0[1]};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(all[i]->base);
	memset(c, 0, sizeof(*c));
}

static int tc_reference(struct tcase *c, const struct mg_optim_hparams *h,
			const struct mg_optim_vals *v)
{
	if (mg_optim_update(&ctx, h, v, &c->rs) != 0) {
		fail("reference: %s", mg_last_error());
		return -1;
	}
	return 0;
}

/* Engine result a against reference r, relative to the larger of the
 * old value, the new one and the change. */
static void cmp_arr(const char *what, const struct arr *a, const struct arr *r,
		    const struct arr *old)
{
	const double tol = a->t == MG_F64 ? 1e-13 : 1e-6;
	double *mx = &max_err[a->t == MG_F64];
	size_t es = mg_dtype_size(a->t);
	int shown = 0;
	for (int64_t i = 0; i < a->n; i++) {
		double x = get(a, i), y = get(r, i), o = get(old, i);
		double scale = fmax(fmax(fabs(y), fabs(o)), fabs(o - y));
		double err = fabs(x - y) / fmax(scale, 1e-300);
		if (x == y)
			err = 0;
		n_cmp++;
		n_exact += memcmp((char *)a->d + i * es, (char *)r->d + i * es,
				  es) == 0;
		if (err > *mx)
			*mx = err;
		if (!(err <= tol) && shown++ < 3)
			fail("%s[%lld] = %.17g, reference %.17g (was %.17g): "
			     "relative error %.3g > %.0e",
			     what, (long long)i, x, y, o, err, tol);
	}
}

/* Position of a sign-magnitude 16-bit float on the number line. */
static int64_t ord16(uint16_t x)
{
	return x & 0x8000 ? -(int64_t)(x & 0x7fff) : (int64_t)(x & 0x7fff);
}

static void tc_check(struct tcase *c)
{
	cmp_arr("param", &c->p, &c->rp, &c->p0);
	for (int k = 0; k < c->slots; k++)
		cmp_arr(k ? "state1" : "state0", &c->s[k], &c->rst[k],
			&c->s0[k]);
	if (!same(&c->g, &c->g0))
		fail("the gradients changed");
	if (!c->lp)
		return;
	int shown = 0;
	for (int64_t i = 0; i < c->n; i++) {
		float pr = (float)get(&c->rp, i);
		uint16_t want = c->lt == MG_F16 ? mg_float_to_half(pr)
						: mg_float_to_bf16(pr);
		uint16_t got = ((const uint16_t *)c->l.d)[i];
		int64_t d = ord16(got) - ord16(want);
		/* From the very same value the rounding must agree. */
		int64_t lim = get(&c->p, i) == get(&c->rp, i) ? 0 : 1;
		if ((d > lim || d < -lim) && shown++ < 3)
			fail("%s copy[%lld] = 0x%04x, want 0x%04x (from %.9g)",
			     mg_dtype_name(c->lt), (long long)i, got, want,
			     (double)pr);
	}
}

/* ------------------------------------------------------------------ */
/* Instruction sets and pools.                                         */

static const char *const isas[] = {"scalar", "avx2", "avx512"};

static bool cpu_has(const char *isa)
{
	if (!strcmp(isa, "scalar"))
		return true;
#if defined(__x86_64__)
	__builtin_cpu_init();
	bool avx2 = __builtin_cpu_supports("avx2") &&
		    __builtin_cpu_supports("f16c");
	if (!strcmp(isa, "avx2"))
		return avx2;
	return avx2 && __builtin_cpu_supports("avx512f");
#else
	return false;
#endif
}

/* A pool forced onto isa; NULL (reported) if the CPU lacks it. */
static struct mg_host_optim *pool(const char *isa, int threads)
{
	struct mg_host_optim *o = NULL;
	setenv("MG_HOST_OPTIM_ISA", isa, 1);
	int rc = mg_host_optim_create(threads, &o);
	unsetenv("MG_HOST_OPTIM_ISA");
	if (!cpu_has(isa)) {
		if (rc == 0) {
			fail("MG_HOST_OPTIM_ISA=%s accepted on a CPU without "
			     "it",
			     isa);
			mg_host_optim_destroy(o);
		}
		return NULL;
	}
	if (rc != 0) {
		fail("create(%d) on %s: %s", threads, isa, mg_last_error());
		return NULL;
	}
	if (strcmp(mg_host_optim_isa(o), isa) != 0 ||
	    mg_host_optim_threads(o) != threads)
		fail("pool says %s on %d threads, asked %s on %d",
		     mg_host_optim_isa(o), mg_host_optim_threads(o), isa,
		     threads);
	return o;
}

/* ------------------------------------------------------------------ */
/* Optimizer settings.                                                  */

struct setting {
	const char *name;
	struct mg_optim_hparams h;
	bool decay, first;
	int t; /* step number for the bias corrections */
};

static const struct setting adamw_settings[] = {
	{"adamw decay first",
	 {.kind = MG_OPTIM_ADAMW,
	  .lr = 1e-3,
	  .beta1 = 0.9,
	  .beta2 = 0.999,
	  .eps = 1e-8,
	  .weight_decay = 0.01},
	 true,
	 true,
	 1},
	{"adamw decay later",
	 {.kind = MG_OPTIM_ADAMW,
	  .lr = 1e-3,
	  .beta1 = 0.9,
	  .beta2 = 0.999,
	  .eps = 1e-8,
	  .weight_decay = 0.01},
	 true,
	 false,
	 57},
	{"adamw no-decay first",
	 {.kind = MG_OPTIM_ADAMW,
	  .lr = 1e-3,
	  .beta1 = 0.8,
	  .beta2 = 0.95,
	  .eps = 1e-6,
	  .weight_decay = 0.1},
	 false,
	 true,
	 1},
	{"adamw no-decay later",
	 {.kind = MG_OPTIM_ADAMW,
	  .lr = 1e-3,
	  .beta1 = 0.8,
	  .beta2 = 0.95,
	  .eps = 1e-6,
	  .weight_decay = 0.1},
	 false,
	 false,
	 1234},
};

static const struct setting sgd_settings[] = {
	{"sgd plain l2",
	 {.kind = MG_OPTIM_SGD, .lr = 0.1, .weight_decay = 1e-4},
	 true,
	 false,
	 3},
	{"sgd momentum first",
	 {.kind = MG_OPTIM_SGD,
	  .lr = 0.1,
	  .momentum = 0.9,
	  .weight_decay = 5e-4},
	 true,
	 true,
	 1},
	{"sgd momentum dampening later",
	 {.kind = MG_OPTIM_SGD,
	  .lr = 0.05,
	  .momentum = 0.9,
	  .dampening = 0.1,
	  .weight_decay = 5e-4},
	 true,
	 false,
	 9},
	{"sgd nesterov later",
	 {.kind = MG_OPTIM_SGD,
	  .lr = 0.05,
	  .momentum = 0.9,
	  .nesterov = true,
	  .weight_decay = 5e-4},
	 true,
	 false,
	 9},
	{"sgd nesterov no-decay first",
	 {.kind = MG_OPTIM_SGD,
	  .lr = 0.05,
	  .momentum = 0.9,
	  .nesterov = true,
	  .weight_decay = 5e-4},
	 false,
	 true,
	 1},
};

static struct mg_optim_vals vals_for(const struct setting *st)
{
	const struct mg_optim_hparams *h = &st->h;
	struct mg_optim_vals v = {.lr = (float)(h->lr * 0.75),
				  .grad_mul = 0.37f,
				  .first = st->first,
				  .step = st->t};
	if (h->kind == MG_OPTIM_ADAMW) {
		v.bias1 = (float)(1 - pow(h->beta1, st->t));
		v.bias2 = (float)(1 - pow(h->beta2, st->t));
	}
	return v;
}

/* dtype combinations: master, gradient, copy (F32 as "none") */
struct combo {
	enum mg_dtype mt, gt, lt;
};

static const struct combo combos[] = {
	{MG_F32, MG_F32, MG_F32},   {MG_F32, MG_F32, MG_F16},
	{MG_F32, MG_F32, MG_BF16},  {MG_F32, MG_F16, MG_F32},
	{MG_F32, MG_F16, MG_F16},   {MG_F32, MG_F16, MG_BF16},
	{MG_F32, MG_BF16, MG_F32},  {MG_F32, MG_BF16, MG_F16},
	{MG_F32, MG_BF16, MG_BF16}, {MG_F64, MG_F64, MG_F32},
	{MG_F64, MG_F64, MG_F16},   {MG_F64, MG_F64, MG_BF16},
};
#define NCOMBOS (int)(sizeof(combos) / sizeof(combos[0]))

static const int64_t sizes[] = {1, 7, 1000, 100003};

/* Every ISA x threads {1, 3} x combo x setting x size, one slice. */
static void test_settings(const struct setting *set, int nset)
{
	static const int threads[] = {1, 3};
	char label[256];
	for (int ii = 0; ii < 3; ii++) {
		for (int ti = 0; ti < 2; ti++) {
			struct mg_host_optim *o = pool(isas[ii], threads[ti]);
			if (!o) {
				if (ti == 0)
					printf("isa %s: not on this CPU, "
					       "skipped\n",
					       isas[ii]);
				continue;
			}
			for (int ci = 0; ci < NCOMBOS; ci++)
				for (int si = 0; si < nset; si++)
					for (int zi = 0; zi < 4; zi++) {
						const struct combo *cb =
							&combos[ci];
						const struct setting *st =
							&set[si];
						bool lp = cb->lt != MG_F32;
						snprintf(label, sizeof(label),
							 "%s x%d, %s master, "
							 "%s grads, copy %s, "
							 "%s, n %lld",
							 isas[ii], threads[ti],
							 mg_dtype_name(cb->mt),
							 mg_dtype_name(cb->gt),
							 lp ? mg_dtype_name(
								      cb->lt)
							    : "none",
							 st->name,
							 (long long)sizes[zi]);
						where = label;
						struct tcase c;
						struct mg_optim_vals v =
							vals_for(st);
						tc_init(&c, &st->h, st->first,
							cb->mt, cb->gt, lp,
							cb->lt, st->decay,
							sizes[zi]);
						if (mg_host_optim_run(o, &st->h,
								      &v, &c.es,
								      1) != 0)
							fail("run: %s",
							     mg_last_error());
						else if (tc_reference(&c,
								      &st->h,
								      &v) == 0)
							tc_check(&c);
						tc_free(&c);
					}
			mg_host_optim_destroy(o);
		}
	}
	where = "";
}

/* Many slices of mixed dtypes and sizes in one call: thread shares
 * start and end inside slices. */
static void test_slices(void)
{
	enum { NS = 41 };
	static const int threads[] = {1, 3, 4};
	char label[128];
	for (int ii = 0; ii < 3; ii++)
		for (int ti = 0; ti < 3; ti++)
			for (int kind = 0; kind < 2; kind++) {
				struct mg_host_optim *o =
					pool(isas[ii], threads[ti]);
				if (!o)
					continue;
				const struct setting *st =
					kind ? &sgd_settings[3]
					     : &adamw_settings[1];
				struct mg_optim_vals v = vals_for(st);
				struct tcase *c = calloc(NS, sizeof(*c));
				struct mg_optim_slice s[NS];
				for (int k = 0; k < NS; k++) {
					const struct combo *cb =
						&combos[next_u64() % NCOMBOS];
					int64_t n =
						next_u64() % 4 == 0
							? (int64_t)(next_u64() %
								    20)
							: (int64_t)(next_u64() %
								    12000);
					tc_init(&c[k], &st->h, st->first,
						cb->mt, cb->gt,
						cb->lt != MG_F32, cb->lt,
						next_u64() % 2, n);
					s[k] = c[k].es;
				}
				snprintf(label, sizeof(label),
					 "%d slices, %s x%d, %s", NS, isas[ii],
					 threads[ti], st->name);
				where = label;
				if (mg_host_optim_run(o, &st->h, &v, s, NS) !=
				    0)
					fail("run: %s", mg_last_error());
				for (int k = 0; k < NS; k++) {
					if (tc_reference(&c[k], &st->h, &v) ==
					    0)
						tc_check(&c[k]);
					tc_free(&c[k]);
				}
				free(c);
				mg_host_optim_destroy(o);
			}
	where = "";
}

/* True if c's engine arrays are what they were before the call. */
static bool untouched(const struct tcase *c)
{
	bool ok = same(&c->p, &c->p0) && same(&c->g, &c->g0);
	for (int k = 0; k < c->slots; k++)
		ok = ok && same(&c->s[k], &c->s0[k]);
	return ok && (!c->lp || same(&c->l, &c->l0));
}

static void test_skip(void)
{
	char label[128];
	for (int ii = 0; ii < 3; ii++) {
		struct mg_host_optim *o = pool(isas[ii], 3);
		if (!o)
			continue;
		for (int kind = 0; kind < 2; kind++) {
			const struct setting *st =
				kind ? &sgd_settings[2] : &adamw_settings[1];
			struct mg_optim_vals v = vals_for(st);
			v.skip = 1;
			struct tcase c[3];
			struct mg_optim_slice s[3];
			for (int k = 0; k < 3; k++) {
				const struct combo *cb = &combos[k * 4 % 12];
				tc_init(&c[k], &st->h, false, cb->mt, cb->gt,
					cb->lt != MG_F32, cb->lt, true,
					k == 1 ? 100003 : 777);
				s[k] = c[k].es;
			}
			snprintf(label, sizeof(label), "skip, %s, %s", isas[ii],
				 st->name);
			where = label;
			if (mg_host_optim_run(o, &st->h, &v, s, 3) != 0)
				fail("run: %s", mg_last_error());
			for (int k = 0; k < 3; k++) {
				if (!untouched(&c[k]))
					fail("slice %d changed", k);
				tc_free(&c[k]);
			}
		}
		mg_host_optim_destroy(o);
	}
	where = "";
}

/* Bad slices fail before anything is touched; bad pool settings fail. */
static void test_errors(void)
{
	struct mg_host_optim *o = pool("scalar", 2);
	if (!o)
		return;
	const struct setting *st = &adamw_settings[1];
	struct mg_optim_vals v = vals_for(st);
	struct tcase good;
	tc_init(&good, &st->h, false, MG_F32, MG_F32, true, MG_BF16, true,
		40000);
	struct {
		const char *what;
		struct combo cb;
		int breakage; /* 0: dtypes; 1: n < 0; 2: no state */
	} bad[] = {
		{"F16 gradients, F64 master", {MG_F64, MG_F16, MG_F32}, 0},
		{"BF16 gradients, F64 master", {MG_F64, MG_BF16, MG_F32}, 0},
		{"F32 gradients, F64 master", {MG_F64, MG_F32, MG_F32}, 0},
		{"F64 gradients, F32 master", {MG_F32, MG_F64, MG_F32}, 0},
		{"F16 master", {MG_F16, MG_F16, MG_F32}, 0},
		{"F32 copy", {MG_F32, MG_F32, MG_F32}, 3},
		{"negative n", {MG_F32, MG_F32, MG_F32}, 1},
		{"no state", {MG_F32, MG_F32, MG_F32}, 2},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		where = bad[i].what;
		struct tcase b;
		enum mg_dtype mt =
			bad[i].cb.mt == MG_F16 ? MG_F32 : bad[i].cb.mt;
		tc_init(&b, &st->h, false, mt, MG_F32, false, MG_F32, true,
			100);
		struct mg_optim_slice s[2] = {good.es, b.es};
		s[1].dtype = bad[i].cb.mt;
		s[1].grad_dtype = bad[i].cb.gt;
		if (bad[i].breakage == 1)
			s[1].n = -5;
		if (bad[i].breakage == 2)
			s[1].state[1] = NULL;
		if (bad[i].breakage == 3) {
			s[1].param_lp = b.p0.d; /* never written: fails */
			s[1].lp_dtype = MG_F32;
		}
		if (mg_host_optim_run(o, &st->h, &v, s, 2) == 0)
			fail("accepted");
		else if (!strstr(mg_last_error(), "slice 1"))
			fail("message does not name the slice: %s",
			     mg_last_error());
		if (!untouched(&good) || !untouched(&b))
			fail("a failed call changed memory");
		tc_free(&b);
	}
	where = "unknown optimizer";
	struct mg_optim_hparams h = st->h;
	h.kind = (enum mg_optim_kind)7;
	if (mg_host_optim_run(o, &h, &v, &good.es, 1) == 0)
		fail("accepted");
	tc_free(&good);
	mg_host_optim_destroy(o);

	where = "create";
	struct mg_host_optim *x = NULL;
	if (mg_host_optim_create(-1, &x) == 0 || x)
		fail("threads -1 accepted");
	setenv("MG_HOST_OPTIM_ISA", "sse9", 1);
	if (mg_host_optim_create(1, &x) == 0 || x)
		fail("MG_HOST_OPTIM_ISA=sse9 accepted");
	else if (!strstr(mg_last_error(), "sse9"))
		fail("message: %s", mg_last_error());
	unsetenv("MG_HOST_OPTIM_ISA");
	where = "";
}

/* The pool over many runs: repeated steps stay with the reference;
 * default size; create/destroy cycles (ASan watches the threads). */
static void test_pool(void)
{
	struct mg_host_optim *o = NULL;
	where = "create(0)";
	if (mg_host_optim_create(0, &o) != 0) {
		fail("%s", mg_last_error());
		return;
	}
	printf("default pool: %d threads, isa %s\n", mg_host_optim_threads(o),
	       mg_host_optim_isa(o));
	if (mg_host_optim_threads(o) < 1)
		fail("%d threads", mg_host_optim_threads(o));
	mg_host_optim_destroy(o);

	char label[128];
	for (int ii = 0; ii < 3; ii++) {
		o = pool(isas[ii], 5);
		if (!o)
			continue;
		snprintf(label, sizeof(label), "%s x5, 200 steps", isas[ii]);
		where = label;
		const struct setting *st = &adamw_settings[1];
		struct tcase c;
		tc_init(&c, &st->h, false, MG_F32, MG_BF16, true, MG_BF16, true,
			90001);
		for (int t = 0; t < 200; t++) {
			struct mg_optim_vals v = vals_for(st);
			v.lr *= (float)(1 + 0.01 * t);
			if (mg_host_optim_run(o, &st->h, &v, &c.es, 1) != 0) {
				fail("run %d: %s", t, mg_last_error());
				break;
			}
			if (tc_reference(&c, &st->h, &v) != 0)
				break;
		}
		/* Moments drift apart by rounding step after step at most. */
		tc_check(&c);
		tc_free(&c);
		mg_host_optim_destroy(o);
	}
	where = "create/destroy";
	for (int i = 0; i < 50; i++) {
		if (mg_host_optim_create(1 + i % 7, &o) != 0) {
			fail("%s", mg_last_error());
			break;
		}
		mg_host_optim_destroy(o);
	}
	where = "";
}

/* fail()'s context: the seed to rerun with and the running case. */
static void print_context(FILE *f)
{
	fprintf(f, " (seed %llu) %s", (unsigned long long)seed, where);
}

/* mg_host_optim_zero: every byte of the range zero, not one byte
 * around it touched, for sizes below, at and above one thread's share,
 * odd offsets and lengths, on pools of 1, 3 and 8 threads; NULL refused
 * unless empty. */
static void test_zero(void)
{
	static const size_t lens[] = {
		0, 1, 63, 4096, 65537, 1000003, 4 * 16384 * 9 + 5};
	const size_t guard = 64;
	char label[96];
	for (int ti = 0; ti < 3; ti++) {
		const int threads = ti == 0 ? 1 : ti == 1 ? 3 : 8;
		struct mg_host_optim *o = pool("scalar", threads);
		if (!o)
			return;
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
			const size_t n = lens[li], off = 1 + li % 7;
			snprintf(label, sizeof label,
				 "zero %zu bytes at +%zu, "
				 "%d threads",
				 n, off, threads);
			where = label;
			unsigned char *b = malloc(n + off + guard);
			if (!b) {
				fail("out of memory");
				break;
			}
			memset(b, 0xa5, n + off + guard);
			if (mg_host_optim_zero(o, b + off, n) != 0)
				fail("%s", mg_last_error());
			for (size_t i = 0; i < n + off + guard; i++) {
				const int want =
					i >= off && i < off + n ? 0 : 0xa5;
				if (b[i] != want) {
					fail("byte %zu is 0x%02x, not 0x%02x",
					     i, b[i], want);
					break;
				}
			}
			free(b);
		}
		where = "zero NULL";
		if (mg_host_optim_zero(o, NULL, 0) != 0)
			fail("NULL, 0 bytes: %s", mg_last_error());
		if (mg_host_optim_zero(o, NULL, 8) == 0)
			fail("NULL, 8 bytes accepted");
		mg_host_optim_destroy(o);
	}
	where = "";
}

int main(int argc, char **argv)
{
	fail_context = print_context;
	if (argc != 2) {
		fprintf(stderr, "usage: test_host_optim "
				"adamw|sgd|slices|skip|errors|pool|zero\n");
		return 2;
	}
	const char *s = getenv("MG_TEST_SEED");
	if (s && *s)
		seed = strtoull(s, NULL, 10);
	rng_state = seed;
	const char *t = argv[1];
	if (!strcmp(t, "adamw"))
		test_settings(adamw_settings, 4);
	else if (!strcmp(t, "sgd"))
		test_settings(sgd_settings, 5);
	else if (!strcmp(t, "slices"))
		test_slices();
	else if (!strcmp(t, "skip"))
		test_skip();
	else if (!strcmp(t, "errors"))
		test_errors();
	else if (!strcmp(t, "pool"))
		test_pool();
	else if (!strcmp(t, "zero"))
		test_zero();
	else {
		fprintf(stderr, "unknown test '%s'\n", t);
		return 2;
	}
	if (n_cmp)
		printf("%lld values compared, %lld bit-identical to the "
		       "reference; largest relative error F32 %.3g, F64 %.3g\n",
		       (long long)n_cmp, (long long)n_exact, max_err[0],
		       max_err[1]);
	/* kit/host_optim.c, docs/PLUGINS.md and bench/RESULTS.md promise
	 * bit-exactness with mg_optim_update: held to it, not only to the
	 * tolerances above */
	if (n_exact != n_cmp)
		fail("%lld of %lld values not bit-identical to the reference",
		     (long long)(n_cmp - n_exact), (long long)n_cmp);
	printf("%s: %s (seed %llu)\n", t, failures ? "FAILED" : "ok",
	       (unsigned long long)seed);
	return failures ? 1 : 0;
}
