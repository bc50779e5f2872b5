/*
 * pool.c - CPU global average pooling [N, C, H, W] -> [N, C] and its backward
 * (the gradient spread evenly over each plane): MobileNetV2's head.
 */
#include "cpu_ops.h"

#define T float
#define FN(n) n##_f32
#include "pool_impl.h"
#define T double
#define FN(n) n##_f64
#include "pool_impl.h"

int mg_cpu_global_avgpool(struct mg_ctx *ctx, const struct mg_tensor *x,
			  struct mg_tensor *y)
{
	const int64_t planes = x->shape[0] * x->shape[1],
		      HW = x->shape[2] * x->shape[3];
	const int nt = mgo_threads_for(ctx, planes * HW);
	if (x->dtype == MG_F32)
		gap_fwd_f32(x->data, y->data, planes, HW, nt);
	else
		gap_fwd_f64(x->data, y->data, planes, HW, nt);
	return 0;
}

int mg_cpu_global_avgpool_backward(struct mg_ctx *ctx,
				   const struct mg_tensor *dy,
				   struct mg_tensor *dx)
{
	const int64_t planes = dx->shape[0] * dx->shape[1],
		      HW = dx->shape[2] * dx->shape[3];
	const int nt = mgo_threads_for(ctx, planes * HW);
	if (dx->dtype == MG_F32)
		gap_bwd_f32(dy->data, dx->data, planes, HW, nt);
	else
		gap_bwd_f64(dy->data, dx->data, planes, HW, nt);
	return 0;
}
