/*
 * devmem.c - the process's device memory as the driver sees it (see
 * devmem.h): NVML loaded with dlopen, a sampling thread, and the one-line
 * comparison with mgrun's own accounting the summary prints.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/devmem.h"

/* NVML's records, as nvml.h declares them (the header is not needed). */
struct nvml_memory {
	unsigned long long total, free, used;
};
struct nvml_proc_v1 {
	unsigned pid;
	unsigned long long used;
};
struct nvml_proc_v2 {
	unsigned pid;
	unsigned long long used;
	unsigned gpu_instance, compute_instance;
};
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)
#define MAX_PROCS 256

const char *mg_devmem_method_name(enum mg_devmem_method m)
{
	switch (m) {
	case MG_DEVMEM_NVML_PROCESS:
		return "nvml-process";
	case MG_DEVMEM_NVML_DEVICE:
		return "nvml-device";
	case MG_DEVMEM_CUDA_INFO:
		return "cudaMemGetInfo";
	default:
		return "none";
	}
}

static void *sym(void *lib, const char *a, const char *b)
{
	void *f = dlsym(lib, a);
	return f || !b ? f : dlsym(lib, b);
}

/* NVML's used bytes of the whole device, or -1. */
static int64_t nvml_device_used(struct mg_devmem *m)
{
	struct nvml_memory mem;
	if (!m->mem_fn || m->mem_fn(m->nvml_dev, &mem) != NVML_SUCCESS)
		return -1;
	return (int64_t)mem.used;
}

/* This PID's used bytes from NVML: -1 on error, -2 when not listed. */
static int64_t nvml_process_used(struct mg_devmem *m)
{
	/* records of either layout; the array keeps them aligned */
	static _Thread_local struct nvml_proc_v2 recs[MAX_PROCS];
	const unsigned char *buf = (const unsigned char *)recs;
	unsigned n = MAX_PROCS;
	if (!m->proc_fn || m->proc_fn(m->nvml_dev, &n, recs) != NVML_SUCCESS)
		return -1;
	unsigned pid = (unsigned)getpid();
	for (unsigned i = 0; i < n && i < MAX_PROCS; i++) {
		const unsigned char *p = buf + (size_t)i * m->info_size;
		unsigned ppid;
		unsigned long long used;
		if (m->info_size == sizeof(struct nvml_proc_v2)) {
			const struct nvml_proc_v2 *r = (const void *)p;
			ppid = r->pid, used = r->used;
		} else {
			const struct nvml_proc_v1 *r = (const void *)p;
			ppid = r->pid, used = r->used;
		}
		if (ppid == pid)
			return used == NVML_VALUE_NOT_AVAILABLE ? -1
								: (int64_t)used;
	}
	return -2;
}

static void nvml_open(struct mg_devmem *m, const char *pci)
{
	const char *path = getenv("MG_NVML_LIB");
	if (!path || !*path)
		path = "libnvidia-ml.so.1";
	m->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!m->lib) {
		snprintf(m->why, sizeof m->why, "no NVML: %s", dlerror());
		return;
	}
	int (*init)(void) =
		(int (*)(void))sym(m->lib, "nvmlInit_v2", "nvmlInit");
	int (*handle)(const char *, void **) =
		(int (*)(const char *, void **))sym(
			m->lib, "nvmlDeviceGetHandleByPciBusId_v2",
			"nvmlDeviceGetHandleByPciBusId");
	m->shutdown_fn = (int (*)(void))sym(m->lib, "nvmlShutdown", NULL);
	m->mem_fn = (int (*)(void *, void *))sym(
		m->lib, "nvmlDeviceGetMemoryInfo", NULL);
	m->info_size = sizeof(struct nvml_proc_v2);
	m->proc_fn = (int (*)(void *, unsigned *, void *))sym(
		m->lib, "nvmlDeviceGetComputeRunningProcesses_v3",
		"nvmlDeviceGetComputeRunningProcesses_v2");
	if (!m->proc_fn) {
		m->info_size = sizeof(struct nvml_proc_v1);
		m->proc_fn = (int (*)(void *, unsigned *, void *))sym(
			m->lib, "nvmlDeviceGetComputeRunningProcesses", NULL);
	}
	int rc = -1;
	if (!init || !handle || !m->mem_fn || !m->shutdown_fn)
		snprintf(m->why, sizeof m->why, "%s lacks NVML's functions",
			 path);
	else if ((rc = init()) != NVML_SUCCESS)
		snprintf(m->why, sizeof m->why, "nvmlInit failed (%d)", rc);
	else if ((rc = handle(pci, &m->nvml_dev)) != NVML_SUCCESS) {
		snprintf(m->why, sizeof m->why,
			 "NVML has no device at PCI %s (%d)", pci, rc);
		m->shutdown_fn();
		rc = -1;
	} else if ((m->base = nvml_device_used(m)) < 0) {
		snprintf(m->why, sizeof m->why,
			 "nvmlDeviceGetMemoryInfo "
			 "failed");
		m->shutdown_fn();
		rc = -1;
	}
	if (rc != NVML_SUCCESS) {
		dlclose(m->lib);
		m->lib = NULL;
		m->mem_fn = NULL;
		m->proc_fn = NULL;
		return;
	}
	/* Which NVML reading is decided once the context exists. */
	m->method = MG_DEVMEM_NVML_DEVICE;
}

void mg_devmem_open(struct mg_devmem *m, const char *pci,
		    mg_devmem_used_fn used_fn, void *used_arg)
{
	memset(m, 0, sizeof *m);
	atomic_store(&m->peak, -1);
	atomic_store(&m->stop, false);
	m->at_start = -1;
	m->used_fn = used_fn;
	m->used_arg = used_arg;
	snprintf(m->why, sizeof m->why, "no CUDA device");
	if (pci)
		nvml_open(m, pci);
	if (m->method == MG_DEVMEM_NONE && used_fn) {
		/* keep NVML's reason: it says why the fallback is used */
		m->method = MG_DEVMEM_CUDA_INFO;
	}
}

/* One reading with the method's meaning, or -1. */
static int64_t reading(struct mg_devmem *m)
{
	int64_t v = -1;
	switch (m->method) {
	case MG_DEVMEM_NVML_PROCESS:
		v = nvml_process_used(m);
		return v < 0 ? -1 : v;
	case MG_DEVMEM_NVML_DEVICE:
		v = nvml_device_used(m);
		break;
	case MG_DEVMEM_CUDA_INFO:
		if (m->used_fn(m->used_arg, &v))
			v = -1;
		break;
	default:
		return -1;
	}
	return v < 0 ? -1 : (v > m->base ? v - m->base : 0);
}

void mg_devmem_context_ready(struct mg_devmem *m)
{
	if (m->method == MG_DEVMEM_NVML_DEVICE) {
		int64_t own = nvml_process_used(m);
		if (own >= 0)
			m->method = MG_DEVMEM_NVML_PROCESS;
		else
			snprintf(m->why, sizeof m->why,
				 "PID %d not in NVML's process list "
				 "(another PID namespace?): whole device",
				 (int)getpid());
	} else if (m->method == MG_DEVMEM_CUDA_INFO) {
		int64_t v = -1;
		if (m->used_fn(m->used_arg, &v) || v < 0) {
			m->method = MG_DEVMEM_NONE;
			snprintf(m->why, sizeof m->why,
				 "cudaMemGetInfo failed");
			return;
		}
		m->base = v; /* the context is not in the figure */
	}
	m->at_start = reading(m);
	mg_devmem_sample(m);
}

void mg_devmem_sample(struct mg_devmem *m)
{
	int64_t v = reading(m);
	if (v < 0)
		return;
	int64_t p = atomic_load(&m->peak);
	while (v > p && !atomic_compare_exchange_weak(&m->peak, &p, v))
		;
	atomic_fetch_add(&m->samples, 1);
}

static void *sampler(void *arg)
{
	struct mg_devmem *m = arg;
	struct timespec ts = {
		.tv_sec = (time_t)m->period_s,
		.tv_nsec = (long)((m->period_s - (double)(time_t)m->period_s) *
				  1e9)};
	while (!atomic_load(&m->stop)) {
		mg_devmem_sample(m);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int mg_devmem_start(struct mg_devmem *m, double period_s)
{
	if (m->thread_on || (m->method != MG_DEVMEM_NVML_PROCESS &&
			     m->method != MG_DEVMEM_NVML_DEVICE))
		return 0;
	m->period_s = period_s > 0 ? period_s : 0.01;
	atomic_store(&m->stop, false);
	if (pthread_create(&m->thread, NULL, sampler, m) != 0)
		return -1;
	m->thread_on = true;
	return 0;
}

void mg_devmem_close(struct mg_devmem *m)
{
	if (m->thread_on) {
		atomic_store(&m->stop, true);
		pthread_join(m->thread, NULL);
		m->thread_on = false;
	}
	if (m->lib) {
		m->shutdown_fn();
		dlclose(m->lib);
		m->lib = NULL;
	}
	m->proc_fn = NULL;
	m->mem_fn = NULL;
}

int64_t mg_devmem_peak(const struct mg_devmem *m)
{
	return m->method == MG_DEVMEM_NONE ? -1 : atomic_load(&m->peak);
}

const char *mg_devmem_describe(const struct mg_devmem *m, int64_t accounted,
			       char *buf, size_t len)
{
	const double gib = 1024.0 * 1024 * 1024;
	int64_t peak = mg_devmem_peak(m);
	if (peak < 0) {
		snprintf(buf, len,
			 "device (driver): not measured (%s); accounted: "
			 "%.2f GiB",
			 m->method == MG_DEVMEM_NONE ? m->why : "no reading",
			 (double)accounted / gib);
		return buf;
	}
	int64_t start = m->at_start > 0 ? m->at_start : 0;
	snprintf(buf, len,
		 "device (driver): %.2f GiB peak (%s); at start %.2f GiB; "
		 "accounted: %.2f GiB; unaccounted: %.2f GiB",
		 (double)peak / gib, mg_devmem_method_name(m->method),
		 (double)start / gib, (double)accounted / gib,
		 (double)(peak - start - accounted) / gib);
	return buf;
}
