/*
 * cuda_device.h - the CUDA side of a device context: streams, library
 * handles, allocation and copies. Compiled only with MG_HAVE_CUDA.
 */
#ifndef MG_CUDA_DEVICE_H
#define MG_CUDA_DEVICE_H

#include <cuda_runtime_api.h>

#include "runtime/devmem.h"
#include "runtime/runtime.h"

/* Backend-private state behind struct mg_device.impl. */
struct mg_cuda_device {
	cudaStream_t compute; /* == dev->stream */
	cudaStream_t copy;    /* host-to-device input copies */
	cudaStream_t side;    /* strategies' copies beside compute */
	cudaEvent_t side_fork, side_join; /* ordering only */
	bool side_dirty;		  /* side copies not joined yet */
	cudaEvent_t timer_start[MG_T_COUNT], timer_stop[MG_T_COUNT];
	int timer_pending[MG_T_COUNT];
	int timer_in_graph[MG_T_COUNT]; /* recorded by the captured step */
	/* cuBLAS workspace: raw until mg_cuda_device_bind, then an mg_buf
	 * (category libraries) of the bound context. */
	void *blas_workspace;
	size_t blas_workspace_bytes;
	struct mg_buf blas_ws;
	struct mg_ctx *ctx;	 /* bound context (accounting), or NULL */
	struct mg_devmem devmem; /* the driver's view of this process */
	struct cudaDeviceProp prop;
	void *ops_state; /* core/ops/cuda: algorithm cache, scratch */
	/* Set by core/ops/cuda with ops_state; mg_cuda_device_free calls it
	 * (before the handles go) so the runtime needs no ops header. */
	void (*ops_state_free)(struct mg_device *dev);
};

/* Select GPU ordinal, create streams, cuBLAS and cuDNN handles. */
int mg_cuda_device_init(struct mg_device *dev, int ordinal);
void mg_cuda_device_free(struct mg_device *dev);
/* Once ctx->stats exists: the cuBLAS workspace becomes an accounted
 * mg_buf, and the driver's view of device memory is sampled for the
 * report (ctx->stats->devmem, a thread every MG_DEVMEM_PERIOD_MS = 10 ms
 * where NVML works). */
int mg_cuda_device_bind(struct mg_ctx *ctx);
const char *mg_cuda_device_name(const struct mg_device *dev);

int mg_cuda_malloc(void **p, size_t bytes);
void mg_cuda_free(void *p);
int mg_cuda_host_alloc(void **p, size_t bytes);
void mg_cuda_host_free(void *p);
int mg_cuda_copy(struct mg_device *dev, void *dst, const void *src,
		 size_t bytes, int kind, int sync);
/* Strategies' asynchronous copies and host calls (see ctx.h). */
int mg_cuda_copy_async(struct mg_device *dev, void *dst, const void *src,
		       size_t bytes);
int mg_cuda_copy_join(struct mg_device *dev);
int mg_cuda_host_call(struct mg_device *dev, void (*fn)(void *), void *arg);
int mg_cuda_host_call_side(struct mg_device *dev, void (*fn)(void *),
			   void *arg);
int mg_cuda_memset(struct mg_device *dev, void *dst, int v, size_t bytes);
int mg_cuda_sync(struct mg_device *dev);
/* Bytes in use on the device as the driver sees it (cudaMemGetInfo). */
int64_t mg_cuda_used_bytes(void);

/* Phase timers as events on the compute stream, read back lazily. */
void mg_cuda_timer_start(struct mg_device *dev, enum mg_timer t);
void mg_cuda_timer_stop(struct mg_device *dev, enum mg_timer t);
/* Seconds of each stopped timer since the last collect (syncs events). */
void mg_cuda_timers_collect(struct mg_device *dev, double *out);
/* After capturing a step: remember which timers its graph records; before
 * each replay: expect those timers again. */
void mg_cuda_timers_mark_captured(struct mg_device *dev);
void mg_cuda_timers_arm(struct mg_device *dev);

/* A training step as a CUDA graph: capture the compute stream's work
 * (no host synchronisation or allocation may happen inside), instantiate,
 * replay. */
int mg_cuda_graph_begin(struct mg_device *dev);
int mg_cuda_graph_end(struct mg_device *dev, void **exec);
int mg_cuda_graph_launch(struct mg_device *dev, void *exec);
void mg_cuda_graph_free(void *exec);

/* Events on the compute stream the host can wait for. */
int mg_cuda_event_create(void **ev);
int mg_cuda_event_record(struct mg_device *dev, void *ev);
int mg_cuda_event_sync(void *ev);
void mg_cuda_event_destroy(void *ev);

/* Report a CUDA error with the call and location; returns -1. */
int mg_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
#define MG_CUDA_CHECK(call)                                                    \
	do {                                                                   \
		cudaError_t mg_e_ = (call);                                    \
		if (mg_e_ != cudaSuccess)                                      \
			return mg_cuda_fail(mg_e_, #call, __FILE__, __LINE__); \
	} while (0)

#endif
