/*
 * devmem.h - the process's device memory as the driver sees it, sampled
 * at step boundaries and by a light background thread, so mgrun's own
 * accounting (mg_buf categories) can be checked against the same figure
 * a PyTorch baseline is measured by (bench/torch_measure.py).
 *
 * Methods, best first:
 *   nvml-process  NVML's used memory of this PID on the device
 *                 (nvmlDeviceGetComputeRunningProcesses; includes the
 *                 CUDA context, as nvidia-smi shows it)
 *   nvml-device   NVML's used memory of the whole device minus its use
 *                 before this process created its context (when the
 *                 PID is not listed: a container's PID namespace)
 *   cudaMemGetInfo  the device's used memory minus its use right after
 *                 the context was created (no NVML: the context is not
 *                 in the figure), sampled at step boundaries only
 *   none          not measured; the peak is -1, never a made-up 0
 * libnvidia-ml is dlopen'd at run time (MG_NVML_LIB names another file),
 * so builds and CI machines without a GPU driver need nothing.
 */
#ifndef MG_DEVMEM_H
#define MG_DEVMEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>

enum mg_devmem_method {
	MG_DEVMEM_NONE = 0,
	MG_DEVMEM_NVML_PROCESS,
	MG_DEVMEM_NVML_DEVICE,
	MG_DEVMEM_CUDA_INFO,
};

/* The fallback's reading: the device's used bytes (0, or -1 on error). */
typedef int (*mg_devmem_used_fn)(void *arg, int64_t *used);

struct mg_devmem {
	enum mg_devmem_method method;
	char why[192];	      /* why not measured, or why a fallback */
	int64_t base;	      /* subtracted from device-wide readings */
	int64_t at_start;     /* first reading (context, handles) */
	_Atomic int64_t peak; /* -1: no reading yet */
	_Atomic int64_t samples;
	/* NVML (dlopen'd) */
	void *lib, *nvml_dev;
	int (*proc_fn)(void *dev, unsigned *count, void *infos);
	int (*mem_fn)(void *dev, void *mem);
	int (*shutdown_fn)(void);
	size_t info_size; /* bytes of one process record */
	/* cudaMemGetInfo fallback */
	mg_devmem_used_fn used_fn;
	void *used_arg;
	/* background sampler */
	pthread_t thread;
	bool thread_on;
	atomic_bool stop;
	double period_s;
};

/* Open the sampler for the device with PCI bus id pci (as CUDA writes
 * it; NULL: NVML is not tried). Call before the CUDA context exists, so
 * nvml-device can subtract the device's use without this process.
 * used_fn is the fallback when NVML is absent (NULL: none). Never fails:
 * the method says what will be measured. */
void mg_devmem_open(struct mg_devmem *m, const char *pci,
		    mg_devmem_used_fn used_fn, void *used_arg);
/* After the context exists: the cudaMemGetInfo fallback's base. */
void mg_devmem_context_ready(struct mg_devmem *m);
/* One reading now (any thread for NVML; the fallback only from the
 * thread that owns the context, outside graph captures). */
void mg_devmem_sample(struct mg_devmem *m);
/* Sample every period_s seconds on a thread (NVML methods only: a CUDA
 * call from another thread could break a graph capture). 0 or -1. */
int mg_devmem_start(struct mg_devmem *m, double period_s);
void mg_devmem_close(struct mg_devmem *m);
const char *mg_devmem_method_name(enum mg_devmem_method m);
/* Peak bytes, or -1 when not measured. */
int64_t mg_devmem_peak(const struct mg_devmem *m);
/* "device (driver): 3.10 GiB peak (nvml-process); at start 0.50 GiB;
 * accounted: 2.41 GiB; unaccounted: 0.19 GiB" or "device (driver): not
 * measured (why)"; accounted is mgrun's own peak total. */
const char *mg_devmem_describe(const struct mg_devmem *m, int64_t accounted,
			       char *buf, size_t len);

#endif
