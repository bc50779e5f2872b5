/*
 * nf4_impl.h - what the host NF4 code (runtime/nf4.c) shares with the
 * CPU and CUDA ops (ops/cpu/nf4.c, ops/cuda/nf4.cu) so that every path
 * writes and reads the same bytes: bitsandbytes' decision thresholds, the
 * summation order of the offset, and the per-block decoder.
 */
#ifndef MG_NF4_IMPL_H
#define MG_NF4_IMPL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* bitsandbytes' NF4 thresholds, ascending (the f32 literals of its
 * dQuantizeNF4 tree); code = how many lie strictly below the value. */
extern const float mg_nf4_threshold[15];

/*
 * The offset (mean of the block absmax values) is summed in f64: each run
 * of MG_NF4_SUM_CHUNK blocks in order from 0, then those partial sums in
 * order from 0; the total divided by nblocks, rounded once to f32. Fixed,
 * so threads (host) and kernels (CUDA) give the same bits.
 */
#define MG_NF4_SUM_CHUNK 1024

/* Decode blocks b0 .. b0 + nb - 1 (those that exist) of the n-element
 * blob into out, from element b0 * MG_NF4_BLOCK on; returns how many
 * elements it wrote. */
int64_t mg_nf4_decode_blocks(float *out, const void *blob, int64_t n,
			     int64_t b0, int64_t nb);

#ifdef __cplusplus
}
#endif
#endif
