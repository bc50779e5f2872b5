/*
 * cupti_prof.h - CUDA API calls, memory copies and kernels measured with
 * the CUPTI Activity API over a window of a run, aggregated as records
 * arrive (no raw records are kept, except a capped timeline of memory
 * copies). A runtime service: nothing here knows the engine. Compiled
 * only with MG_HAVE_CUDA.
 *
 * CUPTI's buffer callbacks are process-global, so there is at most one
 * collector per process. It is attached (mg_cupti_init) before the run
 * captures any CUDA graph - profiling a graph that was captured before
 * CUPTI was first attached is known to hang or crash on some CUDA
 * versions - and collects only between mg_cupti_start and mg_cupti_stop.
 * CUPTI is never detached (re-initialisation after a teardown with CUDA
 * graphs is the other known crash).
 */
#ifndef MG_CUPTI_PROF_H
#define MG_CUPTI_PROF_H

#include <stdint.h>

/* One aggregate: occurrences, seconds (host-side call time for API calls,
 * device time for copies and kernels) and bytes (copies). */
struct mg_cupti_stat {
	int64_t count;
	double seconds;
	double bytes;
};

enum mg_cupti_copy {
	MG_CUPTI_H2D = 0,
	MG_CUPTI_D2H,
	MG_CUPTI_D2D,
	MG_CUPTI_COPY_OTHER, /* host to host, peer, arrays */
	MG_CUPTI_COPY_N,
};

/* NCCL kernels (names holding "ncclDevKernel" or "ncclKernel") by the
 * collective their name holds. */
enum mg_cupti_nccl {
	MG_CUPTI_ALL_GATHER = 0,
	MG_CUPTI_REDUCE_SCATTER,
	MG_CUPTI_ALL_REDUCE,
	MG_CUPTI_BROADCAST,
	MG_CUPTI_NCCL_OTHER, /* send/recv, reduce, generic kernels */
	MG_CUPTI_NCCL_N,
};

/* A named aggregate of a top list; name lives as long as the collector. */
struct mg_cupti_named {
	const char *name;
	int64_t count;
	double seconds;
};

enum mg_cupti_list { MG_CUPTI_KERNELS, MG_CUPTI_API };

struct mg_cupti;

/* Attach CUPTI (buffer callbacks) without collecting anything yet.
 * timeline_cap: memory copies kept for mg_cupti_write_memcpy_csv (the
 * rest are aggregated only). NULL with mg_error set (CUPTI's message) on
 * failure, or when a collector exists already. */
struct mg_cupti *mg_cupti_init(int64_t timeline_cap);
/* Collect runtime and driver API calls, memory copies, memsets and
 * kernels from now on (only once per collector). */
int mg_cupti_start(struct mg_cupti *c);
/* Stop collecting: the caller has waited for the device work it wants
 * counted; every buffer is flushed (forced) and aggregated, then the
 * activity kinds are disabled. */
int mg_cupti_stop(struct mg_cupti *c);
/* Stops a collection still running (errors ignored), frees the tables.
 * CUPTI itself stays attached, idle. */
void mg_cupti_free(struct mg_cupti *c);

/* Queries, after mg_cupti_stop. */
/* API calls whose canonical name is `name` (runtime and driver; the
 * canonical name drops leading underscores and the _vNNNN, _ptsz and
 * _ptds suffixes: CUDA 13's <<<>>> launches, __cudaLaunchKernel, count as
 * cudaLaunchKernel). */
struct mg_cupti_stat mg_cupti_api(const struct mg_cupti *c, const char *name);
struct mg_cupti_stat mg_cupti_copies(const struct mg_cupti *c,
				     enum mg_cupti_copy kind);
/* Device memsets (cudaMemsetAsync: zeroed gradients, buffers), device
 * time and bytes: outside the kernel lists, a share of a step's device
 * time all the same. */
struct mg_cupti_stat mg_cupti_memsets(const struct mg_cupti *c);
struct mg_cupti_stat mg_cupti_nccl(const struct mg_cupti *c,
				   enum mg_cupti_nccl coll);
/* Every kernel that is not an NCCL kernel. */
struct mg_cupti_stat mg_cupti_compute(const struct mg_cupti *c);
/* The n largest by seconds: compute kernels (demangled names when the
 * C++ runtime's demangler is loaded) or API calls (canonical names).
 * Returns how many were written. */
int mg_cupti_top(const struct mg_cupti *c, enum mg_cupti_list what,
		 struct mg_cupti_named *out, int n);
/* Host seconds spent aggregating delivered buffers (CUPTI's processing
 * cost as this process pays it) and host seconds inside the final flush
 * (which includes the aggregation of the buffers it delivers). */
double mg_cupti_processing_seconds(const struct mg_cupti *c);
double mg_cupti_flush_seconds(const struct mg_cupti *c);
/* Records CUPTI dropped for want of buffer space, and copies left out of
 * the timeline past its cap. */
int64_t mg_cupti_dropped(const struct mg_cupti *c);
int64_t mg_cupti_timeline_dropped(const struct mg_cupti *c);
/* The memory-copy timeline as CSV: t_s (start, seconds from
 * mg_cupti_start), kind (h2d, d2h, d2d, other), bytes, duration_s; by
 * start time. */
int mg_cupti_write_memcpy_csv(const struct mg_cupti *c, const char *path);

#endif
