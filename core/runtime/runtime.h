/*
 * runtime.h - core-private declarations shared by the runtime services
 * (logging set-up, memory accounting hooks, the stats object).
 */
#ifndef MG_RUNTIME_H
#define MG_RUNTIME_H

#include "mg_internal.h"

#include <stdio.h>

#include "mg/mg.h"

/* Logging: minimum level and this process's rank (-1: no prefix). */
void mg_log_configure(enum mg_log_level lvl, int rank);

/* Per-rank counters, phase timers and memory accounting. */
struct mg_stats {
	/* Phase time: this step (reset by mg_stats_step_begin) and total. */
	double t_start[MG_T_COUNT];
	double t_step[MG_T_COUNT];
	double t_total[MG_T_COUNT];
	int64_t counters[MG_C_COUNT];
	/* Memory by category: current and peak bytes, device and host. */
	int64_t mem_cur[MG_MEM_CAT_COUNT], mem_peak[MG_MEM_CAT_COUNT];
	int64_t mem_total_cur, mem_total_peak;
	int64_t host_pinned_cur, host_pinned_peak;
	int64_t host_pageable_cur, host_pageable_peak;
	/* The driver's view of this process's device memory (devmem.h;
	 * NULL on the CPU), and the communicator's device bytes already in
	 * MG_MEM_LIBRARY (mg_stats_comm_device). */
	struct mg_devmem *devmem;
	int64_t comm_device_bytes;
	/* Collectives in flight, overlapped or not (MG_T_COMM is the part
	 * compute waited for). */
	double comm_busy_total;
	bool paused; /* timers off (evaluation) */
	/* While a step is captured as a CUDA graph, counts made inside it
	 * (a strategy's offload copies) are kept here and added again by
	 * every replay (mg_stats_replay), since replays run no host code. */
	bool capturing;
	int64_t graph_counters[MG_C_COUNT];
	/* This step: peak device bytes since it began, collectives' busy
	 * time (for steps.csv). */
	int64_t step, mem_step_peak;
	double comm_busy_step;
	/* Memory over time: one row per change of the accounted bytes, for
	 * memory.csv (mg_stats_mem_log_start; bounded, the rest counted). */
	struct mg_mem_row *mem_log;
	size_t mem_log_n, mem_log_cap;
	int64_t mem_log_dropped;
	double mem_log_t0;
};

/* One row of the memory timeline: seconds since the log started, the
 * step, current device bytes by category, and pinned host bytes. */
struct mg_mem_row {
	double t;
	int64_t step;
	int64_t cur[MG_MEM_CAT_COUNT];
	int64_t host_pinned;
};

/* Start logging memory changes (rows after cap are counted, not kept). */
int mg_stats_mem_log_start(struct mg_stats *s, size_t cap);
/* Append a row with the current values (the end of the timeline). */
void mg_stats_mem_log_now(struct mg_stats *s);
void mg_stats_free(struct mg_stats *s);

/* series.c: a growable list of doubles (zero-initialised is empty) and
 * quantiles with linear interpolation (numpy's default); NAN when empty. */
struct mg_series {
	double *v;
	size_t n, cap;
};
int mg_series_add(struct mg_series *s, double v);
void mg_series_free(struct mg_series *s);
MG_INTERNAL void mg_sort_doubles(double *v, size_t n);
MG_INTERNAL double mg_quantile_sorted(const double *sorted, size_t n, double q);
MG_INTERNAL double mg_quantile(const double *v, size_t n, double q);
MG_INTERNAL double mg_median(const double *v, size_t n);
void mg_stats_step_begin(struct mg_stats *s, int64_t step);
/* Fold the step's device-side timers into the totals (after the step's
 * work has been waited for). */
void mg_stats_step_end(struct mg_ctx *ctx);
/* Graph capture of the step begins / ends (ok: it will be replayed). */
void mg_stats_capture(struct mg_stats *s, bool begin, bool ok);
/* One replay of the captured step was launched. */
void mg_stats_replay(struct mg_stats *s);
/* Where accounted bytes live: the device (or, on the CPU device, host
 * memory), or host memory beside a GPU, pinned or pageable. */
enum mg_stats_host { MG_STATS_DEVICE, MG_STATS_PINNED, MG_STATS_PAGEABLE };
void mg_stats_mem(struct mg_stats *s, enum mg_mem_cat c, int64_t delta,
		  enum mg_stats_host host);
/* The communicator now holds bytes of device memory outside mg_buf
 * (NCCL's buffers): MG_MEM_LIBRARY follows. */
void mg_stats_comm_device(struct mg_stats *s, int64_t bytes);

/* buf_window.c: the buffers mg_buf_alloc_comm took from communicators'
 * windows. add records one (0, or -1 out of memory); take forgets ptr
 * and returns 1 with its communicator (NULL for an orphan) if it was
 * one; orphan: communicator c is going away and released its windows
 * itself, so mg_buf_free of such a buffer only forgets it. */
int mg_buf_window_add(void *ptr, struct mg_comm *c);
int mg_buf_window_take(void *ptr, struct mg_comm **c);
void mg_buf_windows_orphan(const struct mg_comm *c);
/* How many windows are lent and not handed back (orphans not counted):
 * while any are, the trainer does not capture steps into CUDA graphs,
 * since their all-gathers cannot be captured (comm_nccl.c says why). */
int mg_buf_windows_live(void);

/* metrics.c: a declared metric's value from the sums (exp applied for
 * MG_SHOW_EXP; NAN when the denominator is 0), and all of a spec's
 * metrics as "loss 2.3726 ppl 10.73 acc 74.92%" into buf. */
double mg_metric_value(const struct mg_metric_decl *d, const double *sums);
const char *mg_metric_format(const struct mg_metric_spec *s, const double *sums,
			     char *buf, size_t len);

#endif
