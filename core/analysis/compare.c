/*
 * compare.c - `mgrun compare RUN_A RUN_B`: two run directories side by
 * side (throughput, per-step phases, communication, memory, transfers,
 * accuracy, profile), each difference marked as within the runs' own
 * noise or not, so an A/B change is judged on evidence. The settings
 * that differ between the two effective configurations come first: what
 * the experiment changed (a strategy, a precision, `model.kernels`).
 *
 * Noise: a run's steady steps (see mg_run_steady) are its samples of
 * each per-step timing; the 95% percentile-bootstrap interval of
 * median(B) / median(A) (stats.c) decides. Bytes, memory and counts are
 * deterministic and compared exactly.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <mg/log.h>

#include "analysis/analysis.h"

enum kind {
	TIMED, /* per-step samples: bootstrap */
	EXACT, /* deterministic: equal or not */
	PLAIN, /* one number per run: no noise estimate */
};

enum unit { U_SEC, U_BYTES, U_COUNT, U_RATE, U_PCT, U_NUM };

struct row {
	const char *section;
	char name[64];
	double a, b;
	enum kind kind;
	enum unit unit;
	int verdict; /* TIMED: 1 differs, 0 within noise, -1 unknown */
	double lo, hi;
};

struct rows {
	struct row v[128];
	int n;
};

static struct row *add(struct rows *t, const char *section, const char *name,
		       double a, double b, enum kind k, enum unit u)
{
	if (t->n == (int)(sizeof t->v / sizeof *t->v))
		return &t->v[t->n - 1]; /* cannot happen: fixed row set */
	struct row *r = &t->v[t->n++];
	memset(r, 0, sizeof *r);
	r->section = section;
	snprintf(r->name, sizeof r->name, "%s", name);
	r->a = a;
	r->b = b;
	r->kind = k;
	r->unit = u;
	r->verdict = -1;
	r->lo = r->hi = NAN;
	return r;
}

/* A per-step timing: medians of the steady steps, and the verdict. */
static struct row *timed(struct rows *t, const char *section, const char *name,
			 const struct mg_run_record *a,
			 const struct mg_run_record *b, const char *cols)
{
	double *va, *vb;
	int na = mg_run_steady(a, cols, &va), nb = mg_run_steady(b, cols, &vb);
	struct row *r = add(t, section, name, mg_median(va, na),
			    mg_median(vb, nb), TIMED, U_SEC);
	r->verdict = mg_bootstrap_ratio(va, na, vb, nb, &r->lo, &r->hi);
	free(va);
	free(vb);
	return r;
}

static double mem_of(const struct mg_run_record *r, const char *name)
{
	for (int i = 0; i < r->nmem; i++)
		if (!strcmp(r->mem[i].name, name))
			return r->mem[i].v;
	return NAN;
}

static const struct mg_prof_metric *prof_of(const struct mg_run_record *r,
					    const char *name)
{
	for (int i = 0; i < r->nprof; i++)
		if (!strcmp(r->prof[i].name, name))
			return &r->prof[i];
	return NULL;
}

static void build(struct rows *t, const struct mg_run_record *a,
		  const struct mg_run_record *b)
{
	static const char *const ph_cols[MG_PH_COUNT] = {
		"data_s",
		"h2d_s",
		"forward_s",
		"backward_s",
		"comm_exposed_s|comm_s",
		"optimizer_s"};
	static const char *const ph_names[MG_PH_COUNT] = {
		"data",	    "h2d",	    "forward",
		"backward", "comm exposed", "optimizer"};
	const char *s = "throughput";
	/* The report's rate covers every step, warm-up and graph capture
	 * included, so it has no interval: the step median is the steady
	 * comparison, and the two can disagree on short runs. */
	add(t, s, "samples/s (all steps)", a->samples_per_s, b->samples_per_s,
	    PLAIN, U_RATE);
	timed(t, s, "step median", a, b, "step_s");
	add(t, s, "train_s", a->train_s, b->train_s, PLAIN, U_SEC);
	add(t, s, "wall_s", a->wall_s, b->wall_s, PLAIN, U_SEC);
	add(t, s, "setup_s", a->setup_s, b->setup_s, PLAIN, U_SEC);
	s = "phases (median s per step)";
	for (int i = 0; i < MG_PH_COUNT; i++)
		timed(t, s, ph_names[i], a, b, ph_cols[i]);
	timed(t, s, "comm overlapped", a, b, "comm_overlapped_s");
	s = "communication (rank 0, whole run)";
	add(t, s, "exposed", a->comm_exposed_s, b->comm_exposed_s, PLAIN,
	    U_SEC);
	add(t, s, "overlapped", a->comm_overlapped_s, b->comm_overlapped_s,
	    PLAIN, U_SEC);
	add(t, s, "busy", a->comm_busy_s, b->comm_busy_s, PLAIN, U_SEC);
	add(t, s, "bytes", a->comm_bytes, b->comm_bytes, EXACT, U_BYTES);
	add(t, s, "calls", a->comm_calls, b->comm_calls, EXACT, U_COUNT);
	s = "memory peak";
	add(t, s, "device total (max rank)", a->mem_peak, b->mem_peak, EXACT,
	    U_BYTES);
	for (int i = 0; i < a->nmem + b->nmem; i++) {
		const char *n =
			i < a->nmem ? a->mem[i].name : b->mem[i - a->nmem].name;
		if (i >= a->nmem && !isnan(mem_of(a, n)))
			continue; /* listed already */
		char label[64];
		snprintf(label, sizeof label, "%s (rank 0)", n);
		add(t, s, label, mem_of(a, n), mem_of(b, n), EXACT, U_BYTES);
	}
	s = "transfers (rank 0)";
	add(t, s, "host to device bytes", a->h2d_bytes, b->h2d_bytes, EXACT,
	    U_BYTES);
	s = "accuracy";
	add(t, s, "test accuracy [%]", 100 * a->test_acc, 100 * b->test_acc,
	    PLAIN, U_PCT);
	/* The model's declared metrics, by A's names (DPO's rewards/...). */
	for (int i = 0; i < a->ntmet; i++) {
		double vb = NAN;
		for (int j = 0; j < b->ntmet; j++)
			if (!strcmp(b->tmet[j].name, a->tmet[i].name))
				vb = b->tmet[j].v;
		char label[64];
		snprintf(label, sizeof label, "test %s", a->tmet[i].name);
		add(t, s, label, a->tmet[i].v, vb, PLAIN, U_NUM);
	}
	if (a->nprof && b->nprof) {
		s = "profile (window seconds, mean over ranks)";
		for (int i = 0; i < a->nprof; i++) {
			const struct mg_prof_metric *pb =
				prof_of(b, a->prof[i].name);
			if (pb)
				add(t, s, a->prof[i].name, a->prof[i].seconds,
				    pb->seconds, PLAIN, U_SEC);
		}
	}
}

static void fmt_val(char *buf, size_t n, double v, enum unit u)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	if (isnan(v)) {
		snprintf(buf, n, "-");
		return;
	}
	switch (u) {
	case U_BYTES:
		while (fabs(v) >= 1024 && i < 4) {
			v /= 1024;
			i++;
		}
		snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, units[i]);
		break;
	case U_COUNT:
		snprintf(buf, n, "%.0f", v);
		break;
	case U_RATE:
		snprintf(buf, n, v >= 100 ? "%.1f" : "%.4g", v);
		break;
	case U_PCT:
		snprintf(buf, n, "%.2f", v);
		break;
	case U_NUM:
		snprintf(buf, n, "%.4g", v);
		break;
	default: /* seconds */
		if (v == 0)
			snprintf(buf, n, "0");
		else if (fabs(v) < 1e-3)
			snprintf(buf, n, "%.1f us", v * 1e6);
		else if (fabs(v) < 1)
			snprintf(buf, n, "%.2f ms", v * 1e3);
		else
			snprintf(buf, n, "%.3f s", v);
	}
}

static const char *mark(const struct row *r)
{
	switch (r->kind) {
	case TIMED:
		return r->verdict < 0 ? "?" : r->verdict ? "*" : "~";
	case EXACT:
		if (isnan(r->a) && isnan(r->b))
			return "";
		return r->a == r->b ? "=" : "*";
	default:
		return "";
	}
}

static double ratio(const struct row *r)
{
	if (isnan(r->a) || isnan(r->b) || r->a == 0)
		return NAN;
	return r->b / r->a;
}

static void describe(FILE *f, const char *tag, const struct mg_run_record *r)
{
	double *v;
	int n = mg_run_steady(r, "step_s", &v);
	free(v);
	fprintf(f,
		"%s  %s\n   %s, %s, %s, %d rank%s, %d steady steps of "
		"%.0f\n",
		tag, r->dir, r->status, r->device, r->precision, r->world,
		r->world == 1 ? "" : "s", n, r->total_steps);
}

/* The settings of an effective configuration (report.json's "config",
 * as --print-config writes it): "section.key" and the value, comments
 * and padding stripped. Returns the count (at most max). */
#define CFG_MAX 256
struct cfg_kv {
	char key[96], val[160];
};

static int cfg_parse(const char *text, struct cfg_kv *kv, int max)
{
	char sect[48] = "";
	int n = 0;
	for (const char *p = text; p && *p && n < max;) {
		const char *e = strchr(p, '\n');
		const size_t len = e ? (size_t)(e - p) : strlen(p);
		char line[320];
		snprintf(line, sizeof line, "%.*s", (int)len, p);
		p = e ? e + 1 : NULL;
		char *c = strchr(line, ';');
		if (c)
			*c = '\0';
		if (line[0] == '[') {
			char *r = strchr(line, ']');
			if (r)
				snprintf(sect, sizeof sect, "%.*s",
					 (int)(r - line - 1), line + 1);
			continue;
		}
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		char *k = line, *v = eq + 1, *ke = eq;
		*eq = '\0';
		while (*k == ' ')
			k++;
		while (ke > k && ke[-1] == ' ')
			*--ke = '\0';
		while (*v == ' ')
			v++;
		for (char *ve = v + strlen(v); ve > v && ve[-1] == ' ';)
			*--ve = '\0';
		if (!*k)
			continue;
		snprintf(kv[n].key, sizeof kv[n].key, "%s.%s", sect, k);
		snprintf(kv[n].val, sizeof kv[n].val, "%s", v);
		n++;
	}
	return n;
}

static const char *cfg_get(const struct cfg_kv *kv, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(kv[i].key, key))
			return kv[i].val;
	return NULL;
}

/* "settings that differ": every key whose value is not the same in A and
 * B (absent on one side: "-"), but the run's name and folder. */
static void print_config_diff(FILE *f, const struct mg_run_record *a,
			      const struct mg_run_record *b)
{
	if (!a->config || !b->config)
		return;
	struct cfg_kv *ka = calloc(2 * CFG_MAX, sizeof *ka);
	if (!ka)
		return;
	struct cfg_kv *kb = ka + CFG_MAX;
	const int na = cfg_parse(a->config, ka, CFG_MAX),
		  nb = cfg_parse(b->config, kb, CFG_MAX);
	int shown = 0;
	for (int side = 0; side < 2; side++)
		for (int i = 0; i < (side ? nb : na); i++) {
			const struct cfg_kv *x = side ? &kb[i] : &ka[i];
			const char *va = cfg_get(ka, na, x->key),
				   *vb = cfg_get(kb, nb, x->key);
			if ((side && va) || (va && vb && !strcmp(va, vb)) ||
			    !strcmp(x->key, "run.name") ||
			    !strcmp(x->key, "run.out_dir"))
				continue;
			if (!shown++)
				fprintf(f, "\nsettings that differ\n");
			fprintf(f, "  %-28s %14s %14s\n", x->key, va ? va : "-",
				vb ? vb : "-");
		}
	free(ka);
}

static void print_text(FILE *f, const struct rows *t,
		       const struct mg_run_record *a,
		       const struct mg_run_record *b)
{
	describe(f, "A", a);
	describe(f, "B", b);
	print_config_diff(f, a, b);
	const char *section = NULL;
	fprintf(f, "\n%-30s %14s %14s %8s\n", "", "A", "B", "B/A");
	for (int i = 0; i < t->n; i++) {
		const struct row *r = &t->v[i];
		char va[32], vb[32], q[16];
		if (r->section != section) {
			section = r->section;
			fprintf(f, "%s\n", section);
		}
		fmt_val(va, sizeof va, r->a, r->unit);
		fmt_val(vb, sizeof vb, r->b, r->unit);
		double x = ratio(r);
		if (isnan(x))
			snprintf(q, sizeof q, "-");
		else
			snprintf(q, sizeof q, "%.3f", x);
		fprintf(f, "  %-28s %14s %14s %8s  %s\n", r->name, va, vb, q,
			mark(r));
	}
	if (a->nprof != b->nprof && (!a->nprof || !b->nprof))
		fprintf(f, "profile\n  only %s was profiled\n",
			a->nprof ? "A" : "B");
	fprintf(f,
		"\n~  within noise: the 95%% interval of median(B)/median(A) "
		"contains 1\n"
		"*  a difference: the interval excludes 1; for bytes, memory "
		"and counts\n"
		"   (deterministic, compared exactly) any difference\n"
		"=  identical;  ?  fewer than 5 steady steps to tell\n"
		"Per-step timings are medians over the steady steps of "
		"steps.csv (all but the\n"
		"first 3 of the run, the first of each epoch and skipped "
		"steps); the interval is\n"
		"a percentile bootstrap of the ratio of medians (2000 "
		"resamples of each run's\n"
		"steps, fixed seed). It measures step-to-step noise within "
		"the two runs, not\n"
		"run-to-run variation: repeat runs (mgrun --repeats) for "
		"that. Unmarked rows\n"
		"have one number per run and no noise estimate (samples/s "
		"counts warm-up and\n"
		"capture steps too).\n");
}

/* A CSV number: empty when unknown. */
static void csv_num(FILE *f, double v)
{
	if (isnan(v))
		fputs(",", f);
	else
		fprintf(f, ",%.9g", v);
}

static void print_csv(FILE *f, const struct rows *t)
{
	fprintf(f, "section,quantity,a,b,ratio,mark,ratio_lo,ratio_hi\n");
	for (int i = 0; i < t->n; i++) {
		const struct row *r = &t->v[i];
		fprintf(f, "\"%s\",\"%s\"", r->section, r->name);
		csv_num(f, r->a);
		csv_num(f, r->b);
		csv_num(f, ratio(r));
		fprintf(f, ",%s", mark(r));
		csv_num(f, r->lo);
		csv_num(f, r->hi);
		fputc('\n', f);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: mgrun compare RUN_A RUN_B [--csv]\n"
		   "  RUN_A, RUN_B  run directories (with report.json), "
		   "e.g. a sweep's points/p01-...\n"
		   "  --csv         machine-readable output\n");
}

/* Load one side; a sweep folder gets a hint at its points. */
static int load(struct mg_run_record *r, const char *dir)
{
	if (mg_run_load(r, dir) == 0)
		return 0;
	fprintf(stderr, "mgrun compare: %s\n", mg_last_error());
	char p[4200];
	struct stat st;
	snprintf(p, sizeof p, "%s/sweep.json", dir);
	if (!stat(p, &st))
		fprintf(stderr,
			"mgrun compare: %s is a sweep; compare two of its "
			"runs: %s/points/...\n",
			dir, dir);
	return -1;
}

int mg_compare_main(int argc, char **argv)
{
	const char *dirs[2];
	int nd = 0;
	bool csv = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--csv"))
			csv = true;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' || nd == 2) {
			usage(stderr);
			return 2;
		} else
			dirs[nd++] = argv[i];
	}
	if (nd != 2) {
		usage(stderr);
		return 2;
	}
	struct mg_run_record a, b;
	int rc = 0;
	if (load(&a, dirs[0]) | load(&b, dirs[1]))
		rc = 2;
	if (!rc) {
		struct rows *t = calloc(1, sizeof *t);
		if (!t) {
			rc = 1;
		} else {
			build(t, &a, &b);
			if (csv)
				print_csv(stdout, t);
			else
				print_text(stdout, t, &a, &b);
			free(t);
		}
	}
	mg_run_free(&a);
	mg_run_free(&b);
	return rc;
}
