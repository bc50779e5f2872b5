/*
 * pref.cu - preference-pair ops (DPO) on CUDA, twins of cpu/pref.c. One
 * warp per token computes log softmax at its label into a per-token
 * scratch array; one block per row then sums the row's two documents in
 * a fixed order. The backward is the token loss's (softmax - onehot)
 * times minus the document's dlogp, read from the device; the DPO loss
 * reads every per-step value from device memory too, so a DPO step can
 * be captured as a CUDA graph. Labels >= K (rejected by the CPU op) turn
 * the row's sums and gradient into NaN.
 */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"

namespace
{
const int ROWS_PER_BLOCK = 8;
const int TH = 256;

/* The dtype of logp / dlogp for logits of T: F64 for F64, else F32. */
template <typename T> struct vt {
	typedef float type;
};
template <> struct vt<double> {
	typedef double type;
};

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

/* Log-sum-exp of a row, valid in every lane of the warp. */
template <typename T>
__device__ typename mgc_t<T>::acc row_lse(const T *row, int64_t K, int lane)
{
	typedef typename mgc_t<T>::acc A;
	A mx = -INFINITY;
	for (int64_t k = lane; k < K; k += 32) {
		const A v = mgc_ld(row, k);
		mx = v > mx ? v : mx;
	}
	for (int o = 16; o > 0; o >>= 1) {
		const A ov = __shfl_xor_sync(0xffffffffu, mx, o);
		mx = ov > mx ? ov : mx;
	}
	A s = 0;
	for (int64_t k = lane; k < K; k += 32)
		s += ex(mgc_ld(row, k) - mx);
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	return mx + lg(s);
}

__device__ __forceinline__ int doc_of(const int32_t *pos, int64_t r, int64_t T)
{
	return (r % T) - pos[r] != 0;
}

/* lp[r] = log softmax(logits[r])[label] (0 for ignored labels). */
template <typename T>
__global__ void tok_lp_k(const T *logits, const int32_t *labels, int64_t R,
			 int64_t K, double *lp)
{
	const int lane = threadIdx.x & 31;
	const int64_t stride = (int64_t)gridDim.x * (blockDim.x >> 5);
	for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	     r < R; r += stride) {
		const int32_t y = labels[r];
		if (y < 0) {
			if (lane == 0)
				lp[r] = 0;
			continue;
		}
		const T *row = logits + r * K;
		const double lse = (double)row_lse(row, K, lane);
		if (lane == 0)
			lp[r] = y >= K ? NAN : (double)mgc_ld(row, y) - lse;
	}
}

/* Per row n: the sums over its first document and over the rest. */
template <typename V>
__global__ void row_sum_k(const double *lp, const int32_t *labels,
			  const int32_t *pos, int64_t N, int64_t T, V *out)
{
	__shared__ double sh[32];
	for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
		double a = 0, b = 0;
		for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
			const int64_t r = n * T + t;
			if (labels[r] < 0)
				continue;
			if (doc_of(pos, r, T))
				b += lp[r];
			else
				a += lp[r];
		}
		a = mgc_block_sum(a, sh);
		b = mgc_block_sum(b, sh);
		if (threadIdx.x == 0) {
			out[2 * n] = (V)a;
			out[2 * n + 1] = (V)b;
		}
	}
}

template <typename T>
__global__ void pair_bwd_k(const T *logits, const int32_t *labels,
			   const int32_t *pos, int64_t R, int64_t T_, int64_t K,
			   const typename vt<T>::type *dlogp, T *dl)
{
	typedef typename mgc_t<T>::acc A;
	const int lane = threadIdx.x & 31;
	const int64_t stride = (int64_t)gridDim.x * (blockDim.x >> 5);
	for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	     r < R; r += stride) {
		const int32_t y = labels[r];
		const T *row = logits + r * K;
		T *d = dl + r * K;
		if (y < 0) {
			for (int64_t k = lane; k < K; k += 32)
				d[k] = mgc_t<T>::from((A)0);
			continue;
		}
		const A lse = row_lse(row, K, lane);
		const A s = -(A)dlogp[2 * (r / T_) + doc_of(pos, r, T_)];
		const A bad = y >= K ? (A)NAN : (A)0;
		/* every lane has read its part of the row before any lane
		 * writes (dlogits may alias logits) */
		__syncwarp();
		for (int64_t k = lane; k < K; k += 32) {
			const A p = ex(mgc_ld(row, k) - lse);
			d[k] = mgc_t<T>::from((p - (k == y ? (A)1 : (A)0)) * s +
					      bad);
		}
	}
}

/* -log sigmoid(x) and sigmoid(x), stable for either sign. */
__device__ __forceinline__ double nls(double x)
{
	return x >= 0 ? log1p(exp(-x)) : -x + log1p(exp(x));
}
__device__ __forceinline__ double sigm(double x)
{
	return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

/* One block: the loss and metric sums over N pairs, fixed order. */
template <typename V, typename M>
__global__ void dpo_k(const V *lp, const V *ref, int64_t N, double beta,
		      double eps, M *metrics)
{
	__shared__ double sh[32];
	double m[MG_DPO_NSUMS];
	for (int i = 0; i < MG_DPO_NSUMS; i++)
		m[i] = 0;
	for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
		const double pc = lp[2 * n], pr = lp[2 * n + 1];
		const double rc = beta * (pc - (double)ref[2 * n]),
			     rr = beta * (pr - (double)ref[2 * n + 1]);
		const double z = rc - rr;
		m[MG_METRIC_LOSS_SUM] += (1 - eps) * nls(z) + eps * nls(-z);
		m[MG_METRIC_CORRECT] += rc > rr ? 1 : 0;
		m[MG_METRIC_COUNT] += 1;
		m[MG_DPO_REWARD_CHOSEN] += rc;
		m[MG_DPO_REWARD_REJECTED] += rr;
		m[MG_DPO_MARGIN] += z;
		m[MG_DPO_LOGP_CHOSEN] += pc;
		m[MG_DPO_LOGP_REJECTED] += pr;
	}
	for (int i = 0; i < MG_DPO_NSUMS; i++) {
		const double s = mgc_block_sum(m[i], sh);
		if (threadIdx.x == 0)
			metrics[i] = (M)s;
	}
}

template <typename V>
__global__ void dpo_bwd_k(const V *lp, const V *ref, int64_t N, double beta,
			  double eps, const float *scale, V *dlp)
{
	const double s = scale ? (double)*scale : 1.0;
	for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < N;
	     n += (int64_t)gridDim.x * blockDim.x) {
		const double z =
			beta * ((double)lp[2 * n] - (double)ref[2 * n]) -
			beta * ((double)lp[2 * n + 1] - (double)ref[2 * n + 1]);
		const double g = -(1 - eps) * sigm(-z) + eps * sigm(z);
		dlp[2 * n] = (V)(g * beta * s);
		dlp[2 * n + 1] = (V)(-g * beta * s);
	}
}

template <typename T>
void fwd(cudaStream_t st, const void *logits, const int32_t *labels,
	 const int32_t *pos, int64_t N, int64_t T_, int64_t K, double *lp,
	 void *out)
{
	const int64_t R = N * T_;
	if (R > 0)
		tok_lp_k<T>
			<<<mgc_blocks(R, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32,
			   0, st>>>((const T *)logits, labels, R, K, lp);
	if (N > 0)
		row_sum_k<typename vt<T>::type>
			<<<mgc_blocks(N, 1), TH, 0, st>>>(
				lp, labels, pos, N, T_,
				(typename vt<T>::type *)out);
}

template <typename T>
void bwd(cudaStream_t st, const void *logits, const int32_t *labels,
	 const int32_t *pos, int64_t R, int64_t T_, int64_t K,
	 const void *dlogp, void *dl)
{
	pair_bwd_k<T>
		<<<mgc_blocks(R, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, st>>>(
			(const T *)logits, labels, pos, R, T_, K,
			(const typename vt<T>::type *)dlogp, (T *)dl);
}
} // namespace

extern "C" int mg_cuda_pair_logprob(struct mg_ctx *ctx,
				    const struct mg_tensor *logits,
				    const struct mg_tensor *labels,
				    const struct mg_tensor *positions,
				    struct mg_tensor *logp)
{
	static const char op[] = "pair_logprob";
	const int64_t N = labels->shape[0], T = labels->shape[1];
	const int64_t K = logits->shape[logits->ndim - 1];
	double *lp = (double *)mgc_scratch(
		ctx, (size_t)(N * T > 0 ? N * T : 1) * sizeof(double));
	if (!lp)
		return -1;
	MGC_DISPATCH(op, logits->dtype, fwd, mgc_stream(ctx), logits->data,
		     (const int32_t *)labels->data,
		     (const int32_t *)positions->data, N, T, K, lp, logp->data);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_pair_logprob_backward(struct mg_ctx *ctx,
					     const struct mg_tensor *logits,
					     const struct mg_tensor *labels,
					     const struct mg_tensor *positions,
					     const struct mg_tensor *dlogp,
					     struct mg_tensor *dlogits)
{
	static const char op[] = "pair_logprob_backward";
	const int64_t T = labels->shape[1], R = labels->shape[0] * T;
	const int64_t K = logits->shape[logits->ndim - 1];
	if (R == 0)
		return 0;
	MGC_DISPATCH(op, logits->dtype, bwd, mgc_stream(ctx), logits->data,
		     (const int32_t *)labels->data,
		     (const int32_t *)positions->data, R, T, K, dlogp->data,
		     dlogits->data);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_dpo_loss(struct mg_ctx *ctx,
				const struct mg_tensor *logp,
				const struct mg_tensor *ref, double beta,
				double eps, struct mg_tensor *metrics)
{
	static const char op[] = "dpo_loss";
	const int64_t N = logp->shape[0];
	cudaStream_t st = mgc_stream(ctx);
	const bool v64 = logp->dtype == MG_F64, m64 = metrics->dtype == MG_F64;
	if (metrics->dtype != MG_F32 && !m64)
		return mgc_bad_dtype(op, metrics->dtype);
	if (v64 && m64)
		dpo_k<double, double><<<1, TH, 0, st>>>(
			(const double *)logp->data, (const double *)ref->data,
			N, beta, eps, (double *)metrics->data);
	else if (v64)
		dpo_k<double, float><<<1, TH, 0, st>>>(
			(const double *)logp->data, (const double *)ref->data,
			N, beta, eps, (float *)metrics->data);
	else if (m64)
		dpo_k<float, double><<<1, TH, 0, st>>>(
			(const float *)logp->data, (const float *)ref->data, N,
			beta, eps, (double *)metrics->data);
	else
		dpo_k<float, float><<<1, TH, 0, st>>>(
			(const float *)logp->data, (const float *)ref->data, N,
			beta, eps, (float *)metrics->data);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_dpo_loss_backward(struct mg_ctx *ctx,
					 const struct mg_tensor *logp,
					 const struct mg_tensor *ref,
					 double beta, double eps,
					 const struct mg_tensor *scale,
					 struct mg_tensor *dlogp)
{
	static const char op[] = "dpo_loss_backward";
	const int64_t N = logp->shape[0];
	if (N == 0)
		return 0;
	cudaStream_t st = mgc_stream(ctx);
	const float *s = scale ? (const float *)scale->data : NULL;
	if (logp->dtype == MG_F64)
		dpo_bwd_k<double><<<mgc_blocks(N, TH), TH, 0, st>>>(
			(const double *)logp->data, (const double *)ref->data,
			N, beta, eps, s, (double *)dlogp->data);
	else
		dpo_bwd_k<float><<<mgc_blocks(N, TH), TH, 0, st>>>(
			(const float *)logp->data, (const float *)ref->data, N,
			beta, eps, s, (float *)dlogp->data);
	return mgc_check_launch(op);
}
