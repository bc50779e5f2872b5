/*
 * elementwise.cu - element-wise ops on CUDA: ReLU6 forward/backward, the
 * residual add and its backward (gradients accumulate), and dropout with
 * the counter-based mask of include/mg/rng.h ported to the device, so a
 * GPU mask equals the CPU one bit for bit.
 */
#include "ops/cuda/cuda_common.cuh"

namespace
{
const int TH = 256;

#define GRID_LOOP(i, n)                                                        \
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;       \
	     i < (n); i += (int64_t)gridDim.x * blockDim.x)

template <typename T> __global__ void relu6_k(const T *x, T *y, int64_t n)
{
	typedef typename mgc_t<T>::acc A;
	GRID_LOOP(i, n)
	{
		const A v = mgc_ld(x, i);
		y[i] = mgc_t<T>::from(v < 0 ? (A)0 : (v > 6 ? (A)6 : v));
	}
}

template <typename T>
__global__ void relu6_bwd_k(const T *y, const T *dy, T *dx, int64_t n)
{
	typedef typename mgc_t<T>::acc A;
	GRID_LOOP(i, n)
	{
		const A v = mgc_ld(y, i);
		dx[i] = (v > 0 && v < 6) ? dy[i] : mgc_t<T>::from((A)0);
	}
}

/* y = a + b; also da += dy with y = a = da, b = dy. */
template <typename T>
__global__ void add_k(const T *a, const T *b, T *y, int64_t n)
{
	GRID_LOOP(i, n)
	y[i] = mgc_t<T>::from(mgc_ld(a, i) + mgc_ld(b, i));
}

/* SplitMix64 finaliser of (key, counter): mg_rng_u64 on the device. */
__device__ __forceinline__ uint64_t rng_u64(uint64_t key, uint64_t counter)
{
	uint64_t z = key + 0x9E3779B97F4A7C15ull * (counter + 1);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* The step comes from device memory when the trainer provides it, so a
 * captured step replayed as a graph draws a new mask each time. */
template <typename T>
__global__ void dropout_k(const T *in, T *out, int64_t n, double p,
			  uint64_t key0, const int64_t *stepp, int64_t step,
			  int64_t offset)
{
	typedef typename mgc_t<T>::acc A;
	const A scale = (A)(1.0 / (1.0 - p));
	const uint64_t key = rng_u64(key0 ^ 0xD1B54A32D192ED03ull,
				     (uint64_t)(stepp ? *stepp : step));
	GRID_LOOP(i, n)
	{
		const double u =
			(double)(rng_u64(key, (uint64_t)(offset + i)) >> 11) *
			0x1.0p-53;
		out[i] = mgc_t<T>::from(u >= p ? mgc_ld(in, i) * scale : (A)0);
	}
}

template <typename T>
void relu6(cudaStream_t st, const void *x, void *y, int64_t n)
{
	relu6_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>((const T *)x, (T *)y, n);
}

template <typename T>
void relu6_bwd(cudaStream_t st, const void *y, const void *dy, void *dx,
	       int64_t n)
{
	relu6_bwd_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>(
		(const T *)y, (const T *)dy, (T *)dx, n);
}

template <typename T>
void add(cudaStream_t st, const void *a, const void *b, void *y, int64_t n)
{
	add_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>((const T *)a, (const T *)b,
						   (T *)y, n);
}

template <typename T>
void dropout(cudaStream_t st, const void *in, void *out, int64_t n, double p,
	     uint64_t key, const int64_t *stepp, int64_t step, int64_t offset)
{
	dropout_k<T><<<mgc_blocks(n, TH), TH, 0, st>>>(
		(const T *)in, (T *)out, n, p, key, stepp, step, offset);
}
} // namespace

extern "C" int mg_cuda_relu6(struct mg_ctx *ctx, const struct mg_tensor *x,
			     struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(x);
	if (n == 0)
		return 0;
	MGC_DISPATCH("relu6", x->dtype, relu6, mgc_stream(ctx), x->data,
		     y->data, n);
	return mgc_check_launch("relu6");
}

extern "C" int mg_cuda_relu6_backward(struct mg_ctx *ctx,
				      const struct mg_tensor *y,
				      const struct mg_tensor *dy,
				      struct mg_tensor *dx)
{
	const int64_t n = mg_tensor_numel(y);
	if (n == 0)
		return 0;
	MGC_DISPATCH("relu6_backward", y->dtype, relu6_bwd, mgc_stream(ctx),
		     y->data, dy->data, dx->data, n);
	return mgc_check_launch("relu6_backward");
}

extern "C" int mg_cuda_add(struct mg_ctx *ctx, const struct mg_tensor *a,
			   const struct mg_tensor *b, struct mg_tensor *y)
{
	const int64_t n = mg_tensor_numel(a);
	if (n == 0)
		return 0;
	MGC_DISPATCH("add", a->dtype, add, mgc_stream(ctx), a->data, b->data,
		     y->data, n);
	return mgc_check_launch("add");
}

extern "C" int mg_cuda_add_backward(struct mg_ctx *ctx,
				    const struct mg_tensor *dy,
				    struct mg_tensor *da, struct mg_tensor *db)
{
	const int64_t n = mg_tensor_numel(dy);
	if (n == 0)
		return 0;
	struct mg_tensor *g[2] = {da, db};
	for (int k = 0; k < 2; k++) {
		if (!g[k])
			continue;
		MGC_DISPATCH("add_backward", dy->dtype, add, mgc_stream(ctx),
			     g[k]->data, dy->data, g[k]->data, n);
	}
	return mgc_check_launch("add_backward");
}

static int dropout_run(struct mg_ctx *ctx, const char *op,
		       const struct mg_tensor *in, struct mg_tensor *out,
		       double p, uint64_t key, int64_t offset)
{
	const int64_t n = mg_tensor_numel(in);
	if (n == 0)
		return 0;
	if (p >= 1)
		return mgc_zero(ctx, out->data, out->dtype, n);
	const int64_t *stepp = ctx->optim_vals ? &ctx->optim_vals->step : NULL;
	MGC_DISPATCH(op, in->dtype, dropout, mgc_stream(ctx), in->data,
		     out->data, n, p, key, stepp, ctx->step, offset);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_dropout(struct mg_ctx *ctx, const struct mg_tensor *x,
			       struct mg_tensor *y, double p, uint64_t key,
			       int64_t offset)
{
	return dropout_run(ctx, "dropout", x, y, p, key, offset);
}

extern "C" int mg_cuda_dropout_backward(struct mg_ctx *ctx,
					const struct mg_tensor *dy,
					struct mg_tensor *dx, double p,
					uint64_t key, int64_t offset)
{
	return dropout_run(ctx, "dropout_backward", dy, dx, p, key, offset);
}
