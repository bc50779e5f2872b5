/*
 * loss.cu - softmax cross-entropy with integer labels on CUDA. One warp
 * per row (max, first arg-max, log-sum-exp); the forward's per-row losses
 * are summed by a single block in a fixed order into the metrics (=), and
 * the backward reads its scale from the device (ctx->grad_scale), never
 * from the host, so a step can be captured as a CUDA graph. Labels >= K,
 * which the CPU op rejects, cannot be reported without a host sync: they
 * turn the loss sum and the row's gradient into NaN.
 */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"

namespace
{
const int ROWS_PER_BLOCK = 8;
const int SUM_TH = 1024;

__device__ __forceinline__ float ex(float v)
{
	return expf(v);
}
__device__ __forceinline__ double ex(double v)
{
	return exp(v);
}
__device__ __forceinline__ float lg(float v)
{
	return logf(v);
}
__device__ __forceinline__ double lg(double v)
{
	return log(v);
}

/* Row max, first arg-max and log-sum-exp, valid in every lane. */
template <typename T>
__device__ typename mgc_t<T>::acc row_lse(const T *row, int64_t K, int lane,
					  int64_t *argmax)
{
	typedef typename mgc_t<T>::acc A;
	A mx = -INFINITY;
	int64_t am = K;
	for (int64_t k = lane; k < K; k += 32) {
		const A v = mgc_ld(row, k);
		if (am == K || v > mx) {
			mx = v;
			am = k;
		}
	}
	for (int o = 16; o > 0; o >>= 1) {
		const A ov = __shfl_xor_sync(0xffffffffu, mx, o);
		const int64_t oa = __shfl_xor_sync(0xffffffffu, am, o);
		if (ov > mx || (ov == mx && oa < am)) {
			mx = ov;
			am = oa;
		}
	}
	A s = 0;
	for (int64_t k = lane; k < K; k += 32)
		s += ex(mgc_ld(row, k) - mx);
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	*argmax = am;
	return mx + lg(s);
}

/* Per row: loss (NaN for a label >= K), correct, counted. */
template <typename T>
__global__ void xent_rows_k(const T *logits, const int32_t *labels,
			    int64_t rows, int64_t K, double3 *out)
{
	const int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	if (r >= rows)
		return;
	const int32_t lab = labels[r];
	if (lab < 0) {
		if (lane == 0)
			out[r] = make_double3(0, 0, 0);
		return;
	}
	const T *row = logits + r * K;
	int64_t am;
	const double lse = (double)row_lse(row, K, lane, &am);
	if (lane == 0)
		out[r] = lab >= K ? make_double3(NAN, 0, 1)
				  : make_double3(lse - (double)mgc_ld(row, lab),
						 am == lab ? 1 : 0, 1);
}

/* metrics = sums over rows, one block, fixed order. */
template <typename M>
__global__ void xent_sum_k(const double3 *rowv, int64_t rows, M *metrics)
{
	__shared__ double sh[32];
	double a = 0, b = 0, c = 0;
	for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
		a += rowv[r].x;
		b += rowv[r].y;
		c += rowv[r].z;
	}
	a = mgc_block_sum(a, sh);
	b = mgc_block_sum(b, sh);
	c = mgc_block_sum(c, sh);
	if (threadIdx.x == 0) {
		metrics[MG_METRIC_LOSS_SUM] = (M)a;
		metrics[MG_METRIC_CORRECT] = (M)b;
		metrics[MG_METRIC_COUNT] = (M)c;
	}
}

template <typename T>
__global__ void xent_bwd_k(const T *logits, const int32_t *labels, int64_t rows,
			   int64_t K, const float *scale, T *dl)
{
	typedef typename mgc_t<T>::acc A;
	const int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	if (r >= rows)
		return;
	const int32_t lab = labels[r];
	const T *row = logits + r * K;
	T *d = dl + r * K;
	if (lab < 0) {
		for (int64_t k = lane; k < K; k += 32)
			d[k] = mgc_t<T>::from((A)0);
		return;
	}
	int64_t am;
	const A lse = row_lse(row, K, lane, &am);
	const A s = scale ? (A)*scale : (A)1;
	const A bad = lab >= K ? (A)NAN : (A)0;
	/* Every lane has read its part of the row before any lane writes
	 * (dlogits may alias logits). */
	__syncwarp();
	for (int64_t k = lane; k < K; k += 32) {
		const A p = ex(mgc_ld(row, k) - lse);
		d[k] = mgc_t<T>::from((p - (k == lab ? (A)1 : (A)0)) * s + bad);
	}
}

template <typename T>
void fwd(cudaStream_t st, const void *logits, const int32_t *labels,
	 int64_t rows, int64_t K, double3 *rowv)
{
	xent_rows_k<T><<<mgc_blocks(rows, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32,
			 0, st>>>((const T *)logits, labels, rows, K, rowv);
}

template <typename T>
void bwd(cudaStream_t st, const void *logits, const int32_t *labels,
	 int64_t rows, int64_t K, const float *scale, void *dl)
{
	xent_bwd_k<T>
		<<<mgc_blocks(rows, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0,
		   st>>>((const T *)logits, labels, rows, K, scale, (T *)dl);
}
} // namespace

extern "C" int mg_cuda_softmax_xent(struct mg_ctx *ctx,
				    const struct mg_tensor *logits,
				    const struct mg_tensor *labels,
				    struct mg_tensor *metrics)
{
	static const char op[] = "softmax_xent";
	const int64_t K = logits->shape[logits->ndim - 1];
	const int64_t rows = mg_tensor_numel(logits) / K;
	if (metrics->dtype != MG_F32 && metrics->dtype != MG_F64)
		return mgc_bad_dtype(op, metrics->dtype);
	double3 *rowv = (double3 *)mgc_scratch(
		ctx, (size_t)(rows > 0 ? rows : 1) * sizeof(double3));
	if (!rowv)
		return -1;
	cudaStream_t st = mgc_stream(ctx);
	if (rows > 0)
		MGC_DISPATCH(op, logits->dtype, fwd, st, logits->data,
			     (const int32_t *)labels->data, rows, K, rowv);
	if (metrics->dtype == MG_F64)
		xent_sum_k<double><<<1, SUM_TH, 0, st>>>(
			rowv, rows, (double *)metrics->data);
	else
		xent_sum_k<float><<<1, SUM_TH, 0, st>>>(rowv, rows,
							(float *)metrics->data);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_softmax_xent_backward(struct mg_ctx *ctx,
					     const struct mg_tensor *logits,
					     const struct mg_tensor *labels,
					     const struct mg_tensor *scale,
					     struct mg_tensor *dlogits)
{
	static const char op[] = "softmax_xent_backward";
	const int64_t K = logits->shape[logits->ndim - 1];
	const int64_t rows = mg_tensor_numel(logits) / K;
	if (rows == 0)
		return 0;
	MGC_DISPATCH(op, logits->dtype, bwd, mgc_stream(ctx), logits->data,
		     (const int32_t *)labels->data, rows, K,
		     scale ? (const float *)scale->data : NULL, dlogits->data);
	return mgc_check_launch(op);
}
