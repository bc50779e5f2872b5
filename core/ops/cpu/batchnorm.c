/*
 * batchnorm.c - CPU 2-D batch normalisation with an optional fused ReLU6
 * (mg_op_batchnorm2d*), PyTorch semantics: training normalises with the
 * batch mean and biased variance and moves the running statistics toward
 * the batch mean and unbiased variance; eval uses the running statistics.
 * Fusing the activation saves a pass over the tensor each way and the
 * memory of the pre-activation values (the mask comes from the output).
 */
#include <math.h>

#include "cpu_ops.h"

/* Longest run of contiguous elements a batch-norm tile sweeps at once;
 * its per-element accumulators live on the stack (7 arrays of BN_SEG). */
#define BN_SEG 1024

/*
 * Channels per tile: whole planes up to BN_SEG elements, but at least ~16
 * tiles when there are channels enough, for load balance. Only channels
 * larger than BN_SEG are split (then one per tile), and that depends on
 * HW alone, so sums do not depend on the tiling or the thread count.
 */
static void bn_tiling(int64_t C, int64_t HW, int64_t *cpt, int64_t *ntiles)
{
	int64_t k = HW >= BN_SEG ? 1 : BN_SEG / HW;
	const int64_t bal = (C + 15) / 16;
	if (k > bal)
		k = bal;
	if (k < 1)
		k = 1;
	*cpt = k;
	*ntiles = (C + k - 1) / k;
}

/*
 * Segment sg of the tile of channels [c0, c1): its planes whole when they
 * fit BN_SEG, else (one channel per tile) the plane in BN_SEG pieces. j0
 * is the segment's offset within a sample, L its length, qoff its offset
 * within its first channel. False past the last segment.
 */
static bool bn_segment(int64_t c0, int64_t c1, int64_t HW, int64_t sg,
		       int64_t *j0, int64_t *L, int64_t *qoff)
{
	if (c1 - c0 == 1 && HW > BN_SEG) {
		const int64_t q0 = sg * BN_SEG;
		if (q0 >= HW)
			return false;
		*j0 = c0 * HW + q0;
		*L = HW - q0 < BN_SEG ? HW - q0 : BN_SEG;
		*qoff = q0;
		return true;
	}
	if (sg > 0)
		return false;
	*j0 = c0 * HW;
	*L = (c1 - c0) * HW;
	*qoff = 0;
	return true;
}

#define T float
#define FN(n) n##_f32
#include "batchnorm_impl.h"
#define T double
#define FN(n) n##_f64
#include "batchnorm_impl.h"

int mg_cpu_batchnorm2d(struct mg_ctx *ctx, const struct mg_bn_args *a,
		       const struct mg_tensor *x, const struct mg_tensor *gamma,
		       const struct mg_tensor *beta,
		       struct mg_tensor *running_mean,
		       struct mg_tensor *running_var,
		       struct mg_tensor *save_mean,
		       struct mg_tensor *save_invstd, struct mg_tensor *y)
{
	const int64_t N = x->shape[0], C = x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	const int nt = mgo_threads_for(ctx, N * C * HW);
	if (x->dtype == MG_F32)
		bn_fwd_f32(a, N, C, HW, x->data, gamma->data, beta->data,
			   running_mean, running_var,
			   save_mean ? save_mean->data : NULL,
			   save_invstd ? save_invstd->data : NULL, y->data, nt);
	else
		bn_fwd_f64(a, N, C, HW, x->data, gamma->data, beta->data,
			   running_mean, running_var,
			   save_mean ? save_mean->data : NULL,
			   save_invstd ? save_invstd->data : NULL, y->data, nt);
	return 0;
}

int mg_cpu_batchnorm2d_backward(
	struct mg_ctx *ctx, const struct mg_bn_args *a,
	const struct mg_tensor *x, const struct mg_tensor *y,
	const struct mg_tensor *dy, const struct mg_tensor *gamma,
	const struct mg_tensor *save_mean, const struct mg_tensor *save_invstd,
	struct mg_tensor *dx, struct mg_tensor *dgamma, struct mg_tensor *dbeta)
{
	const int64_t N = x->shape[0], C = x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	const int nt = mgo_threads_for(ctx, N * C * HW);
	const void *yd = a->act != MG_ACT_NONE ? y->data : NULL;
	if (x->dtype == MG_F32)
		bn_bwd_f32(a, N, C, HW, x->data, yd, dy->data, gamma->data,
			   save_mean->data, save_invstd->data,
			   dx ? dx->data : NULL, dgamma ? dgamma->data : NULL,
			   dbeta ? dbeta->data : NULL, nt);
	else
		bn_bwd_f64(a, N, C, HW, x->data, yd, dy->data, gamma->data,
			   save_mean->data, save_invstd->data,
			   dx ? dx->data : NULL, dgamma ? dgamma->data : NULL,
			   dbeta ? dbeta->data : NULL, nt);
	return 0;
}
