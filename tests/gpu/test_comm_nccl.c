/*
 * test_comm_nccl.c - the NCCL communicator on every GPU of this host (up
 * to 8), one process per GPU as mgrun runs them. The parent forks the
 * ranks before it touches CUDA (a CUDA context does not survive fork),
 * then creates the NCCL unique id and hands it to them through pipes, as
 * MG_NCCL_ID; it stays alive (NCCL's bootstrap root runs in it) and
 * supervises: when a rank fails, the others are killed rather than left
 * waiting in a collective.
 *
 * Each rank runs the shared collective checks (tests/comm/comm_checks.c)
 * on device buffers in F32, F64, F16 and BF16, then captures an
 * all-reduce and its wait() into a CUDA graph on the compute stream and
 * replays it three times, checking the results and that collect() counts
 * the replays. Needs 2 GPUs: fewer print "SKIPPED" and exit 77.
 *
 *   test_comm_nccl             the id reaches the ranks as MG_NCCL_ID
 *   test_comm_nccl rendezvous  rank 0 makes the id and spreads it through
 *                              the TCP rendezvous (MG_MASTER_ADDR/PORT),
 *                              as under mgrun's launcher without its fd
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "comm_checks.h"
#include "dist/comm_internal.h"
#include "dist/dist.h"

#define MAX_RANKS 8
#define ID_HEX 256
#define DEADLINE_S 600

static cudaStream_t compute;

/* A CUDA call the test cannot go on without. */
static void must(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return;
	printf("rank %d: FAIL: %s: %s (%s)\n", ct_rank, what,
	       cudaGetErrorName(e), cudaGetErrorString(e));
	exit(1);
}

static void *dev_alloc(size_t bytes)
{
	void *p = NULL;
	must(cudaMalloc(&p, bytes), "cudaMalloc");
	return p;
}

static void dev_free(void *p)
{
	must(cudaFree(p), "cudaFree");
}

/* Uploads go on the compute stream: collectives must see them. */
static void dev_put(void *dst, const void *host, size_t bytes)
{
	must(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, compute),
	     "upload");
}

/* Downloads too: after wait(), the compute stream is behind the
 * collectives, so this also checks that wait() ordered them. */
static void dev_get(void *host, const void *src, size_t bytes)
{
	must(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, compute),
	     "download");
	must(cudaStreamSynchronize(compute), "synchronising the compute "
					     "stream");
}

static const struct ct_mem dev_mem = {dev_alloc, dev_free, dev_put, dev_get};

/* A collective on a capture that capture(BEGIN) did not announce is an
 * error, not silently wrong accounting. */
static void t_unannounced(struct mg_comm *c, float *buf)
{
	cudaGraph_t g = NULL;
	must(cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal),
	     "cudaStreamBeginCapture");
	mg_clear_error();
	int rc = c->all_reduce(c, buf, 1, MG_F32, MG_REDUCE_SUM);
	ct_check(rc != 0 && strstr(mg_last_error(), "capture"),
		 "all_reduce in an unannounced capture: rc %d, '%s'", rc,
		 mg_last_error());
	must(cudaStreamEndCapture(compute, &g), "cudaStreamEndCapture");
	cudaGraphDestroy(g);
}

/* all_reduce + wait captured once, replayed three times on new inputs. */
static void t_graph(struct mg_comm *c)
{
	const int64_t n = 4099;
	size_t bytes = (size_t)n * sizeof(float);
	float *src = dev_alloc(bytes), *buf = dev_alloc(bytes);
	float *h = malloc(bytes);
	struct mg_comm_stats st;
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;

	t_unannounced(c, buf);
	ct_ok(c->collect(c, &st), "collect (reset)");
	c->capture(c, MG_COMM_CAPTURE_BEGIN);
	must(cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal),
	     "cudaStreamBeginCapture");
	must(cudaMemcpyAsync(buf, src, bytes, cudaMemcpyDeviceToDevice,
			     compute),
	     "captured copy");
	int rc = ct_ok(c->all_reduce(c, buf, n, MG_F32, MG_REDUCE_SUM),
		       "captured all_reduce");
	rc |= ct_ok(c->wait(c), "captured wait");
	cudaError_t e = cudaStreamEndCapture(compute, &g);
	ct_check(e == cudaSuccess, "cudaStreamEndCapture: %s",
		 cudaGetErrorString(e));
	if (rc || e != cudaSuccess) {
		c->capture(c, MG_COMM_CAPTURE_ABORT);
		cudaGetLastError();
		goto out;
	}
	c->capture(c, MG_COMM_CAPTURE_END);
	must(cudaGraphInstantiate(&x, g, 0), "cudaGraphInstantiate");
	for (int k = 1; k <= 3; k++) {
		for (int64_t i = 0; i < n; i++)
			h[i] = (float)(k * ct_val(c->rank, i));
		dev_put(src, h, bytes);
		c->capture(c, MG_COMM_REPLAY);
		must(cudaGraphLaunch(x, compute), "cudaGraphLaunch");
		dev_get(h, buf, bytes);
		int64_t bad = 0, first = -1;
		for (int64_t i = 0; i < n; i++) {
			double want = 0;
			for (int r = 0; r < c->world; r++)
				want += k * ct_val(r, i);
			if (h[i] != (float)want && !bad++)
				first = i;
		}
		ct_check(!bad,
			 "graph replay %d: %lld wrong elements, first at "
			 "%lld",
			 k, (long long)bad, (long long)first);
	}
	ct_ok(c->collect(c, &st), "collect after replays");
	ct_check(st.calls == 3 && st.bytes == 3 * (int64_t)bytes,
		 "collect after 3 replays: %lld calls, %lld bytes, expected "
		 "3 and %lld",
		 (long long)st.calls, (long long)st.bytes,
		 3 * (long long)bytes);
	ct_check(st.busy_seconds > 0 && st.exposed_seconds >= 0 &&
			 st.busy_seconds < 60,
		 "collect after 3 replays: busy %g s, exposed %g s (the "
		 "graph's timing events must be recorded by the replays)",
		 st.busy_seconds, st.exposed_seconds);
	if (c->rank == 0)
		printf("graph: 3 replays, %lld calls, busy %.3g ms, exposed "
		       "%.3g ms\n",
		       (long long)st.calls, st.busy_seconds * 1e3,
		       st.exposed_seconds * 1e3);
out:
	if (x)
		cudaGraphExecDestroy(x);
	if (g)
		cudaGraphDestroy(g);
	dev_free(src);
	dev_free(buf);
	free(h);
}

/* The NCCL id from the parent's pipe, into MG_NCCL_ID. */
static int id_from_parent(int rank, int fd)
{
	char hex[ID_HEX + 1];
	size_t got = 0;
	while (got < ID_HEX) {
		ssize_t r = read(fd, hex + got, ID_HEX - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			printf("rank %d: FAIL: no NCCL id from the parent\n",
			       rank);
			return -1;
		}
		got += (size_t)r;
	}
	hex[ID_HEX] = 0;
	setenv(MG_ENV_NCCL_ID, hex, 1);
	return 0;
}

/* One rank: the environment as mgrun's launcher sets it (port > 0: the
 * id goes through the rendezvous on that port), then the checks. */
static int rank_main(int rank, int world, int fd, int port)
{
	static const enum mg_dtype dts[] = {MG_F32, MG_F64, MG_F16, MG_BF16};
	static const enum mg_dtype reject[] = {MG_NF4};
	char num[16];
	ct_rank = rank;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (port > 0) {
		unsetenv(MG_ENV_NCCL_ID);
		setenv(MG_ENV_MASTER_ADDR, "127.0.0.1", 1);
		snprintf(num, sizeof num, "%d", port);
		setenv(MG_ENV_MASTER_PORT, num, 1);
	} else if (id_from_parent(rank, fd)) {
		return 1;
	}
	close(fd);
	snprintf(num, sizeof num, "%d", rank);
	setenv(MG_ENV_RANK, num, 1);
	setenv(MG_ENV_LOCAL_RANK, num, 1);
	snprintf(num, sizeof num, "%d", world);
	setenv(MG_ENV_WORLD, num, 1);
	setenv(MG_ENV_LOCAL_WORLD, num, 1);

	struct mg_dist_env e;
	if (mg_dist_env_detect(&e)) {
		printf("rank %d: FAIL: environment: %s\n", rank,
		       mg_last_error());
		return 1;
	}
	must(cudaSetDevice(e.local_rank), "cudaSetDevice");
	must(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking),
	     "compute stream");
	struct mg_device dev = {.kind = MG_DEV_CUDA,
				.ordinal = e.local_rank,
				.stream = compute};
	struct mg_comm *c = mg_comm_create(&e, &dev);
	if (!c) {
		printf("rank %d: FAIL: %s\n", rank, mg_last_error());
		return 1;
	}
	if (strcmp(c->backend, "nccl")) {
		printf("rank %d: FAIL: communicator is %s, not nccl\n", rank,
		       c->backend);
		return 1;
	}
	if (rank == 0)
		printf("%d ranks over NCCL, one per GPU\n", world);
	ct_run_all(c, &dev_mem, dts, 4, reject, 1);
	t_graph(c);
	int rc = ct_finish(c, "test_comm_nccl");
	c->destroy(c);
	cudaStreamDestroy(compute);
	return rc;
}

/* GPUs visible here, counted in a child so this process never creates
 * a CUDA context before it forks the ranks. */
static int count_gpus(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return 0;
	if (pid == 0) {
		int n = 0;
		cudaError_t e = cudaGetDeviceCount(&n);
		if (e != cudaSuccess) {
			printf("cudaGetDeviceCount: %s\n",
			       cudaGetErrorString(e));
			n = 0;
		}
		fflush(stdout);
		_exit(n > 100 ? 100 : n);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

/* A TCP port free on the loopback right now, for the rendezvous. */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void kill_all(const pid_t *pid, const int *done, int n)
{
	for (int r = 0; r < n; r++)
		if (!done[r])
			kill(pid[r], SIGKILL);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	bool rdv = argc > 1 && !strcmp(argv[1], "rendezvous");
	if (argc > 1 && !rdv) {
		fprintf(stderr, "usage: %s [rendezvous]\n", argv[0]);
		return 2;
	}
	int port = 0;
	if (rdv && (port = free_port()) <= 0) {
		printf("FAIL: no free TCP port for the rendezvous\n");
		return 1;
	}
	int ngpu = count_gpus();
	if (ngpu < 2) {
		printf("SKIPPED: needs 2 GPUs (found %d)\n", ngpu);
		return 77;
	}
	int world = ngpu > MAX_RANKS ? MAX_RANKS : ngpu;
	pid_t pid[MAX_RANKS];
	int wfd[MAX_RANKS], done[MAX_RANKS] = {0}, status[MAX_RANKS];
	for (int r = 0; r < world; r++) {
		int p[2];
		if (pipe(p)) {
			perror("pipe");
			return 1;
		}
		pid[r] = fork();
		if (pid[r] < 0) {
			perror("fork");
			return 1;
		}
		if (pid[r] == 0) {
			close(p[1]);
			for (int k = 0; k < r; k++)
				close(wfd[k]);
			exit(rank_main(r, world, p[0], port));
		}
		close(p[0]);
		wfd[r] = p[1];
	}

	/* Now CUDA/NCCL may start here: the ranks exist already. */
	char hex[ID_HEX + 1] = "";
	if (rdv)
		printf("NCCL id through the rendezvous on 127.0.0.1:%d\n",
		       port);
	else if (mg_nccl_unique_id_hex(hex, sizeof hex)) {
		printf("FAIL: NCCL id: %s\n", mg_last_error());
		hex[0] = 0;
	}
	for (int r = 0; r < world; r++) {
		if (hex[0] && write(wfd[r], hex, ID_HEX) != ID_HEX)
			printf("FAIL: sending the id to rank %d: %s\n", r,
			       strerror(errno));
		close(wfd[r]);
	}

	/* Supervise: the first failure (or the deadline) stops the rest
	 * after a grace period, so nobody hangs in a collective. */
	int left = world, failed = -1;
	time_t start = time(NULL), kill_at = start + DEADLINE_S;
	while (left) {
		int st;
		pid_t w = waitpid(-1, &st, WNOHANG);
		if (w > 0) {
			for (int r = 0; r < world; r++) {
				if (pid[r] != w)
					continue;
				done[r] = 1;
				status[r] = st;
				left--;
				bool ok = WIFEXITED(st) && !WEXITSTATUS(st);
				if (!ok && failed < 0) {
					failed = r;
					if (time(NULL) + 10 < kill_at)
						kill_at = time(NULL) + 10;
				}
			}
			continue;
		}
		if (time(NULL) >= kill_at) {
			printf("%s: killing the ranks still running\n",
			       failed >= 0 ? "a rank failed"
					   : "deadline passed");
			kill_all(pid, done, world);
			kill_at = time(NULL) + 3600;
		}
		usleep(20000);
	}
	int rc = 0;
	for (int r = 0; r < world; r++) {
		int st = status[r];
		if (WIFEXITED(st) && !WEXITSTATUS(st))
			continue;
		rc = 1;
		if (WIFEXITED(st))
			printf("rank %d exited with %d\n", r, WEXITSTATUS(st));
		else if (WIFSIGNALED(st))
			printf("rank %d killed by signal %d (%s)\n", r,
			       WTERMSIG(st), strsignal(WTERMSIG(st)));
	}
	printf("%s\n", rc ? "FAILED" : "PASSED");
	return rc;
}
