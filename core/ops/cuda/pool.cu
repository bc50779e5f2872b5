/*
 * pool.cu - global average pooling on CUDA: one warp per (sample,
 * channel) plane summing in double in a fixed order, and the backward
 * that spreads dy / (H * W) over the plane.
 */
#include "ops/cuda/cuda_common.cuh"

namespace
{
template <typename T>
__global__ void gap_fwd_k(const T *x, T *y, int64_t planes, int64_t HW)
{
	const int64_t p = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	if (p >= planes)
		return;
	const T *xp = x + p * HW;
	double s = 0;
	for (int64_t q = lane; q < HW; q += 32)
		s += (double)mgc_ld(xp, q);
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (lane == 0)
		y[p] = mgc_t<T>::from(s * (1.0 / (double)HW));
}

template <typename T>
__global__ void gap_bwd_k(const T *dy, T *dx, int64_t planes, int64_t HW)
{
	typedef typename mgc_t<T>::acc A;
	const double inv = 1.0 / (double)HW;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < planes * HW; i += (int64_t)gridDim.x * blockDim.x) {
		const A v = (A)((double)mgc_ld(dy, i / HW) * inv);
		dx[i] = mgc_t<T>::from(v);
	}
}

template <typename T>
void fwd(cudaStream_t st, const void *x, void *y, int64_t planes, int64_t HW)
{
	gap_fwd_k<T><<<mgc_blocks(planes * 32, 256), 256, 0, st>>>(
		(const T *)x, (T *)y, planes, HW);
}

template <typename T>
void bwd(cudaStream_t st, const void *dy, void *dx, int64_t planes, int64_t HW)
{
	gap_bwd_k<T><<<mgc_blocks(planes * HW, 256), 256, 0, st>>>(
		(const T *)dy, (T *)dx, planes, HW);
}
} // namespace

extern "C" int mg_cuda_global_avgpool(struct mg_ctx *ctx,
				      const struct mg_tensor *x,
				      struct mg_tensor *y)
{
	const int64_t planes = x->shape[0] * x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	if (planes == 0)
		return 0;
	MGC_DISPATCH("global_avgpool", x->dtype, fwd, mgc_stream(ctx), x->data,
		     y->data, planes, HW);
	return mgc_check_launch("global_avgpool");
}

extern "C" int mg_cuda_global_avgpool_backward(struct mg_ctx *ctx,
					       const struct mg_tensor *dy,
					       struct mg_tensor *dx)
{
	const int64_t planes = dx->shape[0] * dx->shape[1],
		      HW = dx->shape[2] * dx->shape[3];
	if (planes * HW == 0)
		return 0;
	MGC_DISPATCH("global_avgpool_backward", dx->dtype, bwd, mgc_stream(ctx),
		     dy->data, dx->data, planes, HW);
	return mgc_check_launch("global_avgpool_backward");
}
