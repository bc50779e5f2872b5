/*
 * gpu_test.c - the GPU test harness (gpu_test.h). The CUDA context is
 * built with the runtime's own mg_cuda_device_init (compiled into each
 * test from core/runtime/cuda/cuda_device.c), so the ops see exactly the
 * device state mgrun gives them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "../common/test_util.h"
#include "gpu_test.h"
#include "ops/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_device.h"

static struct mg_device cpu_dev = {.kind = MG_DEV_CPU};
static struct mg_device gpu_dev;
struct mg_ctx gt_cpu = {.struct_size = sizeof(struct mg_ctx),
			.dev = &cpu_dev,
			.compute_dtype = MG_F64,
			.master_dtype = MG_F64};
struct mg_ctx gt_gpu = {.struct_size = sizeof(struct mg_ctx),
			.dev = &gpu_dev,
			.compute_dtype = MG_F32,
			.master_dtype = MG_F32};
uint64_t gt_seed;
int gt_fail, gt_checks;
static uint64_t draw;

void gt_init(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *s = getenv("MG_TEST_SEED");
	gt_seed = s ? strtoull(s, NULL, 0)
		    : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		printf("SKIPPED: no GPU (%s)\n", e != cudaSuccess
							 ? cudaGetErrorString(e)
							 : "no device found");
		exit(GT_SKIP);
	}
	if (mg_cuda_device_init(&gpu_dev, 0)) {
		printf("SKIPPED: no GPU (device init failed: %s)\n",
		       mg_last_error());
		exit(GT_SKIP);
	}
	int rt = 0, drv = 0, blas = 0;
	cudaRuntimeGetVersion(&rt);
	cudaDriverGetVersion(&drv);
	cublasGetVersion((cublasHandle_t)gpu_dev.cublas, &blas);
	printf("device: %s; CUDA runtime %d, driver %d; cuBLAS %d; cuDNN %zu "
	       "(built against %d)\n",
	       mg_cuda_device_name(&gpu_dev), rt, drv, blas, cudnnGetVersion(),
	       CUDNN_VERSION);
	printf("seed %llu (MG_TEST_SEED=%llu reproduces)\n",
	       (unsigned long long)gt_seed, (unsigned long long)gt_seed);
}

int gt_finish(void)
{
	mg_cuda_ops_free(&gpu_dev);
	mg_cuda_device_free(&gpu_dev);
	printf("%d checks, %d failed (seed %llu)\n", gt_checks, gt_fail,
	       (unsigned long long)gt_seed);
	return gt_fail ? 1 : 0;
}

double gt_urand(void)
{
	return mg_rng_uniform(gt_seed, draw++);
}

double gt_round(enum mg_dtype dt, double v)
{
	switch (dt) {
	case MG_F32:
		return (float)v;
	case MG_F16:
		return mg_half_to_float(mg_float_to_half((float)v));
	case MG_BF16:
		return mg_bf16_to_float(mg_float_to_bf16((float)v));
	case MG_I32:
		return (double)(int32_t)v;
	case MG_U8:
		return (double)(uint8_t)v;
	default:
		return v;
	}
}

enum mg_dtype gt_ref_dtype(enum mg_dtype dt)
{
	if (dt == MG_F16 || dt == MG_BF16)
		return MG_F32;
	return dt;
}

double gt_tol(enum mg_dtype dt)
{
	switch (dt) {
	case MG_F64:
		return 1e-12;
	case MG_F32:
		return 1e-5;
	default:
		return 1e-2;
	}
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 8);
	if (!p) {
		fprintf(stderr, "out of host memory\n");
		exit(2);
	}
	return p;
}

void gt_make(struct gt *t, enum mg_dtype gdt, int cdt, int ndim, int64_t d0,
	     int64_t d1, int64_t d2, int64_t d3)
{
	const int64_t shape[4] = {d0, d1, d2, d3};
	memset(t, 0, sizeof *t);
	t->c = mg_tensor_make(NULL,
			      cdt < 0 ? gt_ref_dtype(gdt) : (enum mg_dtype)cdt,
			      MG_DEV_CPU, ndim, shape);
	t->g = mg_tensor_make(NULL, gdt, MG_DEV_CUDA, ndim, shape);
	t->n = mg_tensor_numel(&t->c);
	t->c.data = xmalloc(mg_tensor_bytes(&t->c));
	t->v = calloc((size_t)(t->n ? t->n : 1), sizeof(double));
	size_t gb = mg_tensor_bytes(&t->g);
	if (cudaMalloc(&t->g.data, gb ? gb : 8) != cudaSuccess) {
		fprintf(stderr, "cudaMalloc %zu bytes failed\n", gb);
		exit(2);
	}
}

void gt_free(struct gt *t)
{
	free(t->c.data);
	free(t->v);
	cudaFree(t->g.data);
	memset(t, 0, sizeof *t);
}

static void upload_raw(struct gt *t, const double *vals)
{
	void *h = xmalloc(mg_tensor_bytes(&t->g));
	for (int64_t i = 0; i < t->n; i++) {
		test_put(h, t->g.dtype, i, vals[i]);
		test_put(t->c.data, t->c.dtype, i, vals[i]);
	}
	if (cudaMemcpy(t->g.data, h, mg_tensor_bytes(&t->g),
		       cudaMemcpyHostToDevice) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "upload failed\n");
		exit(2);
	}
	free(h);
}

void gt_upload(struct gt *t)
{
	for (int64_t i = 0; i < t->n; i++)
		t->v[i] = gt_round(t->g.dtype, t->v[i]);
	upload_raw(t, t->v);
}

void gt_rand(struct gt *t, double lo, double hi)
{
	for (int64_t i = 0; i < t->n; i++)
		t->v[i] = lo + (hi - lo) * gt_urand();
	gt_upload(t);
}

void gt_poison(struct gt *t)
{
	double *nan = xmalloc((size_t)t->n * sizeof(double));
	const bool ints = t->g.dtype == MG_I32 || t->g.dtype == MG_U8;
	for (int64_t i = 0; i < t->n; i++)
		nan[i] = ints ? 0x7f : NAN;
	upload_raw(t, nan);
	free(nan);
}

void gt_from_cpu(struct gt *t)
{
	for (int64_t i = 0; i < t->n; i++)
		t->v[i] = test_get(t->c.data, t->c.dtype, i);
	gt_upload(t);
}

double gt_cpu_at(const struct gt *t, int64_t i)
{
	return test_get(t->c.data, t->c.dtype, i);
}

int gt_sync(const char *what)
{
	cudaError_t e = cudaStreamSynchronize((cudaStream_t)gpu_dev.stream);
	if (e == cudaSuccess)
		e = cudaGetLastError();
	if (e != cudaSuccess) {
		printf("FAIL %s: CUDA error %s\n", what, cudaGetErrorString(e));
		gt_fail++;
		return -1;
	}
	return 0;
}

int gt_ok(int rc, const char *what)
{
	if (rc) {
		printf("FAIL %s returned %d: %s\n", what, rc, mg_last_error());
		gt_fail++;
		gt_checks++;
		return -1;
	}
	return gt_sync(what);
}

double *gt_read(struct gt *t)
{
	gt_sync("read");
	void *h = xmalloc(mg_tensor_bytes(&t->g));
	double *d = xmalloc((size_t)(t->n ? t->n : 1) * sizeof(double));
	if (cudaMemcpy(h, t->g.data, mg_tensor_bytes(&t->g),
		       cudaMemcpyDeviceToHost) != cudaSuccess) {
		fprintf(stderr, "download failed\n");
		exit(2);
	}
	for (int64_t i = 0; i < t->n; i++)
		d[i] = test_get(h, t->g.dtype, i);
	free(h);
	return d;
}

void gt_report(const char *what, enum mg_dtype dt, double err, double tol,
	       int64_t nans, const char *note)
{
	const bool ok = nans == 0 && err <= tol; /* NaN err never passes */
	gt_checks++;
	if (!ok)
		gt_fail++;
	printf("%-58s %-4s err %9.2e (limit %.0e)%s%s %s\n", what,
	       mg_dtype_name(dt), err, tol, nans ? " NaN/unwritten " : "",
	       note ? note : "", ok ? "PASS" : "FAIL");
	if (nans)
		printf("    %lld element(s) NaN or never written\n",
		       (long long)nans);
}

void gt_report_bits(const char *what, enum mg_dtype dt, const void *got,
		    const void *want, int64_t n, size_t es)
{
	int64_t diff = 0;
	for (int64_t i = 0; i < n; i++)
		diff += memcmp((const char *)got + (size_t)i * es,
			       (const char *)want + (size_t)i * es, es) != 0;
	gt_report(what, dt, n ? (double)diff / (double)n : 0, 0, 0,
		  "fraction of elements whose bits differ");
}

static double compare(const char *what, enum mg_dtype dt, struct gt *t,
		      double tol, bool delta)
{
	double *g = gt_read(t);
	double num = 0, den = 0;
	int64_t nans = 0;
	for (int64_t i = 0; i < t->n; i++) {
		double c = gt_cpu_at(t, i), gv = g[i];
		if (delta) {
			c -= t->v[i];
			gv -= t->v[i];
		}
		if (isnan(gv) || isnan(c)) {
			nans++;
			continue;
		}
		num += (gv - c) * (gv - c);
		den += c * c;
	}
	free(g);
	double err = den > 0 ? sqrt(num / den) : sqrt(num);
	gt_report(what, dt, err, tol, nans, delta ? " (+=)" : NULL);
	return err;
}

double gt_check(const char *what, enum mg_dtype dt, struct gt *t, double tol)
{
	return compare(what, dt, t, tol, false);
}

double gt_check_delta(const char *what, enum mg_dtype dt, struct gt *t,
		      double tol)
{
	return compare(what, dt, t, tol, true);
}
