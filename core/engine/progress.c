/*
 * progress.c - a progress line: rewritten in place on a terminal, plain
 * lines every run.log_every steps otherwise (logs, CI). It shows the
 * metrics the model declares and samples/s, or tokens/s for per-token
 * models.
 */
#include <stdio.h>
#include <unistd.h>

#include "engine/trainer.h"

void mg_progress_step(struct mg_trainer *t, int64_t step, const double *sums,
		      double lr, double rate)
{
	if (t->r.ctx.rank != 0)
		return;
	int64_t spe = t->steps_per_epoch;
	int64_t done = step + 1 - t->start_step;
	/* the loop's pace so far (evaluations and checkpoints included:
	 * they recur), without the setup (7B: a minute of it) */
	double elapsed = mg_now() - t->t_loop;
	double eta = done > 0 ? elapsed / (double)done *
					(double)(t->total_steps - step - 1)
			      : 0;
	bool tty = isatty(STDOUT_FILENO);
	int64_t every = mg_opt_int(t->r.s->run, "log_every");
	if (!tty && (step + 1) % every != 0 && step + 1 != t->total_steps)
		return;
	char m[256];
	mg_metric_format(&t->r.mspec, sums, m, sizeof m);
	printf("%sepoch %lld/%lld step %lld/%lld %s lr %.3g %.0f %s/s eta "
	       "%.0fs%s",
	       tty ? "\r\033[K" : "", (long long)(step / spe + 1),
	       (long long)((t->total_steps + spe - 1) / spe),
	       (long long)(step % spe + 1), (long long)spe, m, lr, rate,
	       t->r.mspec.per_token ? "tokens" : "samples", eta,
	       tty ? "" : "\n");
	fflush(stdout);
}

void mg_progress_end(struct mg_trainer *t)
{
	if (t->r.ctx.rank == 0 && isatty(STDOUT_FILENO)) {
		putchar('\n');
		fflush(stdout);
	}
}
