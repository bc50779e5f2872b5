/*
 * comm_nccl.c - the communicator of CUDA ranks, over NCCL (one process per
 * GPU). Buffers are device memory.
 *
 * Collectives run on the communicator's own high-priority stream so they
 * overlap compute: each one first makes that stream wait for the compute
 * stream (dev->stream) at the point of the call, and wait() makes the
 * compute stream wait for everything issued so far. All of it is stream
 * work only, so a training step captured into a CUDA graph on the compute
 * stream captures its collectives too; wait() must then be called before
 * the capture ends, so the communication stream is joined back.
 *
 * Accounting: every collective records a start and an end event around
 * its NCCL call (busy time), every wait() an event on each stream (how
 * long compute waited: exposed time). The events come from fixed pools
 * per step, one for eager work and one for the captured graph; inside a
 * capture they are recorded as external event nodes, so each replay of
 * the graph records them again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "dist/comm_internal.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/runtime.h"

/* Copy-engine all-gathers (struct mg_comm's window_alloc): NCCL 2.28's
 * symmetric windows and zero-CTA policy. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define NC_WINDOWS 1
struct nc_window {
	char *ptr;
	size_t bytes;
	ncclWindow_t win;
};
#endif

/* Timed collectives and timed waits per step (eager) and per graph;
 * beyond these they still run and are counted, but not timed. */
#define NC_OPS 512
#define NC_WAITS 256

/* Event pairs: (start, end) of collectives, or (compute, comm) of waits. */
struct nc_pool {
	cudaEvent_t a[NC_OPS], b[NC_OPS];
	int cap, n;
};

enum { NC_EAGER = 0, NC_GRAPH = 1 };

struct nccl_comm {
	struct mg_device *dev;
	ncclComm_t nc;
	cudaStream_t stream;	/* communication stream */
	cudaEvent_t fork, join; /* ordering only (no timing) */
	/* Recorded after each wait's collectives (an external node inside a
	 * capture, so every replay records it): what the watchdog polls. */
	cudaEvent_t progress;
	struct nc_pool ops[2];	 /* [NC_EAGER], [NC_GRAPH] */
	struct nc_pool waits[2]; /* same, for wait() */
	bool capturing;		 /* between capture BEGIN and END/ABORT */
	bool have_graph;	 /* a captured step can be replayed */
	bool dirty;		 /* collectives issued since the last wait */
	int64_t bytes, calls;	 /* done since the last collect */
	int64_t cap_bytes, cap_calls;	  /* issued inside the capture */
	int64_t graph_bytes, graph_calls; /* what one replay issues */
	int graph_ops, graph_waits;	  /* graph pool slots it records */
	int replays;			  /* since the last collect */
	void *scratch; /* device staging for all_reduce_host */
	size_t scratch_bytes;
	/* NCCL's own device memory: the driver's used bytes grew by this
	 * much over its init (or split) */
	int64_t init_bytes;
	struct mg_comm_family fam; /* split() parent and children */
#ifdef NC_WINDOWS
	/* Windows live on ce, a communicator over the same ranks whose CTA
	 * policy is zero (the policy is per communicator, and the other
	 * collectives must keep their kernels); all-gathers between two
	 * windows are issued there. */
	ncclComm_t ce;
	struct nc_window *wins;
	int nwins;
	bool ce_told; /* the log said so once */
#endif
};

static int nccl_fail(struct nccl_comm *n, ncclResult_t r, const char *call)
{
	const char *last = ncclGetLastError(n ? n->nc : NULL);
	if (last && *last)
		return mg_error("nccl: %s: %s (%s)", call,
				ncclGetErrorString(r), last);
	return mg_error("nccl: %s: %s", call, ncclGetErrorString(r));
}

#define NCCL_CHECK(n, call, name)                                              \
	do {                                                                   \
		ncclResult_t nc_r_ = (call);                                   \
		if (nc_r_ != ncclSuccess)                                      \
			return nccl_fail(n, nc_r_, name);                      \
	} while (0)

static int nccl_type(enum mg_dtype dt, ncclDataType_t *t, const char *what)
{
	switch (dt) {
	case MG_F32:
		*t = ncclFloat32;
		return 0;
	case MG_F64:
		*t = ncclFloat64;
		return 0;
	case MG_F16:
		*t = ncclFloat16;
		return 0;
	case MG_BF16:
		*t = ncclBfloat16;
		return 0;
	case MG_I32:
		*t = ncclInt32;
		return 0;
	case MG_I64:
		*t = ncclInt64;
		return 0;
	case MG_U8:
		*t = ncclUint8;
		return 0;
	default:
		return mg_error("nccl: %s: %s buffers cannot be reduced or "
				"moved by NCCL (F32, F64, F16, BF16, I32, I64 "
				"and U8 can)",
				what, mg_dtype_name(dt));
	}
}

static ncclRedOp_t nccl_op(enum mg_reduce_op op)
{
	return op == MG_REDUCE_MAX ? ncclMax : ncclSum;
}

static int nc_args(const char *what, const void *p, int64_t count,
		   enum mg_dtype dt, ncclDataType_t *t)
{
	if (mg_comm_check_buf("nccl", what, p, count) || nccl_type(dt, t, what))
		return -1;
	return 0;
}

static int pool_init(struct nc_pool *p, int cap)
{
	p->cap = cap;
	p->n = 0;
	for (int i = 0; i < cap; i++) {
		MG_CUDA_CHECK(cudaEventCreate(&p->a[i]));
		MG_CUDA_CHECK(cudaEventCreate(&p->b[i]));
	}
	return 0;
}

static void pool_free(struct nc_pool *p)
{
	for (int i = 0; i < p->cap; i++) {
		if (p->a[i])
			cudaEventDestroy(p->a[i]);
		if (p->b[i])
			cudaEventDestroy(p->b[i]);
	}
}

/*
 * Seconds between each pair's events, times weight, for the first count
 * pairs; clamp: negative spans (the comm stream was done before compute
 * got to the wait) count as 0. A pair whose events were never recorded
 * (a collective that failed) is skipped; a failing synchronisation is an
 * error (the device is in trouble).
 */
static int pool_sum(struct nc_pool *p, int count, double weight, bool clamp,
		    double *sum)
{
	for (int i = 0; i < count && i < p->cap; i++) {
		MG_CUDA_CHECK(cudaEventSynchronize(p->a[i]));
		MG_CUDA_CHECK(cudaEventSynchronize(p->b[i]));
		float ms = 0;
		if (cudaEventElapsedTime(&ms, p->a[i], p->b[i]) !=
		    cudaSuccess) {
			cudaGetLastError(); /* not sticky: clear it */
			continue;
		}
		if (clamp && ms < 0)
			ms = 0;
		*sum += weight * (double)ms * 1e-3;
	}
	return 0;
}

/* Record a timing event: an external event node inside a capture, so
 * replays record it again; a plain record otherwise. */
static int nc_record(struct nccl_comm *n, cudaEvent_t ev, cudaStream_t s)
{
	if (n->capturing)
		MG_CUDA_CHECK(cudaEventRecordWithFlags(
			ev, s, cudaEventRecordExternal));
	else
		MG_CUDA_CHECK(cudaEventRecord(ev, s));
	return 0;
}

/* The compute stream must be capturing exactly when capture() said so,
 * or the accounting (and the event records) would be wrong. */
static int nc_check_capture(struct nccl_comm *n, const char *what)
{
	enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	MG_CUDA_CHECK(cudaStreamIsCapturing((cudaStream_t)n->dev->stream, &cs));
	if (cs == cudaStreamCaptureStatusInvalidated)
		return mg_error("nccl: %s: the CUDA graph capture of the "
				"compute stream was invalidated by an earlier "
				"error",
				what);
	if (cs == cudaStreamCaptureStatusActive && !n->capturing)
		return mg_error("nccl: %s: the compute stream is being "
				"captured into a CUDA graph, but "
				"capture(MG_COMM_CAPTURE_BEGIN) was not called",
				what);
	if (cs != cudaStreamCaptureStatusActive && n->capturing)
		return mg_error("nccl: %s: capture(MG_COMM_CAPTURE_BEGIN) was "
				"called, but the compute stream is not being "
				"captured",
				what);
	return 0;
}

/* The communication stream waits for the compute stream's work so far
 * (a plain record: inside a capture it forks the capture onto it). */
static int nc_fork(struct nccl_comm *n)
{
	MG_CUDA_CHECK(cudaEventRecord(n->fork, (cudaStream_t)n->dev->stream));
	MG_CUDA_CHECK(cudaStreamWaitEvent(n->stream, n->fork, 0));
	return 0;
}

/* Before a collective: order after compute, take a timing slot (*slot
 * -1 when the pool is used up) and record its start. */
static int nc_begin(struct nccl_comm *n, const char *what, int *slot)
{
	*slot = -1;
	if (nc_check_capture(n, what) || nc_fork(n))
		return -1;
	struct nc_pool *p = &n->ops[n->capturing ? NC_GRAPH : NC_EAGER];
	if (p->n < p->cap) {
		*slot = p->n++;
		if (nc_record(n, p->a[*slot], n->stream))
			return -1;
	}
	return 0;
}

/* After a collective: record its end and count it (done now, or done by
 * each replay of the graph being captured). r is the NCCL call's result:
 * a failed call is not counted, and its error is what is returned. */
static int nc_end(struct nccl_comm *n, int slot, int64_t bytes, ncclResult_t r,
		  const char *call)
{
	struct nc_pool *p = &n->ops[n->capturing ? NC_GRAPH : NC_EAGER];
	if (slot >= 0 && nc_record(n, p->b[slot], n->stream))
		return -1;
	if (r != ncclSuccess)
		return nccl_fail(n, r, call);
	if (n->capturing) {
		n->cap_calls++;
		n->cap_bytes += bytes;
	} else {
		n->calls++;
		n->bytes += bytes;
	}
	n->dirty = true;
	return 0;
}

static int nccl_all_reduce(struct mg_comm *c, void *buf, int64_t count,
			   enum mg_dtype dt, enum mg_reduce_op op)
{
	struct nccl_comm *n = c->impl;
	ncclDataType_t t = ncclFloat32;
	int slot;
	if (nc_args("all_reduce", buf, count, dt, &t) ||
	    mg_comm_check_op("nccl", "all_reduce", op) ||
	    nc_begin(n, "all_reduce", &slot))
		return -1;
	ncclResult_t r = ncclSuccess;
	if (count)
		r = ncclAllReduce(buf, buf, (size_t)count, t, nccl_op(op),
				  n->nc, n->stream);
	return nc_end(n, slot, count * (int64_t)mg_dtype_size(dt), r,
		      "ncclAllReduce");
}

/* NCCL's semantics: send holds world * recv_count elements; in place when
 * recv == send + rank * recv_count. */
static int nccl_reduce_scatter(struct mg_comm *c, const void *send, void *recv,
			       int64_t recv_count, enum mg_dtype dt,
			       enum mg_reduce_op op)
{
	struct nccl_comm *n = c->impl;
	ncclDataType_t t = ncclFloat32;
	int slot;
	if (nc_args("reduce_scatter", recv, recv_count, dt, &t) ||
	    mg_comm_check_buf("nccl", "reduce_scatter", send, recv_count) ||
	    mg_comm_check_op("nccl", "reduce_scatter", op) ||
	    nc_begin(n, "reduce_scatter", &slot))
		return -1;
	ncclResult_t r = ncclSuccess;
	if (recv_count)
		r = ncclReduceScatter(send, recv, (size_t)recv_count, t,
				      nccl_op(op), n->nc, n->stream);
	return nc_end(n, slot,
		      recv_count * c->world * (int64_t)mg_dtype_size(dt), r,
		      "ncclReduceScatter");
}

#ifdef NC_WINDOWS
/* Whether [p, p + bytes) lies inside one of n's windows. */
static bool nc_in_window(const struct nccl_comm *n, const void *p, size_t bytes)
{
	const uintptr_t q = (uintptr_t)p;
	for (int i = 0; i < n->nwins; i++) {
		const uintptr_t w = (uintptr_t)n->wins[i].ptr;
		if (q >= w && bytes <= n->wins[i].bytes &&
		    q - w <= n->wins[i].bytes - bytes)
			return true;
	}
	return false;
}
#endif

/* recv holds world * send_count elements; in place when send == recv +
 * rank * send_count. An all-gather between two windows goes to the
 * zero-CTA communicator (window_alloc below), and only outside a CUDA
 * graph capture: NCCL 2.28.3's copy-engine all-gathers replayed from a
 * captured fsdp step hung on 2 H200s (tiny and 10 MB units; the same
 * steps run eagerly passed), so the trainer does not capture while
 * windows are lent (mg_buf_windows_live), and a capture that reaches
 * one anyway fails here, before anything is enqueued. */
static int nccl_all_gather(struct mg_comm *c, const void *send, void *recv,
			   int64_t send_count, enum mg_dtype dt)
{
	struct nccl_comm *n = c->impl;
	ncclDataType_t t = ncclFloat32;
	int slot;
	if (nc_args("all_gather", send, send_count, dt, &t) ||
	    mg_comm_check_buf("nccl", "all_gather", recv, send_count))
		return -1;
	ncclComm_t nc = n->nc;
#ifdef NC_WINDOWS
	size_t sb = (size_t)send_count * mg_dtype_size(dt);
	bool windowed = n->nwins && nc_in_window(n, send, sb) &&
			nc_in_window(n, recv, sb * (size_t)c->world);
	if (windowed && n->capturing)
		return mg_error("nccl: copy-engine all-gathers are not "
				"captured into CUDA graphs (NCCL's hung on "
				"replay); steps with them run eagerly");
#endif
	if (nc_begin(n, "all_gather", &slot))
		return -1;
#ifdef NC_WINDOWS
	if (windowed) {
		nc = n->ce;
		if (!n->ce_told)
			mg_info("nccl: all-gathers between windows go to the "
				"zero-CTA communicator (copy engines where "
				"NCCL can)");
		n->ce_told = true;
	}
#endif
	ncclResult_t r = ncclSuccess;
	if (send_count)
		r = ncclAllGather(send, recv, (size_t)send_count, t, nc,
				  n->stream);
	return nc_end(n, slot, send_count * (int64_t)mg_dtype_size(dt), r,
		      "ncclAllGather");
}

static int nccl_broadcast(struct mg_comm *c, void *buf, int64_t count,
			  enum mg_dtype dt, int root)
{
	struct nccl_comm *n = c->impl;
	ncclDataType_t t = ncclFloat32;
	int slot;
	if (nc_args("broadcast", buf, count, dt, &t) ||
	    mg_comm_check_root("nccl", c, root) ||
	    nc_begin(n, "broadcast", &slot))
		return -1;
	ncclResult_t r = ncclSuccess;
	if (count)
		r = ncclBroadcast(buf, buf, (size_t)count, t, root, n->nc,
				  n->stream);
	return nc_end(n, slot, count * (int64_t)mg_dtype_size(dt), r,
		      "ncclBroadcast");
}

/* The compute stream waits for every collective issued so far; the two
 * timing events say how long it had to (exposed time). */
static int nccl_wait(struct mg_comm *c)
{
	struct nccl_comm *n = c->impl;
	cudaStream_t compute = n->dev->stream;
	if (!n->dirty)
		return 0; /* nothing to join (and nothing captured to join) */
	if (nc_check_capture(n, "wait"))
		return -1;
	struct nc_pool *p = &n->waits[n->capturing ? NC_GRAPH : NC_EAGER];
	if (p->n < p->cap) {
		int i = p->n++;
		if (nc_record(n, p->a[i], compute) ||
		    nc_record(n, p->b[i], n->stream))
			return -1;
	}
	MG_CUDA_CHECK(cudaEventRecord(n->join, n->stream));
	MG_CUDA_CHECK(cudaStreamWaitEvent(compute, n->join, 0));
	if (nc_record(n, n->progress, n->stream))
		return -1;
	n->dirty = false;
	return 0;
}

/* The watchdog's probe (comm_internal.h). It runs on the watchdog's
 * thread, hence the device made current there, and in relaxed capture
 * mode, as PyTorch's NCCL watchdog does: a query from another thread must
 * not invalidate a capture of the step in progress on the main one. */
int mg_comm_nccl_pending(const struct mg_comm *c)
{
	const struct nccl_comm *n = c->impl;
	if (cudaSetDevice(n->dev->ordinal) != cudaSuccess)
		return -1;
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
	if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
		return -1;
	cudaError_t e = cudaEventQuery(n->progress);
	cudaThreadExchangeStreamCaptureMode(&mode);
	if (e == cudaErrorNotReady)
		return 1;
	if (e != cudaSuccess)
		cudaGetLastError(); /* this thread's, not the trainer's */
	return e == cudaSuccess ? 0 : -1;
}

/* Blocking calls cannot be captured: they synchronise the host. */
static int nc_not_capturing(struct nccl_comm *n, const char *what)
{
	if (n->capturing)
		return mg_error("nccl: %s blocks the host and cannot be part "
				"of a CUDA graph capture",
				what);
	return nc_check_capture(n, what);
}

/* Device staging memory of at least bytes (never inside a capture). */
static int nc_scratch(struct nccl_comm *n, size_t bytes)
{
	if (bytes <= n->scratch_bytes)
		return 0;
	size_t want = bytes < 256 ? 256 : bytes;
	if (n->scratch) {
		MG_CUDA_CHECK(cudaStreamSynchronize(n->stream));
		MG_CUDA_CHECK(cudaFree(n->scratch));
		n->scratch = NULL;
		n->scratch_bytes = 0;
	}
	MG_CUDA_CHECK(cudaMalloc(&n->scratch, want));
	n->scratch_bytes = want;
	return 0;
}

/* Host buffer through the device: copy in, all-reduce, copy out, all on
 * the communication stream after the compute stream's work so far, so
 * it stays in order with the collectives of replayed graphs. */
static int nccl_all_reduce_host(struct mg_comm *c, void *buf, int64_t count,
				enum mg_dtype dt, enum mg_reduce_op op)
{
	struct nccl_comm *n = c->impl;
	ncclDataType_t t = ncclFloat32;
	if (nc_args("all_reduce_host", buf, count, dt, &t) ||
	    mg_comm_check_op("nccl", "all_reduce_host", op) ||
	    nc_not_capturing(n, "all_reduce_host"))
		return -1;
	size_t bytes = (size_t)count * mg_dtype_size(dt);
	if (nc_scratch(n, bytes) || nc_fork(n))
		return -1;
	if (count) {
		MG_CUDA_CHECK(cudaMemcpyAsync(n->scratch, buf, bytes,
					      cudaMemcpyHostToDevice,
					      n->stream));
		NCCL_CHECK(n,
			   ncclAllReduce(n->scratch, n->scratch, (size_t)count,
					 t, nccl_op(op), n->nc, n->stream),
			   "ncclAllReduce");
		MG_CUDA_CHECK(cudaMemcpyAsync(buf, n->scratch, bytes,
					      cudaMemcpyDeviceToHost,
					      n->stream));
	}
	MG_CUDA_CHECK(cudaStreamSynchronize(n->stream));
	n->calls++;
	n->bytes += (int64_t)bytes;
	return 0;
}

#ifdef NC_WINDOWS
/*
 * window_alloc: ncclMemAlloc'd memory registered as a symmetric window on
 * n->ce (split from n->nc at the first call). NCCL's registration is
 * collective, so the ranks first agree that every one of them has its
 * memory: a rank out of memory makes all of them fail alike (and fall
 * back alike) instead of leaving the others waiting in the registration.
 */
static int nccl_window_alloc(struct mg_comm *c, size_t bytes, void **ptr)
{
	struct nccl_comm *n = c->impl;
	*ptr = NULL;
	if (nc_not_capturing(n, "window_alloc"))
		return -1;
	int ver = 0;
	NCCL_CHECK(n, ncclGetVersion(&ver), "ncclGetVersion");
	if (ver < NCCL_VERSION(2, 28, 0))
		return mg_error("nccl: copy-engine all-gathers need NCCL 2.28 "
				"or later; this process runs %d.%d.%d",
				ver / 10000, ver / 100 % 100, ver % 100);
	void *p = NULL;
	ncclResult_t r = ncclMemAlloc(&p, bytes);
	struct nc_window *w =
		realloc(n->wins, (size_t)(n->nwins + 1) * sizeof *w);
	if (w)
		n->wins = w;
	int32_t failed = r != ncclSuccess || !w;
	if (nccl_all_reduce_host(c, &failed, 1, MG_I32, MG_REDUCE_SUM) ||
	    failed) {
		if (p)
			ncclMemFree(p);
		if (!failed)
			return -1; /* the agreement itself failed */
		return mg_error("nccl: no window of %zu bytes: %d rank(s) "
				"could not allocate it%s%s",
				bytes, (int)failed,
				r != ncclSuccess ? "; this one: ncclMemAlloc: "
				: w		 ? ""
						 : "; this one: host memory",
				r != ncclSuccess ? ncclGetErrorString(r) : "");
	}
	if (!n->ce) {
		ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
		cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
		int64_t before = mg_cuda_used_bytes();
		r = ncclCommSplit(n->nc, 0, c->rank, &n->ce, &cfg);
		if (r != ncclSuccess) {
			n->ce = NULL;
			ncclMemFree(p);
			return nccl_fail(n, r, "ncclCommSplit (zero CTA)");
		}
		int64_t after = mg_cuda_used_bytes();
		if (before >= 0 && after > before)
			n->init_bytes += after - before;
	}
	ncclWindow_t win;
	r = ncclCommWindowRegister(n->ce, p, bytes, &win,
				   NCCL_WIN_COLL_SYMMETRIC);
	if (r != ncclSuccess) {
		ncclMemFree(p);
		return nccl_fail(n, r, "ncclCommWindowRegister");
	}
	n->wins[n->nwins++] = (struct nc_window){p, bytes, win};
	*ptr = p;
	return 0;
}

/* Deregister and free window w, after the device is done with it. */
static void nc_window_release(struct nccl_comm *n, struct nc_window *w)
{
	cudaDeviceSynchronize();
	ncclResult_t r = ncclCommWindowDeregister(n->ce, w->win);
	if (r == ncclSuccess)
		r = ncclMemFree(w->ptr);
	if (r != ncclSuccess) {
		nccl_fail(n, r, "releasing a window");
		mg_warn("%s", mg_last_error());
	}
}

static void nccl_window_free(struct mg_comm *c, void *ptr)
{
	struct nccl_comm *n = c->impl;
	for (int i = 0; i < n->nwins; i++)
		if (n->wins[i].ptr == ptr) {
			nc_window_release(n, &n->wins[i]);
			memmove(&n->wins[i], &n->wins[i + 1],
				(size_t)(n->nwins - i - 1) * sizeof *n->wins);
			n->nwins--;
			return;
		}
	mg_warn("nccl: window_free of %p, which is not a window of this "
		"communicator",
		ptr);
}

/* Teardown: windows still registered are released here (their mg_bufs
 * become orphans that mg_buf_free only forgets), then ce goes. */
static void nc_windows_destroy(struct mg_comm *c)
{
	struct nccl_comm *n = c->impl;
	for (int i = 0; i < n->nwins; i++)
		nc_window_release(n, &n->wins[i]);
	if (n->nwins)
		mg_buf_windows_orphan(c);
	n->nwins = 0;
	free(n->wins);
	n->wins = NULL;
	if (n->ce) {
		ncclCommFinalize(n->ce);
		ncclCommDestroy(n->ce);
		n->ce = NULL;
	}
}
#endif

/* NCCL has no barrier: a one-element all-reduce the host waits for. */
static int nccl_barrier(struct mg_comm *c)
{
	struct nccl_comm *n = c->impl;
	if (nc_not_capturing(n, "barrier"))
		return -1;
	if (nc_scratch(n, sizeof(int32_t)) || nc_fork(n))
		return -1;
	NCCL_CHECK(n,
		   ncclAllReduce(n->scratch, n->scratch, 1, ncclInt32, ncclSum,
				 n->nc, n->stream),
		   "ncclAllReduce (barrier)");
	MG_CUDA_CHECK(cudaStreamSynchronize(n->stream));
	n->calls++;
	return 0;
}

/*
 * Busy time: every timed collective's span (the graph's ones weighted by
 * the replays since the last collect: the last replay's time stands for
 * each); exposed time: how long compute waited at each wait(). The
 * blocking calls (all_reduce_host, barrier) are counted but not timed:
 * they run outside the step, where the host waits anyway. The
 * caller has synchronised the compute stream; the events are synchronised
 * again anyway before they are read.
 */
static int nccl_collect(struct mg_comm *c, struct mg_comm_stats *st)
{
	struct nccl_comm *n = c->impl;
	double busy = 0, exposed = 0;
	int rc = pool_sum(&n->ops[NC_EAGER], n->ops[NC_EAGER].n, 1, false,
			  &busy);
	if (!rc)
		rc = pool_sum(&n->waits[NC_EAGER], n->waits[NC_EAGER].n, 1,
			      true, &exposed);
	if (!rc && n->have_graph && n->replays) {
		rc = pool_sum(&n->ops[NC_GRAPH], n->graph_ops, n->replays,
			      false, &busy);
		if (!rc)
			rc = pool_sum(&n->waits[NC_GRAPH], n->graph_waits,
				      n->replays, true, &exposed);
	}
	st->bytes = n->bytes;
	st->calls = n->calls;
	st->busy_seconds = busy;
	st->exposed_seconds = exposed;
	st->device_bytes = n->init_bytes + (int64_t)n->scratch_bytes;
	n->ops[NC_EAGER].n = n->waits[NC_EAGER].n = 0;
	n->bytes = n->calls = 0;
	n->replays = 0;
	for (int i = 0; i < n->fam.nkids && !rc; i++) {
		struct mg_comm_stats k;
		rc = nccl_collect(n->fam.kids[i], &k);
		mg_comm_stats_add(st, &k);
	}
	return rc ? mg_error_prefix("nccl: collect") : 0;
}

/* Graph bookkeeping (see enum mg_comm_capture). */
static void nccl_capture(struct mg_comm *c, enum mg_comm_capture what)
{
	struct nccl_comm *n = c->impl;
	switch (what) {
	case MG_COMM_CAPTURE_BEGIN:
		/* Eager collectives nobody waited for: join them now if the
		 * capture has not started yet (it could not wait for them). */
		if (n->dirty && !n->capturing) {
			enum cudaStreamCaptureStatus cs;
			if (cudaStreamIsCapturing((cudaStream_t)n->dev->stream,
						  &cs) == cudaSuccess &&
			    cs == cudaStreamCaptureStatusNone && nccl_wait(c))
				mg_warn("nccl: joining collectives before a "
					"capture: %s",
					mg_last_error());
		}
		n->capturing = true;
		n->have_graph = false;
		n->dirty = false;
		n->ops[NC_GRAPH].n = n->waits[NC_GRAPH].n = 0;
		n->cap_bytes = n->cap_calls = 0;
		n->replays = 0;
		break;
	case MG_COMM_CAPTURE_END:
		n->capturing = false;
		n->have_graph = true;
		n->dirty = false; /* nothing captured runs until a replay */
		n->graph_ops = n->ops[NC_GRAPH].n;
		n->graph_waits = n->waits[NC_GRAPH].n;
		n->graph_bytes = n->cap_bytes;
		n->graph_calls = n->cap_calls;
		break;
	case MG_COMM_CAPTURE_ABORT:
		n->capturing = false;
		n->have_graph = false;
		n->dirty = false;
		n->ops[NC_GRAPH].n = n->waits[NC_GRAPH].n = 0;
		n->graph_ops = n->graph_waits = 0;
		n->graph_bytes = n->graph_calls = 0;
		n->replays = 0;
		break;
	case MG_COMM_REPLAY:
		if (n->have_graph) {
			n->bytes += n->graph_bytes;
			n->calls += n->graph_calls;
			n->replays++;
		}
		break;
	}
	for (int i = 0; i < n->fam.nkids; i++)
		nccl_capture(n->fam.kids[i], what);
}

static void nc_free(struct nccl_comm *n)
{
	for (int k = 0; k < 2; k++) {
		pool_free(&n->ops[k]);
		pool_free(&n->waits[k]);
	}
	if (n->fork)
		cudaEventDestroy(n->fork);
	if (n->join)
		cudaEventDestroy(n->join);
	if (n->progress)
		cudaEventDestroy(n->progress);
	if (n->stream)
		cudaStreamDestroy(n->stream);
	if (n->scratch)
		cudaFree(n->scratch);
	free(n->fam.kids);
	free(n);
}

static void nccl_destroy(struct mg_comm *c)
{
	struct nccl_comm *n = c->impl;
	if (n->fam.parent) {
		struct nccl_comm *p = n->fam.parent->impl;
		mg_comm_family_remove(&p->fam, c);
	}
	for (int i = 0; i < n->fam.nkids; i++)
		((struct nccl_comm *)n->fam.kids[i]->impl)->fam.parent = NULL;
#ifdef NC_WINDOWS
	nc_windows_destroy(c);
#endif
	if (n->nc) {
		cudaStreamSynchronize(n->stream);
		ncclResult_t r = ncclCommFinalize(n->nc);
		if (r != ncclSuccess) {
			nccl_fail(n, r, "ncclCommFinalize");
			mg_warn("%s", mg_last_error());
		}
		ncclCommDestroy(n->nc);
	}
	nc_free(n);
	free(c);
}

/* Stop this rank's NCCL work so peers see the failure, then leave. */
static void nccl_abort(struct mg_comm *c, int code)
{
	struct nccl_comm *n = c->impl;
	fflush(NULL);
#ifdef NC_WINDOWS
	if (n->ce)
		ncclCommAbort(n->ce);
#endif
	if (n->nc)
		ncclCommAbort(n->nc);
	_exit(code);
}

static struct mg_comm *nccl_split(struct mg_comm *c, int color, int key);

/* Streams, events and the mg_comm around an initialised NCCL communicator
 * (destroyed on failure). NULL with the error set. */
/* What NCCL's init (or split) took from the device: used bytes now less
 * before (cudaMemGetInfo; one GPU per rank, so the other ranks' inits
 * are on their own devices). Buffers NCCL connects lazily at a first
 * collective are not in it: the report's driver figure shows them as
 * unaccounted. */
static void nc_init_bytes(struct mg_comm *c, int64_t before)
{
	if (!c)
		return;
	struct nccl_comm *n = c->impl;
	int64_t after = mg_cuda_used_bytes();
	n->init_bytes = before >= 0 && after > before ? after - before : 0;
}

static struct mg_comm *nc_wrap(struct mg_device *dev, ncclComm_t nc)
{
	struct mg_comm *c = calloc(1, sizeof *c);
	struct nccl_comm *n = calloc(1, sizeof *n);
	int lo = 0, hi = 0;
	if (!c || !n) {
		mg_error("nccl: out of memory");
		goto fail;
	}
	n->dev = dev;
	n->nc = nc;
	ncclResult_t r = ncclCommUserRank(nc, &c->rank);
	if (r == ncclSuccess)
		r = ncclCommCount(nc, &c->world);
	if (r != ncclSuccess) {
		nccl_fail(n, r, "ncclCommUserRank");
		goto fail;
	}
	/* Greatest priority is the lowest number. */
	cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithPriority(&n->stream,
						 cudaStreamNonBlocking, hi);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&n->fork, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&n->join, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&n->progress,
					     cudaEventDisableTiming);
	if (e != cudaSuccess) {
		mg_cuda_fail(e, "communication stream and events", __FILE__,
			     __LINE__);
		goto fail;
	}
	for (int k = 0; k < 2; k++)
		if (pool_init(&n->ops[k], NC_OPS) ||
		    pool_init(&n->waits[k], NC_WAITS))
			goto fail;
	c->backend = "nccl";
	c->impl = n;
	c->all_reduce = nccl_all_reduce;
	c->reduce_scatter = nccl_reduce_scatter;
	c->all_gather = nccl_all_gather;
	c->broadcast = nccl_broadcast;
	c->barrier = nccl_barrier;
	c->wait = nccl_wait;
	c->destroy = nccl_destroy;
	c->all_reduce_host = nccl_all_reduce_host;
	c->split = nccl_split;
	c->collect = nccl_collect;
	c->capture = nccl_capture;
	c->abort = nccl_abort;
	c->supports = mg_comm_supports_std;
#ifdef NC_WINDOWS
	c->window_alloc = nccl_window_alloc;
	c->window_free = nccl_window_free;
#endif
	return c;
fail:
	ncclCommDestroy(nc);
	if (n)
		nc_free(n);
	free(c);
	return NULL;
}

/* Collective over c: ranks passing the same color form a communicator,
 * ordered by key; it shares c's device and has its own stream. */
static struct mg_comm *nccl_split(struct mg_comm *c, int color, int key)
{
	struct nccl_comm *n = c->impl;
	ncclComm_t sub = NULL;
	if (color < 0) {
		mg_error("nccl: split: color %d is negative", color);
		return NULL;
	}
	if (nc_not_capturing(n, "split"))
		return NULL;
	int64_t before = mg_cuda_used_bytes();
	ncclResult_t r = ncclCommSplit(n->nc, color, key, &sub, NULL);
	if (r != ncclSuccess) {
		nccl_fail(n, r, "ncclCommSplit");
		return NULL;
	}
	struct mg_comm *kid = nc_wrap(n->dev, sub);
	nc_init_bytes(kid, before);
	if (kid && mg_comm_family_add(&n->fam, kid)) {
		nccl_destroy(kid);
		return NULL;
	}
	if (kid)
		((struct nccl_comm *)kid->impl)->fam.parent = c;
	return kid;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int mg_nccl_unique_id_hex(char *out, size_t n)
{
	ncclUniqueId id;
	if (n < 2 * sizeof id + 1)
		return mg_error("nccl: a unique id needs %zu characters of "
				"hex, the buffer has %zu",
				2 * sizeof id + 1, n);
	NCCL_CHECK(NULL, ncclGetUniqueId(&id), "ncclGetUniqueId");
	for (size_t i = 0; i < sizeof id; i++)
		snprintf(out + 2 * i, 3, "%02x",
			 (unsigned)(unsigned char)id.internal[i]);
	return 0;
}

/*
 * Rank 0's unique id, to every rank: from MG_NCCL_ID when something else
 * spread it already; over MPI when an MPI launcher started the job (and
 * the MPI module loads); else through the TCP rendezvous.
 */
static int nc_unique_id(const struct mg_dist_env *e, ncclUniqueId *id)
{
	const char *hex = getenv(MG_ENV_NCCL_ID);
	memset(id, 0, sizeof *id);
	if (hex && *hex) {
		if (strlen(hex) != 2 * sizeof *id)
			return mg_error("%s: expected %zu hex digits, got %zu",
					MG_ENV_NCCL_ID, 2 * sizeof *id,
					strlen(hex));
		for (size_t i = 0; i < sizeof *id; i++) {
			int hi = hexval(hex[2 * i]),
			    lo = hexval(hex[2 * i + 1]);
			if (hi < 0 || lo < 0)
				return mg_error("%s: '%c%c' at offset %zu is "
						"not hex",
						MG_ENV_NCCL_ID, hex[2 * i],
						hex[2 * i + 1], 2 * i);
			id->internal[i] = (char)(hi << 4 | lo);
		}
		return 0;
	}
	if (e->rank == 0)
		NCCL_CHECK(NULL, ncclGetUniqueId(id), "ncclGetUniqueId");
	if (e->mpi) {
		const struct mg_comm_mpi_module *m = mg_comm_mpi_module();
		if (m) {
			if (m->bcast(id, sizeof *id, 0))
				return mg_error_prefix("NCCL id over MPI");
			return 0;
		}
		mg_debug("NCCL id: no MPI (%s); using the TCP rendezvous",
			 mg_last_error());
	}
	if (mg_rendezvous_bcast(e, id, sizeof *id, 120.0))
		return mg_error_prefix("NCCL id through the rendezvous");
	return 0;
}

struct mg_comm *mg_comm_nccl_create(const struct mg_dist_env *e,
				    struct mg_device *dev)
{
	ncclUniqueId id;
	ncclComm_t nc = NULL;
	if (nc_unique_id(e, &id))
		return NULL;
	cudaError_t ce = cudaSetDevice(dev->ordinal);
	if (ce != cudaSuccess) {
		mg_cuda_fail(ce, "cudaSetDevice", __FILE__, __LINE__);
		return NULL;
	}
	int64_t before = mg_cuda_used_bytes();
	ncclResult_t r = ncclCommInitRank(&nc, e->world, id, e->rank);
	if (r != ncclSuccess) {
		nccl_fail(NULL, r, "ncclCommInitRank");
		mg_error_prefix("rank %d of %d on GPU %d", e->rank, e->world,
				dev->ordinal);
		return NULL;
	}
	struct mg_comm *c = nc_wrap(dev, nc);
	nc_init_bytes(c, before);
	return c;
}
