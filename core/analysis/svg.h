/*
 * svg.h - a minimal SVG writer for mgrun's charts: shapes and escaped
 * text, "nice" axis scales, a plot frame with ticks and grid, a legend,
 * and a colour-blind-safe palette (Okabe & Ito). Private to libmg.
 */
#ifndef MG_ANALYSIS_SVG_H
#define MG_ANALYSIS_SVG_H

#include <stdbool.h>
#include <stdio.h>

struct mg_svg {
	FILE *f;
	double w, h;
	const char *ink; /* colour of the next texts; NULL: black */
};

/* Create path with a white w x h canvas; -1 after mg_error(). */
int mg_svg_begin(struct mg_svg *s, const char *path, double w, double h);
/* Close the document; -1 after mg_error() when writing failed. */
int mg_svg_end(struct mg_svg *s, const char *path);

/* Colour i of the palette (cycles after 8), and a dash pattern that
 * changes every 8 so lines 0..23 stay distinguishable ("" = solid). */
const char *mg_svg_color(int i);
const char *mg_svg_dash(int i);
/* Estimated width of text at a font size (no font metrics at hand). */
double mg_svg_text_width(const char *text, double size);

/* anchor: "start", "middle" or "end"; rotate: degrees about (x, y). */
void mg_svg_text(struct mg_svg *s, double x, double y, double size,
		 const char *anchor, double rotate, bool bold, const char *fmt,
		 ...) __attribute__((format(printf, 8, 9)));
void mg_svg_line(struct mg_svg *s, double x1, double y1, double x2, double y2,
		 const char *color, double width, const char *dash);
void mg_svg_rect(struct mg_svg *s, double x, double y, double w, double h,
		 const char *fill, const char *stroke);
void mg_svg_polyline(struct mg_svg *s, const double *x, const double *y, int n,
		     const char *color, double width, const char *dash);
void mg_svg_dot(struct mg_svg *s, double x, double y, double r,
		const char *color);
/* An XML comment: the numbers behind a chart, for readers of the file. */
void mg_svg_comment(struct mg_svg *s, const char *text);

/* An axis: data range lo..hi, ticks every step from lo; log: positions
 * on a log scale (ticks are then given to mg_svg_axes explicitly). */
struct mg_svg_scale {
	double lo, hi, step;
	bool log;
};
/* Round [min, max] out to a "nice" range with about n ticks of step
 * 1, 2 or 5 x 10^k (Heckbert, Graphics Gems, 1990). */
void mg_svg_nice_scale(double min, double max, int n, struct mg_svg_scale *s);
/* Tick label text for v on scale s: as many decimals as the step needs. */
void mg_svg_tick_label(const struct mg_svg_scale *s, double v, char *buf,
		       size_t n);

/* A plot area (x, y: top left, in pixels) and its two scales;
 * xgrid: vertical grid lines at the x ticks too; no_xlabels: x ticks
 * without their labels (small multiples over one shared x axis). */
struct mg_svg_plot {
	double x, y, w, h;
	struct mg_svg_scale xs, ys;
	bool xgrid, no_xlabels;
};
double mg_svg_px(const struct mg_svg_plot *p, double v);
double mg_svg_py(const struct mg_svg_plot *p, double v);
/*
 * The frame: horizontal grid lines and y ticks from p->ys; x ticks from
 * p->xs, or at xv[0..nx) labelled xl[] when xv is given (categories or
 * the sweep's own values). Axis titles below and left.
 */
void mg_svg_axes(struct mg_svg *s, const struct mg_svg_plot *p,
		 const char *xtitle, const char *ytitle, const double *xv,
		 const char *const *xl, int nx);
/* Legend entries one a line from (x, y): a line sample (lines, with
 * mg_svg_dash(i)) or a filled box, then the name; colors NULL: the
 * palette. Returns the height used. */
double mg_svg_legend(struct mg_svg *s, double x, double y,
		     const char *const *names, const char *const *colors, int n,
		     bool lines);
/* Width a legend of these names needs. */
double mg_svg_legend_width(const char *const *names, int n);

#endif
