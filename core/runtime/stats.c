/*
 * stats.c - phase timers, counters and memory accounting per rank.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/devmem.h"
#include "runtime/nvtx.h"
#include "runtime/runtime.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

/* An NVTX range per phase ([profile] nvtx); a bit per timer pairs each
 * pop with its push even if the stats are paused in between. */
static _Thread_local unsigned nvtx_open;

static void nvtx_begin(enum mg_timer t)
{
	static const char *const names[MG_T_COUNT] = {
		"data", "h2d", "forward", "backward", "comm", "optimizer"};
	if (!mg_nvtx_enabled() || (nvtx_open & 1u << t))
		return;
	mg_nvtx_push(names[t]);
	nvtx_open |= 1u << t;
}

static void nvtx_end(enum mg_timer t)
{
	if (!(nvtx_open & 1u << t))
		return;
	mg_nvtx_pop();
	nvtx_open &= ~(1u << t);
}

#ifdef MG_HAVE_CUDA
/* Device phases on a GPU are timed with events on the compute stream (the
 * host only queues work); reading data is host work, timed on the host. */
static bool on_gpu(const struct mg_ctx *ctx, enum mg_timer t)
{
	return t != MG_T_DATA && ctx->dev && ctx->dev->kind == MG_DEV_CUDA;
}
#endif

double mg_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mg_stats_step_begin(struct mg_stats *s, int64_t step)
{
	memset(s->t_step, 0, sizeof s->t_step);
	s->step = step;
	s->mem_step_peak = s->mem_total_cur;
	s->comm_busy_step = 0;
}

int mg_stats_mem_log_start(struct mg_stats *s, size_t cap)
{
	s->mem_log = calloc(cap, sizeof *s->mem_log);
	if (!s->mem_log)
		return mg_error("out of memory for the memory timeline");
	s->mem_log_cap = cap;
	s->mem_log_n = 0;
	s->mem_log_dropped = 0;
	s->mem_log_t0 = mg_now();
	return 0;
}

void mg_stats_mem_log_now(struct mg_stats *s)
{
	if (!s->mem_log)
		return;
	double t = mg_now() - s->mem_log_t0;
	struct mg_mem_row *r = s->mem_log + s->mem_log_n;
	if (s->mem_log_n && r[-1].host_pinned == s->host_pinned_cur &&
	    !memcmp(r[-1].cur, s->mem_cur, sizeof r->cur))
		return; /* nothing changed (an empty buffer) */
	/* Changes in the same microsecond and step are one row: a buffer
	 * freed and grown at once is a step, not a dip. */
	if (s->mem_log_n && r[-1].step == s->step && t - r[-1].t < 1e-6)
		r--;
	else if (s->mem_log_n == s->mem_log_cap) {
		s->mem_log_dropped++;
		return;
	} else
		s->mem_log_n++;
	r->t = t;
	r->step = s->step;
	memcpy(r->cur, s->mem_cur, sizeof r->cur);
	r->host_pinned = s->host_pinned_cur;
}

void mg_stats_free(struct mg_stats *s)
{
	free(s->mem_log);
	s->mem_log = NULL;
	s->mem_log_n = s->mem_log_cap = 0;
}

void mg_timer_start(struct mg_ctx *ctx, enum mg_timer t)
{
	if (!ctx->stats || ctx->stats->paused)
		return;
	nvtx_begin(t);
#ifdef MG_HAVE_CUDA
	if (on_gpu(ctx, t)) {
		mg_cuda_timer_start(ctx->dev, t);
		return;
	}
#endif
	ctx->stats->t_start[t] = mg_now();
}

void mg_timer_stop(struct mg_ctx *ctx, enum mg_timer t)
{
	struct mg_stats *s = ctx->stats;
	nvtx_end(t);
	if (!s || s->paused)
		return;
#ifdef MG_HAVE_CUDA
	if (on_gpu(ctx, t)) {
		mg_cuda_timer_stop(ctx->dev, t);
		return;
	}
#endif
	double dt = mg_now() - s->t_start[t];
	s->t_step[t] += dt;
	s->t_total[t] += dt;
}

void mg_stats_step_end(struct mg_ctx *ctx)
{
#ifdef MG_HAVE_CUDA
	struct mg_stats *s = ctx->stats;
	if (s && ctx->dev && ctx->dev->kind == MG_DEV_CUDA) {
		double dt[MG_T_COUNT];
		mg_cuda_timers_collect(ctx->dev, dt);
		for (int t = 0; t < MG_T_COUNT; t++) {
			s->t_step[t] += dt[t];
			s->t_total[t] += dt[t];
		}
		if (s->devmem) /* the step's work is done: a boundary */
			mg_devmem_sample(s->devmem);
	}
#else
	(void)ctx;
#endif
}

void mg_count(struct mg_ctx *ctx, enum mg_counter c, int64_t v)
{
	if (!ctx->stats)
		return;
	if (ctx->stats->capturing)
		ctx->stats->graph_counters[c] += v;
	else
		ctx->stats->counters[c] += v;
}

void mg_stats_capture(struct mg_stats *s, bool begin, bool ok)
{
	/* A new capture starts from zero; a failed one is forgotten. */
	if (begin || !ok)
		memset(s->graph_counters, 0, sizeof s->graph_counters);
	s->capturing = begin;
}

void mg_stats_replay(struct mg_stats *s)
{
	for (int c = 0; c < MG_C_COUNT; c++)
		s->counters[c] += s->graph_counters[c];
}

void mg_stats_comm_device(struct mg_stats *s, int64_t bytes)
{
	if (bytes == s->comm_device_bytes)
		return;
	mg_stats_mem(s, MG_MEM_LIBRARY, bytes - s->comm_device_bytes,
		     MG_STATS_DEVICE);
	s->comm_device_bytes = bytes;
}

void mg_stats_mem(struct mg_stats *s, enum mg_mem_cat c, int64_t delta,
		  enum mg_stats_host host)
{
	if (host == MG_STATS_PAGEABLE) {
		s->host_pageable_cur += delta;
		if (s->host_pageable_cur > s->host_pageable_peak)
			s->host_pageable_peak = s->host_pageable_cur;
		return;
	}
	if (host == MG_STATS_PINNED) {
		s->host_pinned_cur += delta;
		if (s->host_pinned_cur > s->host_pinned_peak)
			s->host_pinned_peak = s->host_pinned_cur;
		mg_stats_mem_log_now(s);
		return;
	}
	s->mem_cur[c] += delta;
	if (s->mem_cur[c] > s->mem_peak[c])
		s->mem_peak[c] = s->mem_cur[c];
	s->mem_total_cur += delta;
	if (s->mem_total_cur > s->mem_total_peak)
		s->mem_total_peak = s->mem_total_cur;
	if (s->mem_total_cur > s->mem_step_peak)
		s->mem_step_peak = s->mem_total_cur;
	mg_stats_mem_log_now(s);
}
