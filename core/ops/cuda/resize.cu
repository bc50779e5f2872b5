/*
 * resize.cu - mg_op_resize_normalize_u8 on CUDA: bilinear resize of U8
 * images with PyTorch's align_corners=False semantics, then /255 and
 * (x - mean) / std, one output pixel per thread. The source coordinates
 * and weights are computed in double with the CPU op's formulas, so F64
 * results match it to rounding.
 */
#include "ops/cuda/cuda_common.cuh"

namespace
{
/* One axis: source indices and the weight of the second one. */
__device__ __forceinline__ void tap(int64_t d, int64_t in, double scale,
				    int64_t *i0, int64_t *i1, double *l1)
{
	double src = ((double)d + 0.5) * scale - 0.5;
	if (src < 0)
		src = 0;
	int64_t a = (int64_t)floor(src);
	if (a > in - 1)
		a = in - 1;
	double l = src - (double)a;
	*l1 = l < 0 ? 0 : (l > 1 ? 1 : l);
	*i0 = a;
	*i1 = a < in - 1 ? a + 1 : a;
}

template <typename T>
__global__ void resize_k(const uint8_t *src, T *dst, int64_t planes, int64_t h,
			 int64_t w, int64_t oh, int64_t ow, double mean,
			 double std)
{
	const double sy = (double)h / (double)oh, sx = (double)w / (double)ow;
	const bool same = h == oh && w == ow;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < planes * oh * ow; i += (int64_t)gridDim.x * blockDim.x) {
		double v;
		if (same) {
			v = (double)src[i];
		} else {
			const int64_t ox = i % ow, r = i / ow;
			const int64_t oy = r % oh, p = r / oh;
			int64_t y0, y1, x0, x1;
			double ly1, lx1;
			tap(oy, h, sy, &y0, &y1, &ly1);
			tap(ox, w, sx, &x0, &x1, &lx1);
			const double ly0 = 1.0 - ly1, lx0 = 1.0 - lx1;
			const uint8_t *r0 = src + (p * h + y0) * w;
			const uint8_t *r1 = src + (p * h + y1) * w;
			v = ly0 * (lx0 * r0[x0] + lx1 * r0[x1]) +
			    ly1 * (lx0 * r1[x0] + lx1 * r1[x1]);
		}
		dst[i] = mgc_t<T>::from((v / 255.0 - mean) / std);
	}
}

template <typename T>
void run(cudaStream_t st, const uint8_t *src, void *dst, int64_t planes,
	 int64_t h, int64_t w, int64_t oh, int64_t ow, double mean, double std)
{
	resize_k<T><<<mgc_blocks(planes * oh * ow, 256), 256, 0, st>>>(
		src, (T *)dst, planes, h, w, oh, ow, mean, std);
}
} // namespace

extern "C" int mg_cuda_resize_normalize_u8(struct mg_ctx *ctx,
					   const struct mg_tensor *src,
					   struct mg_tensor *dst, float mean,
					   float std)
{
	static const char op[] = "resize_normalize_u8";
	const int64_t planes = src->shape[0] * src->shape[1];
	const int64_t oh = dst->shape[2], ow = dst->shape[3];
	if (planes == 0 || oh == 0 || ow == 0)
		return 0;
	MGC_DISPATCH(op, dst->dtype, run, mgc_stream(ctx),
		     (const uint8_t *)src->data, dst->data, planes,
		     src->shape[2], src->shape[3], oh, ow, (double)mean,
		     (double)std);
	return mgc_check_launch(op);
}
