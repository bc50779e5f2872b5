/*
 * sweep_run.c - a sweep's points as processes: first every point's
 * configuration is validated (a bad value at the 12th point fails before
 * the first runs), then each point and repeat runs as a child mgrun, one
 * at a time (GPU runs must not overlap), its output relayed with the
 * point's id. The parent never touches a device.
 *
 * A child runs the same INI with the point's values as --set overrides,
 * its run directory under <sweep dir>/points, and --no-sweep so that it
 * does not sweep in turn. A point whose report.json already says
 * "finished" for the same effective configuration is not run again, so
 * an interrupted sweep continues where it stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mg/ctx.h>
#include <mg/log.h>

#include "analysis/analysis.h"
#include "config/util.h"
#include "engine/core_schema.h"
#include "engine/session.h"

#define GRACE_S 10.0 /* after SIGTERM, before SIGKILL */
#define DRAIN_S 1.0  /* reading what a finished child's pipes still hold */

/* argv for a point: the user's --set list, then the point's values. */
struct point_sets {
	const char **v;
	int n;
	char **own; /* the strings made here */
	int nown;
};

static void sets_make(struct point_sets *ps, const struct mg_sweep_plan *p,
		      int point, const char *const *sets, int nsets,
		      const char *out_dir, const char *name)
{
	int vi[MG_SWEEP_MAX_AXES], total = 0;
	mg_sweep_point_values(p, point, vi);
	for (int a = 0; a < p->naxes; a++)
		total += p->axes[a].groups
				 ? 1
				 : mg_sweep_axis_nsets(&p->axes[a], vi[a]);
	ps->v = mgc_calloc((size_t)(nsets + total + 2), sizeof *ps->v);
	ps->own = mgc_calloc((size_t)(total + 2), sizeof *ps->own);
	ps->n = ps->nown = 0;
	for (int i = 0; i < nsets; i++)
		ps->v[ps->n++] = sets[i];
	for (int a = 0; a < p->naxes; a++) {
		const struct mg_sweep_axis *ax = &p->axes[a];
		/* a group value: its section applied where it is written
		 * (mg_config_set "@"), so its paths are the INI folder's and
		 * its errors name their lines */
		if (ax->groups) {
			char *s = mgc_asprintf("@sweep.%s.%s", ax->key,
					       ax->values[vi[a]]);
			ps->v[ps->n++] = ps->own[ps->nown++] = s;
			continue;
		}
		for (int j = 0; j < mg_sweep_axis_nsets(ax, vi[a]); j++) {
			char *s = mg_sweep_axis_set(ax, vi[a], j);
			ps->v[ps->n++] = ps->own[ps->nown++] = s;
		}
	}
	if (out_dir) {
		char *s = mgc_asprintf("run.out_dir=%s", out_dir);
		ps->v[ps->n++] = ps->own[ps->nown++] = s;
		s = mgc_asprintf("run.name=%s", name);
		ps->v[ps->n++] = ps->own[ps->nown++] = s;
	}
}

static void sets_free(struct point_sets *ps)
{
	for (int i = 0; i < ps->nown; i++)
		free(ps->own[i]);
	free(ps->own);
	free(ps->v);
}

/*
 * mg_session_open() prints its diagnostics to stderr. To relocate them
 * at the sweep line that made the value, stderr is redirected to a
 * temporary file around the call; what was printed is returned.
 */
static int open_quiet(struct mg_session *s, const char *ini,
		      const struct point_sets *ps, const char *plugin_path,
		      char **text)
{
	*text = NULL;
	fflush(stderr);
	FILE *tmp = tmpfile();
	int saved = tmp ? dup(2) : -1;
	if (saved < 0 || dup2(fileno(tmp), 2) < 0) {
		if (tmp)
			fclose(tmp);
		if (saved >= 0)
			close(saved);
		return mg_error("cannot capture diagnostics: %s",
				strerror(errno));
	}
	int rc = mg_session_open(s, ini, ps->v, ps->n, plugin_path);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	long len = ftell(tmp);
	rewind(tmp);
	*text = calloc(1, len > 0 ? (size_t)len + 1 : 1);
	if (*text && len > 0 && fread(*text, 1, (size_t)len, tmp) == 0)
		(*text)[0] = 0;
	fclose(tmp);
	return rc;
}

/*
 * The problems of all points, each once and in first-seen order. One
 * that an axis caused is kept as (axis, message) with the values that
 * caused it, so "unknown key" is said once for all of an axis's values.
 */
struct problem {
	int axis; /* -1: not an axis's (a line of the file, a --set) */
	char *msg;
	bool *values; /* axis: which of its values cause it */
};

struct problems {
	struct problem *v;
	int n;
};

static void add_problem(struct problems *l, const struct mg_sweep_plan *p,
			int axis, int value, const char *msg)
{
	struct problem *q = NULL;
	for (int i = 0; i < l->n && !q; i++)
		if (l->v[i].axis == axis && !strcmp(l->v[i].msg, msg))
			q = &l->v[i];
	if (!q) {
		l->v = mgc_realloc(l->v, (size_t)(l->n + 1) * sizeof *l->v);
		q = &l->v[l->n++];
		q->axis = axis;
		q->msg = mgc_strdup(msg);
		q->values = axis < 0 ? NULL
				     : mgc_calloc((size_t)p->axes[axis].nvalues,
						  sizeof *q->values);
	}
	if (axis >= 0)
		q->values[value] = true;
}

/* Print "sweep.ini:9: [sweep] run.gpus = 0, 5: [run] gpus: ..." lines
 * and free them. */
static void print_problems(const struct mg_sweep_plan *p, struct problems *l)
{
	for (int i = 0; i < l->n; i++) {
		struct problem *q = &l->v[i];
		if (q->axis >= 0) {
			const struct mg_sweep_axis *ax = &p->axes[q->axis];
			fprintf(stderr, "%s: [sweep] %s =", ax->where, ax->key);
			for (int v = 0, k = 0; v < ax->nvalues; v++)
				if (q->values[v])
					fprintf(stderr, "%s %s", k++ ? "," : "",
						ax->values[v]);
			fprintf(stderr, ": %s\n", q->msg);
		} else {
			fprintf(stderr, "%s\n", q->msg);
		}
		free(q->msg);
		free(q->values);
	}
	free(l->v);
}

/* One captured diagnostic line: "--set run.gpus=0: [run] gpus: ..."
 * from one of the point's own values is that axis's problem (a group
 * value's lines are reported at their own file lines already). */
static void add_line(struct problems *l, const struct mg_sweep_plan *p,
		     const int *vi, const char *line)
{
	for (int a = 0; a < p->naxes; a++) {
		const struct mg_sweep_axis *ax = &p->axes[a];
		if (ax->groups)
			continue;
		/* "--set KEY=VALUE: message" */
		char *set = mg_sweep_axis_set(ax, vi[a], 0);
		size_t sl = strlen(set);
		bool mine = !strncmp(line, "--set ", 6) &&
			    !strncmp(line + 6, set, sl) &&
			    !strncmp(line + 6 + sl, ": ", 2);
		free(set);
		if (mine) {
			add_problem(l, p, a, vi[a], line + 8 + sl);
			return;
		}
	}
	add_problem(l, p, -1, 0, line);
}

/* The run directory name a session gets: run.name or the INI's stem. */
static char *run_name(const struct mg_session *s)
{
	const char *name = mg_opt_str(s->run, "name");
	if (name[0])
		return strdup(name);
	char *tmp = strdup(s->ini_path);
	char *stem = strdup(basename(tmp));
	char *dot = strrchr(stem, '.');
	if (dot && dot != stem)
		*dot = 0;
	free(tmp);
	return stem;
}

int mg_sweep_validate(const struct mg_sweep_plan *p, const char *ini,
		      const char *const *sets, int nsets,
		      const char *plugin_path, char **dir)
{
	struct problems errs = {0};
	int bad_points = 0;
	*dir = NULL;
	for (int pt = 0; pt < p->npoints; pt++) {
		struct point_sets ps;
		struct mg_session s;
		char *text;
		int vi[MG_SWEEP_MAX_AXES];
		mg_sweep_point_values(p, pt, vi);
		sets_make(&ps, p, pt, sets, nsets, NULL, NULL);
		int rc = open_quiet(&s, ini, &ps, plugin_path, &text);
		bool bad = rc != 0;
		if (rc == 0 && mg_opt_int(s.run, "gpus") > 1 &&
		    mg_opt_enum(s.run, "device") != MG_DEVICE_CUDA) {
			/* cli.c's launcher check, made here for every point */
			const struct mg_loc *l = mg_opts_where(s.run, "gpus");
			char *m, *at;
			if (l && l->set)
				at = mgc_asprintf("--set %s", l->set);
			else
				at = mgc_asprintf("%s:%d", l ? l->file : ini,
						  l ? l->line : 0);
			m = mgc_asprintf(
				"%s: [run] gpus: run.gpus = %lld needs "
				"run.device = cuda (CPU ranks run "
				"under mpirun, not in a sweep)",
				at, (long long)mg_opt_int(s.run, "gpus"));
			free(at);
			add_line(&errs, p, vi, m);
			free(m);
			bad = true;
		}
		if (rc == 0 && pt == 0) {
			char *name = run_name(&s);
			*dir = mgc_asprintf("%s/%s", mg_run_out_dir(s.run),
					    name);
			free(name);
		}
		if (rc < 0)
			add_problem(&errs, p, -1, 0, mg_last_error());
		/* (warnings of a valid point: its child says them again) */
		for (char *save = NULL, *l = strtok_r(text, "\n", &save);
		     rc && l; l = strtok_r(NULL, "\n", &save)) {
			if (!strncmp(l, "mgrun: ", 7) &&
			    strstr(l, "nothing run"))
				continue; /* the session's count; ours follows */
			add_line(&errs, p, vi, l);
		}
		bad_points += bad;
		free(text);
		mg_session_close(&s);
		sets_free(&ps);
	}
	print_problems(p, &errs);
	if (!bad_points)
		return 0;
	fprintf(stderr,
		"mgrun: sweep: %d of %d point%s not valid, nothing run\n",
		bad_points, p->npoints, p->npoints == 1 ? "" : "s");
	free(*dir);
	*dir = NULL;
	return 2;
}

/* ---- children ------------------------------------------------------ */

static volatile sig_atomic_t sig_wfd = -1, sig_got;

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;
	if (sig != SIGCHLD)
		sig_got = sig;
	if (sig_wfd >= 0 && write(sig_wfd, &c, 1) < 0) {
		/* full: a wake-up is pending anyway */
	}
	errno = saved;
}

struct relay {
	int fd;
	FILE *out;
	size_t len;
	char buf[8192];
};

static void emit(struct relay *r, const char *id, size_t start, size_t end,
		 char *last, size_t nlast)
{
	if (end <= start)
		return;
	fprintf(r->out, "[%s] %.*s\n", id, (int)(end - start), r->buf + start);
	snprintf(last, nlast, "%.*s", (int)(end - start), r->buf + start);
}

/* Print the complete lines in r's buffer with the point's id and keep
 * the last non-empty one; flush (end of stream) or a full buffer: the
 * rest too. */
static void relay_lines(struct relay *r, const char *id, char *last,
			size_t nlast, bool flush)
{
	size_t start = 0;
	for (size_t i = 0; i < r->len; i++) {
		if (r->buf[i] != '\n' && r->buf[i] != '\r')
			continue;
		emit(r, id, start, i, last, nlast);
		start = i + 1;
	}
	if (flush || r->len == sizeof r->buf) {
		emit(r, id, start, r->len, last, nlast);
		start = r->len;
	}
	memmove(r->buf, r->buf + start, r->len - start);
	r->len -= start;
	fflush(r->out);
}

static bool relay_read(struct relay *r, const char *id, char *last,
		       size_t nlast)
{
	ssize_t n = read(r->fd, r->buf + r->len, sizeof r->buf - r->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0) {
		relay_lines(r, id, last, nlast, true);
		close(r->fd);
		r->fd = -1;
		return false;
	}
	r->len += (size_t)n;
	relay_lines(r, id, last, nlast, false);
	return true;
}

/*
 * Run argv as a child in its own process group (so that stopping it
 * reaches its ranks too), relay its stdout and stderr line by line, and
 * return its exit code (128 + signal when killed). On SIGINT/SIGTERM:
 * SIGTERM to the child, SIGKILL to its group after GRACE_S.
 */
static int run_child(char *const *argv, const char *id, char *last,
		     size_t nlast, int selfpipe, int *sig)
{
	*sig = 0;
	int out[2], err[2];
	last[0] = 0;
	if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		snprintf(last, nlast, "pipe: %s", strerror(errno));
		return 127;
	}
	pid_t pid = fork();
	if (pid == 0) { /* async-signal-safe calls only until execv */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = SIG_DFL;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGCHLD, &sa, NULL);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	if (pid < 0) {
		close(out[0]);
		close(err[0]);
		snprintf(last, nlast, "fork: %s", strerror(errno));
		return 127;
	}
	setpgid(pid, pid); /* also here: no race with the first kill */
	struct relay r[2] = {{.fd = out[0], .out = stdout},
			     {.fd = err[0], .out = stderr}};
	int status = 0;
	bool exited = false, termed = false, killed = false;
	double kill_at = 0, drain_until = 0;
	while (r[0].fd >= 0 || r[1].fd >= 0) {
		struct pollfd pf[3] = {{selfpipe, POLLIN, 0},
				       {r[0].fd, POLLIN, 0},
				       {r[1].fd, POLLIN, 0}};
		int pr = poll(pf, 3, 200);
		if (pr > 0 && (pf[0].revents & POLLIN)) {
			char junk[64];
			while (read(selfpipe, junk, sizeof junk) > 0) {
			}
		}
		for (int i = 0; i < 2 && pr > 0; i++)
			if (pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR))
				relay_read(&r[i], id, last, nlast);
		if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
			exited = true;
			drain_until = mg_now() + DRAIN_S;
		}
		if (sig_got && !termed && !exited) {
			kill(pid, SIGTERM);
			termed = true;
			kill_at = mg_now() + GRACE_S;
		}
		if (termed && !killed && mg_now() > kill_at) {
			kill(-pid, SIGKILL);
			killed = true;
		}
		/* Ranks may hold the pipes after the child is gone. */
		if (exited && mg_now() > drain_until)
			break;
	}
	for (int i = 0; i < 2; i++)
		if (r[i].fd >= 0) {
			relay_lines(&r[i], id, last, nlast, true);
			close(r[i].fd);
		}
	if (!exited)
		waitpid(pid, &status, 0);
	if (sig_got)
		kill(-pid, SIGKILL); /* what is left of its group */
	if (WIFSIGNALED(status)) {
		*sig = WTERMSIG(status);
		return 128 + WTERMSIG(status);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The effective configuration a point's child will report, to tell a
 * finished point of this sweep from one of an older, different one. */
static char *point_config(const char *ini, const struct point_sets *ps,
			  const char *plugin_path)
{
	struct mg_session s;
	char *text, *buf = NULL;
	size_t len = 0;
	if (open_quiet(&s, ini, ps, plugin_path, &text) == 0) {
		FILE *f = open_memstream(&buf, &len);
		if (f) {
			mg_session_print(&s, f);
			fclose(f);
		}
	}
	free(text);
	mg_session_close(&s);
	return buf;
}

static char **child_argv(const char *ini, const char *plugin_path,
			 const struct point_sets *ps)
{
	char **av = mgc_calloc((size_t)(2 * ps->n + 8), sizeof *av);
	int n = 0;
	av[n++] = "mgrun";
	av[n++] = "-c";
	av[n++] = (char *)ini;
	if (plugin_path) {
		av[n++] = "--plugin-path";
		av[n++] = (char *)plugin_path;
	}
	av[n++] = "--no-sweep";
	for (int i = 0; i < ps->n; i++) {
		av[n++] = "--set";
		av[n++] = (char *)ps->v[i];
	}
	return av;
}

const char *mg_sweep_run_how(const struct mg_sweep_run *r, char *buf, size_t n)
{
	if (!r->signal) {
		snprintf(buf, n, "exit %d", r->exit_code);
		return buf;
	}
	/* "exit 139" hides a crash: name the signal (SIGSEGV), as a
	 * shell's "Segmentation fault" does */
	const char *abbrev = NULL;
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
	abbrev = sigabbrev_np(r->signal);
#endif
	if (abbrev)
		snprintf(buf, n, "killed by SIG%s", abbrev);
	else
		snprintf(buf, n, "killed by signal %d", r->signal);
	return buf;
}

/* Run (or skip) one point's repeat. Returns false when interrupted. */
static bool one_run(struct mg_sweep *sw, int pt, int rep, int nth,
		    const char *const *sets, int nsets, const char *plugin_path,
		    int selfpipe)
{
	const struct mg_sweep_plan *p = sw->plan;
	struct mg_sweep_run *run = MG_SWEEP_RUN(sw, pt, rep);
	char id[512], label[1024], points[4200];
	struct point_sets ps;
	mg_sweep_point_id(p, pt, rep, id, sizeof id);
	mg_sweep_point_label(p, pt, -1, label, sizeof label);
	snprintf(points, sizeof points, "%s/points", sw->dir);
	snprintf(run->dir, sizeof run->dir, "%s/%s", points, id);
	sets_make(&ps, p, pt, sets, nsets, points, id);

	char *want = point_config(sw->ini, &ps, plugin_path), *have = NULL;
	bool done = mg_run_finished(run->dir, &have);
	if (done && (!have || !want || !strcmp(have, want))) {
		printf("== [%s] finished earlier: skipped (%s)\n", id,
		       run->dir);
		run->state = MG_RUN_SKIPPED;
	} else {
		printf("== sweep run %d of %d: point %d/%d, repeat %d/%d: "
		       "%s%s\n",
		       nth, p->npoints * p->repeats, pt + 1, p->npoints,
		       rep + 1, p->repeats, label,
		       done ? " (its earlier report has another "
			      "configuration: running again)"
			    : "");
		fflush(stdout);
		char **av = child_argv(sw->ini, plugin_path, &ps);
		if (sig_got) { /* interrupted between two runs */
			run->state = MG_RUN_INTERRUPTED;
			free(av);
			free(want);
			free(have);
			sets_free(&ps);
			return false;
		}
		run->exit_code = run_child(av, id, run->last, sizeof run->last,
					   selfpipe, &run->signal);
		free(av);
		if (sig_got)
			run->state = MG_RUN_INTERRUPTED;
		else if (run->exit_code)
			run->state = MG_RUN_FAILED;
		else
			run->state = MG_RUN_FINISHED;
		char how[64];
		if (run->state == MG_RUN_FAILED)
			printf("== [%s] failed (%s): %s\n", id,
			       mg_sweep_run_how(run, how, sizeof how),
			       run->last);
	}
	fflush(stdout);
	free(want);
	free(have);
	sets_free(&ps);
	return run->state != MG_RUN_INTERRUPTED;
}

int mg_sweep_execute(struct mg_sweep *sw, const char *const *sets, int nsets,
		     const char *plugin_path)
{
	const struct mg_sweep_plan *p = sw->plan;
	static const int sigs[] = {SIGINT, SIGTERM, SIGCHLD};
	struct sigaction sa, old[3];
	int sp[2];
	if (pipe2(sp, O_CLOEXEC | O_NONBLOCK)) {
		fprintf(stderr, "mgrun: sweep: pipe: %s\n", strerror(errno));
		return 1;
	}
	sig_got = 0;
	sig_wfd = sp[1];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);
	/* Repeats round-robin: every point once, then again, so a slow
	 * drift of the machine (clocks, other load) spreads over all
	 * points instead of biasing the last ones. */
	int nth = 0, failed = 0;
	bool go = true;
	for (int rep = 0; rep < p->repeats && go; rep++)
		for (int pt = 0; pt < p->npoints && go; pt++) {
			go = one_run(sw, pt, rep, ++nth, sets, nsets,
				     plugin_path, sp[0]);
			failed += MG_SWEEP_RUN(sw, pt, rep)->state ==
				  MG_RUN_FAILED;
		}
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
	sig_wfd = -1;
	close(sp[0]);
	close(sp[1]);
	if (!go) {
		fprintf(stderr, "mgrun: sweep interrupted; run it again to "
				"continue (finished points are kept)\n");
		return 130;
	}
	return failed ? 1 : 0;
}
