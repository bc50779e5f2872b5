/*
 * trainer_epochs.c - the epochs a run has done and the open epoch's sums
 * as checkpoint metadata, so that after --resume report.json still lists
 * every epoch (and its test metrics) and a resumed epoch's train loss
 * averages all of its steps, not only the last process's.
 *
 * One line per epoch done, "e EPOCH STEPS SAMPLES TOKENS SECONDS
 * HAS_TEST TRAIN_SUMS... TEST_SUMS...", then "o STEPS SAMPLES SECONDS
 * SUMS..." for the open epoch, "v STEP SAMPLES SUMS..." for each
 * run.eval_every evaluation and "s BEST_LOSS SINCE" for early stopping
 * (%.17g: the sums come back exactly).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trainer.h"

static void sums(FILE *f, const double *v)
{
	for (int i = 0; i < MG_METRIC_MAX; i++)
		fprintf(f, " %.17g", v[i]);
}

char *mg_epochs_text(const struct mg_trainer *t)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return NULL;
	for (int i = 0; i < t->nep; i++) {
		const struct mg_epoch_stats *e = &t->ep[i];
		fprintf(f, "e %lld %lld %lld %lld %.17g %d",
			(long long)e->epoch, (long long)e->steps,
			(long long)e->samples, (long long)e->tokens, e->seconds,
			e->has_test);
		sums(f, e->train_sums);
		sums(f, e->test_sums);
		fputc('\n', f);
	}
	fprintf(f, "o %lld %lld %.17g", (long long)t->ep_steps,
		(long long)t->ep_samples,
		t->ep_secs + (t->ep_steps ? mg_now() - t->ep_t0 : 0));
	sums(f, t->ep_m);
	fputc('\n', f);
	for (int i = 0; i < t->nevals; i++) {
		fprintf(f, "v %lld %lld", (long long)t->evals[i].step,
			(long long)t->evals[i].samples);
		sums(f, t->evals[i].sums);
		fputc('\n', f);
	}
	fprintf(f, "s %.17g %lld\n", t->best_eval_loss,
		(long long)t->evals_since_best);
	fclose(f);
	return text;
}

/* n numbers of line l after its tag into v; the rest of the line must
 * be empty. */
static bool numbers(const char *l, double *v, int n)
{
	const char *p = l + 1;
	for (int i = 0; i < n; i++) {
		char *end;
		v[i] = strtod(p, &end);
		if (end == p)
			return false;
		p = end;
	}
	return *p == '\n' || !*p;
}

static double ratio(const double *m, int num)
{
	return m[MG_METRIC_COUNT] > 0 ? m[num] / m[MG_METRIC_COUNT] : NAN;
}

int mg_epochs_parse(struct mg_trainer *t, const char *text, const char *path)
{
	enum { EH = 6, OH = 3 };
	double v[EH + 2 * MG_METRIC_MAX];
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		bool ok = false;
		if (l[0] == 'e' && numbers(l, v, EH + 2 * MG_METRIC_MAX) &&
		    v[0] >= 0 && v[0] * t->steps_per_epoch < t->start_step) {
			struct mg_epoch_stats e = {
				.epoch = (int64_t)v[0],
				.steps = (int64_t)v[1],
				.samples = (int64_t)v[2],
				.tokens = (int64_t)v[3],
				.seconds = v[4],
				.has_test = v[5] != 0,
			};
			memcpy(e.train_sums, v + EH, sizeof e.train_sums);
			memcpy(e.test_sums, v + EH + MG_METRIC_MAX,
			       sizeof e.test_sums);
			e.train_loss = ratio(e.train_sums, MG_METRIC_LOSS_SUM);
			e.train_acc = ratio(e.train_sums, MG_METRIC_CORRECT);
			e.test_loss = ratio(e.test_sums, MG_METRIC_LOSS_SUM);
			e.test_acc = ratio(e.test_sums, MG_METRIC_CORRECT);
			void *p = realloc(t->ep,
					  (size_t)(t->nep + 1) * sizeof *t->ep);
			if (!p)
				return mg_error("out of memory");
			t->ep = p;
			t->ep[t->nep++] = e;
			ok = true;
		} else if (l[0] == 'o' && numbers(l, v, OH + MG_METRIC_MAX) &&
			   v[0] >= 0 && v[1] >= 0) {
			t->ep_steps = (int64_t)v[0];
			t->ep_samples = t->ep_base_samples = (int64_t)v[1];
			t->ep_secs = v[2];
			memcpy(t->ep_m, v + OH, sizeof t->ep_m);
			memcpy(t->ep_base_m, v + OH, sizeof t->ep_base_m);
			ok = true;
		} else if (l[0] == 'v' && numbers(l, v, 2 + MG_METRIC_MAX) &&
			   v[0] >= 0 && v[0] < t->start_step && v[1] >= 0) {
			struct mg_eval_point e = {.step = (int64_t)v[0],
						  .samples = (int64_t)v[1]};
			memcpy(e.sums, v + 2, sizeof e.sums);
			void *p = realloc(t->evals, (size_t)(t->nevals + 1) *
							    sizeof *t->evals);
			if (!p)
				return mg_error("out of memory");
			t->evals = p;
			t->evals[t->nevals++] = e;
			ok = true;
		} else if (l[0] == 's' && numbers(l, v, 2) && v[1] >= 0) {
			t->best_eval_loss = v[0];
			t->evals_since_best = (int64_t)v[1];
			ok = true;
		}
		if (!ok)
			return mg_error(
				"%s: metadata epochs: line \"%.*s\" is "
				"not an epoch record",
				path, (int)(nl ? nl - l : (long)strlen(l)), l);
		l = nl ? nl + 1 : l + strlen(l);
	}
	return 0;
}
