/*
 * llama_bnb.h - bitsandbytes' serialisation of a 4-bit NF4 Linear weight
 * (what transformers' save_pretrained writes for a Linear4bit, with
 * double quantization) to and from mgrun's NF4 blob (mg/nf4.h). No llama
 * state: llama_bnb.c depends only on the public mg/nf4.h and
 * mg/tensor_file.h, so tests build it alone and it can move into the
 * core unchanged when a second model needs it.
 *
 * For a weight W of shape [out, in], n = out * in, the tensors are
 *   W                                  U8  [ceil(n/2), 1]  the codes
 *   W.absmax                           U8  [ceil(n/64)]    nested indices
 *   W.quant_map                        F32 [16]            the NF4 table
 *   W.nested_absmax                    F32 [ceil(n/64/256)]
 *   W.nested_quant_map                 F32 [256]           dynamic map
 *   W.quant_state.bitsandbytes__nf4    U8  [len]           JSON bytes
 * (without double quantization W.absmax is F32 and the nested_* are
 * absent; read and dequantized, never stored as a blob).
 */
#ifndef MG_LLAMA_BNB_H
#define MG_LLAMA_BNB_H

#include <stdbool.h>
#include <stdint.h>

#include "mg/mg.h"
#include "mg/tensor_file.h"

/* Where tensors come from: the view of tensor `name` and the file it is
 * in (for errors). 1 found, 0 absent (no error), -1 error set. */
typedef int (*bnb_get_fn)(void *ctx, const char *name, struct mg_tensor *view,
			  const char **path);

/* A weight's bitsandbytes tensors, validated (views into the files). */
struct bnb_weight {
	char name[256];	    /* the weight's name, W */
	const char *path;   /* the file of W, for messages */
	int64_t out, in, n; /* shape and elements */
	int64_t nblocks, nnested;
	bool nested;		   /* double quantization */
	const uint8_t *codes;	   /* ceil(n/2) bytes */
	const void *absmax;	   /* U8 [nblocks] nested, else F32 [nblocks] */
	const void *nested_absmax; /* F32 [nnested] (maybe unaligned) */
	float offset;		   /* nested_offset */
	char dtype[16];		   /* "bfloat16", "float16", "float32" */
};

/* config.json's quantization_config (text of the file at path): 0 none,
 * 1 bitsandbytes 4-bit NF4, -1 after mg_error() for what mgrun cannot
 * read (another quant_method, 8-bit, fp4), naming the file. */
int bnb_check_config(const char *path, const char *text);

/* Does the source hold bitsandbytes tensors for weight `name` (its
 * quant_state or absmax)? 1 yes, 0 no, -1 error. */
int bnb_probe(bnb_get_fn get, void *ctx, const char *name);

/* Read and check weight `name` of shape [out, in]; errors name the file
 * and the tensor and say what is wrong (quant_type, blocksize, shapes,
 * dtypes, tables, JSON). */
int bnb_read(bnb_get_fn get, void *ctx, const char *name, int64_t out,
	     int64_t in, struct bnb_weight *w);

/* Its NF4 blob (mg_nf4_layout(n).bytes, written in full): the bytes as
 * they are, no re-quantization. A weight without double quantization is
 * refused (the blob stores only double-quantized scales). */
int bnb_to_blob(const struct bnb_weight *w, void *blob);

/* Its values in f32, as bitsandbytes' dequantize_4bit computes them. */
int bnb_dequantize(const struct bnb_weight *w, float *out);

/* Add weight `name` [out, in] from blob to writer w in bitsandbytes'
 * form; dtype is the quant_state's "dtype" (the float type the weight
 * was quantized from and dequantizes to, e.g. "bfloat16"). */
int bnb_write(struct mg_tensor_writer *w, const char *name, const void *blob,
	      int64_t out, int64_t in, const char *dtype);

#endif
