/*
 * test_launch.c - the multi-rank plumbing of core/dist: the rank
 * environment of every launcher family (env.c), mgrun's local launcher
 * (launch.c: variables, output relay, failure reports, stopping the
 * other ranks, Ctrl-C, no process left behind) and the TCP rendezvous
 * (rendezvous.c), and the launcher's report of ranks the collective
 * watchdog (watchdog.c) stopped.
 *
 * Usage: test_launch [CASE...]   (no argument: every case)
 *        test_launch --list
 * The launcher cases start this executable again as the ranks:
 *        test_launch child MODE DIR WORLD
 * where MODE says what the rank does and DIR is the case's scratch
 * folder (each rank writes DIR/pid.RANK when it is up).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/test_util.h"
#include "dist/dist.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* 64-bit FNV-1a: what the ranks print of the blob they hold. */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = 0;
	fclose(f);
	return buf;
}

/* How many lines of text are exactly `line`. */
static int count_lines(const char *text, const char *line)
{
	size_t l = strlen(line);
	int n = 0;

	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len == l && !memcmp(p, line, l))
			n++;
		if (!nl)
			break;
		p = nl + 1;
	}
	return n;
}

/* ---- the ranks (child mode) ---- */

static int env_int(const char *name)
{
	const char *s = getenv(name);

	return s ? atoi(s) : -1;
}

static void write_pid_file(const char *dir, int rank)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	FILE *f;

	snprintf(tmp, sizeof tmp, "%s/pid.%d.tmp", dir, rank);
	snprintf(path, sizeof path, "%s/pid.%d", dir, rank);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);
	rename(tmp, path);
}

static pid_t read_pid_file(const char *dir, int rank)
{
	char path[PATH_MAX];
	FILE *f;
	int pid = 0;

	snprintf(path, sizeof path, "%s/pid.%d", dir, rank);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	return pid;
}

/* Wait (at most timeout_s) until every rank wrote its pid file. */
static bool wait_pid_files(const char *dir, int world, double timeout_s)
{
	double end = now_s() + timeout_s;

	while (now_s() < end) {
		int r = 0;
		while (r < world && read_pid_file(dir, r) > 0)
			r++;
		if (r == world)
			return true;
		sleep_s(0.02);
	}
	return false;
}

static void sleep_long(void)
{
	double end = now_s() + 600;

	while (now_s() < end)
		sleep_s(end - now_s());
}

/* Whether fd is in the comma-separated list (fds the test driver had
 * open itself, inherited from whoever ran it). */
static bool fd_listed(const char *list, int fd)
{
	for (const char *p = list; p && *p;) {
		if (atoi(p) == fd)
			return true;
		p = strchr(p, ',');
		if (p)
			p++;
	}
	return false;
}

/* "env": the launcher's variables, as this rank sees them. */
static int child_env(int rank, int world)
{
	struct mg_dist_env e;
	const char *fd_text = getenv(MG_ENV_RENDEZVOUS_FD);
	const char *addr = getenv(MG_ENV_MASTER_ADDR);
	int port = env_int(MG_ENV_MASTER_PORT), bad = 0;

#define BAD(...)                                                               \
	do {                                                                   \
		fprintf(stderr, "[rank %d] BAD: ", rank);                      \
		fprintf(stderr, __VA_ARGS__);                                  \
		fprintf(stderr, "\n");                                         \
		bad++;                                                         \
	} while (0)
	if (env_int(MG_ENV_WORLD) != world ||
	    env_int(MG_ENV_LOCAL_RANK) != rank ||
	    env_int(MG_ENV_LOCAL_WORLD) != world)
		BAD("MG_WORLD_SIZE/MG_LOCAL_RANK/MG_LOCAL_WORLD_SIZE");
	if (!addr || strcmp(addr, "127.0.0.1"))
		BAD("MG_MASTER_ADDR=%s", addr ? addr : "(unset)");
	if (port < 1 || port > 65535)
		BAD("MG_MASTER_PORT=%d", port);
	if (mg_dist_env_detect(&e))
		BAD("detect: %s", mg_last_error());
	else if (strcmp(e.source, "mgrun") || e.mpi || e.rank != rank ||
		 e.world != world || e.local_rank != rank ||
		 e.local_world != world)
		BAD("detect: %s rank %d/%d local %d/%d", e.source, e.rank,
		    e.world, e.local_rank, e.local_world);
	int rdv_fd = -1;
	if (rank == 0) {
		struct sockaddr_in a;
		socklen_t al = sizeof a;
		int acc = 0;
		socklen_t sl = sizeof acc;
		rdv_fd = fd_text ? atoi(fd_text) : -1;
		if (!fd_text ||
		    getsockopt(rdv_fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl) ||
		    !acc)
			BAD("MG_RENDEZVOUS_FD=%s is not a listening socket",
			    fd_text ? fd_text : "(unset)");
		else if (getsockname(rdv_fd, (struct sockaddr *)&a, &al) ||
			 ntohs(a.sin_port) != port ||
			 a.sin_addr.s_addr != htonl(INADDR_LOOPBACK))
			BAD("the rendezvous socket is not 127.0.0.1:%d", port);
	} else if (fd_text) {
		BAD("rank %d got MG_RENDEZVOUS_FD=%s", rank, fd_text);
	}
	/* Nothing of the launcher's (other ranks' pipes, its self-pipe)
	 * leaked into this rank. */
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		int fd = atoi(de->d_name);
		char target[256] = "";
		if (de->d_name[0] == '.' || fd <= 2 || fd == dirfd(d) ||
		    fd == rdv_fd || fd_listed(getenv("TEST_FDS"), fd))
			continue;
		snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
		char link[256] = "";
		if (readlink(target, link, sizeof link - 1) < 0)
			link[0] = 0;
		BAD("fd %d (%s) leaked into the rank", fd, link);
	}
	if (d)
		closedir(d);
#undef BAD
	/* Lines on both streams; a line longer than one pipe read; a last
	 * line without a newline. */
	printf("[rank %d] ok\n", rank);
	fflush(stdout);
	fprintf(stderr, "[rank %d] on stderr\n", rank);
	if (rank == 1) {
		char *x = malloc(4001);
		if (x) {
			memset(x, 'x', 4000);
			x[4000] = 0;
			printf("[rank 1] %s\n", x);
			free(x);
		}
	}
	if (rank == world - 1)
		fprintf(stderr, "[rank %d] tail-without-newline", rank);
	return bad ? 1 : 0;
}

/* "rdv", "rdv_mismatch": two rendezvous of 128 random bytes of rank
 * 0's; each rank prints what it holds. */
static int child_rdv(int rank, bool mismatch)
{
	struct mg_dist_env e;
	unsigned char blob[128];

	if (mg_dist_env_detect(&e)) {
		fprintf(stderr, "[rank %d] error: %s\n", rank, mg_last_error());
		return 1;
	}
	for (int round = 1; round <= 2; round++) {
		size_t n = mismatch && rank == 1 ? 64 : sizeof blob;
		memset(blob, 0, sizeof blob);
		if (rank == 0 && getrandom(blob, sizeof blob, 0) != sizeof blob)
			return 1;
		if (mg_rendezvous_bcast(&e, blob, n, 20.0)) {
			fprintf(stderr, "[rank %d] error: %s\n", rank,
				mg_last_error());
			/* Let rank 0 say why first. */
			if (rank)
				sleep_s(2);
			return 1;
		}
		printf("[rank %d] blob%d %016llx\n", rank, round,
		       (unsigned long long)fnv1a(blob, sizeof blob));
		fflush(stdout);
	}
	return 0;
}

/*
 * "watchdog", "watchdog_all": the real collective watchdog (1 s) around a
 * stand-in communicator whose barrier never completes, as when a peer
 * never joins. Rank 1 stalls before the barrier ("watchdog") or waits
 * in it like the others ("watchdog_all"); the others' watchdogs must
 * end them, and the launcher must name who stalled.
 */
static int fake_barrier(struct mg_comm *c)
{
	(void)c;
	sleep_long();
	return 0;
}

static void fake_abort(struct mg_comm *c, int code)
{
	(void)c;
	fflush(NULL);
	_exit(code);
}

static void fake_destroy(struct mg_comm *c)
{
	(void)c;
}

static int child_watchdog(int rank, int world, const char *dir, bool all)
{
	static struct mg_comm fake;
	fake.rank = rank;
	fake.world = world;
	fake.backend = "fake";
	fake.barrier = fake_barrier;
	fake.abort = fake_abort;
	fake.destroy = fake_destroy;
	struct mg_comm *c = mg_watchdog_wrap(&fake, 1.0);
	if (!c) {
		fprintf(stderr, "[rank %d] error: %s\n", rank, mg_last_error());
		return 1;
	}
	write_pid_file(dir, rank);
	wait_pid_files(dir, world, 20);
	mg_watchdog_at(3, "training");
	if (rank == 1 && !all)
		sleep_long(); /* stalled outside any collective */
	c->barrier(c);
	fprintf(stderr, "[rank %d] BAD: the barrier returned\n", rank);
	return 1;
}

static int child_main(int argc, char **argv)
{
	const char *mode, *dir;
	int rank = env_int(MG_ENV_RANK), world;

	if (argc < 5)
		return 2;
	mode = argv[2];
	dir = argv[3];
	world = atoi(argv[4]);
	if (rank < 0)
		return 2;
	if (!strcmp(mode, "env"))
		return child_env(rank, world);
	if (!strcmp(mode, "rdv") || !strcmp(mode, "rdv_mismatch"))
		return child_rdv(rank, !strcmp(mode, "rdv_mismatch"));
	if (!strcmp(mode, "watchdog") || !strcmp(mode, "watchdog_all"))
		return child_watchdog(rank, world, dir,
				      !strcmp(mode, "watchdog_all"));

	if (!strcmp(mode, "stubborn"))
		signal(SIGTERM, SIG_IGN);
	write_pid_file(dir, rank);
	printf("[rank %d] up\n", rank);
	fflush(stdout);
	if (!strcmp(mode, "fail") && rank == 2) {
		wait_pid_files(dir, world, 20);
		printf("boom\n");
		exit(3);
	}
	if (!strcmp(mode, "sigkill") && rank == 1) {
		wait_pid_files(dir, world, 20);
		fprintf(stderr, "about to be killed\n");
		raise(SIGKILL);
	}
	if (!strcmp(mode, "stubborn") && rank == 0) {
		wait_pid_files(dir, world, 20);
		fprintf(stderr, "giving up\n");
		exit(1);
	}
	sleep_long();
	return 0;
}

/* ---- the driver ---- */

static char self_exe[PATH_MAX];

/* A fresh scratch folder for one case. */
static void make_dir(char *dir, size_t len)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, len, "%s/mg_launch_XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		exit(1);
	}
}

static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX];

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* The fds open in this process now ("3,4,"): ranks inherit those from
 * whoever ran the test, not from the launcher. */
static void list_fds(char *out, size_t len)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	size_t off = 0;

	out[0] = 0;
	while (d && (de = readdir(d)) && off < len) {
		if (de->d_name[0] == '.' || atoi(de->d_name) == dirfd(d))
			continue;
		off += (size_t)snprintf(out + off, len - off, "%s,",
					de->d_name);
	}
	if (d)
		closedir(d);
}

struct run {
	int rc;
	double seconds;
	char *out, *err; /* what the launcher wrote to stdout/stderr */
};

/* mg_launch of this executable in child MODE with stdout/stderr into
 * files of dir. */
static struct run launch(const char *mode, const char *dir, int world,
			 double grace, bool quiet)
{
	char world_text[16], out_path[PATH_MAX], err_path[PATH_MAX];
	char *argv[] = {self_exe,    "child",	 (char *)mode,
			(char *)dir, world_text, NULL};
	struct mg_launch_opts o = {.argv = argv,
				   .nranks = world,
				   .grace_s = grace,
				   .quiet = quiet};
	struct run r;
	int save1, save2, fo, fe;
	double t0;

	snprintf(world_text, sizeof world_text, "%d", world);
	snprintf(out_path, sizeof out_path, "%s/launcher.out", dir);
	snprintf(err_path, sizeof err_path, "%s/launcher.err", dir);
	fflush(stdout);
	fflush(stderr);
	save1 = fcntl(1, F_DUPFD_CLOEXEC, 3);
	save2 = fcntl(2, F_DUPFD_CLOEXEC, 3);
	fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (save1 < 0 || save2 < 0 || fo < 0 || fe < 0) {
		perror("redirect");
		exit(1);
	}
	dup2(fo, 1);
	dup2(fe, 2);
	close(fo);
	close(fe);
	t0 = now_s();
	r.rc = mg_launch(&o);
	r.seconds = now_s() - t0;
	fflush(stdout);
	fflush(stderr);
	dup2(save1, 1);
	dup2(save2, 2);
	close(save1);
	close(save2);
	r.out = read_text(out_path);
	r.err = read_text(err_path);
	if (!r.out || !r.err) {
		fprintf(stderr, "cannot read %s or %s\n", out_path, err_path);
		exit(1);
	}
	printf("launcher: rc %d after %.2f s\n--- stderr:\n%s---\n", r.rc,
	       r.seconds, r.err);
	return r;
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

/* Every rank that wrote a pid file is gone (collected, not a zombie). */
static void check_no_rank_left(const char *dir, int world)
{
	for (int i = 0; i < world; i++) {
		pid_t pid = read_pid_file(dir, i);
		if (pid <= 0) {
			fprintf(stderr, "rank %d wrote no pid file\n", i);
			failures++;
			continue;
		}
		errno = 0;
		if (kill(pid, 0) == 0 || errno != ESRCH) {
			fprintf(stderr, "rank %d (pid %d) is still there\n", i,
				(int)pid);
			failures++;
			kill(pid, SIGKILL);
		}
	}
}

/* (a) Every rank succeeds: exit 0; each saw the right variables (the
 * rank checks and exits 1 otherwise); output relayed whole lines. */
static void t_launch_ok(void)
{
	char dir[PATH_MAX], fds[512], line[64];
	struct run r;

	make_dir(dir, sizeof dir);
	list_fds(fds, sizeof fds);
	setenv("TEST_FDS", fds, 1);
	/* Values from an outer launch must not leak through. */
	setenv(MG_ENV_RANK, "7", 1);
	setenv(MG_ENV_RENDEZVOUS_FD, "99", 1);
	r = launch("env", dir, 4, 0, false);
	unsetenv(MG_ENV_RANK);
	unsetenv(MG_ENV_RENDEZVOUS_FD);
	unsetenv("TEST_FDS");
	CHECK_INT(r.rc, 0);
	for (int i = 0; i < 4; i++) {
		snprintf(line, sizeof line, "[rank %d] ok", i);
		CHECK_INT(count_lines(r.out, line), 1);
		snprintf(line, sizeof line, "[rank %d] on stderr", i);
		CHECK_INT(count_lines(r.err, line), 1);
	}
	char *x = malloc(4010);
	memset(x, 'x', 4000);
	x[4000] = 0;
	char *longline = malloc(4020);
	snprintf(longline, 4020, "[rank 1] %s", x);
	CHECK_INT(count_lines(r.out, longline), 1);
	free(x);
	free(longline);
	/* The launcher ends it, so no other line is glued to it. */
	CHECK_INT(count_lines(r.err, "[rank 3] tail-without-newline"), 1);
	CHECK(!strstr(r.err, "mgrun:"));
	CHECK(!strstr(r.err, "BAD"));
	run_free(&r);

	/* argv[0] without a slash is looked up on PATH. */
	char *sh_argv[] = {"sh", "-c",
			   "test \"$MG_WORLD_SIZE\" = 2 && "
			   "test \"$MG_LOCAL_WORLD_SIZE\" = 2 && "
			   "test \"$MG_RANK\" = \"$MG_LOCAL_RANK\"",
			   NULL};
	struct mg_launch_opts o = {.argv = sh_argv, .nranks = 2, .quiet = 1};
	CHECK_INT(mg_launch(&o), 0);
	remove_dir(dir);
}

/* A program that does not exist: nothing runs, exit 2, a message. */
static void t_launch_not_found(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	int save2, fe;

	make_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/err", dir);
	char *argv[] = {"mg-no-such-program", NULL};
	struct mg_launch_opts o = {.argv = argv, .nranks = 2};
	fflush(stderr);
	save2 = fcntl(2, F_DUPFD_CLOEXEC, 3);
	fe = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	dup2(fe, 2);
	close(fe);
	int rc = mg_launch(&o);
	char *noexec[] = {"/dev/null", NULL};
	o.argv = noexec;
	int rc2 = mg_launch(&o);
	o.argv = argv;
	o.nranks = 0;
	int rc3 = mg_launch(&o);
	dup2(save2, 2);
	close(save2);
	char *err = read_text(path);
	CHECK_INT(rc, 2);
	CHECK_INT(rc2, 2);
	CHECK_INT(rc3, 2);
	CHECK_HAS(err, "mgrun: cannot run 'mg-no-such-program': not found "
		       "on PATH");
	CHECK_HAS(err, "mgrun: cannot run /dev/null: Permission denied");
	CHECK_HAS(err, "1 to 1024 ranks");
	free(err);
	remove_dir(dir);
}

/* (b) Rank 2 prints "boom" and exits 3 while the others sleep: the
 * launcher names the rank, its status and its last line, stops the
 * others at once and leaves none behind. */
static void t_launch_fail_status(void)
{
	char dir[PATH_MAX];
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("fail", dir, 4, 0, true);
	CHECK_INT(r.rc, 1);
	CHECK(r.seconds < 15);
	CHECK_HAS(r.err, "mgrun: rank 2 (pid ");
	CHECK_HAS(r.err, ") exited with status 3; its last line: \"boom\"");
	CHECK_HAS(r.err, "mgrun: stopping the other 3 ranks");
	CHECK(!strstr(r.err, "SIGKILL"));
	CHECK(!strstr(r.out, "boom")); /* quiet: nothing relayed */
	check_no_rank_left(dir, 4);
	run_free(&r);
	remove_dir(dir);
}

/* A rank that stalls outside a collective: the others' watchdogs stop
 * them after 1 s, the launcher waits for every report it can get, names
 * the ranks that timed out and the one that did not, stops it and exits
 * with the watchdog's status. */
static void t_launch_watchdog(void)
{
	char dir[PATH_MAX];
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("watchdog", dir, 3, 1.0, true);
	CHECK_INT(r.rc, MG_EXIT_WATCHDOG);
	/* 1 s timeout + up to 5 s settling + 1 s grace, with room */
	CHECK(r.seconds >= 1.0);
	CHECK(r.seconds < 15);
	CHECK_HAS(r.err, ") was stopped by its collective watchdog: \"[rank ");
	CHECK_HAS(r.err, "] error: collective watchdog: rank ");
	CHECK_HAS(r.err, "barrier on the world communicator made no "
			 "progress for 1.");
	CHECK_HAS(r.err, " s at step 3 (training); a peer rank never joined");
	CHECK_HAS(r.err, "mgrun: collective watchdog: ranks 0, 2 timed out "
			 "waiting in a collective; rank 1 did not within 5 s: "
			 "that is the rank the others waited for");
	CHECK_HAS(r.err, "mgrun: stopping the other 1 rank");
	CHECK(!strstr(r.err, "BAD"));
	check_no_rank_left(dir, 3);
	run_free(&r);
	remove_dir(dir);
}

/* Every rank times out: no rank is blamed, and the launcher does not
 * wait out the settling time once all have reported. */
static void t_launch_watchdog_all(void)
{
	char dir[PATH_MAX];
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("watchdog_all", dir, 3, 1.0, true);
	CHECK_INT(r.rc, MG_EXIT_WATCHDOG);
	CHECK(r.seconds < 5);
	CHECK_HAS(r.err, "mgrun: collective watchdog: every rank timed out");
	CHECK(!strstr(r.err, "did not within"));
	check_no_rank_left(dir, 3);
	run_free(&r);
	remove_dir(dir);
}

/* (c) A rank killed by SIGKILL (as by the OOM killer). */
static void t_launch_killed(void)
{
	char dir[PATH_MAX];
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("sigkill", dir, 3, 0, false);
	CHECK_INT(r.rc, 1);
	CHECK(r.seconds < 15);
	CHECK_HAS(r.err, "mgrun: rank 1 (pid ");
	CHECK_HAS(r.err, "was killed by signal 9 (Killed; the kernel's OOM "
			 "killer sends this when memory runs out); its last "
			 "line: \"about to be killed\"");
	check_no_rank_left(dir, 3);
	run_free(&r);
	remove_dir(dir);
}

/* (d) Ranks that ignore SIGTERM are SIGKILLed after the grace period. */
static void t_launch_stubborn(void)
{
	char dir[PATH_MAX];
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("stubborn", dir, 3, 1.0, true);
	CHECK_INT(r.rc, 1);
	CHECK(r.seconds >= 1.0);
	CHECK(r.seconds < 10);
	CHECK_HAS(r.err, "mgrun: rank 0 (pid ");
	CHECK_HAS(r.err, "exited with status 1; its last line: \"giving up\"");
	CHECK_HAS(r.err, "mgrun: rank 1 (pid ");
	CHECK_HAS(r.err, "mgrun: rank 2 (pid ");
	CHECK_HAS(r.err, "s after SIGTERM; sending SIGKILL");
	check_no_rank_left(dir, 3);
	run_free(&r);
	remove_dir(dir);
}

struct interrupter {
	const char *dir;
	int world, sig;
};

/* Once every rank is up, signal this process (as Ctrl-C would). */
static void *interrupt_later(void *arg)
{
	struct interrupter *in = arg;

	wait_pid_files(in->dir, in->world, 20);
	sleep_s(0.1);
	kill(getpid(), in->sig);
	return NULL;
}

/* (e) SIGINT / SIGTERM to the launcher stops every rank: 130 / 143. */
static void interrupt_case(int sig, int expect_rc)
{
	char dir[PATH_MAX];
	struct interrupter in = {.world = 3, .sig = sig};
	pthread_t th;
	struct run r;

	make_dir(dir, sizeof dir);
	in.dir = dir;
	if (pthread_create(&th, NULL, interrupt_later, &in)) {
		failures++;
		return;
	}
	r = launch("sleep", dir, 3, 2.0, true);
	pthread_join(th, NULL);
	CHECK_INT(r.rc, expect_rc);
	CHECK(r.seconds < 15);
	CHECK_HAS(r.err, "mgrun: interrupted; stopped 3 ranks");
	CHECK(!strstr(r.err, "exited with"));
	CHECK(!strstr(r.err, "killed by"));
	check_no_rank_left(dir, 3);
	run_free(&r);
	remove_dir(dir);
}

static void t_launch_sigint(void)
{
	interrupt_case(SIGINT, 130);
}

static void t_launch_sigterm(void)
{
	interrupt_case(SIGTERM, 143);
}

/* The launcher itself is SIGKILLed: its ranks die with it (they were
 * told to by PR_SET_PDEATHSIG). They become this process's children, as
 * it is a subreaper, so it can collect them. */
static void t_launch_parent_death(void)
{
	char dir[PATH_MAX];
	pid_t helper;
	int st;

	make_dir(dir, sizeof dir);
	CHECK_INT(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	fflush(NULL);
	helper = fork();
	if (helper == 0) {
		char world[] = "3";
		char *argv[] = {self_exe, "child", "sleep", dir, world, NULL};
		struct mg_launch_opts o = {
			.argv = argv, .nranks = 3, .quiet = 1};
		_exit(mg_launch(&o));
	}
	CHECK(wait_pid_files(dir, 3, 20));
	kill(helper, SIGKILL);
	waitpid(helper, &st, 0);
	for (int i = 0; i < 3; i++) {
		pid_t pid = read_pid_file(dir, i), got = 0;
		double end = now_s() + 10;
		while (pid > 0 && now_s() < end &&
		       (got = waitpid(pid, &st, WNOHANG)) == 0)
			sleep_s(0.02);
		CHECK(got == pid);
		CHECK(got == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	}
	prctl(PR_SET_CHILD_SUBREAPER, 0);
	remove_dir(dir);
}

/* The line "[rank R] blobK <hash>" of the launcher's output: the hash. */
static bool blob_hash(const char *out, int rank, int round,
		      unsigned long long *h)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof key, "[rank %d] blob%d ", rank, round);
	p = strstr(out, key);
	return p && sscanf(p + strlen(key), "%llx", h) == 1;
}

/* (f) 4 ranks under the launcher: rank 0's 128 random bytes reach all,
 * twice (the second time rank 0 listens on MG_MASTER_PORT anew). */
static void t_rendezvous(void)
{
	char dir[PATH_MAX];
	unsigned long long h0[3], h;
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("rdv", dir, 4, 0, false);
	CHECK_INT(r.rc, 0);
	for (int round = 1; round <= 2; round++) {
		CHECK(blob_hash(r.out, 0, round, &h0[round]));
		for (int i = 1; i < 4; i++) {
			bool found = blob_hash(r.out, i, round, &h);
			CHECK(found);
			if (found && h != h0[round]) {
				fprintf(stderr,
					"rank %d round %d: %016llx, "
					"rank 0 has %016llx\n",
					i, round, h, h0[round]);
				failures++;
			}
		}
	}
	CHECK(h0[1] != h0[2]);
	run_free(&r);
	remove_dir(dir);
}

/* Rank 1 expects 64 bytes: both ranks fail, rank 0 naming rank 1. */
static void t_rendezvous_mismatch(void)
{
	char dir[PATH_MAX];
	struct run r;

	make_dir(dir, sizeof dir);
	r = launch("rdv_mismatch", dir, 2, 0, false);
	CHECK_INT(r.rc, 1);
	CHECK_HAS(r.err, "[rank 0] error: rendezvous: rank 1 (from "
			 "127.0.0.1:");
	CHECK_HAS(r.err, ") expects 64 bytes, rank 0 sends 128");
	CHECK_HAS(r.err, "[rank 1] error: rendezvous: rank 0 at 127.0.0.1:");
	CHECK_HAS(r.err, "rejected rank 1");
	CHECK_HAS(r.err, "mgrun: rank 0 (pid ");
	run_free(&r);
	remove_dir(dir);
}

static const char *const all_vars[] = {
	"MG_RANK",
	"MG_WORLD_SIZE",
	"MG_LOCAL_RANK",
	"MG_LOCAL_WORLD_SIZE",
	"MG_MASTER_ADDR",
	"MG_MASTER_PORT",
	"MG_RENDEZVOUS_FD",
	"OMPI_COMM_WORLD_RANK",
	"OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE",
	"SLURM_PROCID",
	"SLURM_NTASKS",
	"SLURM_LOCALID",
	"SLURM_NTASKS_PER_NODE",
	"SLURM_TASKS_PER_NODE",
	"SLURM_NODEID",
	"PMI_RANK",
	"PMI_SIZE",
	"MPI_LOCALRANKID",
	"MPI_LOCALNRANKS",
	"RANK",
	"WORLD_SIZE",
	"LOCAL_RANK",
	"LOCAL_WORLD_SIZE",
	"MASTER_ADDR",
	"MASTER_PORT",
};

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++)
		unsetenv(all_vars[i]);
}

/* Set "NAME=VALUE" pairs from a NULL-terminated list. */
static void set_env(const char *const *kv)
{
	clear_env();
	for (; *kv; kv++) {
		char name[64];
		const char *eq = strchr(*kv, '=');
		snprintf(name, sizeof name, "%.*s", (int)(eq - *kv), *kv);
		setenv(name, eq + 1, 1);
	}
}

/* detect() with this environment gives these numbers. */
static void expect_env(const char *const *kv, const char *source, int rank,
		       int world, int lrank, int lworld, bool mpi)
{
	struct mg_dist_env e;

	set_env(kv);
	mg_clear_error();
	if (mg_dist_env_detect(&e)) {
		fprintf(stderr, "%s (%s): %s\n", source, kv[0] ? kv[0] : "",
			mg_last_error());
		failures++;
		return;
	}
	if (strcmp(e.source, source) || e.rank != rank || e.world != world ||
	    e.local_rank != lrank || e.local_world != lworld || e.mpi != mpi) {
		fprintf(stderr,
			"expected %s %d/%d local %d/%d mpi %d, got %s %d/%d "
			"local %d/%d mpi %d\n",
			source, rank, world, lrank, lworld, mpi, e.source,
			e.rank, e.world, e.local_rank, e.local_world, e.mpi);
		failures++;
	}
}

/* detect() with this environment fails with a message containing msg;
 * e is reset to rank 0 of 1 meanwhile. */
static void expect_env_error(const char *const *kv, const char *msg)
{
	struct mg_dist_env e;

	set_env(kv);
	mg_clear_error();
	CHECK_INT(mg_dist_env_detect(&e), -1);
	CHECK_HAS(mg_last_error(), msg);
	CHECK(e.world == 1 && e.rank == 0);
}

/* (h) Each launcher family, and which one wins. */
static void t_env_families(void)
{
	expect_env((const char *const[]){NULL}, "none", 0, 1, 0, 1, false);
	expect_env((const char *const[]){"MG_RANK=2", "MG_WORLD_SIZE=4",
					 "MG_LOCAL_RANK=0",
					 "MG_LOCAL_WORLD_SIZE=2", NULL},
		   "mgrun", 2, 4, 0, 2, false);
	expect_env((const char *const[]){"OMPI_COMM_WORLD_RANK=5",
					 "OMPI_COMM_WORLD_SIZE=8",
					 "OMPI_COMM_WORLD_LOCAL_RANK=1",
					 "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL},
		   "openmpi", 5, 8, 1, 4, true);
	expect_env((const char *const[]){"SLURM_PROCID=5", "SLURM_NTASKS=8",
					 "SLURM_LOCALID=1",
					 "SLURM_TASKS_PER_NODE=4(x2)", NULL},
		   "slurm", 5, 8, 1, 4, false);
	/* SLURM_NTASKS_PER_NODE first; else this node's entry of the
	 * compressed list. */
	expect_env((const char *const[]){"SLURM_PROCID=3", "SLURM_NTASKS=6",
					 "SLURM_LOCALID=1",
					 "SLURM_NTASKS_PER_NODE=2",
					 "SLURM_TASKS_PER_NODE=4(x2)", NULL},
		   "slurm", 3, 6, 1, 2, false);
	expect_env((const char *const[]){"SLURM_PROCID=7", "SLURM_NTASKS=8",
					 "SLURM_LOCALID=0",
					 "SLURM_TASKS_PER_NODE=3(x2),2",
					 "SLURM_NODEID=2", NULL},
		   "slurm", 7, 8, 0, 2, false);
	expect_env((const char *const[]){"PMI_RANK=1", "PMI_SIZE=2",
					 "MPI_LOCALRANKID=1",
					 "MPI_LOCALNRANKS=2", NULL},
		   "mpich", 1, 2, 1, 2, true);
	expect_env((const char *const[]){"RANK=3", "WORLD_SIZE=16",
					 "LOCAL_RANK=3", "LOCAL_WORLD_SIZE=8",
					 NULL},
		   "torchrun", 3, 16, 3, 8, false);
	/* Without local numbers: one host. */
	expect_env((const char *const[]){"RANK=3", "WORLD_SIZE=4", NULL},
		   "torchrun", 3, 4, 3, 4, false);
	expect_env(
		(const char *const[]){"SLURM_PROCID=0", "SLURM_NTASKS=1", NULL},
		"slurm", 0, 1, 0, 1, false);
	/* mgrun's own launcher started inside a SLURM or torchrun job. */
	expect_env((const char *const[]){"MG_RANK=1", "MG_WORLD_SIZE=2",
					 "SLURM_PROCID=9", "SLURM_NTASKS=16",
					 "RANK=9", "WORLD_SIZE=16", NULL},
		   "mgrun", 1, 2, 1, 2, false);
	/* Open MPI's mpirun inside a SLURM allocation. */
	expect_env((const char *const[]){"OMPI_COMM_WORLD_RANK=1",
					 "OMPI_COMM_WORLD_SIZE=2",
					 "SLURM_PROCID=0", "SLURM_NTASKS=1",
					 NULL},
		   "openmpi", 1, 2, 1, 2, true);
	clear_env();
}

/* (h) Inconsistent or malformed values name the variable. */
static void t_env_errors(void)
{
	expect_env_error(
		(const char *const[]){"MG_RANK=4", "MG_WORLD_SIZE=4", NULL},
		"mgrun environment: MG_RANK=4 is not below "
		"MG_WORLD_SIZE=4");
	expect_env_error(
		(const char *const[]){"RANK=abc", "WORLD_SIZE=4", NULL},
		"torchrun environment: RANK='abc' is not a "
		"non-negative integer");
	expect_env_error((const char *const[]){"RANK=-1", "WORLD_SIZE=4", NULL},
			 "RANK='-1' is not a non-negative integer");
	expect_env_error((const char *const[]){"RANK=1", "WORLD_SIZE=4x", NULL},
			 "WORLD_SIZE='4x' is not a non-negative integer");
	expect_env_error((const char *const[]){"RANK=", "WORLD_SIZE=4", NULL},
			 "RANK='' is not a non-negative integer");
	expect_env_error((const char *const[]){"PMI_RANK=0",
					       "PMI_SIZE=99999999999", NULL},
			 "PMI_SIZE='99999999999' is not a non-negative "
			 "integer");
	expect_env_error((const char *const[]){"OMPI_COMM_WORLD_RANK=0",
					       "OMPI_COMM_WORLD_SIZE=0", NULL},
			 "OMPI_COMM_WORLD_SIZE=0: a job has at least one rank");
	expect_env_error((const char *const[]){"MG_RANK=1", NULL},
			 "MG_RANK is set but MG_WORLD_SIZE is not");
	expect_env_error((const char *const[]){"OMPI_COMM_WORLD_RANK=1",
					       "OMPI_COMM_WORLD_SIZE=4",
					       "OMPI_COMM_WORLD_LOCAL_RANK=2",
					       "OMPI_COMM_WORLD_LOCAL_SIZE=2",
					       NULL},
			 "OMPI_COMM_WORLD_LOCAL_RANK=2 is not below "
			 "OMPI_COMM_WORLD_LOCAL_SIZE=2");
	expect_env_error((const char *const[]){"RANK=1", "WORLD_SIZE=4",
					       "LOCAL_WORLD_SIZE=8", NULL},
			 "LOCAL_WORLD_SIZE=8: ranks on this host must be "
			 "between 1 and WORLD_SIZE=4");
	expect_env_error(
		(const char *const[]){"SLURM_PROCID=1", "SLURM_NTASKS=4",
				      "SLURM_LOCALID=1",
				      "SLURM_TASKS_PER_NODE=two", NULL},
		"SLURM_TASKS_PER_NODE='two' is not a task list like "
		"'4(x2),3'");
	expect_env_error(
		(const char *const[]){
			"SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
			"SLURM_TASKS_PER_NODE=2(x2)", "SLURM_NODEID=2", NULL},
		"SLURM_TASKS_PER_NODE='2(x2)' lists fewer nodes than "
		"SLURM_NODEID");
	expect_env_error(
		(const char *const[]){"SLURM_PROCID=1", "SLURM_NTASKS=4",
				      "SLURM_LOCALID=3",
				      "SLURM_NTASKS_PER_NODE=2", NULL},
		"SLURM_LOCALID=3 is not below SLURM_NTASKS_PER_NODE=2");
	clear_env();
}

/* A TCP port nobody listens on (right now). */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
	    !getsockname(fd, (struct sockaddr *)&a, &al))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* (g) Rank 1 with nobody listening: the error after the timeout; rank
 * 0 with nobody connecting; missing or malformed variables. */
static void t_rendezvous_timeout(void)
{
	struct mg_dist_env e1 = {1, 2, 1, 2, "mgrun", false};
	struct mg_dist_env e0 = {0, 3, 0, 3, "mgrun", false};
	unsigned char blob[16] = {0};
	char port[16], msg[256];
	double t0, dt;

	clear_env();
	snprintf(port, sizeof port, "%d", free_port());
	setenv(MG_ENV_MASTER_ADDR, "127.0.0.1", 1);
	setenv(MG_ENV_MASTER_PORT, port, 1);
	t0 = now_s();
	CHECK_INT(mg_rendezvous_bcast(&e1, blob, sizeof blob, 1.5), -1);
	dt = now_s() - t0;
	printf("rank 1 gave up after %.2f s: %s\n", dt, mg_last_error());
	CHECK(dt >= 1.4 && dt < 3.5);
	snprintf(msg, sizeof msg,
		 "rendezvous: could not reach rank 0 at 127.0.0.1:%s within "
		 "1.5 s (set MG_MASTER_ADDR/MG_MASTER_PORT); last attempt: "
		 "Connection refused",
		 port);
	CHECK_HAS(mg_last_error(), msg);

	t0 = now_s();
	CHECK_INT(mg_rendezvous_bcast(&e0, blob, sizeof blob, 1.0), -1);
	dt = now_s() - t0;
	printf("rank 0 gave up after %.2f s: %s\n", dt, mg_last_error());
	CHECK(dt >= 0.9 && dt < 3.0);
	CHECK_HAS(mg_last_error(), "rendezvous: rank 0 heard from 0 of the 2 "
				   "other ranks within 1 s (missing: 1, 2)");

	/* A world of one needs nothing at all. */
	struct mg_dist_env single = {0, 1, 0, 1, "none", false};
	CHECK_INT(mg_rendezvous_bcast(&single, blob, sizeof blob, 1.0), 0);

	clear_env();
	CHECK_INT(mg_rendezvous_bcast(&e1, blob, sizeof blob, 1.0), -1);
	CHECK_HAS(mg_last_error(), "rendezvous: rank 1 of 2 needs "
				   "MG_MASTER_ADDR and MG_MASTER_PORT");
	CHECK_INT(mg_rendezvous_bcast(&e0, blob, sizeof blob, 1.0), -1);
	CHECK_HAS(mg_last_error(), "rendezvous: rank 0 of 3 needs "
				   "MG_MASTER_PORT");
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	setenv("MASTER_PORT", "http", 1);
	CHECK_INT(mg_rendezvous_bcast(&e1, blob, sizeof blob, 1.0), -1);
	CHECK_HAS(mg_last_error(), "MASTER_PORT='http' is not a TCP port");
	setenv(MG_ENV_RENDEZVOUS_FD, "0", 1);
	CHECK_INT(mg_rendezvous_bcast(&e0, blob, sizeof blob, 1.0), -1);
	CHECK_HAS(mg_last_error(), "MG_RENDEZVOUS_FD=0 is not a listening "
				   "socket");
	clear_env();
}

struct rdv_thread {
	struct mg_dist_env e;
	unsigned char blob[64];
	int rc;
	char err[256];
};

static void *rdv_thread_main(void *arg)
{
	struct rdv_thread *t = arg;

	t->rc = mg_rendezvous_bcast(&t->e, t->blob, sizeof t->blob, 20.0);
	if (t->rc)
		snprintf(t->err, sizeof t->err, "%s", mg_last_error());
	return NULL;
}

/* Three ranks as threads, torchrun's MASTER_ADDR/MASTER_PORT naming a
 * host by name: rank 0 binds the port itself. */
static void t_rendezvous_hostname(void)
{
	struct rdv_thread t[3];
	pthread_t th[3];
	char port[16];

	clear_env();
	snprintf(port, sizeof port, "%d", free_port());
	setenv("MASTER_ADDR", "localhost", 1);
	setenv("MASTER_PORT", port, 1);
	for (int round = 0; round < 2; round++) {
		memset(t, 0, sizeof t);
		for (int i = 0; i < 3; i++)
			t[i].e = (struct mg_dist_env){i, 3,	     i,
						      3, "torchrun", false};
		if (getrandom(t[0].blob, sizeof t[0].blob, 0) !=
		    sizeof t[0].blob)
			failures++;
		/* Peers first: they retry until rank 0 listens. */
		for (int i = 2; i >= 0; i--) {
			pthread_create(&th[i], NULL, rdv_thread_main, &t[i]);
			if (i == 2)
				sleep_s(0.3);
		}
		for (int i = 0; i < 3; i++) {
			pthread_join(th[i], NULL);
			if (t[i].rc)
				fprintf(stderr, "rank %d: %s\n", i, t[i].err);
			CHECK_INT(t[i].rc, 0);
			CHECK(!memcmp(t[i].blob, t[0].blob, sizeof t[0].blob));
		}
	}
	clear_env();
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"env_families", t_env_families},
	{"env_errors", t_env_errors},
	{"launch_ok", t_launch_ok},
	{"launch_not_found", t_launch_not_found},
	{"launch_fail_status", t_launch_fail_status},
	{"launch_killed", t_launch_killed},
	{"launch_watchdog", t_launch_watchdog},
	{"launch_watchdog_all", t_launch_watchdog_all},
	{"launch_stubborn", t_launch_stubborn},
	{"launch_sigint", t_launch_sigint},
	{"launch_sigterm", t_launch_sigterm},
	{"launch_parent_death", t_launch_parent_death},
	{"rendezvous", t_rendezvous},
	{"rendezvous_mismatch", t_rendezvous_mismatch},
	{"rendezvous_timeout", t_rendezvous_timeout},
	{"rendezvous_hostname", t_rendezvous_hostname},
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int run_one(const char *name)
{
	int before = failures;

	for (size_t i = 0; i < NCASES; i++) {
		if (strcmp(cases[i].name, name) == 0) {
			cases[i].fn();
			printf("%s %s\n", failures == before ? "ok  " : "FAIL",
			       name);
			return 0;
		}
	}
	fprintf(stderr, "unknown case '%s'\n", name);
	failures++;
	return -1;
}

int main(int argc, char **argv)
{
	ssize_t n;

	if (argc > 1 && strcmp(argv[1], "child") == 0)
		return child_main(argc, argv);
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (size_t i = 0; i < NCASES; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
	if (n <= 0) {
		perror("/proc/self/exe");
		return 1;
	}
	self_exe[n] = 0;
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			run_one(argv[i]);
	} else {
		for (size_t i = 0; i < NCASES; i++)
			run_one(cases[i].name);
	}
	return failures ? 1 : 0;
}
