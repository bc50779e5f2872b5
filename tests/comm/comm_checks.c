/*
 * comm_checks.c - the collective checks shared by the communicator tests
 * (see comm_checks.h). Collectives are issued in batches and waited for
 * once, as strategies do, so the checks also cover several collectives
 * in flight at a time.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_checks.h"

int ct_rank, ct_fail, ct_checks;

static struct mg_comm *C;
static const struct ct_mem *M;

void ct_check(bool cond, const char *fmt, ...)
{
	ct_checks++;
	if (cond)
		return;
	ct_fail++;
	va_list ap;
	va_start(ap, fmt);
	printf("rank %d: FAIL: ", ct_rank);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
}

int ct_ok(int rc, const char *what)
{
	ct_check(rc == 0, "%s returned %d: %s", what, rc,
		 rc ? mg_last_error() : "");
	return rc;
}

double ct_val(int r, int64_t i)
{
	return (double)((i * 7 + (int64_t)r * 13) % 31) - 10.0;
}

double ct_get(enum mg_dtype dt, const void *p, int64_t i)
{
	switch (dt) {
	case MG_F32:
		return ((const float *)p)[i];
	case MG_F64:
		return ((const double *)p)[i];
	case MG_F16:
		return mg_half_to_float(((const uint16_t *)p)[i]);
	case MG_BF16:
		return mg_bf16_to_float(((const uint16_t *)p)[i]);
	case MG_I32:
		return ((const int32_t *)p)[i];
	case MG_I64:
		return (double)((const int64_t *)p)[i];
	case MG_U8:
		return ((const uint8_t *)p)[i];
	default:
		abort();
	}
}

void ct_set(enum mg_dtype dt, void *p, int64_t i, double v)
{
	switch (dt) {
	case MG_F32:
		((float *)p)[i] = (float)v;
		break;
	case MG_F64:
		((double *)p)[i] = v;
		break;
	case MG_F16:
		((uint16_t *)p)[i] = mg_float_to_half((float)v);
		break;
	case MG_BF16:
		((uint16_t *)p)[i] = mg_float_to_bf16((float)v);
		break;
	case MG_I32:
		((int32_t *)p)[i] = (int32_t)v;
		break;
	case MG_I64:
		((int64_t *)p)[i] = (int64_t)v;
		break;
	case MG_U8:
		((uint8_t *)p)[i] = (uint8_t)v;
		break;
	default:
		abort();
	}
}

/* Reduction of every rank's value at element i. */
static double ct_red(enum mg_reduce_op op, int world, int64_t i)
{
	double acc = ct_val(0, i);
	for (int r = 1; r < world; r++)
		acc = op == MG_REDUCE_MAX ? fmax(acc, ct_val(r, i))
					  : acc + ct_val(r, i);
	return acc;
}

static const char *op_name(enum mg_reduce_op op)
{
	return op == MG_REDUCE_MAX ? "MAX" : "SUM";
}

/* Half precision is compared with a relative tolerance; the values are
 * small integers, so everything else must match exactly. */
static bool close_enough(enum mg_dtype dt, double got, double want)
{
	double tol = dt == MG_F16 || dt == MG_BF16 ? 1e-2 : 0;
	return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* A buffer of the communicator's kind with a host mirror. */
struct ct_buf {
	void *mem, *host;
	int64_t n;
	enum mg_dtype dt;
};

static void buf_make(struct ct_buf *b, enum mg_dtype dt, int64_t n)
{
	size_t bytes = (size_t)(n ? n : 1) * mg_dtype_size(dt);
	b->dt = dt;
	b->n = n;
	b->host = calloc(1, bytes);
	b->mem = M->alloc(bytes);
	if (!b->host || !b->mem) {
		printf("rank %d: FAIL: cannot allocate %zu bytes\n", ct_rank,
		       bytes);
		exit(1);
	}
}

static void buf_free(struct ct_buf *b)
{
	M->free(b->mem);
	free(b->host);
}

static void *at(const struct ct_buf *b, int64_t i)
{
	return (char *)b->mem + (size_t)i * mg_dtype_size(b->dt);
}

/* host[i] = ct_val(r, off + i) for the elements [from, from + n), then
 * the whole mirror to the buffer. */
static void buf_fill(struct ct_buf *b, int r, int64_t off, int64_t from,
		     int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		ct_set(b->dt, b->host, from + i, ct_val(r, off + i));
	M->put(b->mem, b->host, (size_t)b->n * mg_dtype_size(b->dt));
}

/* Elements [from, from + n) of the buffer into the mirror. */
static void buf_read(struct ct_buf *b, int64_t from, int64_t n)
{
	size_t es = mg_dtype_size(b->dt);
	M->get((char *)b->host + (size_t)from * es, at(b, from),
	       (size_t)n * es);
}

/* Compare n elements of the mirror from `from` with want(i); one check,
 * naming the first wrong element. */
static void buf_expect(const char *what, struct ct_buf *b, int64_t from,
		       int64_t n, double (*want)(int64_t i, const void *arg),
		       const void *arg)
{
	int64_t bad = 0, first = -1;
	double g = 0, w = 0;
	for (int64_t i = 0; i < n; i++) {
		double gi = ct_get(b->dt, b->host, from + i), wi = want(i, arg);
		if (!close_enough(b->dt, gi, wi)) {
			if (!bad++) {
				first = i;
				g = gi;
				w = wi;
			}
		}
	}
	ct_check(!bad,
		 "%s %s n=%lld: %lld wrong elements, first [%lld] = %g, "
		 "expected %g",
		 what, mg_dtype_name(b->dt), (long long)n, (long long)bad,
		 (long long)first, g, w);
}

struct red_arg {
	enum mg_reduce_op op;
	int64_t off;
};

static double want_red(int64_t i, const void *arg)
{
	const struct red_arg *a = arg;
	return ct_red(a->op, C->world, a->off + i);
}

struct val_arg {
	int r;
	int64_t off;
};

static double want_val(int64_t i, const void *arg)
{
	const struct val_arg *a = arg;
	return ct_val(a->r, a->off + i);
}

static const int64_t counts[] = {0, 1, 7, 1 << 20};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

/* In place, both reductions, every count, all in flight at once. */
static void t_all_reduce(enum mg_dtype dt)
{
	struct ct_buf b[2][NCOUNTS];
	char what[64];
	for (int o = 0; o < 2; o++) {
		for (int k = 0; k < NCOUNTS; k++) {
			buf_make(&b[o][k], dt, counts[k]);
			buf_fill(&b[o][k], C->rank, 0, 0, counts[k]);
			ct_ok(C->all_reduce(C, b[o][k].mem, counts[k], dt,
					    (enum mg_reduce_op)o),
			      "all_reduce");
		}
	}
	ct_ok(C->wait(C), "wait after all_reduce");
	for (int o = 0; o < 2; o++) {
		struct red_arg a = {(enum mg_reduce_op)o, 0};
		snprintf(what, sizeof what, "all_reduce %s", op_name(a.op));
		for (int k = 0; k < NCOUNTS; k++) {
			buf_read(&b[o][k], 0, counts[k]);
			buf_expect(what, &b[o][k], 0, counts[k], want_red, &a);
			buf_free(&b[o][k]);
		}
	}
}

/* Out of place and in NCCL's in-place layout (recv = send + rank * n). */
static void t_reduce_scatter(enum mg_dtype dt)
{
	static const int64_t ns[] = {0, 1, 7, 1000};
	enum { NN = sizeof ns / sizeof ns[0] };
	struct ct_buf send[2][NN], recv[2][NN], inpl[2][NN];
	int W = C->world, R = C->rank;
	char what[80];
	for (int o = 0; o < 2; o++) {
		for (int k = 0; k < NN; k++) {
			int64_t n = ns[k];
			buf_make(&send[o][k], dt, W * n);
			buf_fill(&send[o][k], R, 0, 0, W * n);
			buf_make(&recv[o][k], dt, n);
			ct_ok(C->reduce_scatter(C, send[o][k].mem,
						recv[o][k].mem, n, dt,
						(enum mg_reduce_op)o),
			      "reduce_scatter");
			buf_make(&inpl[o][k], dt, W * n);
			buf_fill(&inpl[o][k], R, 0, 0, W * n);
			ct_ok(C->reduce_scatter(C, inpl[o][k].mem,
						at(&inpl[o][k], R * n), n, dt,
						(enum mg_reduce_op)o),
			      "reduce_scatter in place");
		}
	}
	ct_ok(C->wait(C), "wait after reduce_scatter");
	for (int o = 0; o < 2; o++) {
		for (int k = 0; k < NN; k++) {
			int64_t n = ns[k];
			struct red_arg a = {(enum mg_reduce_op)o, R * n};
			snprintf(what, sizeof what, "reduce_scatter %s",
				 op_name(a.op));
			buf_read(&recv[o][k], 0, n);
			buf_expect(what, &recv[o][k], 0, n, want_red, &a);
			snprintf(what, sizeof what,
				 "reduce_scatter %s in place", op_name(a.op));
			buf_read(&inpl[o][k], R * n, n);
			buf_expect(what, &inpl[o][k], R * n, n, want_red, &a);
			buf_free(&send[o][k]);
			buf_free(&recv[o][k]);
			buf_free(&inpl[o][k]);
		}
	}
}

/* recv holds world * n; in place when send is this rank's block. */
static void t_all_gather(enum mg_dtype dt)
{
	static const int64_t ns[] = {0, 1, 7, 1000};
	enum { NN = sizeof ns / sizeof ns[0] };
	struct ct_buf send[NN], recv[NN], inpl[NN];
	int W = C->world, R = C->rank;
	for (int k = 0; k < NN; k++) {
		int64_t n = ns[k];
		buf_make(&send[k], dt, n);
		buf_fill(&send[k], R, 0, 0, n);
		buf_make(&recv[k], dt, W * n);
		ct_ok(C->all_gather(C, send[k].mem, recv[k].mem, n, dt),
		      "all_gather");
		/* Other ranks' blocks start as garbage (-99). */
		buf_make(&inpl[k], dt, W * n);
		for (int64_t i = 0; i < W * n; i++)
			ct_set(dt, inpl[k].host, i, -99);
		buf_fill(&inpl[k], R, 0, R * n, n);
		ct_ok(C->all_gather(C, at(&inpl[k], R * n), inpl[k].mem, n, dt),
		      "all_gather in place");
	}
	ct_ok(C->wait(C), "wait after all_gather");
	for (int k = 0; k < NN; k++) {
		int64_t n = ns[k];
		buf_read(&recv[k], 0, W * n);
		buf_read(&inpl[k], 0, W * n);
		for (int r = 0; r < W; r++) {
			struct val_arg a = {r, 0};
			char what[64];
			snprintf(what, sizeof what, "all_gather block %d", r);
			buf_expect(what, &recv[k], r * n, n, want_val, &a);
			snprintf(what, sizeof what,
				 "all_gather in place block %d", r);
			buf_expect(what, &inpl[k], r * n, n, want_val, &a);
		}
		buf_free(&send[k]);
		buf_free(&recv[k]);
		buf_free(&inpl[k]);
	}
}

/* From the last rank, so a non-zero root is covered whenever world > 1. */
static void t_broadcast(enum mg_dtype dt)
{
	static const int64_t ns[] = {0, 1, 1000};
	enum { NN = sizeof ns / sizeof ns[0] };
	struct ct_buf b[NN];
	int root = C->world - 1;
	for (int k = 0; k < NN; k++) {
		buf_make(&b[k], dt, ns[k]);
		buf_fill(&b[k], C->rank, 0, 0, ns[k]);
		ct_ok(C->broadcast(C, b[k].mem, ns[k], dt, root), "broadcast");
	}
	ct_ok(C->wait(C), "wait after broadcast");
	for (int k = 0; k < NN; k++) {
		struct val_arg a = {root, 0};
		char what[64];
		snprintf(what, sizeof what, "broadcast from rank %d", root);
		buf_read(&b[k], 0, ns[k]);
		buf_expect(what, &b[k], 0, ns[k], want_val, &a);
		buf_free(&b[k]);
	}
}

/* Bytes, whatever they hold: U8 from the root. */
static void t_broadcast_bytes(void)
{
	struct ct_buf b;
	int root = C->world - 1, n = 300;
	buf_make(&b, MG_U8, n);
	for (int i = 0; i < n; i++)
		((uint8_t *)b.host)[i] = (uint8_t)(i * 3 + C->rank * 7);
	M->put(b.mem, b.host, (size_t)n);
	ct_ok(C->broadcast(C, b.mem, n, MG_U8, root), "broadcast U8");
	ct_ok(C->wait(C), "wait after broadcast U8");
	buf_read(&b, 0, n);
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += ((uint8_t *)b.host)[i] != (uint8_t)(i * 3 + root * 7);
	ct_check(!bad, "broadcast U8 from rank %d: %d wrong bytes", root, bad);
	buf_free(&b);
}

/* Blocking, on host memory, whatever the backend. */
static void t_all_reduce_host(void)
{
	int W = C->world, R = C->rank;
	double d[3] = {R + 1, -R, 0.5};
	int64_t l[2] = {(int64_t)R * R, -R};
	int32_t one = 1;
	if (!ct_ok(C->all_reduce_host(C, d, 3, MG_F64, MG_REDUCE_SUM),
		   "all_reduce_host F64"))
		ct_check(d[0] == W * (W + 1) / 2.0 &&
				 d[1] == -W * (W - 1) / 2.0 && d[2] == 0.5 * W,
			 "all_reduce_host F64 SUM: got %g %g %g", d[0], d[1],
			 d[2]);
	if (!ct_ok(C->all_reduce_host(C, l, 2, MG_I64, MG_REDUCE_MAX),
		   "all_reduce_host I64"))
		ct_check(l[0] == (int64_t)(W - 1) * (W - 1) && l[1] == 0,
			 "all_reduce_host I64 MAX: got %lld %lld",
			 (long long)l[0], (long long)l[1]);
	if (!ct_ok(C->all_reduce_host(C, &one, 1, MG_I32, MG_REDUCE_SUM),
		   "all_reduce_host I32"))
		ct_check(one == W,
			 "all_reduce_host I32 SUM: got %d, expected "
			 "%d",
			 one, W);
	ct_ok(C->all_reduce_host(C, NULL, 0, MG_F32, MG_REDUCE_SUM),
	      "all_reduce_host of 0 elements");
}

/* Two groups (first and second half of the ranks), ranked in reverse by
 * key; a collective on the group sees only its members. */
static void t_split(void)
{
	int W = C->world, R = C->rank, color = R * 2 / W;
	int size = 0, below = 0;
	int64_t sum = 0;
	for (int r = 0; r < W; r++) {
		if (r * 2 / W != color)
			continue;
		size++;
		sum += r;
		below += r > R; /* key -r: larger ranks first */
	}
	struct mg_comm *s = C->split(C, color, -R);
	if (!s) {
		ct_ok(-1, "split");
		return;
	}
	ct_check(s->world == size && s->rank == below,
		 "split color %d: rank %d of %d, expected %d of %d", color,
		 s->rank, s->world, below, size);
	struct ct_buf b;
	buf_make(&b, MG_I64, 2);
	ct_set(MG_I64, b.host, 0, R);
	ct_set(MG_I64, b.host, 1, 1);
	M->put(b.mem, b.host, 2 * sizeof(int64_t));
	ct_ok(s->all_reduce(s, b.mem, 2, MG_I64, MG_REDUCE_SUM),
	      "all_reduce on the split");
	ct_ok(s->wait(s), "wait on the split");
	buf_read(&b, 0, 2);
	ct_check(ct_get(MG_I64, b.host, 0) == (double)sum &&
			 ct_get(MG_I64, b.host, 1) == size,
		 "all_reduce on split color %d: got %g, %g, expected %lld, %d",
		 color, ct_get(MG_I64, b.host, 0), ct_get(MG_I64, b.host, 1),
		 (long long)sum, size);
	double h = 1;
	if (!ct_ok(s->all_reduce_host(s, &h, 1, MG_F64, MG_REDUCE_SUM),
		   "all_reduce_host on the split"))
		ct_check(h == size,
			 "all_reduce_host on the split: %g, "
			 "expected %d",
			 h, size);
	ct_ok(s->barrier(s), "barrier on the split");
	s->destroy(s);
	buf_free(&b);
}

/* Bytes and calls since the last collect(), exactly. */
static void t_stats(void)
{
	struct mg_comm_stats st;
	int W = C->world;
	bool self = C->world == 1; /* one rank moves nothing */
	ct_ok(C->collect(C, &st), "collect (reset)");
	struct ct_buf a, rs_s, rs_r, ag_s, ag_r, bc;
	buf_make(&a, MG_F32, 10);
	buf_make(&rs_s, MG_I64, 3 * W);
	buf_make(&rs_r, MG_I64, 3);
	buf_make(&ag_s, MG_F64, 5);
	buf_make(&ag_r, MG_F64, 5 * W);
	buf_make(&bc, MG_I32, 6);
	ct_ok(C->all_reduce(C, a.mem, 10, MG_F32, MG_REDUCE_SUM), "stats 1");
	ct_ok(C->reduce_scatter(C, rs_s.mem, rs_r.mem, 3, MG_I64,
				MG_REDUCE_SUM),
	      "stats 2");
	ct_ok(C->all_gather(C, ag_s.mem, ag_r.mem, 5, MG_F64), "stats 3");
	ct_ok(C->broadcast(C, bc.mem, 6, MG_I32, 0), "stats 4");
	ct_ok(C->wait(C), "stats wait");
	buf_read(&a, 0, 10); /* the device side synchronises here */
	double h[2] = {1, 2};
	ct_ok(C->all_reduce_host(C, h, 2, MG_F64, MG_REDUCE_SUM), "stats 5");
	ct_ok(C->barrier(C), "stats 6");
	ct_ok(C->collect(C, &st), "collect");
	int64_t bytes = self ? 0 : 40 + 24 * W + 40 + 24 + 16;
	int64_t calls = self ? 0 : 6;
	ct_check(st.bytes == bytes && st.calls == calls,
		 "collect: %lld bytes in %lld calls, expected %lld in %lld",
		 (long long)st.bytes, (long long)st.calls, (long long)bytes,
		 (long long)calls);
	ct_check(st.busy_seconds >= 0 && st.exposed_seconds >= 0 &&
			 st.busy_seconds < 60 && st.exposed_seconds < 60,
		 "collect: busy %g s, exposed %g s", st.busy_seconds,
		 st.exposed_seconds);
	if (!strcmp(C->backend, "nccl"))
		ct_check(st.busy_seconds > 0,
			 "collect: NCCL collectives timed at %g s",
			 st.busy_seconds);
	ct_ok(C->collect(C, &st), "collect again");
	ct_check(st.bytes == 0 && st.calls == 0,
		 "collect resets: %lld bytes, %lld calls the second time",
		 (long long)st.bytes, (long long)st.calls);
	buf_free(&a);
	buf_free(&rs_s);
	buf_free(&rs_r);
	buf_free(&ag_s);
	buf_free(&ag_r);
	buf_free(&bc);
}

/* Refusals must be errors that say what is wrong, and must leave the
 * communicator usable. */
static void t_bad(const enum mg_dtype *reject, int nreject)
{
	struct ct_buf b;
	buf_make(&b, MG_F32, 4);
	for (int k = 0; k < nreject; k++) {
		mg_clear_error();
		int rc = C->all_reduce(C, b.mem, 4, reject[k], MG_REDUCE_SUM);
		const char *name = mg_dtype_name(reject[k]);
		ct_check(rc != 0 && strstr(mg_last_error(), name),
			 "all_reduce of %s: rc %d, error '%s' (expected a "
			 "refusal naming %s)",
			 name, rc, mg_last_error(), name);
		if (rc && !C->rank)
			printf("refused as expected: %s\n", mg_last_error());
	}
	mg_clear_error();
	ct_check(C->all_reduce(C, b.mem, -1, MG_F32, MG_REDUCE_SUM) != 0 &&
			 strstr(mg_last_error(), "negative"),
		 "all_reduce of -1 elements: '%s'", mg_last_error());
	mg_clear_error();
	ct_check(C->broadcast(C, b.mem, 4, MG_F32, C->world) != 0 &&
			 strstr(mg_last_error(), "root"),
		 "broadcast from root %d of %d ranks: '%s'", C->world, C->world,
		 mg_last_error());
	ct_ok(C->wait(C), "wait after refused calls");
	buf_free(&b);
}

int ct_run_all(struct mg_comm *c, const struct ct_mem *mem,
	       const enum mg_dtype *dts, int ndt, const enum mg_dtype *reject,
	       int nreject)
{
	C = c;
	M = mem;
	ct_rank = c->rank;
	/* supports() answers what the checks below exercise and refuse. */
	for (int k = 0; k < ndt; k++)
		for (int coll = MG_COLL_ALL_REDUCE;
		     coll <= MG_COLL_ALL_REDUCE_HOST; coll++)
			ct_check(c->supports(c, (enum mg_comm_coll)coll, dts[k],
					     MG_REDUCE_SUM),
				 "%s: supports(collective %d, %s) is false",
				 c->backend, coll, mg_dtype_name(dts[k]));
	for (int k = 0; k < nreject; k++)
		ct_check(!c->supports(c, MG_COLL_ALL_REDUCE, reject[k],
				      MG_REDUCE_SUM),
			 "%s: supports(all_reduce, %s) is true, but it is "
			 "refused",
			 c->backend, mg_dtype_name(reject[k]));
	for (int k = 0; k < ndt; k++) {
		t_all_reduce(dts[k]);
		t_reduce_scatter(dts[k]);
		t_all_gather(dts[k]);
		t_broadcast(dts[k]);
	}
	t_broadcast_bytes();
	ct_ok(c->barrier(c), "barrier");
	t_all_reduce_host();
	t_split();
	t_stats();
	if (c->world > 1) /* one rank refuses nothing it can skip */
		t_bad(reject, nreject);
	/* The world communicator still works after all of that. */
	t_broadcast(MG_F64);
	return ct_fail;
}

int ct_finish(struct mg_comm *c, const char *name)
{
	int32_t f = ct_fail;
	if (ct_ok(c->all_reduce_host(c, &f, 1, MG_I32, MG_REDUCE_SUM),
		  "summing failures"))
		f = ct_fail ? ct_fail : 1;
	if (c->rank == 0)
		printf("%s: %d ranks over %s: %d checks on rank 0, %d failed "
		       "on all ranks together\n",
		       name, c->world, c->backend, ct_checks, f);
	return f ? 1 : 0;
}
