/*
 * run_lock.c - one mgrun process at a time per run directory. Two runs
 * writing the same directory would interleave steps.csv rows and race on
 * the checkpoint's temporary file, so the run's rank 0 holds an
 * exclusive flock() on RUN_DIR/mgrun.lock for the whole run.
 *
 * flock, not a lock file's mere existence: the kernel drops the lock
 * when its holder dies, even of kill -9, so a stale lock can never keep
 * a run from resuming. The file records the holder's pid and host, for
 * the message a second process gets; a release empties it, so a pid
 * found in a file we could lock is one that ended without releasing (it
 * was killed) and we say we take over from it. The descriptor is
 * close-on-exec, so no child inherits the lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mg/log.h>

#include "engine/run_lock.h"

/* The holder the file names ("pid 123 on host h"), or "" when empty. */
static void read_holder(int fd, char *buf, size_t n)
{
	ssize_t got = pread(fd, buf, n - 1, 0);
	buf[got > 0 ? got : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
}

int mg_run_lock_take(struct mg_run_lock *l, const char *run_dir)
{
	char path[4200], holder[256], host[128] = "";
	l->held = false;
	l->fd = -1;
	snprintf(path, sizeof path, "%s/" MG_RUN_LOCK_FILE, run_dir);
	/* O_NONBLOCK, O_NOFOLLOW: a FIFO or a link planted here is refused,
	 * not waited on or followed. */
	int fd = open(path,
		      O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
		      0644);
	if (fd < 0)
		return mg_error("%s: cannot create the run directory's lock: "
				"%s",
				path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return mg_error("%s: not a regular file, cannot lock the run "
				"directory (remove it)",
				path);
	}
	int rc;
	while ((rc = flock(fd, LOCK_EX | LOCK_NB)) && errno == EINTR)
		;
	if (rc) {
		int e = errno;
		read_holder(fd, holder, sizeof holder);
		close(fd);
		if (e == EWOULDBLOCK)
			return mg_error("run directory %s is in use by mgrun "
					"%s; wait for it to end, or give "
					"this run another run.name or "
					"run.out_dir",
					run_dir,
					holder[0] ? holder
						  : "(a process that has not "
						    "written its pid yet)");
		return mg_error("%s: cannot lock: %s", path, strerror(e));
	}
	read_holder(fd, holder, sizeof holder);
	if (holder[0])
		mg_info("run directory %s: taking over the lock of mgrun %s, "
			"which ended without releasing it (killed?)",
			run_dir, holder);
	gethostname(host, sizeof host - 1);
	int n = snprintf(holder, sizeof holder, "pid %ld on host %s\n",
			 (long)getpid(), host[0] ? host : "?");
	if (ftruncate(fd, 0) || pwrite(fd, holder, (size_t)n, 0) != n) {
		/* The lock holds without the note; only the message a second
		 * process prints would lack the pid. */
		mg_warn("%s: cannot record this process in the lock: %s", path,
			strerror(errno));
	}
	l->fd = fd;
	l->held = true;
	return 0;
}

void mg_run_lock_release(struct mg_run_lock *l)
{
	if (!l->held)
		return;
	/* Empty first: a holder named in the file is one that died. */
	if (ftruncate(l->fd, 0)) {
		/* the next run then reports a take-over: harmless */
	}
	flock(l->fd, LOCK_UN);
	close(l->fd);
	l->held = false;
	l->fd = -1;
}
