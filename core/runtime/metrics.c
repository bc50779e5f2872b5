/*
 * metrics.c - building a model's metric declarations (model.h): what the
 * sums a forward pass writes mean, and how the core shows them (the
 * progress line, the epoch lines, the summary and report.json).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

int mg_metric_declare(struct mg_metric_spec *s, const char *name, int num,
		      int den, enum mg_metric_show show, int lower_is_better)
{
	if (s->ndecl >= MG_METRIC_MAX || strlen(name) >= sizeof s->decl[0].name)
		return -1;
	struct mg_metric_decl *d = &s->decl[s->ndecl];
	memset(d, 0, sizeof *d);
	memcpy(d->name, name, strlen(name) + 1);
	d->num = num;
	d->den = den;
	d->show = show;
	d->lower_is_better = lower_is_better;
	return s->ndecl++;
}

void mg_metric_spec_classifier(struct mg_metric_spec *s)
{
	memset(s, 0, sizeof *s);
	s->nsums = MG_METRIC_N;
	mg_metric_declare(s, "loss", MG_METRIC_LOSS_SUM, MG_METRIC_COUNT,
			  MG_SHOW_PLAIN, 1);
	mg_metric_declare(s, "acc", MG_METRIC_CORRECT, MG_METRIC_COUNT,
			  MG_SHOW_PERCENT, 0);
}

double mg_metric_value(const struct mg_metric_decl *d, const double *sums)
{
	double v = d->den < 0 ? sums[d->num]
			      : (sums[d->den] > 0 ? sums[d->num] / sums[d->den]
						  : NAN);
	return d->show == MG_SHOW_EXP ? exp(v) : v;
}

const char *mg_metric_format(const struct mg_metric_spec *s, const double *sums,
			     char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = 0;
	for (int i = 0; i < s->ndecl && o < len; i++) {
		const struct mg_metric_decl *d = &s->decl[i];
		double v = mg_metric_value(d, sums);
		int k;
		if (d->show == MG_SHOW_PERCENT)
			k = snprintf(buf + o, len - o, "%s%s %.2f%%",
				     i ? " " : "", d->name, 100 * v);
		else if (d->show == MG_SHOW_EXP)
			k = snprintf(buf + o, len - o, "%s%s %.2f",
				     i ? " " : "", d->name, v);
		else
			k = snprintf(buf + o, len - o, "%s%s %.4f",
				     i ? " " : "", d->name, v);
		if (k < 0)
			break;
		o += (size_t)k;
	}
	return buf;
}
