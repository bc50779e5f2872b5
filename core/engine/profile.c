/*
 * profile.c - the [profile] window: CUPTI collects CUDA API calls, memory
 * copies and kernels from the start of step first_step to the end of the
 * window's last step (after `steps` steps, or the first step that ends
 * `seconds` after the window opened, or the run's end), beside the
 * pipeline's own counters over exactly the same interval; step wall times
 * inside and outside the window give the profiler's overhead. Every rank
 * profiles itself; report.json gets every rank's Table 1 row (one
 * all-reduce, like report.c's per-rank table) and rank 0's top kernels
 * and API calls. NVTX ranges (per phase in stats.c, per step here) are
 * independent of the window: they are for an outside tool (nsys).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trainer.h"
#include "runtime/nvtx.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cupti_prof.h"
#endif

/* The seed paper's Table 1, in report.json's order. */
enum {
	M_LAUNCH = 0,
	M_STREAM_SYNC,
	M_EVENT_SYNC,
	M_EVENT_DESTROY,
	M_MEMCPY_ASYNC,
	M_GRAPH_LAUNCH,
	M_H2D,
	M_D2H,
	M_D2D,
	M_AG,
	M_RS,
	M_AR,
	M_BC,
	M_COMPUTE,
	M_N,
};

/* A rank's row: (count, seconds, bytes) per metric, then 1 when the
 * rank's window has closed. */
enum { ROW_VALID = 3 * M_N, ROW_N };

/* The pipeline's counters compared with CUPTI's over the window. */
#define NPIPE 4

/* P_OFF: no collection (disabled, not cuda); P_WAIT: before the window;
 * P_OPEN: collecting; P_DONE: collected. The same on every rank but for
 * the step a `seconds` window closes at. */
enum { P_OFF, P_WAIT, P_OPEN, P_DONE };

struct mg_profile {
	int state;
	bool failed;	 /* the window could not open (mg_error set) */
	bool nvtx;	 /* [profile] nvtx */
	bool step_range; /* a "step N" NVTX range is open */
	int64_t first, nsteps, last, cur;
	double seconds, t_open, window_s;
	int top;
	int64_t c0[NPIPE], c1[NPIPE]; /* pipeline counters at open, close */
	struct mg_series in, before, after; /* steady steps' wall seconds */
	double *rows;			    /* world x ROW_N, after gather */
#ifdef MG_HAVE_CUDA
	struct mg_cupti *cupti;
#endif
};

#ifdef MG_HAVE_CUDA
/* Memory copies kept for profile_memcpy.csv (the rest are aggregated). */
#define TIMELINE_CAP 200000
#define TOP_API 10

static const char *const metric_names[M_N] = {
	"cudaLaunchKernel",	"cudaStreamSynchronize",
	"cudaEventSynchronize", "cudaEventDestroy",
	"cudaMemcpyAsync",	"cudaGraphLaunch",
	"memcpy_h2d",		"memcpy_d2h",
	"memcpy_d2d",		"nccl_AllGather",
	"nccl_ReduceScatter",	"nccl_AllReduce",
	"nccl_Broadcast",	"kernels_compute"};
static const int pipe_counters[NPIPE] = {MG_C_H2D_BYTES, MG_C_D2H_BYTES,
					 MG_C_COMM_CALLS, MG_C_COMM_BYTES};
static const char *const pipe_names[NPIPE] = {"h2d_bytes", "d2h_bytes",
					      "comm_calls", "comm_bytes"};

/* Median of a and b together (NAN when both are empty). */
static double median2(const struct mg_series *a, const struct mg_series *b)
{
	size_t nb = b ? b->n : 0, n = a->n + nb;
	double *v = n ? malloc(n * sizeof *v) : NULL;
	if (!v)
		return NAN;
	if (a->n)
		memcpy(v, a->v, a->n * sizeof *v);
	if (nb)
		memcpy(v + a->n, b->v, nb * sizeof *v);
	mg_sort_doubles(v, n);
	double m = mg_quantile_sorted(v, n, 0.5);
	free(v);
	return m;
}

static int open_window(struct mg_trainer *t, int64_t step)
{
	struct mg_profile *p = t->prof;
	for (int i = 0; i < NPIPE; i++)
		p->c0[i] = t->r.stats.counters[pipe_counters[i]];
	if (mg_cupti_start(p->cupti))
		return mg_error_prefix("[profile] window at step %lld",
				       (long long)step);
	p->first = step;
	p->t_open = mg_now();
	p->state = P_OPEN;
	return 0;
}

/* After the window's last step (its device work waited for). */
static int close_window(struct mg_trainer *t)
{
	struct mg_profile *p = t->prof;
	p->window_s = mg_now() - p->t_open;
	for (int i = 0; i < NPIPE; i++)
		p->c1[i] = t->r.stats.counters[pipe_counters[i]];
	p->last = p->cur;
	p->state = P_DONE;
	if (mg_cupti_stop(p->cupti))
		return mg_error_prefix("[profile] end of the window");
	/* The host<->device traffic over time, one file per rank. */
	char path[PATH_MAX + 48];
	if (t->r.ctx.rank == 0)
		snprintf(path, sizeof path, "%s/profile_memcpy.csv",
			 t->r.run_dir);
	else
		snprintf(path, sizeof path, "%s/profile_memcpy.rank%d.csv",
			 t->r.run_dir, t->r.ctx.rank);
	if (mg_cupti_write_memcpy_csv(p->cupti, path))
		return -1;
	int64_t dropped = mg_cupti_dropped(p->cupti);
	int64_t tl = mg_cupti_timeline_dropped(p->cupti);
	if (dropped)
		mg_warn("[profile] CUPTI dropped %lld records (buffers full): "
			"the window's counts are low",
			(long long)dropped);
	if (t->r.ctx.rank != 0)
		return 0;
	if (tl)
		mg_info("[profile] %s holds the first %d memory copies; %lld "
			"more are in the totals only",
			path, TIMELINE_CAP, (long long)tl);
	mg_info("[profile] window closed: steps %lld to %lld, %.2f s",
		(long long)p->first, (long long)p->last, p->window_s);
	return 0;
}

static struct mg_cupti_stat metric(const struct mg_cupti *c, int m)
{
	switch (m) {
	case M_H2D:
		return mg_cupti_copies(c, MG_CUPTI_H2D);
	case M_D2H:
		return mg_cupti_copies(c, MG_CUPTI_D2H);
	case M_D2D:
		return mg_cupti_copies(c, MG_CUPTI_D2D);
	case M_AG:
		return mg_cupti_nccl(c, MG_CUPTI_ALL_GATHER);
	case M_RS:
		return mg_cupti_nccl(c, MG_CUPTI_REDUCE_SCATTER);
	case M_AR:
		return mg_cupti_nccl(c, MG_CUPTI_ALL_REDUCE);
	case M_BC:
		return mg_cupti_nccl(c, MG_CUPTI_BROADCAST);
	case M_COMPUTE:
		return mg_cupti_compute(c);
	default:
		return mg_cupti_api(c, metric_names[m]);
	}
}

static cJSON *num_or_null(double v)
{
	return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *profile_json(const struct mg_trainer *t)
{
	const struct mg_profile *p = t->prof;
	cJSON *o = cJSON_CreateObject();
	cJSON *w = cJSON_AddObjectToObject(o, "window");
	cJSON_AddNumberToObject(w, "first_step", (double)p->first);
	cJSON_AddNumberToObject(w, "last_step", (double)p->last);
	cJSON_AddNumberToObject(w, "steps", (double)(p->last - p->first + 1));
	cJSON_AddNumberToObject(w, "seconds", p->window_s);
	cJSON *pl = cJSON_AddObjectToObject(w, "pipeline");
	for (int i = 0; i < NPIPE; i++)
		cJSON_AddNumberToObject(pl, pipe_names[i],
					(double)(p->c1[i] - p->c0[i]));
	/* rank 0's memsets (zeroed gradients): device time outside the
	 * kernel lists */
	struct mg_cupti_stat ms = mg_cupti_memsets(p->cupti);
	cJSON *mj = cJSON_AddObjectToObject(o, "memset");
	cJSON_AddNumberToObject(mj, "count", (double)ms.count);
	cJSON_AddNumberToObject(mj, "seconds", ms.seconds);
	cJSON_AddNumberToObject(mj, "bytes", ms.bytes);
	cJSON *ov = cJSON_AddObjectToObject(o, "overhead");
	double in = median2(&p->in, NULL);
	double out = median2(&p->before, &p->after);
	cJSON_AddItemToObject(ov, "step_s_in_window", num_or_null(in));
	cJSON_AddItemToObject(ov, "step_s_outside", num_or_null(out));
	cJSON_AddItemToObject(ov, "ratio",
			      num_or_null(out > 0 ? in / out : NAN));
	cJSON_AddNumberToObject(ov, "cupti_processing_s",
				mg_cupti_processing_seconds(p->cupti));
	cJSON_AddNumberToObject(ov, "flush_s",
				mg_cupti_flush_seconds(p->cupti));
	cJSON *names = cJSON_AddArrayToObject(o, "metrics");
	for (int m = 0; m < M_N; m++)
		cJSON_AddItemToArray(names,
				     cJSON_CreateString(metric_names[m]));
	cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
	for (int r = 0; r < t->r.ctx.world; r++) {
		const double *row = p->rows + (size_t)r * ROW_N;
		cJSON *e = cJSON_CreateObject();
		cJSON_AddNumberToObject(e, "rank", r);
		for (int m = 0; m < M_N; m++) {
			cJSON *s = cJSON_AddObjectToObject(e, metric_names[m]);
			cJSON_AddNumberToObject(s, "count", row[3 * m]);
			cJSON_AddNumberToObject(s, "seconds", row[3 * m + 1]);
			cJSON_AddNumberToObject(s, "bytes", row[3 * m + 2]);
		}
		cJSON_AddItemToArray(ranks, e);
	}
	int n = p->top > TOP_API ? p->top : TOP_API;
	struct mg_cupti_named *top = calloc((size_t)n, sizeof *top);
	cJSON *tk = cJSON_AddArrayToObject(o, "top_kernels");
	cJSON *ta = cJSON_AddArrayToObject(o, "top_api");
	for (int list = 0; top && list < 2; list++) {
		int k = mg_cupti_top(p->cupti,
				     list ? MG_CUPTI_API : MG_CUPTI_KERNELS,
				     top, list ? TOP_API : p->top);
		for (int i = 0; i < k; i++) {
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "name", top[i].name);
			cJSON_AddNumberToObject(e, "count",
						(double)top[i].count);
			cJSON_AddNumberToObject(e, "seconds", top[i].seconds);
			cJSON_AddItemToArray(list ? ta : tk, e);
		}
	}
	free(top);
	return o;
}

static void human(char *out, size_t n, double b)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	if (i)
		snprintf(out, n, "%.2f %s", b, u[i]);
	else
		snprintf(out, n, "%.0f B", b);
}

static void summary(const struct mg_trainer *t, FILE *f)
{
	const struct mg_profile *p = t->prof;
	const double *row = p->rows; /* rank 0 */
	int64_t steps = p->last - p->first + 1;
	fprintf(f,
		"profile (CUPTI)  steps %lld-%lld (%lld steps, %.2f s), "
		"rank 0\n",
		(long long)p->first, (long long)p->last, (long long)steps,
		p->window_s);
	fprintf(f, "  %-24s %10s %12s %12s\n", "", "count", "seconds", "bytes");
	for (int m = 0; m < M_N; m++) {
		char b[32] = "";
		if (m >= M_H2D && m <= M_D2D)
			human(b, sizeof b, row[3 * m + 2]);
		fprintf(f, "  %-24s %10.0f %12.6f %12s\n", metric_names[m],
			row[3 * m], row[3 * m + 1], b);
	}
	struct mg_cupti_stat ms = mg_cupti_memsets(p->cupti);
	char mb[32];
	human(mb, sizeof mb, ms.bytes);
	fprintf(f, "  %-24s %10lld %12.6f %12s\n", "memset",
		(long long)ms.count, ms.seconds, mb);
	/* Libraries (cuDNN, cuBLAS, NCCL) launch through the driver. */
	struct mg_cupti_stat d = mg_cupti_api(p->cupti, "cuLaunchKernel");
	struct mg_cupti_stat dx = mg_cupti_api(p->cupti, "cuLaunchKernelEx");
	if (d.count || dx.count)
		fprintf(f, "  %-24s %10lld %12.6f   (driver API)\n",
			"cuLaunchKernel(Ex)", (long long)(d.count + dx.count),
			d.seconds + dx.seconds);
	if (t->r.ctx.world > 1) {
		fprintf(f, "  NCCL kernels (count/seconds)  AllGather  "
			   "ReduceScatter  AllReduce  Broadcast\n");
		for (int r = 0; r < t->r.ctx.world; r++) {
			const double *w = p->rows + (size_t)r * ROW_N;
			fprintf(f, "    rank %-4d", r);
			for (int m = M_AG; m <= M_BC; m++)
				fprintf(f, "  %6.0f/%.4f", w[3 * m],
					w[3 * m + 1]);
			fputc('\n', f);
		}
	}
	struct mg_cupti_named top[32];
	int k = mg_cupti_top(p->cupti, MG_CUPTI_KERNELS, top,
			     p->top < 32 ? p->top : 32);
	if (k)
		fprintf(f, "  top compute kernels: seconds, count, name\n");
	for (int i = 0; i < k; i++)
		fprintf(f, "  %10.6f %8lld  %.90s\n", top[i].seconds,
			(long long)top[i].count, top[i].name);
	double in = median2(&p->in, NULL);
	double out = median2(&p->before, &p->after);
	fprintf(f,
		"  overhead: median step %.3f ms in the window, %.3f ms "
		"outside (%.3f before, %.3f after): x%.3f; CUPTI processing "
		"%.3f s, flush %.3f s\n",
		1e3 * in, 1e3 * out, 1e3 * median2(&p->before, NULL),
		1e3 * median2(&p->after, NULL), out > 0 ? in / out : NAN,
		mg_cupti_processing_seconds(p->cupti),
		mg_cupti_flush_seconds(p->cupti));
	/* The independent check: the input pipeline's own count of the
	 * bytes it copied against CUPTI's, over the same interval; the
	 * difference is the trainer's per-step value uploads. */
	double pipe = (double)(p->c1[0] - p->c0[0]);
	double cupti = row[3 * M_H2D + 2];
	char a[32], b[32];
	human(a, sizeof a, pipe);
	human(b, sizeof b, cupti);
	fprintf(f,
		"  host->device in the window: pipeline %s, CUPTI %s "
		"(%+.0f B, %.1f B per step)\n",
		a, b, cupti - pipe, steps > 0 ? (cupti - pipe) / steps : 0);
}
#endif /* MG_HAVE_CUDA */

int mg_profile_init(struct mg_trainer *t)
{
	const struct mg_opts *o = t->r.s->profile;
	struct mg_profile *p = calloc(1, sizeof *p);
	if (!p)
		return mg_error("out of memory");
	t->prof = p;
	p->nvtx = mg_opt_bool(o, "nvtx");
	mg_nvtx_enable(p->nvtx);
	if (!mg_opt_bool(o, "enabled"))
		return 0;
	if (t->r.dev.kind != MG_DEV_CUDA) {
		if (t->r.ctx.rank == 0)
			mg_warn("[profile] enabled = true: CUPTI profiling "
				"needs run.device = cuda; this run continues "
				"without it");
		return 0;
	}
#ifdef MG_HAVE_CUDA
	p->first = mg_opt_int(o, "first_step");
	p->nsteps = mg_opt_int(o, "steps");
	p->seconds = mg_opt_float(o, "seconds");
	p->top = (int)mg_opt_int(o, "top_kernels");
	if (p->first < t->start_step)
		p->first = t->start_step;
	/* Attach CUPTI now, before the step is captured as a CUDA graph:
	 * profiling replays of a graph captured before CUPTI's first attach
	 * is the known way to crash or hang. */
	p->cupti = mg_cupti_init(TIMELINE_CAP);
	if (!p->cupti)
		return mg_error_prefix("[profile]");
	p->state = P_WAIT;
	if (t->r.ctx.rank != 0)
		return 0;
	if (p->first >= t->total_steps)
		mg_warn("[profile] first_step = %lld is past the run's last "
			"step (%lld): nothing will be profiled",
			(long long)p->first, (long long)t->total_steps - 1);
	else if (p->first < t->start_step + 3)
		mg_warn("[profile] first_step = %lld: the window includes "
			"the eager and CUDA-graph capture steps (%lld to %lld)",
			(long long)p->first, (long long)t->start_step,
			(long long)t->start_step + 2);
#endif
	return 0;
}

void mg_profile_step_begin(struct mg_trainer *t, int64_t step)
{
	struct mg_profile *p = t->prof;
	if (!p)
		return;
	p->cur = step;
	if (p->nvtx) {
		char name[40];
		snprintf(name, sizeof name, "step %lld", (long long)step);
		mg_nvtx_push(name);
		p->step_range = true;
	}
#ifdef MG_HAVE_CUDA
	/* A failure is returned by mg_profile_step_end (the trainer checks
	 * that one only). */
	if (p->state == P_WAIT && step >= p->first && open_window(t, step)) {
		p->state = P_OFF;
		p->failed = true;
	}
#endif
}

int mg_profile_step_end(struct mg_trainer *t, int64_t step, double step_seconds)
{
	struct mg_profile *p = t->prof;
	if (!p)
		return 0;
	if (p->step_range) {
		mg_nvtx_pop();
		p->step_range = false;
	}
	if (p->failed)
		return -1;
	if (p->state == P_OFF)
		return 0;
	/* Steady steps: after the eager and capture steps, and not the
	 * first step of an epoch (re-captured after evaluation). */
	bool steady =
		step >= t->start_step + 3 && step % t->steps_per_epoch != 0;
	int rc = 0;
	if (p->state == P_OPEN)
		rc = mg_series_add(&p->in, step_seconds);
	else if (steady)
		rc = mg_series_add(p->state == P_WAIT ? &p->before : &p->after,
				   step_seconds);
	if (rc)
		return rc;
#ifdef MG_HAVE_CUDA
	if (p->state != P_OPEN)
		return 0;
	/* Closed here at the run's last step too, so the final evaluation
	 * stays out of the window (run.stop_after: mg_profile_finish). */
	bool done = step + 1 >= t->total_steps;
	if (p->seconds > 0)
		done = done || mg_now() - p->t_open >= p->seconds;
	else if (p->nsteps > 0)
		done = done || step + 1 >= p->first + p->nsteps;
	if (done)
		return close_window(t);
#endif
	return 0;
}

int mg_profile_finish(struct mg_trainer *t)
{
#ifdef MG_HAVE_CUDA
	if (t->prof && t->prof->state == P_OPEN)
		return close_window(t);
#else
	(void)t;
#endif
	return 0;
}

int mg_profile_gather(struct mg_trainer *t)
{
	struct mg_profile *p = t->prof;
	/* The state is P_OFF on every rank or on none (same configuration
	 * and device kind), so either every rank all-reduces here or none. */
	if (!p || p->state == P_OFF)
		return 0;
	const int world = t->r.ctx.world;
	double *rows = calloc((size_t)world * ROW_N, sizeof *rows);
	if (!rows)
		return mg_error("out of memory");
#ifdef MG_HAVE_CUDA
	double *row = rows + (size_t)t->r.ctx.rank * ROW_N;
	if (p->state == P_DONE) {
		for (int m = 0; m < M_N; m++) {
			struct mg_cupti_stat s = metric(p->cupti, m);
			row[3 * m] = (double)s.count;
			row[3 * m + 1] = s.seconds;
			row[3 * m + 2] = s.bytes;
		}
		row[ROW_VALID] = 1;
	}
#endif
	if (world > 1 &&
	    t->r.comm->all_reduce_host(t->r.comm, rows, (int64_t)world * ROW_N,
				       MG_F64, MG_REDUCE_SUM)) {
		free(rows);
		return mg_error_prefix("gathering the profile of every rank");
	}
	free(p->rows);
	p->rows = rows;
	return 0;
}

cJSON *mg_profile_json(const struct mg_trainer *t)
{
	const struct mg_profile *p = t->prof;
	if (!p || p->state != P_DONE || !p->rows)
		return NULL;
#ifdef MG_HAVE_CUDA
	return profile_json(t);
#else
	return NULL;
#endif
}

void mg_profile_summary(const struct mg_trainer *t, FILE *f)
{
	const struct mg_profile *p = t->prof;
	if (!p || p->state != P_DONE || !p->rows)
		return;
#ifdef MG_HAVE_CUDA
	summary(t, f);
#else
	(void)f;
#endif
}

void mg_profile_free(struct mg_trainer *t)
{
	struct mg_profile *p = t->prof;
	if (!p)
		return;
	if (p->step_range)
		mg_nvtx_pop();
#ifdef MG_HAVE_CUDA
	mg_cupti_free(p->cupti);
#endif
	mg_series_free(&p->in);
	mg_series_free(&p->before);
	mg_series_free(&p->after);
	free(p->rows);
	free(p);
	t->prof = NULL;
}
