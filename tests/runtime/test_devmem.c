/*
 * test_devmem.c - the driver's view of device memory (core/runtime/
 * devmem.c) without a GPU: NVML absent is "not measured" (peak -1, never
 * 0), the cudaMemGetInfo fallback subtracts its base, and NVML (a fake
 * library, fake_nvml.c) is read per process, or for the whole device when
 * this PID is not listed, by step samples and by the sampling thread.
 *   test_devmem FAKE_NVML_SO
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/devmem.h"

static int failures;
#define CHECK(c)                                                               \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__,          \
				__LINE__, #c);                                 \
			failures++;                                            \
		}                                                              \
	} while (0)

static int64_t fb_used;
static int fb_fail;
static int fallback(void *arg, int64_t *used)
{
	(void)arg;
	*used = fb_used;
	return fb_fail ? -1 : 0;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_devmem FAKE_NVML_SO\n");
		return 2;
	}
	const int64_t G = 1 << 30;
	struct mg_devmem m;
	char buf[256];

	/* No NVML, no fallback: not measured, and said so. */
	setenv("MG_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
	mg_devmem_open(&m, "0000:01:00.0", NULL, NULL);
	mg_devmem_context_ready(&m);
	mg_devmem_sample(&m);
	CHECK(m.method == MG_DEVMEM_NONE);
	CHECK(mg_devmem_peak(&m) == -1);
	CHECK(strcmp(mg_devmem_method_name(m.method), "none") == 0);
	mg_devmem_describe(&m, 3 * G, buf, sizeof buf);
	CHECK(strstr(buf, "not measured (no NVML") != NULL);
	CHECK(strstr(buf, "GiB peak") == NULL);
	CHECK(mg_devmem_start(&m, 0.01) == 0 && !m.thread_on);
	mg_devmem_close(&m);

	/* No NVML: cudaMemGetInfo deltas from just after the context. */
	fb_used = 5 * G, fb_fail = 0;
	mg_devmem_open(&m, "0000:01:00.0", fallback, NULL);
	CHECK(m.method == MG_DEVMEM_CUDA_INFO);
	mg_devmem_context_ready(&m);
	CHECK(m.at_start == 0 && mg_devmem_peak(&m) == 0);
	fb_used = 8 * G;
	mg_devmem_sample(&m);
	fb_used = 6 * G;
	mg_devmem_sample(&m);
	CHECK(mg_devmem_peak(&m) == 3 * G);
	CHECK(mg_devmem_start(&m, 0.01) == 0 && !m.thread_on);
	mg_devmem_describe(&m, 2 * G, buf, sizeof buf);
	CHECK(strstr(buf, "3.00 GiB peak (cudaMemGetInfo)") != NULL);
	CHECK(strstr(buf, "unaccounted: 1.00 GiB") != NULL);
	mg_devmem_close(&m);

	/* ... and a failing fallback is not measured. */
	fb_fail = 1;
	mg_devmem_open(&m, "0000:01:00.0", fallback, NULL);
	mg_devmem_context_ready(&m);
	CHECK(m.method == MG_DEVMEM_NONE && mg_devmem_peak(&m) == -1);
	mg_devmem_describe(&m, 0, buf, sizeof buf);
	CHECK(strstr(buf, "not measured (cudaMemGetInfo failed)") != NULL);
	mg_devmem_close(&m);
	fb_fail = 0;

	/* NVML (the fake), this PID listed: its own bytes. */
	setenv("MG_NVML_LIB", argv[1], 1);
	void *fake = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	void (*set)(long long, long long, int) =
		fake ? (void (*)(long long, long long, int))dlsym(
			       fake, "fake_nvml_set")
		     : NULL;
	CHECK(set != NULL);
	if (!set)
		return 1;
	set(10 * G, 0, 0); /* before our context: not listed */
	mg_devmem_open(&m, "0000:01:00.0", fallback, NULL);
	CHECK(m.method == MG_DEVMEM_NVML_DEVICE && m.base == 10 * G);
	set(11 * G, G / 2, 1); /* context created */
	mg_devmem_context_ready(&m);
	CHECK(m.method == MG_DEVMEM_NVML_PROCESS);
	CHECK(m.at_start == G / 2);
	CHECK(mg_devmem_start(&m, 0.002) == 0 && m.thread_on);
	/* a peak between step boundaries: only the thread sees it */
	set(20 * G, 7 * G, 1);
	sleep_ms(60);
	set(12 * G, 2 * G, 1);
	sleep_ms(20);
	mg_devmem_sample(&m);
	CHECK(mg_devmem_peak(&m) == 7 * G);
	CHECK(m.samples > 3);
	mg_devmem_describe(&m, 6 * G, buf, sizeof buf);
	CHECK(strstr(buf,
		     "7.00 GiB peak (nvml-process); at start 0.50 GiB; "
		     "accounted: 6.00 GiB; unaccounted: 0.50 GiB") != NULL);
	mg_devmem_close(&m);
	CHECK(!m.thread_on);

	/* NVML, PID not listed (another PID namespace): the whole device
	 * less its use before the context. */
	set(10 * G, 0, 0);
	mg_devmem_open(&m, "0000:01:00.0", NULL, NULL);
	set(13 * G, 0, 0);
	mg_devmem_context_ready(&m);
	CHECK(m.method == MG_DEVMEM_NVML_DEVICE);
	CHECK(strstr(m.why, "not in NVML's process list") != NULL);
	CHECK(m.at_start == 3 * G);
	set(15 * G, 0, 0);
	mg_devmem_sample(&m);
	CHECK(mg_devmem_peak(&m) == 5 * G);
	mg_devmem_close(&m);

	/* NVML without this GPU: the fallback, NVML's reason kept. */
	mg_devmem_open(&m, "0000:99:00.0", fallback, NULL);
	CHECK(m.method == MG_DEVMEM_CUDA_INFO);
	CHECK(strstr(m.why, "NVML has no device at PCI 0000:99:00.0") != NULL);
	mg_devmem_close(&m);
	dlclose(fake);

	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	printf("devmem: ok\n");
	return 0;
}
