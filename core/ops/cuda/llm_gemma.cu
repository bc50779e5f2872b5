/*
 * llm_gemma.cu - CUDA twins of Gemma's element-wise ops (ops_llm.h, ABI
 * 1.13; cpu/llm_gemma.c is the reference): the tanh-GELU gate with
 * transformers' roundings on half types (the activation rounded to the
 * dtype before the product, as gelu(g) * u in bf16 does), logit
 * soft-capping forward and backward, and y = a x + b. One element per
 * thread of a grid-stride loop, F32 arithmetic (F64 for F64).
 */
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_llm.h"
#include "ops/cuda/cuda_ops.h"

namespace
{
const int TH = 256;

#define GRID_LOOP(i, n)                                                        \
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;       \
	     i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* gelu_tanh(x); with d, its derivative too. */
template <typename A> __device__ __forceinline__ A gelu_t(A x, A *d)
{
	const A c = (A)0.7978845608028654, k = (A)0.044715;
	const A th = tanh(c * (x + k * x * x * x));
	if (d)
		*d = (A)0.5 * (1 + th) +
		     (A)0.5 * x * (1 - th * th) * c * (1 + 3 * k * x * x);
	return (A)0.5 * x * (1 + th);
}

template <typename T>
__global__ void geglu_k(const T *g, const T *u, T *h, int64_t n)
{
	typedef typename mgc_t<T>::acc A;
	GRID_LOOP(i, n)
	{
		const A a = gelu_t<A>(mgc_ld(g, i), (A *)0);
		h[i] = mgc_t<T>::from((A)mgc_t<T>::load(mgc_t<T>::from(a)) *
				      mgc_ld(u, i));
	}
}

template <typename T>
__global__ void geglu_bwd_k(const T *g, const T *u, const T *dh, T *dg, T *du,
			    int64_t n)
{
	typedef typename mgc_t<T>::acc A;
	GRID_LOOP(i, n)
	{
		A d1;
		const A a = gelu_t<A>(mgc_ld(g, i), &d1), d = mgc_ld(dh, i),
			uv = mgc_ld(u, i);
		const A da = (A)mgc_t<T>::load(mgc_t<T>::from(d * uv));
		const A ar = (A)mgc_t<T>::load(mgc_t<T>::from(a));
		if (dg)
			dg[i] = mgc_t<T>::from(da * d1);
		if (du)
			du[i] = mgc_t<T>::from(d * ar);
	}
}

template <typename T>
__global__ void softcap_k(const T *x, double cap, const T *dy, T *y, int64_t n)
{
	typedef typename mgc_t<T>::acc A;
	GRID_LOOP(i, n)
	{
		const A th = tanh(mgc_ld(x, i) / (A)cap);
		y[i] = mgc_t<T>::from(dy ? mgc_ld(dy, i) * (1 - th * th)
					 : (A)cap * th);
	}
}

template <typename T>
__global__ void scale_shift_k(const T *x, double a, double b, T *y, int64_t n)
{
	typedef typename mgc_t<T>::acc A;
	GRID_LOOP(i, n)
	y[i] = mgc_t<T>::from((A)a * mgc_ld(x, i) + (A)b);
}

template <typename T>
void geglu(cudaStream_t st, const void *g, const void *u, void *h, int64_t n)
{
	geglu_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>((const T *)g, (const T *)u,
						     (T *)h, n);
}

template <typename T>
void geglu_bwd(cudaStream_t st, const void *g, const void *u, const void *dh,
	       void *dg, void *du, int64_t n)
{
	geglu_bwd_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>(
		(const T *)g, (const T *)u, (const T *)dh, (T *)dg, (T *)du, n);
}

template <typename T>
void softcap(cudaStream_t st, const void *x, double cap, const void *dy,
	     void *y, int64_t n)
{
	softcap_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>(
		(const T *)x, cap, (const T *)dy, (T *)y, n);
}

template <typename T>
void scale_shift(cudaStream_t st, const void *x, double a, double b, void *y,
		 int64_t n)
{
	scale_shift_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>((const T *)x, a, b,
							   (T *)y, n);
}
} // namespace

extern "C" int mg_cuda_geglu(struct mg_ctx *ctx, const struct mg_tensor *g,
			     const struct mg_tensor *u, struct mg_tensor *h)
{
	const int64_t n = mg_tensor_numel(g);
	if (!n)
		return 0;
	MGC_DISPATCH("geglu", g->dtype, geglu, mgc_stream(ctx), g->data,
		     u->data, h->data, n);
	return mgc_check_launch("geglu");
}

extern "C" int
mg_cuda_geglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
		       const struct mg_tensor *u, const struct mg_tensor *dh,
		       struct mg_tensor *dg, struct mg_tensor *du)
{
	const int64_t n = mg_tensor_numel(g);
	if (!n)
		return 0;
	MGC_DISPATCH("geglu_backward", g->dtype, geglu_bwd, mgc_stream(ctx),
		     g->data, u->data, dh->data, dg ? dg->data : NULL,
		     du ? du->data : NULL, n);
	return mgc_check_launch("geglu_backward");
}

extern "C" int mg_cuda_softcap(struct mg_ctx *ctx, const struct mg_tensor *x,
			       double cap, const struct mg_tensor *dy,
			       struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(x);
	if (!n)
		return 0;
	MGC_DISPATCH("softcap", x->dtype, softcap, mgc_stream(ctx), x->data,
		     cap, dy ? dy->data : NULL, y->data, n);
	return mgc_check_launch("softcap");
}

extern "C" int mg_cuda_scale_shift(struct mg_ctx *ctx,
				   const struct mg_tensor *x, double a,
				   double b, struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(x);
	if (!n)
		return 0;
	MGC_DISPATCH("scale_shift", x->dtype, scale_shift, mgc_stream(ctx),
		     x->data, a, b, y->data, n);
	return mgc_check_launch("scale_shift");
}
