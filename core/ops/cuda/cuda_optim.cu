/*
 * cuda_optim.cu - optimizer kernels on the GPU. Every per-step value comes
 * from struct mg_optim_vals in device memory, so these launches can be
 * captured in a CUDA graph and replayed with new learning rates. The sum
 * of squares is a fixed-shape two-pass reduction (deterministic).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "ops/cuda/cuda_optim.h"

#define SUMSQ_BLOCKS 256
#define SUMSQ_THREADS 512

/* Per-device scratch for the reduction's partial sums. */
/* One-time scratch of the norm reduction, an accounted mg_buf (kept for
 * the process; allocated outside any graph capture by the first eager
 * step). */
static struct mg_buf partials_buf;
static float *partials;
static int partials_device = -1;

template <typename T> __device__ __forceinline__ float to_f(T x)
{
	return (float)x;
}
template <> __device__ __forceinline__ float to_f(__half x)
{
	return __half2float(x);
}
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 x)
{
	return __bfloat162float(x);
}

/* A value of G in the master type M: half types through float, others
 * directly (an F64 gradient must not pass through float). */
template <typename M, typename G> __device__ __forceinline__ M to_m(G x)
{
	return (M)x;
}
template <> __device__ __forceinline__ float to_m<float, __half>(__half x)
{
	return __half2float(x);
}
template <>
__device__ __forceinline__ float to_m<float, __nv_bfloat16>(__nv_bfloat16 x)
{
	return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __half from_f(float x)
{
	return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float x)
{
	return __float2bfloat16_rn(x);
}

static cudaStream_t stream_of(struct mg_ctx *ctx)
{
	return (cudaStream_t)ctx->dev->stream;
}

static int check_launch(const char *what)
{
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return mg_error("CUDA %s: %s", what, cudaGetErrorString(e));
	return 0;
}

/*
 * Per block: the sum of squares of its grid-strided share. When g is
 * 16-byte aligned (vec), a thread takes 16 bytes at a time (8 half-type
 * or 4 F32 values, squared and summed in F32, that sum added in double):
 * the norm of a 1B model's bf16 gradients read at memory speed instead of
 * 2 bytes a thread at a time; the tail after the vectors goes one by one.
 */
template <typename T>
__global__ void sumsq_partial(const T *g, int64_t n, bool vec, float *out)
{
	__shared__ float sh[SUMSQ_THREADS];
	double acc = 0; /* per thread: fixed strided order */
	const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x,
		      stride = (int64_t)gridDim.x * blockDim.x;
	const int V = 16 / sizeof(T) > 0 ? (int)(16 / sizeof(T)) : 1;
	const int64_t nv = vec && sizeof(T) <= 4 ? n / V : 0;
	if (nv) {
		const uint4 *gv = reinterpret_cast<const uint4 *>(g);
		for (int64_t i = tid; i < nv; i += stride) {
			const uint4 raw = gv[i];
			const T *e = reinterpret_cast<const T *>(&raw);
			float s = 0;
#pragma unroll
			for (int k = 0; k < V; k++) {
				const float f = to_f(e[k]);
				s = fmaf(f, f, s);
			}
			acc += s;
		}
	}
	for (int64_t i = nv * V + tid; i < n; i += stride) {
		float v = to_f(g[i]);
		acc += (double)v * v;
	}
	sh[threadIdx.x] = (float)acc;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = sh[0];
}

__global__ void sumsq_final(const float *part, int nb, float *sumsq)
{
	__shared__ float sh[SUMSQ_BLOCKS];
	sh[threadIdx.x] = threadIdx.x < nb ? part[threadIdx.x] : 0.f;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*sumsq += sh[0];
}

extern "C" int mg_cuda_optim_sumsq(struct mg_ctx *ctx,
				   struct mg_optim_vals *vals, enum mg_dtype dt,
				   const void *grad, int64_t n)
{
	if (!partials || partials_device != ctx->dev->ordinal) {
		/* another GPU's (a test's other context: not its stats) */
		if (partials)
			cudaFree(partials);
		if (mg_buf_alloc(ctx, &partials_buf,
				 SUMSQ_BLOCKS * sizeof(float), MG_MEM_OTHER))
			return mg_error_prefix("optimizer: gradient norm");
		partials = (float *)partials_buf.ptr;
		partials_device = ctx->dev->ordinal;
	}
	if (n <= 0)
		return 0;
	cudaStream_t st = stream_of(ctx);
	const bool vec = ((uintptr_t)grad & 15) == 0;
	switch (dt) {
	case MG_F32:
		sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, st>>>(
			(const float *)grad, n, vec, partials);
		break;
	case MG_F64:
		sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, st>>>(
			(const double *)grad, n, vec, partials);
		break;
	case MG_F16:
		sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, st>>>(
			(const __half *)grad, n, vec, partials);
		break;
	case MG_BF16:
		sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, st>>>(
			(const __nv_bfloat16 *)grad, n, vec, partials);
		break;
	default:
		return mg_error("optimizer: gradient dtype %s",
				mg_dtype_name(dt));
	}
	sumsq_final<<<1, SUMSQ_BLOCKS, 0, st>>>(partials, SUMSQ_BLOCKS,
						&vals->sumsq);
	return check_launch("gradient sum of squares");
}

__global__ void finalize_kernel(struct mg_optim_vals *v, float max_norm)
{
	float norm = sqrtf(v->sumsq) * fabsf(v->grad_mul);
	v->grad_norm = norm;
	v->skip = !isfinite(norm);
	if (!v->skip && max_norm > 0 && norm > max_norm)
		v->grad_mul *= max_norm / (norm + 1e-6f);
}

extern "C" int mg_cuda_optim_finalize(struct mg_ctx *ctx,
				      const struct mg_optim_hparams *h,
				      struct mg_optim_vals *vals)
{
	finalize_kernel<<<1, 1, 0, stream_of(ctx)>>>(vals,
						     (float)h->max_grad_norm);
	return check_launch("optimizer finalize");
}

/* Hyper-parameters in double, cast to the master type in the kernel, so
 * F64 training keeps F64 arithmetic throughout. */
struct hp {
	double momentum, damp, wd, beta1, beta2, eps;
	int nesterov, has_momentum, adamw;
};

/* One AdamW element: the same arithmetic in the scalar and the vector
 * kernels, so both give the same bits. */
template <typename M>
__device__ __forceinline__ M adamw1(const struct hp &h, M lr, M step_size,
				    M rbc2, M gi, M pi, M *s0, M *s1)
{
	M mi = (M)h.beta1 * *s0 + (M)(1 - h.beta1) * gi;
	M qi = (M)h.beta2 * *s1 + (M)(1 - h.beta2) * gi * gi;
	*s0 = mi;
	*s1 = qi;
	return pi * ((M)1 - lr * (M)h.wd) -
	       step_size * mi / (sqrt(qi) * rbc2 + (M)h.eps);
}

/* Four elements of X moved by one load or store. */
template <typename X> struct alignas(4 * sizeof(X)) vec4 {
	X e[4];
};

/*
 * AdamW over F32 masters four elements a thread (16-byte loads of the
 * master and both moments, 4-element loads of the gradient and stores of
 * the compute copy): the update of a 1B model moves ~35 GB a step and is
 * memory-bound. Elements [0, 4 * n4); the caller runs the rest through
 * update_kernel.
 */
template <typename G, typename L>
__global__ void adamw_vec_kernel(struct hp h, const struct mg_optim_vals *v,
				 float *p, const G *g, L *lp, float *s0,
				 float *s1, int64_t n4)
{
	if (v->skip)
		return;
	const float mul = v->grad_mul, lr = v->lr;
	const float step_size = lr / (float)v->bias1;
	const float rbc2 = 1.0f / sqrtf((float)v->bias2);
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
	     i += (int64_t)gridDim.x * blockDim.x) {
		vec4<float> pv = reinterpret_cast<vec4<float> *>(p)[i];
		vec4<float> mv = reinterpret_cast<vec4<float> *>(s0)[i];
		vec4<float> qv = reinterpret_cast<vec4<float> *>(s1)[i];
		const vec4<G> gv = reinterpret_cast<const vec4<G> *>(g)[i];
		vec4<L> lv;
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const float gi = to_m<float, G>(gv.e[k]) * mul;
			pv.e[k] = adamw1<float>(h, lr, step_size, rbc2, gi,
						pv.e[k], &mv.e[k], &qv.e[k]);
			lv.e[k] = from_f<L>(pv.e[k]);
		}
		reinterpret_cast<vec4<float> *>(p)[i] = pv;
		reinterpret_cast<vec4<float> *>(s0)[i] = mv;
		reinterpret_cast<vec4<float> *>(s1)[i] = qv;
		if (lp)
			reinterpret_cast<vec4<L> *>(lp)[i] = lv;
	}
}

/* M: master/state type; G: gradient type; L: low-precision copy type.
 * Elements [first, n). */
template <typename M, typename G, typename L>
__global__ void update_kernel(struct hp h, const struct mg_optim_vals *v, M *p,
			      const G *g, L *lp, M *s0, M *s1, int64_t first,
			      int64_t n)
{
	if (v->skip)
		return;
	/* lr and grad_mul are F32 device values: exact for the schedule's
	 * needs; the update itself runs in M. */
	const M mul = (M)v->grad_mul, lr = (M)v->lr;
	const M step_size = lr / (M)v->bias1;
	const M rbc2 = (M)1 / sqrt((M)v->bias2);
	for (int64_t i = first + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < n; i += (int64_t)gridDim.x * blockDim.x) {
		M gi = to_m<M, G>(g[i]) * mul;
		M pi = p[i];
		if (h.adamw) {
			pi = adamw1<M>(h, lr, step_size, rbc2, gi, pi, &s0[i],
				       &s1[i]);
		} else {
			M d = gi + (M)h.wd * pi;
			if (h.has_momentum) {
				M b = v->first ? d
					       : (M)h.momentum * s0[i] +
							 (M)h.damp * d;
				s0[i] = b;
				d = h.nesterov ? d + (M)h.momentum * b : b;
			}
			pi -= lr * d;
		}
		p[i] = pi;
		if (lp)
			lp[i] = from_f<L>((float)pi);
	}
}

static bool aligned(const void *p, size_t a)
{
	return ((uintptr_t)p % a) == 0;
}

/* The vector kernel where it applies (AdamW, F32 masters, every buffer
 * aligned to its 4-element vector), the scalar one for the rest. */
template <typename M, typename G, typename L>
static void launch(cudaStream_t st, struct hp h, const struct mg_optim_vals *v,
		   const struct mg_optim_slice *s)
{
	const int threads = 256;
	int64_t first = 0;
	if (sizeof(M) == 4 && h.adamw && aligned(s->param, 16) &&
	    aligned(s->state[0], 16) && aligned(s->state[1], 16) &&
	    aligned(s->grad, 4 * sizeof(G)) &&
	    (!s->param_lp || aligned(s->param_lp, 4 * sizeof(L)))) {
		const int64_t n4 = s->n / 4;
		int64_t blocks = (n4 + threads - 1) / threads;
		if (blocks > 8192)
			blocks = 8192;
		if (n4)
			adamw_vec_kernel<G, L>
				<<<(unsigned)blocks, threads, 0, st>>>(
					h, v, (float *)s->param,
					(const G *)s->grad, (L *)s->param_lp,
					(float *)s->state[0],
					(float *)s->state[1], n4);
		first = n4 * 4;
	}
	if (first == s->n)
		return;
	int64_t blocks = (s->n - first + threads - 1) / threads;
	if (blocks > 4096)
		blocks = 4096;
	update_kernel<M, G, L><<<(unsigned)blocks, threads, 0, st>>>(
		h, v, (M *)s->param, (const G *)s->grad, (L *)s->param_lp,
		(M *)s->state[0], (M *)s->state[1], first, s->n);
}

extern "C" int mg_cuda_optim_update(struct mg_ctx *ctx,
				    const struct mg_optim_hparams *h,
				    const struct mg_optim_vals *vals,
				    const struct mg_optim_slice *s)
{
	if (s->n <= 0)
		return 0;
	struct hp k;
	k.momentum = h->momentum;
	k.damp = 1 - h->dampening;
	k.wd = s->decay ? h->weight_decay : 0.0;
	k.beta1 = h->beta1;
	k.beta2 = h->beta2;
	k.eps = h->eps;
	k.nesterov = h->nesterov;
	k.has_momentum = h->momentum != 0.0;
	k.adamw = h->kind == MG_OPTIM_ADAMW;
	cudaStream_t st = stream_of(ctx);
	bool lp = s->param_lp != NULL;
	if (s->dtype == MG_F64 && s->grad_dtype == MG_F64 && !lp)
		launch<double, double, __half>(st, k, vals, s);
	else if (s->dtype == MG_F32 && s->grad_dtype == MG_F32 && !lp)
		launch<float, float, __half>(st, k, vals, s);
	else if (s->dtype == MG_F32 && s->grad_dtype == MG_F16 &&
		 (!lp || s->lp_dtype == MG_F16))
		launch<float, __half, __half>(st, k, vals, s);
	else if (s->dtype == MG_F32 && s->grad_dtype == MG_BF16 &&
		 (!lp || s->lp_dtype == MG_BF16))
		launch<float, __nv_bfloat16, __nv_bfloat16>(st, k, vals, s);
	else if (s->dtype == MG_F32 && s->grad_dtype == MG_F32 && lp &&
		 s->lp_dtype == MG_F16)
		launch<float, float, __half>(st, k, vals, s);
	else if (s->dtype == MG_F32 && s->grad_dtype == MG_F32 && lp &&
		 s->lp_dtype == MG_BF16)
		launch<float, float, __nv_bfloat16>(st, k, vals, s);
	else
		return mg_error("optimizer: no kernel for master %s, gradient "
				"%s, copy %s",
				mg_dtype_name(s->dtype),
				mg_dtype_name(s->grad_dtype),
				lp ? mg_dtype_name(s->lp_dtype) : "none");
	return check_launch("optimizer update");
}

/* Element conversions through float for 16-bit types (F64 -> F16 rounds
 * via F32, as the CPU twin does). */
template <typename S> __device__ __forceinline__ double cvt_in(S x)
{
	return (double)x;
}
template <> __device__ __forceinline__ double cvt_in(__half x)
{
	return __half2float(x);
}
template <> __device__ __forceinline__ double cvt_in(__nv_bfloat16 x)
{
	return __bfloat162float(x);
}
template <typename D> __device__ __forceinline__ D cvt_out(double x)
{
	return (D)x;
}
template <> __device__ __forceinline__ __half cvt_out(double x)
{
	return __float2half_rn((float)x);
}
template <> __device__ __forceinline__ __nv_bfloat16 cvt_out(double x)
{
	return __float2bfloat16_rn((float)x);
}

template <typename D, typename S>
__global__ void convert_kernel(D *d, const S *s, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		d[i] = cvt_out<D>(cvt_in(s[i]));
}

/* Eight elements a thread, moved as 16-byte vectors (one or two per
 * side for 2- and 4-byte types): the scalar kernel's 2-byte loads keep
 * too few bytes in flight to reach the memory bandwidth, and FSDP
 * converts every gradient and parameter shard each step. */
template <typename D, typename S>
__global__ void convert8_kernel(D *d, const S *s, int64_t n8)
{
	static_assert(sizeof(S) <= 4 && sizeof(D) <= 4, "2- or 4-byte types");
	constexpr int SV = (int)(8 * sizeof(S) / 16),
		      DV = (int)(8 * sizeof(D) / 16);
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
	     i += (int64_t)gridDim.x * blockDim.x) {
		uint4 in[SV], out[DV];
#pragma unroll
		for (int k = 0; k < SV; k++)
			in[k] = reinterpret_cast<const uint4 *>(s)[i * SV + k];
		const S *e = reinterpret_cast<const S *>(in);
		D *o = reinterpret_cast<D *>(out);
#pragma unroll
		for (int k = 0; k < 8; k++)
			o[k] = cvt_out<D>(cvt_in(e[k]));
#pragma unroll
		for (int k = 0; k < DV; k++)
			reinterpret_cast<uint4 *>(d)[i * DV + k] = out[k];
	}
}

template <typename D, typename S>
static void convert_launch(cudaStream_t st, void *d, const void *s, int64_t n)
{
	int64_t done = 0;
	if constexpr (sizeof(S) <= 4 && sizeof(D) <= 4) {
		if ((((uintptr_t)d | (uintptr_t)s) & 15) == 0 && n >= 8) {
			const int64_t n8 = n / 8, blocks = (n8 + 255) / 256;
			convert8_kernel<D, S>
				<<<(unsigned)(blocks > 4096 ? 4096 : blocks),
				   256, 0, st>>>((D *)d, (const S *)s, n8);
			done = n8 * 8;
		}
	}
	if (done == n)
		return;
	/* the rest (the tail, or all of an unaligned or 8-byte pair) */
	const int64_t rest = n - done, blocks = (rest + 255) / 256;
	convert_kernel<D, S>
		<<<(unsigned)(blocks > 4096 ? 4096 : blocks), 256, 0, st>>>(
			(D *)d + done, (const S *)s + done, rest);
}

/* Instantiate for every source type of one destination type. */
template <typename D>
static int convert_to(cudaStream_t st, void *d, const void *s,
		      enum mg_dtype sdt, int64_t n)
{
	switch (sdt) {
	case MG_F32:
		convert_launch<D, float>(st, d, s, n);
		return 0;
	case MG_F64:
		convert_launch<D, double>(st, d, s, n);
		return 0;
	case MG_F16:
		convert_launch<D, __half>(st, d, s, n);
		return 0;
	case MG_BF16:
		convert_launch<D, __nv_bfloat16>(st, d, s, n);
		return 0;
	default:
		return -1;
	}
}

extern "C" int mg_cuda_convert(struct mg_ctx *ctx, void *dst, enum mg_dtype dt,
			       const void *src, enum mg_dtype st, int64_t n)
{
	if (n <= 0)
		return 0;
	cudaStream_t s = stream_of(ctx);
	if (dt == st)
		return cudaMemcpyAsync(dst, src, (size_t)n * mg_dtype_size(dt),
				       cudaMemcpyDeviceToDevice,
				       s) == cudaSuccess
			       ? 0
			       : mg_error("convert: copy failed");
	int rc = -1;
	switch (dt) {
	case MG_F32:
		rc = convert_to<float>(s, dst, src, st, n);
		break;
	case MG_F64:
		rc = convert_to<double>(s, dst, src, st, n);
		break;
	case MG_F16:
		rc = convert_to<__half>(s, dst, src, st, n);
		break;
	case MG_BF16:
		rc = convert_to<__nv_bfloat16>(s, dst, src, st, n);
		break;
	default:
		break;
	}
	if (rc)
		return mg_error("convert: %s -> %s unsupported",
				mg_dtype_name(st), mg_dtype_name(dt));
	return check_launch("convert");
}
