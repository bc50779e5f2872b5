/*
 * watchdog.c - stops the job when a collective makes no progress.
 *
 * The launcher (and mpirun) end a job when a rank dies, but a rank that
 * stalls - a peer stuck in a kernel, a lost connection - leaves every
 * other rank blocked in its next collective until the scheduler kills
 * the job hours later, with nothing saying who or where. The watchdog
 * wraps the world communicator (and the ones split from it): every call
 * that can block the host (issuing a collective, wait(), barrier(), the
 * host all-reduce, split) arms a deadline of run.collective_timeout_s
 * when it starts and disarms it when it returns, so only one wait that
 * makes no progress counts, never the length of a step. On NCCL, where
 * wait() only orders streams and the hang shows on the device, the
 * collectives' completion is polled on the device instead (an event the
 * backend records after each wait, mg_comm_nccl_pending()).
 *
 * One thread per process checks the deadlines. When one passes it
 * prints which rank, which collective, which step and phase, then aborts
 * the world communicator (MPI_Abort, or ncclCommAbort and exit) with
 * MG_EXIT_WATCHDOG; a second thread ends the process if that abort
 * itself hangs. mgrun's launcher recognises the exit status and the
 * line, collects the other ranks' reports for a moment and names the
 * rank that never timed out: the one the others waited for.
 *
 * Test hook: MG_TEST_STALL_RANK=R MG_TEST_STALL_STEP=S make rank R (every
 * rank for "all") sleep MG_TEST_STALL_S seconds (default an hour) before
 * each collective call of training step S, as a stuck rank would
 * (tests/strategies/watchdog.sh).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm_internal.h"

#define WD_SLOTS 32
#define WD_WHAT 128
/* after the abort was called, before the process ends itself */
#define WD_ABORT_GRACE_S 10.0

/* One armed deadline: a host call in progress, or (dev) a communicator's
 * collectives still running on the device. */
struct wd_slot {
	bool used, untimed;
	double since;
	const struct mg_comm *dev; /* probed with mg_comm_nccl_pending */
	char what[WD_WHAT];
	char comm[48]; /* "the world communicator", "a split ..." */
};

/* The wrapper's impl. */
struct wd_comm {
	struct mg_comm *in;
	bool world;
	int dev_slot; /* -1: none armed */
	/* Collectives issued since the last wait(): what a wait completes. */
	const char *first;
	int npending;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thr;
	bool running, stop;
	double timeout;
	int rank, world;
	struct mg_comm *abort_to; /* the world's own communicator */
	struct wd_slot slot[WD_SLOTS];
	bool untimed;
	/* test hook */
	int stall_rank;
	long long stall_step;
	double stall_s;
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Where the job is, for the message: written by the training thread,
 * read by the watchdog's. */
static _Atomic long long wd_step = -1;
static _Atomic(const char *) wd_phase = "setup";

void mg_watchdog_at(int64_t step, const char *phase)
{
	atomic_store(&wd_step, (long long)step);
	atomic_store(&wd_phase, phase);
}

void mg_watchdog_untimed(bool on)
{
	pthread_mutex_lock(&wd.mu);
	wd.untimed = on;
	pthread_mutex_unlock(&wd.mu);
}

static double wd_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void wd_sleep(double s)
{
	double end = wd_now() + s;
	for (double left = s; left > 0; left = end - wd_now()) {
		struct timespec ts = {
			(time_t)left,
			(long)((left - (double)(time_t)left) * 1e9)};
		nanosleep(&ts, NULL);
	}
}

static void comm_name(const struct mg_comm *c, bool world, char *out, size_t n)
{
	if (world)
		snprintf(out, n, "the world communicator");
	else
		snprintf(out, n, "a split communicator (rank %d of %d)",
			 c->rank, c->world);
}

/* Arm a deadline from now; the slot index, or -1 when every slot is taken
 * (then the call is not watched: never an error). */
static int wd_arm(const struct mg_comm *c, bool world, const char *what)
{
	int s = -1;
	pthread_mutex_lock(&wd.mu);
	for (int i = 0; i < WD_SLOTS; i++)
		if (!wd.slot[i].used) {
			s = i;
			break;
		}
	if (s >= 0) {
		struct wd_slot *sl = &wd.slot[s];
		sl->used = true;
		sl->untimed = wd.untimed;
		sl->since = wd_now();
		sl->dev = NULL;
		snprintf(sl->what, sizeof sl->what, "%s", what);
		comm_name(c, world, sl->comm, sizeof sl->comm);
	}
	pthread_mutex_unlock(&wd.mu);
	return s;
}

static void wd_disarm(int s)
{
	if (s < 0)
		return;
	pthread_mutex_lock(&wd.mu);
	wd.slot[s].used = false;
	pthread_mutex_unlock(&wd.mu);
}

#ifdef MG_HAVE_NCCL
/* The collectives issued on c so far now run on the device: watch them
 * until mg_comm_nccl_pending() says they completed (one slot per
 * communicator, re-armed from now by each wait or graph replay, since a
 * later event completes only after the earlier ones). */
static void wd_arm_device(struct mg_comm *c, const char *what)
{
	struct wd_comm *w = c->impl;
	if (strcmp(w->in->backend, "nccl"))
		return;
	pthread_mutex_lock(&wd.mu);
	int s = w->dev_slot;
	for (int i = 0; s < 0 && i < WD_SLOTS; i++)
		if (!wd.slot[i].used)
			s = i;
	if (s >= 0) {
		struct wd_slot *sl = &wd.slot[s];
		sl->used = true;
		sl->untimed = wd.untimed;
		sl->since = wd_now();
		sl->dev = w->in;
		snprintf(sl->what, sizeof sl->what, "%s, on the GPU", what);
		comm_name(c, w->world, sl->comm, sizeof sl->comm);
	}
	w->dev_slot = s;
	pthread_mutex_unlock(&wd.mu);
}
#endif

static void wd_disarm_device(struct wd_comm *w)
{
	pthread_mutex_lock(&wd.mu);
	if (w->dev_slot >= 0)
		wd.slot[w->dev_slot].used = false;
	w->dev_slot = -1;
	pthread_mutex_unlock(&wd.mu);
}

/* The test hook: this rank stalls before a collective of one step. */
static void wd_test_stall(void)
{
	if (wd.stall_rank == -1 ||
	    (wd.stall_rank >= 0 && wd.stall_rank != wd.rank) ||
	    atomic_load(&wd_step) != wd.stall_step ||
	    strcmp(atomic_load(&wd_phase), "training"))
		return;
	fprintf(stderr,
		"[rank %d] MG_TEST_STALL: sleeping %.1f s before a collective "
		"at step %lld\n",
		wd.rank, wd.stall_s, wd.stall_step);
	fflush(stderr);
	wd_sleep(wd.stall_s);
}

/* Ends the process when the abort of a stalled job hangs itself (an MPI
 * abort from a thread other than MPI's, an NCCL abort of a wedged GPU). */
static void *wd_last_resort(void *arg)
{
	(void)arg;
	wd_sleep(WD_ABORT_GRACE_S);
	fprintf(stderr,
		"[rank %d] error: collective watchdog: the communicator's "
		"abort did not end the process in %.0f s; exiting\n",
		wd.rank, WD_ABORT_GRACE_S);
	_exit(MG_EXIT_WATCHDOG);
	return NULL;
}

/* A deadline passed (called with wd.mu held; never returns). */
static void wd_fire(const struct wd_slot *sl, double waited)
{
	char where[96];
	long long step = atomic_load(&wd_step);
	const char *phase = atomic_load(&wd_phase);
	if (step < 0)
		snprintf(where, sizeof where, "during %s (before step 0)",
			 phase);
	else
		snprintf(where, sizeof where, "at step %lld (%s)", step, phase);
	fprintf(stderr,
		"[rank %d] error: " MG_WATCHDOG_MARK
		" rank %d of %d: %s on %s made no progress for %.1f s %s; "
		"%s; aborting the job (run.collective_timeout_s = %g)\n",
		wd.rank, wd.rank, wd.world, sl->what, sl->comm, waited, where,
		sl->dev ? "the collectives have not completed on the device"
			: "a peer rank never joined it (stalled, stuck in a "
			  "kernel, or its connection was lost)",
		wd.timeout);
	fflush(NULL);
	/* The launcher or mpirun answers the abort with SIGTERM: die of it
	 * at once instead of waiting for a step boundary. */
	signal(SIGTERM, SIG_DFL);
	pthread_t t;
	if (!pthread_create(&t, NULL, wd_last_resort, NULL))
		pthread_detach(t);
	pthread_mutex_unlock(&wd.mu);
	wd.abort_to->abort(wd.abort_to, MG_EXIT_WATCHDOG);
	_exit(MG_EXIT_WATCHDOG); /* abort() does not return; in case */
}

/* The watchdog thread: look at the deadlines a few times per timeout
 * (at most every second) until the world communicator is destroyed. */
static void *wd_thread(void *arg)
{
	(void)arg;
	double period = wd.timeout / 20;
	period = period < 0.01 ? 0.01 : period > 1.0 ? 1.0 : period;
	pthread_mutex_lock(&wd.mu);
	while (!wd.stop) {
		double now = wd_now();
		for (int i = 0; i < WD_SLOTS; i++) {
			struct wd_slot *sl = &wd.slot[i];
			if (!sl->used || sl->untimed)
				continue;
#ifdef MG_HAVE_NCCL
			int pend = sl->dev ? mg_comm_nccl_pending(sl->dev) : 1;
			if (pend == 0)
				sl->used = false;
			if (pend <= 0) /* done, or the device cannot tell */
				continue;
#endif
			if (now - sl->since >= wd.timeout)
				wd_fire(sl, now - sl->since);
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		double at =
			(double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + period;
		ts.tv_sec = (time_t)at;
		ts.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
		pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
	}
	pthread_mutex_unlock(&wd.mu);
	return NULL;
}

/* "all_reduce", or what a wait() completes: "wait() for all_reduce and
 * 3 more collectives". */
static void wait_what(const struct wd_comm *w, char *out, size_t n)
{
	if (!w->npending)
		snprintf(out, n, "wait() with nothing pending");
	else if (w->npending == 1)
		snprintf(out, n, "%s (in wait())", w->first);
	else
		snprintf(out, n, "%s and %d more collectives (in wait())",
			 w->first, w->npending - 1);
}

/* Each forwarder: the test stall, a deadline around the call, and the
 * collective remembered for the next wait(). */
#define WD_CALL(c, name, call)                                                 \
	do {                                                                   \
		struct wd_comm *w_ = (c)->impl;                                \
		wd_test_stall();                                               \
		int s_ = wd_arm((c), w_->world, name);                         \
		int rc_ = (call);                                              \
		wd_disarm(s_);                                                 \
		if (!w_->npending++)                                           \
			w_->first = name;                                      \
		return rc_;                                                    \
	} while (0)

static int wd_all_reduce(struct mg_comm *c, void *buf, int64_t count,
			 enum mg_dtype dt, enum mg_reduce_op op)
{
	struct mg_comm *in = ((struct wd_comm *)c->impl)->in;
	WD_CALL(c, "all_reduce", in->all_reduce(in, buf, count, dt, op));
}

static int wd_reduce_scatter(struct mg_comm *c, const void *send, void *recv,
			     int64_t recv_count, enum mg_dtype dt,
			     enum mg_reduce_op op)
{
	struct mg_comm *in = ((struct wd_comm *)c->impl)->in;
	WD_CALL(c, "reduce_scatter",
		in->reduce_scatter(in, send, recv, recv_count, dt, op));
}

static int wd_all_gather(struct mg_comm *c, const void *send, void *recv,
			 int64_t send_count, enum mg_dtype dt)
{
	struct mg_comm *in = ((struct wd_comm *)c->impl)->in;
	WD_CALL(c, "all_gather",
		in->all_gather(in, send, recv, send_count, dt));
}

static int wd_broadcast(struct mg_comm *c, void *buf, int64_t count,
			enum mg_dtype dt, int root)
{
	struct mg_comm *in = ((struct wd_comm *)c->impl)->in;
	WD_CALL(c, "broadcast", in->broadcast(in, buf, count, dt, root));
}

/* Blocking calls: armed around the call, nothing left pending. */
static int wd_barrier(struct mg_comm *c)
{
	struct wd_comm *w = c->impl;
	wd_test_stall();
	int s = wd_arm(c, w->world, "barrier");
	int rc = w->in->barrier(w->in);
	wd_disarm(s);
	return rc;
}

static int wd_all_reduce_host(struct mg_comm *c, void *buf, int64_t count,
			      enum mg_dtype dt, enum mg_reduce_op op)
{
	struct wd_comm *w = c->impl;
	wd_test_stall();
	int s = wd_arm(c, w->world, "all_reduce_host");
	int rc = w->in->all_reduce_host(w->in, buf, count, dt, op);
	wd_disarm(s);
	return rc;
}

static int wd_wait(struct mg_comm *c)
{
	struct wd_comm *w = c->impl;
	char what[WD_WHAT];
	wait_what(w, what, sizeof what);
	if (w->npending)
		wd_test_stall();
	int s = wd_arm(c, w->world, what);
	int rc = w->in->wait(w->in);
	wd_disarm(s);
#ifdef MG_HAVE_NCCL
	if (!rc && w->npending)
		wd_arm_device(c, what);
#endif
	w->npending = 0;
	w->first = NULL;
	return rc;
}

static int wd_collect(struct mg_comm *c, struct mg_comm_stats *st)
{
	struct mg_comm *in = ((struct wd_comm *)c->impl)->in;
	return in->collect(in, st);
}

static void wd_capture(struct mg_comm *c, enum mg_comm_capture what)
{
	struct mg_comm *in = ((struct wd_comm *)c->impl)->in;
	in->capture(in, what);
#ifdef MG_HAVE_NCCL
	/* A replay issues the captured collectives without any call here. */
	if (what == MG_COMM_REPLAY)
		wd_arm_device(c, "the collectives of a CUDA graph replay");
#endif
}

static void wd_abort(struct mg_comm *c, int code)
{
	wd.abort_to->abort(wd.abort_to, code);
	(void)c;
}

static bool wd_supports(const struct mg_comm *c, enum mg_comm_coll coll,
			enum mg_dtype dt, enum mg_reduce_op op)
{
	const struct mg_comm *in = ((const struct wd_comm *)c->impl)->in;
	return in->supports(in, coll, dt, op);
}

static int wd_window_alloc(struct mg_comm *c, size_t bytes, void **ptr)
{
	struct wd_comm *w = c->impl;
	int s = wd_arm(c, w->world, "window_alloc");
	int rc = w->in->window_alloc(w->in, bytes, ptr);
	wd_disarm(s);
	return rc;
}

static void wd_window_free(struct mg_comm *c, void *ptr)
{
	struct wd_comm *w = c->impl;
	int s = wd_arm(c, w->world, "window_free");
	w->in->window_free(w->in, ptr);
	wd_disarm(s);
}

static struct mg_comm *wd_new(struct mg_comm *in, bool world);

static struct mg_comm *wd_split(struct mg_comm *c, int color, int key)
{
	struct wd_comm *w = c->impl;
	int s = wd_arm(c, w->world, "split");
	struct mg_comm *kid = w->in->split(w->in, color, key);
	wd_disarm(s);
	if (!kid)
		return NULL;
	struct mg_comm *k = wd_new(kid, false);
	if (!k)
		kid->destroy(kid);
	return k;
}

/* Not watched: the inner destroy may free what an abort would use. */
static void wd_destroy(struct mg_comm *c)
{
	struct wd_comm *w = c->impl;
	wd_disarm_device(w);
	if (w->world) {
		pthread_mutex_lock(&wd.mu);
		wd.stop = true;
		pthread_cond_signal(&wd.cv);
		pthread_mutex_unlock(&wd.mu);
		pthread_join(wd.thr, NULL);
		wd.running = false;
	}
	w->in->destroy(w->in);
	free(w);
	free(c);
}

/* The wrapper around in (which it owns from now on); NULL with the error
 * set, in left to the caller. */
static struct mg_comm *wd_new(struct mg_comm *in, bool world)
{
	struct mg_comm *c = calloc(1, sizeof *c);
	struct wd_comm *w = calloc(1, sizeof *w);
	if (!c || !w) {
		free(c);
		free(w);
		mg_error("collective watchdog: out of memory");
		return NULL;
	}
	w->in = in;
	w->world = world;
	w->dev_slot = -1;
	c->rank = in->rank;
	c->world = in->world;
	c->backend = in->backend;
	c->impl = w;
	c->all_reduce = wd_all_reduce;
	c->reduce_scatter = wd_reduce_scatter;
	c->all_gather = wd_all_gather;
	c->broadcast = wd_broadcast;
	c->barrier = wd_barrier;
	c->wait = wd_wait;
	c->destroy = wd_destroy;
	c->all_reduce_host = wd_all_reduce_host;
	c->split = in->split ? wd_split : NULL;
	c->collect = wd_collect;
	c->capture = wd_capture;
	c->abort = wd_abort;
	c->supports = wd_supports;
	c->window_alloc = in->window_alloc ? wd_window_alloc : NULL;
	c->window_free = in->window_free ? wd_window_free : NULL;
	return c;
}

static double env_num(const char *name, double dflt)
{
	const char *s = getenv(name);
	char *end = NULL;
	double v = s && *s ? strtod(s, &end) : dflt;
	return end && *end ? dflt : v;
}

struct mg_comm *mg_watchdog_wrap(struct mg_comm *world, double timeout_s)
{
	if (wd.running) {
		mg_error("collective watchdog: already watching a world "
			 "communicator in this process");
		return NULL;
	}
	if (!(timeout_s > 0))
		return world;
	struct mg_comm *c = wd_new(world, true);
	if (!c)
		return NULL;
	memset(wd.slot, 0, sizeof wd.slot);
	wd.timeout = timeout_s;
	wd.rank = world->rank;
	wd.world = world->world;
	wd.abort_to = world;
	wd.stop = false;
	wd.untimed = false;
	const char *sr = getenv("MG_TEST_STALL_RANK");
	wd.stall_rank = sr && !strcmp(sr, "all")
				? -2
				: (int)env_num("MG_TEST_STALL_RANK", -1);
	wd.stall_step = (long long)env_num("MG_TEST_STALL_STEP", -1);
	wd.stall_s = env_num("MG_TEST_STALL_S", 3600);
	pthread_condattr_t ca;
	int rc = pthread_condattr_init(&ca);
	if (!rc)
		rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!rc) {
		pthread_cond_destroy(&wd.cv);
		rc = pthread_cond_init(&wd.cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (!rc)
		rc = pthread_create(&wd.thr, NULL, wd_thread, NULL);
	if (rc) {
		free(c->impl);
		free(c);
		mg_error("collective watchdog: cannot start its thread: %s",
			 strerror(rc));
		return NULL;
	}
	wd.running = true;
	return c;
}
