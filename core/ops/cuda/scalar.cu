/*
 * scalar.cu - CUDA twins of the device scalar ops (core/ops/scalar.c):
 * one thread, stream-ordered, so a captured step computes them on replay.
 */
#include "ops/cuda/cuda_common.cuh"

namespace
{
__global__ void reciprocal_scale_k(const float *x, double s, float *y)
{
	double c = x[0] < 1.0f ? 1.0 : (double)x[0];
	y[0] = (float)(s / c);
}
} // namespace

extern "C" int mg_cuda_reciprocal_scale(struct mg_ctx *ctx, const float *x,
					double s, float *y)
{
	reciprocal_scale_k<<<1, 1, 0, mgc_stream(ctx)>>>(x, s, y);
	return mgc_check_launch("reciprocal_scale");
}
