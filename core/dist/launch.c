/*
 * launch.c - mgrun's local launcher: start one process per rank on this
 * host, relay their output, and supervise them so that one failing rank
 * stops the job (instead of the others hanging in a collective) and the
 * user learns which rank failed, how, and what it said last.
 *
 * The launcher is single-threaded around a poll() loop over the ranks'
 * stdout/stderr pipes and a self-pipe written by the SIGCHLD, SIGINT and
 * SIGTERM handlers (a signal handler, unlike a signalfd, works whatever
 * the signal masks of other threads in the calling program are). Every
 * wait has a deadline: SIGTERM, SIGKILL after the grace period, and a
 * last bounded wait for ranks that do not even die of SIGKILL.
 *
 * Output is relayed line by line as the ranks wrote it (each rank
 * prefixes its own lines); a final line without a newline gets one, and
 * a line longer than RELAY_BUF goes out in pieces. A rank's own child
 * processes are its business: they are not signalled, and the launcher
 * does not wait for them to close the pipes they inherited.
 *
 * A rank stopped by the collective watchdog (exit MG_EXIT_WATCHDOG, a line
 * holding MG_WATCHDOG_MARK) is the exception to stopping at once: the
 * ranks that wait for a stalled peer time out together, so the launcher
 * gives the others WATCHDOG_SETTLE_S to report too, then names the ranks
 * that timed out and those that did not - the ones they waited for.
 *
 * One mg_launch() per process at a time: the handlers' state is global.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

extern char **environ;

#define LAUNCH_MAX_RANKS 1024
#define RELAY_BUF 8192	  /* a longer line is relayed in pieces */
#define LAST_LINE_MAX 240 /* of a rank's last line, quoted in reports */
#define KILL_WAIT_S 5.0	  /* after SIGKILL, before giving up on a rank */
/* after SIGTERM for an interrupt (the ranks write a checkpoint), before
 * SIGKILL; a second interrupt does not wait */
#define INTERRUPT_GRACE_S 60.0
#define DRAIN_MAX (2 << 20) /* see stream_read() */
/* after a first collective watchdog report, for the other ranks' */
#define WATCHDOG_SETTLE_S 5.0

/* One of a rank's output pipes and its not yet relayed partial line. */
struct stream {
	int fd;	 /* read end (non-blocking), -1 once closed */
	int out; /* the launcher's fd its lines go to: 1 or 2 */
	size_t len;
	char buf[RELAY_BUF];
};

struct rank {
	pid_t pid; /* 0: never started */
	bool alive;
	int status; /* waitpid status once !alive */
	struct stream s[2];
	char last[LAST_LINE_MAX]; /* last non-empty output line */
	char wd[LAST_LINE_MAX];	  /* its collective watchdog line, if any */
	bool timed_out;		  /* stopped by its collective watchdog */
};

struct launcher {
	const struct mg_launch_opts *o;
	struct rank *r;
	int n, alive;
	double grace;
	bool failed;	   /* a rank failed (or a rank could not start) */
	bool stopping;	   /* SIGTERM went out */
	bool killed;	   /* SIGKILL went out */
	double kill_at;	   /* when SIGKILL goes out */
	double give_up;	   /* when we stop waiting for SIGKILLed ranks */
	double stop_at;	   /* when SIGTERM went out */
	int interrupted;   /* SIGINT or SIGTERM the launcher got, or 0 */
	int stopped;	   /* ranks alive when the interrupt came */
	int sigs_seen;	   /* of sig_count, handled already */
	double wd_until;   /* collecting watchdog reports until then */
	struct pollfd *pf; /* supervise()'s poll set: the self-pipe, then */
	struct rank **pr;  /* the open streams and their ranks */
};

/* Signal handler state: the self-pipe's write end, and what arrived. */
static volatile sig_atomic_t sig_wfd = -1;
static volatile sig_atomic_t sig_count, sig_last;

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (sig != SIGCHLD) {
		sig_last = sig;
		sig_count++;
	}
	if (sig_wfd >= 0 && write(sig_wfd, &c, 1) < 0) {
		/* Full pipe: a wake-up is pending anyway. */
	}
	errno = saved;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Move fd to 3 or above (close-on-exec), so that a launcher started with
 * stdin/stdout/stderr closed cannot have dup2(pipe, 1) in a child
 * clobber the rendezvous socket or another pipe. */
static int fd_above_stdio(int fd)
{
	int hi;

	if (fd < 0 || fd > 2)
		return fd;
	hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return hi;
}

/* The file execve() will run: argv[0] as is when it has a slash, else
 * the first executable regular file of that name on PATH (resolved here
 * rather than with execvp() after fork, which is not async-signal-safe,
 * and so that a typo fails before any rank starts). */
static char *resolve_program(const char *prog)
{
	const char *path = getenv("PATH");
	struct stat st;

	if (!*prog) {
		mg_error("empty program name");
		return NULL;
	}
	if (strchr(prog, '/')) {
		if (stat(prog, &st) || access(prog, X_OK)) {
			mg_error("cannot run %s: %s", prog, strerror(errno));
			return NULL;
		}
		if (!S_ISREG(st.st_mode)) {
			mg_error("cannot run %s: not a regular file", prog);
			return NULL;
		}
		return strdup(prog);
	}
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path;;) {
		const char *colon = strchr(p, ':');
		size_t dl = colon ? (size_t)(colon - p) : strlen(p);
		char *cand;

		/* An empty PATH entry is the current directory. */
		if (asprintf(&cand, "%.*s%s%s", (int)dl, p, dl ? "/" : "",
			     prog) < 0) {
			mg_error("out of memory");
			return NULL;
		}
		if (!stat(cand, &st) && S_ISREG(st.st_mode) &&
		    !access(cand, X_OK))
			return cand;
		free(cand);
		if (!colon)
			break;
		p = colon + 1;
	}
	mg_error("cannot run '%s': not found on PATH", prog);
	return NULL;
}

/* Variables the launcher sets; inherited values of these are dropped. */
static const char *const own_vars[] = {
	MG_ENV_RANK,	      MG_ENV_WORLD,	  MG_ENV_LOCAL_RANK,
	MG_ENV_LOCAL_WORLD,   MG_ENV_MASTER_ADDR, MG_ENV_MASTER_PORT,
	MG_ENV_RENDEZVOUS_FD,
};
#define N_OWN (sizeof own_vars / sizeof own_vars[0])

static bool is_own_var(const char *kv)
{
	for (size_t i = 0; i < N_OWN; i++) {
		size_t l = strlen(own_vars[i]);
		if (!strncmp(kv, own_vars[i], l) && kv[l] == '=')
			return true;
	}
	return false;
}

/* Rank `rank`'s environment: our variables, then the launcher's minus
 * our names. Built before fork (the child may not allocate); the first
 * *n_own entries are allocated here, the rest borrowed from environ. */
static char **build_env(int rank, int n, int port, int listen_fd, size_t *n_own)
{
	size_t cnt = 0, k = 0, i;
	char **env;
	bool ok = true;

	while (environ && environ[cnt])
		cnt++;
	env = calloc(cnt + N_OWN + 1, sizeof *env);
	if (!env)
		return NULL;
	ok &= asprintf(&env[k++], "%s=%d", MG_ENV_RANK, rank) > 0;
	ok &= asprintf(&env[k++], "%s=%d", MG_ENV_WORLD, n) > 0;
	ok &= asprintf(&env[k++], "%s=%d", MG_ENV_LOCAL_RANK, rank) > 0;
	ok &= asprintf(&env[k++], "%s=%d", MG_ENV_LOCAL_WORLD, n) > 0;
	ok &= asprintf(&env[k++], "%s=127.0.0.1", MG_ENV_MASTER_ADDR) > 0;
	ok &= asprintf(&env[k++], "%s=%d", MG_ENV_MASTER_PORT, port) > 0;
	if (rank == 0)
		ok &= asprintf(&env[k++], "%s=%d", MG_ENV_RENDEZVOUS_FD,
			       listen_fd) > 0;
	if (!ok) {
		/* asprintf leaves the pointer undefined on failure. */
		for (i = 0; i < k; i++)
			free(env[i]);
		free(env);
		return NULL;
	}
	*n_own = k;
	for (i = 0; i < cnt; i++)
		if (!is_own_var(environ[i]))
			env[k++] = environ[i];
	return env;
}

static void free_env(char **env, size_t n_own)
{
	if (!env)
		return;
	for (size_t i = 0; i < n_own; i++)
		free(env[i]);
	free(env);
}

/* What the child needs between fork and exec, all prepared beforehand. */
struct child_spec {
	const char *path;
	char *const *argv;
	char **envp;
	int out_w, err_w;
	int listen_fd; /* rank 0: inherited across exec; else -1 */
	pid_t launcher;
	const struct sigaction *old_act; /* SIGCHLD, SIGINT, SIGTERM */
	const sigset_t *old_mask;
};

static const int handled_sigs[] = {SIGCHLD, SIGINT, SIGTERM};

static void write_str(int fd, const char *s)
{
	if (write(fd, s, strlen(s)) < 0) {
		/* Nothing left to report it to. */
	}
}

/* The child between fork() and execve(): async-signal-safe calls only. */
static _Noreturn void child_exec(const struct child_spec *c)
{
	char num[16];
	int i, e;

	/* Die with the launcher, also if it died before this line. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != c->launcher)
		_exit(127);
	if (dup2(c->out_w, 1) < 0 || dup2(c->err_w, 2) < 0)
		_exit(127);
	if (c->listen_fd >= 0 && fcntl(c->listen_fd, F_SETFD, 0) < 0)
		_exit(127);
	/* The program starts with the signal state the launcher's caller
	 * had (ignored stays ignored; our handlers would die with exec). */
	for (i = 0; i < 3; i++) {
		struct sigaction sa;

		memset(&sa, 0, sizeof sa);
		sa.sa_handler =
			c->old_act[i].sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL;
		sigaction(handled_sigs[i], &sa, NULL);
	}
	sigprocmask(SIG_SETMASK, c->old_mask, NULL);
	execve(c->path, c->argv, c->envp);
	e = errno;
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
	/* A static table: no locale, no allocation. */
	const char *desc = strerrordesc_np(e);
	if (desc) {
		write_str(2, "mgrun: cannot execute ");
		write_str(2, c->path);
		write_str(2, ": ");
		write_str(2, desc);
		write_str(2, "\n");
		_exit(127);
	}
#endif
	i = (int)sizeof num;
	num[--i] = 0;
	do {
		num[--i] = (char)('0' + e % 10);
		e /= 10;
	} while (e && i > 0);
	write_str(2, "mgrun: cannot execute ");
	write_str(2, c->path);
	write_str(2, ": errno ");
	write_str(2, num + i);
	write_str(2, "\n");
	_exit(127);
}

/* Write all of buf to the launcher's fd (a relay target); output that
 * cannot be written within a second is dropped rather than stalling the
 * supervision. */
static void write_out(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);

		if (w > 0) {
			buf += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && errno == EAGAIN) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (poll(&p, 1, 1000) <= 0)
				return;
		} else {
			return;
		}
	}
}

/* Remember [p, p+n) as the rank's last line if it is not blank. */
static void note_line(struct rank *r, const char *p, size_t n)
{
	while (n && (p[n - 1] == '\n' || p[n - 1] == '\r'))
		n--;
	size_t i = 0;
	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
		i++;
	if (i == n)
		return;
	if (n > sizeof r->last - 1) {
		n = sizeof r->last - 1;
		/* Do not cut a UTF-8 character in two. */
		while (n && ((unsigned char)p[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(r->last, p, n);
	r->last[n] = 0;
	if (strstr(r->last, MG_WATCHDOG_MARK))
		memcpy(r->wd, r->last, n + 1);
}

/* Relay the complete lines in s->buf (all of it when `all`: end of
 * stream or a line too long for the buffer) and keep the rest. */
static void stream_flush(struct launcher *l, struct rank *r, struct stream *s,
			 bool all)
{
	size_t end = s->len, start = 0;

	if (!all) {
		while (end && s->buf[end - 1] != '\n')
			end--;
	}
	if (!end)
		return;
	if (!l->o->quiet)
		write_out(s->out, s->buf, end);
	while (start < end) {
		char *nl = memchr(s->buf + start, '\n', end - start);
		size_t stop = nl ? (size_t)(nl - s->buf) + 1 : end;

		note_line(r, s->buf + start, stop - start);
		start = stop;
	}
	memmove(s->buf, s->buf + end, s->len - end);
	s->len -= end;
}

/* End of a rank's stream: its last line, when it did not end in a
 * newline, gets one, so that the next rank's line starts on its own. */
static void stream_close(struct launcher *l, struct rank *r, struct stream *s)
{
	if (s->len && s->buf[s->len - 1] != '\n') {
		if (s->len == sizeof s->buf)
			stream_flush(l, r, s, true);
		s->buf[s->len++] = '\n';
	}
	stream_flush(l, r, s, true);
	close(s->fd);
	s->fd = -1;
}

/* Read what the pipe has now (it is non-blocking): when `drain`, until
 * it would block (at most DRAIN_MAX bytes: more than a pipe holds, so a
 * rank's own child that keeps writing cannot keep us here), else one
 * read. Closes the stream at end of file. */
static void stream_read(struct launcher *l, struct rank *r, struct stream *s,
			bool drain)
{
	for (int reads = 0; s->fd >= 0 && reads < DRAIN_MAX / RELAY_BUF;
	     reads++) {
		ssize_t got =
			read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			return;
		if (got <= 0) {
			stream_close(l, r, s);
			return;
		}
		s->len += (size_t)got;
		stream_flush(l, r, s, s->len == sizeof s->buf);
		if (!drain)
			return;
	}
}

/* Send sig to every rank still running. */
static void signal_all(struct launcher *l, int sig)
{
	for (int i = 0; i < l->n; i++)
		if (l->r[i].alive)
			kill(l->r[i].pid, sig);
}

/* Begin stopping the job: SIGTERM now, SIGKILL after the grace period. */
static void stop_all(struct launcher *l)
{
	if (l->stopping)
		return;
	l->stopping = true;
	l->stop_at = now_s();
	l->kill_at = l->stop_at + l->grace;
	signal_all(l, SIGTERM);
}

/* mgrun: rank 2 (pid 1234) exited with status 3; its last line: "..." */
static void report_failure(struct launcher *l, struct rank *r, int i)
{
	char how[200];
	int st = r->status;

	if (st < 0) {
		snprintf(how, sizeof how,
			 "ended, but someone else collected "
			 "its exit status");
	} else if (WIFEXITED(st)) {
		snprintf(how, sizeof how, "exited with status %d",
			 WEXITSTATUS(st));
	} else {
		int sig = WTERMSIG(st);
		const char *name = strsignal(sig);
		snprintf(how, sizeof how, "was killed by signal %d (%s%s)%s",
			 sig, name ? name : "unknown signal",
			 sig == SIGKILL ? "; the kernel's OOM killer sends "
					  "this when memory runs out"
					: "",
			 WCOREDUMP(st) ? ", core dumped" : "");
	}
	if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == MG_EXIT_WATCHDOG &&
	    r->wd[0]) {
		fprintf(stderr,
			"mgrun: rank %d (pid %d) was stopped by its collective "
			"watchdog: \"%s\"\n",
			i, (int)r->pid, r->wd);
		if (l->alive > 0)
			fprintf(stderr,
				"mgrun: waiting up to %.0f s for the other "
				"ranks' watchdogs, to tell which rank "
				"stalled\n",
				WATCHDOG_SETTLE_S);
		return;
	}
	if (r->last[0])
		fprintf(stderr,
			"mgrun: rank %d (pid %d) %s; its last line: "
			"\"%s\"\n",
			i, (int)r->pid, how, r->last);
	else
		fprintf(stderr,
			"mgrun: rank %d (pid %d) %s without any output\n", i,
			(int)r->pid, how);
	if (l->alive > 0)
		fprintf(stderr, "mgrun: stopping the other %d rank%s\n",
			l->alive, l->alive == 1 ? "" : "s");
}

/* The ranks that timed out (timed_out == want), as "0, 2, 3" (cut after
 * a few dozen). How many there are. */
static int rank_list(const struct launcher *l, bool want, char *out, size_t n)
{
	size_t len = 0;
	int count = 0;

	out[0] = 0;
	for (int i = 0; i < l->n; i++) {
		if (l->r[i].timed_out != want)
			continue;
		if (len + 16 < n)
			len += (size_t)snprintf(out + len, n - len, "%s%d",
						count ? ", " : "", i);
		else if (len + 5 < n && out[len - 1] != '.')
			len += (size_t)snprintf(out + len, n - len, ", ...");
		count++;
	}
	return count;
}

/* After the settling time: which ranks timed out in a collective, and
 * which did not - those the others waited for. */
static void report_watchdog(struct launcher *l)
{
	char yes[256], no[256];
	int ny = rank_list(l, true, yes, sizeof yes);
	int nn = rank_list(l, false, no, sizeof no);

	if (nn == 0)
		fprintf(stderr,
			"mgrun: collective watchdog: every rank timed out in "
			"a collective, none stalled outside one: a lost "
			"connection or a hung device, not a slow rank\n");
	else
		fprintf(stderr,
			"mgrun: collective watchdog: rank%s %s timed out "
			"waiting in a collective; rank%s %s did not within "
			"%.0f s: %s the rank%s the others waited for (stalled "
			"before or inside the collective)\n",
			ny == 1 ? "" : "s", yes, nn == 1 ? "" : "s", no,
			WATCHDOG_SETTLE_S, nn == 1 ? "that is" : "those are",
			nn == 1 ? "" : "s");
	if (l->alive > 0)
		fprintf(stderr, "mgrun: stopping the other %d rank%s\n",
			l->alive, l->alive == 1 ? "" : "s");
}

/* Collect ranks that ended (never blocks); the first failure outside a
 * shutdown is reported and stops the job, at once or, when the
 * collective watchdog stopped it, after the others' watchdogs had time
 * to report (supervise()). */
static void reap(struct launcher *l)
{
	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->r[i];
		pid_t p;
		int st = 0;

		if (!r->alive)
			continue;
		do {
			p = waitpid(r->pid, &st, WNOHANG);
		} while (p < 0 && errno == EINTR);
		if (p == 0)
			continue;
		r->alive = false;
		r->status = p < 0 ? -1 : st;
		l->alive--;
		if (r->status == 0)
			continue;
		if (!l->stopping && !l->interrupted) {
			/* What it wrote before dying is in the pipes now. */
			stream_read(l, r, &r->s[0], true);
			stream_read(l, r, &r->s[1], true);
			r->timed_out =
				WIFEXITED(r->status) &&
				WEXITSTATUS(r->status) == MG_EXIT_WATCHDOG &&
				r->wd[0];
			if (r->timed_out && l->wd_until > 0)
				continue; /* one more for report_watchdog */
			if (r->timed_out && !l->failed) {
				report_failure(l, r, i);
				l->failed = true;
				l->wd_until = now_s() + WATCHDOG_SETTLE_S;
				continue;
			}
			if (l->wd_until > 0)
				report_watchdog(l);
			report_failure(l, r, i);
			l->failed = true;
			stop_all(l);
		}
	}
}

/* SIGINT/SIGTERM to the launcher: stop the ranks; a second one does not
 * wait for the grace period. */
static void handle_interrupts(struct launcher *l)
{
	int count = sig_count;

	if (count == l->sigs_seen)
		return;
	l->sigs_seen = count;
	if (!l->interrupted) {
		l->interrupted = sig_last;
		l->stopped = l->alive;
	}
	if (l->stopping) {
		l->kill_at = 0;
	} else {
		stop_all(l);
		/* A rank stops on SIGTERM after its step, with a checkpoint
		 * (engine/signals.c): give it the time that takes. */
		if (l->grace < INTERRUPT_GRACE_S)
			l->kill_at = l->stop_at + INTERRUPT_GRACE_S;
	}
}

/* Run until every rank has been collected (or, after SIGKILL, until the
 * last bounded wait ran out). */
static void supervise(struct launcher *l, int sig_rfd)
{
	struct pollfd *pf = l->pf;

	for (;;) {
		double now, wake;
		int np = 1, timeout;

		handle_interrupts(l);
		reap(l);
		now = now_s();
		if (l->wd_until > 0 && !l->stopping &&
		    (now >= l->wd_until || l->alive == 0)) {
			report_watchdog(l);
			stop_all(l);
		}
		if (l->alive == 0)
			break;
		if (l->stopping && !l->killed && now >= l->kill_at) {
			for (int i = 0; i < l->n; i++)
				if (l->r[i].alive)
					fprintf(stderr,
						"mgrun: rank %d (pid %d) still "
						"running %.1f s after SIGTERM; "
						"sending SIGKILL\n",
						i, (int)l->r[i].pid,
						now - l->stop_at);
			signal_all(l, SIGKILL);
			l->killed = true;
			l->give_up = now + KILL_WAIT_S;
		}
		if (l->killed && now >= l->give_up) {
			for (int i = 0; i < l->n; i++)
				if (l->r[i].alive)
					fprintf(stderr,
						"mgrun: rank %d (pid %d) did "
						"not exit after SIGKILL; not "
						"waiting for it\n",
						i, (int)l->r[i].pid);
			l->failed = true;
			break;
		}
		/* Wake up at least every second to collect ranks even if a
		 * SIGCHLD went to a handler someone else installed. */
		wake = now + 1.0;
		if (l->stopping && !l->killed && l->kill_at < wake)
			wake = l->kill_at;
		if (l->killed && l->give_up < wake)
			wake = l->give_up;
		if (l->wd_until > 0 && !l->stopping && l->wd_until < wake)
			wake = l->wd_until;
		timeout = (int)((wake - now) * 1000.0) + 1;

		pf[0] = (struct pollfd){.fd = sig_rfd, .events = POLLIN};
		for (int i = 0; i < l->n; i++)
			for (int k = 0; k < 2; k++) {
				if (l->r[i].s[k].fd < 0)
					continue;
				pf[np] = (struct pollfd){.fd = l->r[i].s[k].fd,
							 .events = POLLIN};
				l->pr[np++] = &l->r[i];
			}
		if (poll(pf, (nfds_t)np, timeout) < 0) {
			if (errno != EINTR)
				usleep(100000); /* cannot happen; no spin */
			continue;
		}
		if (pf[0].revents) {
			char drain[64];
			while (read(sig_rfd, drain, sizeof drain) > 0)
				;
		}
		for (int j = 1; j < np; j++) {
			struct rank *r = l->pr[j];
			struct stream *s =
				r->s[0].fd == pf[j].fd ? &r->s[0] : &r->s[1];
			if (pf[j].revents)
				stream_read(l, r, s, false);
		}
	}
}

/* 127.0.0.1:0, listening: rank 0 inherits it for the rendezvous. */
static int open_listener(int backlog, int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return mg_error("rendezvous socket: %s", strerror(errno));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* A later rendezvous binds this port anew (see rendezvous.c). */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, backlog) ||
	    getsockname(fd, (struct sockaddr *)&a, &al)) {
		int e = errno;
		close(fd);
		return mg_error("rendezvous socket on 127.0.0.1: %s",
				strerror(e));
	}
	*port = ntohs(a.sin_port);
	fd = fd_above_stdio(fd);
	if (fd < 0)
		return mg_error("rendezvous socket: %s", strerror(errno));
	return fd;
}

/* One rank's output pipe: read end non-blocking in the launcher, both
 * ends close-on-exec (the child dup2()s the write end onto 1 or 2). */
static int open_pipe(int *rd, int *wr)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC))
		return -1;
	p[0] = fd_above_stdio(p[0]);
	p[1] = fd_above_stdio(p[1]);
	if (p[0] < 0 || p[1] < 0 || fcntl(p[0], F_SETFL, O_NONBLOCK)) {
		if (p[0] >= 0)
			close(p[0]);
		if (p[1] >= 0)
			close(p[1]);
		return -1;
	}
	*rd = p[0];
	*wr = p[1];
	return 0;
}

/* Start rank i (pipes, environment, fork/exec). */
static int start_rank(struct launcher *l, int i, const char *path,
		      int listen_fd, int port, struct child_spec *c)
{
	struct rank *r = &l->r[i];
	int out_w = -1, err_w = -1;
	size_t n_own = 0;
	sigset_t all;
	pid_t pid;
	int e;

	if (open_pipe(&r->s[0].fd, &out_w))
		return mg_error("rank %d: output pipe: %s", i, strerror(errno));
	if (open_pipe(&r->s[1].fd, &err_w)) {
		e = errno;
		close(out_w);
		return mg_error("rank %d: output pipe: %s", i, strerror(e));
	}
	c->path = path;
	c->argv = l->o->argv;
	c->envp = build_env(i, l->n, port, listen_fd, &n_own);
	c->out_w = out_w;
	c->err_w = err_w;
	c->listen_fd = i == 0 ? listen_fd : -1;
	if (!c->envp) {
		close(out_w);
		close(err_w);
		return mg_error("rank %d: out of memory", i);
	}
	/* No handler may run in the child before it has reset them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	pid = fork();
	if (pid == 0)
		child_exec(c);
	e = errno;
	pthread_sigmask(SIG_SETMASK, c->old_mask, NULL);
	close(out_w);
	close(err_w);
	free_env(c->envp, n_own);
	if (pid < 0)
		return mg_error("rank %d: fork: %s", i, strerror(e));
	r->pid = pid;
	r->alive = true;
	l->alive++;
	return 0;
}

/* Free what mg_launch allocated; rc passes through. */
static int launch_cleanup(struct launcher *l, char *path, int listen_fd, int rc)
{
	if (listen_fd >= 0)
		close(listen_fd);
	free(l->r);
	free(l->pf);
	free(l->pr);
	free(path);
	return rc;
}

int mg_launch(const struct mg_launch_opts *o)
{
	struct sigaction sa, old_act[3];
	struct child_spec c;
	struct launcher l;
	sigset_t old_mask;
	int sp[2] = {-1, -1};
	int listen_fd, port = 0, rc, i;
	char *path;

	if (!o || !o->argv || !o->argv[0] || o->nranks < 1 ||
	    o->nranks > LAUNCH_MAX_RANKS) {
		mg_error("launch: need a program and 1 to %d ranks",
			 LAUNCH_MAX_RANKS);
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		return 2;
	}
	path = resolve_program(o->argv[0]);
	if (!path) {
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		return 2;
	}
	memset(&l, 0, sizeof l);
	l.o = o;
	l.n = o->nranks;
	l.grace = o->grace_s > 0 ? o->grace_s : 5.0;
	l.r = calloc((size_t)l.n, sizeof *l.r);
	l.pf = calloc((size_t)(1 + 2 * l.n), sizeof *l.pf);
	l.pr = calloc((size_t)(1 + 2 * l.n), sizeof *l.pr);
	if (!l.r || !l.pf || !l.pr) {
		fprintf(stderr, "mgrun: launch: out of memory\n");
		return launch_cleanup(&l, path, -1, 1);
	}
	listen_fd = open_listener(l.n, &port);
	if (listen_fd < 0) {
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		return launch_cleanup(&l, path, -1, 1);
	}
	if (pipe2(sp, O_CLOEXEC | O_NONBLOCK)) {
		mg_error("launch: self-pipe: %s", strerror(errno));
		fprintf(stderr, "mgrun: %s\n", mg_last_error());
		return launch_cleanup(&l, path, listen_fd, 1);
	}
	for (i = 0; i < l.n; i++) {
		l.r[i].s[0].fd = l.r[i].s[1].fd = -1;
		l.r[i].s[0].out = 1;
		l.r[i].s[1].out = 2;
	}

	/* Handlers first, so that no SIGCHLD or Ctrl-C goes unseen. The
	 * handled signals are blocked while a handler runs. */
	fflush(NULL);
	sig_count = 0;
	sig_wfd = sp[1];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < 3; i++)
		sigaddset(&sa.sa_mask, handled_sigs[i]);
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	pthread_sigmask(SIG_SETMASK, NULL, &old_mask);
	for (i = 0; i < 3; i++)
		sigaction(handled_sigs[i], &sa, &old_act[i]);

	memset(&c, 0, sizeof c);
	c.launcher = getpid();
	c.old_act = old_act;
	c.old_mask = &old_mask;
	for (i = 0; i < l.n && !sig_count; i++) {
		if (start_rank(&l, i, path, listen_fd, port, &c)) {
			fprintf(stderr, "mgrun: cannot start %s\n",
				mg_last_error());
			l.failed = true;
			stop_all(&l);
			break;
		}
	}
	/* Only rank 0 keeps the listener: if it dies, peers are refused
	 * rather than left waiting in the backlog. */
	close(listen_fd);
	supervise(&l, sp[0]);
	/* Output still in the pipes (or, from a rank's own children that
	 * hold them open, what they wrote so far). */
	for (i = 0; i < l.n; i++)
		for (int k = 0; k < 2; k++) {
			struct stream *s = &l.r[i].s[k];
			stream_read(&l, &l.r[i], s, true);
			if (s->fd >= 0)
				stream_close(&l, &l.r[i], s);
		}

	for (i = 0; i < 3; i++)
		sigaction(handled_sigs[i], &old_act[i], NULL);
	sig_wfd = -1;
	close(sp[0]);
	close(sp[1]);

	if (l.interrupted)
		fprintf(stderr, "mgrun: interrupted; stopped %d rank%s\n",
			l.stopped, l.stopped == 1 ? "" : "s");
	if (l.failed && l.wd_until > 0)
		rc = MG_EXIT_WATCHDOG; /* scripts can tell a hang from a crash */
	else if (l.failed)
		rc = 1;
	else if (l.interrupted)
		rc = 128 + l.interrupted;
	else
		rc = 0;
	return launch_cleanup(&l, path, -1, rc);
}
