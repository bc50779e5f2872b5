/*
 * nf4.h - the NF4 (QLoRA 4-bit NormalFloat) storage format of MG_NF4
 * tensors, with bitsandbytes' semantics (quantize_4bit, quant_type "nf4",
 * blocksize 64, compress_statistics=True), so that weights quantized here
 * and by bitsandbytes decode alike and bitsandbytes folders can be read
 * and written without re-quantizing.
 *
 * One contiguous blob per tensor of n elements (mg_nf4_layout):
 *   codes          ceil(n/2) bytes; element 2j in the HIGH nibble of byte
 *                  j, 2j+1 in the low one (odd n: the last low nibble 0);
 *                  each nibble indexes mg_nf4_code.
 *   absmax         nblocks = ceil(n/64) bytes: the block absmax, itself
 *                  quantized: an index into mg_nf4_nested_map() of
 *                  (absmax_b - offset) / nested_absmax[b / 256].
 *   nested_absmax  nnested = ceil(nblocks/256) f32, 4-byte aligned.
 *   offset         one f32: the mean of the f32 block absmax values.
 *   bytes          the total, a multiple of 256, so blobs laid end to end
 *                  in a flat buffer stay aligned; padding bytes are 0.
 * Element i decodes to
 *   mg_nf4_code[code_i] * (map[absmax[b]] * nested_absmax[b/256] + offset)
 * with b = i / 64, each operation rounded in f32 (no fused multiply-add),
 * which is what bitsandbytes computes and what every backend here does.
 * One deliberate difference when quantizing: an all-zero block holds code
 * 7 (0.0, decoding to exactly 0), where bitsandbytes' 0 * (1 / 0) = NaN
 * gives code 0 (-1 times the decoded absmax, a small non-zero value).
 */
#ifndef MG_NF4_H
#define MG_NF4_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_NF4_BLOCK 64		/* elements per absmax block */
#define MG_NF4_NESTED_BLOCK 256 /* absmax values per nested block */

/* The 16 NF4 values, ascending (bitsandbytes' table; 0.0 is code 7). */
MG_EXPORT extern const float mg_nf4_code[16];

/*
 * The 256-entry signed dynamic 8-bit map of the double quantization,
 * ascending: bitsandbytes' create_dynamic_map(signed=True,
 * max_exponent_bits=7, total_bits=8). Built once, thread-safe; the
 * pointer stays valid for the life of the process.
 */
MG_EXPORT const float *mg_nf4_nested_map(void);

/* Where each part of a tensor's blob lies (byte offsets from its start). */
struct mg_nf4_layout {
	int64_t n, nblocks, nnested;
	size_t codes, absmax, nested_absmax, offset, bytes;
};

/* The layout of the blob of n elements (n <= 0: all zero). */
MG_EXPORT struct mg_nf4_layout mg_nf4_layout(int64_t n);

/*
 * Quantize n f32 values into blob (mg_nf4_layout(n).bytes bytes, 4-byte
 * aligned, written in full, padding 0), as bitsandbytes quantize_4bit(nf4, blocksize 64, double
 * quantization) does. OpenMP over blocks; the bytes do not depend on the
 * thread count. Returns 0, or -1 after mg_error() (n < 1, NULL, or a
 * non-finite input).
 */
MG_EXPORT int mg_nf4_quantize_host(void *blob, const float *x, int64_t n);

/* Decode the blob (4-byte aligned) of n elements into out (f32). Returns
 * 0 or -1. */
MG_EXPORT int mg_nf4_dequantize_host(float *out, const void *blob, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
