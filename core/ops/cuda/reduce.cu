/*
 * reduce.cu - db[c] += sum of dy over N, H, W (convolution bias
 * gradients), deterministic: the two-stage channel reduction of
 * cuda_reduce.cuh, then one thread per channel adding its partials in
 * order.
 */
#include "ops/cuda/cuda_reduce.cuh"

namespace
{
template <typename T> struct sum_f {
	const T *dy;
	int64_t C, HW;
	__device__ void operator()(int64_t n, int64_t q, int64_t c,
				   double *acc) const
	{
		acc[0] += (double)mgc_ld(dy, (n * C + c) * HW + q);
	}
};

template <typename T>
__global__ void chan_sum_final(const double *part, int S, int64_t C, T *db)
{
	int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double s = 0;
	for (int k = 0; k < S; k++)
		s += part[c * S + k];
	db[c] = mgc_t<T>::from(mgc_ld(db, c) + s);
}

template <typename T>
void chan_sum(cudaStream_t st, const void *dy, int64_t N, int64_t C, int64_t HW,
	      void *db, double *part)
{
	int S;
	sum_f<T> f = {(const T *)dy, C, HW};
	mgc_chan_reduce<1>(st, f, N, C, HW, part, &S);
	chan_sum_final<T>
		<<<mgc_blocks(C, 128), 128, 0, st>>>(part, S, C, (T *)db);
}
} // namespace

extern "C" int mgc_channel_sum_acc(struct mg_ctx *ctx, const char *op,
				   enum mg_dtype dt, const void *dy, int64_t N,
				   int64_t C, int64_t HW, void *db)
{
	if (C == 0)
		return 0;
	double *part = (double *)mgc_scratch(
		ctx, (size_t)C * mgc_red_splits(N * HW) * sizeof(double));
	if (!part)
		return -1;
	MGC_DISPATCH(op, dt, chan_sum, mgc_stream(ctx), dy, N, C, HW, db, part);
	return mgc_check_launch(op);
}
