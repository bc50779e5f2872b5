/*
 * stats.c - phase timers, counters and memory accounting per rank.
 */
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

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

void mg_stats_step_begin(struct mg_stats *s)
{
	memset(s->t_step, 0, sizeof s->t_step);
}

void mg_timer_start(struct mg_ctx *ctx, enum mg_timer t)
{
	if (!ctx->stats || ctx->stats->paused)
		return;
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

void mg_stats_mem(struct mg_stats *s, enum mg_mem_cat c, int64_t delta,
		  int pinned_host)
{
	if (pinned_host) {
		s->host_pinned_cur += delta;
		if (s->host_pinned_cur > s->host_pinned_peak)
			s->host_pinned_peak = s->host_pinned_cur;
		return;
	}
	s->mem_cur[c] += delta;
	if (s->mem_cur[c] > s->mem_peak[c])
		s->mem_peak[c] = s->mem_cur[c];
	s->mem_total_cur += delta;
	if (s->mem_total_cur > s->mem_total_peak)
		s->mem_total_peak = s->mem_total_cur;
}
