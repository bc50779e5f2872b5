/*
 * comm_mpi.c - the communicator of CPU ranks, over MPI. Built as its own
 * module (libmg_comm_mpi.so, next to libmg) that comm.c loads only when a
 * CPU job has several ranks, so libmg itself never depends on libmpi and
 * GPU machines without Open MPI still run.
 *
 * Buffers are host memory. Collectives are MPI's non-blocking ones,
 * queued until wait(): the caller must keep every buffer alive and
 * untouched from the collective's call until the next wait() on this
 * communicator. Time is host time spent blocked (in wait() and in the
 * blocking calls), so busy and exposed seconds are the same number.
 *
 * MPI has no half-precision types. F16 and BF16 move as 16-bit words;
 * their reductions convert to F32 temporaries, reduce those with
 * MPI_FLOAT (so the sum accumulates in F32 and rounds once, at the end)
 * and convert back in wait(), so CPU ranks run the bf16 paths GPU ranks
 * run (gradient compression, mixed-precision buckets). Accounting counts
 * the caller's dtype: a BF16 all-reduce puts 2 bytes an element.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "dist/comm_internal.h"

/* A result that wait() still has to move into place: in-place
 * reduce-scatter in NCCL's layout goes through a temporary (copied), and
 * half-precision reductions through F32 ones (converted to `dt`). */
struct mpi_post {
	void *tmp, *dst;
	size_t bytes;	  /* copy: bytes; conversion: elements */
	enum mg_dtype dt; /* MG_F16 / MG_BF16: convert; else copy */
	void *tmp2;	  /* a second temporary to free (the F32 send) */
};

struct mpi_comm {
	MPI_Comm comm;
	MPI_Request *req;
	int nreq, req_cap;
	struct mpi_post *post;
	int npost, post_cap;
	int64_t bytes, calls;
	double blocked; /* seconds the host waited since the last collect */
	struct mg_comm_family fam; /* split() parent and children */
};

/* MPI is initialised by the first communicator (or id broadcast) and
 * finalised when the last one is gone, if this module initialised it. */
static int mpi_refs;
static bool mpi_owned;

static int mpi_fail(int err, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof msg, "error code %d", err);
	return mg_error("mpi: %s: %s", what, msg);
}

static int mpi_acquire(void)
{
	int init = 0, fin = 0;
	MPI_Finalized(&fin);
	if (fin)
		return mg_error("mpi: MPI was already finalized in this "
				"process and cannot be started again");
	MPI_Initialized(&init);
	if (!init) {
		int provided = 0;
		int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED,
					 &provided);
		if (rc != MPI_SUCCESS)
			return mpi_fail(rc, "MPI_Init_thread");
		mpi_owned = true;
	}
	mpi_refs++;
	return 0;
}

static void mpi_release(void)
{
	int fin = 0;
	if (--mpi_refs > 0 || !mpi_owned)
		return;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Finalize();
}

static bool mpi_alive(void)
{
	int fin = 0;
	MPI_Finalized(&fin);
	return !fin;
}

/* MPI datatype of dt; half-precision types have none in MPI, so they are
 * refused with the types that work. */
static int mpi_type(enum mg_dtype dt, MPI_Datatype *t, const char *what)
{
	switch (dt) {
	case MG_F32:
		*t = MPI_FLOAT;
		return 0;
	case MG_F64:
		*t = MPI_DOUBLE;
		return 0;
	case MG_I32:
		*t = MPI_INT32_T;
		return 0;
	case MG_I64:
		*t = MPI_INT64_T;
		return 0;
	case MG_U8:
		*t = MPI_UINT8_T;
		return 0;
	case MG_F16:
	case MG_BF16: /* moved as words; reductions go through F32 */
		*t = MPI_UINT16_T;
		return 0;
	default:
		return mg_error("mpi: %s: %s buffers are not supported on CPU "
				"ranks (F32, F64, F16, BF16, I32, I64 and U8 "
				"are)",
				what, mg_dtype_name(dt));
	}
}

static bool is_half(enum mg_dtype dt)
{
	return dt == MG_F16 || dt == MG_BF16;
}

/* n half-precision elements to F32 and back (round to nearest even). */
static void half_to_f32(float *dst, const uint16_t *src, int64_t n,
			enum mg_dtype dt)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = dt == MG_F16 ? mg_half_to_float(src[i])
				      : mg_bf16_to_float(src[i]);
}

static void f32_to_half(uint16_t *dst, const float *src, int64_t n,
			enum mg_dtype dt)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = dt == MG_F16 ? mg_float_to_half(src[i])
				      : mg_float_to_bf16(src[i]);
}

/* An F32 copy of n half-precision elements at src (NULL: uninitialised)
 * for a reduction; NULL with the error set. */
static float *f32_temp(const void *src, int64_t n, enum mg_dtype dt,
		       const char *what)
{
	float *t = malloc((size_t)(n ? n : 1) * sizeof *t);
	if (!t) {
		mg_error("mpi: %s: out of memory for %lld F32 elements", what,
			 (long long)n);
		return NULL;
	}
	if (src)
		half_to_f32(t, src, n, dt);
	return t;
}

/* Checks every collective starts with: count, buffer, dtype, and MPI's
 * int element counts. */
static int mpi_args(const char *what, const void *p, int64_t count,
		    enum mg_dtype dt, MPI_Datatype *t)
{
	if (mg_comm_check_buf("mpi", what, p, count) || mpi_type(dt, t, what))
		return -1;
	if (count > INT_MAX)
		return mg_error("mpi: %s: %lld elements exceed MPI's int "
				"element count",
				what, (long long)count);
	return 0;
}

static MPI_Op mpi_op(enum mg_reduce_op op)
{
	return op == MG_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

/* Room for one more post-processing entry. */
static int reserve_post(struct mpi_comm *m)
{
	if (m->npost < m->post_cap)
		return 0;
	int cap = m->post_cap ? 2 * m->post_cap : 8;
	struct mpi_post *p = realloc(m->post, (size_t)cap * sizeof *p);
	if (!p)
		return mg_error("mpi: out of memory");
	m->post = p;
	m->post_cap = cap;
	return 0;
}

static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return na && nb && x < y + nb && y < x + na;
}

/* A request slot for the next non-blocking collective (the list grows;
 * wait() empties it). */
static MPI_Request *next_req(struct mpi_comm *m)
{
	if (m->nreq == m->req_cap) {
		int cap = m->req_cap ? 2 * m->req_cap : 16;
		MPI_Request *r = realloc(m->req, (size_t)cap * sizeof *r);
		if (!r) {
			mg_error("mpi: out of memory for requests");
			return NULL;
		}
		m->req = r;
		m->req_cap = cap;
	}
	return &m->req[m->nreq];
}

static void account(struct mpi_comm *m, int64_t count, enum mg_dtype dt)
{
	m->calls++;
	m->bytes += count * (int64_t)mg_dtype_size(dt);
}

static int mpi_all_reduce(struct mg_comm *c, void *buf, int64_t count,
			  enum mg_dtype dt, enum mg_reduce_op op)
{
	struct mpi_comm *m = c->impl;
	MPI_Datatype t = MPI_DATATYPE_NULL;
	MPI_Request *r;
	if (mpi_args("all_reduce", buf, count, dt, &t) ||
	    mg_comm_check_op("mpi", "all_reduce", op) || !(r = next_req(m)))
		return -1;
	void *at = buf;
	if (is_half(dt)) { /* reduce an F32 copy; wait() converts back */
		if (reserve_post(m) ||
		    !(at = f32_temp(buf, count, dt, "all_reduce")))
			return -1;
		t = MPI_FLOAT;
	}
	int rc = MPI_Iallreduce(MPI_IN_PLACE, at, (int)count, t, mpi_op(op),
				m->comm, r);
	if (rc != MPI_SUCCESS) {
		if (at != buf)
			free(at);
		return mpi_fail(rc, "MPI_Iallreduce");
	}
	m->nreq++;
	if (at != buf)
		m->post[m->npost++] =
			(struct mpi_post){at, buf, (size_t)count, dt, NULL};
	account(m, count, dt);
	return 0;
}

/* Half-precision reduce-scatter: the whole send buffer as F32, reduced
 * into an F32 block that wait() converts into recv (any layout, in place
 * included, since both sides are temporaries). Arguments are checked. */
static int reduce_scatter_half(struct mg_comm *c, const void *send, void *recv,
			       int64_t recv_count, enum mg_dtype dt,
			       enum mg_reduce_op op)
{
	struct mpi_comm *m = c->impl;
	MPI_Request *r;
	float *s32 = NULL, *r32 = NULL;
	if (reserve_post(m) || !(r = next_req(m)) ||
	    !(s32 = f32_temp(send, recv_count * c->world, dt,
			     "reduce_scatter")) ||
	    !(r32 = f32_temp(NULL, recv_count, dt, "reduce_scatter"))) {
		free(s32);
		return -1;
	}
	int rc = MPI_Ireduce_scatter_block(s32, r32, (int)recv_count, MPI_FLOAT,
					   mpi_op(op), m->comm, r);
	if (rc != MPI_SUCCESS) {
		free(s32);
		free(r32);
		return mpi_fail(rc, "MPI_Ireduce_scatter_block");
	}
	m->nreq++;
	m->post[m->npost++] =
		(struct mpi_post){r32, recv, (size_t)recv_count, dt, s32};
	account(m, recv_count * c->world, dt);
	return 0;
}

/*
 * NCCL's semantics: send holds world * recv_count elements, recv gets
 * this rank's reduced block. In place is NCCL's layout too (recv ==
 * send + rank * recv_count), which MPI_IN_PLACE does not express, so the
 * result goes through a temporary that wait() copies into recv.
 */
static int mpi_reduce_scatter(struct mg_comm *c, const void *send, void *recv,
			      int64_t recv_count, enum mg_dtype dt,
			      enum mg_reduce_op op)
{
	struct mpi_comm *m = c->impl;
	MPI_Datatype t = MPI_DATATYPE_NULL;
	MPI_Request *r;
	if (mpi_args("reduce_scatter", recv, recv_count, dt, &t) ||
	    mg_comm_check_buf("mpi", "reduce_scatter", send, recv_count) ||
	    mg_comm_check_op("mpi", "reduce_scatter", op))
		return -1;
	if (recv_count * c->world > INT_MAX)
		return mg_error("mpi: reduce_scatter: %lld elements exceed "
				"MPI's int element count",
				(long long)(recv_count * c->world));
	size_t es = mg_dtype_size(dt), rb = (size_t)recv_count * es;
	void *dst = recv;
	if (is_half(dt))
		return reduce_scatter_half(c, send, recv, recv_count, dt, op);
	if (recv == (const char *)send + (size_t)c->rank * rb && rb) {
		if (reserve_post(m))
			return -1;
		if (!(dst = malloc(rb)))
			return mg_error("mpi: reduce_scatter: out of memory "
					"for %zu bytes",
					rb);
	} else if (overlap(send, rb * (size_t)c->world, recv, rb)) {
		return mg_error("mpi: reduce_scatter: the receive buffer "
				"overlaps the send buffer other than at this "
				"rank's block (NCCL's in-place layout)");
	}
	if (!(r = next_req(m))) {
		if (dst != recv)
			free(dst);
		return -1;
	}
	int rc = MPI_Ireduce_scatter_block(send, dst, (int)recv_count, t,
					   mpi_op(op), m->comm, r);
	if (rc != MPI_SUCCESS) {
		if (dst != recv)
			free(dst);
		return mpi_fail(rc, "MPI_Ireduce_scatter_block");
	}
	m->nreq++;
	if (dst != recv)
		m->post[m->npost++] =
			(struct mpi_post){dst, recv, rb, MG_F32, NULL};
	account(m, recv_count * c->world, dt);
	return 0;
}

/* recv holds world * send_count elements; in place when send is this
 * rank's block of recv (NCCL's layout, which is also MPI_IN_PLACE's). */
static int mpi_all_gather(struct mg_comm *c, const void *send, void *recv,
			  int64_t send_count, enum mg_dtype dt)
{
	struct mpi_comm *m = c->impl;
	MPI_Datatype t = MPI_DATATYPE_NULL;
	MPI_Request *r;
	if (mpi_args("all_gather", send, send_count, dt, &t) ||
	    mg_comm_check_buf("mpi", "all_gather", recv, send_count))
		return -1;
	if (send_count * c->world > INT_MAX)
		return mg_error("mpi: all_gather: %lld elements exceed MPI's "
				"int element count",
				(long long)(send_count * c->world));
	size_t sb = (size_t)send_count * mg_dtype_size(dt);
	const void *src = send;
	if (send == (const char *)recv + (size_t)c->rank * sb && sb)
		src = MPI_IN_PLACE;
	else if (overlap(send, sb, recv, sb * (size_t)c->world))
		return mg_error("mpi: all_gather: the send buffer overlaps the "
				"receive buffer other than at this rank's "
				"block (NCCL's in-place layout)");
	if (!(r = next_req(m)))
		return -1;
	int rc = MPI_Iallgather(src, (int)send_count, t, recv, (int)send_count,
				t, m->comm, r);
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Iallgather");
	m->nreq++;
	account(m, send_count, dt);
	return 0;
}

static int mpi_broadcast(struct mg_comm *c, void *buf, int64_t count,
			 enum mg_dtype dt, int root)
{
	struct mpi_comm *m = c->impl;
	MPI_Datatype t = MPI_DATATYPE_NULL;
	MPI_Request *r;
	if (mpi_args("broadcast", buf, count, dt, &t) ||
	    mg_comm_check_root("mpi", c, root) || !(r = next_req(m)))
		return -1;
	int rc = MPI_Ibcast(buf, (int)count, t, root, m->comm, r);
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Ibcast");
	m->nreq++;
	account(m, count, dt);
	return 0;
}

/* Complete every queued collective, then move in-place reduce-scatter
 * results into place. */
static int mpi_wait(struct mg_comm *c)
{
	struct mpi_comm *m = c->impl;
	double t0 = mg_now();
	int rc = m->nreq ? MPI_Waitall(m->nreq, m->req, MPI_STATUSES_IGNORE)
			 : MPI_SUCCESS;
	for (int i = 0; i < m->npost; i++) {
		struct mpi_post *p = &m->post[i];
		if (rc == MPI_SUCCESS && is_half(p->dt))
			f32_to_half(p->dst, p->tmp, (int64_t)p->bytes, p->dt);
		else if (rc == MPI_SUCCESS)
			memcpy(p->dst, p->tmp, p->bytes);
		free(p->tmp);
		free(p->tmp2);
	}
	m->nreq = m->npost = 0;
	m->blocked += mg_now() - t0;
	return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Waitall");
}

static int mpi_barrier(struct mg_comm *c)
{
	struct mpi_comm *m = c->impl;
	double t0 = mg_now();
	int rc = MPI_Barrier(m->comm);
	m->blocked += mg_now() - t0;
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Barrier");
	m->calls++;
	return 0;
}

static int mpi_all_reduce_host(struct mg_comm *c, void *buf, int64_t count,
			       enum mg_dtype dt, enum mg_reduce_op op)
{
	struct mpi_comm *m = c->impl;
	MPI_Datatype t = MPI_DATATYPE_NULL;
	if (mpi_args("all_reduce_host", buf, count, dt, &t) ||
	    mg_comm_check_op("mpi", "all_reduce_host", op))
		return -1;
	void *at = buf;
	if (is_half(dt)) {
		if (!(at = f32_temp(buf, count, dt, "all_reduce_host")))
			return -1;
		t = MPI_FLOAT;
	}
	double t0 = mg_now();
	int rc = MPI_Allreduce(MPI_IN_PLACE, at, (int)count, t, mpi_op(op),
			       m->comm);
	m->blocked += mg_now() - t0;
	if (at != buf) {
		if (rc == MPI_SUCCESS)
			f32_to_half(buf, at, count, dt);
		free(at);
	}
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Allreduce");
	account(m, count, dt);
	return 0;
}

static int mpi_collect(struct mg_comm *c, struct mg_comm_stats *st)
{
	struct mpi_comm *m = c->impl;
	st->bytes = m->bytes;
	st->calls = m->calls;
	st->busy_seconds = m->blocked;
	st->exposed_seconds = m->blocked;
	st->device_bytes = 0;
	m->bytes = m->calls = 0;
	m->blocked = 0;
	for (int i = 0; i < m->fam.nkids; i++) {
		struct mg_comm_stats k;
		mpi_collect(m->fam.kids[i], &k);
		mg_comm_stats_add(st, &k);
	}
	return 0;
}

/* CPU work is never captured into a CUDA graph. */
static void mpi_capture(struct mg_comm *c, enum mg_comm_capture what)
{
	(void)c, (void)what;
}

/* Stop every rank of the job, not only this communicator's. */
static void mpi_abort(struct mg_comm *c, int code)
{
	(void)c;
	fflush(NULL);
	if (mpi_alive())
		MPI_Abort(MPI_COMM_WORLD, code);
	_exit(code);
}

static void mpi_destroy(struct mg_comm *c)
{
	struct mpi_comm *m = c->impl;
	if (m->fam.parent) {
		struct mpi_comm *p = m->fam.parent->impl;
		mg_comm_family_remove(&p->fam, c);
	}
	for (int i = 0; i < m->fam.nkids; i++)
		((struct mpi_comm *)m->fam.kids[i]->impl)->fam.parent = NULL;
	free(m->fam.kids);
	if (mpi_alive()) {
		if (m->nreq)
			MPI_Waitall(m->nreq, m->req, MPI_STATUSES_IGNORE);
		MPI_Comm_free(&m->comm);
	}
	for (int i = 0; i < m->npost; i++) {
		free(m->post[i].tmp);
		free(m->post[i].tmp2);
	}
	free(m->post);
	free(m->req);
	free(m);
	free(c);
	mpi_release();
}

static struct mg_comm *mpi_split(struct mg_comm *c, int color, int key);

/* Wrap an MPI communicator this module now owns (and one reference on
 * MPI itself). NULL with the error set; comm is freed then. */
static struct mg_comm *mpi_wrap(MPI_Comm comm)
{
	struct mg_comm *c = calloc(1, sizeof *c);
	struct mpi_comm *m = calloc(1, sizeof *m);
	int rc = MPI_SUCCESS;
	if (!c || !m) {
		mg_error("mpi: out of memory");
		goto fail;
	}
	rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_rank(comm, &c->rank);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_size(comm, &c->world);
	if (rc != MPI_SUCCESS) {
		mpi_fail(rc, "MPI_Comm_rank/size");
		goto fail;
	}
	m->comm = comm;
	c->backend = "mpi";
	c->impl = m;
	c->all_reduce = mpi_all_reduce;
	c->reduce_scatter = mpi_reduce_scatter;
	c->all_gather = mpi_all_gather;
	c->broadcast = mpi_broadcast;
	c->barrier = mpi_barrier;
	c->wait = mpi_wait;
	c->destroy = mpi_destroy;
	c->all_reduce_host = mpi_all_reduce_host;
	c->split = mpi_split;
	c->collect = mpi_collect;
	c->capture = mpi_capture;
	c->abort = mpi_abort;
	c->supports = mg_comm_supports_std;
	return c;
fail:
	MPI_Comm_free(&comm);
	free(c);
	free(m);
	mpi_release();
	return NULL;
}

/* Collective over c: the ranks passing one color form a communicator,
 * ranked by key (ties by rank in c). */
static struct mg_comm *mpi_split(struct mg_comm *c, int color, int key)
{
	struct mpi_comm *m = c->impl;
	MPI_Comm sub;
	if (color < 0) {
		mg_error("mpi: split: color %d is negative", color);
		return NULL;
	}
	int rc = MPI_Comm_split(m->comm, color, key, &sub);
	if (rc != MPI_SUCCESS) {
		mpi_fail(rc, "MPI_Comm_split");
		return NULL;
	}
	mpi_refs++; /* the sub-communicator keeps MPI alive too */
	struct mg_comm *kid = mpi_wrap(sub);
	if (kid && mg_comm_family_add(&m->fam, kid)) {
		mpi_destroy(kid);
		return NULL;
	}
	if (kid)
		((struct mpi_comm *)kid->impl)->fam.parent = c;
	return kid;
}

MG_EXPORT int mg_comm_mpi_create(const struct mg_dist_env *e,
				 struct mg_comm **out)
{
	MPI_Comm world;
	*out = NULL;
	if (mpi_acquire())
		return mg_error_prefix("starting MPI for rank %d of %d (%s)",
				       e->rank, e->world, e->source);
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
	if (rc != MPI_SUCCESS) {
		mpi_release();
		return mpi_fail(rc, "MPI_Comm_dup");
	}
	*out = mpi_wrap(world);
	return *out ? 0 : -1;
}

MG_EXPORT int mg_comm_mpi_bcast(void *buf, size_t n, int root)
{
	MPI_Comm world;
	if (n > INT_MAX)
		return mg_error("mpi: broadcast of %zu bytes exceeds MPI's int "
				"element count",
				n);
	if (mpi_acquire())
		return -1;
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
	if (rc == MPI_SUCCESS) {
		MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
		rc = MPI_Bcast(buf, (int)n, MPI_BYTE, root, world);
		MPI_Comm_free(&world);
	}
	mpi_release();
	return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Bcast");
}
