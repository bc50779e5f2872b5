/*
 * ops_image.h - image ops for dataset transforms (run on the context's
 * device; the CPU implementation is the reference).
 */
#ifndef MG_OPS_IMAGE_H
#define MG_OPS_IMAGE_H

#include "abi.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_ctx;

/*
 * Resize a batch of 8-bit images and normalise them:
 *
 *   dst = (bilinear(src) / 255 - mean) / std
 *
 * src is U8 [n, c, h, w], dst is F32 or F64 [n, c, H, W] (same n and c),
 * both contiguous on ctx's device. The resize follows PyTorch's
 * F.interpolate(mode="bilinear", align_corners=False, antialias=False):
 * half-pixel centres, source coordinate (d + 0.5) * in / out - 0.5 clamped
 * at 0, neighbours clamped at the border. When H == h and W == w there is
 * no resampling: every pixel maps to itself exactly. std must be non-zero.
 * Returns 0, or a negative value after mg_error() said why.
 */
MG_EXPORT int mg_op_resize_normalize_u8(struct mg_ctx *ctx,
					const struct mg_tensor *src,
					struct mg_tensor *dst, float mean,
					float std);

#ifdef __cplusplus
}
#endif
#endif
