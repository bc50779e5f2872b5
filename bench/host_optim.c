/*
 * host_optim.c - how fast the host optimizer engine of offload strategies
 * (kit/host_optim.c) runs an AdamW step over F32
 * master weights in host memory: a plain scalar C loop, the engine's
 * vector path on one thread and on every core, against a memory-bound
 * estimate (a kernel with the same memory traffic and no arithmetic).
 *
 *   bench_host_optim [MPARAMS ...]      (default: 16 128)
 *
 * Two cases: F32 gradients, and BF16 gradients with a BF16 copy of the
 * weights refreshed (what a mixed-precision GPU sends and gets back).
 * Times are medians of at least 3 steps after a warm-up step.
 * MG_HOST_OPTIM_ISA=scalar|avx2|avx512 picks the engine's path.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mg/kit/host_optim.h"
#include "mg/mg.h"

/* The baseline must stay scalar: no auto-vectorisation. */
#if defined(__clang__)
#define NOVEC
#define NOVEC_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#elif defined(__GNUC__)
#define NOVEC __attribute__((optimize("no-tree-vectorize")))
#define NOVEC_LOOP
#else
#define NOVEC
#define NOVEC_LOOP
#endif

struct k32 {
	float b1, c1, b2, c2, eps, mul, step, rbc2, shrink;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* The straightforward loop, F32 gradients. */
NOVEC static void scalar_f32(const struct k32 *k, float *p, const float *g,
			     float *m, float *q, int64_t n)
{
	const float b1 = k->b1, c1 = k->c1, b2 = k->b2, c2 = k->c2;
	const float eps = k->eps, mul = k->mul, step = k->step;
	const float rbc2 = k->rbc2, shrink = k->shrink;
	NOVEC_LOOP
	for (int64_t i = 0; i < n; i++) {
		float gi = g[i] * mul;
		float mi = b1 * m[i] + c1 * gi;
		float qi = b2 * q[i] + c2 * gi * gi;
		m[i] = mi;
		q[i] = qi;
		p[i] = p[i] * shrink - step * mi / (sqrtf(qi) * rbc2 + eps);
	}
}

static inline float bf16_to_f(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

static inline uint16_t f_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

/* The straightforward loop, BF16 gradients in, BF16 copy out. */
NOVEC static void scalar_bf16(const struct k32 *k, float *p, const uint16_t *g,
			      uint16_t *lp, float *m, float *q, int64_t n)
{
	const float b1 = k->b1, c1 = k->c1, b2 = k->b2, c2 = k->c2;
	const float eps = k->eps, mul = k->mul, step = k->step;
	const float rbc2 = k->rbc2, shrink = k->shrink;
	NOVEC_LOOP
	for (int64_t i = 0; i < n; i++) {
		float gi = bf16_to_f(g[i]) * mul;
		float mi = b1 * m[i] + c1 * gi;
		float qi = b2 * q[i] + c2 * gi * gi;
		m[i] = mi;
		q[i] = qi;
		float pi = p[i] * shrink - step * mi / (sqrtf(qi) * rbc2 + eps);
		p[i] = pi;
		lp[i] = f_to_bf16(pi);
	}
}

/* ------------------------------------------------------------------ */
/* The memory-bound estimate: AdamW's traffic (read g, p, m, q; write
 * p, m, q), next to no arithmetic, compiler-vectorised, on T threads. */

struct span {
	float *p, *m, *q;
	const float *g;
	int64_t i0, i1;
};

static void *traffic(void *arg)
{
	const struct span *s = arg;
	float *p = s->p, *m = s->m, *q = s->q;
	const float *g = s->g;
	for (int64_t i = s->i0; i < s->i1; i++) {
		float gi = g[i];
		p[i] = 0.5f * p[i] + gi;
		m[i] = 0.5f * m[i] + gi;
		q[i] = 0.5f * q[i] + gi * gi;
	}
	return NULL;
}

static void traffic_run(float *p, const float *g, float *m, float *q, int64_t n,
			int threads)
{
	pthread_t tid[256];
	struct span sp[256];
	if (threads > 256)
		threads = 256;
	for (int t = 0; t < threads; t++) {
		sp[t] = (struct span){
			p, m, q, g, n * t / threads, n * (t + 1) / threads};
		if (t > 0)
			pthread_create(&tid[t], NULL, traffic, &sp[t]);
	}
	traffic(&sp[0]);
	for (int t = 1; t < threads; t++)
		pthread_join(tid[t], NULL);
}

/* ------------------------------------------------------------------ */

struct arrays {
	float *p, *m, *q, *g;
	uint16_t *gb, *lp;
	int64_t n;
};

static void *xalloc(size_t bytes)
{
	void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
	if (!p) {
		fprintf(stderr, "bench_host_optim: out of memory (%zu bytes)\n",
			bytes);
		exit(1);
	}
	return p;
}

/* Fresh state: moments zero, weights and gradients from a hash. */
static void init(struct arrays *a, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		uint32_t h = (uint32_t)i * 2654435761u;
		float u = (float)(h >> 8) * 0x1.0p-24f * 2 - 1; /* [-1, 1) */
		a->p[i] = u;
		a->g[i] = 1e-2f * u * u - 3e-3f;
		a->gb[i] = f_to_bf16(a->g[i]);
		a->lp[i] = 0;
		a->m[i] = a->q[i] = 0;
	}
}

enum variant { V_SCALAR, V_ENGINE };

struct runner {
	enum variant v;
	bool bf16;
	struct mg_host_optim *eng;
	struct arrays *a;
	int64_t n;
	const struct mg_optim_hparams *h;
	const struct mg_optim_vals *vals;
	const struct k32 *k;
};

static int step(const struct runner *r)
{
	struct arrays *a = r->a;
	if (r->v == V_SCALAR) {
		if (r->bf16)
			scalar_bf16(r->k, a->p, a->gb, a->lp, a->m, a->q, r->n);
		else
			scalar_f32(r->k, a->p, a->g, a->m, a->q, r->n);
		return 0;
	}
	struct mg_optim_slice s = {.dtype = MG_F32,
				   .param = a->p,
				   .grad = r->bf16 ? (void *)a->gb : a->g,
				   .grad_dtype = r->bf16 ? MG_BF16 : MG_F32,
				   .param_lp = r->bf16 ? a->lp : NULL,
				   .lp_dtype = MG_BF16,
				   .state = {a->m, a->q},
				   .n = r->n,
				   .decay = true};
	return mg_host_optim_run(r->eng, r->h, r->vals, &s, 1);
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

/* Median seconds per call of fn over at least 3 calls and 1 s, after a
 * warm-up call. */
#define TIME_MEDIAN(seconds, call)                                             \
	do {                                                                   \
		double ts_[64];                                                \
		int nt_ = 0;                                                   \
		double t0_;                                                    \
		call;                                                          \
		for (double start_ = now();                                    \
		     nt_ < 64 && (nt_ < 3 || now() - start_ < 1.0);) {         \
			t0_ = now();                                           \
			call;                                                  \
			ts_[nt_++] = now() - t0_;                              \
		}                                                              \
		qsort(ts_, (size_t)nt_, sizeof(double), cmp_double);           \
		(seconds) = ts_[nt_ / 2];                                      \
	} while (0)

static void cpu_model(char *out, size_t cap)
{
	snprintf(out, cap, "unknown CPU");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		char *c = strchr(line, ':');
		if (!strncmp(line, "model name", 10) && c) {
			c += 2;
			c[strcspn(c, "\n")] = 0;
			snprintf(out, cap, "%s", c);
			break;
		}
	}
	fclose(f);
}

/* The memory nodes the host has (/sys), 0 if unknown. */
static int numa_nodes(void)
{
	int n = 0;
	char path[64];
	for (;; n++) {
		snprintf(path, sizeof(path), "/sys/devices/system/node/node%d",
			 n);
		FILE *f = fopen(path, "r");
		if (!f)
			break;
		fclose(f);
	}
	return n;
}

/* The arrays above were first touched by one thread (init), so on a host
 * with several memory nodes their pages all sit on that thread's node.
 * offload zeroes its state on the pool first (mg_host_optim_zero), which
 * spreads each page to the node of the thread that updates it: the same
 * bound and engine rows at the largest size, on arrays placed that way. */
static int placed(int64_t n, struct mg_host_optim *all,
		  const struct runner *base, int cores)
{
	struct arrays b = {.n = n};
	float **f32[] = {&b.p, &b.m, &b.q, &b.g};
	for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++)
		*f32[i] = xalloc((size_t)n * 4);
	b.gb = xalloc((size_t)n * 2);
	b.lp = xalloc((size_t)n * 2);
	int rc = 0;
	for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++)
		rc |= mg_host_optim_zero(all, *f32[i], (size_t)n * 4);
	rc |= mg_host_optim_zero(all, b.gb, (size_t)n * 2);
	rc |= mg_host_optim_zero(all, b.lp, (size_t)n * 2);
	if (rc) {
		fprintf(stderr, "bench_host_optim: %s\n", mg_last_error());
		return -1;
	}
	init(&b, n);
	printf("\npages first touched by the pool's threads "
	       "(mg_host_optim_zero, "
	       "as offload places its state); %d memory node(s)\n",
	       numa_nodes());
	char ps[16], label[64];
	snprintf(ps, sizeof(ps), "%lldM", (long long)(n >> 20));
	double tbn, t;
	TIME_MEDIAN(tbn, traffic_run(b.p, b.g, b.m, b.q, n, cores));
	snprintf(label, sizeof(label), "bound, %d threads", cores);
	printf("%-7s %-10s %-24s %9.2f %10.1f %7.1f %9s %8s\n", ps, "traffic",
	       label, 1e3 * tbn, n / tbn / 1e6, n / tbn * 28 / 1e9, "", "");
	struct runner r = *base;
	r.a = &b;
	r.n = n;
	r.eng = all;
	r.v = V_ENGINE;
	r.bf16 = true;
	TIME_MEDIAN(t, rc |= step(&r));
	if (rc) {
		fprintf(stderr, "bench_host_optim: %s\n", mg_last_error());
		return -1;
	}
	snprintf(label, sizeof(label), "%s, %d threads", mg_host_optim_isa(all),
		 cores);
	printf("%-7s %-10s %-24s %9.2f %10.1f %7.1f %9s %7.0f%%\n", ps,
	       "bf16/bf16", label, 1e3 * t, n / t / 1e6, n / t * 28 / 1e9, "",
	       100 * tbn / t);
	for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++)
		free(*f32[i]);
	free(b.gb);
	free(b.lp);
	return 0;
}

int main(int argc, char **argv)
{
	int64_t sizes[16];
	int nsizes = 0;
	for (int i = 1; i < argc && nsizes < 16; i++) {
		char *end;
		double mp = strtod(argv[i], &end);
		if (*end || mp <= 0) {
			fprintf(stderr, "usage: bench_host_optim [MPARAMS ...] "
					"(millions of parameters)\n");
			return 2;
		}
		sizes[nsizes++] = (int64_t)(mp * 1048576);
	}
	if (nsizes == 0) {
		sizes[nsizes++] = 16 << 20;
		sizes[nsizes++] = 128 << 20;
	}
	int64_t nmax = 0;
	for (int i = 0; i < nsizes; i++)
		nmax = sizes[i] > nmax ? sizes[i] : nmax;

	struct mg_host_optim *one = NULL, *all = NULL;
	if (mg_host_optim_create(1, &one) != 0 ||
	    mg_host_optim_create(0, &all) != 0) {
		fprintf(stderr, "bench_host_optim: %s\n", mg_last_error());
		return 1;
	}
	const int cores = mg_host_optim_threads(all);
	const char *isa = mg_host_optim_isa(all);
	char model[256];
	cpu_model(model, sizeof(model));

	struct arrays a = {.n = nmax};
	a.p = xalloc((size_t)nmax * 4);
	a.m = xalloc((size_t)nmax * 4);
	a.q = xalloc((size_t)nmax * 4);
	a.g = xalloc((size_t)nmax * 4);
	a.gb = xalloc((size_t)nmax * 2);
	a.lp = xalloc((size_t)nmax * 2);

	/* A step of a run with peak lr 1e-3 at t = 10. */
	struct mg_optim_hparams h = {.kind = MG_OPTIM_ADAMW,
				     .lr = 1e-3,
				     .beta1 = 0.9,
				     .beta2 = 0.999,
				     .eps = 1e-8,
				     .weight_decay = 0.01};
	struct mg_optim_vals vals = {.lr = 1e-3f,
				     .grad_mul = 1.0f,
				     .bias1 = (float)(1 - pow(0.9, 10)),
				     .bias2 = (float)(1 - pow(0.999, 10))};
	struct k32 k = {.b1 = 0.9f,
			.c1 = 1 - 0.9f,
			.b2 = 0.999f,
			.c2 = 1 - 0.999f,
			.eps = 1e-8f,
			.mul = 1.0f,
			.step = (float)(1e-3 / vals.bias1),
			.rbc2 = (float)(1 / sqrt(vals.bias2)),
			.shrink = (float)(1 - 1e-3 * 0.01)};

	printf("bench_host_optim: AdamW step, F32 master weights and moments "
	       "in host memory\n");
	printf("CPU: %s, %d cores usable; engine path %s\n", model, cores, isa);
	printf("bytes touched per parameter: 28 (F32 grads: read g p m q "
	       "16 B, write p m q 12 B; BF16 grads + BF16 copy: read 14 B, "
	       "write 14 B, +2 B write-allocate)\n\n");
	printf("%-7s %-10s %-24s %9s %10s %7s %9s %8s\n", "params", "grad/copy",
	       "variant", "ms/step", "Mparam/s", "GB/s", "x scalar",
	       "of bound");

	for (int si = 0; si < nsizes; si++) {
		const int64_t n = sizes[si];
		char ps[16];
		snprintf(ps, sizeof(ps), "%lldM", (long long)(n >> 20));
		init(&a, n);
		/* The bound: same-traffic kernel on 1 and on all cores. */
		double tb1, tbn;
		TIME_MEDIAN(tb1, traffic_run(a.p, a.g, a.m, a.q, n, 1));
		TIME_MEDIAN(tbn, traffic_run(a.p, a.g, a.m, a.q, n, cores));
		const double bound1 = n / tb1, boundn = n / tbn;
		printf("%-7s %-10s %-24s %9.2f %10.1f %7.1f %9s %8s\n", ps,
		       "traffic", "bound, 1 thread", 1e3 * tb1, bound1 / 1e6,
		       bound1 * 28 / 1e9, "", "");
		char label[64];
		snprintf(label, sizeof(label), "bound, %d threads", cores);
		printf("%-7s %-10s %-24s %9.2f %10.1f %7.1f %9s %8s\n", ps,
		       "traffic", label, 1e3 * tbn, boundn / 1e6,
		       boundn * 28 / 1e9, "", "");
		for (int bf = 0; bf < 2; bf++) {
			init(&a, n);
			struct runner r = {.v = V_SCALAR,
					   .bf16 = bf,
					   .a = &a,
					   .n = n,
					   .h = &h,
					   .vals = &vals,
					   .k = &k};
			double t_scalar = 0;
			for (int var = 0; var < 3; var++) {
				r.v = var == 0 ? V_SCALAR : V_ENGINE;
				r.eng = var == 1 ? one : all;
				int thr = var == 2 ? cores : 1;
				double t;
				int rc = 0;
				TIME_MEDIAN(t, rc |= step(&r));
				if (rc) {
					fprintf(stderr,
						"bench_host_optim: %s\n",
						mg_last_error());
					return 1;
				}
				if (var == 0) {
					t_scalar = t;
					snprintf(label, sizeof(label),
						 "scalar loop, 1 thread");
				} else {
					snprintf(label, sizeof(label),
						 "%s, %d thread%s", isa, thr,
						 thr > 1 ? "s" : "");
				}
				double rate = n / t;
				double bound = thr > 1 ? boundn : bound1;
				printf("%-7s %-10s %-24s %9.2f %10.1f %7.1f "
				       "%8.2fx %7.0f%%\n",
				       ps, bf ? "bf16/bf16" : "f32/-", label,
				       1e3 * t, rate / 1e6, rate * 28 / 1e9,
				       t_scalar / t, 100 * rate / bound);
			}
		}
	}
	const struct runner r_base = {.h = &h, .vals = &vals, .k = &k};
	if (placed(nmax, all, &r_base, cores) != 0)
		return 1;
	/* Keep the results observable. */
	double sum = 0;
	for (int64_t i = 0; i < nmax; i += 4099)
		sum += a.p[i] + bf16_to_f(a.lp[i]);
	printf("\n(checksum %.6g)\n", sum);
	mg_host_optim_destroy(one);
	mg_host_optim_destroy(all);
	free(a.p);
	free(a.m);
	free(a.q);
	free(a.g);
	free(a.gb);
	free(a.lp);
	return 0;
}
