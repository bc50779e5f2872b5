/*
 * report.c - the run directory's steps.csv (one row per optimizer step)
 * and report.json (versioned schema, rewritten atomically at each epoch
 * end), plus the readable summary printed at the end of a run.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/report.h"
#include "mg/tensor_file.h"
#include "runtime/devmem.h"

#define REPORT_SCHEMA "mgrun-report-2"

static const char *const timer_names[MG_T_COUNT] = {
	"data", "h2d", "forward", "backward", "comm", "optimizer"};
static const char *const counter_names[MG_C_COUNT] = {
	"samples_read", "samples_computed", "h2d_bytes",      "d2h_bytes",
	"comm_bytes",	"comm_calls",	    "tokens_computed"};

static const char csv_header[] =
	"step,epoch,loss,accuracy,lr,grad_norm,skipped,step_s,data_s,h2d_s,"
	"forward_s,backward_s,comm_exposed_s,comm_overlapped_s,optimizer_s,"
	"mem_bytes,mem_peak_bytes\n";

/* Finish writing tmp (opened as f) and rename it over path, only if
 * every write, the flush, fsync and close succeeded (werr: the errno of
 * an earlier failed write, or 0). Otherwise remove tmp, keep path as it
 * was, and say why. */
static int replace_file(FILE *f, const char *tmp, const char *path, int werr)
{
	int e = werr;
	if (!e && (ferror(f) || fflush(f) || fsync(fileno(f))))
		e = errno ? errno : EIO;
	if (fclose(f) && !e)
		e = errno ? errno : EIO;
	if (!e && rename(tmp, path))
		e = errno;
	if (!e)
		return 0;
	unlink(tmp);
	return mg_error("%s: write failed: %s (%s left as it was)", tmp,
			strerror(e), path);
}

/*
 * fopen() for steps.csv, refusing anything but a regular file: a FIFO
 * put in its place would block open() until some reader came (O_NONBLOCK
 * opens it at once, then fstat refuses it). mode "r", "w" or "a". NULL
 * with errno ENOENT when reading a missing file; otherwise NULL after
 * mg_error().
 */
static FILE *open_regular(const char *path, const char *mode)
{
	int flags = mode[0] == 'r'   ? O_RDONLY
		    : mode[0] == 'w' ? O_WRONLY | O_CREAT
				     : O_WRONLY | O_CREAT | O_APPEND;
	int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
	struct stat st;
	if (fd < 0) {
		int e = errno;
		if (e == ENXIO) /* a FIFO without a reader, opened to write */
			mg_error("%s: not a regular file (a FIFO?), refused",
				 path);
		else if (e != ENOENT || mode[0] != 'r')
			mg_error("%s: cannot open: %s", path, strerror(e));
		errno = e;
		return NULL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		mg_error("%s: not a regular file (a FIFO or a device?), "
			 "refused",
			 path);
		errno = EINVAL;
		return NULL;
	}
	/* truncate only once it is known to be a plain file */
	if (mode[0] == 'w' && ftruncate(fd, 0)) {
		int e = errno;
		close(fd);
		mg_error("%s: %s", path, strerror(e));
		errno = e;
		return NULL;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl != -1)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	FILE *f = fdopen(fd, mode);
	if (!f) {
		mg_error("%s: %s", path, strerror(errno));
		close(fd);
	}
	return f;
}

/* On resume keep the header and the rows of steps before the checkpoint,
 * drop the rest (a run may have died after its last checkpoint). */
static int trim_csv(const char *path, int64_t keep_below)
{
	FILE *in = open_regular(path, "r");
	if (!in)
		return errno == ENOENT ? 0 : -1;
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *out = fopen(tmp, "w");
	if (!out) {
		int e = errno;
		fclose(in);
		return mg_error("%s: cannot write: %s", tmp, strerror(e));
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	bool first = true;
	int werr = 0;
	errno = 0;
	while (!werr && (n = getline(&line, &cap, in)) > 0) {
		/* The header, then whole rows of earlier steps: a row cut
		 * short by a kill or a missing header are repaired. */
		bool header = first && !strcmp(line, csv_header);
		if (first && !header && fputs(csv_header, out) < 0)
			werr = errno ? errno : EIO;
		bool keep = header ||
			    (line[0] >= '0' && line[0] <= '9' &&
			     line[n - 1] == '\n' && atoll(line) < keep_below);
		if (!werr && keep &&
		    fwrite(line, 1, (size_t)n, out) != (size_t)n)
			werr = errno ? errno : EIO;
		first = false;
	}
	if (!werr && ferror(in))
		werr = errno ? errno : EIO;
	if (!werr && first && fputs(csv_header, out) < 0)
		werr = errno ? errno : EIO;
	free(line);
	fclose(in);
	return replace_file(out, tmp, path, werr);
}

/* An earlier run's event files in run_dir (ours only: *.mgrun). */
static void remove_event_files(const char *run_dir)
{
	DIR *d = opendir(run_dir);
	if (!d)
		return;
	const char *suffix = ".mgrun";
	struct dirent *e;
	char path[PATH_MAX + 256];
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (strncmp(e->d_name, "events.out.tfevents.", 20) ||
		    n < strlen(suffix) ||
		    strcmp(e->d_name + n - strlen(suffix), suffix))
			continue;
		snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
		remove(path);
	}
	closedir(d);
}

int mg_report_open(const struct mg_run_view *rs, bool resume)
{
	struct mg_report *rep = rs->rep;
	if (rs->rank != 0)
		return 0;
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/steps.csv", rs->run_dir);
	if (resume) {
		if (trim_csv(path, rs->start_step))
			return -1;
		rep->csv = open_regular(path, "a");
	} else {
		rep->csv = open_regular(path, "w");
		if (rep->csv)
			fputs(csv_header, rep->csv);
	}
	if (!rep->csv)
		return -1;
	if (!mg_opt_bool(rs->s->run, "tensorboard"))
		return 0;
	/* A new run in this folder: an earlier run's curves would mix with
	 * its own; a resumed one adds a file, as TensorBoard expects. */
	if (!resume)
		remove_event_files(rs->run_dir);
	return mg_tb_open(&rep->tb, rs->run_dir);
}

/* The event file's curves of one step. */
static void tb_step(const struct mg_run_view *rs, int64_t step, double loss,
		    double acc, double lr, double grad_norm, double seconds)
{
	struct mg_tb *tb = &rs->rep->tb;
	if (!tb->f)
		return;
	static const char *const phase_tag[MG_T_COUNT] = {
		[MG_T_DATA] = "time/data_ms",
		[MG_T_H2D] = "time/h2d_ms",
		[MG_T_FORWARD] = "time/forward_ms",
		[MG_T_BACKWARD] = "time/backward_ms",
		[MG_T_COMM] = "time/comm_exposed_ms",
		[MG_T_OPTIM] = "time/optimizer_ms",
	};
	const struct mg_stats *st = rs->stats;
	const double gib = 1.0 / (1024.0 * 1024.0 * 1024.0);
	char tag[64];
	mg_tb_begin(tb, step);
	mg_tb_value(tb, "train/loss", loss);
	if (!rs->metrics->per_token)
		mg_tb_value(tb, "train/accuracy", acc);
	mg_tb_value(tb, "optim/lr", lr);
	mg_tb_value(tb, "optim/grad_norm", grad_norm);
	mg_tb_value(tb, "perf/step_ms", 1e3 * seconds);
	for (int i = 0; i < MG_T_COUNT; i++)
		if (phase_tag[i])
			mg_tb_value(tb, phase_tag[i], 1e3 * st->t_step[i]);
	mg_tb_value(tb, "memory/step_peak_gib",
		    (double)st->mem_step_peak * gib);
	for (int c = 0; c < MG_MEM_CAT_COUNT; c++) {
		snprintf(tag, sizeof tag, "memory/%s_gib",
			 mg_mem_cat_name((enum mg_mem_cat)c));
		mg_tb_value(tb, tag, (double)st->mem_cur[c] * gib);
	}
	if (mg_tb_end(tb)) {
		mg_warn("%s; no more TensorBoard events", mg_last_error());
		mg_tb_close(tb);
	}
}

void mg_report_eval(const struct mg_run_view *rs, const struct mg_eval_point *v)
{
	struct mg_tb *tb = &rs->rep->tb;
	if (!tb->f)
		return;
	const struct mg_metric_spec *ms = rs->metrics;
	char tag[96];
	mg_tb_begin(tb, v->step);
	for (int i = 0; i < ms->ndecl; i++) {
		snprintf(tag, sizeof tag, "eval/%s", ms->decl[i].name);
		mg_tb_value(tb, tag, mg_metric_value(&ms->decl[i], v->sums));
	}
	if (mg_tb_end(tb)) {
		mg_warn("%s; no more TensorBoard events", mg_last_error());
		mg_tb_close(tb);
	}
}

void mg_report_epoch(const struct mg_run_view *rs,
		     const struct mg_epoch_stats *e)
{
	struct mg_tb *tb = &rs->rep->tb;
	if (!tb->f)
		return;
	const struct mg_metric_spec *ms = rs->metrics;
	char tag[96];
	/* at the epoch's last step, so the curves line up with the steps' */
	mg_tb_begin(tb, (e->epoch + 1) * rs->steps_per_epoch - 1);
	for (int i = 0; i < ms->ndecl; i++) {
		snprintf(tag, sizeof tag, "epoch/train_%s", ms->decl[i].name);
		mg_tb_value(tb, tag,
			    mg_metric_value(&ms->decl[i], e->train_sums));
		if (!e->has_test)
			continue;
		snprintf(tag, sizeof tag, "eval/%s", ms->decl[i].name);
		mg_tb_value(tb, tag,
			    mg_metric_value(&ms->decl[i], e->test_sums));
	}
	if (e->seconds > 0)
		mg_tb_value(
			tb,
			e->tokens ? "epoch/tokens_per_s"
				  : "epoch/samples_per_s",
			(double)(e->tokens ? e->here_tokens : e->here_samples) /
				e->seconds);
	if (mg_tb_end(tb)) {
		mg_warn("%s; no more TensorBoard events", mg_last_error());
		mg_tb_close(tb);
	}
}

void mg_report_step(const struct mg_run_view *rs, int64_t step, double loss,
		    double acc, double lr, double grad_norm, int skipped,
		    double seconds)
{
	FILE *csv = rs->rep->csv;
	if (!csv)
		return;
	const struct mg_stats *st = rs->stats;
	const double *ts = st->t_step;
	double overlapped = st->comm_busy_step - ts[MG_T_COMM];
	/* run.csv_full_precision: loss and grad_norm round-trip exactly. */
	const bool full = mg_opt_bool(rs->s->run, "csv_full_precision");
	fprintf(csv,
		full ? "%lld,%lld,%.17g,%.6g,%.9g,%.17g,%d,"
		     : "%lld,%lld,%.9g,%.6g,%.9g,%.6g,%d,",
		(long long)step, (long long)(step / rs->steps_per_epoch), loss,
		acc, lr, grad_norm, skipped);
	fprintf(csv, "%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%lld,%lld\n",
		seconds, ts[MG_T_DATA], ts[MG_T_H2D], ts[MG_T_FORWARD],
		ts[MG_T_BACKWARD], ts[MG_T_COMM],
		overlapped > 0 ? overlapped : 0, ts[MG_T_OPTIM],
		(long long)st->mem_total_cur, (long long)st->mem_step_peak);
	tb_step(rs, step, loss, acc, lr, grad_norm, seconds);
}

int mg_report_step_time(struct mg_report *rep, double seconds, bool steady)
{
	rep->train_s += seconds;
	if (!steady)
		return 0;
	return mg_series_add(&rep->step_s, seconds);
}

void mg_report_close(struct mg_report *rep)
{
	if (rep->csv)
		fclose(rep->csv);
	rep->csv = NULL;
	mg_tb_close(&rep->tb);
	mg_series_free(&rep->step_s);
	free(rep->rank_rows);
	rep->rank_rows = NULL;
}

/* Seconds from the process start to the first training step (plugins,
 * the strategy's storage and initial values, the input pipeline): a
 * large model's start, apart from its steps; until the loop begins, the
 * time so far. */
static double setup_seconds(const struct mg_run_view *rs)
{
	return (rs->t_loop > 0 ? rs->t_loop : mg_now()) - rs->t_begin;
}

/* The steady steps' wall times, sorted (a copy; NULL when none). */
static double *sorted_step_times(const struct mg_report *rep)
{
	size_t n = rep->step_s.n;
	double *v = n ? malloc(n * sizeof *v) : NULL;
	if (v) {
		memcpy(v, rep->step_s.v, n * sizeof *v);
		mg_sort_doubles(v, n);
	}
	return v;
}

/* The steady steps' wall-time distribution (null before any). */
static cJSON *step_time_json(const struct mg_report *rep)
{
	size_t n = rep->step_s.n;
	double *v = sorted_step_times(rep), sum = 0;
	if (!v)
		return cJSON_CreateNull();
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "median", mg_quantile_sorted(v, n, 0.5));
	cJSON_AddNumberToObject(o, "p10", mg_quantile_sorted(v, n, 0.1));
	cJSON_AddNumberToObject(o, "p90", mg_quantile_sorted(v, n, 0.9));
	cJSON_AddNumberToObject(o, "mean", sum / (double)n);
	cJSON_AddNumberToObject(o, "n", (double)n);
	free(v);
	return o;
}

/* The model's declared metrics from sums, by name (NaN as null). */
static cJSON *metrics_json(const struct mg_metric_spec *ms, const double *sums)
{
	cJSON *o = cJSON_CreateObject();
	for (int i = 0; ms && i < ms->ndecl; i++) {
		double v = mg_metric_value(&ms->decl[i], sums);
		if (isfinite(v))
			cJSON_AddNumberToObject(o, ms->decl[i].name, v);
		else
			cJSON_AddNullToObject(o, ms->decl[i].name);
	}
	return o;
}

/* memory.csv: the accounted device bytes by category over the run, one
 * row per change, and a last row for now. */
static int write_memory_csv(const struct mg_run_view *rs)
{
	struct mg_stats *st = rs->stats;
	char path[PATH_MAX + 16], tmp[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/memory.csv", rs->run_dir);
	/* written aside and renamed, as report.json: a full disk leaves the
	 * previous memory.csv and says why */
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = open_regular(tmp, "w");
	if (!f)
		return -1;
	fputs("t_s,step", f);
	for (int c = 0; c < MG_MEM_CAT_COUNT; c++)
		fprintf(f, ",%s", mg_mem_cat_name(c));
	fputs(",total,host_pinned\n", f);
	mg_stats_mem_log_now(st);
	for (size_t i = 0; i < st->mem_log_n; i++) {
		const struct mg_mem_row *r = &st->mem_log[i];
		int64_t total = 0;
		fprintf(f, "%.6f,%lld", r->t, (long long)r->step);
		for (int c = 0; c < MG_MEM_CAT_COUNT; c++) {
			fprintf(f, ",%lld", (long long)r->cur[c]);
			total += r->cur[c];
		}
		fprintf(f, ",%lld,%lld\n", (long long)total,
			(long long)r->host_pinned);
	}
	return replace_file(f, tmp, path, 0);
}

static cJSON *config_json(const struct mg_session *s)
{
	/* The effective configuration, as mgrun --print-config shows it. */
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return cJSON_CreateNull();
	mg_session_print(s, f);
	fclose(f);
	cJSON *j = cJSON_CreateString(buf);
	free(buf);
	return j;
}

static cJSON *plugins_json(const struct mg_session *s)
{
	cJSON *o = cJSON_CreateObject();
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++) {
		const struct mg_loaded_plugin *p = &s->plugin[i];
		cJSON *e = cJSON_AddObjectToObject(o, mg_section_names[i]);
		cJSON_AddStringToObject(e, "name", p->desc->name);
		cJSON_AddStringToObject(e, "version", p->desc->version);
		cJSON_AddStringToObject(e, "path", p->path);
	}
	return o;
}

/* One rank's numbers as a row of doubles, so one all-reduce gathers
 * every rank's on rank 0. */
enum {
	ROW_TIME = 0,
	ROW_COUNT = ROW_TIME + MG_T_COUNT,
	ROW_MEM = ROW_COUNT + MG_C_COUNT,
	ROW_MEM_TOTAL = ROW_MEM + MG_MEM_CAT_COUNT,
	ROW_PINNED,
	ROW_PAGEABLE,
	ROW_COMM_BUSY,
	ROW_DRV_METHOD, /* the driver's view (devmem.h); peak -1: none */
	ROW_DRV_PEAK,
	ROW_DRV_START,
	ROW_N,
};

static void fill_row(const struct mg_run_view *rs, double *row)
{
	const struct mg_stats *st = rs->stats;
	for (int i = 0; i < MG_T_COUNT; i++)
		row[ROW_TIME + i] = st->t_total[i];
	for (int i = 0; i < MG_C_COUNT; i++)
		row[ROW_COUNT + i] = (double)st->counters[i];
	for (int i = 0; i < MG_MEM_CAT_COUNT; i++)
		row[ROW_MEM + i] = (double)st->mem_peak[i];
	row[ROW_MEM_TOTAL] = (double)st->mem_total_peak;
	row[ROW_PINNED] = (double)st->host_pinned_peak;
	row[ROW_PAGEABLE] = (double)st->host_pageable_peak;
	row[ROW_COMM_BUSY] = st->comm_busy_total;
	row[ROW_DRV_METHOD] = st->devmem ? (double)st->devmem->method : 0;
	row[ROW_DRV_PEAK] =
		st->devmem ? (double)mg_devmem_peak(st->devmem) : -1;
	row[ROW_DRV_START] = st->devmem ? (double)st->devmem->at_start : -1;
}

/* The driver's view beside the accounted peak: null where not measured
 * (never a made-up 0). */
static void device_memory_json(cJSON *r, const double *row)
{
	cJSON *d = cJSON_AddObjectToObject(r, "device_memory");
	double peak = row[ROW_DRV_PEAK], start = row[ROW_DRV_START];
	cJSON_AddStringToObject(
		d, "method", mg_devmem_method_name((int)row[ROW_DRV_METHOD]));
	if (peak < 0) {
		cJSON_AddNullToObject(d, "driver_peak");
		cJSON_AddNullToObject(d, "at_start");
		cJSON_AddNullToObject(d, "unaccounted");
	} else {
		start = start > 0 ? start : 0;
		cJSON_AddNumberToObject(d, "driver_peak", peak);
		cJSON_AddNumberToObject(d, "at_start", start);
		cJSON_AddNumberToObject(d, "unaccounted",
					peak - start - row[ROW_MEM_TOTAL]);
	}
	cJSON_AddNumberToObject(d, "accounted_peak", row[ROW_MEM_TOTAL]);
}

/* Every rank calls this: rank r fills row r, the sum is the table. */
static int gather_rows(const struct mg_run_view *rs)
{
	const int world = rs->world;
	double *rows = calloc((size_t)world * ROW_N, sizeof *rows);
	if (!rows)
		return mg_error("out of memory");
	fill_row(rs, rows + (size_t)rs->rank * ROW_N);
	if (world > 1 &&
	    rs->comm->all_reduce_host(rs->comm, rows, (int64_t)world * ROW_N,
				      MG_F64, MG_REDUCE_SUM)) {
		free(rows);
		return mg_error_prefix("gathering per-rank statistics");
	}
	free(rs->rep->rank_rows);
	rs->rep->rank_rows = rows;
	return 0;
}

static cJSON *rank_json(const double *row, int rank)
{
	cJSON *r = cJSON_CreateObject();
	cJSON_AddNumberToObject(r, "rank", rank);
	cJSON *tm = cJSON_AddObjectToObject(r, "time_s");
	for (int i = 0; i < MG_T_COUNT; i++)
		cJSON_AddNumberToObject(tm, timer_names[i], row[ROW_TIME + i]);
	cJSON *c = cJSON_AddObjectToObject(r, "counters");
	for (int i = 0; i < MG_C_COUNT; i++)
		cJSON_AddNumberToObject(c, counter_names[i],
					row[ROW_COUNT + i]);
	/* Collectives: busy is their whole time in flight, exposed the part
	 * compute waited for (time_s.comm), overlapped the rest. */
	cJSON *cm = cJSON_AddObjectToObject(r, "comm");
	double busy = row[ROW_COMM_BUSY], exposed = row[ROW_TIME + MG_T_COMM];
	cJSON_AddNumberToObject(cm, "bytes", row[ROW_COUNT + MG_C_COMM_BYTES]);
	cJSON_AddNumberToObject(cm, "calls", row[ROW_COUNT + MG_C_COMM_CALLS]);
	cJSON_AddNumberToObject(cm, "busy_s", busy);
	cJSON_AddNumberToObject(cm, "exposed_s", exposed);
	cJSON_AddNumberToObject(cm, "overlapped_s",
				busy > exposed ? busy - exposed : 0);
	cJSON *m = cJSON_AddObjectToObject(r, "memory_peak_bytes");
	for (int i = 0; i < MG_MEM_CAT_COUNT; i++)
		cJSON_AddNumberToObject(m, mg_mem_cat_name(i),
					row[ROW_MEM + i]);
	cJSON_AddNumberToObject(m, "total", row[ROW_MEM_TOTAL]);
	cJSON_AddNumberToObject(m, "host_pinned", row[ROW_PINNED]);
	cJSON_AddNumberToObject(m, "host_pageable", row[ROW_PAGEABLE]);
	device_memory_json(r, row);
	return r;
}

bool mg_report_has_status(const char *run_dir, const char *status)
{
	char path[PATH_MAX + 16];
	size_t len;
	snprintf(path, sizeof path, "%s/report.json", run_dir);
	char *text = mg_file_read(path, 64 << 20, 0, &len);
	cJSON *root = text ? cJSON_Parse(text) : NULL;
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "status");
	bool has = cJSON_IsString(st) && !strcmp(st->valuestring, status);
	cJSON_Delete(root);
	free(text);
	return has;
}

int mg_report_write(const struct mg_run_view *rs, bool final)
{
	return mg_report_write_status(rs, final ? "finished" : "running", NULL,
				      true);
}

/* Rank 0's own row only, the others' zero: a failing run cannot gather
 * (the other ranks are elsewhere or gone). */
static int own_row_only(const struct mg_run_view *rs)
{
	double *rows = calloc((size_t)rs->world * ROW_N, sizeof *rows);
	if (!rows)
		return mg_error("out of memory");
	fill_row(rs, rows + (size_t)rs->rank * ROW_N);
	free(rs->rep->rank_rows);
	rs->rep->rank_rows = rows;
	return 0;
}

int mg_report_write_status(const struct mg_run_view *rs, const char *status,
			   const char *error, bool collective)
{
	const struct mg_report *rep = rs->rep;
	if (collective
		    ? gather_rows(rs) || (rs->profile_gather &&
					  rs->profile_gather(rs->profile_arg))
		    : rs->rank == 0 && own_row_only(rs))
		return -1;
	if (rs->rank != 0)
		return 0;
	if (rep->csv)
		fflush(rep->csv);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "schema", REPORT_SCHEMA);
	cJSON_AddStringToObject(root, "mgrun_version", MG_VERSION);
	cJSON_AddStringToObject(root, "status", status);
	if (error)
		cJSON_AddStringToObject(root, "error", error);
	cJSON_AddStringToObject(root, "ini", rs->s->ini_path);
	cJSON_AddItemToObject(root, "config", config_json(rs->s));
	cJSON_AddItemToObject(root, "plugins", plugins_json(rs->s));
	cJSON *run = cJSON_AddObjectToObject(root, "run");
	cJSON_AddNumberToObject(run, "world", rs->world);
	cJSON_AddStringToObject(run, "device", rs->device);
	cJSON_AddStringToObject(run, "precision", mg_dtype_name(rs->precision));
	cJSON_AddNumberToObject(run, "batch_size", (double)rs->batch);
	cJSON_AddNumberToObject(run, "steps_per_epoch",
				(double)rs->steps_per_epoch);
	cJSON_AddNumberToObject(run, "total_steps", (double)rs->total_steps);
	cJSON_AddNumberToObject(run, "resumed_at_step", (double)rs->start_step);
	cJSON_AddNumberToObject(run, "skipped_steps",
				(double)rs->skipped_steps);
	cJSON_AddNumberToObject(run, "trainable_parameters",
				(double)rs->trainable_parameters);
	cJSON_AddNumberToObject(run, "wall_s", mg_now() - rs->t_begin);
	cJSON_AddNumberToObject(run, "setup_s", setup_seconds(rs));
	double samples = 0;
	for (int i = 0; i < rs->nep; i++)
		samples += (double)rs->ep[i].here_samples;
	cJSON_AddNumberToObject(run, "train_s", rep->train_s);
	cJSON_AddNumberToObject(run, "samples_per_s",
				rep->train_s > 0 ? samples / rep->train_s : 0);
	cJSON_AddItemToObject(run, "step_s", step_time_json(rep));
	if (rs->nep && rs->ep[rs->nep - 1].has_test)
		cJSON_AddNumberToObject(run, "test_accuracy",
					rs->ep[rs->nep - 1].test_acc);
	else
		cJSON_AddNullToObject(run, "test_accuracy");
	cJSON *files = cJSON_AddObjectToObject(root, "files");
	cJSON_AddStringToObject(files, "steps", "steps.csv");
	cJSON_AddStringToObject(files, "memory", "memory.csv");
	cJSON_AddNumberToObject(files, "memory_rows_dropped",
				(double)rs->stats->mem_log_dropped);
	cJSON *eps = cJSON_AddArrayToObject(root, "epochs");
	for (int i = 0; i < rs->nep; i++) {
		const struct mg_epoch_stats *e = &rs->ep[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "epoch", (double)e->epoch);
		cJSON_AddNumberToObject(o, "steps", (double)e->steps);
		cJSON_AddNumberToObject(o, "samples", (double)e->samples);
		cJSON_AddNumberToObject(o, "train_loss", e->train_loss);
		cJSON_AddNumberToObject(o, "train_accuracy", e->train_acc);
		if (e->has_test) {
			cJSON_AddNumberToObject(o, "test_loss", e->test_loss);
			cJSON_AddNumberToObject(o, "test_accuracy",
						e->test_acc);
		}
		cJSON_AddNumberToObject(o, "seconds", e->seconds);
		cJSON_AddNumberToObject(
			o, "samples_per_s",
			e->seconds > 0 ? (double)e->samples / e->seconds : 0);
		if (e->tokens) {
			cJSON_AddNumberToObject(o, "tokens", (double)e->tokens);
			cJSON_AddNumberToObject(
				o, "tokens_per_s",
				e->seconds > 0 ? (double)e->tokens / e->seconds
					       : 0);
		}
		cJSON_AddItemToObject(o, "train_metrics",
				      metrics_json(rs->metrics, e->train_sums));
		if (e->has_test)
			cJSON_AddItemToObject(
				o, "test_metrics",
				metrics_json(rs->metrics, e->test_sums));
		cJSON_AddItemToArray(eps, o);
	}
	if (rs->nevals) { /* run.eval_every's, inside epochs */
		cJSON *evs = cJSON_AddArrayToObject(root, "evals");
		for (int i = 0; i < rs->nevals; i++) {
			const struct mg_eval_point *v = &rs->evals[i];
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "step", (double)v->step);
			cJSON_AddNumberToObject(o, "samples",
						(double)v->samples);
			const double c = v->sums[MG_METRIC_COUNT];
			cJSON_AddNumberToObject(
				o, "test_loss",
				c > 0 ? v->sums[MG_METRIC_LOSS_SUM] / c : 0);
			cJSON_AddItemToObject(
				o, "test_metrics",
				metrics_json(rs->metrics, v->sums));
			cJSON_AddItemToArray(evs, o);
		}
	}
	cJSON *ranks = cJSON_AddArrayToObject(root, "ranks");
	for (int r = 0; r < rs->world; r++)
		cJSON_AddItemToArray(
			ranks,
			rank_json(rep->rank_rows + (size_t)r * ROW_N, r));
	/* the profile's numbers are gathered ones */
	cJSON *prof = collective && rs->profile_json
			      ? rs->profile_json(rs->profile_arg)
			      : NULL;
	if (prof)
		cJSON_AddItemToObject(root, "profile", prof);
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	char path[PATH_MAX + 16], tmp[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/report.json", rs->run_dir);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	int rc = 0;
	if (!f)
		rc = mg_error("%s: cannot write: %s", tmp, strerror(errno));
	else
		rc = replace_file(f, tmp, path,
				  fputs(text, f) < 0 || fputc('\n', f) < 0
					  ? (errno ? errno : EIO)
					  : 0);
	free(text);
	return rc ? rc : write_memory_csv(rs);
}

static void human_bytes(char *out, size_t n, double b)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(out, n, "%.1f %s", b, u[i]);
}

/* Per rank: what it read, copied and computed, and what its collectives
 * cost - the numbers that tell ddp, ddp_rr and ddp_ds apart. */
static void rank_table(const struct mg_run_view *rs, FILE *f)
{
	fprintf(f, "rank  read     computed  h2d         comm        "
		   "comm busy  exposed  overlapped\n");
	for (int r = 0; r < rs->world; r++) {
		const double *row = rs->rep->rank_rows + (size_t)r * ROW_N;
		char h[32], c[32];
		human_bytes(h, sizeof h, row[ROW_COUNT + MG_C_H2D_BYTES]);
		human_bytes(c, sizeof c, row[ROW_COUNT + MG_C_COMM_BYTES]);
		double busy = row[ROW_COMM_BUSY];
		double exp = row[ROW_TIME + MG_T_COMM];
		fprintf(f,
			"%-4d  %-7.0f  %-8.0f  %-10s  %-10s  %8.3fs  "
			"%6.3fs  %9.3fs\n",
			r, row[ROW_COUNT + MG_C_SAMPLES_READ],
			row[ROW_COUNT + MG_C_SAMPLES_COMPUTED], h, c, busy, exp,
			busy > exp ? busy - exp : 0);
	}
}

void mg_report_summary(const struct mg_run_view *rs, FILE *f)
{
	const struct mg_report *rep = rs->rep;
	const struct mg_stats *st = rs->stats;
	double busy = 0;
	for (int i = 0; i < MG_T_COUNT; i++)
		busy += st->t_total[i];
	fprintf(f, "\n== summary (%s) ==\n", rs->run_dir);
	if (rs->nep) {
		const struct mg_epoch_stats *e = &rs->ep[rs->nep - 1];
		char m[256];
		if (e->has_test && !e->tokens)
			fprintf(f, "test accuracy   %.2f%%  (loss %.4f)\n",
				100 * e->test_acc, e->test_loss);
		else if (e->has_test)
			fprintf(f, "test            %s\n",
				mg_metric_format(rs->metrics, e->test_sums, m,
						 sizeof m));
		fprintf(f, "train loss      %.4f  (last epoch)\n",
			e->train_loss);
	}
	double samples = 0, tokens = 0,
	       steps = (double)(rs->total_steps - rs->start_step);
	for (int i = 0; i < rs->nep; i++) {
		samples += (double)rs->ep[i].here_samples;
		tokens += (double)rs->ep[i].here_tokens;
	}
	double wall = mg_now() - rs->t_begin;
	fprintf(f,
		"throughput      %.1f samples/s over %.1f s of training "
		"steps%s\n",
		rep->train_s > 0 ? samples / rep->train_s : 0, rep->train_s,
		rs->world > 1 ? " (all ranks)" : "");
	if (tokens > 0)
		fprintf(f, "                %.1f label tokens/s\n",
			rep->train_s > 0 ? tokens / rep->train_s : 0);
	double *v = sorted_step_times(rep);
	if (v) {
		size_t n = rep->step_s.n;
		fprintf(f,
			"step time       %.2f ms median, %.2f-%.2f ms p10-p90 "
			"over %zu steady steps\n",
			1e3 * mg_quantile_sorted(v, n, 0.5),
			1e3 * mg_quantile_sorted(v, n, 0.1),
			1e3 * mg_quantile_sorted(v, n, 0.9), n);
		free(v);
	}
	fprintf(f, "phase (rank 0)  seconds   ms/step   share\n");
	for (int i = 0; i < MG_T_COUNT; i++)
		fprintf(f, "  %-12s %9.3f  %8.3f  %5.1f%%\n", timer_names[i],
			st->t_total[i],
			steps > 0 ? 1e3 * st->t_total[i] / steps : 0,
			busy > 0 ? 100 * st->t_total[i] / busy : 0);
	if (st->comm_busy_total > 0)
		fprintf(f,
			"  %-12s %9.3f  (collectives in flight; %.3f s "
			"overlapped with compute)\n",
			"comm busy", st->comm_busy_total,
			st->comm_busy_total > st->t_total[MG_T_COMM]
				? st->comm_busy_total - st->t_total[MG_T_COMM]
				: 0);
	fprintf(f, "memory peak by category\n");
	for (int i = 0; i < MG_MEM_CAT_COUNT; i++) {
		char b[32];
		human_bytes(b, sizeof b, (double)st->mem_peak[i]);
		fprintf(f, "  %-12s %12s\n", mg_mem_cat_name(i), b);
	}
	char b[32];
	human_bytes(b, sizeof b, (double)st->mem_total_peak);
	fprintf(f, "  %-12s %12s\n", "total", b);
	if (st->devmem) {
		char d[256];
		fprintf(f, "%s\n",
			mg_devmem_describe(st->devmem, st->mem_total_peak, d,
					   sizeof d));
	}
	human_bytes(b, sizeof b, (double)st->counters[MG_C_H2D_BYTES]);
	fprintf(f, "host->device    %s\n", b);
	if (rs->world > 1)
		rank_table(rs, f);
	if (rs->profile_summary)
		rs->profile_summary(rs->profile_arg, f);
	fprintf(f,
		"wall time       %.1f s (setup %.1f s); report "
		"%s/report.json\n",
		wall, setup_seconds(rs), rs->run_dir);
}
