/*
 * run_load.c - read a run directory (report.json, steps.csv, memory.csv,
 * profile_memcpy.csv) into one struct, so sweeps and compare compute
 * from the same numbers.
 *
 * Accepts report schemas mgrun-report-1 and -2. What -1 lacks (train_s,
 * samples_per_s, the step-time summary, run.test_accuracy) is derived
 * from steps.csv and the epochs, the way -2 computes it.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mg/log.h>

#include "analysis/analysis.h"

const char *const mg_phase_names[MG_PH_COUNT] = {
	"data", "h2d", "forward", "backward", "comm", "optimizer"};
/* steps.csv columns of the phases ("|": alternatives, first wins) */
static const char *const phase_cols[MG_PH_COUNT] = {"data_s",
						    "h2d_s",
						    "forward_s",
						    "backward_s",
						    "comm_exposed_s|comm_s",
						    "optimizer_s"};

#define WARMUP_ROWS 3
/* The largest run.world accepted from a report.json. */
#define MG_RUN_MAX_WORLD (1 << 20)

/* The largest run artefacts read: report.json is a few KiB (a profiled
 * run with many ranks a few MiB), a CSV one row a step or a copy. Beyond
 * these a file is not one mgrun wrote (a guard against /dev/zero-like
 * or runaway input, like the config reader's). */
#define MG_REPORT_MAX_BYTES (64u << 20)
#define MG_CSV_MAX_BYTES (1u << 30)
/* Bounds on what a CSV becomes in memory: a short row of a wide header
 * would otherwise turn a few bytes into many doubles. */
#define MG_CSV_MAX_COLS 4096
#define MG_CSV_MAX_CELLS (1 << 26)

/*
 * Read a whole run artefact into *text (NUL-terminated). Returns 0, 1
 * when the file does not exist (an artefact a run may lack), or -1 with
 * the reason in mg_error(): not a regular file (a FIFO, /dev/zero),
 * more than max bytes, or a read error (mg_file_read, libmg's one reader
 * of whole files).
 */
static int slurp(const char *path, size_t max, char **text, size_t *len)
{
	struct stat st;
	*len = 0;
	*text = NULL;
	if (lstat(path, &st) && errno == ENOENT)
		return 1;
	*text = mg_file_read(path, max, 0, len);
	return *text ? 0 : -1;
}

int mg_csv_col(const struct mg_csv *c, const char *name)
{
	for (int i = 0; i < c->ncols; i++)
		if (!strcmp(c->names[i], name))
			return i;
	return -1;
}

static void csv_free(struct mg_csv *c)
{
	for (int i = 0; i < c->ncols; i++)
		free(c->names[i]);
	free(c->names);
	free(c->v);
	memset(c, 0, sizeof *c);
}

/* Read a numeric CSV; a missing file leaves c empty and is no error.
 * Rows with fewer cells get NAN for the rest (a run killed mid-line). */
static int csv_load(struct mg_csv *c, const char *path)
{
	size_t len;
	char *text;
	memset(c, 0, sizeof *c);
	int got = slurp(path, MG_CSV_MAX_BYTES, &text, &len);
	if (got)
		return got > 0 ? 0 : -1;
	char *save = NULL, *line = strtok_r(text, "\n", &save);
	int rc = 0;
	if (line) {
		for (char *p = line, *e;; p = e + 1) {
			e = strchr(p, ',');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			if (n && p[n - 1] == '\r')
				n--;
			char **nn = c->ncols < MG_CSV_MAX_COLS
					    ? realloc(c->names,
						      (size_t)(c->ncols + 1) *
							      sizeof *nn)
					    : NULL;
			if (!nn) {
				rc = mg_error("%s:1: more than %d columns, or "
					      "out of memory",
					      path, MG_CSV_MAX_COLS);
				break;
			}
			c->names = nn;
			if (!(c->names[c->ncols] = strndup(p, n))) {
				rc = mg_error("%s: out of memory", path);
				break;
			}
			c->ncols++;
			if (!e)
				break;
		}
	}
	size_t cap = 0;
	while (!rc && (line = strtok_r(NULL, "\n", &save))) {
		if (!line[0])
			continue;
		size_t need = (size_t)(c->nrows + 1) * (size_t)c->ncols;
		if (need > MG_CSV_MAX_CELLS || c->nrows == INT32_MAX) {
			rc = mg_error("%s: more than %d cells; not a file "
				      "mgrun wrote?",
				      path, MG_CSV_MAX_CELLS);
			break;
		}
		if (need > cap) {
			cap = cap ? 2 * cap : 1024 * (size_t)c->ncols;
			double *nv = realloc(c->v, cap * sizeof *nv);
			if (!nv) {
				rc = mg_error("%s: out of memory", path);
				break;
			}
			c->v = nv;
		}
		double *row = c->v + (size_t)c->nrows * (size_t)c->ncols;
		char *p = line;
		for (int i = 0; i < c->ncols; i++) {
			char *end;
			row[i] = NAN;
			if (!p)
				continue;
			double x = strtod(p, &end);
			if (end != p)
				row[i] = x;
			p = strchr(p, ',');
			if (p)
				p++;
		}
		c->nrows++;
	}
	free(text);
	if (rc)
		csv_free(c);
	return rc;
}

/* A whole cell as a finite number. */
static bool cell_num(const char *p, size_t n, double *v)
{
	char buf[64], *end;
	if (!n || n >= sizeof buf)
		return false;
	memcpy(buf, p, n);
	buf[n] = 0;
	*v = strtod(buf, &end);
	return end != buf && !*end && isfinite(*v);
}

/* Does cell p[0..n) read exactly name? */
static bool cell_is(const char *p, size_t n, const char *name)
{
	return n == strlen(name) && !strncmp(p, name, n);
}

/*
 * profile_memcpy.csv: "t_s,kind,bytes,duration_s" (columns by name, in
 * any order, others ignored), one copy a row. Strict, unlike csv_load:
 * a line that is not a copy is an error at path:line. A missing file is
 * none (an unprofiled run).
 */
#define MAX_CELLS 16
static int copies_load(struct mg_run_record *r, const char *path)
{
	static const char *const want[4] = {"t_s", "kind", "bytes",
					    "duration_s"};
	static const char *const kinds[4] = {"h2d", "d2h", "d2d", "other"};
	size_t len;
	char *text;
	int got = slurp(path, MG_CSV_MAX_BYTES, &text, &len);
	if (got)
		return got > 0 ? 0 : -1;
	r->has_copies = true;
	int col[4] = {-1, -1, -1, -1}, ncols = 0, rc = 0, cap = 0;
	char *next = text;
	for (int lineno = 1; next && !rc; lineno++) {
		char *line = next, *nl = strchr(line, '\n');
		next = nl ? nl + 1 : NULL;
		if (nl)
			*nl = 0;
		size_t ll = strlen(line);
		if (ll && line[ll - 1] == '\r')
			line[--ll] = 0;
		if (!ll) /* an empty line, or the end of the file */
			continue;
		const char *cell[MAX_CELLS];
		size_t cn[MAX_CELLS];
		int nc = 0;
		for (char *p = line;; p++) {
			char *e = strchr(p, ',');
			if (nc < MAX_CELLS) {
				cell[nc] = p;
				cn[nc] = e ? (size_t)(e - p) : strlen(p);
			}
			nc++;
			if (!e)
				break;
			p = e;
		}
		if (!ncols) { /* the header */
			ncols = nc;
			for (int i = 0; i < nc && i < MAX_CELLS; i++)
				for (int k = 0; k < 4; k++)
					if (cell_is(cell[i], cn[i], want[k]))
						col[k] = i;
			for (int k = 0; k < 4 && !rc; k++)
				if (col[k] < 0)
					rc = mg_error("%s:%d: no column '%s' "
						      "(expected t_s,kind,"
						      "bytes,duration_s)",
						      path, lineno, want[k]);
			continue;
		}
		if (nc != ncols) {
			rc = mg_error("%s:%d: %d field%s, the header has %d",
				      path, lineno, nc, nc == 1 ? "" : "s",
				      ncols);
			break;
		}
		struct mg_copy c = {0};
		int kind = -1, bad = -1;
		for (int k = 0; k < 4; k++)
			if (cell_is(cell[col[1]], cn[col[1]], kinds[k]))
				kind = k;
		if (!cell_num(cell[col[0]], cn[col[0]], &c.t))
			bad = 0;
		else if (kind < 0)
			bad = 1;
		else if (!cell_num(cell[col[2]], cn[col[2]], &c.bytes) ||
			 c.bytes < 0)
			bad = 2;
		else if (!cell_num(cell[col[3]], cn[col[3]], &c.dur) ||
			 c.dur < 0)
			bad = 3;
		if (bad >= 0) {
			static const char *const what[4] = {
				"a number", "h2d, d2h, d2d or other",
				"a number >= 0", "a number >= 0"};
			rc = mg_error("%s:%d: %s '%.*s' is not %s", path,
				      lineno, want[bad], (int)cn[col[bad]],
				      cell[col[bad]], what[bad]);
			break;
		}
		c.kind = (enum mg_copy_kind)kind;
		if (r->ncopies == cap) {
			cap = cap ? 2 * cap : 1024;
			struct mg_copy *nv =
				realloc(r->copies, (size_t)cap * sizeof *nv);
			if (!nv) {
				rc = mg_error("%s: out of memory", path);
				break;
			}
			r->copies = nv;
		}
		r->copies[r->ncopies++] = c;
	}
	if (!rc && !ncols)
		rc = mg_error("%s:1: empty (expected the header "
			      "t_s,kind,bytes,duration_s)",
			      path);
	free(text);
	return rc;
}

static double num(const cJSON *o, const char *key, double dflt)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

static char *str(const cJSON *o, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
	return strdup(cJSON_IsString(j) ? j->valuestring : "");
}

/* Row i is steady: not one of the run's first steps, not the first of
 * an epoch (evaluation, checkpoint and shuffling sit before it), not a
 * skipped (fp16 overflow) step. */
static bool steady_row(const struct mg_csv *c, int i, int epoch, int skipped)
{
	const double *row = c->v + (size_t)i * (size_t)c->ncols;
	if (i < WARMUP_ROWS)
		return false;
	if (epoch >= 0 && row[epoch] != row[epoch - c->ncols])
		return false;
	return !(skipped >= 0 && row[skipped] == 1);
}

int mg_run_steady(const struct mg_run_record *r, const char *cols, double **out)
{
	const struct mg_csv *c = &r->steps;
	int col = -1, n = 0;
	*out = NULL;
	char *alts = strdup(cols), *save = NULL;
	for (char *t = strtok_r(alts, "|", &save); t && col < 0;
	     t = strtok_r(NULL, "|", &save))
		col = mg_csv_col(c, t);
	free(alts);
	if (col < 0 || !c->nrows)
		return 0;
	int ep = mg_csv_col(c, "epoch"), sk = mg_csv_col(c, "skipped");
	double *v = malloc((size_t)c->nrows * sizeof *v);
	if (!v)
		return 0;
	for (int i = 0; i < c->nrows; i++) {
		double x = c->v[(size_t)i * (size_t)c->ncols + (size_t)col];
		if (steady_row(c, i, ep, sk) && !isnan(x))
			v[n++] = x;
	}
	*out = v;
	return n;
}

static double mean_of(const double *v, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += v[i];
	return n ? s / n : NAN;
}

/* Sum of a column over every row (train time of a -1 report). */
static double col_sum(const struct mg_csv *c, const char *name)
{
	int col = mg_csv_col(c, name);
	double s = 0;
	for (int i = 0; col >= 0 && i < c->nrows; i++) {
		double x = c->v[(size_t)i * (size_t)c->ncols + (size_t)col];
		s += isnan(x) ? 0 : x;
	}
	return col >= 0 ? s : NAN;
}

static void load_ranks(struct mg_run_record *r, const cJSON *ranks)
{
	const cJSON *rk;
	double tokens = 0;
	cJSON_ArrayForEach(rk, ranks)
	{
		const cJSON *mem = cJSON_GetObjectItemCaseSensitive(
			rk, "memory_peak_bytes");
		double total = num(mem, "total", 0);
		if (total > r->mem_peak)
			r->mem_peak = total;
		const cJSON *cnt =
			cJSON_GetObjectItemCaseSensitive(rk, "counters");
		tokens += num(cnt, "tokens_computed", 0);
		if (num(rk, "rank", -1) != 0)
			continue;
		const cJSON *tm =
			cJSON_GetObjectItemCaseSensitive(rk, "time_s");
		for (int i = 0; i < MG_PH_COUNT; i++)
			r->phase_step[i] = num(tm, mg_phase_names[i], 0);
		const cJSON *cm = cJSON_GetObjectItemCaseSensitive(rk, "comm");
		r->comm_bytes = num(cm, "bytes", 0);
		r->comm_calls = num(cm, "calls", 0);
		r->comm_busy_s = num(cm, "busy_s", 0);
		r->comm_exposed_s = num(cm, "exposed_s", 0);
		r->comm_overlapped_s = num(cm, "overlapped_s", 0);
		const cJSON *ct =
			cJSON_GetObjectItemCaseSensitive(rk, "counters");
		r->h2d_bytes = num(ct, "h2d_bytes", 0);
		r->d2h_bytes = num(ct, "d2h_bytes", 0);
		const cJSON *m;
		/* a second rank 0 (a malformed report) replaces the first */
		for (int i = 0; i < r->nmem; i++)
			free(r->mem[i].name);
		r->nmem = 0;
		free(r->mem);
		r->mem = calloc((size_t)cJSON_GetArraySize(mem) + 1,
				sizeof *r->mem);
		cJSON_ArrayForEach(m, mem)
		{
			if (!cJSON_IsNumber(m) || !r->mem)
				continue;
			r->mem[r->nmem].name = strdup(m->string);
			r->mem[r->nmem++].v = m->valuedouble;
		}
	}
	r->tokens_per_s =
		tokens > 0 && r->train_s > 0 ? tokens / r->train_s : NAN;
}

/* An epoch's declared test metrics, replacing an earlier epoch's. */
static void load_test_metrics(struct mg_run_record *r, const cJSON *ep)
{
	const cJSON *tm = cJSON_GetObjectItemCaseSensitive(ep, "test_metrics");
	if (!cJSON_IsObject(tm))
		return;
	for (int i = 0; i < r->ntmet; i++)
		free(r->tmet[i].name);
	free(r->tmet);
	r->ntmet = 0;
	r->tmet = calloc((size_t)cJSON_GetArraySize(tm) + 1, sizeof *r->tmet);
	const cJSON *m;
	cJSON_ArrayForEach(m, tm)
	{
		if (!cJSON_IsNumber(m) || !r->tmet)
			continue;
		r->tmet[r->ntmet].name = strdup(m->string);
		r->tmet[r->ntmet++].v = m->valuedouble;
	}
}

/* "profile": each listed metric averaged over the ranks that have it. */
static void load_profile(struct mg_run_record *r, const cJSON *prof)
{
	const cJSON *names = cJSON_GetObjectItemCaseSensitive(prof, "metrics");
	const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(prof, "ranks");
	int n = cJSON_GetArraySize(names);
	if (!cJSON_IsArray(names) || !cJSON_IsArray(ranks) || n <= 0)
		return;
	r->prof = calloc((size_t)n, sizeof *r->prof);
	if (!r->prof)
		return;
	const cJSON *nm;
	cJSON_ArrayForEach(nm, names)
	{
		if (!cJSON_IsString(nm))
			continue;
		struct mg_prof_metric *m = &r->prof[r->nprof++];
		m->name = strdup(nm->valuestring);
		int k = 0;
		const cJSON *rk;
		cJSON_ArrayForEach(rk, ranks)
		{
			const cJSON *o = cJSON_GetObjectItemCaseSensitive(
				rk, nm->valuestring);
			if (!cJSON_IsObject(o))
				continue;
			m->count += num(o, "count", 0);
			m->seconds += num(o, "seconds", 0);
			m->bytes += num(o, "bytes", 0);
			k++;
		}
		if (k) {
			m->count /= k;
			m->seconds /= k;
			m->bytes /= k;
		}
	}
}

/* Per-step numbers from steps.csv (steady steps), else from totals. */
static void derive_steps(struct mg_run_record *r)
{
	double *v;
	int n = mg_run_steady(r, "step_s", &v);
	if (n) {
		r->step_median = mg_median(v, n);
		r->step_mean = mean_of(v, n);
	}
	free(v);
	for (int i = 0; n && i < MG_PH_COUNT; i++) {
		int k = mg_run_steady(r, phase_cols[i], &v);
		r->phase_step[i] = k ? mean_of(v, k) : 0;
		free(v);
	}
	if (!n && r->total_steps > 0) { /* totals / steps */
		double s = 0;
		for (int i = 0; i < MG_PH_COUNT; i++)
			s += r->phase_step[i] /= r->total_steps;
		r->step_mean = s;
	}
	if (isnan(r->train_s))
		r->train_s = col_sum(&r->steps, "step_s");
}

/* The seed experiments' "time per epoch": measured, or for a run that
 * run.max_steps stopped inside its first epoch estimated from the steady
 * step median (struct mg_run_record says which). */
static void derive_epoch(struct mg_run_record *r)
{
	if (!(r->steps_per_epoch > 0))
		return;
	if (r->total_steps >= r->steps_per_epoch)
		r->epoch_s = r->train_s * r->steps_per_epoch / r->total_steps;
	else
		r->epoch_s = r->steps_per_epoch * r->step_median;
}

int mg_run_load(struct mg_run_record *r, const char *dir)
{
	char path[4200];
	size_t len;
	memset(r, 0, sizeof *r);
	r->dir = strdup(dir);
	r->test_acc = r->train_s = r->samples_per_s = r->step_median = NAN;
	r->step_mean = r->window_s = r->tokens_per_s = r->epoch_s = NAN;
	snprintf(path, sizeof path, "%s/report.json", dir);
	char *text;
	int got = slurp(path, MG_REPORT_MAX_BYTES, &text, &len);
	if (got > 0)
		return mg_error("%s: no such file (not a run directory?)",
				path);
	if (got)
		return -1;
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (!root) {
		long off = end ? (long)(end - text) : -1;
		free(text);
		return mg_error("%s: not valid JSON (near byte %ld)", path,
				off);
	}
	free(text);
	int rc = 0;
	const cJSON *run = cJSON_GetObjectItemCaseSensitive(root, "run");
	const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(root, "ranks");
	r->schema = str(root, "schema");
	if (strcmp(r->schema, "mgrun-report-1") &&
	    strcmp(r->schema, "mgrun-report-2"))
		rc = mg_error("%s: schema '%s' (expected mgrun-report-1 or "
			      "-2)",
			      path, r->schema);
	else if (!cJSON_IsObject(run) || !cJSON_IsArray(ranks) ||
		 !cJSON_GetArraySize(ranks))
		rc = mg_error("%s: malformed: no \"%s\"", path,
			      !cJSON_IsObject(run) ? "run" : "ranks");
	/* A number read back becomes an int only when it is one (a rank
	 * count out of range is undefined behaviour in the conversion). */
	double world = rc ? 1 : num(run, "world", 1);
	if (!rc &&
	    !(world >= 1 && world <= MG_RUN_MAX_WORLD && world == floor(world)))
		rc = mg_error("%s: malformed: run.world = %g is not a rank "
			      "count (1 to %d)",
			      path, world, MG_RUN_MAX_WORLD);
	if (rc) {
		cJSON_Delete(root);
		return rc;
	}
	r->status = str(root, "status");
	r->config = str(root, "config");
	r->device = str(run, "device");
	r->precision = str(run, "precision");
	r->world = (int)world;
	r->batch_size = num(run, "batch_size", 0);
	r->total_steps = num(run, "total_steps", 0);
	r->steps_per_epoch = num(run, "steps_per_epoch", 0);
	r->wall_s = num(run, "wall_s", NAN);
	r->setup_s = num(run, "setup_s", NAN);
	r->train_s = num(run, "train_s", NAN);
	r->samples_per_s = num(run, "samples_per_s", NAN);
	r->test_acc = num(run, "test_accuracy", NAN);
	const cJSON *ep,
		*eps = cJSON_GetObjectItemCaseSensitive(root, "epochs");
	double samples = 0, secs = 0;
	cJSON_ArrayForEach(ep, eps)
	{
		samples += num(ep, "samples", 0);
		secs += num(ep, "seconds", 0);
		if (!cJSON_HasObjectItem(run, "test_accuracy"))
			r->test_acc = num(ep, "test_accuracy", r->test_acc);
		load_test_metrics(r, ep);
	}
	if (isnan(r->samples_per_s) && secs > 0)
		r->samples_per_s = samples / secs;
	load_ranks(r, ranks);
	const cJSON *prof = cJSON_GetObjectItemCaseSensitive(root, "profile");
	load_profile(r, prof);
	r->window_s = num(cJSON_GetObjectItemCaseSensitive(prof, "window"),
			  "seconds", NAN);
	const cJSON *ss = cJSON_GetObjectItemCaseSensitive(run, "step_s");
	double report_median = num(ss, "median", NAN);
	cJSON_Delete(root);

	snprintf(path, sizeof path, "%s/steps.csv", dir);
	if (csv_load(&r->steps, path))
		return -1;
	snprintf(path, sizeof path, "%s/memory.csv", dir);
	if (csv_load(&r->memory, path))
		return -1;
	snprintf(path, sizeof path, "%s/profile_memcpy.csv", dir);
	if (copies_load(r, path))
		return -1;
	derive_steps(r);
	if (isnan(r->step_median))
		r->step_median = report_median;
	derive_epoch(r);
	return 0;
}

void mg_run_free(struct mg_run_record *r)
{
	free(r->dir);
	free(r->schema);
	free(r->status);
	free(r->config);
	free(r->device);
	free(r->precision);
	for (int i = 0; i < r->nmem; i++)
		free(r->mem[i].name);
	free(r->mem);
	for (int i = 0; i < r->ntmet; i++)
		free(r->tmet[i].name);
	free(r->tmet);
	for (int i = 0; i < r->nprof; i++)
		free(r->prof[i].name);
	free(r->prof);
	csv_free(&r->steps);
	csv_free(&r->memory);
	free(r->copies);
	memset(r, 0, sizeof *r);
}

double mg_run_metric(const struct mg_run_record *r, const char *metric)
{
	return !strcmp(metric, "wall_s")    ? r->wall_s
	       : !strcmp(metric, "epoch_s") ? r->epoch_s
					    : r->train_s;
}

bool mg_run_finished(const char *dir, char **config)
{
	char path[4200];
	size_t len;
	bool done = false;
	*config = NULL;
	snprintf(path, sizeof path, "%s/report.json", dir);
	char *text;
	/* anything unreadable is a point to run again (its error would
	 * show there) */
	if (slurp(path, MG_REPORT_MAX_BYTES, &text, &len))
		return false;
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "status");
	const cJSON *cf = cJSON_GetObjectItemCaseSensitive(root, "config");
	if (cJSON_IsString(st) && !strcmp(st->valuestring, "finished")) {
		done = true;
		if (cJSON_IsString(cf))
			*config = strdup(cf->valuestring);
	}
	cJSON_Delete(root);
	return done;
}
