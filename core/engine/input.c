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
 */
#include <stdlib.h>
#include <string.h>

#include "engine/trainer.h"
#include "runtime/nvtx.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

int mg_input_init(struct mg_trainer *t, int64_t cap)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->ctx;
	if (t->data->layout(t->inst[MG_SEC_DATASET], &in->lay))
		return mg_error_prefix("dataset layout");
	const struct mg_sample_layout *l = &in->lay;
	in->raw_sample = mg_dtype_size(l->raw_dtype);
	for (int i = 0; i < l->raw_ndim; i++)
		in->raw_sample *= (size_t)l->raw_shape[i];
	size_t in_sample = mg_dtype_size(ctx->compute_dtype);
	for (int i = 0; i < l->input_ndim; i++)
		in_sample *= (size_t)l->input_shape[i];
	size_t lab = (size_t)l->label_len * sizeof(int32_t);
	in->cap = cap;
	in->idx = calloc((size_t)cap, sizeof *in->idx);
	if (!in->idx)
		return mg_error("out of memory");
	bool pin = mg_opt_bool(t->s->run, "pin_memory");
	if (mg_buf_alloc_host(ctx, &in->raw_host, in->raw_sample * (size_t)cap,
			      MG_MEM_INPUT, pin) ||
	    mg_buf_alloc_host(ctx, &in->labels_host, lab * (size_t)cap,
			      MG_MEM_INPUT, pin) ||
	    mg_buf_alloc(ctx, &in->raw_dev, in->raw_sample * (size_t)cap,
			 MG_MEM_INPUT) ||
	    mg_buf_alloc(ctx, &in->labels_dev, lab * (size_t)cap,
			 MG_MEM_INPUT) ||
	    mg_buf_alloc(ctx, &in->input_dev, in_sample * (size_t)cap,
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
	struct mg_ctx *ctx = &t->ctx;
	mg_buf_free(ctx, &in->raw_host);
	mg_buf_free(ctx, &in->labels_host);
	mg_buf_free(ctx, &in->raw_dev);
	mg_buf_free(ctx, &in->labels_dev);
	mg_buf_free(ctx, &in->input_dev);
#ifdef MG_HAVE_CUDA
	mg_cuda_event_destroy(in->copied);
#endif
	in->copied = NULL;
	free(in->idx);
	in->idx = NULL;
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

int mg_input_fetch(struct mg_trainer *t, enum mg_split split,
		   const int64_t *idx, int64_t n)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->ctx;
	if (n > in->cap)
		return mg_error("input: batch of %lld exceeds the %lld-sample "
				"buffers",
				(long long)n, (long long)in->cap);
	mg_timer_start(ctx, MG_T_DATA);
#ifdef MG_HAVE_CUDA
	/* The previous copy out of the staging buffer must be done. */
	if (in->copy_pending && mg_cuda_event_sync(in->copied))
		return -1;
	in->copy_pending = false;
#endif
	int rc = t->data->read(t->inst[MG_SEC_DATASET], split, idx, n,
			       in->raw_host.ptr, in->labels_host.ptr);
	mg_timer_stop(ctx, MG_T_DATA);
	if (rc)
		return mg_error_prefix("dataset '%s' read",
				       t->s->plugin[MG_SEC_DATASET].desc->name);
	mg_count(ctx, MG_C_SAMPLES_READ, n);
	size_t raw_bytes = in->raw_sample * (size_t)n;
	size_t lab_bytes =
		(size_t)in->lay.label_len * sizeof(int32_t) * (size_t)n;
	double t0 = mg_now();
	mg_nvtx_push("h2d");
	rc = mg_copy_h2d(ctx, in->raw_dev.ptr, in->raw_host.ptr, raw_bytes) ||
	     mg_copy_h2d(ctx, in->labels_dev.ptr, in->labels_host.ptr,
			 lab_bytes);
	mg_nvtx_pop();
	/* Host time spent issuing copies: with pageable memory the driver
	 * copies through its own staging buffer before returning. */
	if (!t->stats.paused) {
		t->stats.t_step[MG_T_H2D] += mg_now() - t0;
		t->stats.t_total[MG_T_H2D] += mg_now() - t0;
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
	in->fetched = n;
	mg_count(ctx, MG_C_H2D_BYTES, (int64_t)(raw_bytes + lab_bytes));
	return 0;
}

int mg_input_transform(struct mg_trainer *t, int64_t begin, int64_t count,
		       struct mg_batch *batch)
{
	struct mg_input *in = &t->in;
	struct mg_ctx *ctx = &t->ctx;
	const struct mg_sample_layout *l = &in->lay;
	if (begin < 0 || begin + count > in->fetched)
		return mg_error("input: samples %lld..%lld of a batch of %lld",
				(long long)begin, (long long)(begin + count),
				(long long)in->fetched);
	/* Transform only the samples this rank computes. */
	struct mg_tensor raw =
		slice(in->raw_dev.ptr, l->raw_dtype, ctx->dev->kind,
		      l->raw_ndim, l->raw_shape, begin, count);
	struct mg_tensor input =
		slice(in->input_dev.ptr, ctx->compute_dtype, ctx->dev->kind,
		      l->input_ndim, l->input_shape, 0, count);
	if (t->data->transform(t->inst[MG_SEC_DATASET], ctx, &raw, &input))
		return mg_error_prefix("dataset transform");
	int64_t lshape[1] = {l->label_len};
	batch->input = input;
	batch->labels = slice(in->labels_dev.ptr, MG_I32, ctx->dev->kind,
			      l->label_len > 1 ? 1 : 0, lshape, begin, count);
	batch->n = count;
	batch->global_offset = 0;
	return 0;
}

int mg_input_load(struct mg_trainer *t, enum mg_split split, const int64_t *idx,
		  int64_t n, int64_t begin, int64_t count,
		  struct mg_batch *batch)
{
	if (mg_input_fetch(t, split, idx, n))
		return -1;
	return mg_input_transform(t, begin, count, batch);
}
