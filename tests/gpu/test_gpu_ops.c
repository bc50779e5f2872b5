/*
 * test_gpu_ops.c - the CUDA ops against their CPU twins.
 *
 *   test_gpu_ops [conv|depthwise|batchnorm|elementwise|pool|linear|
 *                 dropout|loss|pref|resize|optim|llm|attention|nf4|qat|
 *                 fused|side|
 *                 determinism|graph|all]
 *
 * For every op and dtype (F64, F32, F16, BF16) on MobileNetV2's shapes
 * and odd ones: fresh random inputs (seed printed; MG_TEST_SEED repeats
 * it), the CPU op as reference (F32 on the same rounded inputs for
 * F16/BF16), outputs poisoned with NaN before each run so unwritten
 * elements fail, and ||gpu - cpu|| / ||cpu|| against 1e-12 (F64), 1e-5
 * (F32, no TF32) or 1e-2 (F16/BF16). Parameter gradients start random
 * and their change is compared (they must accumulate). F32/F64 go through
 * the public mg_op_* dispatch once it reaches CUDA, else (and for half
 * types, which the public checks do not admit yet) the mg_cuda_* twins
 * directly. Exits 77 ("SKIPPED: no GPU") without a usable GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_test.h"
#include "ops/cuda/cuda_ops.h"

static const enum mg_dtype all_dt[] = {MG_F64, MG_F32, MG_F16, MG_BF16};
static bool wired;	  /* public ops dispatch to CUDA */
static struct mg_buf gws; /* a caller-owned conv workspace */

#define CALL(name, dt, ...)                                                    \
	((wired && ((dt) == MG_F32 || (dt) == MG_F64))                         \
		 ? mg_op_##name(&gt_gpu, __VA_ARGS__)                          \
		 : mg_cuda_##name(&gt_gpu, __VA_ARGS__))
#define CPU(call, what)                                                        \
	do {                                                                   \
		if ((call) != 0) {                                             \
			printf("FAIL cpu %s: %s\n", what, mg_last_error());    \
			gt_fail++;                                             \
		}                                                              \
	} while (0)

static char lbl[160];
#define LBL(...) (snprintf(lbl, sizeof lbl, __VA_ARGS__), lbl)

/* ------------------------------------------------------------------ */

struct conv_case {
	int N, C, H, W, K, kh, kw, sh, sw, ph, pw, groups, bias;
	int nodx; /* backward without dx (a network's first layer) */
};

static void conv_check(enum mg_dtype dt, const struct conv_case *k,
		       const char *tag)
{
	const struct mg_conv2d_args a = {k->sh, k->sw, k->ph, k->pw, k->groups};
	const int64_t OH = mg_conv_out_dim(k->H, k->kh, k->sh, k->ph);
	const int64_t OW = mg_conv_out_dim(k->W, k->kw, k->sw, k->pw);
	const double tol = gt_tol(dt);
	struct gt x, w, b, y, dy, dx, dw, db;
	const double ws =
		1.0 / sqrt((double)(k->C / k->groups * k->kh * k->kw));
	char name[96];
	snprintf(name, sizeof name, "%s N%d %d->%d %dx%d k%dx%d s%d p%d g%d",
		 tag, k->N, k->C, k->K, k->H, k->W, k->kh, k->kw, k->sh, k->ph,
		 k->groups);
	gt_make(&x, dt, -1, 4, k->N, k->C, k->H, k->W);
	gt_make(&w, dt, -1, 4, k->K, k->C / k->groups, k->kh, k->kw);
	gt_make(&b, dt, -1, 1, k->K, 0, 0, 0);
	gt_make(&y, dt, -1, 4, k->N, k->K, OH, OW);
	gt_rand(&x, -1, 1);
	gt_rand(&w, -ws, ws);
	gt_rand(&b, -0.5, 0.5);
	gt_poison(&y);
	CPU(mg_op_conv2d(&gt_cpu, &a, &x.c, &w.c, k->bias ? &b.c : NULL, &y.c,
			 NULL),
	    name);
	if (!gt_ok(CALL(conv2d, dt, &a, &x.g, &w.g, k->bias ? &b.g : NULL, &y.g,
			&gws),
		   name))
		gt_check(LBL("%s y", name), dt, &y, tol);
	gt_make(&dy, dt, -1, 4, k->N, k->K, OH, OW);
	gt_make(&dx, dt, -1, 4, k->N, k->C, k->H, k->W);
	gt_make(&dw, dt, -1, 4, k->K, k->C / k->groups, k->kh, k->kw);
	gt_make(&db, dt, -1, 1, k->K, 0, 0, 0);
	gt_rand(&dy, -1, 1);
	gt_poison(&dx);
	gt_rand(&dw, -1, 1);
	gt_rand(&db, -1, 1);
	CPU(mg_op_conv2d_backward(&gt_cpu, &a, &x.c, &w.c, &dy.c,
				  k->nodx ? NULL : &dx.c, &dw.c,
				  k->bias ? &db.c : NULL, NULL),
	    name);
	if (!gt_ok(CALL(conv2d_backward, dt, &a, &x.g, &w.g, &dy.g,
			k->nodx ? NULL : &dx.g, &dw.g, k->bias ? &db.g : NULL,
			&gws),
		   name)) {
		if (!k->nodx)
			gt_check(LBL("%s dx", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dw", name), dt, &dw, tol);
		if (k->bias)
			gt_check_delta(LBL("%s db", name), dt, &db, tol);
	}
	gt_free(&x);
	gt_free(&w);
	gt_free(&b);
	gt_free(&y);
	gt_free(&dy);
	gt_free(&dx);
	gt_free(&dw);
	gt_free(&db);
}

static void test_conv(void)
{
	static const struct conv_case cases[] = {
		/* MobileNetV2 224 px stem, expand/project 1x1, head */
		{8, 3, 224, 224, 32, 3, 3, 2, 2, 1, 1, 1, 0, 0},
		{8, 16, 112, 112, 96, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		{64, 32, 28, 28, 192, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		{64, 144, 14, 14, 24, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		{64, 320, 7, 7, 1280, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		/* 1x1 on small planes (28 px): one GEMM over the batch at
		 * 1 x 1, dW through NHWC copies at 2 x 2 and 4 x 4; odd
		 * sizes and a partial transpose tile */
		{64, 320, 1, 1, 1280, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		{64, 96, 2, 2, 576, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		{64, 144, 4, 4, 32, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		{5, 7, 1, 1, 11, 1, 1, 1, 1, 0, 0, 1, 1, 0},
		{3, 37, 3, 5, 45, 1, 1, 1, 1, 0, 0, 1, 0, 0},
		/* Fashion-MNIST 28 px stem with bias */
		{64, 1, 28, 28, 32, 3, 3, 2, 2, 1, 1, 1, 1, 0},
		/* odd: rectangular window, mixed stride/pad, groups, bias */
		{3, 6, 13, 11, 4, 3, 5, 2, 1, 1, 2, 2, 1, 0},
		{5, 7, 9, 9, 11, 2, 2, 3, 3, 0, 0, 1, 1, 0},
		{3, 5, 7, 9, 6, 1, 1, 1, 1, 0, 0, 1, 1, 0},
		/* stems without dx (the band kernels with a channel
		 * multiplier), 100 px, an odd 125 px, 2 groups of 4 */
		{8, 1, 100, 100, 32, 3, 3, 2, 2, 1, 1, 1, 0, 1},
		{4, 1, 125, 125, 32, 3, 3, 2, 2, 1, 1, 1, 0, 1},
		{3, 2, 40, 40, 8, 3, 3, 1, 1, 1, 1, 2, 1, 1},
	};
	const size_t nc = sizeof cases / sizeof *cases;
	for (size_t d = 0; d < 4; d++)
		for (size_t i = 0; i < nc; i++)
			conv_check(all_dt[d], &cases[i], "conv");
	/* 1x1 convolutions through cuDNN instead of the batched GEMMs */
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_POINTWISE_GEMM, 0);
	for (size_t d = 0; d < 4; d++)
		for (size_t i = 0; i < nc; i++)
			if (cases[i].kh == 1 && cases[i].sh == 1)
				conv_check(all_dt[d], &cases[i],
					   "conv(cudnn 1x1)");
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_POINTWISE_GEMM, 1);
}

static void test_depthwise(void)
{
	static const struct conv_case cases[] = {
		{8, 32, 112, 112, 32, 3, 3, 1, 1, 1, 1, 32, 0, 0},
		{8, 96, 112, 112, 96, 3, 3, 2, 2, 1, 1, 96, 0, 0},
		{64, 144, 28, 28, 144, 3, 3, 1, 1, 1, 1, 144, 0, 0},
		{64, 192, 28, 28, 192, 3, 3, 2, 2, 1, 1, 192, 0, 0},
		{64, 960, 7, 7, 960, 3, 3, 1, 1, 1, 1, 960, 1, 0},
		{3, 5, 9, 13, 5, 3, 3, 2, 2, 1, 1, 5, 1, 0},
		{2, 7, 10, 11, 7, 5, 5, 1, 1, 2, 2, 7, 1, 0},
		{2, 4, 8, 9, 4, 3, 3, 3, 3, 0, 0, 4, 0, 0},
		{3, 6, 7, 8, 6, 3, 1, 1, 2, 1, 0, 6, 1, 0},
		/* band kernels: odd planes (unaligned rows, a partial last
		 * band), a 250-wide plane, and one too wide for a band in
		 * shared memory (F64) */
		{4, 24, 125, 125, 24, 3, 3, 2, 2, 1, 1, 24, 0, 0},
		{3, 16, 63, 63, 16, 3, 3, 1, 1, 1, 1, 16, 1, 0},
		{2, 8, 250, 250, 8, 3, 3, 1, 1, 1, 1, 8, 0, 0},
		{1, 2, 20, 2000, 2, 3, 3, 1, 1, 1, 1, 2, 0, 0},
	};
	for (size_t d = 0; d < 4; d++)
		for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
			conv_check(all_dt[d], &cases[i], "dwconv");
	/* The cuDNN grouped-conv alternative must agree too. */
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_DEPTHWISE_CUDNN, 1);
	for (size_t d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
			conv_check(all_dt[d], &cases[i], "dwconv(cudnn)");
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_DEPTHWISE_CUDNN, 0);
}

/* ------------------------------------------------------------------ */

/* Label of the batch-norm path under test ("" the default). */
static const char *bn_path = "";

static void bn_check(enum mg_dtype dt, int N, int C, int H, int W,
		     bool training, enum mg_act act, enum mg_dtype rsdt)
{
	const enum mg_dtype pdt = dt == MG_F64 ? MG_F64 : MG_F32;
	const struct mg_bn_args a = {1e-5, 0.1, training, act};
	const double tol = gt_tol(dt);
	/* parameter-side values (F32 for half activations) are reported
	 * under the activation dtype, with its limit */
	const double ptol = dt == MG_F64 ? 1e-12 : (dt == MG_F32 ? 1e-5 : 1e-2);
	struct gt x, g, b, rm, rv, sm, si, y, dy, dx, dg, dbt;
	char name[96];
	snprintf(name, sizeof name, "bn%s %s%s N%d C%d %dx%d rs=%s", bn_path,
		 training ? "train" : "eval",
		 act == MG_ACT_RELU6 ? "+relu6" : "", N, C, H, W,
		 mg_dtype_name(rsdt));
	gt_make(&x, dt, -1, 4, N, C, H, W);
	gt_make(&g, pdt, -1, 1, C, 0, 0, 0);
	gt_make(&b, pdt, -1, 1, C, 0, 0, 0);
	gt_make(&rm, rsdt, -1, 1, C, 0, 0, 0);
	gt_make(&rv, rsdt, -1, 1, C, 0, 0, 0);
	gt_make(&sm, pdt, -1, 1, C, 0, 0, 0);
	gt_make(&si, pdt, -1, 1, C, 0, 0, 0);
	gt_make(&y, dt, -1, 4, N, C, H, W);
	/* values around an offset so |mean| > std, spanning ReLU6's kinks */
	gt_rand(&x, 1.0, 5.0);
	gt_rand(&g, 0.5, 3.0);
	gt_rand(&b, -1, 4);
	gt_rand(&rm, 1, 4);
	gt_rand(&rv, 0.5, 2);
	gt_poison(&sm);
	gt_poison(&si);
	gt_poison(&y);
	CPU(mg_op_batchnorm2d(&gt_cpu, &a, &x.c, &g.c, &b.c, &rm.c, &rv.c,
			      &sm.c, &si.c, &y.c),
	    name);
	if (!gt_ok(CALL(batchnorm2d, dt, &a, &x.g, &g.g, &b.g, &rm.g, &rv.g,
			&sm.g, &si.g, &y.g),
		   name)) {
		gt_check(LBL("%s y", name), dt, &y, tol);
		gt_check(LBL("%s save_mean", name), dt, &sm, ptol);
		gt_check(LBL("%s save_invstd", name), dt, &si, ptol);
		if (training) {
			gt_check_delta(LBL("%s running_mean", name), dt, &rm,
				       ptol);
			gt_check_delta(LBL("%s running_var", name), dt, &rv,
				       ptol);
		}
	}
	/* backward from the same y and statistics on both sides */
	gt_from_cpu(&y);
	gt_from_cpu(&sm);
	gt_from_cpu(&si);
	gt_make(&dy, dt, -1, 4, N, C, H, W);
	gt_make(&dx, dt, -1, 4, N, C, H, W);
	gt_make(&dg, pdt, -1, 1, C, 0, 0, 0);
	gt_make(&dbt, pdt, -1, 1, C, 0, 0, 0);
	gt_rand(&dy, -1, 1);
	gt_poison(&dx);
	gt_rand(&dg, -1, 1);
	gt_rand(&dbt, -1, 1);
	CPU(mg_op_batchnorm2d_backward(&gt_cpu, &a, &x.c, &y.c, &dy.c, &g.c,
				       &sm.c, &si.c, &dx.c, &dg.c, &dbt.c),
	    name);
	if (!gt_ok(CALL(batchnorm2d_backward, dt, &a, &x.g, &y.g, &dy.g, &g.g,
			&sm.g, &si.g, &dx.g, &dg.g, &dbt.g),
		   name)) {
		gt_check(LBL("%s dx", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dgamma", name), dt, &dg, ptol);
		gt_check_delta(LBL("%s dbeta", name), dt, &dbt, ptol);
	}
	struct gt *all[] = {&x,	 &g, &b,  &rm, &rv, &sm,
			    &si, &y, &dy, &dx, &dg, &dbt};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		gt_free(all[i]);
}

static void test_batchnorm(void)
{
	/* the small-plane kernel is opt-in until measured on a GPU
	 * (MG_CUDA_BN_SMALL): every shape below through it, then the small
	 * ones again through the default block-a-channel path */
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_BN_SMALL, 1);
	/* 125x125 and 63x63: large planes whose starts are not 16-byte
	 * aligned (the vector paths' ends and straddling vectors); 64 x 4
	 * x 96 x 96 splits each channel into the most slices (64), whose
	 * last block finalises. Channels of N * HW <= 4096 take the
	 * small-plane kernel: 1 to 8 warps a channel (64, 130, 507, 1024
	 * elements; 37 and 11 channels leave idle groups in the last
	 * block), 16 elements a thread (3136, 3993); 41 x 10 x 10 (4100)
	 * is one slice of the folded path again. */
	static const int shapes[][4] = {
		{8, 32, 112, 112}, {64, 960, 7, 7},  {64, 16, 28, 28},
		{3, 5, 7, 3},	   {4, 6, 125, 125}, {3, 7, 63, 63},
		{64, 4, 96, 96},   {5, 9, 1, 1},     {64, 1280, 1, 1},
		{2, 37, 5, 13},	   {3, 11, 13, 13},  {64, 576, 2, 2},
		{64, 192, 4, 4},   {7, 13, 9, 11},   {33, 3, 11, 11},
		{41, 3, 10, 10}};
	for (size_t d = 0; d < 4; d++) {
		const enum mg_dtype dt = all_dt[d];
		const enum mg_dtype rs = dt == MG_F64 ? MG_F64 : MG_F32;
		for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
			const int *k = shapes[s];
			bn_check(dt, k[0], k[1], k[2], k[3], true, MG_ACT_RELU6,
				 rs);
			bn_check(dt, k[0], k[1], k[2], k[3], true, MG_ACT_NONE,
				 rs);
		}
		bn_check(dt, 16, 24, 14, 14, false, MG_ACT_RELU6, rs);
		bn_check(dt, 3, 5, 7, 3, false, MG_ACT_NONE, rs);
	}
	/* F32 activations with F64 running statistics */
	bn_check(MG_F32, 4, 8, 9, 7, true, MG_ACT_RELU6, MG_F64);
	/* the small planes again through the block-a-channel path (the
	 * knob's other setting) */
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_BN_SMALL, 0);
	bn_path = "(block, default)";
	static const int small[][4] = {
		{64, 960, 7, 7}, {5, 9, 1, 1}, {2, 37, 5, 13}, {64, 192, 4, 4}};
	for (size_t d = 1; d < 4; d += 2)
		for (size_t s = 0; s < sizeof small / sizeof *small; s++) {
			const int *k = small[s];
			bn_check(all_dt[d], k[0], k[1], k[2], k[3], true,
				 MG_ACT_RELU6, MG_F32);
		}
	bn_path = "";
}

/* ------------------------------------------------------------------ */

static void test_elementwise(void)
{
	static const int64_t sizes[] = {8 * 32 * 112 * 112, 1001};
	for (size_t d = 0; d < 4; d++) {
		const enum mg_dtype dt = all_dt[d];
		for (size_t s = 0; s < 2; s++) {
			const int64_t n = sizes[s];
			struct gt x, y, dy, dx, b, da, db;
			gt_make(&x, dt, -1, 1, n, 0, 0, 0);
			gt_make(&y, dt, -1, 1, n, 0, 0, 0);
			gt_rand(&x, -3, 9);
			gt_poison(&y);
			CPU(mg_op_relu6(&gt_cpu, &x.c, &y.c), "relu6");
			if (!gt_ok(CALL(relu6, dt, &x.g, &y.g), "relu6"))
				gt_check(LBL("relu6 n=%lld", (long long)n), dt,
					 &y, gt_tol(dt));
			gt_from_cpu(&y);
			gt_make(&dy, dt, -1, 1, n, 0, 0, 0);
			gt_make(&dx, dt, -1, 1, n, 0, 0, 0);
			gt_rand(&dy, -1, 1);
			gt_poison(&dx);
			CPU(mg_op_relu6_backward(&gt_cpu, &y.c, &dy.c, &dx.c),
			    "relu6_backward");
			if (!gt_ok(CALL(relu6_backward, dt, &y.g, &dy.g, &dx.g),
				   "relu6_backward"))
				gt_check(LBL("relu6_backward n=%lld",
					     (long long)n),
					 dt, &dx, gt_tol(dt));
			gt_make(&b, dt, -1, 1, n, 0, 0, 0);
			gt_rand(&b, -1, 1);
			gt_poison(&y);
			CPU(mg_op_add(&gt_cpu, &x.c, &b.c, &y.c), "add");
			if (!gt_ok(CALL(add, dt, &x.g, &b.g, &y.g), "add"))
				gt_check(LBL("add n=%lld", (long long)n), dt,
					 &y, gt_tol(dt));
			gt_make(&da, dt, -1, 1, n, 0, 0, 0);
			gt_make(&db, dt, -1, 1, n, 0, 0, 0);
			gt_rand(&da, -1, 1);
			gt_rand(&db, -1, 1);
			CPU(mg_op_add_backward(&gt_cpu, &dy.c, &da.c, &db.c),
			    "add_backward");
			if (!gt_ok(CALL(add_backward, dt, &dy.g, &da.g, &db.g),
				   "add_backward")) {
				gt_check_delta(LBL("add_backward da n=%lld",
						   (long long)n),
					       dt, &da, gt_tol(dt));
				gt_check_delta(LBL("add_backward db n=%lld",
						   (long long)n),
					       dt, &db, gt_tol(dt));
			}
			struct gt *all[] = {&x, &y, &dy, &dx, &b, &da, &db};
			for (size_t i = 0; i < 7; i++)
				gt_free(all[i]);
		}
	}
}

static void test_pool(void)
{
	static const int shapes[][4] = {
		{64, 1280, 7, 7}, {3, 5, 3, 5}, {8, 32, 56, 56}};
	for (size_t d = 0; d < 4; d++) {
		const enum mg_dtype dt = all_dt[d];
		for (size_t s = 0; s < 3; s++) {
			const int *k = shapes[s];
			struct gt x, y, dx;
			gt_make(&x, dt, -1, 4, k[0], k[1], k[2], k[3]);
			gt_make(&y, dt, -1, 2, k[0], k[1], 0, 0);
			gt_make(&dx, dt, -1, 4, k[0], k[1], k[2], k[3]);
			gt_rand(&x, -1, 2);
			gt_poison(&y);
			CPU(mg_op_global_avgpool(&gt_cpu, &x.c, &y.c), "gap");
			if (!gt_ok(CALL(global_avgpool, dt, &x.g, &y.g), "gap"))
				gt_check(LBL("global_avgpool %dx%dx%dx%d", k[0],
					     k[1], k[2], k[3]),
					 dt, &y, gt_tol(dt));
			gt_rand(&y, -1, 1);
			gt_poison(&dx);
			CPU(mg_op_global_avgpool_backward(&gt_cpu, &y.c, &dx.c),
			    "gap bwd");
			if (!gt_ok(CALL(global_avgpool_backward, dt, &y.g,
					&dx.g),
				   "gap bwd"))
				gt_check(LBL("global_avgpool_backward "
					     "%dx%dx%dx%d",
					     k[0], k[1], k[2], k[3]),
					 dt, &dx, gt_tol(dt));
			gt_free(&x);
			gt_free(&y);
			gt_free(&dx);
		}
	}
}

/* ------------------------------------------------------------------ */

/* The linear backward on the GPU: dx written, or added to when add. */
static int gpu_linear_backward(enum mg_dtype dt, struct gt *x, struct gt *w,
			       struct gt *dy, struct gt *dx, bool add,
			       struct gt *dw, struct gt *db)
{
	if (wired && (dt == MG_F32 || dt == MG_F64))
		return add ? mg_op_linear_backward_add(&gt_gpu, &x->g, &w->g,
						       &dy->g, &dx->g, &dw->g,
						       db ? &db->g : NULL)
			   : mg_op_linear_backward(&gt_gpu, &x->g, &w->g,
						   &dy->g, &dx->g, &dw->g,
						   db ? &db->g : NULL);
	return mg_cuda_linear_backward(&gt_gpu, &x->g, &w->g, &dy->g, &dx->g,
				       add, &dw->g, db ? &db->g : NULL);
}

static void linear_check(enum mg_dtype dt, int ndim, int64_t d0, int64_t d1,
			 int64_t in, int64_t out, bool bias)
{
	struct gt x, w, b, y, dy, dx, dw, db;
	const double tol = gt_tol(dt);
	char name[96];
	if (ndim == 3)
		snprintf(name, sizeof name,
			 "linear [%lld, %lld, %lld] -> %lld%s", (long long)d0,
			 (long long)d1, (long long)in, (long long)out,
			 bias ? " +b" : "");
	else
		snprintf(name, sizeof name, "linear [%lld, %lld] -> %lld%s",
			 (long long)d0, (long long)in, (long long)out,
			 bias ? " +b" : "");
	if (ndim == 3) {
		gt_make(&x, dt, -1, 3, d0, d1, in, 0);
		gt_make(&y, dt, -1, 3, d0, d1, out, 0);
		gt_make(&dy, dt, -1, 3, d0, d1, out, 0);
		gt_make(&dx, dt, -1, 3, d0, d1, in, 0);
	} else {
		gt_make(&x, dt, -1, 2, d0, in, 0, 0);
		gt_make(&y, dt, -1, 2, d0, out, 0, 0);
		gt_make(&dy, dt, -1, 2, d0, out, 0, 0);
		gt_make(&dx, dt, -1, 2, d0, in, 0, 0);
	}
	gt_make(&w, dt, -1, 2, out, in, 0, 0);
	gt_make(&b, dt, -1, 1, out, 0, 0, 0);
	gt_make(&dw, dt, -1, 2, out, in, 0, 0);
	gt_make(&db, dt, -1, 1, out, 0, 0, 0);
	gt_rand(&x, -1, 1);
	gt_rand(&w, -1 / sqrt((double)in), 1 / sqrt((double)in));
	gt_rand(&b, -1, 1);
	gt_poison(&y);
	CPU(mg_op_linear(&gt_cpu, &x.c, &w.c, bias ? &b.c : NULL, &y.c), name);
	if (!gt_ok(CALL(linear, dt, &x.g, &w.g, bias ? &b.g : NULL, &y.g),
		   name))
		gt_check(LBL("%s y", name), dt, &y, tol);
	/* y += x w^T + b (the GEMM's beta = 1) onto a random y, small
	 * beside the product for the reason dx's add below gives; an
	 * overwrite or a lost bias would be off by far more than tol */
	gt_rand(&y, -0.02, 0.02);
	CPU(mg_op_linear_add(&gt_cpu, &x.c, &w.c, bias ? &b.c : NULL, &y.c),
	    name);
	if (!gt_ok(CALL(linear_add, dt, &x.g, &w.g, bias ? &b.g : NULL, &y.g),
		   name))
		gt_check_delta(LBL("%s y added", name), dt, &y, tol);
	gt_rand(&dy, -1, 1);
	gt_poison(&dx);
	gt_rand(&dw, -1, 1);
	gt_rand(&db, -1, 1);
	CPU(mg_op_linear_backward(&gt_cpu, &x.c, &w.c, &dy.c, &dx.c, &dw.c,
				  bias ? &db.c : NULL),
	    name);
	if (!gt_ok(gpu_linear_backward(dt, &x, &w, &dy, &dx, false, &dw,
				       bias ? &db : NULL),
		   name)) {
		gt_check(LBL("%s dx", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dw", name), dt, &dw, tol);
		if (bias)
			gt_check_delta(LBL("%s db", name), dt, &db, tol);
	}
	/* dx += dy w (the GEMM's beta = 1) onto a random dx: small beside
	 * the product, so a half type's rounding of dx's start does not
	 * swamp the delta compared, while an overwrite (no add) would be
	 * off by about |dx| / |dy w| = 0.1-0.5 */
	gt_rand(&dx, -0.02, 0.02);
	gt_rand(&dw, -1, 1);
	CPU(mg_op_linear_backward_add(&gt_cpu, &x.c, &w.c, &dy.c, &dx.c, &dw.c,
				      NULL),
	    name);
	if (!gt_ok(gpu_linear_backward(dt, &x, &w, &dy, &dx, true, &dw, NULL),
		   name)) {
		gt_check_delta(LBL("%s dx added", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dw (add)", name), dt, &dw, tol);
	}
	struct gt *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
	for (size_t i = 0; i < 8; i++)
		gt_free(all[i]);
}

static void test_linear(void)
{
	for (size_t d = 0; d < 4; d++) {
		const enum mg_dtype dt = all_dt[d];
		linear_check(dt, 2, 64, 0, 1280, 1000, true);
		linear_check(dt, 2, 64, 0, 1280, 10, true);
		linear_check(dt, 2, 7, 0, 13, 5, false);
		linear_check(dt, 3, 4, 9, 33, 17, true);
		linear_check(dt, 2, 1000, 0, 64, 48, true);
		/* a LoRA adapter's B product: inner dimension = rank */
		linear_check(dt, 2, 515, 0, 8, 333, false);
	}
}

/* ------------------------------------------------------------------ */

static void dropout_check(enum mg_dtype dt, int64_t n, double p)
{
	struct gt x, y;
	const uint64_t key = ((uint64_t)(gt_urand() * 4294967296.0) << 32) |
			     (uint64_t)(gt_urand() * 4294967296.0);
	const int64_t off = (int64_t)(gt_urand() * 1e6);
	gt_make(&x, dt, -1, 1, n, 0, 0, 0);
	gt_make(&y, dt, -1, 1, n, 0, 0, 0);
	gt_rand(&x, 0.5, 1.5); /* non-zero: y == 0 exactly where dropped */
	for (int pass = 0; pass < 2; pass++) {
		const char *op = pass ? "dropout_backward" : "dropout";
		gt_poison(&y);
		if (pass) {
			CPU(mg_op_dropout_backward(&gt_cpu, &x.c, &y.c, p, key,
						   off),
			    op);
			if (gt_ok(CALL(dropout_backward, dt, &x.g, &y.g, p, key,
				       off),
				  op))
				continue;
		} else {
			CPU(mg_op_dropout(&gt_cpu, &x.c, &y.c, p, key, off),
			    op);
			if (gt_ok(CALL(dropout, dt, &x.g, &y.g, p, key, off),
				  op))
				continue;
		}
		double *g = gt_read(&y);
		int64_t diff = 0;
		for (int64_t i = 0; i < n; i++)
			diff += (g[i] == 0) != (gt_cpu_at(&y, i) == 0);
		free(g);
		char note[64];
		snprintf(note, sizeof note, " mask diffs %lld",
			 (long long)diff);
		gt_check(LBL("%s n=%lld p=%.2f", op, (long long)n, p), dt, &y,
			 gt_tol(dt));
		gt_report(LBL("%s n=%lld p=%.2f mask bit-exact", op,
			      (long long)n, p),
			  dt, (double)diff, 0, 0, note);
	}
	gt_free(&x);
	gt_free(&y);
}

static void test_dropout(void)
{
	for (size_t d = 0; d < 4; d++) {
		dropout_check(all_dt[d], 64 * 1280 + 3, 0.2);
		dropout_check(all_dt[d], 1001, 0.5);
		dropout_check(all_dt[d], 777, 0.0);
		dropout_check(all_dt[d], 777, 1.0);
	}
}

/* ------------------------------------------------------------------ */

static void xent_check(enum mg_dtype dt, int64_t rows, int64_t K,
		       enum mg_dtype mdt, bool ignore, bool with_scale)
{
	struct gt lg, lab, met, dl, sc;
	const double tol = gt_tol(dt);
	char name[96];
	snprintf(name, sizeof name, "softmax_xent %lldx%lld metrics %s%s",
		 (long long)rows, (long long)K, mg_dtype_name(mdt),
		 ignore ? " ignore" : "");
	gt_make(&lg, dt, -1, 2, rows, K, 0, 0);
	gt_make(&lab, MG_I32, -1, 1, rows, 0, 0, 0);
	gt_make(&met, mdt, -1, 1, MG_METRIC_N, 0, 0, 0);
	gt_make(&dl, dt, -1, 2, rows, K, 0, 0);
	gt_make(&sc, MG_F32, -1, 1, 1, 0, 0, 0);
	gt_rand(&lg, -4, 4);
	for (int64_t r = 0; r < rows; r++) {
		lab.v[r] = (double)(int64_t)(gt_urand() * (double)K);
		if (ignore && gt_urand() < 0.2)
			lab.v[r] = -1;
	}
	/* a few rows that predict their label, so "correct" is not 0 */
	for (int64_t r = 0; r < rows; r += 3)
		if (lab.v[r] >= 0)
			lg.v[r * K + (int64_t)lab.v[r]] = 9;
	gt_upload(&lg);
	gt_upload(&lab);
	gt_poison(&met);
	CPU(mg_op_softmax_xent(&gt_cpu, &lg.c, &lab.c, &met.c), name);
	if (!gt_ok(CALL(softmax_xent, dt, &lg.g, &lab.g, &met.g), name))
		gt_check(LBL("%s metrics", name), dt, &met,
			 mdt == MG_F64 && dt == MG_F64 ? 1e-12 : tol);
	sc.v[0] = 0.25 + gt_urand();
	gt_upload(&sc);
	gt_poison(&dl);
	CPU(mg_op_softmax_xent_backward(&gt_cpu, &lg.c, &lab.c,
					with_scale ? &sc.c : NULL, &dl.c),
	    name);
	if (!gt_ok(CALL(softmax_xent_backward, dt, &lg.g, &lab.g,
			with_scale ? &sc.g : NULL, &dl.g),
		   name))
		gt_check(LBL("%s dlogits%s", name, with_scale ? " scaled" : ""),
			 dt, &dl, tol);
	struct gt *all[] = {&lg, &lab, &met, &dl, &sc};
	for (size_t i = 0; i < 5; i++)
		gt_free(all[i]);
}

static void test_loss(void)
{
	for (size_t d = 0; d < 4; d++) {
		const enum mg_dtype dt = all_dt[d];
		xent_check(dt, 64, 10, MG_F32, false, true);
		xent_check(dt, 64, 1000, dt == MG_F64 ? MG_F64 : MG_F32, false,
			   true);
		xent_check(dt, 37, 32003, MG_F64, true, false);
		xent_check(dt, 1, 1, MG_F32, false, true);
	}
}

/* ------------------------------------------------------------------ */
/* Preference pairs (DPO): per-document log-probs and the DPO loss.     */

static void pair_check(enum mg_dtype dt, int64_t N, int64_t T, int64_t K)
{
	const enum mg_dtype vdt = dt == MG_F64 ? MG_F64 : MG_F32;
	const double tol = gt_tol(dt);
	struct gt lg, lab, pos, lp, dlp, dl;
	char name[96];
	snprintf(name, sizeof name, "pair_logprob %lldx%lldx%lld", (long long)N,
		 (long long)T, (long long)K);
	gt_make(&lg, dt, -1, 2, N * T, K, 0, 0);
	gt_make(&lab, MG_I32, MG_I32, 2, N, T, 0, 0);
	gt_make(&pos, MG_I32, MG_I32, 2, N, T, 0, 0);
	gt_make(&lp, vdt, -1, 2, N, 2, 0, 0);
	gt_make(&dlp, vdt, -1, 2, N, 2, 0, 0);
	gt_make(&dl, dt, -1, 2, N * T, K, 0, 0);
	gt_rand(&lg, -4, 4);
	/* [prompt + chosen | prompt + rejected], then padding */
	for (int64_t i = 0; i < N; i++) {
		int64_t a = 1 + (int64_t)(gt_urand() * (double)(T / 2 - 1));
		int64_t b = 1 + (int64_t)(gt_urand() * (double)(T - a - 1));
		int64_t pr = (int64_t)(gt_urand() * (double)(a < b ? a : b));
		for (int64_t t = 0; t < T; t++) {
			int64_t j = t < a ? t : t < a + b ? t - a : 0;
			bool label = t < a + b && j >= pr && gt_urand() < 0.9;
			pos.v[i * T + t] = (double)j;
			lab.v[i * T + t] =
				label ? (double)(int64_t)(gt_urand() *
							  (double)K)
				      : -100;
		}
	}
	gt_upload(&lab);
	gt_upload(&pos);
	gt_poison(&lp);
	CPU(mg_op_pair_logprob(&gt_cpu, &lg.c, &lab.c, &pos.c, &lp.c), name);
	if (!gt_ok(CALL(pair_logprob, dt, &lg.g, &lab.g, &pos.g, &lp.g), name))
		gt_check(LBL("%s logp", name), dt, &lp, tol);
	gt_rand(&dlp, -2, 2);
	gt_poison(&dl);
	CPU(mg_op_pair_logprob_backward(&gt_cpu, &lg.c, &lab.c, &pos.c, &dlp.c,
					&dl.c),
	    name);
	if (!gt_ok(CALL(pair_logprob_backward, dt, &lg.g, &lab.g, &pos.g,
			&dlp.g, &dl.g),
		   name))
		gt_check(LBL("%s dlogits", name), dt, &dl, tol);
	struct gt *all[] = {&lg, &lab, &pos, &lp, &dlp, &dl};
	for (size_t i = 0; i < 6; i++)
		gt_free(all[i]);
}

static void dpo_check(enum mg_dtype vdt, enum mg_dtype mdt, int64_t N,
		      double beta, double eps)
{
	struct gt lp, ref, met, dlp, sc;
	char name[96];
	snprintf(name, sizeof name, "dpo_loss %lld pairs beta %g eps %g %s",
		 (long long)N, beta, eps, mg_dtype_name(mdt));
	gt_make(&lp, vdt, -1, 2, N, 2, 0, 0);
	gt_make(&ref, vdt, -1, 2, N, 2, 0, 0);
	gt_make(&met, mdt, -1, 1, MG_DPO_NSUMS, 0, 0, 0);
	gt_make(&dlp, vdt, -1, 2, N, 2, 0, 0);
	gt_make(&sc, MG_F32, -1, 1, 1, 0, 0, 0);
	gt_rand(&lp, -60, -10);
	for (int64_t i = 0; i < 2 * N; i++)
		ref.v[i] = lp.v[i] + 4 * (gt_urand() - 0.5);
	gt_upload(&ref);
	gt_poison(&met);
	CPU(mg_op_dpo_loss(&gt_cpu, &lp.c, &ref.c, beta, eps, &met.c), name);
	if (!gt_ok(CALL(dpo_loss, vdt, &lp.g, &ref.g, beta, eps, &met.g), name))
		gt_check(LBL("%s metrics", name), vdt, &met,
			 vdt == MG_F64 && mdt == MG_F64 ? 1e-12 : 1e-5);
	sc.v[0] = 0.25 + gt_urand();
	gt_upload(&sc);
	gt_poison(&dlp);
	CPU(mg_op_dpo_loss_backward(&gt_cpu, &lp.c, &ref.c, beta, eps, &sc.c,
				    &dlp.c),
	    name);
	if (!gt_ok(CALL(dpo_loss_backward, vdt, &lp.g, &ref.g, beta, eps, &sc.g,
			&dlp.g),
		   name))
		gt_check(LBL("%s dlogp", name), vdt, &dlp, gt_tol(vdt));
	struct gt *all[] = {&lp, &ref, &met, &dlp, &sc};
	for (size_t i = 0; i < 5; i++)
		gt_free(all[i]);
}

static void test_pref(void)
{
	for (size_t d = 0; d < 4; d++) {
		pair_check(all_dt[d], 4, 64, 1000);
		pair_check(all_dt[d], 3, 37, 32003);
		pair_check(all_dt[d], 1, 2, 5);
	}
	dpo_check(MG_F32, MG_F32, 8, 0.1, 0);
	dpo_check(MG_F32, MG_F64, 1000, 0.5, 0.2);
	dpo_check(MG_F64, MG_F64, 777, 2, 0);
	dpo_check(MG_F64, MG_F32, 1, 0.1, 0.5);
}

/* ------------------------------------------------------------------ */

static void resize_check(enum mg_dtype dt, int n, int c, int h, int w, int oh,
			 int ow)
{
	struct gt s, d;
	gt_make(&s, MG_U8, -1, 4, n, c, h, w);
	gt_make(&d, dt, -1, 4, n, c, oh, ow);
	for (int64_t i = 0; i < s.n; i++)
		s.v[i] = (double)(int)(gt_urand() * 256);
	gt_upload(&s);
	gt_poison(&d);
	const float mean = 0.2860f, std = 0.3530f;
	CPU(mg_op_resize_normalize_u8(&gt_cpu, &s.c, &d.c, mean, std),
	    "resize");
	int rc = wired && (dt == MG_F32 || dt == MG_F64)
			 ? mg_op_resize_normalize_u8(&gt_gpu, &s.g, &d.g, mean,
						     std)
			 : mg_cuda_resize_normalize_u8(&gt_gpu, &s.g, &d.g,
						       mean, std);
	if (!gt_ok(rc, "resize"))
		gt_check(LBL("resize_normalize_u8 [%d,%d,%d,%d] -> %dx%d", n, c,
			     h, w, oh, ow),
			 dt, &d, gt_tol(dt));
	gt_free(&s);
	gt_free(&d);
}

static void test_resize(void)
{
	for (size_t d = 0; d < 4; d++) {
		const enum mg_dtype dt = all_dt[d];
		resize_check(dt, 64, 1, 28, 28, 224, 224);
		resize_check(dt, 8, 3, 100, 77, 224, 224);
		resize_check(dt, 4, 3, 224, 224, 112, 112);
		resize_check(dt, 2, 1, 28, 28, 28, 28);
		resize_check(dt, 3, 2, 5, 7, 13, 3);
	}
}

/* ------------------------------------------------------------------ */
/* The optimizer (the lead's cuda_optim.cu) against the CPU twin.       */

static void optim_check(enum mg_dtype dt, enum mg_optim_kind kind,
			double momentum, bool nesterov, int first)
{
	const int64_t n = 1000003;
	struct mg_optim_hparams h = {0};
	h.kind = kind;
	h.lr = 0.05;
	h.momentum = momentum;
	h.dampening = 0.1;
	h.nesterov = nesterov;
	h.beta1 = 0.9;
	h.beta2 = 0.999;
	h.eps = 1e-8;
	h.weight_decay = 0.01;
	struct mg_optim_vals v = {0};
	v.lr = 0.05f;
	v.grad_mul = 0.5f;
	v.bias1 = (float)(1 - pow(0.9, 3));
	v.bias2 = (float)(1 - pow(0.999, 3));
	v.first = first;
	struct mg_optim_vals *vd = NULL;
	cudaMalloc((void **)&vd, sizeof v);
	cudaMemcpy(vd, &v, sizeof v, cudaMemcpyHostToDevice);
	struct gt p, g, s0, s1;
	gt_make(&p, dt, -1, 1, n, 0, 0, 0);
	gt_make(&g, dt, -1, 1, n, 0, 0, 0);
	gt_make(&s0, dt, -1, 1, n, 0, 0, 0);
	gt_make(&s1, dt, -1, 1, n, 0, 0, 0);
	gt_rand(&p, -1, 1);
	gt_rand(&g, -1, 1);
	gt_rand(&s0, -0.1, 0.1);
	gt_rand(&s1, 0, 0.01);
	struct mg_optim_slice sc = {.dtype = dt,
				    .param = p.c.data,
				    .grad = g.c.data,
				    .grad_dtype = dt,
				    .state = {s0.c.data, s1.c.data},
				    .n = n,
				    .decay = true};
	struct mg_optim_slice sg = sc;
	sg.param = p.g.data;
	sg.grad = g.g.data;
	sg.state[0] = s0.g.data;
	sg.state[1] = s1.g.data;
	char name[96];
	snprintf(name, sizeof name, "optim %s mom %.1f%s first=%d",
		 kind == MG_OPTIM_ADAMW ? "adamw" : "sgd", momentum,
		 nesterov ? " nesterov" : "", first);
	CPU(mg_optim_update(&gt_cpu, &h, &v, &sc), name);
	if (!gt_ok(mg_optim_update(&gt_gpu, &h, vd, &sg), name)) {
		gt_check(LBL("%s param", name), dt, &p, gt_tol(dt));
		if (kind == MG_OPTIM_ADAMW || momentum != 0)
			gt_check(LBL("%s state0", name), dt, &s0, gt_tol(dt));
		if (kind == MG_OPTIM_ADAMW)
			gt_check(LBL("%s state1", name), dt, &s1, gt_tol(dt));
	}
	cudaFree(vd);
	gt_free(&p);
	gt_free(&g);
	gt_free(&s0);
	gt_free(&s1);
}

/* Host BF16 of a float (round to nearest even; finite inputs). */
static uint16_t bf16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/*
 * Mixed-precision AdamW (F32 master and moments, BF16 gradient and
 * compute copy): the 4-wide vector kernel, taken when every buffer is
 * aligned, must give the scalar kernel's bits. The same update runs on
 * buffers offset by one element (scalar path) and aligned (vector path
 * plus a 3-element tail); master, moments and copy are compared bit for
 * bit.
 */
static void optim_vec_check(void)
{
	const int64_t n = 1000003;
	struct mg_optim_hparams h = {0};
	h.kind = MG_OPTIM_ADAMW;
	h.beta1 = 0.9;
	h.beta2 = 0.95;
	h.eps = 1e-8;
	h.weight_decay = 0.01;
	struct mg_optim_vals v = {0};
	v.lr = 3e-4f;
	v.grad_mul = 0.25f;
	v.bias1 = (float)(1 - pow(0.9, 5));
	v.bias2 = (float)(1 - pow(0.95, 5));
	struct mg_optim_vals *vd = NULL;
	cudaMalloc((void **)&vd, sizeof v);
	cudaMemcpy(vd, &v, sizeof v, cudaMemcpyHostToDevice);
	float *hf = malloc((size_t)3 * n * sizeof *hf);
	uint16_t *hg = malloc((size_t)n * sizeof *hg);
	for (int64_t i = 0; i < n; i++) {
		hf[i] = (float)(2 * gt_urand() - 1);
		hf[n + i] = (float)(0.1 * (2 * gt_urand() - 1));
		hf[2 * n + i] = (float)(0.01 * gt_urand());
		hg[i] = bf16_of((float)(2 * gt_urand() - 1));
	}
	/* [path][buffer]: p, s0, s1 (F32), g, lp (BF16); path 0 offset */
	char *buf[2][5];
	float *out[2][3];
	uint16_t *lp[2];
	for (int a = 0; a < 2; a++) {
		const size_t off = a ? 0 : 1;
		for (int b = 0; b < 5; b++) {
			const size_t es = b < 3 ? 4 : 2;
			cudaMalloc((void **)&buf[a][b], (size_t)(n + 1) * es);
			buf[a][b] += off * es;
			if (b < 3)
				cudaMemcpy(buf[a][b], hf + b * n, (size_t)n * 4,
					   cudaMemcpyHostToDevice);
		}
		cudaMemcpy(buf[a][3], hg, (size_t)n * 2,
			   cudaMemcpyHostToDevice);
		struct mg_optim_slice s = {.dtype = MG_F32,
					   .param = buf[a][0],
					   .grad = buf[a][3],
					   .grad_dtype = MG_BF16,
					   .param_lp = buf[a][4],
					   .lp_dtype = MG_BF16,
					   .state = {buf[a][1], buf[a][2]},
					   .n = n,
					   .decay = true};
		gt_ok(mg_optim_update(&gt_gpu, &h, vd, &s),
		      "optim adamw bf16 vector");
		gt_sync("optim adamw bf16 vector");
		for (int b = 0; b < 3; b++) {
			out[a][b] = malloc((size_t)n * 4);
			cudaMemcpy(out[a][b], buf[a][b], (size_t)n * 4,
				   cudaMemcpyDeviceToHost);
		}
		lp[a] = malloc((size_t)n * 2);
		cudaMemcpy(lp[a], buf[a][4], (size_t)n * 2,
			   cudaMemcpyDeviceToHost);
		for (int b = 0; b < 5; b++)
			cudaFree(buf[a][b] - off * (b < 3 ? 4 : 2));
	}
	int64_t diff = 0, moved = 0;
	for (int b = 0; b < 3; b++)
		diff += memcmp(out[0][b], out[1][b], (size_t)n * 4) != 0;
	diff += memcmp(lp[0], lp[1], (size_t)n * 2) != 0;
	for (int64_t i = 0; i < n; i++)
		moved += out[1][0][i] != hf[i];
	gt_report("optim adamw F32 master, BF16 grad and copy: vector vs "
		  "scalar kernel (buffers differing)",
		  MG_BF16, (double)diff, 0, 0, "bitwise");
	gt_report("optim adamw vector kernel: fraction of masters unchanged",
		  MG_F32, 1.0 - (double)moved / (double)n, 1e-3, 0,
		  "the update ran");
	for (int a = 0; a < 2; a++) {
		for (int b = 0; b < 3; b++)
			free(out[a][b]);
		free(lp[a]);
	}
	free(hf);
	free(hg);
	cudaFree(vd);
}

/* The gradient norm's sum of squares over BF16 values (vector path, and
 * offset by one element: the scalar path) against a host double sum. */
static void sumsq_check(void)
{
	const int64_t n = 3000017;
	uint16_t *hg = malloc((size_t)n * sizeof *hg);
	double ref = 0;
	for (int64_t i = 0; i < n; i++) {
		hg[i] = bf16_of((float)(4 * gt_urand() - 2));
		uint32_t u = (uint32_t)hg[i] << 16;
		float f;
		memcpy(&f, &u, 4);
		ref += (double)f * f;
	}
	for (int off = 0; off < 2; off++) {
		char *dg = NULL;
		struct mg_optim_vals v = {0}, *vd = NULL;
		cudaMalloc((void **)&dg, (size_t)(n + 1) * 2);
		cudaMalloc((void **)&vd, sizeof v);
		cudaMemcpy(vd, &v, sizeof v, cudaMemcpyHostToDevice);
		cudaMemcpy(dg + 2 * off, hg, (size_t)n * 2,
			   cudaMemcpyHostToDevice);
		char name[64];
		snprintf(name, sizeof name, "optim sumsq BF16 n=%lld %s",
			 (long long)n, off ? "unaligned" : "aligned");
		if (!gt_ok(mg_optim_sumsq(&gt_gpu, vd, MG_BF16, dg + 2 * off,
					  n),
			   name) &&
		    !gt_sync(name)) {
			cudaMemcpy(&v, vd, sizeof v, cudaMemcpyDeviceToHost);
			gt_report(name, MG_F32, fabs(v.sumsq - ref) / ref, 1e-5,
				  isfinite(v.sumsq) ? 0 : 1,
				  "relative to a host double sum");
		}
		cudaFree(dg);
		cudaFree(vd);
	}
	free(hg);
}

static void test_optim(void)
{
	for (size_t d = 0; d < 2; d++) {
		optim_check(all_dt[d], MG_OPTIM_SGD, 0.9, false, 1);
		optim_check(all_dt[d], MG_OPTIM_SGD, 0.9, true, 0);
		optim_check(all_dt[d], MG_OPTIM_SGD, 0.0, false, 0);
		optim_check(all_dt[d], MG_OPTIM_ADAMW, 0, false, 0);
	}
	optim_vec_check();
	sumsq_check();
}

/*
 * Float conversions (the mixed-precision master -> low-precision copies):
 * the CUDA kernel must give the CPU twin's bits exactly (round to nearest
 * even), on random values spanning normal, subnormal and overflowing
 * magnitudes for the 16-bit types.
 */
static void test_convert(void)
{
	const int64_t n = 1 << 20;
	double *src64 = malloc((size_t)n * sizeof *src64);
	void *hs = malloc((size_t)n * 8), *hc = malloc((size_t)n * 8),
	     *hg = malloc((size_t)n * 8);
	void *ds = NULL, *dd = NULL;
	cudaMalloc(&ds, (size_t)n * 8);
	cudaMalloc(&dd, (size_t)n * 8);
	for (int64_t i = 0; i < n; i++) {
		/* magnitudes 2^-30 .. 2^20: subnormal to beyond F16's range */
		double m = ldexp(gt_urand() + 0.5, (int)(gt_urand() * 50) - 30);
		src64[i] = gt_urand() < 0.5 ? -m : m;
	}
	for (size_t a = 0; a < 4; a++) {
		for (size_t b = 0; b < 4; b++) {
			enum mg_dtype st = all_dt[a], dt = all_dt[b];
			if (st == dt)
				continue;
			size_t ss = mg_dtype_size(st), ds_ = mg_dtype_size(dt);
			char name[64];
			snprintf(name, sizeof name, "convert %s -> %s",
				 mg_dtype_name(st), mg_dtype_name(dt));
			/* Source values in st, made by the CPU twin. */
			CPU(mg_op_convert(&gt_cpu, hs, st, src64, MG_F64, n),
			    name);
			CPU(mg_op_convert(&gt_cpu, hc, dt, hs, st, n), name);
			cudaMemcpy(ds, hs, (size_t)n * ss,
				   cudaMemcpyHostToDevice);
			/* whole vectors; a tail of 5; both pointers one
			 * element off 16 bytes (the scalar kernel) */
			static const int64_t less[3] = {0, 5, 3},
					     off[3] = {0, 0, 1};
			for (int v = 0; v < 3; v++) {
				const int64_t m = n - less[v], o = off[v];
				char *gd = (char *)dd + o * ds_;
				const char *gs = (const char *)ds + o * ss;
				snprintf(name, sizeof name,
					 "convert %s -> %s, n %lld at %lld",
					 mg_dtype_name(st), mg_dtype_name(dt),
					 (long long)m, (long long)o);
				cudaMemset(dd, 0xff, (size_t)n * ds_);
				if (gt_ok(mg_op_convert(&gt_gpu, gd, dt, gs, st,
							m),
					  name) ||
				    gt_sync(name))
					continue;
				cudaMemcpy(hg, gd, (size_t)m * ds_,
					   cudaMemcpyDeviceToHost);
				gt_report_bits(name, dt, hg,
					       (const char *)hc + o * ds_, m,
					       ds_);
			}
		}
	}
	cudaFree(ds);
	cudaFree(dd);
	free(src64);
	free(hs);
	free(hc);
	free(hg);
}

/* ------------------------------------------------------------------ */
/* mg_op_nf4_dequantize: the GPU's bits against the CPU twin's.         */

/* Decode n elements of the host blob hb on both devices into dt, the
 * GPU's blob at byte offset boff and its output at element offset ooff of
 * their allocations (offsets other than 0 take the unaligned path), and
 * report the fraction of elements whose bits differ. */
static void nf4_check(const char *what, const unsigned char *hb, int64_t n,
		      enum mg_dtype dt, size_t boff, size_t ooff)
{
	const size_t bytes = mg_nf4_layout(n).bytes, es = mg_dtype_size(dt);
	unsigned char *db = NULL, *dout = NULL;
	void *hc = malloc((size_t)n * es), *hg = malloc((size_t)n * es);
	cudaMalloc((void **)&db, bytes + boff);
	cudaMalloc((void **)&dout, ((size_t)n + ooff) * es);
	cudaMemcpy(db + boff, hb, bytes, cudaMemcpyHostToDevice);
	cudaMemset(dout, 0xff, ((size_t)n + ooff) * es); /* poison: NaN */
	const int64_t shape[2] = {1, n};
	struct mg_tensor wc = mg_tensor_make((void *)hb, MG_NF4, MG_DEV_CPU, 2,
					     shape),
			 wg = mg_tensor_make(db + boff, MG_NF4, MG_DEV_CUDA, 2,
					     shape),
			 oc = mg_tensor_make(hc, dt, MG_DEV_CPU, 1, &n),
			 og = mg_tensor_make(dout + ooff * es, dt, MG_DEV_CUDA,
					     1, &n);
	snprintf(lbl, sizeof lbl, "nf4_dequantize %s n=%lld%s", what,
		 (long long)n, boff || ooff ? " unaligned" : "");
	CPU(mg_op_nf4_dequantize(&gt_cpu, &wc, &oc), lbl);
	if (!gt_ok(mg_op_nf4_dequantize(&gt_gpu, &wg, &og), lbl) &&
	    !gt_sync(lbl)) {
		cudaMemcpy(hg, dout + ooff * es, (size_t)n * es,
			   cudaMemcpyDeviceToHost);
		gt_report_bits(lbl, dt, hg, hc, n, es);
	}
	cudaFree(db);
	cudaFree(dout);
	free(hc);
	free(hg);
}

/* Quantize the n values x (as dt) on both devices and report the fraction
 * of blob bytes that differ (the whole blob, padding included). */
static void nf4_quant_check(const float *x, int64_t n, enum mg_dtype dt)
{
	const size_t bytes = mg_nf4_layout(n).bytes, es = mg_dtype_size(dt);
	void *hx = malloc((size_t)n * es);
	unsigned char *hc = malloc(bytes), *hg = malloc(bytes);
	for (int64_t i = 0; i < n; i++) {
		if (dt == MG_F32)
			((float *)hx)[i] = x[i];
		else
			((uint16_t *)hx)[i] = dt == MG_F16
						      ? mg_float_to_half(x[i])
						      : mg_float_to_bf16(x[i]);
	}
	void *dx = NULL, *db = NULL;
	cudaMalloc(&dx, (size_t)n * es);
	cudaMalloc(&db, bytes);
	cudaMemcpy(dx, hx, (size_t)n * es, cudaMemcpyHostToDevice);
	cudaMemset(db, 0xff, bytes); /* poison */
	const int64_t shape[2] = {1, n};
	struct mg_tensor xc = mg_tensor_make(hx, dt, MG_DEV_CPU, 1, &n),
			 xg = mg_tensor_make(dx, dt, MG_DEV_CUDA, 1, &n),
			 wc = mg_tensor_make(hc, MG_NF4, MG_DEV_CPU, 2, shape),
			 wg = mg_tensor_make(db, MG_NF4, MG_DEV_CUDA, 2, shape);
	snprintf(lbl, sizeof lbl, "nf4_quantize %s n=%lld", mg_dtype_name(dt),
		 (long long)n);
	CPU(mg_op_nf4_quantize(&gt_cpu, &xc, &wc), lbl);
	if (!gt_ok(mg_op_nf4_quantize(&gt_gpu, &xg, &wg), lbl) &&
	    !gt_sync(lbl)) {
		cudaMemcpy(hg, db, bytes, cudaMemcpyDeviceToHost);
		int64_t diff = 0;
		for (size_t i = 0; i < bytes; i++)
			diff += hg[i] != hc[i];
		gt_report(lbl, dt, (double)diff / (double)bytes, 0, 0,
			  "fraction of blob bytes that differ");
	}
	cudaFree(dx);
	cudaFree(db);
	free(hx);
	free(hc);
	free(hg);
}

/*
 * Blobs quantized on the host from normal data (sizes with a partial last
 * block, odd n, several nested blocks, Llama 3 8B's MLP weight) and blobs
 * of random bytes (every code and every map index, random nested absmax
 * and offset), into F32, F16 and BF16, aligned and not; and the blobs
 * mg_op_nf4_quantize writes on the GPU from F32, F16 and BF16 against the
 * CPU's, byte for byte.
 */
static void test_nf4(void)
{
	static const int64_t sizes[] = {1,
					31,
					33,
					64 * 3 + 17,
					64 * 256 * 3 + 5,
					(int64_t)4096 * 14336};
	static const enum mg_dtype dts[] = {MG_F32, MG_F16, MG_BF16};
	for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
		const int64_t n = sizes[s];
		const struct mg_nf4_layout l = mg_nf4_layout(n);
		float *x = malloc((size_t)n * sizeof *x);
		unsigned char *hb = malloc(l.bytes);
		for (int64_t i = 0; i < n; i++)
			x[i] = (float)(0.02 * (gt_urand() + gt_urand() +
					       gt_urand() - 1.5));
		if (mg_nf4_quantize_host(hb, x, n) != 0) {
			printf("FAIL nf4 quantize n=%lld: %s\n", (long long)n,
			       mg_last_error());
			gt_fail++;
		} else {
			for (size_t d = 0; d < 3; d++) {
				nf4_quant_check(x, n, dts[d]);
				nf4_check("normal", hb, n, dts[d], 0, 0);
				if (n < 100000)
					nf4_check("normal", hb, n, dts[d], 4,
						  1);
			}
		}
		/* random codes and absmax indices, finite scales */
		for (size_t i = 0; i < l.offset; i++)
			hb[i] = (unsigned char)(gt_urand() * 256);
		float *nested = (float *)(hb + l.nested_absmax), offset;
		for (int64_t g = 0; g < l.nnested; g++)
			nested[g] = (float)(gt_urand() * 0.1);
		offset = (float)(gt_urand() * 0.05);
		memcpy(hb + l.offset, &offset, 4);
		for (size_t d = 0; d < 3; d++)
			nf4_check("random", hb, n, dts[d], 0, 0);
		free(x);
		free(hb);
	}
}

/* ------------------------------------------------------------------ */
/* Fake quantization (QAT, mg/int4.h): the GPU's bits against the CPU   */
/* twin's, forward and straight-through backward.                       */

/* Host values as dt (from f64 draws). */
static void qat_fill(void *h, enum mg_dtype dt, int64_t n, double scale)
{
	for (int64_t i = 0; i < n; i++) {
		const double v = scale * (gt_urand() + gt_urand() - 1.0);
		if (dt == MG_F64)
			((double *)h)[i] = v;
		else if (dt == MG_F32)
			((float *)h)[i] = (float)v;
		else
			((uint16_t *)h)[i] =
				dt == MG_F16 ? mg_float_to_half((float)v)
					     : mg_float_to_bf16((float)v);
	}
}

/* op 0: fq_int4_weight (group g), 1: its backward, 2: fq_int8_token,
 * 3: its backward; x [rows, cols] and dy fresh random; the fraction of
 * output elements whose bits differ. inplace (backward ops): the GPU
 * writes over dy, as llama's weight-gradient mask does. */
static void qat_check(int op, enum mg_dtype dt, int64_t rows, int64_t cols,
		      int64_t g, bool inplace)
{
	static const char *const names[4] = {
		"fq_int4_weight", "fq_int4_weight_backward", "fq_int8_token",
		"fq_int8_token_backward"};
	const int64_t n = rows * cols;
	const size_t es = mg_dtype_size(dt), bytes = (size_t)n * es;
	void *hx = malloc(bytes), *hd = malloc(bytes), *hc = malloc(bytes),
	     *hg = malloc(bytes);
	/* activations with an outlier row scale, weights small */
	qat_fill(hx, dt, n, op < 2 ? 0.05 : 3.0);
	qat_fill(hd, dt, n, 1.0);
	void *dx = NULL, *dd = NULL, *dout = NULL;
	cudaMalloc(&dx, bytes);
	cudaMalloc(&dd, bytes);
	cudaMalloc(&dout, bytes);
	cudaMemcpy(dx, hx, bytes, cudaMemcpyHostToDevice);
	cudaMemcpy(dd, hd, bytes, cudaMemcpyHostToDevice);
	cudaMemset(dout, 0xff, bytes); /* poison: NaN */
	const int64_t shape[2] = {rows, cols};
	struct mg_tensor xc = mg_tensor_make(hx, dt, MG_DEV_CPU, 2, shape),
			 dc = mg_tensor_make(hd, dt, MG_DEV_CPU, 2, shape),
			 oc = mg_tensor_make(hc, dt, MG_DEV_CPU, 2, shape),
			 xg = mg_tensor_make(dx, dt, MG_DEV_CUDA, 2, shape),
			 dg = mg_tensor_make(dd, dt, MG_DEV_CUDA, 2, shape),
			 og = mg_tensor_make(dout, dt, MG_DEV_CUDA, 2, shape);
	inplace = inplace && (op & 1);
	if (inplace)
		og = dg;
	snprintf(lbl, sizeof lbl, "%s [%lld, %lld] g%lld%s", names[op],
		 (long long)rows, (long long)cols, (long long)g,
		 inplace ? " in place" : "");
	int rc;
	switch (op) {
	case 0:
		CPU(mg_op_fq_int4_weight(&gt_cpu, &xc, g, &oc), lbl);
		rc = mg_op_fq_int4_weight(&gt_gpu, &xg, g, &og);
		break;
	case 1:
		CPU(mg_op_fq_int4_weight_backward(&gt_cpu, &xc, g, &dc, &oc),
		    lbl);
		rc = mg_op_fq_int4_weight_backward(&gt_gpu, &xg, g, &dg, &og);
		break;
	case 2:
		CPU(mg_op_fq_int8_token(&gt_cpu, &xc, &oc), lbl);
		rc = mg_op_fq_int8_token(&gt_gpu, &xg, &og);
		break;
	default:
		CPU(mg_op_fq_int8_token_backward(&gt_cpu, &xc, &dc, &oc), lbl);
		rc = mg_op_fq_int8_token_backward(&gt_gpu, &xg, &dg, &og);
		break;
	}
	if (!gt_ok(rc, lbl) && !gt_sync(lbl)) {
		cudaMemcpy(hg, og.data, bytes, cudaMemcpyDeviceToHost);
		gt_report_bits(lbl, dt, hg, hc, n, es);
	}
	cudaFree(dx);
	cudaFree(dd);
	cudaFree(dout);
	free(hx);
	free(hd);
	free(hc);
	free(hg);
}

/*
 * QAT's fake-quantization ops, every dtype (each computes in f32 on both
 * devices, so the bits must agree): the tiny llama's shapes, odd ones
 * (one group, one row, rows longer than a block), Llama 3 8B's MLP
 * weight [14336, 4096] and a 4096-wide batch of tokens; groups of 8, 32,
 * 128 and 512. Both kernels of each op are reached: the 16-byte vector
 * ones (F16/BF16/F32, groups of 1-32 vectors, rows of whole vectors) and
 * the scalar ones (F64; groups of 6 or 512 (BF16: 64 vectors); rows of
 * 36 at 2 bytes, 4.5 vectors), and the backward ops in place too.
 */
static void test_qat(void)
{
	static const enum mg_dtype dts[] = {MG_F32, MG_F64, MG_F16, MG_BF16};
	static const int64_t shapes[][3] = {
		{64, 64, 32},  {1, 32, 32},	{7, 96, 32}, {3, 1000, 8},
		{192, 64, 32}, {33, 4096, 128}, {5, 36, 6},  {4, 1024, 512},
	};
	for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
		for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
			for (int op = 0; op < 4; op++)
				for (int ip = 0; ip < 1 + (op & 1); ip++)
					qat_check(op, dts[d], shapes[s][0],
						  shapes[s][1], shapes[s][2],
						  ip);
		qat_check(0, dts[d], 14336, 4096, 32, false);
		qat_check(2, dts[d], 2048, 4096, 0, false);
	}
}

/* ------------------------------------------------------------------ */
/* Determinism and CUDA-graph capture: a mini training step of the ops  */
/* with reductions, run eagerly twice and replayed as a captured graph; */
/* every output must be bitwise identical.                              */

struct step {
	struct gt x, w1, y1, g, b, rm, rv, sm, si, y2, wd, y3, dy3, dy2, dy1,
		dx, dw1, dg, dbt, dwd, pooled, wl, bl, lo, lab, met, dlo, dpool,
		dwl, dbl, sc;
};

static void step_init(struct step *s)
{
	const enum mg_dtype f = MG_F32;
	gt_make(&s->x, f, -1, 4, 32, 16, 28, 28);
	gt_make(&s->w1, f, -1, 4, 48, 16, 1, 1);
	gt_make(&s->y1, f, -1, 4, 32, 48, 28, 28);
	gt_make(&s->g, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->b, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->rm, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->rv, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->sm, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->si, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->y2, f, -1, 4, 32, 48, 28, 28);
	gt_make(&s->wd, f, -1, 4, 48, 1, 3, 3);
	gt_make(&s->y3, f, -1, 4, 32, 48, 14, 14);
	gt_make(&s->dy3, f, -1, 4, 32, 48, 14, 14);
	gt_make(&s->dy2, f, -1, 4, 32, 48, 28, 28);
	gt_make(&s->dy1, f, -1, 4, 32, 48, 28, 28);
	gt_make(&s->dx, f, -1, 4, 32, 16, 28, 28);
	gt_make(&s->dw1, f, -1, 4, 48, 16, 1, 1);
	gt_make(&s->dg, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->dbt, f, -1, 1, 48, 0, 0, 0);
	gt_make(&s->dwd, f, -1, 4, 48, 1, 3, 3);
	gt_make(&s->pooled, f, -1, 2, 32, 48, 0, 0);
	gt_make(&s->wl, f, -1, 2, 10, 48, 0, 0);
	gt_make(&s->bl, f, -1, 1, 10, 0, 0, 0);
	gt_make(&s->lo, f, -1, 2, 32, 10, 0, 0);
	gt_make(&s->lab, MG_I32, -1, 1, 32, 0, 0, 0);
	gt_make(&s->met, f, -1, 1, MG_METRIC_N, 0, 0, 0);
	gt_make(&s->dlo, f, -1, 2, 32, 10, 0, 0);
	gt_make(&s->dpool, f, -1, 2, 32, 48, 0, 0);
	gt_make(&s->dwl, f, -1, 2, 10, 48, 0, 0);
	gt_make(&s->dbl, f, -1, 1, 10, 0, 0, 0);
	gt_make(&s->sc, f, -1, 1, 1, 0, 0, 0);
	gt_rand(&s->x, -1, 1);
	gt_rand(&s->w1, -0.3, 0.3);
	gt_rand(&s->g, 0.5, 1.5);
	gt_rand(&s->b, -0.5, 0.5);
	gt_rand(&s->wd, -0.3, 0.3);
	gt_rand(&s->wl, -0.2, 0.2);
	gt_rand(&s->bl, -0.2, 0.2);
	gt_rand(&s->dy3, -1, 1);
	for (int i = 0; i < 32; i++)
		s->lab.v[i] = i % 10;
	gt_upload(&s->lab);
	s->sc.v[0] = 1.0 / 32;
	gt_upload(&s->sc);
}

/* One step on the GPU stream; accumulators are cleared inside it so a
 * replay computes the same values. Returns 0 or the first error. */
static int step_run(struct step *s)
{
	const struct mg_conv2d_args pw = {1, 1, 0, 0, 1};
	const struct mg_conv2d_args dw = {2, 2, 1, 1, 48};
	const struct mg_bn_args bn = {1e-5, 0.1, true, MG_ACT_RELU6};
	struct mg_ctx *c = &gt_gpu;
	cudaStream_t st = (cudaStream_t)c->dev->stream;
	struct gt *acc[] = {&s->dw1, &s->dg,  &s->dbt, &s->dwd,
			    &s->dwl, &s->dbl, &s->rm,  &s->rv};
	for (size_t i = 0; i < sizeof acc / sizeof *acc; i++)
		if (cudaMemsetAsync(acc[i]->g.data, 0,
				    mg_tensor_bytes(&acc[i]->g),
				    st) != cudaSuccess)
			return -1;
	return mg_cuda_conv2d(c, &pw, &s->x.g, &s->w1.g, NULL, &s->y1.g,
			      NULL) ||
	       mg_cuda_batchnorm2d(c, &bn, &s->y1.g, &s->g.g, &s->b.g, &s->rm.g,
				   &s->rv.g, &s->sm.g, &s->si.g, &s->y2.g) ||
	       mg_cuda_conv2d(c, &dw, &s->y2.g, &s->wd.g, NULL, &s->y3.g,
			      NULL) ||
	       mg_cuda_global_avgpool(c, &s->y3.g, &s->pooled.g) ||
	       mg_cuda_linear(c, &s->pooled.g, &s->wl.g, &s->bl.g, &s->lo.g) ||
	       mg_cuda_softmax_xent(c, &s->lo.g, &s->lab.g, &s->met.g) ||
	       mg_cuda_softmax_xent_backward(c, &s->lo.g, &s->lab.g, &s->sc.g,
					     &s->dlo.g) ||
	       mg_cuda_linear_backward(c, &s->pooled.g, &s->wl.g, &s->dlo.g,
				       &s->dpool.g, false, &s->dwl.g,
				       &s->dbl.g) ||
	       mg_cuda_global_avgpool_backward(c, &s->dpool.g, &s->dy3.g) ||
	       mg_cuda_conv2d_backward(c, &dw, &s->y2.g, &s->wd.g, &s->dy3.g,
				       &s->dy2.g, &s->dwd.g, NULL, NULL) ||
	       mg_cuda_batchnorm2d_backward(
		       c, &bn, &s->y1.g, &s->y2.g, &s->dy2.g, &s->g.g, &s->sm.g,
		       &s->si.g, &s->dy1.g, &s->dg.g, &s->dbt.g) ||
	       mg_cuda_conv2d_backward(c, &pw, &s->x.g, &s->w1.g, &s->dy1.g,
				       &s->dx.g, &s->dw1.g, NULL, NULL);
}

#define STEP_OUTS 12
static void step_outputs(struct step *s, struct gt **o)
{
	struct gt *list[STEP_OUTS] = {&s->y2,  &s->y3,	&s->met, &s->dlo,
				      &s->dwl, &s->dbl, &s->dwd, &s->dg,
				      &s->dbt, &s->dw1, &s->dx,	 &s->rv};
	memcpy(o, list, sizeof list);
}

static void step_free(struct step *s)
{
	struct gt *all = &s->x;
	for (size_t i = 0; i < sizeof *s / sizeof(struct gt); i++)
		gt_free(&all[i]);
}

static int64_t bit_diffs(double *a, double *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		d += memcmp(&a[i], &b[i], sizeof(double)) != 0;
	return d;
}

static void step_compare(const char *what, struct step *s, double **ref)
{
	struct gt *o[STEP_OUTS];
	step_outputs(s, o);
	int64_t diff = 0, nans = 0;
	for (int i = 0; i < STEP_OUTS; i++) {
		double *v = gt_read(o[i]);
		diff += bit_diffs(v, ref[i], o[i]->n);
		for (int64_t k = 0; k < o[i]->n; k++)
			nans += isnan(v[k]);
		free(v);
	}
	char note[64];
	snprintf(note, sizeof note, " (%lld elements differ)", (long long)diff);
	gt_report(what, MG_F32, (double)diff, 0, nans, note);
}

/* Is the 1x1 GEMM path on (set with the knob, for labels)? */
static int pw_mode = 1;
static bool pw_gemm(void)
{
	return pw_mode != 0;
}

/*
 * Batch norm's training forward and backward twice on the same inputs
 * (running statistics and parameter gradients reset in between) give
 * the same bits: the small-plane kernel (2 x 2 and 7 x 7 planes at batch
 * 64) and the folded path (14 x 14, two slices) add in a fixed order.
 */
static void bn_repeat(enum mg_dtype dt, int N, int C, int H, int W)
{
	const enum mg_dtype pdt = dt == MG_F64 ? MG_F64 : MG_F32;
	const struct mg_bn_args a = {1e-5, 0.1, true, MG_ACT_RELU6};
	struct gt x, g, b, rm, rv, sm, si, y, dy, dx, dg, dbt;
	char name[96];
	snprintf(name, sizeof name, "determinism: bn N%d C%d %dx%d twice", N, C,
		 H, W);
	gt_make(&x, dt, -1, 4, N, C, H, W);
	gt_make(&y, dt, -1, 4, N, C, H, W);
	gt_make(&dy, dt, -1, 4, N, C, H, W);
	gt_make(&dx, dt, -1, 4, N, C, H, W);
	struct gt *par[] = {&g, &b, &rm, &rv, &sm, &si, &dg, &dbt};
	for (size_t i = 0; i < sizeof par / sizeof *par; i++)
		gt_make(par[i], pdt, -1, 1, C, 0, 0, 0);
	gt_rand(&x, 1.0, 5.0);
	gt_rand(&dy, -1, 1);
	gt_rand(&g, 0.5, 3.0);
	gt_rand(&b, -1, 4);
	gt_rand(&rm, 1, 4);
	gt_rand(&rv, 0.5, 2);
	gt_rand(&dg, -1, 1);
	gt_rand(&dbt, -1, 1);
	struct gt *out[] = {&y, &sm, &si, &rm, &rv, &dx, &dg, &dbt};
	static const char *const oname[] = {
		"y",	       "save_mean", "save_invstd", "running_mean",
		"running_var", "dx",	    "dgamma",	   "dbeta"};
	enum { NO = sizeof out / sizeof *out };
	double *ref[NO] = {NULL};
	for (int r = 0; r < 2; r++) {
		gt_upload(&rm);
		gt_upload(&rv);
		gt_upload(&dg);
		gt_upload(&dbt);
		gt_poison(&y);
		gt_poison(&sm);
		gt_poison(&si);
		gt_poison(&dx);
		if (gt_ok(mg_cuda_batchnorm2d(&gt_gpu, &a, &x.g, &g.g, &b.g,
					      &rm.g, &rv.g, &sm.g, &si.g, &y.g),
			  name) ||
		    gt_ok(mg_cuda_batchnorm2d_backward(
				  &gt_gpu, &a, &x.g, &y.g, &dy.g, &g.g, &sm.g,
				  &si.g, &dx.g, &dg.g, &dbt.g),
			  name))
			break;
		for (int i = 0; i < NO; i++) {
			double *v = gt_read(out[i]);
			if (r == 0) {
				ref[i] = v;
				continue;
			}
			int64_t nans = 0;
			for (int64_t k = 0; k < out[i]->n; k++)
				nans += isnan(v[k]);
			/* NaN anywhere (an unwritten element) fails too */
			gt_report_bits(LBL("%s %s", name, oname[i]), dt, v,
				       ref[i], out[i]->n, sizeof(double));
			if (nans)
				gt_report(lbl, dt, (double)nans, 0, nans,
					  "NaN elements");
			free(v);
		}
	}
	for (int i = 0; i < NO; i++)
		free(ref[i]);
	struct gt *all[] = {&x,	 &y,  &dy, &dx, &g,  &b,
			    &rm, &rv, &sm, &si, &dg, &dbt};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		gt_free(all[i]);
}

static void test_bn_repeat(void)
{
	static const int shapes[][4] = {
		{64, 320, 2, 2}, {64, 144, 7, 7}, {64, 96, 14, 14}};
	/* both paths of the small planes (MG_CUDA_BN_SMALL) */
	for (int small = 1; small >= 0; small--) {
		mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_BN_SMALL, small);
		for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
			const int *k = shapes[s];
			bn_repeat(MG_F32, k[0], k[1], k[2], k[3]);
			bn_repeat(MG_BF16, k[0], k[1], k[2], k[3]);
		}
	}
}

static void test_determinism(bool graph)
{
	struct step s;
	struct gt *o[STEP_OUTS];
	double *ref[STEP_OUTS];
	step_init(&s);
	step_outputs(&s, o);
	if (gt_ok(step_run(&s), "mini step (eager)"))
		goto out;
	for (int i = 0; i < STEP_OUTS; i++)
		ref[i] = gt_read(o[i]);
	if (!graph) {
		for (int i = 0; i < STEP_OUTS; i++)
			gt_poison(o[i]);
		if (!gt_ok(step_run(&s), "mini step (again)"))
			step_compare(pw_gemm() ? "determinism: mini step "
						 "twice, bitwise (1x1 GEMM)"
					       : "determinism: mini step "
						 "twice, bitwise (1x1 cuDNN)",
				     &s, ref);
	} else {
		cudaStream_t st = (cudaStream_t)gt_gpu.dev->stream;
		cudaGraph_t gr = NULL;
		cudaGraphExec_t ex = NULL;
		cudaError_t e =
			cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
		int rc = e == cudaSuccess ? step_run(&s) : -1;
		cudaError_t e2 = cudaStreamEndCapture(st, &gr);
		if (e != cudaSuccess || rc || e2 != cudaSuccess ||
		    cudaGraphInstantiate(&ex, gr, 0) != cudaSuccess) {
			printf("FAIL graph capture: begin %s, ops rc %d (%s), "
			       "end %s\n",
			       cudaGetErrorString(e), rc,
			       rc ? mg_last_error() : "-",
			       cudaGetErrorString(e2));
			cudaGetLastError();
			gt_fail++;
			gt_checks++;
		} else {
			for (int i = 0; i < STEP_OUTS; i++)
				gt_poison(o[i]);
			for (int r = 0; r < 3; r++)
				cudaGraphLaunch(ex, st);
			if (!gt_sync("graph replay"))
				step_compare(pw_gemm() ? "graph: captured step "
							 "replayed, bitwise "
							 "(1x1 GEMM)"
						       : "graph: captured step "
							 "replayed, bitwise "
							 "(1x1 cuDNN)",
					     &s, ref);
		}
		if (ex)
			cudaGraphExecDestroy(ex);
		if (gr)
			cudaGraphDestroy(gr);
	}
	for (int i = 0; i < STEP_OUTS; i++)
		free(ref[i]);
out:
	step_free(&s);
}

/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* LLM ops (ops_llm.h): F32, F16, BF16 (the CUDA twins' dtypes) through
 * the public ops, which admit half types on CUDA. Saved statistics (rstd,
 * lse) are F32 on both sides. */

static const enum mg_dtype llm_dt[] = {MG_F32, MG_F16, MG_BF16};

/* Positions [N, T] on both sides: row 0 one document, row 1 two packed
 * documents, row 2 a document then padding (0), further rows random
 * document starts. */
static void llm_positions(struct gt *p, int64_t N, int64_t T)
{
	gt_make(p, MG_I32, MG_I32, 2, N, T, 0, 0);
	const int64_t cut = T / 2 > 1 ? T / 2 : 1;
	for (int64_t n = 0; n < N; n++)
		for (int64_t t = 0; t < T; t++) {
			double *v = p->v + n * T;
			switch (n % 4) {
			case 0:
				v[t] = (double)t;
				break;
			case 1:
				v[t] = (double)(t < cut ? t : t - cut);
				break;
			case 2:
				v[t] = t <= cut ? (double)t : 0;
				break;
			default:
				v[t] = t == 0 || gt_urand() < 0.02
					       ? 0
					       : v[t - 1] + 1;
			}
		}
	gt_upload(p);
}

/* rd / 2 frequencies: rd < hd is partial rotary (Phi-3). */
static void llm_inv_freq(struct gt *f, int64_t rd)
{
	gt_make(f, MG_F32, MG_F32, 1, rd / 2, 0, 0, 0);
	for (int64_t j = 0; j < rd / 2; j++)
		f->v[j] = 1.0 / pow(500000.0, 2.0 * (double)j / (double)rd);
	gt_upload(f);
}

static void llm_embedding_check(enum mg_dtype dt, int64_t N, int64_t T,
				int64_t V, int64_t D)
{
	const double tol = gt_tol(dt);
	struct gt ids, tab, y, dy, dtab;
	char name[96];
	snprintf(name, sizeof name, "embedding [%lld, %lld] V%lld D%lld",
		 (long long)N, (long long)T, (long long)V, (long long)D);
	gt_make(&ids, MG_I32, MG_I32, 2, N, T, 0, 0);
	for (int64_t i = 0; i < N * T; i++) /* skewed: many repeats */
		ids.v[i] = floor(pow(gt_urand(), 3) * (double)V);
	gt_upload(&ids);
	gt_make(&tab, dt, -1, 2, V, D, 0, 0);
	gt_make(&y, dt, -1, 3, N, T, D, 0);
	gt_rand(&tab, -1, 1);
	gt_poison(&y);
	CPU(mg_op_embedding(&gt_cpu, &ids.c, &tab.c, &y.c), name);
	if (!gt_ok(mg_op_embedding(&gt_gpu, &ids.g, &tab.g, &y.g), name))
		gt_check(LBL("%s y", name), dt, &y, tol);
	gt_make(&dy, dt, -1, 3, N, T, D, 0);
	gt_make(&dtab, dt, -1, 2, V, D, 0, 0);
	gt_rand(&dy, -1, 1);
	gt_rand(&dtab, -1, 1);
	CPU(mg_op_embedding_backward(&gt_cpu, &ids.c, &dy.c, &dtab.c), name);
	if (!gt_ok(mg_op_embedding_backward(&gt_gpu, &ids.g, &dy.g, &dtab.g),
		   name))
		gt_check_delta(LBL("%s dtable", name), dt, &dtab, tol);
	struct gt *all[] = {&ids, &tab, &y, &dy, &dtab};
	for (size_t i = 0; i < 5; i++)
		gt_free(all[i]);
}

static void llm_rmsnorm_check(enum mg_dtype dt, int64_t R, int64_t D, bool wf32)
{
	const double tol = gt_tol(dt);
	const enum mg_dtype wdt = wf32 ? MG_F32 : dt;
	struct gt x, w, y, rs, dy, dx, dw;
	char name[96];
	snprintf(name, sizeof name, "rmsnorm [%lld, %lld] w %s", (long long)R,
		 (long long)D, mg_dtype_name(wdt));
	gt_make(&x, dt, -1, 2, R, D, 0, 0);
	gt_make(&w, wdt, -1, 1, D, 0, 0, 0);
	gt_make(&y, dt, -1, 2, R, D, 0, 0);
	gt_make(&rs, MG_F32, MG_F32, 1, R, 0, 0, 0);
	gt_rand(&x, -2, 2);
	gt_rand(&w, 0.5, 1.5);
	gt_poison(&y);
	gt_poison(&rs);
	CPU(mg_op_rmsnorm(&gt_cpu, &x.c, &w.c, 1e-5, &y.c, &rs.c), name);
	if (!gt_ok(mg_op_rmsnorm(&gt_gpu, &x.g, &w.g, 1e-5, &y.g, &rs.g),
		   name)) {
		gt_check(LBL("%s y", name), dt, &y, tol);
		gt_check(LBL("%s rstd", name), dt, &rs, gt_tol(MG_F32));
	}
	gt_from_cpu(&rs); /* the same rstd on both sides */
	gt_make(&dy, dt, -1, 2, R, D, 0, 0);
	gt_make(&dx, dt, -1, 2, R, D, 0, 0);
	gt_make(&dw, wdt, -1, 1, D, 0, 0, 0);
	gt_rand(&dy, -1, 1);
	gt_poison(&dx);
	gt_rand(&dw, -1, 1);
	CPU(mg_op_rmsnorm_backward(&gt_cpu, &x.c, &w.c, &rs.c, &dy.c, &dx.c,
				   &dw.c),
	    name);
	if (!gt_ok(mg_op_rmsnorm_backward(&gt_gpu, &x.g, &w.g, &rs.g, &dy.g,
					  &dx.g, &dw.g),
		   name)) {
		gt_check(LBL("%s dx", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dw", name), dt, &dw, tol);
	}
	struct gt *all[] = {&x, &w, &y, &rs, &dy, &dx, &dw};
	for (size_t i = 0; i < 7; i++)
		gt_free(all[i]);
}

/* rd: the rotary dims of each head (rd < hd: partial rotary, the rest
 * must pass through as the CPU leaves them). */
static void llm_rope_check(enum mg_dtype dt, int64_t N, int64_t T, int64_t H,
			   int64_t hd, int64_t rd, double scale)
{
	const double tol = gt_tol(dt);
	struct gt x, pos, f;
	char name[128];
	snprintf(name, sizeof name,
		 "rope [%lld, %lld, %lld, %lld] rot %lld scale %g",
		 (long long)N, (long long)T, (long long)H, (long long)hd,
		 (long long)rd, scale);
	gt_make(&x, dt, -1, 4, N, T, H, hd);
	llm_positions(&pos, N, T);
	llm_inv_freq(&f, rd);
	gt_rand(&x, -1, 1);
	CPU(mg_op_rope_scaled(&gt_cpu, &x.c, &pos.c, &f.c, scale), name);
	if (!gt_ok(mg_op_rope_scaled(&gt_gpu, &x.g, &pos.g, &f.g, scale), name))
		gt_check(LBL("%s x", name), dt, &x, tol);
	gt_rand(&x, -1, 1);
	CPU(mg_op_rope_scaled_backward(&gt_cpu, &x.c, &pos.c, &f.c, scale),
	    name);
	if (!gt_ok(mg_op_rope_scaled_backward(&gt_gpu, &x.g, &pos.g, &f.g,
					      scale),
		   name))
		gt_check(LBL("%s backward", name), dt, &x, tol);
	gt_free(&x);
	gt_free(&pos);
	gt_free(&f);
}

/* Which CUDA attention kernels a check ran on, in its name. */
static const char *attn_tag = "";

/* window > 0: a sliding window of that many keys (Mistral's); cap > 0:
 * scores soft-capped (Gemma 2's attn_logit_softcapping, ABI 1.13; small
 * caps so that tanh bends on these random scores). */
static void llm_attention_check(enum mg_dtype dt, int64_t N, int64_t T,
				int64_t Hq, int64_t Hkv, int64_t hd,
				int64_t window, double cap)
{
	const double tol = gt_tol(dt);
	const struct mg_attn_opts sc =
		MG_ATTN_OPTS_CAP(1 / sqrt((double)hd), window, cap);
	struct gt q, k, v, pos, o, lse, dout, dq, dk, dv;
	char name[128];
	snprintf(name, sizeof name,
		 "attention%s N%lld T%lld Hq%lld Hkv%lld hd%lld W%lld cap%g",
		 attn_tag, (long long)N, (long long)T, (long long)Hq,
		 (long long)Hkv, (long long)hd, (long long)window, cap);
	gt_make(&q, dt, -1, 4, N, T, Hq, hd);
	gt_make(&k, dt, -1, 4, N, T, Hkv, hd);
	gt_make(&v, dt, -1, 4, N, T, Hkv, hd);
	gt_make(&o, dt, -1, 4, N, T, Hq, hd);
	gt_make(&lse, MG_F32, MG_F32, 3, N, Hq, T, 0);
	llm_positions(&pos, N, T);
	gt_rand(&q, -2, 2);
	gt_rand(&k, -2, 2);
	gt_rand(&v, -1, 1);
	gt_poison(&o);
	gt_poison(&lse);
	CPU(mg_op_attention_opts(&gt_cpu, &q.c, &k.c, &v.c, &pos.c, &sc, &o.c,
				 &lse.c),
	    name);
	if (!gt_ok(mg_op_attention_opts(&gt_gpu, &q.g, &k.g, &v.g, &pos.g, &sc,
					&o.g, &lse.g),
		   name)) {
		gt_check(LBL("%s o", name), dt, &o, tol);
		gt_check(LBL("%s lse", name), dt, &lse, gt_tol(MG_F32));
	}
	/* backward from the same (CPU) o and lse on both sides */
	gt_from_cpu(&o);
	gt_from_cpu(&lse);
	gt_make(&dout, dt, -1, 4, N, T, Hq, hd);
	gt_make(&dq, dt, -1, 4, N, T, Hq, hd);
	gt_make(&dk, dt, -1, 4, N, T, Hkv, hd);
	gt_make(&dv, dt, -1, 4, N, T, Hkv, hd);
	gt_rand(&dout, -1, 1);
	gt_poison(&dq);
	gt_poison(&dk);
	gt_poison(&dv);
	CPU(mg_op_attention_opts_backward(&gt_cpu, &q.c, &k.c, &v.c, &pos.c,
					  &sc, &o.c, &lse.c, &dout.c, &dq.c,
					  &dk.c, &dv.c),
	    name);
	if (!gt_ok(mg_op_attention_opts_backward(&gt_gpu, &q.g, &k.g, &v.g,
						 &pos.g, &sc, &o.g, &lse.g,
						 &dout.g, &dq.g, &dk.g, &dv.g),
		   name)) {
		gt_check(LBL("%s dq", name), dt, &dq, tol);
		gt_check(LBL("%s dk", name), dt, &dk, tol);
		gt_check(LBL("%s dv", name), dt, &dv, tol);
	}
	/* run again: bit-identical */
	double *r1[3] = {gt_read(&dq), gt_read(&dk), gt_read(&dv)};
	if (!gt_ok(mg_op_attention_opts_backward(&gt_gpu, &q.g, &k.g, &v.g,
						 &pos.g, &sc, &o.g, &lse.g,
						 &dout.g, &dq.g, &dk.g, &dv.g),
		   name)) {
		struct gt *g3[3] = {&dq, &dk, &dv};
		int64_t diff = 0;
		for (int i = 0; i < 3; i++) {
			double *r2 = gt_read(g3[i]);
			diff += bit_diffs(r1[i], r2, g3[i]->n);
			free(r2);
		}
		gt_report(LBL("%s backward twice", name), dt, (double)diff, 0,
			  0, " (elements differing)");
	}
	for (int i = 0; i < 3; i++)
		free(r1[i]);
	/* dk, dv alone (no dq: the flash kernels then compute D apart);
	 * the GPU side poisoned (all-ones bits: NaN in every float type) */
	cudaMemset(dk.g.data, 0xff, mg_tensor_bytes(&dk.g));
	cudaMemset(dv.g.data, 0xff, mg_tensor_bytes(&dv.g));
	if (!gt_ok(mg_op_attention_opts_backward(&gt_gpu, &q.g, &k.g, &v.g,
						 &pos.g, &sc, &o.g, &lse.g,
						 &dout.g, NULL, &dk.g, &dv.g),
		   name)) {
		gt_check(LBL("%s dk (no dq)", name), dt, &dk, tol);
		gt_check(LBL("%s dv (no dq)", name), dt, &dv, tol);
	}
	struct gt *all[] = {&q, &k, &v, &pos, &o, &lse, &dout, &dq, &dk, &dv};
	for (size_t i = 0; i < 10; i++)
		gt_free(all[i]);
}

/* Decoding over a key/value cache: n queries at pos..pos+n-1 against
 * random cache rows (rows past pos + n are NaN: never read). */
static void llm_decode_check(enum mg_dtype dt, int64_t max_len, int64_t pos,
			     int64_t n, int64_t Hq, int64_t Hkv, int64_t hd,
			     int64_t window, double cap)
{
	const double tol = gt_tol(dt);
	const struct mg_attn_opts sc =
		MG_ATTN_OPTS_CAP(1 / sqrt((double)hd), window, cap);
	struct gt q, kc, vc, o;
	char name[144];
	snprintf(name, sizeof name,
		 "attention_decode len%lld pos%lld n%lld Hq%lld Hkv%lld "
		 "hd%lld W%lld cap%g",
		 (long long)max_len, (long long)pos, (long long)n,
		 (long long)Hq, (long long)Hkv, (long long)hd,
		 (long long)window, cap);
	gt_make(&q, dt, -1, 3, n, Hq, hd, 0);
	gt_make(&kc, dt, -1, 3, max_len, Hkv, hd, 0);
	gt_make(&vc, dt, -1, 3, max_len, Hkv, hd, 0);
	gt_make(&o, dt, -1, 3, n, Hq, hd, 0);
	gt_rand(&q, -2, 2);
	gt_rand(&kc, -2, 2);
	gt_rand(&vc, -1, 1);
	for (int64_t i = (pos + n) * Hkv * hd; i < kc.n; i++)
		kc.v[i] = vc.v[i] = NAN;
	gt_upload(&kc);
	gt_upload(&vc);
	gt_poison(&o);
	CPU(mg_op_attention_decode_opts(&gt_cpu, &q.c, &kc.c, &vc.c, pos, &sc,
					&o.c),
	    name);
	if (!gt_ok(mg_op_attention_decode_opts(&gt_gpu, &q.g, &kc.g, &vc.g, pos,
					       &sc, &o.g),
		   name))
		gt_check(LBL("%s o", name), dt, &o, tol);
	/* run again: bit-identical */
	double *r1 = gt_read(&o);
	if (!gt_ok(mg_op_attention_decode_opts(&gt_gpu, &q.g, &kc.g, &vc.g, pos,
					       &sc, &o.g),
		   name)) {
		double *r2 = gt_read(&o);
		gt_report(LBL("%s twice", name), dt,
			  (double)bit_diffs(r1, r2, o.n), 0, 0,
			  " (elements differing)");
		free(r2);
	}
	free(r1);
	struct gt *all[] = {&q, &kc, &vc, &o};
	for (size_t i = 0; i < 4; i++)
		gt_free(all[i]);
}

static void llm_swiglu_check(enum mg_dtype dt, int64_t n)
{
	const double tol = gt_tol(dt);
	struct gt g, u, h, dh, dg, du;
	char name[96];
	snprintf(name, sizeof name, "swiglu n=%lld", (long long)n);
	gt_make(&g, dt, -1, 1, n, 0, 0, 0);
	gt_make(&u, dt, -1, 1, n, 0, 0, 0);
	gt_make(&h, dt, -1, 1, n, 0, 0, 0);
	gt_rand(&g, -6, 6);
	gt_rand(&u, -1, 1);
	gt_poison(&h);
	CPU(mg_op_swiglu(&gt_cpu, &g.c, &u.c, &h.c), name);
	if (!gt_ok(mg_op_swiglu(&gt_gpu, &g.g, &u.g, &h.g), name))
		gt_check(LBL("%s h", name), dt, &h, tol);
	gt_make(&dh, dt, -1, 1, n, 0, 0, 0);
	gt_make(&dg, dt, -1, 1, n, 0, 0, 0);
	gt_make(&du, dt, -1, 1, n, 0, 0, 0);
	gt_rand(&dh, -1, 1);
	gt_poison(&dg);
	gt_poison(&du);
	CPU(mg_op_swiglu_backward(&gt_cpu, &g.c, &u.c, &dh.c, &dg.c, &du.c),
	    name);
	if (!gt_ok(mg_op_swiglu_backward(&gt_gpu, &g.g, &u.g, &dh.g, &dg.g,
					 &du.g),
		   name)) {
		gt_check(LBL("%s dg", name), dt, &dg, tol);
		gt_check(LBL("%s du", name), dt, &du, tol);
	}
	struct gt *all[] = {&g, &u, &h, &dh, &dg, &du};
	for (size_t i = 0; i < 6; i++)
		gt_free(all[i]);
}

/* GeGLU (tanh GELU), soft-capping forward and backward, y = a x + b. */
static void llm_gemma_check(enum mg_dtype dt, int64_t n)
{
	const double tol = gt_tol(dt);
	struct gt g, u, h, dh, dg, du;
	char name[96];
	snprintf(name, sizeof name, "geglu n=%lld", (long long)n);
	gt_make(&g, dt, -1, 1, n, 0, 0, 0);
	gt_make(&u, dt, -1, 1, n, 0, 0, 0);
	gt_make(&h, dt, -1, 1, n, 0, 0, 0);
	gt_make(&dh, dt, -1, 1, n, 0, 0, 0);
	gt_make(&dg, dt, -1, 1, n, 0, 0, 0);
	gt_make(&du, dt, -1, 1, n, 0, 0, 0);
	gt_rand(&g, -6, 6);
	gt_rand(&u, -1, 1);
	gt_rand(&dh, -1, 1);
	gt_poison(&h);
	CPU(mg_op_geglu(&gt_cpu, &g.c, &u.c, &h.c), name);
	if (!gt_ok(mg_op_geglu(&gt_gpu, &g.g, &u.g, &h.g), name))
		gt_check(LBL("%s h", name), dt, &h, tol);
	gt_poison(&dg);
	gt_poison(&du);
	CPU(mg_op_geglu_backward(&gt_cpu, &g.c, &u.c, &dh.c, &dg.c, &du.c),
	    name);
	if (!gt_ok(mg_op_geglu_backward(&gt_gpu, &g.g, &u.g, &dh.g, &dg.g,
					&du.g),
		   name)) {
		gt_check(LBL("%s dg", name), dt, &dg, tol);
		gt_check(LBL("%s du", name), dt, &du, tol);
	}
	/* softcap of g (in [-6, 6]) at cap 2.5, its backward into dg */
	snprintf(name, sizeof name, "softcap n=%lld", (long long)n);
	gt_poison(&h);
	CPU(mg_op_softcap(&gt_cpu, &g.c, 2.5, &h.c), name);
	if (!gt_ok(mg_op_softcap(&gt_gpu, &g.g, 2.5, &h.g), name))
		gt_check(LBL("%s y", name), dt, &h, tol);
	gt_poison(&dg);
	CPU(mg_op_softcap_backward(&gt_cpu, &g.c, 2.5, &dh.c, &dg.c), name);
	if (!gt_ok(mg_op_softcap_backward(&gt_gpu, &g.g, 2.5, &dh.g, &dg.g),
		   name))
		gt_check(LBL("%s dx", name), dt, &dg, tol);
	snprintf(name, sizeof name, "scale_shift n=%lld", (long long)n);
	gt_poison(&h);
	CPU(mg_op_scale_shift(&gt_cpu, &g.c, 1.75, 1, &h.c), name);
	if (!gt_ok(mg_op_scale_shift(&gt_gpu, &g.g, 1.75, 1, &h.g), name))
		gt_check(LBL("%s y", name), dt, &h, tol);
	struct gt *all[] = {&g, &u, &h, &dh, &dg, &du};
	for (size_t i = 0; i < 6; i++)
		gt_free(all[i]);
}

static void test_llm(void)
{
	for (size_t d = 0; d < 3; d++) {
		const enum mg_dtype dt = llm_dt[d];
		llm_embedding_check(dt, 4, 512, 1000, 256);
		llm_embedding_check(dt, 3, 7, 5, 33);
		llm_rmsnorm_check(dt, 1024, 2048, true);
		llm_rmsnorm_check(dt, 37, 100, false);
		llm_rmsnorm_check(dt, 5, 8, true);
		llm_rope_check(dt, 4, 256, 8, 64, 64, 1);
		llm_rope_check(dt, 3, 13, 3, 8, 8, 1);
		/* partial rotary: Phi-4-mini's 96 of 128 with its longrope
		 * attention factor, odd pair counts */
		llm_rope_check(dt, 2, 37, 5, 128, 96, 1.1902380714238083);
		llm_rope_check(dt, 3, 13, 3, 24, 18, 1);
		llm_rope_check(dt, 1, 5, 7, 10, 2, 0.7);
		/* LLaMA-like heads; GQA 4:1 and multi-query; odd T; the
		 * head dims of small models and hd 256 */
		llm_attention_check(dt, 4, 256, 8, 2, 64, 0, 0);
		llm_attention_check(dt, 2, 333, 4, 1, 128, 0, 0);
		llm_attention_check(dt, 4, 37, 4, 2, 16, 0, 0);
		llm_attention_check(dt, 3, 11, 4, 4, 8, 0, 0);
		llm_attention_check(dt, 2, 70, 2, 1, 256, 0, 0);
		/* sliding windows: shorter than a tile, across tiles */
		llm_attention_check(dt, 4, 37, 4, 2, 16, 5, 0);
		llm_attention_check(dt, 2, 200, 4, 1, 64, 50, 0);
		/* decoding: prefill, one token at a long position, chunk
		 * boundaries of the CUDA kernel (128 keys), hd 256 */
		llm_decode_check(dt, 64, 0, 37, 8, 2, 64, 0, 0);
		llm_decode_check(dt, 1000, 700, 1, 32, 8, 128, 0, 0);
		llm_decode_check(dt, 300, 127, 130, 4, 1, 16, 0, 0);
		llm_decode_check(dt, 20, 3, 2, 2, 1, 256, 0, 0);
		llm_decode_check(dt, 9, 8, 1, 3, 3, 8, 0, 0);
		/* sliding windows: a prefill past the window, a token whose
		 * window starts mid-chunk */
		llm_decode_check(dt, 64, 0, 37, 8, 2, 64, 16, 0);
		llm_decode_check(dt, 1000, 700, 1, 32, 8, 128, 300, 0);
		llm_swiglu_check(dt, 8 * 512 * 1376);
		llm_swiglu_check(dt, 1001);
		/* Gemma (ABI 1.13): soft-capped scores on the tiled kernels
		 * (F32, and hd 256 in every dtype), in decoding; the
		 * element-wise ops */
		llm_attention_check(dt, 4, 37, 4, 2, 16, 5, 0.8);
		llm_attention_check(dt, 2, 70, 2, 1, 256, 20, 2);
		llm_decode_check(dt, 64, 0, 37, 8, 2, 64, 16, 1.5);
		llm_decode_check(dt, 20, 3, 2, 2, 1, 256, 0, 0.5);
		llm_gemma_check(dt, 8 * 512 * 1376);
		llm_gemma_check(dt, 1001);
	}
}

/*
 * The flash kernels (attention_flash.cu: F16/BF16, head dims 64 and 128)
 * and, on the same shapes, the tiled kernels they replace (knob off):
 * T off the 64-row tiles (1, 77, 200, 513) and on them (64, 256), GQA
 * ratios 1, 4 and 8, N >= 4 so every llm_positions pattern (one document,
 * two packed, a document then padding, random restarts) is there, and
 * LLaMA 3.2 1B's heads (32:8, hd 64). F32 keeps the tiled kernels.
 */
static void test_attention(void)
{
	static const int64_t sh[][7] = {
		/* N, T, Hq, Hkv, hd, sliding window (0: none), soft-cap
		 * times 4 (0: none) */
		{4, 77, 4, 4, 64, 0, 0},
		{4, 200, 8, 2, 128, 0, 0},
		{5, 513, 8, 1, 64, 0, 0},
		{4, 513, 16, 2, 128, 0, 0},
		{2, 64, 4, 1, 128, 0, 0},
		{4, 256, 32, 8, 64, 0, 0},
		{2, 1, 8, 1, 64, 0, 0},
		{6, 130, 4, 1, 128, 0, 0},
		{1, 1000, 8, 2, 128, 0, 0},
		/* windows within a tile, across tiles, of one key */
		{4, 200, 8, 2, 128, 13, 0},
		{4, 513, 16, 2, 128, 100, 0},
		{1, 1000, 8, 2, 64, 256, 0},
		{4, 77, 4, 1, 64, 1, 0},
		/* soft-capping (Gemma 2): 2.5 and 0.75, with a window, on
		 * both head dims and off the tiles */
		{4, 200, 8, 2, 128, 0, 10},
		{4, 77, 4, 1, 64, 13, 3},
		{2, 513, 8, 2, 64, 0, 10},
	};
	static const enum mg_dtype half[] = {MG_BF16, MG_F16};
	for (int flash = 1; flash >= 0; flash--) {
		mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_ATTN_FLASH, flash);
		attn_tag = flash ? " [flash]" : " [tiled]";
		for (size_t d = 0; d < 2; d++)
			for (size_t i = 0; i < sizeof sh / sizeof *sh; i++) {
				/* the tiled kernels on the small shapes only */
				if (!flash &&
				    sh[i][0] * sh[i][1] * sh[i][2] > 20000)
					continue;
				llm_attention_check(half[d], sh[i][0], sh[i][1],
						    sh[i][2], sh[i][3],
						    sh[i][4], sh[i][5],
						    (double)sh[i][6] / 4);
			}
	}
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_ATTN_FLASH, 1);
	attn_tag = " [f32]";
	llm_attention_check(MG_F32, 4, 200, 8, 2, 128, 0, 0);
	llm_attention_check(MG_F32, 4, 77, 4, 1, 64, 0, 0);
	llm_attention_check(MG_F32, 4, 200, 8, 2, 128, 40, 0);
	llm_attention_check(MG_F32, 4, 77, 4, 1, 64, 13, 0.75);
	attn_tag = "";
}

/* ------------------------------------------------------------------ */
/* Fused LLM ops (ABI 1.5) against their CPU twins, and add + RMSNorm
 * against the GPU's own unfused add then rmsnorm (bit-identical). */

static void fused_rms_check(enum mg_dtype dt, int64_t R, int64_t D, bool wf32)
{
	const double tol = gt_tol(dt);
	const enum mg_dtype wdt = wf32 ? MG_F32 : dt;
	struct gt x, r, w, s, y, rs, s2, y2, rs2, dy, dres, dx, dw;
	char name[96];
	snprintf(name, sizeof name, "add_rmsnorm [%lld, %lld] w %s",
		 (long long)R, (long long)D, mg_dtype_name(wdt));
	gt_make(&x, dt, -1, 2, R, D, 0, 0);
	gt_make(&r, dt, -1, 2, R, D, 0, 0);
	gt_make(&w, wdt, -1, 1, D, 0, 0, 0);
	gt_make(&s, dt, -1, 2, R, D, 0, 0);
	gt_make(&y, dt, -1, 2, R, D, 0, 0);
	gt_make(&rs, MG_F32, MG_F32, 1, R, 0, 0, 0);
	gt_make(&s2, dt, -1, 2, R, D, 0, 0);
	gt_make(&y2, dt, -1, 2, R, D, 0, 0);
	gt_make(&rs2, MG_F32, MG_F32, 1, R, 0, 0, 0);
	gt_rand(&x, -2, 2);
	gt_rand(&r, -1, 1);
	gt_rand(&w, 0.5, 1.5);
	gt_poison(&s), gt_poison(&y), gt_poison(&rs);
	CPU(mg_op_add_rmsnorm(&gt_cpu, &x.c, &r.c, &w.c, 1e-5, &s.c, &y.c,
			      &rs.c),
	    name);
	if (dt != MG_F32) {
		/* The op normalizes s rounded to dt (as mg_op_add writes
		 * it); the F32 twin's s is not rounded, which moves its rstd
		 * by s's rounding (about 1e-4 in F16/BF16 at D = 8). The
		 * reference rstd is the CPU rmsnorm's of the rounded s,
		 * checked at the F32 limit as the rmsnorm test does. */
		struct gt sh, yh;
		gt_make(&sh, dt, -1, 2, R, D, 0, 0);
		gt_make(&yh, dt, -1, 2, R, D, 0, 0);
		for (int64_t i = 0; i < sh.n; i++)
			sh.v[i] = gt_cpu_at(&s, i);
		gt_upload(&sh);
		CPU(mg_op_rmsnorm(&gt_cpu, &sh.c, &w.c, 1e-5, &yh.c, &rs.c),
		    name);
		gt_free(&sh);
		gt_free(&yh);
	}
	if (!gt_ok(mg_op_add_rmsnorm(&gt_gpu, &x.g, &r.g, &w.g, 1e-5, &s.g,
				     &y.g, &rs.g),
		   name)) {
		gt_check(LBL("%s s", name), dt, &s, tol);
		gt_check(LBL("%s y", name), dt, &y, tol);
		gt_check(LBL("%s rstd", name), dt, &rs, gt_tol(MG_F32));
	}
	/* the GPU's unfused composition: the same bits */
	if (!gt_ok(mg_op_add(&gt_gpu, &x.g, &r.g, &s2.g) ||
			   mg_op_rmsnorm(&gt_gpu, &s2.g, &w.g, 1e-5, &y2.g,
					 &rs2.g),
		   name)) {
		double *a = gt_read(&y), *b = gt_read(&y2);
		int64_t diff = 0;
		for (int64_t i = 0; i < y.n; i++)
			diff += a[i] != b[i];
		gt_report(LBL("%s = add, rmsnorm (bits)", name), dt,
			  (double)diff, 0, 0, "elements differing");
		free(a), free(b);
	}
	gt_from_cpu(&rs);
	gt_make(&dy, dt, -1, 2, R, D, 0, 0);
	gt_make(&dres, dt, -1, 2, R, D, 0, 0);
	gt_make(&dx, dt, -1, 2, R, D, 0, 0);
	gt_make(&dw, wdt, -1, 1, D, 0, 0, 0);
	gt_rand(&dy, -1, 1);
	gt_rand(&dres, -1, 1);
	gt_poison(&dx);
	gt_rand(&dw, -1, 1);
	snprintf(name, sizeof name, "rmsnorm_backward_add [%lld, %lld] w %s",
		 (long long)R, (long long)D, mg_dtype_name(wdt));
	CPU(mg_op_rmsnorm_backward_add(&gt_cpu, &s.c, &w.c, &rs.c, &dy.c,
				       &dres.c, &dx.c, &dw.c),
	    name);
	if (!gt_ok(mg_op_rmsnorm_backward_add(&gt_gpu, &s.g, &w.g, &rs.g, &dy.g,
					      &dres.g, &dx.g, &dw.g),
		   name)) {
		gt_check(LBL("%s dx", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dw", name), dt, &dw, tol);
	}
	struct gt *all[] = {&x,	 &r,   &w,  &s,	   &y,	&rs, &s2,
			    &y2, &rs2, &dy, &dres, &dx, &dw};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		gt_free(all[i]);
}

static void fused_lxent_check(enum mg_dtype dt, int64_t R, int64_t D, int64_t V,
			      int64_t C, int64_t rank)
{
	const double tol = gt_tol(dt);
	struct gt x, w, lab, sc, work, met, dx, dw, x2, w2, dx2, dw2;
	char name[128];
	snprintf(name, sizeof name,
		 "linear_xent rows %lld dim %lld vocab %lld chunk %lld%s",
		 (long long)R, (long long)D, (long long)V, (long long)C,
		 rank ? " lora" : "");
	gt_make(&x, dt, -1, 2, R, D, 0, 0);
	gt_make(&w, dt, -1, 2, V, D, 0, 0);
	gt_make(&lab, MG_I32, MG_I32, 1, R, 0, 0, 0);
	gt_make(&sc, MG_F32, MG_F32, 1, 1, 0, 0, 0);
	gt_make(&work, dt, -1, 2, C, V, 0, 0);
	gt_make(&met, MG_F64, MG_F64, 1, MG_METRIC_N, 0, 0, 0);
	gt_make(&dx, dt, -1, 2, R, D, 0, 0);
	gt_make(&dw, dt, -1, 2, V, D, 0, 0);
	const int64_t rk = rank ? rank : 1;
	gt_make(&x2, dt, -1, 2, R, rk, 0, 0);
	gt_make(&w2, dt, -1, 2, V, rk, 0, 0);
	gt_make(&dx2, dt, -1, 2, R, rk, 0, 0);
	gt_make(&dw2, dt, -1, 2, V, rk, 0, 0);
	gt_rand(&x, -1, 1);
	gt_rand(&w, -0.5, 0.5);
	gt_rand(&x2, -0.5, 0.5);
	gt_rand(&w2, -0.5, 0.5);
	for (int64_t i = 0; i < R; i++)
		lab.v[i] = gt_urand() < 0.2
				   ? -100
				   : (double)(int64_t)(gt_urand() * (double)V);
	gt_upload(&lab);
	sc.v[0] = 1.0 / (double)R;
	gt_upload(&sc);
	gt_poison(&met);
	gt_poison(&dx);
	gt_poison(&dx2);
	gt_rand(&dw, -1e-3, 1e-3);
	gt_rand(&dw2, -1e-3, 1e-3);
	struct mg_lowrank lc = {&x2.c, &w2.c, &dx2.c, &dw2.c},
			  lg = {&x2.g, &w2.g, &dx2.g, &dw2.g};
	CPU(mg_op_linear_lora_xent(&gt_cpu, &x.c, &w.c, rank ? &lc : NULL,
				   &lab.c, &sc.c, &work.c, &met.c, &dx.c,
				   &dw.c),
	    name);
	if (!gt_ok(mg_op_linear_lora_xent(&gt_gpu, &x.g, &w.g,
					  rank ? &lg : NULL, &lab.g, &sc.g,
					  &work.g, &met.g, &dx.g, &dw.g),
		   name)) {
		gt_check(LBL("%s metrics", name), dt, &met, tol);
		gt_check(LBL("%s dx", name), dt, &dx, tol);
		gt_check_delta(LBL("%s dw", name), dt, &dw, tol);
		if (rank) {
			gt_check(LBL("%s dx2", name), dt, &dx2, tol);
			gt_check_delta(LBL("%s dw2", name), dt, &dw2, tol);
		}
	}
	/* metrics alone (the forward of a training step, and evaluation);
	 * gt_poison wipes both sides, so the CPU reference runs again */
	gt_poison(&met);
	CPU(mg_op_linear_xent(&gt_cpu, &x.c, &w.c, &lab.c, NULL, &work.c,
			      &met.c, NULL, NULL),
	    name);
	if (!gt_ok(mg_op_linear_xent(&gt_gpu, &x.g, &w.g, &lab.g, NULL, &work.g,
				     &met.g, NULL, NULL),
		   name) &&
	    !rank)
		gt_check(LBL("%s metrics without gradients", name), dt, &met,
			 tol);
	struct gt *all[] = {&x,	 &w,  &lab, &sc, &work, &met,
			    &dx, &dw, &x2,  &w2, &dx2,	&dw2};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		gt_free(all[i]);
}

static void test_fused(void)
{
	for (size_t d = 0; d < 3; d++) {
		const enum mg_dtype dt = llm_dt[d];
		fused_rms_check(dt, 1024, 2048, true);
		fused_rms_check(dt, 37, 100, false);
		fused_rms_check(dt, 5, 8, true);
		/* the widest shared-memory partials, then wider: unfused dw */
		fused_rms_check(dt, 70, 12032, false);
		fused_rms_check(dt, 9, 16384, true);
		/* 3 chunks and a remainder; one chunk; Llama-3's vocab */
		fused_lxent_check(dt, 300, 64, 1000, 128, 0);
		fused_lxent_check(dt, 17, 32, 50, 64, 0);
		fused_lxent_check(dt, 64, 128, 128256, 24, 0);
		/* with a LoRA adapter on the head */
		fused_lxent_check(dt, 300, 64, 1000, 128, 8);
	}
}

static void probe_dispatch(void)
{
	struct gt x, y;
	gt_make(&x, MG_F32, -1, 1, 4, 0, 0, 0);
	gt_make(&y, MG_F32, -1, 1, 4, 0, 0, 0);
	gt_rand(&x, -1, 1);
	wired = mg_op_relu6(&gt_gpu, &x.g, &y.g) == 0;
	mg_clear_error();
	gt_sync("dispatch probe");
	printf("dispatch: public mg_op_* %s CUDA (F32/F64 checks go %s)\n",
	       wired ? "reach" : "do not reach yet",
	       wired ? "through mg_op_*" : "to mg_cuda_* directly");
	gt_free(&x);
	gt_free(&y);
}

/* ------------------------------------------------------------------ */
/* mg_host_call_side (ABI 1.9): on the side stream, a device buffer's
 * copy to pinned host memory, host work on it, and the copy back run in
 * that order, after the compute work queued before them: x = 2x + 1,
 * 8 rounds (offload's update_in_backward: gradient down, host update,
 * parameters up). */

struct side_job {
	float *h;
	int64_t n;
	int calls;
};

static void side_plus1(void *arg)
{
	struct side_job *j = arg;
	for (int64_t i = 0; i < j->n; i++)
		j->h[i] += 1;
	j->calls++;
}

static void test_side(void)
{
	const int64_t n = 1 << 20;
	struct gt x, y;
	struct mg_buf host;
	gt_make(&x, MG_F32, MG_F32, 1, n, 0, 0, 0);
	gt_make(&y, MG_F32, MG_F32, 1, n, 0, 0, 0);
	/* small integers: every round is exact in F32 */
	for (int64_t i = 0; i < n; i++)
		x.v[i] = (double)(i % 17 - 8);
	gt_upload(&x);
	int rc = mg_buf_alloc_host(&gt_gpu, &host, (size_t)n * sizeof(float),
				   MG_MEM_OTHER, true);
	struct side_job job = {host.ptr, n, 0};
	for (int r = 0; r < 8 && !rc; r++) {
		/* compute first (y = x + x), which the side stream's copy
		 * of y must wait for; then y + 1 on the host, back into x */
		rc = mg_op_add(&gt_gpu, &x.g, &x.g, &y.g) ||
		     mg_copy_async(&gt_gpu, host.ptr, y.g.data,
				   (size_t)n * sizeof(float)) ||
		     mg_host_call_side(&gt_gpu, side_plus1, &job) ||
		     mg_copy_async(&gt_gpu, x.g.data, host.ptr,
				   (size_t)n * sizeof(float)) ||
		     mg_copy_join(&gt_gpu);
	}
	rc = rc || mg_device_sync(&gt_gpu);
	if (!gt_ok(rc, "host_call_side")) {
		/* x_8 = 2^8 x_0 + 255 */
		double *got = gt_read(&x), worst = 0;
		for (int64_t i = 0; i < n; i++) {
			const double e = fabs(
				got[i] - (256.0 * (double)(i % 17 - 8) + 255));
			worst = e > worst ? e : worst;
		}
		free(got);
		gt_report("host_call_side: copy down, host work, copy up, "
			  "8 rounds",
			  MG_F32, worst, 0, 0,
			  job.calls == 8 ? "" : "host calls != 8");
	}
	mg_buf_free(&gt_gpu, &host);
	gt_free(&x);
	gt_free(&y);
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "all";
	gt_init(argc, argv);
	probe_dispatch();
	const bool all = strcmp(which, "all") == 0;
#define RUN(name, call)                                                        \
	if (all || strcmp(which, name) == 0)                                   \
	call
	RUN("conv", test_conv());
	RUN("depthwise", test_depthwise());
	RUN("batchnorm", test_batchnorm());
	RUN("elementwise", test_elementwise());
	RUN("pool", test_pool());
	RUN("linear", test_linear());
	RUN("dropout", test_dropout());
	RUN("loss", test_loss());
	RUN("pref", test_pref());
	RUN("resize", test_resize());
	RUN("optim", test_optim());
	RUN("convert", test_convert());
	RUN("llm", test_llm());
	RUN("attention", test_attention());
	RUN("nf4", test_nf4());
	RUN("qat", test_qat());
	RUN("fused", test_fused());
	RUN("side", test_side());
	RUN("determinism", test_bn_repeat());
	/* both 1x1 paths: batched GEMM (default) and cuDNN */
	for (int pw = 1; pw >= 0; pw--) {
		pw_mode = pw;
		mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_POINTWISE_GEMM, pw);
		RUN("determinism", test_determinism(false));
		RUN("graph", test_determinism(true));
	}
	mg_cuda_ops_set(&gt_gpu, MG_CUDA_OPT_POINTWISE_GEMM, 1);
	mg_buf_free(&gt_gpu, &gws);
	return gt_finish();
}
