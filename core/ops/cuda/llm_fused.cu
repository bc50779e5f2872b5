/*
 * llm_fused.cu - CUDA twins of the fused LLM ops (ops_llm.h, ABI 1.5;
 * checks in core/ops/llm_fused.c, references in cpu/llm_fused.c):
 *
 * add_rmsnorm: one block a row writes s = x + r (rounded to T, as
 * mg_op_add) and y = w * T(s * rstd) with the unfused kernel's thread
 * count and reduction order (cuda_rms.cuh: both walk a row one element
 * or one 16-byte vector at a time, the same way), so it matches add
 * then rmsnorm bitwise.
 *
 * rmsnorm_backward_add: one block per segment of rows computes each
 * row's dx = dres + T(norm gradient) and accumulates the weight
 * gradient's partial sums of its rows in shared memory (each thread owns
 * its columns: no atomics), so x and dy are read once for both; a second
 * kernel adds the segments' partials in order (deterministic). Widths
 * whose partials do not fit shared memory (over 12032) take the unfused
 * dw path.
 *
 * linear_xent: per chunk of rows the logits GEMM (mg_cuda_linear), one
 * block a row for the loss (online max / sum of exponentials, first
 * arg-max) and, with gradients, (softmax - onehot) * scale in place, then
 * mg_cuda_linear_backward for dx and dw; the rows' losses are summed in
 * a fixed order into the metrics. A low-rank term (LoRA on the head)
 * adds one cuBLAS GEMM with beta 1 to each chunk's logits and its own
 * mg_cuda_linear_backward. The scale is read on the device, so a
 * step stays capturable as a CUDA graph.
 */
#include <cublas_v2.h>
#include <math.h>

#include "ops/cuda/cuda_colsum.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_llm.h"
#include "ops/cuda/cuda_rms.cuh"

namespace
{
const int XENT_TH = 512;

#define FUSED_DISPATCH(op, dt, FN, ...)                                        \
	do {                                                                   \
		switch (dt) {                                                  \
		case MG_F32:                                                   \
			FN<float>(__VA_ARGS__);                                \
			break;                                                 \
		case MG_F16:                                                   \
			FN<mgc_f16>(__VA_ARGS__);                              \
			break;                                                 \
		case MG_BF16:                                                  \
			FN<mgc_bf16>(__VA_ARGS__);                             \
			break;                                                 \
		default:                                                       \
			return mgc_bad_dtype(op, dt);                          \
		}                                                              \
	} while (0)

/* v rounded to T and back (identity for float). */
template <typename T> __device__ __forceinline__ float rnd(float v)
{
	return mgc_t<T>::load(mgc_t<T>::from(v));
}

static int64_t rows_of(const struct mg_tensor *t)
{
	const int64_t D = t->shape[t->ndim - 1];
	return D ? mg_tensor_numel(t) / D : 0;
}

/* ---- add + rmsnorm ------------------------------------------------ */

template <typename T, typename W>
__global__ void add_rms_k(const T *x, const T *r, const W *w, float eps, T *s,
			  T *y, float *rstd, int64_t D)
{
	__shared__ float sh[32];
	const int64_t row = blockIdx.x;
	const T *xr = x + row * D, *rr = r + row * D;
	T *sr = s + row * D;
	float ss = 0;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
		const float v = rnd<T>(mgc_ld(xr, d) + mgc_ld(rr, d));
		sr[d] = mgc_t<T>::from(v);
		ss += v * v;
	}
	ss = mgc_block_sum(ss, sh);
	const float rs = 1.0f / sqrtf(ss / (float)D + eps);
	if (rstd && threadIdx.x == 0)
		rstd[row] = rs;
	T *yr = y + row * D;
	/* each thread reads back only the elements it wrote */
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
		yr[d] = mgc_t<T>::from(mgc_ld(w, d) *
				       rnd<T>(mgc_ld(sr, d) * rs));
}

/* add_rms_k in 16-byte vectors of nv a row, summing in rms_fwd_vk's
 * order. s may be x or r: each vector is read before it is written, by
 * the same thread. */
template <typename T, typename W>
__global__ void add_rms_vk(const T *x, const T *r, const W *w, float eps, T *s,
			   T *y, float *rstd, int64_t nv)
{
	constexpr int V = MGC_VEC(T);
	__shared__ float sh[32];
	const int64_t row = blockIdx.x;
	const T *xr = x + row * nv * V, *rr = r + row * nv * V;
	T *sr = s + row * nv * V;
	float ss = 0;
	for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
		float a[V], b[V];
		mgc_ldv(xr, v, a);
		mgc_ldv(rr, v, b);
#pragma unroll
		for (int k = 0; k < V; k++) {
			a[k] = rnd<T>(a[k] + b[k]);
			ss += a[k] * a[k];
		}
		mgc_stv(sr, v, a);
	}
	rms_vec_scale(sr, w, y + row * nv * V, ss, eps, nv,
		      rstd ? rstd + row : NULL, sh);
}

template <typename T>
void add_rms(cudaStream_t st, const void *x, const void *r, const void *w,
	     bool wf32, float eps, void *s, void *y, float *rstd, int64_t R,
	     int64_t D)
{
	if (rms_vec_ok<T>(D, x, r, w, s, y)) {
		const int64_t nv = D / MGC_VEC(T);
		const int th = rms_vec_threads(nv);
		if (wf32)
			add_rms_vk<T, float><<<(unsigned)R, th, 0, st>>>(
				(const T *)x, (const T *)r, (const float *)w,
				eps, (T *)s, (T *)y, rstd, nv);
		else
			add_rms_vk<T, T><<<(unsigned)R, th, 0, st>>>(
				(const T *)x, (const T *)r, (const T *)w, eps,
				(T *)s, (T *)y, rstd, nv);
		return;
	}
	const int th = rms_row_threads(D);
	if (wf32)
		add_rms_k<T, float><<<(unsigned)R, th, 0, st>>>(
			(const T *)x, (const T *)r, (const float *)w, eps,
			(T *)s, (T *)y, rstd, D);
	else
		add_rms_k<T, T><<<(unsigned)R, th, 0, st>>>(
			(const T *)x, (const T *)r, (const T *)w, eps, (T *)s,
			(T *)y, rstd, D);
}

/* ---- rmsnorm backward + residual ---------------------------------- */

/* Rows per block: at least 4, doubled until about 2048 blocks remain
 * (enough to fill an H100 or H200 several times over while the
 * partials stay S x D floats); a function of R alone, so the sums'
 * order is too. */
static int64_t seg_rows(int64_t R)
{
	int64_t seg = 4;
	while ((R + seg - 1) / seg > 2048)
		seg *= 2;
	return seg;
}

/* Block blockIdx.x's rows [r0, *r1) of R, seg a block, and (with
 * partials) its D shared-memory sums zeroed; either walk starts so. */
__device__ __forceinline__ int64_t seg_begin(float *acc, bool part, int64_t D,
					     int64_t R, int64_t seg,
					     int64_t *r1)
{
	const int64_t r0 = (int64_t)blockIdx.x * seg;
	*r1 = r0 + seg < R ? r0 + seg : R;
	if (part)
		for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
			acc[d] = 0;
	return r0;
}

/* Rows [blockIdx.x seg, +seg): dx = dres + T(rs w dy - x c); with part,
 * part[blockIdx.x, d] = sum over the rows of dy x rs (shared memory
 * acc[D], column d owned by thread d % blockDim.x). */
template <typename T, typename W>
__global__ void rms_bwd_add_k(const T *x, const W *w, const float *rstd,
			      const T *dy, const T *dres, T *dx, float *part,
			      int64_t R, int64_t D, int64_t seg)
{
	extern __shared__ float acc[];
	__shared__ float sh[32];
	int64_t r1;
	const int64_t r0 = seg_begin(acc, part != NULL, D, R, seg, &r1);
	for (int64_t row = r0; row < r1; row++) {
		const T *xr = x + row * D, *gr = dy + row * D,
			*er = dres + row * D;
		float s = 0;
		for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
			s += mgc_ld(w, d) * mgc_ld(gr, d) * mgc_ld(xr, d);
		s = mgc_block_sum(s, sh);
		const float rs = rstd[row], c = s * rs * rs * rs / (float)D;
		T *o = dx + row * D;
		for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
			const float xv = mgc_ld(xr, d), g = mgc_ld(gr, d);
			const float n = rnd<T>(rs * mgc_ld(w, d) * g - xv * c);
			if (part)
				acc[d] += g * (xv * rs);
			o[d] = mgc_t<T>::from(mgc_ld(er, d) + n);
		}
	}
	if (part)
		for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
			part[(int64_t)blockIdx.x * D + d] = acc[d];
}

/* rms_bwd_add_k in 16-byte vectors of nv a row, each row's sum in
 * rms_bwd_dx_vk's order. The partials live in shared memory as acc[k nv
 * + v] (element k of vector v), so a warp's updates hit consecutive
 * words; each column still adds its rows in order, as rms_bwd_add_k. */
template <typename T, typename W>
__global__ void rms_bwd_add_vk(const T *x, const W *w, const float *rstd,
			       const T *dy, const T *dres, T *dx, float *part,
			       int64_t R, int64_t nv, int64_t seg)
{
	constexpr int V = MGC_VEC(T);
	extern __shared__ float acc[];
	__shared__ float sh[32];
	const int64_t D = nv * V;
	int64_t r1;
	const int64_t r0 = seg_begin(acc, part != NULL, D, R, seg, &r1);
	for (int64_t row = r0; row < r1; row++) {
		const T *xr = x + row * D, *gr = dy + row * D,
			*er = dres + row * D;
		const float s = mgc_block_sum(rms_vec_dot(xr, gr, w, nv), sh);
		const float rs = rstd[row], c = s * rs * rs * rs / (float)D;
		T *o = dx + row * D;
		for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
			float a[V], g[V], wv[V], e[V];
			rms_vec_ld3(xr, gr, w, v, a, g, wv);
			mgc_ldv(er, v, e);
#pragma unroll
			for (int k = 0; k < V; k++) {
				const float n =
					rnd<T>(rs * wv[k] * g[k] - a[k] * c);
				if (part)
					acc[k * nv + v] += g[k] * (a[k] * rs);
				e[k] = e[k] + n;
			}
			mgc_stv(o, v, e);
		}
	}
	if (part)
		for (int64_t v = threadIdx.x; v < nv; v += blockDim.x)
#pragma unroll
			for (int k = 0; k < V; k++)
				part[(int64_t)blockIdx.x * D + v * V + k] =
					acc[k * nv + v];
}

template <typename T>
void rms_bwd_add(cudaStream_t st, const void *x, const void *w, bool wf32,
		 const float *rstd, const void *dy, const void *dres, void *dx,
		 void *dw, float *part, int64_t R, int64_t D)
{
	const int64_t seg = seg_rows(R), S = (R + seg - 1) / seg;
	const int th = rms_row_threads(D);
	const size_t shm = part ? (size_t)D * sizeof(float) : 0;
	if (rms_vec_ok<T>(D, x, w, dy, dres, dx)) {
		const int64_t nv = D / MGC_VEC(T);
		const int tv = rms_vec_threads(nv);
		if (wf32)
			rms_bwd_add_vk<T, float><<<(unsigned)S, tv, shm, st>>>(
				(const T *)x, (const float *)w, rstd,
				(const T *)dy, (const T *)dres, (T *)dx, part,
				R, nv, seg);
		else
			rms_bwd_add_vk<T, T><<<(unsigned)S, tv, shm, st>>>(
				(const T *)x, (const T *)w, rstd, (const T *)dy,
				(const T *)dres, (T *)dx, part, R, nv, seg);
	} else if (wf32)
		rms_bwd_add_k<T, float><<<(unsigned)S, th, shm, st>>>(
			(const T *)x, (const float *)w, rstd, (const T *)dy,
			(const T *)dres, (T *)dx, part, R, D, seg);
	else
		rms_bwd_add_k<T, T><<<(unsigned)S, th, shm, st>>>(
			(const T *)x, (const T *)w, rstd, (const T *)dy,
			(const T *)dres, (T *)dx, part, R, D, seg);
	if (!part)
		return;
	if (wf32)
		mgc_colsum_add(st, part, (float *)dw, S, D);
	else
		mgc_colsum_add(st, part, (T *)dw, S, D);
}

/* ---- linear + cross-entropy ---------------------------------------- */

/* (max, sum of exp(v - max), first arg-max) of a part of a row, merged
 * with another part's. */
struct lse3 {
	float m, s;
	int64_t a;
};

__device__ __forceinline__ void lse_merge(lse3 &p, float m, float s, int64_t a)
{
	if (m == -INFINITY)
		return;
	if (p.m == -INFINITY) {
		p.m = m, p.s = s, p.a = a;
		return;
	}
	const float nm = fmaxf(p.m, m);
	const bool take = m > p.m || (m == p.m && a < p.a);
	p.s = p.s * expf(p.m - nm) + s * expf(m - nm);
	p.m = nm;
	if (take)
		p.a = a;
}

/* Block-wide merge, valid in every thread (fixed order). */
__device__ lse3 lse_block(lse3 p)
{
	__shared__ float shm[32], shs[32];
	__shared__ int64_t sha[32];
	for (int o = 16; o > 0; o >>= 1) {
		const float om = __shfl_xor_sync(0xffffffffu, p.m, o),
			    os = __shfl_xor_sync(0xffffffffu, p.s, o);
		const int64_t oa = __shfl_xor_sync(0xffffffffu, p.a, o);
		lse_merge(p, om, os, oa);
	}
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31,
		  nw = blockDim.x >> 5;
	__syncthreads();
	if (lane == 0) {
		shm[warp] = p.m;
		shs[warp] = p.s;
		sha[warp] = p.a;
	}
	__syncthreads();
	lse3 q = {-INFINITY, 0, 0};
	if (lane < nw) {
		q.m = shm[lane];
		q.s = shs[lane];
		q.a = sha[lane];
	}
	for (int o = 16; o > 0; o >>= 1) {
		const float om = __shfl_xor_sync(0xffffffffu, q.m, o),
			    os = __shfl_xor_sync(0xffffffffu, q.s, o);
		const int64_t oa = __shfl_xor_sync(0xffffffffu, q.a, o);
		lse_merge(q, om, os, oa);
	}
	return q;
}

/* One row of logits a block: rowv[r] = (loss, correct, counted); with
 * grad the row becomes (softmax - onehot) * scale (zero when ignored,
 * NaN for a label >= V, whose loss is NaN too). */
template <typename T>
__global__ void lxent_rows_k(T *logits, const int32_t *labels, int64_t V,
			     bool grad, const float *scale, double3 *rowv)
{
	const int64_t r = blockIdx.x;
	T *row = logits + r * V;
	const int32_t lab = labels[r];
	if (lab < 0) {
		if (threadIdx.x == 0)
			rowv[r] = make_double3(0, 0, 0);
		if (grad)
			for (int64_t k = threadIdx.x; k < V; k += blockDim.x)
				row[k] = mgc_t<T>::from(0.0f);
		return;
	}
	lse3 p = {-INFINITY, 0, V};
	for (int64_t k = threadIdx.x; k < V; k += blockDim.x) {
		const float v = mgc_ld(row, k);
		if (v > p.m) {
			p.s = p.m == -INFINITY ? 1 : p.s * expf(p.m - v) + 1;
			p.m = v;
			p.a = k;
		} else {
			p.s += expf(v - p.m);
		}
	}
	p = lse_block(p);
	const float lse = p.m + logf(p.s);
	if (threadIdx.x == 0)
		rowv[r] =
			lab >= V
				? make_double3(NAN, 0, 1)
				: make_double3((double)lse -
						       (double)mgc_ld(row, lab),
					       p.a == lab ? 1 : 0, 1);
	if (!grad)
		return;
	/* every thread has read the label's logit above before any writes */
	__syncthreads();
	const float s = scale ? *scale : 1.0f;
	const float bad = lab >= V ? NAN : 0.0f;
	for (int64_t k = threadIdx.x; k < V; k += blockDim.x) {
		const float q = expf(mgc_ld(row, k) - lse);
		row[k] = mgc_t<T>::from((q - (k == lab ? 1.0f : 0.0f)) * s +
					bad);
	}
}

template <typename T>
void lxent_rows(cudaStream_t st, void *logits, const int32_t *labels, int64_t n,
		int64_t V, bool grad, const float *scale, double3 *rowv)
{
	lxent_rows_k<T><<<(unsigned)n, XENT_TH, 0, st>>>((T *)logits, labels, V,
							 grad, scale, rowv);
}

template <typename M>
__global__ void lxent_sum_k(const double3 *rowv, int64_t rows, M *metrics)
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

/* work[:n] += x2 rows [c0, c0 + n) times w2^T: column-major, work^T
 * [V, n] += w2 ([r, V] to cuBLAS, transposed) x2c^T [r, n]; F32 compute
 * (TF32 for F32 data when the backend allows it, as linear.cu). */
int lowrank_logits(struct mg_ctx *ctx, const struct mg_lowrank *lr, int64_t c0,
		   int64_t n, struct mg_tensor *lc)
{
	const int64_t r = lr->x2->shape[1], V = lc->shape[1];
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return -1;
	cudaDataType_t dt;
	cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
	switch (lc->dtype) {
	case MG_F32:
		dt = CUDA_R_32F;
		if (st->opt[MG_CUDA_OPT_TF32])
			ct = CUBLAS_COMPUTE_32F_FAST_TF32;
		break;
	case MG_F16:
		dt = CUDA_R_16F;
		break;
	case MG_BF16:
		dt = CUDA_R_16BF;
		break;
	default:
		return mgc_bad_dtype("linear_lora_xent", lc->dtype);
	}
	const float one = 1;
	const char *x2 = (const char *)lr->x2->data +
			 (size_t)(c0 * r) * mg_dtype_size(lc->dtype);
	cublasStatus_t s = cublasGemmEx(
		(cublasHandle_t)ctx->dev->cublas, CUBLAS_OP_T, CUBLAS_OP_N,
		(int)V, (int)n, (int)r, &one, lr->w2->data, dt, (int)r, x2, dt,
		(int)r, &one, lc->data, dt, (int)V, ct, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS)
		return mg_error("linear_lora_xent: cublasGemmEx (%lld x %lld x "
				"%lld) failed: %s",
				(long long)V, (long long)n, (long long)r,
				cublasGetStatusString(s));
	return 0;
}

/* Rows [r0, r0 + n) of a [R, D] tensor as a [n, D] one. */
struct mg_tensor rows_at(const struct mg_tensor *t, int64_t r0, int64_t n,
			 int64_t D)
{
	int64_t shape[2] = {n, D};
	return mg_tensor_make((char *)t->data + (size_t)(r0 * D) *
							mg_dtype_size(t->dtype),
			      t->dtype, MG_DEV_CUDA, 2, shape);
}
} // namespace

extern "C" int mg_cuda_add_rmsnorm(struct mg_ctx *ctx,
				   const struct mg_tensor *x,
				   const struct mg_tensor *r,
				   const struct mg_tensor *w, double eps,
				   struct mg_tensor *s, struct mg_tensor *y,
				   struct mg_tensor *rstd)
{
	static const char op[] = "add_rmsnorm";
	const int64_t R = rows_of(x), D = x->shape[x->ndim - 1];
	if (R == 0 || D == 0)
		return 0;
	FUSED_DISPATCH(op, x->dtype, add_rms, mgc_stream(ctx), x->data, r->data,
		       w->data, w->dtype == MG_F32, (float)eps, s->data,
		       y->data, rstd ? (float *)rstd->data : NULL, R, D);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_rmsnorm_backward_add(
	struct mg_ctx *ctx, const struct mg_tensor *x,
	const struct mg_tensor *w, const struct mg_tensor *rstd,
	const struct mg_tensor *dy, const struct mg_tensor *dres,
	struct mg_tensor *dx, struct mg_tensor *dw)
{
	static const char op[] = "rmsnorm_backward_add";
	const int64_t R = rows_of(x), D = x->shape[x->ndim - 1];
	if (R == 0 || D == 0)
		return 0;
	/* Partials of the weight gradient in shared memory up to 12032
	 * columns (47 KiB beside the block sum's 128 B: within the 48 KiB
	 * a block gets without opting in); wider rows take the unfused dw
	 * kernels, first (dx may alias dres, never dy or x). */
	const bool shared_dw = dw && D * (int64_t)sizeof(float) <= 47 * 1024;
	if (dw && !shared_dw &&
	    mg_cuda_rmsnorm_backward(ctx, x, w, rstd, dy, NULL, dw))
		return -1;
	float *part = NULL;
	if (shared_dw) {
		const int64_t S = (R + seg_rows(R) - 1) / seg_rows(R);
		part = (float *)mgc_scratch(ctx,
					    (size_t)(S * D) * sizeof(float));
		if (!part)
			return -1;
	}
	FUSED_DISPATCH(op, x->dtype, rms_bwd_add, mgc_stream(ctx), x->data,
		       w->data, w->dtype == MG_F32, (const float *)rstd->data,
		       dy->data, dres->data, dx->data,
		       shared_dw ? dw->data : NULL, part, R, D);
	return mgc_check_launch(op);
}

extern "C" int
mg_cuda_linear_xent(struct mg_ctx *ctx, const struct mg_tensor *x,
		    const struct mg_tensor *w, const struct mg_lowrank *lr,
		    const struct mg_tensor *labels,
		    const struct mg_tensor *scale, struct mg_tensor *work,
		    struct mg_tensor *metrics, struct mg_tensor *dx,
		    struct mg_tensor *dw)
{
	static const char op[] = "linear_xent";
	const int64_t V = w->shape[0], D = w->shape[1], C = work->shape[0];
	const int64_t R = D ? mg_tensor_numel(x) / D : 0;
	if (metrics && metrics->dtype != MG_F32 && metrics->dtype != MG_F64)
		return mgc_bad_dtype(op, metrics->dtype);
	double3 *rowv = (double3 *)mgc_scratch(ctx, (size_t)(R > 0 ? R : 1) *
							    sizeof(double3));
	if (!rowv)
		return -1;
	cudaStream_t st = mgc_stream(ctx);
	const bool grad2 = lr && (lr->dx2 || lr->dw2);
	const bool grad = dx || dw || grad2;
	const int32_t *lab = (const int32_t *)labels->data;
	const float *sc = scale ? (const float *)scale->data : NULL;
	for (int64_t c0 = 0; c0 < R; c0 += C) {
		const int64_t n = R - c0 < C ? R - c0 : C;
		struct mg_tensor xc = rows_at(x, c0, n, D),
				 lc = rows_at(work, 0, n, V), dxc;
		if (mg_cuda_linear(ctx, &xc, w, NULL, &lc) ||
		    (lr && lowrank_logits(ctx, lr, c0, n, &lc)))
			return -1;
		FUSED_DISPATCH(op, x->dtype, lxent_rows, st, lc.data, lab + c0,
			       n, V, grad, sc, rowv + c0);
		if (mgc_check_launch(op))
			return -1;
		if (dx)
			dxc = rows_at(dx, c0, n, D);
		if ((dx || dw) &&
		    mg_cuda_linear_backward(ctx, &xc, w, &lc, dx ? &dxc : NULL,
					    false, dw, NULL))
			return -1;
		if (grad2) {
			const int64_t r = lr->x2->shape[1];
			struct mg_tensor x2c = rows_at(lr->x2, c0, n, r), d2c;
			if (lr->dx2)
				d2c = rows_at(lr->dx2, c0, n, r);
			if (mg_cuda_linear_backward(ctx, &x2c, lr->w2, &lc,
						    lr->dx2 ? &d2c : NULL,
						    false, lr->dw2, NULL))
				return -1;
		}
	}
	if (metrics && metrics->dtype == MG_F64)
		lxent_sum_k<double>
			<<<1, 1024, 0, st>>>(rowv, R, (double *)metrics->data);
	else if (metrics)
		lxent_sum_k<float>
			<<<1, 1024, 0, st>>>(rowv, R, (float *)metrics->data);
	return mgc_check_launch(op);
}
