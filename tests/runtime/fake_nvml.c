/*
 * fake_nvml.c - a stand-in libnvidia-ml for test_devmem: the few NVML
 * entry points devmem.c looks up, with the device's and this process's
 * used bytes set by the test (fake_nvml_set), so the driver's-view
 * samplers (core/runtime/devmem.c, bench/torch_measure.py) are tested on
 * machines without a GPU.
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

struct mem {
	unsigned long long total, free, used;
};
struct proc {
	unsigned pid;
	unsigned long long used;
	unsigned gi, ci;
};

/* the project builds with hidden visibility: these are the library's */
#define API __attribute__((visibility("default")))

static _Atomic long long dev_used, proc_used;
static _Atomic int list_pid;

API void fake_nvml_set(long long device, long long process, int listed)
{
	dev_used = device;
	proc_used = process;
	list_pid = listed;
}

API int nvmlInit_v2(void)
{
	return 0;
}

API int nvmlShutdown(void)
{
	return 0;
}

API int nvmlDeviceGetHandleByPciBusId_v2(const char *pci, void **dev)
{
	if (strcmp(pci, "0000:01:00.0") != 0)
		return 6; /* NVML_ERROR_NOT_FOUND */
	*dev = (void *)1;
	return 0;
}

API int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
	if (index != 0)
		return 6;
	*dev = (void *)1;
	return 0;
}

API int nvmlDeviceGetMemoryInfo(void *dev, struct mem *m)
{
	(void)dev;
	m->total = 80ull << 30;
	m->used = (unsigned long long)dev_used;
	m->free = m->total - m->used;
	return 0;
}

API int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *n,
						struct proc *p)
{
	(void)dev;
	if (*n < 2) {
		*n = 2;
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	}
	/* another process first, then (maybe) this one */
	p[0] = (struct proc){.pid = 1, .used = 1ull << 30};
	*n = 1;
	if (list_pid) {
		p[1] = (struct proc){.pid = (unsigned)getpid(),
				     .used = (unsigned long long)proc_used};
		*n = 2;
	}
	return 0;
}
