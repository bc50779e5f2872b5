/*
 * dataset.h - what a dataset reader plugin implements.
 *
 * Readers hand out raw samples as stored (MNIST: 28x28 uint8) so the input
 * pipeline copies few bytes; transform() then runs on the device and turns
 * a raw batch into the model's input (resize, normalise, cast). Token
 * datasets (ABI 1.3) hand out rows of token ids, labels and positions
 * instead; the core trims a micro-batch to its longest row and copies it
 * as is.
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

	/* Added in ABI 1.3: token datasets set seq_len (the longest row in
	 * tokens; raw_dtype MG_I32, raw_shape [seq_len], label_len seq_len)
	 * and vocab_size (ids lie in [0, vocab_size)); they implement
	 * read_tokens and need no transform. 0 for other datasets. */
	int64_t seq_len;
	int64_t vocab_size;
};

/* The layout of a token dataset whose rows are at most seq_len tokens of
 * ids in [0, vocab): what layout() fills in. */
static inline void mg_token_layout(struct mg_sample_layout *l, int64_t seq_len,
				   int64_t vocab)
{
	l->raw_dtype = MG_I32;
	l->raw_ndim = 1;
	l->raw_shape[0] = seq_len;
	l->label_len = seq_len;
	l->input_ndim = 1;
	l->input_shape[0] = seq_len;
	l->num_classes = 0;
	l->seq_len = seq_len;
	l->vocab_size = vocab;
}

/* Host rows a token dataset fills, row i at offset i * stride. */
struct mg_token_rows {
	int64_t stride;	    /* >= seq_len */
	int32_t *ids;	    /* token ids; padding: 0 */
	int32_t *labels;    /* next-token targets or MG_IGNORE_INDEX */
	int32_t *positions; /* position in the document (restarts when
			       packed) */
	int32_t *lens;	    /* [n] valid tokens per row, 1..seq_len */
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

	/* Added in ABI 1.3, required for token datasets (layout seq_len > 0,
	 * where read and transform may be NULL): fill rows idx[0..n) of
	 * split. Positions past lens[i] are padding and must hold id 0 and
	 * label MG_IGNORE_INDEX. Host memory; must be thread-safe. */
	int (*read_tokens)(void *self, enum mg_split split, const int64_t *idx,
			   int64_t n, const struct mg_token_rows *out);
};

#ifdef __cplusplus
}
#endif
#endif
