/*
 * cuda_device.c - CUDA device contexts: one compute stream that every op
 * and library handle shares (so work is ordered without host syncs and a
 * whole step can be captured as a graph), a copy stream for input, and
 * event-based phase timers that never stall the host.
 */
#include <cublas_v2.h>
#include <cudnn.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_device.h"

int mg_cuda_fail(cudaError_t e, const char *what, const char *file, int line)
{
	return mg_error("CUDA error %s (%s) in %s at %s:%d",
			cudaGetErrorName(e), cudaGetErrorString(e), what, file,
			line);
}

/* The cudaMemGetInfo fallback of the driver's view (this thread's
 * device). */
static int cuda_used(void *arg, int64_t *used)
{
	(void)arg;
	*used = mg_cuda_used_bytes();
	return *used < 0 ? -1 : 0;
}

int mg_cuda_device_init(struct mg_device *dev, int ordinal)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0)
		return mg_error("run.device = cuda, but no CUDA device is "
				"usable here (%s)",
				e != cudaSuccess ? cudaGetErrorString(e)
						 : "no GPU found");
	/* A launcher that gives each task its own GPU (SLURM's
	 * --gpus-per-task=1) leaves one visible device: use it. */
	if (count == 1 && ordinal > 0)
		ordinal = 0;
	if (ordinal >= count)
		return mg_error("GPU %d requested (the rank's local index), "
				"this machine has %d",
				ordinal, count);
	struct mg_cuda_device *cd = calloc(1, sizeof *cd);
	if (!cd)
		return mg_error("out of memory");
	dev->kind = MG_DEV_CUDA;
	dev->ordinal = ordinal;
	dev->impl = cd;
	/* The driver's view, opened before this process's context exists
	 * (NVML's whole-device fallback subtracts the use before it). */
	char pci[32] = "";
	if (cudaDeviceGetPCIBusId(pci, sizeof pci, ordinal) != cudaSuccess)
		pci[0] = 0;
	mg_devmem_open(&cd->devmem, pci[0] ? pci : NULL, cuda_used, NULL);
	MG_CUDA_CHECK(cudaSetDevice(ordinal));
	MG_CUDA_CHECK(cudaGetDeviceProperties(&cd->prop, ordinal));
	MG_CUDA_CHECK(
		cudaStreamCreateWithFlags(&cd->compute, cudaStreamNonBlocking));
	MG_CUDA_CHECK(
		cudaStreamCreateWithFlags(&cd->copy, cudaStreamNonBlocking));
	MG_CUDA_CHECK(
		cudaStreamCreateWithFlags(&cd->side, cudaStreamNonBlocking));
	MG_CUDA_CHECK(cudaEventCreateWithFlags(&cd->side_fork,
					       cudaEventDisableTiming));
	MG_CUDA_CHECK(cudaEventCreateWithFlags(&cd->side_join,
					       cudaEventDisableTiming));
	dev->stream = cd->compute;
	for (int i = 0; i < MG_T_COUNT; i++) {
		MG_CUDA_CHECK(cudaEventCreate(&cd->timer_start[i]));
		MG_CUDA_CHECK(cudaEventCreate(&cd->timer_stop[i]));
	}
	cublasHandle_t blas;
	if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS)
		return mg_error("cublasCreate failed on GPU %d", ordinal);
	dev->cublas = blas;
	cublasSetStream(blas, cd->compute);
	cudnnHandle_t dnn;
	cudnnStatus_t ds = cudnnCreate(&dnn);
	if (ds != CUDNN_STATUS_SUCCESS)
		return mg_error("cudnnCreate failed on GPU %d: %s", ordinal,
				cudnnGetErrorString(ds));
	dev->cudnn = dnn;
	cudnnSetStream(dnn, cd->compute);
	/* context and handles: the driver's "at start" */
	mg_devmem_context_ready(&cd->devmem);
	/* A fixed cuBLAS workspace keeps GEMMs capturable in CUDA graphs
	 * (accounted once mg_cuda_device_bind makes it an mg_buf). */
	cd->blas_workspace_bytes = 32u << 20;
	MG_CUDA_CHECK(
		cudaMalloc(&cd->blas_workspace, cd->blas_workspace_bytes));
	cublasSetWorkspace(blas, cd->blas_workspace, cd->blas_workspace_bytes);
	return 0;
}

int mg_cuda_device_bind(struct mg_ctx *ctx)
{
	struct mg_cuda_device *cd = ctx->dev->impl;
	if (!cd || cd->ctx)
		return 0;
	MG_CUDA_CHECK(cudaDeviceSynchronize());
	MG_CUDA_CHECK(cudaFree(cd->blas_workspace));
	cd->blas_workspace = NULL;
	if (mg_buf_alloc(ctx, &cd->blas_ws, cd->blas_workspace_bytes,
			 MG_MEM_LIBRARY))
		return mg_error_prefix("cuBLAS workspace");
	cd->ctx = ctx;
	cd->blas_workspace = cd->blas_ws.ptr;
	if (cublasSetWorkspace(ctx->dev->cublas, cd->blas_workspace,
			       cd->blas_workspace_bytes) !=
	    CUBLAS_STATUS_SUCCESS)
		return mg_error("cublasSetWorkspace failed");
	if (ctx->stats) {
		/* MG_DEVMEM_PERIOD_MS: the thread's period (10; 0: step
		 * boundaries only), as bench/torch_measure.py reads it */
		const char *ms = getenv("MG_DEVMEM_PERIOD_MS");
		double period = ms && *ms ? atof(ms) / 1e3 : 0.01;
		ctx->stats->devmem = &cd->devmem;
		mg_devmem_sample(&cd->devmem);
		if (period > 0 && mg_devmem_start(&cd->devmem, period))
			mg_log(MG_LOG_WARN, "device memory: no sampling "
					    "thread, step boundaries only");
	}
	return 0;
}

void mg_cuda_device_free(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	if (!cd)
		return;
	cudaDeviceSynchronize();
	if (cd->ops_state_free) /* plan cache, scratch (needs the handles) */
		cd->ops_state_free(dev);
	if (dev->cudnn)
		cudnnDestroy(dev->cudnn);
	if (dev->cublas)
		cublasDestroy(dev->cublas);
	mg_devmem_close(&cd->devmem);
	if (cd->ctx) {
		if (cd->ctx->stats)
			cd->ctx->stats->devmem = NULL;
		mg_buf_free(cd->ctx, &cd->blas_ws);
	} else
		cudaFree(cd->blas_workspace);
	for (int i = 0; i < MG_T_COUNT; i++) {
		cudaEventDestroy(cd->timer_start[i]);
		cudaEventDestroy(cd->timer_stop[i]);
	}
	cudaEventDestroy(cd->side_fork);
	cudaEventDestroy(cd->side_join);
	cudaStreamDestroy(cd->side);
	cudaStreamDestroy(cd->copy);
	cudaStreamDestroy(cd->compute);
	free(cd);
	dev->impl = NULL;
	dev->cublas = dev->cudnn = dev->stream = NULL;
}

const char *mg_cuda_device_name(const struct mg_device *dev)
{
	const struct mg_cuda_device *cd = dev->impl;
	return cd ? cd->prop.name : "?";
}

int mg_cuda_malloc(void **p, size_t bytes)
{
	cudaError_t e = cudaMalloc(p, bytes ? bytes : 256);
	if (e != cudaSuccess) {
		size_t free_b = 0, total = 0;
		cudaMemGetInfo(&free_b, &total);
		return mg_error(
			"out of GPU memory allocating %zu bytes (%zu of "
			"%zu free): %s",
			bytes, free_b, total, cudaGetErrorString(e));
	}
	return 0;
}

void mg_cuda_free(void *p)
{
	cudaFree(p);
}

int mg_cuda_host_alloc(void **p, size_t bytes)
{
	MG_CUDA_CHECK(
		cudaHostAlloc(p, bytes ? bytes : 64, cudaHostAllocDefault));
	return 0;
}

void mg_cuda_host_free(void *p)
{
	cudaFreeHost(p);
}

int mg_cuda_copy(struct mg_device *dev, void *dst, const void *src,
		 size_t bytes, int kind, int sync)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
				      (enum cudaMemcpyKind)kind, cd->compute));
	if (sync)
		MG_CUDA_CHECK(cudaStreamSynchronize(cd->compute));
	return 0;
}

/* The side stream first waits for the compute stream's work so far (a
 * plain record and wait: inside a capture this forks the capture onto the
 * side stream, and mg_cuda_copy_join joins it back). */
int mg_cuda_copy_async(struct mg_device *dev, void *dst, const void *src,
		       size_t bytes)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaEventRecord(cd->side_fork, cd->compute));
	MG_CUDA_CHECK(cudaStreamWaitEvent(cd->side, cd->side_fork, 0));
	MG_CUDA_CHECK(
		cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cd->side));
	cd->side_dirty = true;
	return 0;
}

int mg_cuda_copy_join(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	if (!cd->side_dirty)
		return 0;
	MG_CUDA_CHECK(cudaEventRecord(cd->side_join, cd->side));
	MG_CUDA_CHECK(cudaStreamWaitEvent(cd->compute, cd->side_join, 0));
	cd->side_dirty = false;
	return 0;
}

int mg_cuda_host_call(struct mg_device *dev, void (*fn)(void *), void *arg)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaLaunchHostFunc(cd->compute, fn, arg));
	return 0;
}

/* The side stream runs fn after the compute work so far (as
 * mg_cuda_copy_async orders its copies) and its own earlier copies. */
int mg_cuda_host_call_side(struct mg_device *dev, void (*fn)(void *), void *arg)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaEventRecord(cd->side_fork, cd->compute));
	MG_CUDA_CHECK(cudaStreamWaitEvent(cd->side, cd->side_fork, 0));
	MG_CUDA_CHECK(cudaLaunchHostFunc(cd->side, fn, arg));
	cd->side_dirty = true;
	return 0;
}

int mg_cuda_memset(struct mg_device *dev, void *dst, int v, size_t bytes)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaMemsetAsync(dst, v, bytes, cd->compute));
	return 0;
}

int mg_cuda_sync(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaStreamSynchronize(cd->compute));
	MG_CUDA_CHECK(cudaGetLastError());
	return 0;
}

int64_t mg_cuda_used_bytes(void)
{
	size_t free_b = 0, total = 0;
	if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
		return -1;
	return (int64_t)(total - free_b);
}

/*
 * Record a timer event. Inside a stream capture it must be an external
 * event record, so it becomes a graph node and phases stay timed when the
 * step is replayed; outside a capture that flag is an error
 * (cudaErrorIllegalState, which the next op's error check would report
 * as its own), so plain records are used there.
 */
static void timer_record(struct mg_cuda_device *cd, cudaEvent_t ev)
{
	enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	cudaStreamIsCapturing(cd->compute, &cs);
	if (cs == cudaStreamCaptureStatusActive)
		cudaEventRecordWithFlags(ev, cd->compute,
					 cudaEventRecordExternal);
	else
		cudaEventRecord(ev, cd->compute);
}

void mg_cuda_timer_start(struct mg_device *dev, enum mg_timer t)
{
	struct mg_cuda_device *cd = dev->impl;
	timer_record(cd, cd->timer_start[t]);
}

void mg_cuda_timer_stop(struct mg_device *dev, enum mg_timer t)
{
	struct mg_cuda_device *cd = dev->impl;
	timer_record(cd, cd->timer_stop[t]);
	cd->timer_pending[t] = 1;
}

void mg_cuda_timers_arm(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	for (int t = 0; t < MG_T_COUNT; t++)
		cd->timer_pending[t] = cd->timer_in_graph[t];
}

void mg_cuda_timers_mark_captured(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	for (int t = 0; t < MG_T_COUNT; t++)
		cd->timer_in_graph[t] = cd->timer_pending[t];
}

int mg_cuda_graph_begin(struct mg_device *dev)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaStreamBeginCapture(cd->compute,
					     cudaStreamCaptureModeThreadLocal));
	return 0;
}

int mg_cuda_graph_end(struct mg_device *dev, void **exec)
{
	struct mg_cuda_device *cd = dev->impl;
	cudaGraph_t g = NULL;
	cudaError_t e = cudaStreamEndCapture(cd->compute, &g);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky capture error */
		return mg_cuda_fail(e, "cudaStreamEndCapture", __FILE__,
				    __LINE__);
	}
	/* Keep each kernel node's captured stream priority: without the
	 * flag a replay runs every node at the compute stream's (default)
	 * priority, so the communicators' high-priority NCCL kernels queue
	 * behind the GEMMs' pending blocks and overlap less than eagerly. */
	cudaGraphExec_t x = NULL;
	e = cudaGraphInstantiate(&x, g,
				 cudaGraphInstantiateFlagUseNodePriority);
	cudaGraphDestroy(g);
	if (e != cudaSuccess)
		return mg_cuda_fail(e, "cudaGraphInstantiate", __FILE__,
				    __LINE__);
	*exec = x;
	return 0;
}

int mg_cuda_graph_launch(struct mg_device *dev, void *exec)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, cd->compute));
	return 0;
}

void mg_cuda_graph_free(void *exec)
{
	if (exec)
		cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

void mg_cuda_timers_collect(struct mg_device *dev, double *out)
{
	struct mg_cuda_device *cd = dev->impl;
	for (int t = 0; t < MG_T_COUNT; t++) {
		out[t] = 0;
		if (!cd->timer_pending[t])
			continue;
		float ms = 0;
		if (cudaEventSynchronize(cd->timer_stop[t]) == cudaSuccess &&
		    cudaEventElapsedTime(&ms, cd->timer_start[t],
					 cd->timer_stop[t]) == cudaSuccess)
			out[t] = ms * 1e-3;
		cd->timer_pending[t] = 0;
	}
}

int mg_cuda_event_create(void **ev)
{
	cudaEvent_t e;
	MG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
	*ev = e;
	return 0;
}

int mg_cuda_event_record(struct mg_device *dev, void *ev)
{
	struct mg_cuda_device *cd = dev->impl;
	MG_CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, cd->compute));
	return 0;
}

int mg_cuda_event_sync(void *ev)
{
	MG_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev));
	return 0;
}

void mg_cuda_event_destroy(void *ev)
{
	if (ev)
		cudaEventDestroy((cudaEvent_t)ev);
}
