/*
 * pointwise.cu - 1x1, stride-1, unpadded, ungrouped convolutions (the
 * expand/project layers of MobileNetV2) as cuBLAS GEMMs: the default
 * (MG_CUDA_OPT_POINTWISE_GEMM; MG_CUDA_POINTWISE=cudnn goes back to
 * cuDNN), 1.6-2.7x faster than cuDNN's FP32 (no TF32) 1x1 kernels on H100
 * and 2.3-2.9x in F16 (core/ops/cuda/NOTES.md).
 *
 * Per sample n, NCHW x_n is a row-major [C, HW] matrix, so
 *   y_n = W x_n            (one strided-batched GEMM over n),
 *   dx_n = W^T dy_n        (likewise),
 *   dW += sum_n dy_n x_n^T (strided-batched GEMM into per-sample
 *                           partials, then a fixed-order sum: no atomics,
 *                           the same bits every run).
 * Small planes make those batched GEMMs poor: at HW == 1 (the last
 * layers at 28 px) each sample is a matrix-vector product, and the
 * per-sample dW partials (N x K x C) dwarf the tensors themselves. So at
 * HW == 1, where NCHW x is a row-major [N, C] matrix, every direction is
 * one GEMM over the whole batch (dW with beta = 1, no partials); and for
 * dW wherever x and dy moved once to [N * HW, C] and [N * HW, K] (NHWC)
 * cost fewer bytes than the partials, they are transposed into scratch
 * and dW is again one GEMM with k = N * HW.
 * Column-major to cuBLAS: a row-major [r, c] matrix is its transpose.
 * F16/BF16 use F32 compute; their weight-gradient partials are F32.
 */
#include <cublas_v2.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_gemm.h"

namespace
{
/* Partial elements a chunk of samples may use (32 MB in F32). At 28 px
 * the per-sample partials of the 320 -> 1280 layer were most of the
 * device memory (64 MB, 96 MB once the scratch grew); 8M elements costs
 * a few more GEMM chunks on the 7 x 7 layers only. */
const int64_t PART_ELEMS = (int64_t)8 << 20;

struct pw_types {
	cudaDataType_t data, part;
	cublasComputeType_t compute;
	bool f64;
	size_t part_size;
};

int pw_types_for(struct mg_ctx *ctx, enum mg_dtype dt, pw_types *t)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return -1;
	t->f64 = dt == MG_F64;
	t->compute = CUBLAS_COMPUTE_32F;
	t->part = CUDA_R_32F;
	t->part_size = 4;
	switch (dt) {
	case MG_F32:
		t->data = CUDA_R_32F;
		if (st->opt[MG_CUDA_OPT_TF32])
			t->compute = CUBLAS_COMPUTE_32F_FAST_TF32;
		return 0;
	case MG_F64:
		t->data = t->part = CUDA_R_64F;
		t->compute = CUBLAS_COMPUTE_64F;
		t->part_size = 8;
		return 0;
	case MG_F16:
		t->data = CUDA_R_16F;
		return 0;
	case MG_BF16:
		t->data = CUDA_R_16BF;
		return 0;
	default:
		return mgc_bad_dtype("conv2d (pointwise)", dt);
	}
}

int batched(struct mg_ctx *ctx, const char *op, const pw_types &t, bool ta,
	    bool tb, int64_t m, int64_t n, int64_t k, const void *A,
	    int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
	    void *C, cudaDataType_t ct, int64_t ldc, int64_t sc, int64_t batch)
{
	const double one64 = 1, zero64 = 0;
	const float one32 = 1, zero32 = 0;
	cublasStatus_t s = cublasGemmStridedBatchedEx(
		(cublasHandle_t)ctx->dev->cublas,
		ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
		(int)m, (int)n, (int)k,
		t.f64 ? (const void *)&one64 : (const void *)&one32, A, t.data,
		(int)lda, sa, B, t.data, (int)ldb, sb,
		t.f64 ? (const void *)&zero64 : (const void *)&zero32, C, ct,
		(int)ldc, sc, (int)batch, t.compute, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS)
		return mg_error("%s: cublasGemmStridedBatchedEx (%lld x %lld "
				"x %lld, batch %lld) failed: %s",
				op, (long long)m, (long long)n, (long long)k,
				(long long)batch, cublasGetStatusString(s));
	return 0;
}

/* dw[i] += sum over g < G of part[g * n + i], in order. */
template <typename T, typename P>
__global__ void pw_reduce_k(const P *part, int64_t G, int64_t n, T *dw)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		typename mgc_t<T>::acc s = 0;
		for (int64_t g = 0; g < G; g++)
			s += part[g * n + i];
		dw[i] = mgc_t<T>::from(mgc_ld(dw, i) + s);
	}
}

template <typename T>
void pw_reduce(cudaStream_t st, const void *part, int64_t G, int64_t n,
	       void *dw)
{
	typedef typename mgc_param<T>::type P; /* F64, else F32 */
	pw_reduce_k<T, P><<<mgc_blocks(n, 256), 256, 0, st>>>((const P *)part,
							      G, n, (T *)dw);
}

/*
 * One GEMM, C = alpha op(A) op(B) + beta C, all of the data type (C
 * included: dW accumulates in place with beta = 1, rounded once from the
 * F32 accumulator for F16/BF16).
 */
int single(struct mg_ctx *ctx, const char *op, const pw_types &t, bool ta,
	   bool tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
	   const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
	return mgc_gemm(ctx, op, t.data, t.compute, t.f64, ta, tb, m, n, k, A,
			lda, B, ldb, beta, C, ldc);
}

#define TP_TILE 32

/*
 * Per sample n (blockIdx.z): the row-major [C, HW] plane to [HW, C]
 * through a padded shared-memory tile, so both the reads and the writes
 * are coalesced; a pure copy (the bits do not change).
 */
template <typename T>
__global__ void pw_to_nhwc_k(const T *x, int64_t C, int64_t HW, T *y)
{
	__shared__ T tile[TP_TILE][TP_TILE + 1];
	const int64_t n = blockIdx.z;
	const int64_t q0 = (int64_t)blockIdx.x * TP_TILE;
	const int64_t c0 = (int64_t)blockIdx.y * TP_TILE;
	const T *xs = x + n * C * HW;
	T *ys = y + n * C * HW;
	for (int r = threadIdx.y; r < TP_TILE; r += blockDim.y) {
		const int64_t c = c0 + r, q = q0 + threadIdx.x;
		if (c < C && q < HW)
			tile[r][threadIdx.x] = xs[c * HW + q];
	}
	__syncthreads();
	for (int r = threadIdx.y; r < TP_TILE; r += blockDim.y) {
		const int64_t q = q0 + r, c = c0 + threadIdx.x;
		if (c < C && q < HW)
			ys[q * C + c] = tile[threadIdx.x][r];
	}
}

template <typename T>
void pw_to_nhwc(cudaStream_t st, const void *x, int64_t N, int64_t C,
		int64_t HW, void *y)
{
	const dim3 grid((unsigned)((HW + TP_TILE - 1) / TP_TILE),
			(unsigned)((C + TP_TILE - 1) / TP_TILE), (unsigned)N);
	pw_to_nhwc_k<T><<<grid, dim3(TP_TILE, 8), 0, st>>>((const T *)x, C, HW,
							   (T *)y);
}

/* Scratch the NHWC copies may take (105 MB at most in a 500 px F32 step,
 * the 320 -> 1280 layer on 16 x 16 planes); larger ones use the
 * partials. */
const size_t NHWC_MAX_BYTES = (size_t)128 << 20;

/*
 * dW through NHWC copies when they move fewer bytes than the partials
 * (write + read of N*HW*(K+C) elements against N*K*C partials), fit the
 * cap, and the sample index fits a grid's z dimension.
 */
bool dw_via_nhwc(const struct mgc_conv_geom *g, size_t es, size_t part_size)
{
	const int64_t HW = g->H * g->W;
	const double copy = (double)(g->N * HW) * (double)(g->K + g->C) * es;
	const double part = (double)g->N * (double)(g->K * g->C) * part_size;
	return g->N <= 65535 && copy < part &&
	       (size_t)copy + 512 <= NHWC_MAX_BYTES;
}
} // namespace

extern "C" int mgc_pointwise_fwd(struct mg_ctx *ctx,
				 const struct mgc_conv_geom *g,
				 enum mg_dtype dt, const void *x, const void *w,
				 void *y)
{
	static const char op[] = "conv2d (pointwise GEMM)";
	pw_types t = {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, false, 4};
	if (pw_types_for(ctx, dt, &t))
		return -1;
	const int64_t HW = g->H * g->W;
	if (HW == 1) /* y^T [K, N] = W [K, C] . x^T [C, N] */
		return single(ctx, op, t, true, false, g->K, g->N, g->C, w,
			      g->C, x, g->C, 0, y, g->K);
	/* y_n^T [HW, K] = x_n^T [HW, C] . W^T [C, K] */
	return batched(ctx, op, t, false, false, HW, g->K, g->C, x, HW,
		       g->C * HW, w, g->C, 0, y, t.data, HW, g->K * HW, g->N);
}

extern "C" int mgc_pointwise_bwd_data(struct mg_ctx *ctx,
				      const struct mgc_conv_geom *g,
				      enum mg_dtype dt, const void *w,
				      const void *dy, void *dx)
{
	static const char op[] = "conv2d_backward (pointwise GEMM dx)";
	pw_types t = {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, false, 4};
	if (pw_types_for(ctx, dt, &t))
		return -1;
	const int64_t HW = g->H * g->W;
	if (HW == 1) /* dx^T [C, N] = W^T [C, K] . dy^T [K, N] */
		return single(ctx, op, t, false, false, g->C, g->N, g->K, w,
			      g->C, dy, g->K, 0, dx, g->C);
	/* dx_n^T [HW, C] = dy_n^T [HW, K] . W [K, C] */
	return batched(ctx, op, t, false, true, HW, g->C, g->K, dy, HW,
		       g->K * HW, w, g->C, 0, dx, t.data, HW, g->C * HW, g->N);
}

extern "C" int mgc_pointwise_bwd_filter(struct mg_ctx *ctx,
					const struct mgc_conv_geom *g,
					enum mg_dtype dt, const void *x,
					const void *dy, void *dw)
{
	static const char op[] = "conv2d_backward (pointwise GEMM dw)";
	pw_types t = {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, false, 4};
	if (pw_types_for(ctx, dt, &t))
		return -1;
	const int64_t HW = g->H * g->W, KC = g->K * g->C;
	const size_t es = mg_dtype_size(dt);
	if (HW == 1 || dw_via_nhwc(g, es, t.part_size)) {
		/* dW^T [C, K] += x^T [C, N*HW] . dy [N*HW, K], both operands
		 * NHWC (as they are at HW == 1) */
		const void *xt = x, *dyt = dy;
		if (HW > 1) {
			const size_t xb = (size_t)(g->N * HW * g->C) * es;
			const size_t xoff = (xb + 255) / 256 * 256;
			char *s = (char *)mgc_scratch(
				ctx, xoff + (size_t)(g->N * HW * g->K) * es);
			if (!s)
				return -1;
			MGC_DISPATCH(op, dt, pw_to_nhwc, mgc_stream(ctx), x,
				     g->N, g->C, HW, s);
			MGC_DISPATCH(op, dt, pw_to_nhwc, mgc_stream(ctx), dy,
				     g->N, g->K, HW, s + xoff);
			if (mgc_check_launch(op))
				return -1;
			xt = s;
			dyt = s + xoff;
		}
		return single(ctx, op, t, false, true, g->C, g->K, g->N * HW,
			      xt, g->C, dyt, g->K, 1, dw, g->C);
	}
	int64_t G = PART_ELEMS / (KC > 0 ? KC : 1);
	if (G < 1)
		G = 1;
	if (G > g->N)
		G = g->N;
	char *part = (char *)mgc_scratch(ctx, (size_t)(G * KC) * t.part_size);
	if (!part)
		return -1;
	for (int64_t n0 = 0; n0 < g->N; n0 += G) {
		const int64_t gb = g->N - n0 < G ? g->N - n0 : G;
		/* part_n^T [C, K] = x_n [C, HW] . dy_n^T [HW, K] */
		if (batched(ctx, op, t, true, false, g->C, g->K, HW,
			    (const char *)x + n0 * g->C * HW * es, HW,
			    g->C * HW, (const char *)dy + n0 * g->K * HW * es,
			    HW, g->K * HW, part, t.part, g->C, KC, gb))
			return -1;
		MGC_DISPATCH(op, dt, pw_reduce, mgc_stream(ctx), part, gb, KC,
			     dw);
		if (mgc_check_launch(op))
			return -1;
	}
	return 0;
}
