/*
 * bench_gpu_ops.c - micro-benchmarks behind the CUDA ops' defaults:
 *
 *  1. depthwise 3x3 convolutions of MobileNetV2 (224 px, batch N): the
 *     own kernels against cuDNN's grouped convolution, with algorithms
 *     from the v7 heuristics and from cudnnFind, per direction;
 *  2. dense convolutions (stem and 1x1 layers): heuristics against Find;
 *  3. memory-bound ops on MobileNetV2's largest activation, and the NF4
 *     dequantization of a Llama 3 8B MLP weight (4096 x 14336) into F32,
 *     F16 and BF16 (QLoRA runs it before every frozen GEMM), and its
 *     quantization from F16 and BF16 (at load).
 *
 *   bench_gpu_ops [N] [f32|f16|bf16]     (default 64 f32)
 *
 * Times are CUDA-event medians of 7 trials of 10 calls each, after
 * warm-up (the plan/algorithm choice happens in the warm-up). The copy
 * ceiling (device-to-device memcpy, bytes read + written) is printed
 * first so the own kernels' effective bandwidth has a yardstick.
 * Exits 77 ("SKIPPED: no GPU") without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_test.h"
#include "ops/cuda/cuda_ops.h"

#define TRIALS 7
#define ITERS 10

enum dir { FWD = 0, BWD_DATA, BWD_FILTER };

struct layer {
	int C, H, stride, K, k; /* K = 0: depthwise (K = C, groups = C) */
};

static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static void *dalloc(size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes) != cudaSuccess) {
		fprintf(stderr, "cudaMalloc %zu failed\n", bytes);
		exit(2);
	}
	cudaMemset(p, 0x3c, bytes); /* ~1.0 in f16, small finite in f32 */
	return p;
}

struct conv_bufs {
	struct mg_tensor x, w, y, dy, dx, dw;
	struct mg_conv2d_args a;
};

static void bufs_make(struct conv_bufs *b, enum mg_dtype dt, int N,
		      const struct layer *l)
{
	const int dwise = l->K == 0;
	const int K = dwise ? l->C : l->K, cg = dwise ? 1 : l->C;
	const int pad = l->k / 2;
	const int64_t OH = mg_conv_out_dim(l->H, l->k, l->stride, pad);
	const int64_t xs[4] = {N, l->C, l->H, l->H},
		      ws[4] = {K, cg, l->k, l->k};
	const int64_t ys[4] = {N, K, OH, OH};
	b->x = mg_tensor_make(NULL, dt, MG_DEV_CUDA, 4, xs);
	b->dx = b->x;
	b->w = mg_tensor_make(NULL, dt, MG_DEV_CUDA, 4, ws);
	b->dw = b->w;
	b->y = mg_tensor_make(NULL, dt, MG_DEV_CUDA, 4, ys);
	b->dy = b->y;
	b->x.data = dalloc(mg_tensor_bytes(&b->x));
	b->dx.data = dalloc(mg_tensor_bytes(&b->x));
	b->w.data = dalloc(mg_tensor_bytes(&b->w));
	b->dw.data = dalloc(mg_tensor_bytes(&b->w));
	b->y.data = dalloc(mg_tensor_bytes(&b->y));
	b->dy.data = dalloc(mg_tensor_bytes(&b->y));
	b->a = (struct mg_conv2d_args){l->stride, l->stride, pad, pad,
				       dwise ? l->C : 1};
}

static void bufs_free(struct conv_bufs *b)
{
	cudaFree(b->x.data);
	cudaFree(b->dx.data);
	cudaFree(b->w.data);
	cudaFree(b->dw.data);
	cudaFree(b->y.data);
	cudaFree(b->dy.data);
}

static int run_once(struct conv_bufs *b, enum dir d)
{
	switch (d) {
	case FWD:
		return mg_cuda_conv2d(&gt_gpu, &b->a, &b->x, &b->w, NULL, &b->y,
				      NULL);
	case BWD_DATA:
		return mg_cuda_conv2d_backward(&gt_gpu, &b->a, &b->x, &b->w,
					       &b->dy, &b->dx, NULL, NULL,
					       NULL);
	default:
		return mg_cuda_conv2d_backward(&gt_gpu, &b->a, &b->x, &b->w,
					       &b->dy, NULL, &b->dw, NULL,
					       NULL);
	}
}

/* Median milliseconds per call; negative on error. */
static double time_ms(struct conv_bufs *b, enum dir d)
{
	cudaStream_t st = (cudaStream_t)gt_gpu.dev->stream;
	for (int i = 0; i < 3; i++)
		if (run_once(b, d)) {
			printf("  error: %s\n", mg_last_error());
			return -1;
		}
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float t[TRIALS];
	for (int r = 0; r < TRIALS; r++) {
		cudaEventRecord(e0, st);
		for (int i = 0; i < ITERS; i++)
			run_once(b, d);
		cudaEventRecord(e1, st);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&t[r], e0, e1);
		t[r] /= ITERS;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	if (gt_sync("bench"))
		return -1;
	qsort(t, TRIALS, sizeof *t, cmp_f);
	return t[TRIALS / 2];
}

/* Set the implementation: 0 own/heuristic, 1 cuDNN heuristic, 2 Find,
 * 3 pointwise GEMM. */
static void use(int impl)
{
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_DEPTHWISE_CUDNN,
			impl == 1 || impl == 2);
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_CONV_FIND, impl == 2);
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_POINTWISE_GEMM, impl == 3);
}

static double copy_ceiling(void)
{
	const size_t bytes = (size_t)1 << 30;
	void *a = dalloc(bytes), *b = dalloc(bytes);
	cudaStream_t st = (cudaStream_t)gt_gpu.dev->stream;
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float best = 1e30f;
	for (int r = 0; r < 5; r++) {
		float ms;
		cudaEventRecord(e0, st);
		cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st);
		cudaEventRecord(e1, st);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&ms, e0, e1);
		if (ms < best)
			best = ms;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	return 2.0 * (double)bytes / (best * 1e-3) / 1e9;
}

/* Time fn(arg) like time_ms (median of trials of ITERS calls). */
static double time_fn(int (*fn)(void *), void *arg)
{
	cudaStream_t st = (cudaStream_t)gt_gpu.dev->stream;
	for (int i = 0; i < 3; i++)
		if (fn(arg)) {
			printf("  error: %s\n", mg_last_error());
			return -1;
		}
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float t[TRIALS];
	for (int r = 0; r < TRIALS; r++) {
		cudaEventRecord(e0, st);
		for (int i = 0; i < ITERS; i++)
			fn(arg);
		cudaEventRecord(e1, st);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&t[r], e0, e1);
		t[r] /= ITERS;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	if (gt_sync("bench"))
		return -1;
	qsort(t, TRIALS, sizeof *t, cmp_f);
	return t[TRIALS / 2];
}

struct mb {
	struct mg_tensor x, y, dy, dx, g, b, rm, rv, sm, si, dg, db;
	struct mg_bn_args a;
};

static int mb_bn_fwd(void *p)
{
	struct mb *m = p;
	return mg_cuda_batchnorm2d(&gt_gpu, &m->a, &m->x, &m->g, &m->b, &m->rm,
				   &m->rv, &m->sm, &m->si, &m->y);
}

static int mb_bn_bwd(void *p)
{
	struct mb *m = p;
	return mg_cuda_batchnorm2d_backward(&gt_gpu, &m->a, &m->x, &m->y,
					    &m->dy, &m->g, &m->sm, &m->si,
					    &m->dx, &m->dg, &m->db);
}

static int mb_relu6(void *p)
{
	struct mb *m = p;
	return mg_cuda_relu6(&gt_gpu, &m->x, &m->y);
}

static int mb_add(void *p)
{
	struct mb *m = p;
	return mg_cuda_add(&gt_gpu, &m->x, &m->dy, &m->y);
}

/* Memory-bound ops on MobileNetV2's largest activation: time and the
 * bandwidth of the bytes they must move (each tensor read or written
 * once per pass it needs). */
static void bench_membound(int N, enum mg_dtype dt)
{
	const int64_t xs[4] = {N, 96, 112, 112}, cs[1] = {96};
	const enum mg_dtype pdt = MG_F32;
	struct mb m;
	struct mg_tensor *act[] = {&m.x, &m.y, &m.dy, &m.dx};
	struct mg_tensor *par[] = {&m.g,  &m.b,	 &m.rm, &m.rv,
				   &m.sm, &m.si, &m.dg, &m.db};
	for (int i = 0; i < 4; i++) {
		*act[i] = mg_tensor_make(NULL, dt, MG_DEV_CUDA, 4, xs);
		act[i]->data = dalloc(mg_tensor_bytes(act[i]));
	}
	for (int i = 0; i < 8; i++) {
		*par[i] = mg_tensor_make(NULL, pdt, MG_DEV_CUDA, 1, cs);
		par[i]->data = dalloc(mg_tensor_bytes(par[i]));
	}
	m.a = (struct mg_bn_args){1e-5, 0.1, true, MG_ACT_RELU6};
	const double tb = (double)mg_tensor_bytes(&m.x);
	struct {
		const char *name;
		int (*fn)(void *);
		double passes; /* tensor-sized reads + writes */
	} ops[] = {{"batchnorm train+relu6 fwd", mb_bn_fwd, 3},
		   {"batchnorm train+relu6 bwd", mb_bn_bwd, 7},
		   {"relu6", mb_relu6, 2},
		   {"add", mb_add, 3}};
	printf("\nmemory-bound ops on [%d, 96, 112, 112] %s (%.0f MB per "
	       "tensor)\n",
	       N, mg_dtype_name(dt), tb / 1e6);
	printf("%-28s %9s %8s\n", "op", "ms", "GB/s");
	for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
		double t = time_fn(ops[i].fn, &m);
		printf("%-28s %9.4f %8.0f\n", ops[i].name, t,
		       ops[i].passes * tb / (t * 1e-3) / 1e9);
	}
	for (int i = 0; i < 4; i++)
		cudaFree(act[i]->data);
	for (int i = 0; i < 8; i++)
		cudaFree(par[i]->data);
}

struct nf4b {
	struct mg_tensor w, out, x;
};

static int mb_nf4q(void *p)
{
	struct nf4b *m = p;
	return mg_op_nf4_quantize(&gt_gpu, &m->x, &m->w);
}

static int mb_nf4(void *p)
{
	struct nf4b *m = p;
	return mg_op_nf4_dequantize(&gt_gpu, &m->w, &m->out);
}

/* NF4 dequantization of a 4096 x 14336 weight: time, and the bandwidth of
 * the blob read plus the output written. */
static void bench_nf4(void)
{
	const int64_t shape[2] = {4096, 14336}, n = shape[0] * shape[1];
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	float *x = malloc((size_t)n * sizeof *x);
	unsigned char *hb = malloc(l.bytes);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(0.02 * (gt_urand() - 0.5));
	if (mg_nf4_quantize_host(hb, x, n) != 0) {
		printf("  error: %s\n", mg_last_error());
		goto out;
	}
	struct nf4b m;
	m.w = mg_tensor_make(dalloc(l.bytes), MG_NF4, MG_DEV_CUDA, 2, shape);
	cudaMemcpy(m.w.data, hb, l.bytes, cudaMemcpyHostToDevice);
	printf("\nnf4 dequantize [4096, 14336] (blob %.1f MB)\n",
	       (double)l.bytes / 1e6);
	printf("%-28s %9s %8s\n", "output", "ms", "GB/s");
	static const enum mg_dtype dts[] = {MG_F32, MG_F16, MG_BF16};
	for (int d = 0; d < 3; d++) {
		m.out = mg_tensor_make(NULL, dts[d], MG_DEV_CUDA, 2, shape);
		m.out.data = dalloc(mg_tensor_bytes(&m.out));
		double t = time_fn(mb_nf4, &m);
		double moved =
			(double)l.bytes + (double)mg_tensor_bytes(&m.out);
		printf("nf4 -> %-21s %9.4f %8.0f\n", mg_dtype_name(dts[d]), t,
		       moved / (t * 1e-3) / 1e9);
		if (dts[d] != MG_F32) {
			m.x = m.out; /* quantize from this dtype */
			t = time_fn(mb_nf4q, &m);
			printf("nf4 <- %-21s %9.4f %8.0f\n",
			       mg_dtype_name(dts[d]), t,
			       moved / (t * 1e-3) / 1e9);
		}
		cudaFree(m.out.data);
	}
	cudaFree(m.w.data);
out:
	free(x);
	free(hb);
}

int main(int argc, char **argv)
{
	const int N = argc > 1 ? atoi(argv[1]) : 64;
	const char *ts = argc > 2 ? argv[2] : "f32";
	const enum mg_dtype dt = strcmp(ts, "f16") == 0	   ? MG_F16
				 : strcmp(ts, "bf16") == 0 ? MG_BF16
							   : MG_F32;
	gt_init(argc, argv);
	printf("copy ceiling (D2D memcpy, read+write): %.0f GB/s\n",
	       copy_ceiling());
	static const struct layer dws[] = {
		{32, 112, 1, 0, 3}, {96, 112, 2, 0, 3}, {144, 56, 1, 0, 3},
		{144, 56, 2, 0, 3}, {192, 28, 1, 0, 3}, {192, 28, 2, 0, 3},
		{384, 14, 1, 0, 3}, {576, 14, 1, 0, 3}, {576, 14, 2, 0, 3},
		{960, 7, 1, 0, 3}};
	static const char *dn[] = {"fwd", "bwd-data", "bwd-filter"};
	const size_t es = mg_dtype_size(dt);
	printf("\ndepthwise 3x3, N=%d, %s: ms per call (own GB/s = bytes "
	       "moved once / time)\n",
	       N, mg_dtype_name(dt));
	printf("%-18s %-10s %9s %9s %9s %8s  %s\n", "layer", "dir", "own",
	       "cudnn-h", "cudnn-f", "own GB/s", "best");
	double tot[3][3] = {{0}};
	for (size_t i = 0; i < sizeof dws / sizeof *dws; i++) {
		const struct layer *l = &dws[i];
		struct conv_bufs b;
		bufs_make(&b, dt, N, l);
		const double bytes = (double)(mg_tensor_bytes(&b.x) +
					      mg_tensor_bytes(&b.y)) +
				     (double)mg_tensor_bytes(&b.w);
		(void)es;
		for (int d = 0; d < 3; d++) {
			double t[3];
			for (int impl = 0; impl < 3; impl++) {
				use(impl);
				t[impl] = time_ms(&b, (enum dir)d);
				tot[d][impl] += t[impl];
			}
			int best = 0;
			for (int k = 1; k < 3; k++)
				if (t[k] > 0 && t[k] < t[best])
					best = k;
			char name[32];
			snprintf(name, sizeof name, "C%d %dpx s%d", l->C, l->H,
				 l->stride);
			printf("%-18s %-10s %9.4f %9.4f %9.4f %8.0f  %s\n",
			       name, dn[d], t[0], t[1], t[2],
			       bytes / (t[0] * 1e-3) / 1e9,
			       best == 0 ? "own"
					 : (best == 1 ? "cudnn-h" : "cudnn-f"));
		}
		bufs_free(&b);
	}
	for (int d = 0; d < 3; d++)
		printf("%-18s %-10s %9.4f %9.4f %9.4f\n", "TOTAL", dn[d],
		       tot[d][0], tot[d][1], tot[d][2]);

	static const struct layer dense[] = {
		{3, 224, 2, 32, 3},  {16, 112, 1, 96, 1}, {96, 56, 1, 24, 1},
		{144, 56, 1, 24, 1}, {192, 28, 1, 32, 1}, {576, 14, 1, 96, 1},
		{960, 7, 1, 160, 1}, {320, 7, 1, 1280, 1}};
	printf("\ndense convolutions, N=%d, %s: cuDNN heuristics vs Find vs "
	       "batched GEMM (1x1 only; ms per call)\n",
	       N, mg_dtype_name(dt));
	printf("%-22s %-10s %9s %9s %9s\n", "layer", "dir", "heur", "find",
	       "gemm");
	double dt_tot[3][3] = {{0}};
	for (size_t i = 0; i < sizeof dense / sizeof *dense; i++) {
		const struct layer *l = &dense[i];
		const int pw = l->k == 1 && l->stride == 1;
		struct conv_bufs b;
		bufs_make(&b, dt, N, l);
		for (int d = 0; d < 3; d++) {
			double t[3] = {0, 0, 0};
			for (int impl = 0; impl < 3; impl++) {
				if (impl == 2 && !pw)
					continue;
				use(impl + 1);
				t[impl] = time_ms(&b, (enum dir)d);
			}
			if (!pw)
				t[2] = t[0];
			for (int k = 0; k < 3; k++)
				dt_tot[d][k] += t[k];
			char name[40];
			snprintf(name, sizeof name, "%d->%d k%d %dpx s%d", l->C,
				 l->K, l->k, l->H, l->stride);
			printf("%-22s %-10s %9.4f %9.4f %9.4f%s\n", name, dn[d],
			       t[0], t[1], t[2], pw ? "" : " (heur)");
		}
		bufs_free(&b);
	}
	for (int d = 0; d < 3; d++)
		printf("%-22s %-10s %9.4f %9.4f %9.4f\n", "TOTAL", dn[d],
		       dt_tot[d][0], dt_tot[d][1], dt_tot[d][2]);
	bench_membound(N, dt);
	bench_nf4();
	use(0);
	return gt_finish();
}
