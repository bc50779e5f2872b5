/*
 * sweep_table.c - a sweep's results: each point summarised over its
 * repeats (medians and spread), the efficiency columns of relative_to,
 * and the same table written as table.csv (for machines), table.md and
 * stdout (for people), plus sweep.json with every run's numbers.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mg/log.h>

#include "analysis/analysis.h"
#include "config/util.h"

#define MIB (1024.0 * 1024.0)

static const char *const state_names[MG_RUN_NSTATES] = {
	"not_run", "finished", "finished", "failed", "interrupted", "missing"};

static bool has_run(const struct mg_sweep_run *r)
{
	return r->loaded &&
	       (r->state == MG_RUN_FINISHED || r->state == MG_RUN_SKIPPED);
}

/* Median over a point's loaded repeats of one number of its runs. */
#define OVER_REPEATS(sw, pt, expr, out)                                        \
	do {                                                                   \
		double v_[1024];                                               \
		int n_ = 0;                                                    \
		for (int r_ = 0; r_ < (sw)->plan->repeats && n_ < 1024;        \
		     r_++) {                                                   \
			const struct mg_sweep_run *sr_ =                       \
				MG_SWEEP_RUN(sw, pt, r_);                      \
			const struct mg_run_record *run = &sr_->run;           \
			if (!has_run(sr_) || isnan(expr))                      \
				continue;                                      \
			v_[n_++] = (expr);                                     \
		}                                                              \
		(out) = mg_median(v_, n_);                                     \
	} while (0)

static double prof_seconds(const struct mg_run_record *r, const char *name)
{
	for (int i = 0; i < r->nprof; i++)
		if (!strcmp(r->prof[i].name, name))
			return r->prof[i].seconds;
	return NAN;
}

static double mem_of(const struct mg_run_record *r, const char *name)
{
	for (int i = 0; i < r->nmem; i++)
		if (!strcmp(r->mem[i].name, name))
			return r->mem[i].v;
	return NAN;
}

static double tmet_of(const struct mg_run_record *r, const char *name)
{
	for (int i = 0; i < r->ntmet; i++)
		if (!strcmp(r->tmet[i].name, name))
			return r->tmet[i].v;
	return NAN;
}

/* The memory categories of every loaded run, in first-seen order. */
static void collect_mem_cats(struct mg_sweep *sw)
{
	const struct mg_sweep_plan *p = sw->plan;
	for (int i = 0; i < p->npoints * p->repeats; i++) {
		const struct mg_sweep_run *sr = &sw->runs[i];
		for (int k = 0; has_run(sr) && k < sr->run.nmem; k++) {
			const char *n = sr->run.mem[k].name;
			bool seen =
				!strcmp(n, "total") || !strncmp(n, "host_", 5);
			for (int j = 0; j < sw->nmem_cats && !seen; j++)
				seen = !strcmp(sw->mem_cats[j], n);
			if (seen)
				continue;
			sw->mem_cats = mgc_realloc(
				sw->mem_cats, (size_t)(sw->nmem_cats + 1) *
						      sizeof *sw->mem_cats);
			sw->mem_cats[sw->nmem_cats++] = mgc_strdup(n);
		}
	}
}

void mg_sweep_summarise(struct mg_sweep *sw)
{
	const struct mg_sweep_plan *p = sw->plan;
	sw->pts = mgc_calloc((size_t)p->npoints, sizeof *sw->pts);
	collect_mem_cats(sw);
	for (int pt = 0; pt < p->npoints; pt++) {
		struct mg_sweep_point *s = &sw->pts[pt];
		double t[1024];
		s->t_min = s->t_max = s->mem_peak = NAN;
		for (int r = 0; r < p->repeats && s->nok < 1024; r++) {
			const struct mg_sweep_run *sr = MG_SWEEP_RUN(sw, pt, r);
			if (!has_run(sr))
				continue;
			double m = mg_run_metric(&sr->run, p->metric);
			t[s->nok++] = m;
			if (!(m >= s->t_min))
				s->t_min = m;
			if (!(m <= s->t_max))
				s->t_max = m;
			if (!(sr->run.mem_peak <= s->mem_peak))
				s->mem_peak = sr->run.mem_peak;
			s->has_prof = s->has_prof || sr->run.nprof > 0;
		}
		s->t_med = mg_median(t, s->nok);
		OVER_REPEATS(sw, pt, run->samples_per_s, s->sps);
		OVER_REPEATS(sw, pt, run->test_acc, s->acc);
		OVER_REPEATS(sw, pt, run->step_mean, s->step_mean);
		for (int i = 0; i < MG_PH_COUNT; i++)
			OVER_REPEATS(sw, pt, run->phase_step[i], s->phase[i]);
		OVER_REPEATS(sw, pt, run->step_median, s->step_med);
		OVER_REPEATS(sw, pt, run->tokens_per_s, s->tps);
		OVER_REPEATS(sw, pt, run->h2d_bytes, s->h2d);
		OVER_REPEATS(sw, pt, run->d2h_bytes, s->d2h);
		s->mem_cat = mgc_calloc((size_t)sw->nmem_cats + 1,
					sizeof *s->mem_cat);
		for (int k = 0; k < sw->nmem_cats; k++) {
			s->mem_cat[k] = NAN;
			for (int r = 0; r < p->repeats; r++) {
				const struct mg_sweep_run *sr =
					MG_SWEEP_RUN(sw, pt, r);
				double v = has_run(sr) ? mem_of(&sr->run,
								sw->mem_cats[k])
						       : NAN;
				if (!(v <= s->mem_cat[k]))
					s->mem_cat[k] = v;
			}
		}
		s->tmet = mgc_calloc((size_t)p->ntest + 1, sizeof *s->tmet);
		for (int i = 0; i < p->ntest; i++)
			OVER_REPEATS(sw, pt, tmet_of(run, p->test_metrics[i]),
				     s->tmet[i]);
		s->prof = mgc_calloc((size_t)p->nprofile + 1, sizeof *s->prof);
		for (int i = 0; i < p->nprofile; i++)
			OVER_REPEATS(sw, pt,
				     prof_seconds(run, p->profile_metrics[i]),
				     s->prof[i]);
	}
	/* Efficiency: time of the reference point (this one with the
	 * relative_to axis at its value) over this point's time. */
	for (int pt = 0; pt < p->npoints; pt++) {
		struct mg_sweep_point *s = &sw->pts[pt];
		s->eff = mgc_calloc((size_t)p->nrel + 1, sizeof *s->eff);
		for (int k = 0; k < p->nrel; k++) {
			int vi[MG_SWEEP_MAX_AXES];
			mg_sweep_point_values(p, pt, vi);
			vi[p->rel[k].axis] = p->rel[k].value;
			const struct mg_sweep_point *ref =
				&sw->pts[mg_sweep_point_index(p, vi)];
			s->eff[k] = ref->nok && s->nok && s->t_med > 0
					    ? 100 * ref->t_med / s->t_med
					    : NAN;
		}
	}
}

/* ---- one table, three renderings ----------------------------------- */

struct table {
	int ncols, nrows;
	char **head;  /* ncols */
	char **cells; /* nrows x ncols; "" when unknown */
	bool *left;   /* text column: left-aligned */
};

static void cell(struct table *t, int row, int col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void cell(struct table *t, int row, int col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char **c = &t->cells[(size_t)row * (size_t)t->ncols + (size_t)col];
	free(*c);
	*c = mgc_vasprintf(fmt, ap);
	va_end(ap);
}

static void num_cell(struct table *t, int row, int col, bool machine, double v,
		     const char *human_fmt)
{
	if (isnan(v))
		cell(t, row, col, "%s", machine ? "" : "-");
	else if (machine)
		cell(t, row, col, "%.9g", v);
	else
		cell(t, row, col, human_fmt, v);
}

/* Seconds with 3 significant digits, never in exponent form. */
static void sec_cell(struct table *t, int row, int col, bool machine, double v)
{
	const char *f = v >= 100    ? "%.0f"
			: v >= 10   ? "%.1f"
			: v >= 1    ? "%.2f"
			: v >= 0.1  ? "%.3f"
			: v >= 0.01 ? "%.4f"
				    : "%.5f";
	num_cell(t, row, col, machine, v, f);
}

static const char *point_status(const struct mg_sweep *sw, int pt, char *buf,
				size_t n)
{
	int counts[MG_RUN_NSTATES] = {0}, code = 0;
	const struct mg_sweep_run *failed = NULL;
	for (int r = 0; r < sw->plan->repeats; r++) {
		const struct mg_sweep_run *sr = MG_SWEEP_RUN(sw, pt, r);
		counts[sr->state]++;
		if (sr->state == MG_RUN_FAILED && sr->exit_code) {
			code = sr->exit_code; /* 0: finished, unreadable */
			failed = sr;
		}
	}
	char how[64];
	if (counts[MG_RUN_FAILED] && code == 0)
		snprintf(buf, n, "%d unreadable", counts[MG_RUN_FAILED]);
	else if (counts[MG_RUN_FAILED])
		snprintf(buf, n, "%d failed (%s)", counts[MG_RUN_FAILED],
			 mg_sweep_run_how(failed, how, sizeof how));
	else if (counts[MG_RUN_INTERRUPTED])
		snprintf(buf, n, "interrupted");
	else if (counts[MG_RUN_MISSING])
		snprintf(buf, n, "%d missing", counts[MG_RUN_MISSING]);
	else if (counts[MG_RUN_NOT_RUN])
		snprintf(buf, n, "%d not run", counts[MG_RUN_NOT_RUN]);
	else
		snprintf(buf, n, "ok");
	return buf;
}

static bool any_profile(const struct mg_sweep *sw)
{
	for (int pt = 0; pt < sw->plan->npoints; pt++)
		if (sw->pts[pt].has_prof)
			return true;
	return false;
}

/* The table: machine (CSV: full precision, keys, min and max apart) or
 * human (rounded, labels, "min–max"). */
static void build(const struct mg_sweep *sw, bool machine, struct table *t)
{
	const struct mg_sweep_plan *p = sw->plan;
	bool prof = any_profile(sw), spread = p->repeats > 1 || machine;
	bool tok = false;
	for (int pt = 0; pt < p->npoints; pt++)
		tok = tok || !isnan(sw->pts[pt].tps);
	int nc = p->naxes + 6 + (spread ? 1 + machine : 0) + p->nrel +
		 (machine ? MG_PH_COUNT : 0) + (prof ? p->nprofile : 0) + 1 +
		 tok + 2 + (machine ? sw->nmem_cats : 0) + p->ntest;
	t->ncols = nc;
	t->nrows = p->npoints;
	t->head = mgc_calloc((size_t)nc, sizeof *t->head);
	t->left = mgc_calloc((size_t)nc, sizeof *t->left);
	t->cells =
		mgc_calloc((size_t)nc * (size_t)p->npoints, sizeof *t->cells);
	int c = 0;
	for (int a = 0; a < p->naxes; a++) {
		t->left[c] = true;
		t->head[c++] =
			mgc_strdup(machine ? p->axes[a].key : p->axes[a].label);
	}
	int c_rep = c++, c_time = c++, c_min = -1, c_max = -1;
	t->head[c_rep] = mgc_strdup(machine ? "repeats_ok" : "runs");
	t->head[c_time] = mgc_asprintf(
		machine ? "%s_median_s" : "%s median [s]", p->metric);
	if (spread) {
		c_min = c++;
		t->head[c_min] =
			mgc_strdup(machine ? "time_min_s" : "spread [s]");
		if (machine) {
			c_max = c++;
			t->head[c_max] = mgc_strdup("time_max_s");
		}
	}
	int c_step = c++, c_sps = c++, c_tok = tok ? c++ : -1;
	int c_acc = c++, c_tm = c, c_eff, c_mem, c_cat, c_xfer, c_ph, c_prof,
	    c_st;
	t->head[c_step] = mgc_strdup(machine ? "step_median_s" : "step [s]");
	t->head[c_sps] = mgc_strdup(machine ? "samples_per_s" : "samples/s");
	if (tok)
		t->head[c_tok] =
			mgc_strdup(machine ? "tokens_per_s" : "tokens/s");
	t->head[c_acc] =
		mgc_strdup(machine ? "test_accuracy_pct" : "test acc [%]");
	for (int i = 0; i < p->ntest; i++)
		t->head[c++] = mgc_asprintf(machine ? "test_%s" : "test %s",
					    p->test_metrics[i]);
	c_eff = c;
	for (int k = 0; k < p->nrel; k++)
		t->head[c++] = mgc_asprintf(machine ? "efficiency_vs_%s_pct"
						    : "eff. vs %s [%%]",
					    p->rel[k].text);
	c_mem = c++;
	t->head[c_mem] = mgc_strdup(machine ? "peak_device_memory_bytes"
					    : "peak mem [MiB]");
	c_cat = c;
	for (int k = 0; machine && k < sw->nmem_cats; k++)
		t->head[c++] = mgc_asprintf("peak_%s_bytes", sw->mem_cats[k]);
	c_xfer = c;
	c += 2;
	t->head[c_xfer] = mgc_strdup(machine ? "h2d_bytes" : "h2d [MB]");
	t->head[c_xfer + 1] = mgc_strdup(machine ? "d2h_bytes" : "d2h [MB]");
	c_ph = c;
	for (int i = 0; machine && i < MG_PH_COUNT; i++)
		t->head[c++] = mgc_asprintf("%s_s_per_step", mg_phase_names[i]);
	c_prof = c;
	for (int i = 0; prof && i < p->nprofile; i++)
		t->head[c++] = mgc_asprintf(machine ? "profile_%s_s" : "%s [s]",
					    p->profile_metrics[i]);
	c_st = c++;
	t->left[c_st] = true;
	t->head[c_st] = mgc_strdup("status");

	for (int pt = 0; pt < p->npoints; pt++) {
		const struct mg_sweep_point *s = &sw->pts[pt];
		int vi[MG_SWEEP_MAX_AXES];
		char st[64];
		mg_sweep_point_values(p, pt, vi);
		for (int a = 0; a < p->naxes; a++)
			cell(t, pt, a, "%s", p->axes[a].values[vi[a]]);
		cell(t, pt, c_rep,
		     machine || s->nok == p->repeats ? "%d" : "%d/%d", s->nok,
		     p->repeats);
		sec_cell(t, pt, c_time, machine, s->t_med);
		if (machine) {
			num_cell(t, pt, c_min, true, s->t_min, "");
			num_cell(t, pt, c_max, true, s->t_max, "");
		} else if (spread && s->nok) {
			char lo[32], hi[32];
			snprintf(lo, sizeof lo,
				 s->t_min >= 10 ? "%.1f" : "%.3g", s->t_min);
			snprintf(hi, sizeof hi,
				 s->t_max >= 10 ? "%.1f" : "%.3g", s->t_max);
			cell(t, pt, c_min, "%s\u2013%s", lo, hi);
		} else if (spread) {
			cell(t, pt, c_min, "-");
		}
		sec_cell(t, pt, c_step, machine, s->step_med);
		num_cell(t, pt, c_sps, machine, s->sps,
			 s->sps >= 100 ? "%.0f" : "%.3g");
		if (tok)
			num_cell(t, pt, c_tok, machine, s->tps,
				 s->tps >= 100 ? "%.0f" : "%.3g");
		num_cell(t, pt, c_acc, machine, 100 * s->acc, "%.2f");
		for (int i = 0; i < p->ntest; i++)
			num_cell(t, pt, c_tm + i, machine, s->tmet[i], "%.4g");
		for (int k = 0; machine && k < sw->nmem_cats; k++)
			num_cell(t, pt, c_cat + k, true, s->mem_cat[k], "");
		num_cell(t, pt, c_xfer, machine,
			 machine ? s->h2d : s->h2d / 1e6, "%.3g");
		num_cell(t, pt, c_xfer + 1, machine,
			 machine ? s->d2h : s->d2h / 1e6, "%.3g");
		for (int k = 0; k < p->nrel; k++)
			num_cell(t, pt, c_eff + k, machine, s->eff[k], "%.0f");
		num_cell(t, pt, c_mem, machine,
			 machine ? s->mem_peak : s->mem_peak / MIB, "%.1f");
		for (int i = 0; machine && i < MG_PH_COUNT; i++)
			num_cell(t, pt, c_ph + i, true, s->phase[i], "");
		for (int i = 0; prof && i < p->nprofile; i++)
			sec_cell(t, pt, c_prof + i, machine, s->prof[i]);
		cell(t, pt, c_st, "%s", point_status(sw, pt, st, sizeof st));
	}
	for (int i = 0; i < t->ncols * t->nrows; i++)
		if (!t->cells[i])
			t->cells[i] = mgc_strdup("");
}

static void table_free(struct table *t)
{
	for (int i = 0; i < t->ncols; i++)
		free(t->head[i]);
	for (int i = 0; i < t->ncols * t->nrows; i++)
		free(t->cells[i]);
	free(t->head);
	free(t->cells);
	free(t->left);
}

#define CELL(t, r, c) ((t)->cells[(size_t)(r) * (size_t)(t)->ncols + (c)])

/* Display width: UTF-8 continuation bytes take no column. */
static int width(const char *s)
{
	int w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

static void pad(FILE *f, const char *s, int w, bool left)
{
	int n = w - width(s);
	if (!left)
		fprintf(f, "%*s", n > 0 ? n : 0, "");
	fputs(s, f);
	if (left)
		fprintf(f, "%*s", n > 0 ? n : 0, "");
}

static int col_width(const struct table *t, int c)
{
	int w = width(t->head[c]);
	for (int r = 0; r < t->nrows; r++)
		if (width(CELL(t, r, c)) > w)
			w = width(CELL(t, r, c));
	return w;
}

void mg_sweep_print_table(const struct mg_sweep *sw, FILE *f)
{
	struct table t;
	build(sw, false, &t);
	for (int c = 0; c < t.ncols; c++) {
		fputs(c ? "  " : "", f);
		pad(f, t.head[c], col_width(&t, c), t.left[c]);
	}
	fputc('\n', f);
	for (int r = 0; r < t.nrows; r++) {
		for (int c = 0; c < t.ncols; c++) {
			fputs(c ? "  " : "", f);
			pad(f, CELL(&t, r, c), col_width(&t, c), t.left[c]);
		}
		fputc('\n', f);
	}
	table_free(&t);
}

static FILE *open_out(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		mg_error("%s: %s", path, strerror(errno));
	return f;
}

static int close_out(FILE *f, const char *path)
{
	int bad = ferror(f);
	if (fclose(f) || bad)
		return mg_error("%s: write failed", path);
	return 0;
}

int mg_sweep_write_md(const struct mg_sweep *sw, const char *path)
{
	FILE *f = open_out(path);
	if (!f)
		return -1;
	const struct mg_sweep_plan *p = sw->plan;
	struct table t;
	build(sw, false, &t);
	fprintf(f, "# %s\n\n", p->title[0] ? p->title : sw->ini);
	fprintf(f,
		"%d points x %d repeat%s; time: %s (median over the "
		"repeats%s); efficiency: the reference point's time over "
		"this point's, in percent.\n\n",
		p->npoints, p->repeats, p->repeats == 1 ? "" : "s", p->metric,
		p->repeats > 1 ? ", spread min\u2013max" : "");
	for (int c = 0; c < t.ncols; c++)
		fprintf(f, "| %s ", t.head[c]);
	fputs("|\n", f);
	for (int c = 0; c < t.ncols; c++)
		fputs(t.left[c] ? "| --- " : "| ---: ", f);
	fputs("|\n", f);
	for (int r = 0; r < t.nrows; r++) {
		for (int c = 0; c < t.ncols; c++)
			fprintf(f, "| %s ", CELL(&t, r, c));
		fputs("|\n", f);
	}
	table_free(&t);
	return close_out(f, path);
}

/* A CSV field, quoted when it needs to be. */
static void csv_field(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int mg_sweep_write_csv(const struct mg_sweep *sw, const char *path)
{
	FILE *f = open_out(path);
	if (!f)
		return -1;
	struct table t;
	build(sw, true, &t);
	for (int c = 0; c < t.ncols; c++) {
		fputs(c ? "," : "", f);
		csv_field(f, t.head[c]);
	}
	fputc('\n', f);
	for (int r = 0; r < t.nrows; r++) {
		for (int c = 0; c < t.ncols; c++) {
			fputs(c ? "," : "", f);
			csv_field(f, CELL(&t, r, c));
		}
		fputc('\n', f);
	}
	table_free(&t);
	return close_out(f, path);
}

/* ---- sweep.json ---------------------------------------------------- */

static void add_num(cJSON *o, const char *key, double v)
{
	if (isfinite(v))
		cJSON_AddNumberToObject(o, key, v);
	else
		cJSON_AddNullToObject(o, key);
}

static cJSON *run_json(const struct mg_sweep_run *sr, int rep)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "repeat", rep + 1);
	cJSON_AddStringToObject(o, "dir", sr->dir);
	cJSON_AddStringToObject(o, "status", state_names[sr->state]);
	cJSON_AddBoolToObject(o, "skipped", sr->state == MG_RUN_SKIPPED);
	if (sr->state == MG_RUN_FAILED || sr->state == MG_RUN_INTERRUPTED) {
		cJSON_AddNumberToObject(o, "exit_code", sr->exit_code);
		if (sr->signal) {
			char how[64];
			cJSON_AddStringToObject(
				o, "ended",
				mg_sweep_run_how(sr, how, sizeof how));
		}
		cJSON_AddStringToObject(o, "last_line", sr->last);
	}
	if (sr->state == MG_RUN_MISSING) /* --replot */
		cJSON_AddStringToObject(o, "reason", sr->last);
	if (!has_run(sr))
		return o;
	const struct mg_run_record *r = &sr->run;
	add_num(o, "train_s", r->train_s);
	add_num(o, "wall_s", r->wall_s);
	add_num(o, "setup_s", r->setup_s);
	add_num(o, "samples_per_s", r->samples_per_s);
	add_num(o, "step_median_s", r->step_median);
	add_num(o, "test_accuracy", r->test_acc);
	add_num(o, "peak_device_memory_bytes", r->mem_peak);
	add_num(o, "tokens_per_s", r->tokens_per_s);
	add_num(o, "h2d_bytes", r->h2d_bytes);
	add_num(o, "d2h_bytes", r->d2h_bytes);
	cJSON *mem = cJSON_AddObjectToObject(o, "memory_peak_bytes");
	for (int i = 0; i < r->nmem; i++)
		add_num(mem, r->mem[i].name, r->mem[i].v);
	cJSON *tm = cJSON_AddObjectToObject(o, "test_metrics");
	for (int i = 0; i < r->ntmet; i++)
		add_num(tm, r->tmet[i].name, r->tmet[i].v);
	cJSON_AddNumberToObject(o, "world", r->world);
	return o;
}

static cJSON *summary_json(const struct mg_sweep *sw, int pt)
{
	const struct mg_sweep_plan *p = sw->plan;
	const struct mg_sweep_point *s = &sw->pts[pt];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "repeats_ok", s->nok);
	add_num(o, "time_median_s", s->t_med);
	add_num(o, "time_min_s", s->t_min);
	add_num(o, "time_max_s", s->t_max);
	add_num(o, "samples_per_s", s->sps);
	add_num(o, "test_accuracy", s->acc);
	add_num(o, "peak_device_memory_bytes", s->mem_peak);
	add_num(o, "step_median_s", s->step_med);
	add_num(o, "tokens_per_s", s->tps);
	add_num(o, "h2d_bytes", s->h2d);
	add_num(o, "d2h_bytes", s->d2h);
	cJSON *mem = cJSON_AddObjectToObject(o, "memory_peak_bytes");
	for (int k = 0; k < sw->nmem_cats; k++)
		add_num(mem, sw->mem_cats[k], s->mem_cat[k]);
	cJSON *tm = cJSON_AddObjectToObject(o, "test_metrics");
	for (int i = 0; i < p->ntest; i++)
		add_num(tm, p->test_metrics[i], s->tmet[i]);
	cJSON *e = cJSON_AddObjectToObject(o, "efficiency_pct");
	for (int k = 0; k < p->nrel; k++)
		add_num(e, p->rel[k].text, s->eff[k]);
	cJSON *ph = cJSON_AddObjectToObject(o, "phases_s_per_step");
	for (int i = 0; i < MG_PH_COUNT; i++)
		add_num(ph, mg_phase_names[i], s->phase[i]);
	add_num(ph, "step", s->step_mean);
	if (s->has_prof) {
		cJSON *pr = cJSON_AddObjectToObject(o, "profile_s");
		for (int i = 0; i < p->nprofile; i++)
			add_num(pr, p->profile_metrics[i], s->prof[i]);
	}
	return o;
}

int mg_sweep_write_json(const struct mg_sweep *sw, const char *path)
{
	const struct mg_sweep_plan *p = sw->plan;
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "schema", "mgrun-sweep-1");
	cJSON_AddStringToObject(root, "ini", sw->ini);
	cJSON_AddStringToObject(root, "title", p->title);
	cJSON_AddStringToObject(root, "dir", sw->dir);
	cJSON_AddStringToObject(root, "metric", p->metric);
	cJSON_AddNumberToObject(root, "repeats", p->repeats);
	cJSON_AddStringToObject(root, "x", p->axes[p->x].key);
	if (p->series >= 0)
		cJSON_AddStringToObject(root, "series", p->axes[p->series].key);
	else
		cJSON_AddNullToObject(root, "series");
	cJSON *axes = cJSON_AddArrayToObject(root, "axes");
	for (int a = 0; a < p->naxes; a++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "key", p->axes[a].key);
		cJSON_AddStringToObject(o, "label", p->axes[a].label);
		cJSON_AddStringToObject(o, "where", p->axes[a].where);
		cJSON_AddItemToObject(
			o, "values",
			cJSON_CreateStringArray(
				(const char *const *)p->axes[a].values,
				p->axes[a].nvalues));
		if (p->axes[a].groups) { /* what each value sets */
			cJSON *g = cJSON_AddObjectToObject(o, "sets");
			for (int v = 0; v < p->axes[a].nvalues; v++)
				cJSON_AddItemToObject(
					g, p->axes[a].values[v],
					cJSON_CreateStringArray(
						(const char *const *)p->axes[a]
							.groups[v]
							.sets,
						p->axes[a].groups[v].n));
		}
		cJSON_AddItemToArray(axes, o);
	}
	cJSON *rel = cJSON_AddArrayToObject(root, "relative_to");
	for (int k = 0; k < p->nrel; k++)
		cJSON_AddItemToArray(rel, cJSON_CreateString(p->rel[k].text));
	cJSON_AddItemToObject(
		root, "test_metrics",
		p->ntest ? cJSON_CreateStringArray(
				   (const char *const *)p->test_metrics,
				   p->ntest)
			 : cJSON_CreateArray());
	cJSON_AddItemToObject(
		root, "profile_metrics",
		cJSON_CreateStringArray((const char *const *)p->profile_metrics,
					p->nprofile));
	cJSON *pts = cJSON_AddArrayToObject(root, "points");
	for (int pt = 0; pt < p->npoints; pt++) {
		cJSON *o = cJSON_CreateObject();
		char id[512];
		int vi[MG_SWEEP_MAX_AXES];
		mg_sweep_point_id(p, pt, 0, id, sizeof id);
		*strrchr(id, '-') = 0; /* without "-r1" */
		cJSON_AddNumberToObject(o, "index", pt + 1);
		cJSON_AddStringToObject(o, "id", id);
		mg_sweep_point_values(p, pt, vi);
		cJSON *vals = cJSON_AddObjectToObject(o, "values");
		for (int a = 0; a < p->naxes; a++)
			cJSON_AddStringToObject(vals, p->axes[a].key,
						p->axes[a].values[vi[a]]);
		cJSON *runs = cJSON_AddArrayToObject(o, "runs");
		for (int r = 0; r < p->repeats; r++)
			cJSON_AddItemToArray(
				runs, run_json(MG_SWEEP_RUN(sw, pt, r), r));
		cJSON_AddItemToObject(o, "summary", summary_json(sw, pt));
		cJSON_AddItemToArray(pts, o);
	}
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	FILE *f = open_out(path);
	int rc = -1;
	if (f) {
		fputs(text, f);
		fputc('\n', f);
		rc = close_out(f, path);
	}
	free(text);
	return rc;
}
