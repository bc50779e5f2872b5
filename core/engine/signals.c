/*
 * signals.c - a training run stops cleanly on SIGINT (Ctrl-C) or SIGTERM
 * (a batch system's notice, the launcher passing one on): the handler
 * only records the signal, and the trainer, at the end of the step under
 * way, writes a checkpoint, steps.csv and report.json (status
 * "interrupted") and exits with 128 + the signal, as a shell reports a
 * process the signal killed. Waiting for the step is what keeps the
 * checkpoint consistent; a second signal is for when that takes too
 * long: the handler puts the default action back and raises the signal
 * again, so the process dies at once as it did before.
 *
 * Ranks of one job must all stop after the same step (one stopping early
 * would leave the others in a collective): the trainer agrees on the
 * signal across ranks each step (trainer.c, stop_agreed()).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/signals.h"

static const int stop_sigs[2] = {SIGINT, SIGTERM};
static struct sigaction old_act[2];
static int installed;

static void write_str(const char *s)
{
	if (write(2, s, strlen(s)) < 0) {
		/* nowhere left to say it */
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * A second signal of the other kind within DUP_S of the first is the
 * same request delivered twice, not a user insisting: Ctrl-C reaches
 * every process of the terminal's group with SIGINT, and the launcher
 * (or mpirun, srun) passes it on to the ranks as SIGTERM. Only a
 * repeated signal, or one that comes later, ends the process at once.
 */
#define DUP_S 2.0
static volatile sig_atomic_t got_sig;
static double got_at;

static void on_stop(int sig)
{
	int saved = errno;
	if (got_sig && sig != got_sig && now_s() - got_at < DUP_S)
		return;
	if (got_sig) {
		/* The second: die of it now (async-signal-safe calls only). */
		write_str("mgrun: second signal, exiting at once\n");
		signal(sig, SIG_DFL);
		raise(sig);
		errno = saved;
		return;
	}
	got_at = now_s();
	got_sig = sig;
	write_str(sig == SIGINT ? "\nmgrun: SIGINT: stopping after this step "
				  "(checkpoint, report); again to exit at "
				  "once\n"
				: "\nmgrun: SIGTERM: stopping after this step "
				  "(checkpoint, report); again to exit at "
				  "once\n");
	errno = saved;
}

void mg_stop_install(void)
{
	got_sig = 0;
	for (int i = 0; i < 2; i++) {
		struct sigaction sa;
		sigaction(stop_sigs[i], NULL, &old_act[i]);
		if (old_act[i].sa_handler == SIG_IGN)
			continue; /* nohup and friends: keep ignoring */
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_stop;
		sigemptyset(&sa.sa_mask); /* one handler at a time */
		sigaddset(&sa.sa_mask, SIGINT);
		sigaddset(&sa.sa_mask, SIGTERM);
		sa.sa_flags = SA_RESTART; /* reads and writes carry on */
		sigaction(stop_sigs[i], &sa, NULL);
	}
	installed = 1;
}

void mg_stop_restore(void)
{
	if (!installed)
		return;
	for (int i = 0; i < 2; i++)
		sigaction(stop_sigs[i], &old_act[i], NULL);
	installed = 0;
}

int mg_stop_signal(void)
{
	return got_sig;
}

const char *mg_stop_signal_name(int sig)
{
	static char buf[32];
	if (sig == SIGINT)
		return "SIGINT";
	if (sig == SIGTERM)
		return "SIGTERM";
	snprintf(buf, sizeof buf, "signal %d", sig);
	return buf;
}
