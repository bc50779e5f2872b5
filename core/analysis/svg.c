/*
 * svg.c - a minimal SVG writer, enough for line and bar charts. Written
 * by hand rather than through a plotting library so that mgrun's charts
 * need nothing at run time and the output is plain, diffable text.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <mg/log.h>

#include "analysis/svg.h"

#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"

/* Okabe & Ito (2008), ordered so that the first colours differ most;
 * yellow, weak on white, comes late. */
static const char *const palette[] = {"#0072B2", "#E69F00", "#009E73",
				      "#D55E00", "#56B4E9", "#CC79A7",
				      "#000000", "#F0E442"};
static const char *const dashes[] = {"", "6,3", "2,3", "8,3,2,3"};

const char *mg_svg_color(int i)
{
	return palette[i % 8];
}

const char *mg_svg_dash(int i)
{
	return dashes[(i / 8) % 4];
}

int mg_svg_begin(struct mg_svg *s, const char *path, double w, double h)
{
	s->f = fopen(path, "w");
	s->ink = NULL;
	s->w = w;
	s->h = h;
	if (!s->f)
		return mg_error("%s: %s", path, strerror(errno));
	fprintf(s->f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
		"height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
		"font-family=\"%s\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		w, h, w, h, FONT);
	return 0;
}

int mg_svg_end(struct mg_svg *s, const char *path)
{
	fputs("</svg>\n", s->f);
	int bad = ferror(s->f);
	if (fclose(s->f) || bad)
		return mg_error("%s: write failed", path);
	s->f = NULL;
	return 0;
}

/* Advance widths in em of DejaVu Sans (rsvg's and most Linux browsers'
 * sans-serif), by character class; other fonts are narrower, so text
 * laid out with these does not overlap. */
double mg_svg_text_width(const char *text, double size)
{
	double w = 0;
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if ((*p & 0xc0) == 0x80)
			continue; /* UTF-8 continuation byte */
		if (strchr("ijl.,:;|!' ", *p))
			w += 0.32;
		else if (strchr("ft()[]-", *p))
			w += 0.39;
		else if (strchr("rsz_", *p))
			w += 0.52;
		else if (strchr("mwMW%", *p))
			w += 0.98;
		else if (strchr("=+<>~", *p) || (*p >= 'A' && *p <= 'Z'))
			w += 0.78;
		else
			w += 0.63; /* other lower case, digits */
	}
	return w * size;
}

static void escaped(FILE *f, const char *t)
{
	for (; *t; t++) {
		switch (*t) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			/* control characters are not allowed in XML 1.0 */
			fputc((unsigned char)*t < 0x20 ? ' ' : *t, f);
		}
	}
}

void mg_svg_text(struct mg_svg *s, double x, double y, double size,
		 const char *anchor, double rotate, bool bold, const char *fmt,
		 ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	fprintf(s->f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\"", x, y,
		size);
	if (strcmp(anchor, "start"))
		fprintf(s->f, " text-anchor=\"%s\"", anchor);
	if (rotate != 0)
		fprintf(s->f, " transform=\"rotate(%.0f %.1f %.1f)\"", rotate,
			x, y);
	if (bold)
		fputs(" font-weight=\"bold\"", s->f);
	if (s->ink)
		fprintf(s->f, " fill=\"%s\"", s->ink);
	fputc('>', s->f);
	escaped(s->f, buf);
	fputs("</text>\n", s->f);
}

static void stroke_attrs(FILE *f, const char *color, double width,
			 const char *dash)
{
	fprintf(f, " stroke=\"%s\" stroke-width=\"%.1f\"", color, width);
	if (dash && dash[0])
		fprintf(f, " stroke-dasharray=\"%s\"", dash);
}

void mg_svg_line(struct mg_svg *s, double x1, double y1, double x2, double y2,
		 const char *color, double width, const char *dash)
{
	fprintf(s->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"",
		x1, y1, x2, y2);
	stroke_attrs(s->f, color, width, dash);
	fputs("/>\n", s->f);
}

void mg_svg_rect(struct mg_svg *s, double x, double y, double w, double h,
		 const char *fill, const char *stroke)
{
	fprintf(s->f,
		"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
		"fill=\"%s\"",
		x, y, w > 0 ? w : 0, h > 0 ? h : 0, fill);
	if (stroke)
		fprintf(s->f, " stroke=\"%s\" stroke-width=\"1\"", stroke);
	fputs("/>\n", s->f);
}

void mg_svg_polyline(struct mg_svg *s, const double *x, const double *y, int n,
		     const char *color, double width, const char *dash)
{
	if (n < 2)
		return;
	fputs("<polyline fill=\"none\" stroke-linejoin=\"round\" points=\"",
	      s->f);
	for (int i = 0; i < n; i++)
		fprintf(s->f, "%s%.1f,%.1f", i ? " " : "", x[i], y[i]);
	fputc('"', s->f);
	stroke_attrs(s->f, color, width, dash);
	fputs("/>\n", s->f);
}

void mg_svg_dot(struct mg_svg *s, double x, double y, double r,
		const char *color)
{
	fprintf(s->f,
		"<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"/>\n", x,
		y, r, color);
}

void mg_svg_comment(struct mg_svg *s, const char *text)
{
	fputs("<!-- ", s->f);
	for (const char *p = text; *p; p++) /* "--" may not occur */
		fputc(*p == '-' && p[1] == '-' ? '=' : *p, s->f);
	fputs(" -->\n", s->f);
}

/* The "nice" number closest to x (round) or not below it: 1, 2, 5, 10
 * times a power of ten. */
static double nice_num(double x, bool round)
{
	double e = floor(log10(x)), f = x / pow(10, e), nf;
	if (round)
		nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
	else
		nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
	return nf * pow(10, e);
}

void mg_svg_nice_scale(double min, double max, int n, struct mg_svg_scale *s)
{
	memset(s, 0, sizeof *s);
	if (!(max > min)) { /* one value, or none: a range around it */
		double m = isfinite(max) ? fabs(max) : 0;
		min = isfinite(min) ? min - (m > 0 ? m * 0.5 : 0.5) : 0;
		max = min + (m > 0 ? m : 1);
	}
	double range = nice_num(max - min, false);
	s->step = nice_num(range / (n > 1 ? n - 1 : 1), true);
	s->lo = floor(min / s->step) * s->step;
	s->hi = ceil(max / s->step) * s->step;
}

void mg_svg_tick_label(const struct mg_svg_scale *s, double v, char *buf,
		       size_t n)
{
	if (s->log || s->step <= 0) {
		snprintf(buf, n, "%g", v);
		return;
	}
	int dec = (int)ceil(-log10(s->step) - 1e-9);
	if (dec < 0)
		dec = 0;
	if (fabs(v) < s->step * 1e-6)
		v = 0; /* no "-0.000" */
	snprintf(buf, n, "%.*f", dec, v);
}

static double scale_frac(const struct mg_svg_scale *s, double v)
{
	if (s->log)
		return (log(v) - log(s->lo)) / (log(s->hi) - log(s->lo));
	return (v - s->lo) / (s->hi - s->lo);
}

double mg_svg_px(const struct mg_svg_plot *p, double v)
{
	return p->x + p->w * scale_frac(&p->xs, v);
}

double mg_svg_py(const struct mg_svg_plot *p, double v)
{
	return p->y + p->h * (1 - scale_frac(&p->ys, v));
}

void mg_svg_axes(struct mg_svg *s, const struct mg_svg_plot *p,
		 const char *xtitle, const char *ytitle, const double *xv,
		 const char *const *xl, int nx)
{
	char b[64];
	const double bottom = p->y + p->h;
	double widest = 0;
	for (int i = 0; p->ys.step > 0; i++) {
		double v = p->ys.lo + i * p->ys.step;
		if (v > p->ys.hi + p->ys.step * 1e-6)
			break;
		double y = mg_svg_py(p, v);
		mg_svg_line(s, p->x, y, p->x + p->w, y, "#e0e0e0", 1, NULL);
		mg_svg_tick_label(&p->ys, v, b, sizeof b);
		mg_svg_text(s, p->x - 6, y + 4, 11, "end", 0, false, "%s", b);
		if (mg_svg_text_width(b, 11) > widest)
			widest = mg_svg_text_width(b, 11);
	}
	if (xv) {
		for (int i = 0; i < nx; i++) {
			double x = mg_svg_px(p, xv[i]);
			mg_svg_line(s, x, bottom, x, bottom + 4, "#333", 1,
				    NULL);
			mg_svg_text(s, x, bottom + 17, 11, "middle", 0, false,
				    "%s", xl[i]);
		}
	} else {
		for (int i = 0; p->xs.step > 0; i++) {
			double v = p->xs.lo + i * p->xs.step;
			if (v > p->xs.hi + p->xs.step * 1e-6)
				break;
			double x = mg_svg_px(p, v);
			if (p->xgrid)
				mg_svg_line(s, x, p->y, x, bottom, "#e0e0e0", 1,
					    NULL);
			mg_svg_line(s, x, bottom, x, bottom + 4, "#333", 1,
				    NULL);
			if (p->no_xlabels)
				continue;
			mg_svg_tick_label(&p->xs, v, b, sizeof b);
			mg_svg_text(s, x, bottom + 17, 11, "middle", 0, false,
				    "%s", b);
		}
	}
	mg_svg_line(s, p->x, p->y, p->x, bottom, "#333", 1, NULL);
	mg_svg_line(s, p->x, bottom, p->x + p->w, bottom, "#333", 1, NULL);
	if (xtitle)
		mg_svg_text(s, p->x + p->w / 2, bottom + 36, 12, "middle", 0,
			    false, "%s", xtitle);
	if (ytitle) {
		double x = p->x - widest - 18;
		mg_svg_text(s, x, p->y + p->h / 2, 12, "middle", -90, false,
			    "%s", ytitle);
	}
}

double mg_svg_legend_width(const char *const *names, int n)
{
	double w = 0;
	for (int i = 0; i < n; i++)
		if (mg_svg_text_width(names[i], 11) > w)
			w = mg_svg_text_width(names[i], 11);
	return w + 34;
}

double mg_svg_legend(struct mg_svg *s, double x, double y,
		     const char *const *names, const char *const *colors, int n,
		     bool lines)
{
	for (int i = 0; i < n; i++) {
		const char *c = colors ? colors[i] : mg_svg_color(i);
		double yy = y + 18 * i;
		if (lines) {
			mg_svg_line(s, x, yy - 4, x + 22, yy - 4, c, 2.5,
				    mg_svg_dash(i));
			mg_svg_dot(s, x + 11, yy - 4, 3, c);
		} else {
			mg_svg_rect(s, x + 4, yy - 11, 14, 12, c, NULL);
		}
		mg_svg_text(s, x + 28, yy, 11, "start", 0, false, "%s",
			    names[i]);
	}
	return 18.0 * n;
}
