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
 *  4. the fused kernels the llama model's `kernels` option swaps in:
 *     linear + cross-entropy of the output head against linear,
 *     softmax_xent and their backwards at 4096 tokens x 128256 words x
 *     4096 (Llama 3 8B's head), bf16, with the memory each needs beyond
 *     the weights; residual add + RMSNorm against add then rmsnorm.
 *
 *   bench_gpu_ops [N] [f32|f16|bf16]     (default 64 f32)
 *   bench_gpu_ops attention [bf16|f16]   (default bf16)
 *   bench_gpu_ops fused                  (4. only)
 *   bench_gpu_ops qat                    (QAT's fake quantization and the
 *                                         dtype conversions only)
 *   bench_gpu_ops gemm                   (the bf16 GEMM ceiling only)
 *
 * The attention mode times causal attention forward, backward and both at
 * the LLaMA shapes (3-8B: n 2, T 512 and 2048, 32:8 heads, hd 128; 3.2-1B:
 * n 8, T 512 and n 4, T 2048, 32:8 heads, hd 64; 3.2-3B: n 4, T 1024,
 * 24:8 heads, hd 128), the flash kernels beside the tiled ones
 * (MG_CUDA_OPT_ATTN_FLASH), on random inputs: medians of 7 windows of 10
 * calls with the window spread, and TFLOPS of the causal work (forward
 * 2 N Hq T^2 hd, backward 2.5 times that, as FlashAttention counts).
 * Lines starting "ATTN" are read by bench/attention_vs_torch.py.
 *
 * Times are CUDA-event medians of 7 trials of 10 calls each, after
 * warm-up (the plan/algorithm choice happens in the warm-up). The copy
 * ceiling (device-to-device memcpy, bytes read + written) is printed
 * first so the own kernels' effective bandwidth has a yardstick.
 * Exits 77 ("SKIPPED: no GPU") without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_test.h"
#include "ops/cuda/cuda_llm.h"
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

/* ---- attention --------------------------------------------------- */

static char albl[160];
#define LBLA(...) (snprintf(albl, sizeof albl, __VA_ARGS__), albl)

struct ab {
	struct gt q, k, v, pos, o, lse, dout, dq, dk, dv;
	struct mg_attn_opts scale;
};

static int ab_fwd(void *p)
{
	struct ab *b = p;
	return mg_cuda_attention(&gt_gpu, &b->q.g, &b->k.g, &b->v.g, &b->pos.g,
				 &b->scale, &b->o.g, &b->lse.g);
}

static int ab_bwd(void *p)
{
	struct ab *b = p;
	return mg_cuda_attention_backward(
		&gt_gpu, &b->q.g, &b->k.g, &b->v.g, &b->pos.g, &b->scale,
		&b->o.g, &b->lse.g, &b->dout.g, &b->dq.g, &b->dk.g, &b->dv.g);
}

/* the backward's two halves (D is computed by both) */
static int ab_bwd_dq(void *p)
{
	struct ab *b = p;
	return mg_cuda_attention_backward(
		&gt_gpu, &b->q.g, &b->k.g, &b->v.g, &b->pos.g, &b->scale,
		&b->o.g, &b->lse.g, &b->dout.g, &b->dq.g, NULL, NULL);
}

static int ab_bwd_dkv(void *p)
{
	struct ab *b = p;
	return mg_cuda_attention_backward(
		&gt_gpu, &b->q.g, &b->k.g, &b->v.g, &b->pos.g, &b->scale,
		&b->o.g, &b->lse.g, &b->dout.g, NULL, &b->dk.g, &b->dv.g);
}

static int ab_both(void *p)
{
	return ab_fwd(p) || ab_bwd(p);
}

/* Median, fastest and slowest window of TRIALS windows of ITERS calls
 * (ms per call) after 3 warm-up calls; t[0] < 0 on error. */
static void time_spread(int (*fn)(void *), void *arg, double t3[3])
{
	cudaStream_t st = (cudaStream_t)gt_gpu.dev->stream;
	t3[0] = t3[1] = t3[2] = -1;
	for (int i = 0; i < 3; i++)
		if (fn(arg)) {
			printf("  error: %s\n", mg_last_error());
			return;
		}
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float t[TRIALS];
	int bad = 0;
	for (int r = 0; r < TRIALS; r++) {
		cudaEventRecord(e0, st);
		for (int i = 0; i < ITERS; i++)
			bad |= fn(arg);
		cudaEventRecord(e1, st);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&t[r], e0, e1);
		t[r] /= ITERS;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	if (gt_sync("bench") || bad)
		return;
	qsort(t, TRIALS, sizeof *t, cmp_f);
	t3[0] = t[TRIALS / 2];
	t3[1] = t[0];
	t3[2] = t[TRIALS - 1];
}

/* One timed line of one flash kernel alone: fn's median [fastest,
 * slowest] ms and the TFLOPS of `flop`. */
static void flash_line(const char *shape, const char *dir, int (*fn)(void *),
		       void *arg, double flop)
{
	double t3[3];
	time_spread(fn, arg, t3);
	if (t3[0] > 0)
		printf("%-18s %-6s %-8s %9.4f [%8.4f, %8.4f] %8.1f  (work "
		       "done)\n",
		       shape, "flash", dir, t3[0], t3[1], t3[2],
		       flop / (t3[0] * 1e-3) / 1e12);
}

static int bench_attention(enum mg_dtype dt)
{
	static const struct {
		const char *name;
		int N, T, Hq, Hkv, hd;
	} sh[] = {
		{"llama3-8b-T512", 2, 512, 32, 8, 128},
		{"llama3-8b-T2048", 2, 2048, 32, 8, 128},
		{"llama3.2-1b-T512", 8, 512, 32, 8, 64},
		/* the LLaMA issue's training shapes (1B 4 x 2048, 3B
		 * 4 x 1024) */
		{"llama3.2-1b-T2048", 4, 2048, 32, 8, 64},
		{"llama3.2-3b-T1024", 4, 1024, 24, 8, 128},
	};
	static const char *impl[] = {"tiled", "flash"};
	static const char *dir[] = {"fwd", "bwd", "fwd+bwd"};
	int (*fns[])(void *) = {ab_fwd, ab_bwd, ab_both};
	const double mul[] = {1.0, 2.5, 3.5};
	int rc = 0;
	printf("causal attention, %s: ms per call, median [fastest, slowest "
	       "of %d windows of %d]; TFLOPS of the causal work\n",
	       mg_dtype_name(dt), TRIALS, ITERS);
	printf("%-18s %-6s %-8s %9s %21s %8s\n", "shape", "impl", "dir", "ms",
	       "spread", "TFLOPS");
	for (size_t i = 0; i < sizeof sh / sizeof *sh; i++) {
		const int N = sh[i].N, T = sh[i].T, Hq = sh[i].Hq,
			  Hkv = sh[i].Hkv, hd = sh[i].hd;
		struct ab b;
		b.scale = MG_ATTN_OPTS(1 / sqrt((double)hd), 0);
		gt_make(&b.q, dt, -1, 4, N, T, Hq, hd);
		gt_make(&b.k, dt, -1, 4, N, T, Hkv, hd);
		gt_make(&b.v, dt, -1, 4, N, T, Hkv, hd);
		gt_make(&b.o, dt, -1, 4, N, T, Hq, hd);
		gt_make(&b.dout, dt, -1, 4, N, T, Hq, hd);
		gt_make(&b.dq, dt, -1, 4, N, T, Hq, hd);
		gt_make(&b.dk, dt, -1, 4, N, T, Hkv, hd);
		gt_make(&b.dv, dt, -1, 4, N, T, Hkv, hd);
		gt_make(&b.lse, MG_F32, MG_F32, 3, N, Hq, T, 0);
		gt_make(&b.pos, MG_I32, MG_I32, 2, N, T, 0, 0);
		for (int64_t j = 0; j < b.pos.n; j++)
			b.pos.v[j] = (double)(j % T); /* one document a row */
		gt_upload(&b.pos);
		gt_rand(&b.q, -2, 2);
		gt_rand(&b.k, -2, 2);
		gt_rand(&b.v, -1, 1);
		gt_rand(&b.dout, -1, 1);
		/* causal forward: QK^T and PV, 2 flops a multiply-add, half */
		const double fwd_flop = 2.0 * N * Hq * (double)T * T * hd;
		double ms[2][3] = {{-1, -1, -1}, {-1, -1, -1}};
		struct gt *res[4] = {&b.o, &b.dq, &b.dk, &b.dv};
		double *out[2][4] = {{NULL}};
		for (int f = 0; f < 2; f++) {
			mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_ATTN_FLASH, f);
			/* results of both for a cross-check at these sizes;
			 * the backward runs from this implementation's o, lse */
			if (ab_fwd(&b) || ab_bwd(&b) ||
			    gt_sync("attention fwd+bwd")) {
				printf("  error: %s\n", mg_last_error());
				rc = 1;
				continue;
			}
			for (int j = 0; j < 4; j++)
				out[f][j] = gt_read(res[j]);
			for (int d = 0; d < 3; d++) {
				double t3[3];
				time_spread(fns[d], &b, t3);
				ms[f][d] = t3[0];
				if (t3[0] < 0) {
					rc = 1;
					continue;
				}
				const double tf = mul[d] * fwd_flop /
						  (t3[0] * 1e-3) / 1e12;
				printf("%-18s %-6s %-8s %9.4f [%8.4f, %8.4f] "
				       "%8.1f\n",
				       sh[i].name, impl[f], dir[d], t3[0],
				       t3[1], t3[2], tf);
				printf("ATTN shape=%s dtype=%s impl=%s dir=%s "
				       "ms=%.5f min=%.5f max=%.5f "
				       "tflops=%.2f\n",
				       sh[i].name, mg_dtype_name(dt), impl[f],
				       dir[d], t3[0], t3[1], t3[2], tf);
			}
		}
		static const char *rn[] = {"o", "dq", "dk", "dv"};
		for (int j = 0; j < 4; j++) {
			if (!out[0][j] || !out[1][j])
				continue;
			double num = 0, den = 0;
			int64_t nans = 0;
			for (int64_t e = 0; e < res[j]->n; e++) {
				const double x = out[1][j][e], y = out[0][j][e];
				if (x != x)
					nans++;
				num += (x - y) * (x - y);
				den += y * y;
			}
			gt_report(
				LBLA("%s flash vs tiled %s", sh[i].name, rn[j]),
				dt, sqrt(num / (den > 0 ? den : 1)), gt_tol(dt),
				nans, "");
		}
		for (int f = 0; f < 2; f++)
			for (int j = 0; j < 4; j++)
				free(out[f][j]);
		/* where the flash backward's time goes: dq alone (2 products
		 * recomputed + dS K: 1.5x the forward's work) and dk, dv
		 * alone (2x) */
		flash_line(sh[i].name, "bwd dq", ab_bwd_dq, &b, 1.5 * fwd_flop);
		flash_line(sh[i].name, "bwd dkdv", ab_bwd_dkv, &b,
			   2.0 * fwd_flop);
		for (int d = 0; d < 3; d++)
			if (ms[0][d] > 0 && ms[1][d] > 0)
				printf("%-18s flash speed-up %-8s %.2fx\n",
				       sh[i].name, dir[d], ms[0][d] / ms[1][d]);
		struct gt *all[] = {&b.q,  &b.k,  &b.v,	 &b.o,	 &b.dout,
				    &b.dq, &b.dk, &b.dv, &b.lse, &b.pos};
		for (size_t j = 0; j < 10; j++)
			gt_free(all[j]);
	}
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_ATTN_FLASH, 1);
	return rc;
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

/* dtype conversion (mg_op_convert) of a Llama-2-7B decoder layer's
 * parameters (202M): FSDP converts each unit's bf16 gradients to f32
 * before an f32 reduction and the f32 master shard to bf16 after the
 * update, every step. */
struct cvb {
	void *d, *s;
	enum mg_dtype dt, st;
	int64_t n;
};

static int mb_convert(void *p)
{
	struct cvb *m = p;
	return mg_op_convert(&gt_gpu, m->d, m->dt, m->s, m->st, m->n);
}

static void bench_convert(void)
{
	static const enum mg_dtype pairs[][2] = {
		{MG_BF16, MG_F32}, {MG_F32, MG_BF16}, {MG_F16, MG_F32}};
	const int64_t n = 202383360;
	printf("\nconvert, %lld elements\n%-28s %9s %8s\n", (long long)n,
	       "pair", "ms", "GB/s");
	for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
		struct cvb m = {.st = pairs[i][0], .dt = pairs[i][1], .n = n};
		const size_t sb = (size_t)n * mg_dtype_size(m.st),
			     db = (size_t)n * mg_dtype_size(m.dt);
		m.s = dalloc(sb);
		m.d = dalloc(db);
		cudaMemset(m.s, 0x3c, sb);
		const double t = time_fn(mb_convert, &m);
		char name[40];
		snprintf(name, sizeof name, "%s -> %s", mg_dtype_name(m.st),
			 mg_dtype_name(m.dt));
		printf("%-28s %9.4f %8.0f\n", name, t,
		       (double)(sb + db) / (t * 1e-3) / 1e9);
		cudaFree(m.s);
		cudaFree(m.d);
	}
}

/* QAT's fake quantization (ops_quant.h) at the shapes a Llama step runs
 * it: int4 weights of a Llama 3 8B MLP matrix in groups of 32, int8
 * tokens of 8 x 1024 rows at 2048 (Llama 3.2 1B's width) and 8192 (its
 * MLP); forward, and the straight-through backward in place (what llama
 * runs), with the bandwidth of the bytes read plus written. */
struct qb {
	struct mg_tensor x, dy;
	int64_t g;
	int op;
};

static int mb_qat(void *p)
{
	struct qb *m = p;
	switch (m->op) {
	case 0:
		return mg_op_fq_int4_weight(&gt_gpu, &m->x, m->g, &m->dy);
	case 1:
		return mg_op_fq_int4_weight_backward(&gt_gpu, &m->x, m->g,
						     &m->dy, &m->dy);
	case 2:
		return mg_op_fq_int8_token(&gt_gpu, &m->x, &m->dy);
	default:
		return mg_op_fq_int8_token_backward(&gt_gpu, &m->x, &m->dy,
						    &m->dy);
	}
}

static void bench_qat(enum mg_dtype dt)
{
	static const struct {
		const char *name;
		int64_t rows, cols, g;
		int op;
	} c[] = {
		{"fq_int4_weight", 14336, 4096, 32, 0},
		{"fq_int4_weight_backward", 14336, 4096, 32, 1},
		{"fq_int8_token", 8192, 2048, 0, 2},
		{"fq_int8_token_backward", 8192, 2048, 0, 3},
		{"fq_int8_token", 8192, 8192, 0, 2},
		{"fq_int8_token_backward", 8192, 8192, 0, 3},
	};
	printf("\nqat fake quantization, %s\n%-36s %9s %8s\n",
	       mg_dtype_name(dt), "op", "ms", "GB/s");
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		const int64_t shape[2] = {c[i].rows, c[i].cols};
		struct qb m = {.g = c[i].g, .op = c[i].op};
		m.x = mg_tensor_make(NULL, dt, MG_DEV_CUDA, 2, shape);
		m.dy = m.x;
		const size_t bytes = mg_tensor_bytes(&m.x);
		m.x.data = dalloc(bytes);
		m.dy.data = dalloc(bytes);
		cudaMemset(m.x.data, 0x3c, bytes); /* finite, nonzero */
		cudaMemset(m.dy.data, 0x3c, bytes);
		const double t = time_fn(mb_qat, &m);
		/* read x (and dy in backward), write out */
		const double moved = (double)bytes * (c[i].op & 1 ? 3 : 2);
		char name[64];
		snprintf(name, sizeof name, "%s [%lld, %lld]", c[i].name,
			 (long long)c[i].rows, (long long)c[i].cols);
		printf("%-36s %9.4f %8.0f\n", name, t,
		       moved / (t * 1e-3) / 1e9);
		cudaFree(m.x.data);
		cudaFree(m.dy.data);
	}
}

/* The output head of a training step, unfused against the fused linear
 * + cross-entropy (ops_llm.h), at R tokens x V words x D width. */
struct hb {
	struct mg_tensor x, w, lab, sc, logits, work, met, dx, dw;
};

/* linear, softmax_xent, its backward in place, linear_backward. */
static int hb_unfused(void *p)
{
	struct hb *h = p;
	return mg_op_linear(&gt_gpu, &h->x, &h->w, NULL, &h->logits) ||
	       mg_op_softmax_xent(&gt_gpu, &h->logits, &h->lab, &h->met) ||
	       mg_op_softmax_xent_backward(&gt_gpu, &h->logits, &h->lab, &h->sc,
					   &h->logits) ||
	       mg_op_linear_backward(&gt_gpu, &h->x, &h->w, &h->logits, &h->dx,
				     &h->dw, NULL);
}

/* As the llama model runs it: the loss in forward, the gradients in
 * backward (each chunk's logits computed twice). */
static int hb_fused(void *p)
{
	struct hb *h = p;
	return mg_op_linear_xent(&gt_gpu, &h->x, &h->w, &h->lab, NULL, &h->work,
				 &h->met, NULL, NULL) ||
	       mg_op_linear_xent(&gt_gpu, &h->x, &h->w, &h->lab, &h->sc,
				 &h->work, NULL, &h->dx, &h->dw);
}

/* Loss and gradients in one call (three GEMMs a chunk). */
static int hb_fused1(void *p)
{
	struct hb *h = p;
	return mg_op_linear_xent(&gt_gpu, &h->x, &h->w, &h->lab, &h->sc,
				 &h->work, &h->met, &h->dx, &h->dw);
}

static struct mg_tensor hb_dev(enum mg_dtype dt, int64_t a, int64_t b)
{
	int64_t s[2] = {a, b};
	struct mg_tensor t =
		mg_tensor_make(NULL, dt, MG_DEV_CUDA, b ? 2 : 1, s);
	t.data = dalloc(mg_tensor_bytes(&t));
	return t;
}

static void bench_flce(int64_t R, int64_t V, int64_t D, enum mg_dtype dt)
{
	struct hb h;
	h.x = hb_dev(dt, R, D);
	h.w = hb_dev(dt, V, D);
	h.dx = hb_dev(dt, R, D);
	h.dw = hb_dev(dt, V, D);
	h.lab = hb_dev(MG_I32, R, 0);
	h.sc = hb_dev(MG_F32, 1, 0);
	h.met = hb_dev(MG_F32, MG_METRIC_N, 0);
	/* labels spread over the vocabulary, scale 1 / R, small inputs */
	int32_t *lab = malloc((size_t)R * sizeof *lab);
	for (int64_t r = 0; r < R; r++)
		lab[r] = (int32_t)((r * 7919) % V);
	const float sc = 1.0f / (float)R;
	cudaMemcpy(h.lab.data, lab, (size_t)R * sizeof *lab,
		   cudaMemcpyHostToDevice);
	cudaMemcpy(h.sc.data, &sc, sizeof sc, cudaMemcpyHostToDevice);
	cudaMemset(h.x.data, 0x3b, mg_tensor_bytes(&h.x));
	cudaMemset(h.w.data, 0x3a, mg_tensor_bytes(&h.w));
	free(lab);
	const double es = (double)mg_dtype_size(dt);
	const double flop = 2.0 * (double)R * (double)V * (double)D;
	printf("\noutput head (training step) at %lld tokens x %lld vocab x "
	       "%lld dim, %s: time, and the memory beyond x, w and their "
	       "gradients\n",
	       (long long)R, (long long)V, (long long)D, mg_dtype_name(dt));
	printf("%-34s %9s %8s %12s\n", "path", "ms", "TFLOP/s", "extra MiB");
	h.logits = hb_dev(dt, R, V);
	double t = time_fn(hb_unfused, &h);
	printf("%-34s %9.3f %8.0f %12.0f\n", "unfused (logits [R, V])", t,
	       3 * flop / (t * 1e-3) / 1e12,
	       (double)R * (double)V * es / 1048576);
	cudaFree(h.logits.data);
	static const int64_t chunks[] = {1024, 2048, 4096};
	for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
		const int64_t C = chunks[i] < R ? chunks[i] : R;
		h.work = hb_dev(dt, C, V);
		const double extra = (double)C * (double)V * es / 1048576 +
				     (double)R * 24 / 1048576;
		char name[64];
		snprintf(name, sizeof name, "flce chunk %lld (model: 4 GEMMs)",
			 (long long)C);
		t = time_fn(hb_fused, &h);
		printf("%-34s %9.3f %8.0f %12.0f\n", name, t,
		       4 * flop / (t * 1e-3) / 1e12, extra);
		snprintf(name, sizeof name, "flce chunk %lld (one call)",
			 (long long)C);
		t = time_fn(hb_fused1, &h);
		printf("%-34s %9.3f %8.0f %12.0f\n", name, t,
		       3 * flop / (t * 1e-3) / 1e12, extra);
		cudaFree(h.work.data);
	}
	struct mg_tensor *all[] = {&h.x,   &h.w,  &h.dx, &h.dw,
				   &h.lab, &h.sc, &h.met};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		cudaFree(all[i]->data);
}

struct gb {
	struct mg_tensor x, w, y;
};

static int gb_linear(void *p)
{
	struct gb *g = p;
	return mg_op_linear(&gt_gpu, &g->x, &g->w, NULL, &g->y);
}

/* The yardstick of model FLOP utilisation: mgrun's own GEMM path
 * (mg_op_linear, cuBLASLt) on bf16 products of the shapes a 7-8B layer
 * runs, the best of them printed as "GEMM ceiling" for the benchmark
 * scripts (bench/fsdp_llm.sh, gpu.sh like4like read it). Inputs are
 * random: on constant bytes the same products ran 10-15% faster (the
 * tensor cores draw less power on predictable data and clock higher), a
 * ceiling no real step reaches. */
/* n bf16 values uniform in [-1, 1) (the top half of an fp32), into d. */
static void fill_random_bf16(void *d, size_t n)
{
	uint16_t *h = malloc(n * sizeof *h);
	if (!h) {
		fprintf(stderr, "out of host memory\n");
		exit(1);
	}
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		float f =
			(float)((double)(x >> 11) / 9007199254740992.0) * 2.0f -
			1.0f;
		uint32_t u;
		memcpy(&u, &f, sizeof u);
		h[i] = (uint16_t)(u >> 16);
	}
	cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice);
	free(h);
}

static double bench_gemm_ceiling(void)
{
	static const int64_t shapes[][3] = {/* tokens, out, in */
					    {8192, 8192, 8192},
					    {4096, 11008, 4096},
					    {4096, 4096, 11008},
					    {4096, 14336, 4096}};
	double best = 0;
	printf("\nbf16 GEMM (mg_op_linear: y[M, N] = x[M, K] w[N, K]^T)\n");
	printf("%-24s %9s %9s\n", "M x N x K", "ms", "TFLOP/s");
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		const int64_t M = shapes[i][0], N = shapes[i][1],
			      K = shapes[i][2];
		struct gb g = {hb_dev(MG_BF16, M, K), hb_dev(MG_BF16, N, K),
			       hb_dev(MG_BF16, M, N)};
		fill_random_bf16(g.x.data, (size_t)(M * K));
		fill_random_bf16(g.w.data, (size_t)(N * K));
		const double t = time_fn(gb_linear, &g);
		const double tf = 2.0 * (double)M * (double)N * (double)K /
				  (t * 1e-3) / 1e12;
		char name[48];
		snprintf(name, sizeof name, "%lld x %lld x %lld", (long long)M,
			 (long long)N, (long long)K);
		printf("%-24s %9.3f %9.0f\n", name, t, tf);
		if (t > 0 && tf > best)
			best = tf;
		cudaFree(g.x.data), cudaFree(g.w.data), cudaFree(g.y.data);
	}
	printf("GEMM ceiling bf16: %.0f TFLOP/s (random data)\n", best);
	return best;
}

/* add + RMSNorm, forward and backward, fused against unfused, on a
 * [R, D] residual stream. */
struct rb {
	struct mg_tensor x, r, w, s, y, rs, dy, dres, dx, dt, dw;
};

static int rb_unfused(void *p)
{
	struct rb *b = p;
	return mg_op_add(&gt_gpu, &b->x, &b->r, &b->s) ||
	       mg_op_rmsnorm(&gt_gpu, &b->s, &b->w, 1e-5, &b->y, &b->rs) ||
	       mg_op_rmsnorm_backward(&gt_gpu, &b->s, &b->w, &b->rs, &b->dy,
				      &b->dt, &b->dw) ||
	       mg_op_add(&gt_gpu, &b->dres, &b->dt, &b->dx);
}

static int rb_fused(void *p)
{
	struct rb *b = p;
	return mg_op_add_rmsnorm(&gt_gpu, &b->x, &b->r, &b->w, 1e-5, &b->s,
				 &b->y, &b->rs) ||
	       mg_op_rmsnorm_backward_add(&gt_gpu, &b->s, &b->w, &b->rs, &b->dy,
					  &b->dres, &b->dx, &b->dw);
}

/* The kernel swap of seed 002 (Liger's fused RMSNorm) inside mgrun: add
 * then RMSNorm against the fused op, forward and backward, on a [R, D]
 * residual stream. Besides the readable lines, one RMSNORM line per
 * variant (median, fastest and slowest window) for
 * bench/rmsnorm_vs_torch.py, which times PyTorch's on the same shape. */
static void bench_rmsnorm(int64_t R, int64_t D, enum mg_dtype dt)
{
	struct rb b;
	struct mg_tensor *act[] = {&b.x,  &b.r,	   &b.s,  &b.y,
				   &b.dy, &b.dres, &b.dx, &b.dt};
	for (size_t i = 0; i < sizeof act / sizeof *act; i++)
		*act[i] = hb_dev(dt, R, D);
	b.w = hb_dev(MG_F32, D, 0);
	b.dw = hb_dev(MG_F32, D, 0);
	b.rs = hb_dev(MG_F32, R, 0);
	printf("\nresidual add + RMSNorm forward and backward, [%lld, %lld] "
	       "%s, F32 weight\n",
	       (long long)R, (long long)D, mg_dtype_name(dt));
	double tu[3], tf[3];
	time_spread(rb_unfused, &b, tu);
	time_spread(rb_fused, &b, tf);
	if (tu[0] > 0 && tf[0] > 0) {
		printf("%-34s %9.4f\n%-34s %9.4f  (%.2fx)\n",
		       "unfused (add, norm)", tu[0], "fused (kernels rmsnorm)",
		       tf[0], tu[0] / tf[0]);
		const double *t[] = {tu, tf};
		const char *impl[] = {"unfused", "fused"};
		for (int k = 0; k < 2; k++)
			printf("RMSNORM rows=%lld dim=%lld dtype=%s impl=%s "
			       "ms=%.5f min=%.5f max=%.5f\n",
			       (long long)R, (long long)D, mg_dtype_name(dt),
			       impl[k], t[k][0], t[k][1], t[k][2]);
	}
	for (size_t i = 0; i < sizeof act / sizeof *act; i++)
		cudaFree(act[i]->data);
	cudaFree(b.w.data), cudaFree(b.dw.data), cudaFree(b.rs.data);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "attention") == 0) {
		const enum mg_dtype adt =
			argc > 2 && strcmp(argv[2], "f16") == 0 ? MG_F16
								: MG_BF16;
		gt_init(argc, argv);
		const int rc = bench_attention(adt);
		const int frc = gt_finish();
		return rc ? 1 : frc;
	}

	if (argc > 1 && !strcmp(argv[1], "gemm")) {
		gt_init(argc, argv);
		const double c = bench_gemm_ceiling();
		const int frc = gt_finish();
		return c > 0 ? frc : 1;
	}
	if (argc > 1 && !strcmp(argv[1], "qat")) {
		/* bench_gpu_ops qat: the fake-quantization and conversion
		 * lines only */
		gt_init(argc, argv);
		printf("copy ceiling (D2D memcpy, read+write): %.0f GB/s\n",
		       copy_ceiling());
		bench_qat(MG_BF16);
		bench_convert();
		return gt_finish();
	}
	if (argc > 1 && !strcmp(argv[1], "fused")) {
		/* bench_gpu_ops fused: the kernel-swap lines only */
		gt_init(argc, argv);
		bench_flce(4096, 128256, 4096, MG_BF16);
		/* seed 002: Llama-2-7B's width, micro-batches 8 and 32 of
		 * 512 tokens */
		bench_rmsnorm(8 * 512, 4096, MG_BF16);
		bench_rmsnorm(32 * 512, 4096, MG_BF16);
		return gt_finish();
	}
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
	bench_qat(MG_BF16);
	bench_convert();
	bench_flce(4096, 128256, 4096, MG_BF16);
	bench_rmsnorm(32 * 512, 4096, MG_BF16);
	use(0);
	return gt_finish();
}
