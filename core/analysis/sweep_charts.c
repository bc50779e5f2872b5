/*
 * sweep_charts.c - the charts of a sweep, as SVG files in its folder:
 * time and speedup against the x axis (one line per series), per-step
 * phase bars, profile shares (when the points were profiled), device
 * memory over time (when the runs wrote memory.csv) and host/device
 * copy throughput over the profiling window (profile_memcpy.csv). The
 * seed paper's Figures 1-3 are the first three kinds; traffic.svg is
 * the ZeRO-Offload I/O study's "PCIe activity between host and GPU
 * memory over time".
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "analysis/svg.h"
#include "config/util.h"

#define W 760.0
#define TOP 62.0
#define BOTTOM 56.0
#define LEFT 84.0
#define MIB (1024.0 * 1024.0)
#define GREY "#9e9e9e"

/* The x axis of the line charts: the x axis's values, at positions by
 * value when they are numbers (log-spaced when they span 8x or more, as
 * batch sizes do), else evenly as categories. */
struct xaxis {
	int n;
	double *pos;
	const char *const *labels;
	struct mg_svg_scale scale;
	const char *title;
	bool numeric;
};

static void make_xaxis(const struct mg_sweep_axis *ax, struct xaxis *xa)
{
	xa->n = ax->nvalues;
	xa->pos = mgc_calloc((size_t)ax->nvalues, sizeof *xa->pos);
	xa->labels = (const char *const *)ax->values;
	xa->title = ax->label;
	xa->numeric = ax->numeric;
	double lo = INFINITY, hi = -INFINITY;
	for (int i = 0; i < xa->n; i++) {
		xa->pos[i] = ax->numeric ? strtod(ax->values[i], NULL) : i;
		lo = fmin(lo, xa->pos[i]);
		hi = fmax(hi, xa->pos[i]);
	}
	memset(&xa->scale, 0, sizeof xa->scale);
	if (!ax->numeric || xa->n == 1) {
		xa->scale.lo = lo - 0.5;
		xa->scale.hi = hi + 0.5;
	} else if (lo > 0 && hi / lo >= 8) {
		xa->scale.log = true;
		xa->scale.lo = lo / 1.25;
		xa->scale.hi = hi * 1.25;
	} else {
		xa->scale.lo = lo - 0.08 * (hi - lo);
		xa->scale.hi = hi + 0.08 * (hi - lo);
	}
}

/* A line: one y per x value (NAN: no result), optional whiskers. */
struct line {
	char *name;
	double *y, *lo, *hi;
};

/* Group the points into lines: one per combination of the values of
 * every axis but x. line_of[pt] is its line, *first[l] a point on it. */
static int group_lines(const struct mg_sweep_plan *p, int *line_of)
{
	int n = 0;
	int *seen = mgc_calloc((size_t)p->npoints, sizeof *seen);
	for (int pt = 0; pt < p->npoints; pt++) {
		int vi[MG_SWEEP_MAX_AXES];
		mg_sweep_point_values(p, pt, vi);
		vi[p->x] = 0;
		int key = mg_sweep_point_index(p, vi);
		if (!seen[key])
			seen[key] = ++n;
		line_of[pt] = seen[key] - 1;
	}
	free(seen);
	return n;
}

/* The legend's name of a line: the values of the other axes. */
static char *line_name(const struct mg_sweep_plan *p, int pt)
{
	int vi[MG_SWEEP_MAX_AXES];
	char buf[512] = "";
	size_t len = 0;
	mg_sweep_point_values(p, pt, vi);
	for (int a = 0; a < p->naxes; a++)
		if (a != p->x)
			len += (size_t)snprintf(buf + len, sizeof buf - len,
						"%s%s", len ? ", " : "",
						p->axes[a].values[vi[a]]);
	return mgc_strdup(buf[0] ? buf : p->metric);
}

static char *legend_title(const struct mg_sweep_plan *p)
{
	char buf[256] = "";
	size_t len = 0;
	for (int a = 0; a < p->naxes; a++)
		if (a != p->x)
			len += (size_t)snprintf(buf + len, sizeof buf - len,
						"%s%s", len ? ", " : "",
						p->axes[a].label);
	return mgc_strdup(buf);
}

static void heading(struct mg_svg *s, const char *title, const char *sub)
{
	mg_svg_text(s, 16, 26, 15, "start", 0, true, "%s", title);
	if (sub && sub[0])
		mg_svg_text(s, 16, 44, 11, "start", 0, false, "%s", sub);
}

/* A legend at the right of the plot, with an optional bold title. */
static void right_legend(struct mg_svg *s, double x, double y,
			 const char *title, const char *const *names,
			 const char *const *colors, int n, bool lines)
{
	if (title && title[0]) {
		mg_svg_text(s, x, y, 11, "start", 0, true, "%s", title);
		y += 18;
	}
	mg_svg_legend(s, x, y, names, colors, n, lines);
}

static double legend_w(const char *title, const char *const *names, int n)
{
	double w = mg_svg_legend_width(names, n);
	double tw = title ? mg_svg_text_width(title, 11) + 8 : 0;
	return w > tw ? w : tw;
}

/*
 * One line chart: lines over the x axis, whiskers where lo/hi are given,
 * and an optional dashed reference line (ideal speedup).
 */
static int line_chart(const char *path, const char *title, const char *sub,
		      const char *ytitle, const struct xaxis *xa,
		      struct line *lines, int nl, const char *ltitle,
		      const double *ref, const char *ref_name)
{
	struct mg_svg s;
	const char **names = mgc_calloc((size_t)nl + 1, sizeof *names);
	for (int l = 0; l < nl; l++)
		names[l] = lines[l].name;
	if (ref)
		names[nl] = ref_name;
	int nleg = nl + (ref != NULL);
	double lw = legend_w(ltitle, names, nleg);
	double h = 440, legend_h = 18.0 * (nleg + 1) + TOP + 20;
	if (legend_h > h)
		h = legend_h;
	if (mg_svg_begin(&s, path, W, h)) {
		free(names);
		return -1;
	}
	heading(&s, title, sub);
	double ymax = 0;
	for (int l = 0; l < nl; l++)
		for (int i = 0; i < xa->n; i++) {
			double hi = lines[l].hi ? lines[l].hi[i] : NAN;
			ymax = fmax(ymax, isnan(hi) ? lines[l].y[i] : hi);
		}
	for (int i = 0; ref && i < xa->n; i++)
		ymax = fmax(ymax, ref[i]);
	struct mg_svg_plot pl = {.x = LEFT,
				 .y = TOP,
				 .w = W - LEFT - lw - 36,
				 .h = h - TOP - BOTTOM};
	pl.xs = xa->scale;
	mg_svg_nice_scale(0, ymax > 0 ? ymax * 1.04 : 1, 6, &pl.ys);
	pl.ys.lo = 0;
	mg_svg_axes(&s, &pl, xa->title, ytitle, xa->pos, xa->labels, xa->n);
	if (ref) {
		double px[256], py[256];
		int k = 0;
		for (int i = 0; i < xa->n && k < 256; i++, k++) {
			px[k] = mg_svg_px(&pl, xa->pos[i]);
			py[k] = mg_svg_py(&pl, ref[i]);
		}
		mg_svg_polyline(&s, px, py, k, GREY, 1.5, "5,4");
	}
	for (int l = 0; l < nl; l++) {
		const char *c = mg_svg_color(l);
		double *px = mgc_calloc((size_t)xa->n, sizeof *px);
		double *py = mgc_calloc((size_t)xa->n, sizeof *py);
		int k = 0;
		for (int i = 0; i <= xa->n; i++) {
			double y = i < xa->n ? lines[l].y[i] : NAN;
			if (!isnan(y)) { /* a gap (failed point) cuts the line */
				px[k] = mg_svg_px(&pl, xa->pos[i]);
				py[k++] = mg_svg_py(&pl, y);
				continue;
			}
			mg_svg_polyline(&s, px, py, k, c, 2.2, mg_svg_dash(l));
			k = 0;
		}
		for (int i = 0; i < xa->n; i++) {
			double y = lines[l].y[i],
			       x = mg_svg_px(&pl, xa->pos[i]);
			if (isnan(y))
				continue;
			if (lines[l].lo && lines[l].hi[i] > lines[l].lo[i]) {
				double y0 = mg_svg_py(&pl, lines[l].lo[i]);
				double y1 = mg_svg_py(&pl, lines[l].hi[i]);
				mg_svg_line(&s, x, y0, x, y1, c, 1.2, NULL);
				mg_svg_line(&s, x - 4, y0, x + 4, y0, c, 1.2,
					    NULL);
				mg_svg_line(&s, x - 4, y1, x + 4, y1, c, 1.2,
					    NULL);
			}
			mg_svg_dot(&s, x, mg_svg_py(&pl, y), 3.5, c);
		}
		free(px);
		free(py);
	}
	const char **colors = mgc_calloc((size_t)nleg, sizeof *colors);
	for (int l = 0; l < nleg; l++)
		colors[l] = l < nl ? mg_svg_color(l) : GREY;
	right_legend(&s, W - lw - 16, TOP + 10, ltitle, names, colors, nleg,
		     true);
	free(colors);
	free(names);
	return mg_svg_end(&s, path);
}

static void lines_free(struct line *lines, int nl)
{
	for (int l = 0; l < nl; l++) {
		free(lines[l].name);
		free(lines[l].y);
		free(lines[l].lo);
		free(lines[l].hi);
	}
	free(lines);
}

/* time_vs_<x>.svg and speedup_vs_<x>.svg. */
static int time_charts(const struct mg_sweep *sw, FILE *log)
{
	const struct mg_sweep_plan *p = sw->plan;
	const struct mg_sweep_axis *ax = &p->axes[p->x];
	int any = 0;
	for (int pt = 0; pt < p->npoints; pt++)
		any += sw->pts[pt].nok;
	if (!any)
		return 0; /* nothing finished: no chart */
	int *line_of = mgc_calloc((size_t)p->npoints, sizeof *line_of);
	int nl = group_lines(p, line_of), rc = 0;
	struct line *t = mgc_calloc((size_t)nl, sizeof *t);
	struct line *sp = mgc_calloc((size_t)nl, sizeof *sp);
	for (int l = 0; l < nl; l++) {
		t[l].y = mgc_calloc((size_t)ax->nvalues, sizeof(double));
		t[l].lo = mgc_calloc((size_t)ax->nvalues, sizeof(double));
		t[l].hi = mgc_calloc((size_t)ax->nvalues, sizeof(double));
		sp[l].y = mgc_calloc((size_t)ax->nvalues, sizeof(double));
	}
	for (int pt = 0; pt < p->npoints; pt++) {
		int vi[MG_SWEEP_MAX_AXES], l = line_of[pt];
		const struct mg_sweep_point *s = &sw->pts[pt];
		mg_sweep_point_values(p, pt, vi);
		if (vi[p->x] == 0) {
			t[l].name = line_name(p, pt);
			sp[l].name = line_name(p, pt);
		}
		t[l].y[vi[p->x]] = s->nok ? s->t_med : NAN;
		t[l].lo[vi[p->x]] = s->nok ? s->t_min : NAN;
		t[l].hi[vi[p->x]] = s->nok ? s->t_max : NAN;
	}
	for (int l = 0; l < nl; l++)
		for (int i = 0; i < ax->nvalues; i++)
			sp[l].y[i] = 100 * t[l].y[0] / t[l].y[i];
	struct xaxis xa;
	make_xaxis(ax, &xa);
	char path[4400], title[512], sub[512], yt[128];
	char *lt = legend_title(p), file_label[128];
	snprintf(file_label, sizeof file_label, "%s", ax->label);
	for (char *c = file_label; *c; c++)
		if (strchr("/\\ ", *c))
			*c = '_';
	const char *what = !strcmp(p->metric, "wall_s")
				   ? "wall time (whole run)"
				   : "training time (steps only)";
	snprintf(title, sizeof title, "%s", p->title[0] ? p->title : what);
	snprintf(sub, sizeof sub, "%s by %s; %s", p->metric, ax->label,
		 p->repeats > 1 ? "median of the repeats, whiskers min\u2013max"
				: "one run per point");
	snprintf(yt, sizeof yt, "%s [s]", p->metric);
	snprintf(path, sizeof path, "%s/time_vs_%s.svg", sw->dir, file_label);
	if (line_chart(path, title, sub, yt, &xa, t, nl, lt, NULL, NULL))
		rc = -1;
	else
		fprintf(log, "  %s\n", path);

	/* Speedup over the first x value; ideal: proportional to x. */
	double *ideal = NULL;
	if (ax->numeric && xa.pos[0] > 0) {
		ideal = mgc_calloc((size_t)ax->nvalues, sizeof *ideal);
		for (int i = 0; i < ax->nvalues; i++)
			ideal[i] = 100 * xa.pos[i] / xa.pos[0];
	}
	snprintf(title, sizeof title, "Speedup over %s = %s", ax->label,
		 ax->values[0]);
	snprintf(sub, sizeof sub,
		 "%s at %s = %s divided by %s at each point, in percent "
		 "(100%% = as fast)",
		 p->metric, ax->label, ax->values[0], p->metric);
	snprintf(path, sizeof path, "%s/speedup_vs_%s.svg", sw->dir,
		 file_label);
	if (line_chart(path, title, sub, "speedup [%]", &xa, sp, nl, lt, ideal,
		       "ideal (\u221d x)"))
		rc = -1;
	else
		fprintf(log, "  %s\n", path);
	free(ideal);
	free(lt);
	free(xa.pos);
	lines_free(t, nl);
	lines_free(sp, nl);
	free(line_of);
	return rc;
}

/* Light fills get black text, dark ones white. */
static const char *ink_on(const char *fill)
{
	return !strcmp(fill, "#0072B2") || !strcmp(fill, "#D55E00") ||
			       !strcmp(fill, "#000000")
		       ? "white"
		       : "black";
}

/*
 * Horizontal stacked bars, one per row: seg[row][k] in units of the x
 * axis; percent: each row scaled to 100 and segments labelled with their
 * share when wide enough.
 */
static int bar_chart(const char *path, const char *title, const char *sub,
		     const char *xtitle, char **rows, int nrows,
		     const double *seg, const char *const *names,
		     const char *const *colors, int nseg, bool percent)
{
	struct mg_svg s;
	double label_w = 0, lw = legend_w(NULL, names, nseg);
	for (int r = 0; r < nrows; r++)
		label_w = fmax(label_w, mg_svg_text_width(rows[r], 11));
	label_w = fmin(label_w, 300);
	double h = TOP + BOTTOM + 24.0 * nrows + 10;
	h = fmax(h, TOP + 18.0 * nseg + 40);
	if (mg_svg_begin(&s, path, W + label_w - 60, h))
		return -1;
	heading(&s, title, sub);
	struct mg_svg_plot pl = {.x = label_w + 24,
				 .y = TOP,
				 .w = W - 60 - 24 - lw - 36,
				 .h = 24.0 * nrows + 10};
	double xmax = 0;
	for (int r = 0; r < nrows; r++) {
		double sum = 0;
		for (int k = 0; k < nseg; k++)
			sum += seg[r * nseg + k];
		xmax = fmax(xmax, sum);
	}
	if (percent) {
		pl.xs = (struct mg_svg_scale){0, 100, 20, false};
	} else {
		mg_svg_nice_scale(0, xmax > 0 ? xmax : 1, 6, &pl.xs);
		pl.xs.lo = 0;
	}
	pl.ys = (struct mg_svg_scale){0, 1, 0, false}; /* no y grid */
	mg_svg_axes(&s, &pl, xtitle, NULL, NULL, NULL, 0);
	for (int r = 0; r < nrows; r++) {
		double y = TOP + 8 + 24.0 * r, x = pl.x, sum = 0;
		for (int k = 0; k < nseg; k++)
			sum += seg[r * nseg + k];
		mg_svg_text(&s, pl.x - 8, y + 12, 11, "end", 0, false, "%s",
			    rows[r]);
		for (int k = 0; k < nseg && sum > 0; k++) {
			double v = seg[r * nseg + k];
			double w = percent ? pl.w * v / sum
					   : mg_svg_px(&pl, v) - pl.x;
			mg_svg_rect(&s, x, y, w, 16, colors[k], NULL);
			if (percent && w > 30) {
				s.ink = ink_on(colors[k]);
				mg_svg_text(&s, x + w / 2, y + 12, 10, "middle",
					    0, false, "%.0f%%", 100 * v / sum);
				s.ink = NULL;
			}
			x += w;
		}
		if (!percent && (sum > 0 || nseg == 1)) {
			char b[32];
			snprintf(b, sizeof b, "%.3g", sum);
			mg_svg_text(&s, x + 4, y + 12, 10, "start", 0, false,
				    "%s", b);
		}
	}
	right_legend(&s, pl.x + pl.w + 24, TOP + 10, NULL, names, colors, nseg,
		     false);
	return mg_svg_end(&s, path);
}

/* phases.svg: mean seconds per steady step of each phase, per point. */
static int phases_chart(const struct mg_sweep *sw, FILE *log)
{
	const struct mg_sweep_plan *p = sw->plan;
	static const char *const names[] = {
		"data",		  "h2d",       "forward",	 "backward",
		"comm (exposed)", "optimizer", "other (untimed)"};
	const char *colors[7];
	char **rows = mgc_calloc((size_t)p->npoints, sizeof *rows);
	double *seg = mgc_calloc((size_t)p->npoints * 7, sizeof *seg);
	int n = 0, rc = 0;
	for (int k = 0; k < 6; k++)
		colors[k] = mg_svg_color(k);
	colors[6] = "#cccccc";
	for (int pt = 0; pt < p->npoints; pt++) {
		const struct mg_sweep_point *s = &sw->pts[pt];
		char label[512];
		if (!s->nok)
			continue;
		mg_sweep_point_label(p, pt, -1, label, sizeof label);
		rows[n] = mgc_strdup(label);
		double sum = 0;
		for (int k = 0; k < MG_PH_COUNT; k++) {
			double v = isnan(s->phase[k]) ? 0 : s->phase[k];
			seg[n * 7 + k] = v;
			sum += v;
		}
		seg[n * 7 + 6] = s->step_mean > sum ? s->step_mean - sum : 0;
		n++;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/phases.svg", sw->dir);
	if (n) {
		rc = bar_chart(path, "Where a training step's time goes",
			       "mean seconds per step over the steady steps "
			       "(rank 0; median over repeats); other: the "
			       "step's untimed rest",
			       "seconds per step", rows, n, seg, names, colors,
			       7, false);
		if (!rc)
			fprintf(log, "  %s\n", path);
	}
	for (int r = 0; r < n; r++)
		free(rows[r]);
	free(rows);
	free(seg);
	return rc;
}

/* profile.svg: the chosen profile metrics' shares of their sum. */
static int profile_chart(const struct mg_sweep *sw, FILE *log)
{
	const struct mg_sweep_plan *p = sw->plan;
	int np = p->nprofile, n = 0, rc = 0;
	char **rows = mgc_calloc((size_t)p->npoints, sizeof *rows);
	double *seg = mgc_calloc((size_t)(p->npoints * np) + 1, sizeof *seg);
	const char **colors = mgc_calloc((size_t)np + 1, sizeof *colors);
	for (int k = 0; k < np; k++)
		colors[k] = mg_svg_color(k);
	for (int pt = 0; pt < p->npoints; pt++) {
		const struct mg_sweep_point *s = &sw->pts[pt];
		char label[512];
		if (!s->nok || !s->has_prof)
			continue;
		mg_sweep_point_label(p, pt, -1, label, sizeof label);
		rows[n] = mgc_strdup(label);
		for (int k = 0; k < np; k++)
			seg[n * np + k] = isnan(s->prof[k]) ? 0 : s->prof[k];
		n++;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/profile.svg", sw->dir);
	if (n) {
		rc = bar_chart(path, "Profiled time, in percent",
			       "each metric's seconds in the profiling window "
			       "(mean over ranks) as a share of the metrics' "
			       "sum",
			       "share [%]", rows, n, seg,
			       (const char *const *)p->profile_metrics, colors,
			       np, true);
		if (!rc)
			fprintf(log, "  %s\n", path);
	}
	for (int r = 0; r < n; r++)
		free(rows[r]);
	free(rows);
	free(seg);
	free(colors);
	return rc;
}

/* The first loaded repeat of a point that has memory.csv rows. */
static const struct mg_run_record *memory_run(const struct mg_sweep *sw, int pt)
{
	for (int r = 0; r < sw->plan->repeats; r++) {
		const struct mg_sweep_run *sr = MG_SWEEP_RUN(sw, pt, r);
		if (sr->loaded && sr->run.memory.nrows > 1 &&
		    mg_csv_col(&sr->run.memory, "t_s") >= 0 &&
		    mg_csv_col(&sr->run.memory, "total") >= 0)
			return &sr->run;
	}
	return NULL;
}

/* When a run ended on memory.csv's clock (which starts as the trainer
 * sets up, like wall_s): rows are written only when memory changes. */
static double run_end(const struct mg_run_record *r)
{
	return isnan(r->wall_s) ? 0 : r->wall_s;
}

/* memory.svg: device memory in use over time, one line per point. Long
 * files are thinned to one vertex per 1/600 of the time axis, at the
 * bucket's first time with its largest value, so peaks survive. */
static int memory_chart(const struct mg_sweep *sw, FILE *log)
{
	const struct mg_sweep_plan *p = sw->plan;
	double tmax = 0, ymax = 0;
	int nl = 0;
	for (int pt = 0; pt < p->npoints; pt++) {
		const struct mg_run_record *r = memory_run(sw, pt);
		if (!r)
			continue;
		const struct mg_csv *c = &r->memory;
		int ct = mg_csv_col(c, "t_s"), cy = mg_csv_col(c, "total");
		tmax = fmax(tmax, run_end(r));
		for (int i = 0; i < c->nrows; i++) {
			tmax = fmax(tmax, c->v[i * c->ncols + ct]);
			ymax = fmax(ymax, c->v[i * c->ncols + cy]);
		}
		nl++;
	}
	if (!nl)
		return 0;
	bool gib = ymax >= 4 * 1024 * MIB;
	double unit = gib ? 1024 * MIB : MIB;
	char path[4200], **names = mgc_calloc((size_t)nl, sizeof *names);
	snprintf(path, sizeof path, "%s/memory.svg", sw->dir);
	struct mg_svg s;
	double lw = 0;
	for (int pt = 0, l = 0; pt < p->npoints; pt++) {
		char label[512];
		if (!memory_run(sw, pt))
			continue;
		mg_sweep_point_label(p, pt, -1, label, sizeof label);
		names[l++] = mgc_strdup(label);
	}
	lw = legend_w(NULL, (const char *const *)names, nl);
	double h = fmax(440, TOP + 18.0 * nl + 40);
	int rc = mg_svg_begin(&s, path, W + 80, h);
	if (!rc) {
		heading(&s, "Device memory in use",
			"total of every category over the run (memory.csv of "
			"each point's first repeat, rank 0)");
		struct mg_svg_plot pl = {.x = LEFT,
					 .y = TOP,
					 .w = W + 80 - LEFT - lw - 36,
					 .h = h - TOP - BOTTOM};
		mg_svg_nice_scale(0, tmax > 0 ? tmax : 1, 7, &pl.xs);
		pl.xs.lo = 0;
		mg_svg_nice_scale(0, ymax > 0 ? ymax / unit * 1.04 : 1, 6,
				  &pl.ys);
		pl.ys.lo = 0;
		mg_svg_axes(&s, &pl, "seconds since the run started",
			    gib ? "GiB" : "MiB", NULL, NULL, 0);
		for (int pt = 0, l = 0; pt < p->npoints; pt++) {
			const struct mg_run_record *r = memory_run(sw, pt);
			if (!r)
				continue;
			const struct mg_csv *c = &r->memory;
			int ct = mg_csv_col(c, "t_s"),
			    cy = mg_csv_col(c, "total"), k = 0;
			/* a step function: a value holds until the next */
			double *px = mgc_calloc(2 * (size_t)c->nrows + 2,
						sizeof *px);
			double *py = mgc_calloc(2 * (size_t)c->nrows + 2,
						sizeof *py);
			double bucket = -1;
			px[k] = pl.x; /* nothing is allocated before */
			py[k++] = mg_svg_py(&pl, 0);
			for (int i = 0; i < c->nrows; i++) {
				double t = c->v[i * c->ncols + ct];
				double y = mg_svg_py(
					&pl, c->v[i * c->ncols + cy] / unit);
				double b =
					floor(t / (tmax > 0 ? tmax : 1) * 600);
				if (b == bucket && i < c->nrows - 1) {
					/* keep the bucket's largest */
					py[k - 1] = fmin(py[k - 1], y);
					continue;
				}
				bucket = b;
				px[k] = mg_svg_px(&pl, t); /* hold, then step */
				py[k] = py[k - 1];
				k++;
				px[k] = mg_svg_px(&pl, t);
				py[k++] = y;
			}
			/* the last value holds to the end of the run */
			double end = mg_svg_px(&pl, run_end(r));
			if (end > px[k - 1]) {
				px[k] = end;
				py[k] = py[k - 1];
				k++;
			}
			mg_svg_polyline(&s, px, py, k, mg_svg_color(l), 1.8,
					mg_svg_dash(l));
			free(px);
			free(py);
			l++;
		}
		right_legend(&s, pl.x + pl.w + 24, TOP + 10, NULL,
			     (const char *const *)names, NULL, nl, true);
		rc = mg_svg_end(&s, path);
	}
	if (!rc)
		fprintf(log, "  %s\n", path);
	for (int l = 0; l < nl; l++)
		free(names[l]);
	free(names);
	return rc;
}

/* ---- traffic.svg --------------------------------------------------- */

#define TRAFFIC_PANELS 12
#define TRAFFIC_BINS 200
#define TRAFFIC_MIN_BIN 50e-6 /* s */

/* The first loaded repeat of a point that has profile_memcpy.csv. */
static const struct mg_run_record *traffic_run(const struct mg_sweep *sw,
					       int pt, int *rep)
{
	for (int r = 0; r < sw->plan->repeats; r++) {
		const struct mg_sweep_run *sr = MG_SWEEP_RUN(sw, pt, r);
		if (sr->loaded && sr->run.has_copies) {
			*rep = r;
			return &sr->run;
		}
	}
	return NULL;
}

/* The smallest 1, 2 or 5 x 10^k not below x. */
static double nice_up(double x)
{
	double e = pow(10, floor(log10(x))), f = x / e * (1 - 1e-9);
	return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e;
}

/* Bytes in decimal units (the chart's GB/s are 10^9 bytes a second). */
static void bytes_text(double b, char *buf, size_t n)
{
	static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
	int u = 0;
	while (b >= 999.5 && u < 4) {
		b /= 1000;
		u++;
	}
	snprintf(buf, n, u ? "%.3g %s" : "%.0f %s", b, unit[u]);
}

/*
 * Throughput of one direction in GB/s per bin: bin i covers
 * [lo + i*bw, lo + (i+1)*bw); a copy's bytes are spread evenly over its
 * [t, t + duration] (all in t's bin when the duration is 0), so a bin's
 * bytes over its width is the mean throughput in it.
 */
static void bin_copies(const struct mg_run_record *r, enum mg_copy_kind kind,
		       double lo, double bw, int nb, double *gbs, double *total)
{
	memset(gbs, 0, (size_t)nb * sizeof *gbs);
	*total = 0;
	for (int i = 0; i < r->ncopies; i++) {
		const struct mg_copy *c = &r->copies[i];
		if (c->kind != kind)
			continue;
		*total += c->bytes;
		double a = (c->t - lo) / bw, b = (c->t + c->dur - lo) / bw;
		int k0 = (int)floor(a), k1 = (int)floor(b);
		if (c->dur <= 0 || k0 == k1) {
			int k = k0 < 0 ? 0 : k0 >= nb ? nb - 1 : k0;
			gbs[k] += c->bytes;
			continue;
		}
		double rate = c->bytes / (b - a); /* bytes per bin width */
		for (int k = k0 < 0 ? 0 : k0; k <= k1 && k < nb; k++) {
			double from = fmax(a, k), to = fmin(b, k + 1);
			if (to > from)
				gbs[k] += rate * (to - from);
		}
	}
	for (int k = 0; k < nb; k++)
		gbs[k] /= bw * 1e9;
}

/* One direction's bins as a step line in a panel; runs of equal bins
 * are one segment. */
static void step_line(struct mg_svg *s, const struct mg_svg_plot *pl,
		      const double *gbs, int nb, double lo_ms, double bw_ms,
		      const char *color, double width)
{
	double *px = mgc_calloc(2 * (size_t)nb + 2, sizeof *px);
	double *py = mgc_calloc(2 * (size_t)nb + 2, sizeof *py);
	int k = 0;
	for (int i = 0; i < nb; i++) {
		if (i && gbs[i] == gbs[i - 1])
			continue;
		double y = mg_svg_py(pl, gbs[i]);
		double x = mg_svg_px(pl, lo_ms + i * bw_ms);
		if (k) { /* the previous level, up to here */
			px[k] = x;
			py[k] = py[k - 1];
			k++;
		}
		px[k] = x;
		py[k++] = y;
	}
	px[k] = mg_svg_px(pl, lo_ms + nb * bw_ms);
	py[k] = py[k - 1];
	k++;
	mg_svg_polyline(s, px, py, k, color, width, NULL);
	free(px);
	free(py);
}

/*
 * traffic.svg: host-to-device and device-to-host copy throughput over
 * the profiling window, one panel per point (at most TRAFFIC_PANELS),
 * stacked over one shared time axis, with the same scales in every
 * panel so that their heights compare.
 */
static int traffic_chart(const struct mg_sweep *sw, FILE *log)
{
	const struct mg_sweep_plan *p = sw->plan;
	int pts[TRAFFIC_PANELS], reps[TRAFFIC_PANELS], n = 0, nall = 0;
	double lo = 0, hi = 0, end[TRAFFIC_PANELS];
	for (int pt = 0; pt < p->npoints; pt++) {
		int rep;
		const struct mg_run_record *r = traffic_run(sw, pt, &rep);
		if (!r)
			continue;
		if (nall++ >= TRAFFIC_PANELS)
			continue;
		/* its window: to the report's length, or the last copy */
		end[n] = isnan(r->window_s) ? -INFINITY : r->window_s;
		for (int i = 0; i < r->ncopies; i++) {
			lo = fmin(lo, r->copies[i].t);
			end[n] =
				fmax(end[n], r->copies[i].t + r->copies[i].dur);
		}
		hi = fmax(hi, end[n]);
		pts[n] = pt;
		reps[n++] = rep;
	}
	if (!n || !isfinite(hi - lo))
		return 0;
	if (!(hi > lo))
		hi = lo + 1e-3;
	double bw = nice_up(fmax((hi - lo) / TRAFFIC_BINS, TRAFFIC_MIN_BIN));
	int nb = (int)ceil((hi - lo) / bw - 1e-9);
	if (nb < 1)
		nb = 1;
	/* GB/s of panel i, direction d (h2d, d2h): nb bins */
	double *bins = mgc_calloc((size_t)n * 2 * (size_t)nb, sizeof *bins);
#define BINS(i, d) (bins + ((size_t)(i)*2 + (size_t)(d)) * (size_t)nb)
	double tot[TRAFFIC_PANELS][2], peak[TRAFFIC_PANELS][2], ymax = 0;
	static const enum mg_copy_kind dir[2] = {MG_COPY_H2D, MG_COPY_D2H};
	for (int i = 0; i < n; i++) {
		const struct mg_sweep_run *sr =
			MG_SWEEP_RUN(sw, pts[i], reps[i]);
		for (int d = 0; d < 2; d++) {
			double *b = BINS(i, d);
			bin_copies(&sr->run, dir[d], lo, bw, nb, b, &tot[i][d]);
			peak[i][d] = 0;
			for (int k = 0; k < nb; k++)
				peak[i][d] = fmax(peak[i][d], b[k]);
			ymax = fmax(ymax, peak[i][d]);
		}
	}

	static const char *const names[2] = {"host \u2192 device (h2d)",
					     "device \u2192 host (d2h)"};
	const char *colors[2] = {mg_svg_color(0), mg_svg_color(3)};
	const double width = W + 80, label_h = 20, ph = 92, gap = 16;
	const double top = TOP + 16;
	double lw = legend_w(NULL, names, 2);
	double h = top + n * (label_h + ph + gap) - gap + BOTTOM;
	char path[4200], sub[512], sub2[512], bwt[64];
	snprintf(path, sizeof path, "%s/traffic.svg", sw->dir);
	if (bw >= 1e-3)
		snprintf(bwt, sizeof bwt, "%g ms", bw * 1e3);
	else
		snprintf(bwt, sizeof bwt, "%g \u00b5s", bw * 1e6);
	snprintf(sub, sizeof sub,
		 "copy throughput over the profiling window (rank 0's "
		 "profile_memcpy.csv, each point's first repeat with one); "
		 "mean per %s bin",
		 bwt);
	if (nall > n)
		snprintf(sub2, sizeof sub2,
			 "the first %d of %d points with copies; same scales "
			 "in every panel; device-to-device copies not drawn",
			 n, nall);
	else
		snprintf(sub2, sizeof sub2,
			 "same scales in every panel; device-to-device "
			 "copies not drawn");
	struct mg_svg s;
	int rc = mg_svg_begin(&s, path, width, h);
	if (rc) {
		free(bins);
		return rc;
	}
	mg_svg_text(&s, 16, 26, 15, "start", 0, true,
		    "Host\u2013device traffic over time");
	mg_svg_text(&s, 16, 44, 11, "start", 0, false, "%s", sub);
	mg_svg_text(&s, 16, 59, 11, "start", 0, false, "%s", sub2);
	struct mg_svg_plot pl = {.x = LEFT, .w = width - LEFT - lw - 36};
	mg_svg_nice_scale(lo * 1e3, (lo + nb * bw) * 1e3, 8, &pl.xs);
	mg_svg_nice_scale(0, ymax > 0 ? ymax * 1.05 : 1, 5, &pl.ys);
	pl.ys.lo = 0;
	pl.xgrid = true;
	for (int i = 0; i < n; i++) {
		const struct mg_sweep_run *sr =
			MG_SWEEP_RUN(sw, pts[i], reps[i]);
		char label[512], id[512], b0[32], b1[32], note[800];
		double y0 = top + i * (label_h + ph + gap);
		mg_sweep_point_label(p, pts[i], -1, label, sizeof label);
		mg_sweep_point_id(p, pts[i], reps[i], id, sizeof id);
		bytes_text(tot[i][0], b0, sizeof b0);
		bytes_text(tot[i][1], b1, sizeof b1);
		snprintf(note, sizeof note,
			 "%s: copies=%d h2d_bytes=%.0f d2h_bytes=%.0f "
			 "h2d_peak_GBps=%.6g d2h_peak_GBps=%.6g window_s=%.9g "
			 "bin_s=%.9g",
			 id, sr->run.ncopies, tot[i][0], tot[i][1], peak[i][0],
			 peak[i][1], sr->run.window_s, bw);
		mg_svg_comment(&s, note);
		mg_svg_text(&s, LEFT, y0 + 13, 11, "start", 0, true, "%s",
			    label);
		mg_svg_text(&s, LEFT + mg_svg_text_width(label, 11) * 1.08 + 12,
			    y0 + 13, 11, "start", 0, false, "h2d %s, d2h %s",
			    b0, b1);
		pl.y = y0 + label_h;
		pl.h = ph;
		pl.no_xlabels = i < n - 1;
		mg_svg_axes(&s, &pl,
			    i == n - 1 ? "milliseconds since the window opened"
				       : NULL,
			    "GB/s", NULL, NULL, 0);
		/* the lines end with the point's own window */
		int own = isfinite(end[i])
				  ? (int)ceil((end[i] - lo) / bw - 1e-9)
				  : nb;
		own = own < 1 ? 1 : own > nb ? nb : own;
		/* h2d wider, under d2h: where they coincide both show */
		for (int d = 0; d < 2; d++)
			step_line(&s, &pl, BINS(i, d), own, lo * 1e3, bw * 1e3,
				  colors[d], d ? 1.3 : 2.4);
	}
	right_legend(&s, pl.x + pl.w + 24, top + label_h + 10, NULL, names,
		     colors, 2, true);
	rc = mg_svg_end(&s, path);
	if (!rc)
		fprintf(log, "  %s\n", path);
	free(bins);
	return rc;
#undef BINS
}

/* One horizontal bar per point (first repeat's label), nseg segments
 * from get(sw, pt, k); a point whose segments are all NAN is left out.
 * Nothing is written when no point has a value. */
static int point_bars(const struct mg_sweep *sw, FILE *log, const char *file,
		      const char *title, const char *sub, const char *xtitle,
		      const char *const *names, int nseg,
		      double (*get)(const struct mg_sweep *, int, int, void *),
		      void *arg)
{
	const struct mg_sweep_plan *p = sw->plan;
	char **rows = mgc_calloc((size_t)p->npoints + 1, sizeof *rows);
	double *seg = mgc_calloc((size_t)(p->npoints * nseg) + 1, sizeof *seg);
	const char **colors = mgc_calloc((size_t)nseg + 1, sizeof *colors);
	int n = 0, rc = 0;
	for (int k = 0; k < nseg; k++)
		colors[k] = mg_svg_color(k);
	for (int pt = 0; pt < p->npoints; pt++) {
		bool any = false;
		for (int k = 0; k < nseg; k++) {
			double v = sw->pts[pt].nok ? get(sw, pt, k, arg) : NAN;
			any = any || !isnan(v);
			seg[n * nseg + k] = isnan(v) ? 0 : v;
		}
		if (!any)
			continue;
		char label[512];
		mg_sweep_point_label(p, pt, -1, label, sizeof label);
		rows[n++] = mgc_strdup(label);
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", sw->dir, file);
	if (n) {
		rc = bar_chart(path, title, sub, xtitle, rows, n, seg,
			       nseg == 1 ? &xtitle : names, colors, nseg,
			       false);
		if (!rc)
			fprintf(log, "  %s\n", path);
	}
	for (int r = 0; r < n; r++)
		free(rows[r]);
	free(rows);
	free(seg);
	free(colors);
	return rc;
}

static double get_step(const struct mg_sweep *sw, int pt, int k, void *a)
{
	(void)k, (void)a;
	return sw->pts[pt].step_med;
}

static double get_tps(const struct mg_sweep *sw, int pt, int k, void *a)
{
	(void)k, (void)a;
	return sw->pts[pt].tps;
}

static double get_mem(const struct mg_sweep *sw, int pt, int k, void *a)
{
	(void)a;
	return sw->pts[pt].mem_cat[k] / (1024.0 * 1024.0);
}

static double get_xfer(const struct mg_sweep *sw, int pt, int k, void *a)
{
	(void)a;
	double v = k ? sw->pts[pt].d2h : sw->pts[pt].h2d;
	return v / 1e6;
}

static double get_tmet(const struct mg_sweep *sw, int pt, int k, void *a)
{
	(void)k;
	return sw->pts[pt].tmet[*(int *)a];
}

/*
 * The per-point charts of the report's numbers: step.svg (steady step
 * median), tokens_per_s.svg, memory_peak.svg (rank 0's peak per memory
 * category, stacked), transfers.svg (h2d and d2h bytes) and one
 * test_<metric>.svg per [sweep] test_metrics entry.
 */
static int point_charts(const struct mg_sweep *sw, FILE *log)
{
	const struct mg_sweep_plan *p = sw->plan;
	static const char *const one[] = {""};
	static const char *const xfer[] = {"host to device", "device to host"};
	int rc = 0;
	rc |= point_bars(sw, log, "step.svg", "Step time",
			 "median seconds of the steady steps (median over "
			 "repeats)",
			 "seconds per step", one, 1, get_step, NULL);
	rc |= point_bars(sw, log, "tokens_per_s.svg", "Tokens per second",
			 "tokens of the rows trained on (padding left out, "
			 "all ranks) per second of training steps",
			 "tokens/s", one, 1, get_tps, NULL);
	if (sw->nmem_cats)
		rc |= point_bars(sw, log, "memory_peak.svg",
				 "Peak device memory by category",
				 "rank 0's peak of each category in MiB "
				 "(largest over repeats); the peaks may fall "
				 "at different times, so the bar can exceed "
				 "the total's peak",
				 "MiB", (const char *const *)sw->mem_cats,
				 sw->nmem_cats, get_mem, NULL);
	rc |= point_bars(sw, log, "transfers.svg", "Host-device traffic",
			 "rank 0's bytes copied over the run, in MB (median "
			 "over repeats)",
			 "MB", xfer, 2, get_xfer, NULL);
	for (int i = 0; i < p->ntest; i++) {
		char file[300], title[300];
		snprintf(file, sizeof file, "test_");
		size_t len = strlen(file);
		for (const char *c = p->test_metrics[i];
		     *c && len + 5 < sizeof file; c++)
			file[len++] = isalnum((unsigned char)*c) ? *c : '_';
		snprintf(file + len, sizeof file - len, ".svg");
		snprintf(title, sizeof title, "Held-out %s",
			 p->test_metrics[i]);
		rc |= point_bars(sw, log, file, title,
				 "the model's declared test metric after the "
				 "last evaluation (median over repeats); "
				 "points without it are left out",
				 p->test_metrics[i], one, 1, get_tmet, &i);
	}
	return rc;
}

int mg_sweep_charts(const struct mg_sweep *sw, FILE *log)
{
	int rc = 0;
	rc |= time_charts(sw, log);
	rc |= phases_chart(sw, log);
	rc |= profile_chart(sw, log);
	rc |= memory_chart(sw, log);
	rc |= traffic_chart(sw, log);
	rc |= point_charts(sw, log);
	return rc ? -1 : 0;
}
