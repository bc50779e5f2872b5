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

/* Fold one vector of logits e[], its first element at index k0, into a
 * lane's running max mx (first arg-max am) and sum s of exp(x - mx). */
template <typename A, int V>
__device__ __forceinline__ void lse_fold(const A *e, int64_t k0, int64_t K,
					 A *mx, A *s, int64_t *am)
{
	A m = e[0];
	int a = 0;
#pragma unroll
	for (int k = 1; k < V; k++)
		if (e[k] > m) {
			m = e[k];
			a = k;
		}
	if (*am == K || m > *mx) {
		*s = *mx == -INFINITY ? (A)0 : *s * ex(*mx - m);
		*mx = m;
		*am = k0 + a;
	}
#pragma unroll
	for (int k = 0; k < V; k++)
		*s += ex(e[k] - *mx);
}

/*
 * row_lse for a 16-byte aligned row of K = nv vectors: one pass (an
 * online softmax per lane, lanes merged by a butterfly that gives every
 * lane the same bits), 128-bit loads, two vectors in flight a lane. The
 * head's rows are 128k logits: the two-pass scalar version read each row
 * twice, 2 bytes a lane at a time.
 */
template <typename T>
__device__ typename mgc_t<T>::acc row_lse_v(const T *row, int64_t nv, int lane,
					    int64_t *argmax)
{
	typedef typename mgc_t<T>::acc A;
	const int V = MGC_VEC(T);
	const int64_t K = nv * V;
	A mx = -INFINITY, s = 0;
	int64_t am = K;
	for (int64_t v = lane; v < nv; v += 64) {
		A e0[V], e1[V];
		mgc_ldv(row, v, e0);
		const bool two = v + 32 < nv;
		if (two)
			mgc_ldv(row, v + 32, e1);
		lse_fold<A, V>(e0, v * V, K, &mx, &s, &am);
		if (two)
			lse_fold<A, V>(e1, (v + 32) * V, K, &mx, &s, &am);
	}
	for (int o = 16; o > 0; o >>= 1) {
		const A om = __shfl_xor_sync(0xffffffffu, mx, o);
		const A os = __shfl_xor_sync(0xffffffffu, s, o);
		const int64_t oa = __shfl_xor_sync(0xffffffffu, am, o);
		const A nm = om > mx ? om : mx;
		const A a = mx == -INFINITY ? (A)0 : s * ex(mx - nm);
		const A b = om == -INFINITY ? (A)0 : os * ex(om - nm);
		/* the lower lane's term first in both lanes: same bits */
		s = (lane & o) ? b + a : a + b;
		if (om > mx || (om == mx && oa < am) || am == K) {
			if (oa != K)
				am = oa;
		}
		mx = nm;
	}
	*argmax = am;
	return mx + lg(s);
}

/* Rows of K logits can take 16-byte vectors. */
template <typename T> static bool rows_vec(const void *p, int64_t K)
{
	return mgc_aligned16(p) && K % MGC_VEC(T) == 0;
}

/* Per row: loss (NaN for a label >= K), correct, counted. */
template <typename T>
__global__ void xent_rows_k(const T *logits, const int32_t *labels,
			    int64_t rows, int64_t K, bool vec, double3 *out)
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
	const double lse =
		(double)(vec ? row_lse_v(row, K / MGC_VEC(T), lane, &am)
			     : row_lse(row, K, lane, &am));
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
			   int64_t K, bool vec, const float *scale, T *dl)
{
	typedef typename mgc_t<T>::acc A;
	const int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	if (r >= rows)
		return;
	const int32_t lab = labels[r];
	const T *row = logits + r * K;
	T *d = dl + r * K;
	const int V = MGC_VEC(T);
	if (lab < 0) {
		if (vec) {
			A z[V];
#pragma unroll
			for (int k = 0; k < V; k++)
				z[k] = 0;
			for (int64_t v = lane; v < K / V; v += 32)
				mgc_stv(d, v, z);
			return;
		}
		for (int64_t k = lane; k < K; k += 32)
			d[k] = mgc_t<T>::from((A)0);
		return;
	}
	int64_t am;
	const A lse = vec ? row_lse_v(row, K / V, lane, &am)
			  : row_lse(row, K, lane, &am);
	const A s = scale ? (A)*scale : (A)1;
	const A bad = lab >= K ? (A)NAN : (A)0;
	if (vec) {
		/* a lane writes only the vectors it reads */
		for (int64_t v = lane; v < K / V; v += 32) {
			A e[V];
			mgc_ldv(row, v, e);
#pragma unroll
			for (int k = 0; k < V; k++) {
				const int64_t i = v * V + k;
				e[k] = (ex(e[k] - lse) -
					(i == lab ? (A)1 : (A)0)) *
					       s +
				       bad;
			}
			mgc_stv(d, v, e);
		}
		return;
	}
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
			 0, st>>>((const T *)logits, labels, rows, K,
				  rows_vec<T>(logits, K), rowv);
}

template <typename T>
void bwd(cudaStream_t st, const void *logits, const int32_t *labels,
	 int64_t rows, int64_t K, const float *scale, void *dl)
{
	xent_bwd_k<T><<<mgc_blocks(rows, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32,
			0, st>>>((const T *)logits, labels, rows, K,
				 rows_vec<T>(logits, K) && rows_vec<T>(dl, K),
				 scale, (T *)dl);
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
