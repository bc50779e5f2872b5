/*
 * input.c - the input pipeline: read raw samples on the host, copy them to
 * the device at their stored size, transform there (resize, normalise).
 * The reader hands out uint8 28x28 images, never resized ones: the copy
 * moves the fewest bytes and resizing runs where the compute is.
 *
 * fetch() and transform() are separate so the trainer can read and queue
 * the next batch while the device still computes the current one: copies
 * are ordered on the compute stream, and an event tells the host when the
 * staging buffer may be overwritten. With run.pin_memory the staging
 * buffer is page-locked and copies are asynchronous; without, the CUDA
 * driver stages pageable memory and the host waits for each copy (the
 * seed paper's pin_memory switch).
 *
 * run.static_batch keeps each slot's first batch (read, copied and, for
 * images, transformed once) and trains on it every step: the training
 * step alone, as benchmarks that replay one static device batch measure
 * it (PyTorch's CUDA-graph pattern), to set beside the same run through
 * the pipeline.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/trainer.h"
#include "runtime/nvtx.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

/* Token rows of a micro-batch are padded to a multiple of this: fewer
 * distinct shapes for kernels (and CUDA graphs) to see. */
#define MG_SEQ_ROUND 16

int mg_input_init(struct mg_trainer *t, int64_t cap, int slots)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->r.ctx;
	memset(&in->lay, 0, sizeof in->lay);
	if (t->r.data->layout(t->r.inst[MG_SEC_DATASET], &in->lay))
		return mg_error_prefix("dataset layout");
	const struct mg_sample_layout *l = &in->lay;
	const char *dname = t->r.s->plugin[MG_SEC_DATASET].desc->name;
	in->tokens = l->seq_len > 0;
	if (in->tokens) {
		if (!t->r.data->read_tokens)
			return mg_error("dataset '%s' declares token rows "
					"(seq_len %lld) but no read_tokens",
					dname, (long long)l->seq_len);
		if (l->raw_dtype != MG_I32 || l->label_len != l->seq_len ||
		    l->seq_len > (1 << 24))
			return mg_error("dataset '%s': token layout must be "
					"I32 rows of seq_len (1..16M) ids and "
					"labels",
					dname);
	} else if (!t->r.data->read || !t->r.data->transform)
		return mg_error("dataset '%s' has no read/transform", dname);
	in->raw_sample = mg_dtype_size(l->raw_dtype);
	for (int i = 0; i < l->raw_ndim; i++)
		in->raw_sample *= (size_t)l->raw_shape[i];
	if (in->tokens)
		in->raw_sample = (size_t)l->seq_len * sizeof(int32_t);
	size_t in_sample = mg_dtype_size(ctx->compute_dtype);
	for (int i = 0; i < l->input_ndim; i++)
		in_sample *= (size_t)l->input_shape[i];
	in->input_sample = in_sample;
	size_t lab = (size_t)l->label_len * sizeof(int32_t);
	size_t total = (size_t)cap * (size_t)slots;
	in->cap = cap;
	in->slots = slots;
	in->static_batch = mg_opt_bool(t->r.s->run, "static_batch");
	/* Evaluation reads through slot 0: it would overwrite the kept batch
	 * (and a kept batch has nothing to say about held-out data). */
	if (in->static_batch && mg_opt_bool(t->r.s->run, "eval"))
		return mg_error("run.static_batch = true trains on one kept "
				"batch: set run.eval = false");
	in->idx = calloc(total, sizeof *in->idx);
	in->slot = calloc((size_t)slots, sizeof *in->slot);
	if (!in->idx || !in->slot)
		return mg_error("out of memory");
	bool pin = mg_opt_bool(t->r.s->run, "pin_memory");
	if (mg_buf_alloc_host(ctx, &in->raw_host, in->raw_sample * total,
			      MG_MEM_INPUT, pin) ||
	    mg_buf_alloc_host(ctx, &in->labels_host, lab * total, MG_MEM_INPUT,
			      pin) ||
	    mg_buf_alloc(ctx, &in->raw_dev, in->raw_sample * total,
			 MG_MEM_INPUT) ||
	    mg_buf_alloc(ctx, &in->labels_dev, lab * total, MG_MEM_INPUT))
		return -1;
	if (in->tokens) {
		if (mg_buf_alloc_host(ctx, &in->pos_host, lab * total,
				      MG_MEM_INPUT, pin) ||
		    mg_buf_alloc_host(ctx, &in->lens_host,
				      sizeof(int32_t) * total, MG_MEM_INPUT,
				      pin) ||
		    mg_buf_alloc(ctx, &in->pos_dev, lab * total,
				 MG_MEM_INPUT) ||
		    mg_buf_alloc(ctx, &in->lens_dev, sizeof(int32_t) * total,
				 MG_MEM_INPUT))
			return -1;
	} else if (mg_buf_alloc(ctx, &in->input_dev,
				in_sample * (size_t)cap *
					(size_t)(in->static_batch ? slots : 1),
				MG_MEM_INPUT))
		return -1;
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA && mg_cuda_event_create(&in->copied))
		return -1;
#endif
	return 0;
}

void mg_input_free(struct mg_trainer *t)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->r.ctx;
	struct mg_buf *bufs[] = {
		&in->raw_host,	 &in->labels_host, &in->raw_dev,
		&in->labels_dev, &in->input_dev,   &in->pos_host,
		&in->lens_host,	 &in->pos_dev,	   &in->lens_dev};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		mg_buf_free(ctx, bufs[i]);
#ifdef MG_HAVE_CUDA
	mg_cuda_event_destroy(in->copied);
#endif
	in->copied = NULL;
	free(in->idx);
	free(in->slot);
	in->idx = NULL;
	in->slot = NULL;
}

/* Tensor over samples [begin, begin+count) of a batched buffer. */
static struct mg_tensor slice(void *base, enum mg_dtype dt,
			      enum mg_device_kind dev, int ndim,
			      const int64_t *shape, int64_t begin,
			      int64_t count)
{
	int64_t full[MG_MAX_DIMS];
	size_t per = mg_dtype_size(dt);
	full[0] = count;
	for (int i = 0; i < ndim; i++) {
		full[i + 1] = shape[i];
		per *= (size_t)shape[i];
	}
	return mg_tensor_make((char *)base + per * (size_t)begin, dt, dev,
			      ndim + 1, full);
}

/* Read a slot's token rows, check them, count the computed rows' label
 * tokens and trim the rows in place to the slot's padded length. Returns
 * the bytes of one array (ids, labels or positions) to copy, or 0 on
 * error. */
static size_t read_tokens(struct mg_trainer *t, enum mg_split split, int slot,
			  const int64_t *idx, int64_t n, int64_t cbegin,
			  int64_t ccount)
{
	struct mg_input *in = &t->in;
	const int64_t L = in->lay.seq_len;
	const size_t off = (size_t)slot * (size_t)in->cap;
	int32_t *ids = (int32_t *)in->raw_host.ptr + off * (size_t)L;
	int32_t *lab = (int32_t *)in->labels_host.ptr + off * (size_t)L;
	int32_t *pos = (int32_t *)in->pos_host.ptr + off * (size_t)L;
	int32_t *lens = (int32_t *)in->lens_host.ptr + off;
	struct mg_token_rows rows = {L, ids, lab, pos, lens};
	const char *dname = t->r.s->plugin[MG_SEC_DATASET].desc->name;
	if (t->r.data->read_tokens(t->r.inst[MG_SEC_DATASET], split, idx, n,
				   &rows)) {
		mg_error_prefix("dataset '%s' read", dname);
		return 0;
	}
	int64_t longest = 1, counted = 0, row_tokens = 0;
	for (int64_t i = 0; i < n; i++) {
		if (lens[i] < 1 || lens[i] > L) {
			mg_error("dataset '%s': sample %lld has %d tokens "
				 "(1..%lld allowed)",
				 dname, (long long)idx[i], lens[i],
				 (long long)L);
			return 0;
		}
		if (lens[i] > longest)
			longest = lens[i];
		if (i >= cbegin && i < cbegin + ccount)
			row_tokens += lens[i];
		const int32_t *r = ids + i * L, *y = lab + i * L;
		for (int64_t j = 0; j < lens[i]; j++) {
			bool bad_y = y[j] != MG_IGNORE_INDEX &&
				     (y[j] < 0 || y[j] >= in->lay.vocab_size);
			if (r[j] < 0 || r[j] >= in->lay.vocab_size || bad_y) {
				mg_error(
					"dataset '%s': sample %lld token %lld: "
					"%s %d outside the vocabulary of "
					"%lld",
					dname, (long long)idx[i], (long long)j,
					bad_y ? "label" : "id",
					bad_y ? y[j] : r[j],
					(long long)in->lay.vocab_size);
				return 0;
			}
			if (i >= cbegin && i < cbegin + ccount &&
			    y[j] != MG_IGNORE_INDEX)
				counted++;
		}
	}
	int64_t T = (longest + MG_SEQ_ROUND - 1) / MG_SEQ_ROUND * MG_SEQ_ROUND;
	if (T > L)
		T = L;
	/* Trim rows to stride T (forward moves, so in place is safe), and
	 * make the padding what the contract promises. */
	for (int64_t i = 0; i < n; i++) {
		int32_t *a[3] = {ids, lab, pos};
		static const int32_t fill[3] = {0, MG_IGNORE_INDEX, 0};
		for (int k = 0; k < 3; k++) {
			int32_t *dst = a[k] + i * T;
			memmove(dst, a[k] + i * L, (size_t)lens[i] * 4);
			for (int64_t j = lens[i]; j < T; j++)
				dst[j] = fill[k];
		}
	}
	in->slot[slot].seq = T;
	in->slot[slot].label_tokens = counted;
	in->slot[slot].row_tokens = row_tokens;
	return (size_t)(n * T) * sizeof(int32_t);
}

int mg_input_fetch(struct mg_trainer *t, enum mg_split split, int slot,
		   const int64_t *idx, int64_t n, int64_t cbegin,
		   int64_t ccount)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->r.ctx;
	if (n > in->cap || slot < 0 || slot >= in->slots)
		return mg_error("input: batch of %lld (slot %d) exceeds the "
				"%lld-sample buffers",
				(long long)n, slot, (long long)in->cap);
	if (in->slot[slot].kept)
		return 0; /* run.static_batch: the slot keeps its batch */
	mg_timer_start(ctx, MG_T_DATA);
#ifdef MG_HAVE_CUDA
	/* The previous copy out of the staging buffer must be done. */
	if (in->copy_pending && mg_cuda_event_sync(in->copied))
		return -1;
	in->copy_pending = false;
#endif
	const size_t off = (size_t)slot * (size_t)in->cap;
	const size_t lab_row = (size_t)in->lay.label_len * sizeof(int32_t);
	size_t raw_bytes, lab_bytes;
	char *raw_h = (char *)in->raw_host.ptr + off * in->raw_sample;
	char *lab_h = (char *)in->labels_host.ptr + off * lab_row;
	char *raw_d = (char *)in->raw_dev.ptr + off * in->raw_sample;
	char *lab_d = (char *)in->labels_dev.ptr + off * lab_row;
	int rc = 0;
	if (in->tokens) {
		raw_bytes = lab_bytes =
			read_tokens(t, split, slot, idx, n, cbegin, ccount);
		rc = raw_bytes == 0;
	} else {
		rc = t->r.data->read(t->r.inst[MG_SEC_DATASET], split, idx, n,
				     raw_h, (int32_t *)lab_h);
		if (rc)
			mg_error_prefix(
				"dataset '%s' read",
				t->r.s->plugin[MG_SEC_DATASET].desc->name);
		raw_bytes = in->raw_sample * (size_t)n;
		lab_bytes = lab_row * (size_t)n;
	}
	mg_timer_stop(ctx, MG_T_DATA);
	if (rc)
		return -1;
	mg_count(ctx, MG_C_SAMPLES_READ, n);
	double t0 = mg_now();
	size_t extra = 0;
	mg_nvtx_push("h2d");
	rc = mg_copy_h2d(ctx, raw_d, raw_h, raw_bytes) ||
	     mg_copy_h2d(ctx, lab_d, lab_h, lab_bytes);
	if (!rc && in->tokens) {
		char *pos_h = (char *)in->pos_host.ptr + off * lab_row;
		char *pos_d = (char *)in->pos_dev.ptr + off * lab_row;
		char *len_h = (char *)in->lens_host.ptr + off * 4;
		char *len_d = (char *)in->lens_dev.ptr + off * 4;
		extra = raw_bytes + (size_t)n * 4;
		rc = mg_copy_h2d(ctx, pos_d, pos_h, raw_bytes) ||
		     mg_copy_h2d(ctx, len_d, len_h, (size_t)n * 4);
	}
	mg_nvtx_pop();
	/* Host time spent issuing copies: with pageable memory the driver
	 * copies through its own staging buffer before returning. */
	if (!t->r.stats.paused) {
		t->r.stats.t_step[MG_T_H2D] += mg_now() - t0;
		t->r.stats.t_total[MG_T_H2D] += mg_now() - t0;
	}
	if (rc)
		return -1;
#ifdef MG_HAVE_CUDA
	if (ctx->dev->kind == MG_DEV_CUDA) {
		if (mg_cuda_event_record(ctx->dev, in->copied))
			return -1;
		in->copy_pending = true;
	}
#endif
	in->slot[slot].fetched = n;
	in->slot[slot].kept = in->static_batch && in->tokens;
	mg_count(ctx, MG_C_H2D_BYTES, (int64_t)(raw_bytes + lab_bytes + extra));
	return 0;
}

/* A slot's token rows [begin, begin+count) as the batch. */
static void token_batch(struct mg_trainer *t, int slot, int64_t begin,
			int64_t count, struct mg_batch *batch)
{
	struct mg_input *in = &t->in;
	const enum mg_device_kind dk = t->r.ctx.dev->kind;
	const size_t off = (size_t)slot * (size_t)in->cap;
	const size_t row_off = off * (size_t)in->lay.seq_len;
	int64_t T = in->slot[slot].seq;
	int32_t *ids = (int32_t *)in->raw_dev.ptr + row_off;
	int32_t *lab = (int32_t *)in->labels_dev.ptr + row_off;
	int32_t *pos = (int32_t *)in->pos_dev.ptr + row_off;
	int32_t *lens = (int32_t *)in->lens_dev.ptr + off;
	batch->input = slice(ids, MG_I32, dk, 1, &T, begin, count);
	batch->labels = slice(lab, MG_I32, dk, 1, &T, begin, count);
	batch->positions = slice(pos, MG_I32, dk, 1, &T, begin, count);
	batch->lens = slice(lens, MG_I32, dk, 0, NULL, begin, count);
	batch->lens_host = (const int32_t *)in->lens_host.ptr + off + begin;
	batch->seq = T;
}

int mg_input_transform(struct mg_trainer *t, int slot, int64_t begin,
		       int64_t count, struct mg_batch *batch)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->r.ctx;
	const struct mg_sample_layout *l = &in->lay;
	memset(batch, 0, sizeof *batch);
	if (slot < 0 || slot >= in->slots || begin < 0 ||
	    begin + count > in->slot[slot].fetched)
		return mg_error("input: samples %lld..%lld of a batch of %lld",
				(long long)begin, (long long)(begin + count),
				(long long)(slot >= 0 && slot < in->slots
						    ? in->slot[slot].fetched
						    : 0));
	batch->n = count;
	if (in->tokens) {
		token_batch(t, slot, begin, count, batch);
		return 0;
	}
	const size_t off = (size_t)slot * (size_t)in->cap;
	/* Transform only the samples this rank computes. */
	struct mg_tensor raw = slice(
		(char *)in->raw_dev.ptr + off * in->raw_sample, l->raw_dtype,
		ctx->dev->kind, l->raw_ndim, l->raw_shape, begin, count);
	/* One input buffer, or one a slot for kept batches. */
	struct mg_tensor input =
		slice((char *)in->input_dev.ptr +
			      (in->static_batch ? off * in->input_sample : 0),
		      ctx->compute_dtype, ctx->dev->kind, l->input_ndim,
		      l->input_shape, 0, count);
	if (!in->slot[slot].kept &&
	    t->r.data->transform(t->r.inst[MG_SEC_DATASET], ctx, &raw, &input))
		return mg_error_prefix("dataset transform");
	in->slot[slot].kept = in->static_batch;
	int64_t lshape[1] = {l->label_len};
	batch->input = input;
	batch->labels = slice((int32_t *)in->labels_dev.ptr +
				      off * (size_t)l->label_len,
			      MG_I32, ctx->dev->kind, l->label_len > 1 ? 1 : 0,
			      lshape, begin, count);
	return 0;
}

int mg_input_load(struct mg_trainer *t, enum mg_split split, const int64_t *idx,
		  int64_t n, struct mg_batch *batch)
{
	if (mg_input_fetch(t, split, 0, idx, n, 0, n))
		return -1;
	return mg_input_transform(t, 0, 0, n, batch);
}
