/*
 * dataset.h - what a dataset reader plugin implements.
 *
 * Readers hand out raw samples as stored (MNIST: 28x28 uint8) so the input
 * pipeline copies few bytes; transform() then runs on the device and turns
 * a raw batch into the model's input (resize, normalise, cast).
 */
#ifndef MG_DATASET_H
#define MG_DATASET_H

#include <stdint.h>

#include "model.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_split { MG_SPLIT_TRAIN = 0, MG_SPLIT_TEST = 1 };

struct mg_sample_layout {
	/* One raw sample as read(): dtype and shape (without the batch dim). */
	enum mg_dtype raw_dtype;
	int raw_ndim;
	int64_t raw_shape[MG_MAX_DIMS - 1];
	/* One labels row: I32, label_len values per sample (1 for classes). */
	int64_t label_len;
	/* One transformed sample (without the batch dim); dtype is the
	 * context's compute dtype. */
	int input_ndim;
	int64_t input_shape[MG_MAX_DIMS - 1];
	int64_t num_classes; /* classification; 0 when not */
};

struct mg_dataset_ops {
	int64_t (*count)(void *self, enum mg_split split);
	int (*layout)(void *self, struct mg_sample_layout *out);
	/* Copy samples idx[0..n) of split into raw (n * raw sample bytes) and
	 * labels (n * label_len). Host memory; must be thread-safe. */
	int (*read)(void *self, enum mg_split split, const int64_t *idx,
		    int64_t n, void *raw, int32_t *labels);
	/* On ctx's device: raw [n, raw_shape] -> input [n, input_shape] in
	 * input->dtype. input->data is preallocated by the core. */
	int (*transform)(void *self, struct mg_ctx *ctx,
			 const struct mg_tensor *raw, struct mg_tensor *input);
};

#ifdef __cplusplus
}
#endif
#endif
