/*
 * llama_head.c - the fused output head (kernels = flce): final-norm
 * output to summed token loss through mg_op_linear_xent, a chunk of
 * tokens at a time, so the [tokens, vocab] logits (GBs at Llama 3's
 * 128256 words) never exist; the arena holds one [chunk, vocab] block.
 *
 * The strategy lends gradients only in the backward phase (FSDP and
 * offload reduce them unit by unit there) and grad_scale is promised
 * only by the first backward, so the forward computes the loss alone
 * and the backward computes each chunk's logits again, then the
 * gradient in place and the two GEMMs of the head's backward: one
 * logits GEMM more than the unfused path, for C x V of memory instead
 * of R x V. A tied head is the embedding's matrix, acquired as the
 * unfused path does. A LoRA adapter on the head is the op's low-rank
 * term: forward saves s A drop(hn) [R, r] (llama_lora_down), the op adds
 * it times B^T to each chunk's logits and returns dB and d(s A drop(hn)),
 * which llama_lora_down_backward takes on to dA and dhn.
 */
#include "llama.h"

/* Bytes of logits a chunk may take when flce_chunk is 0. */
#define FLCE_AUTO_BYTES ((size_t)256 << 20)

int64_t llama_flce_chunk(const struct llama *m, int64_t R)
{
	int64_t c = m->flce_chunk;
	if (c <= 0) {
		const size_t row = (size_t)m->c.vocab *
				   mg_dtype_size(m->ctx->compute_dtype);
		c = (int64_t)(FLCE_AUTO_BYTES / (row ? row : 1));
		c = c < 256 ? 256 : c;
	}
	c = c < R ? c : R;
	return c < 1 ? 1 : c;
}

/* The head's weight, from the head unit or (tied) the embedding's,
 * acquired in ph; *e is what to release. */
static struct mg_tensor *head_weight(struct mg_ctx *ctx, const struct llama *m,
				     struct mg_unit_view *head,
				     enum mg_phase ph, struct mg_unit_view **e,
				     struct mg_tensor **grad)
{
	*e = NULL;
	struct mg_unit_view *v = head;
	int i = 1;
	if (m->c.tie_embeddings) {
		*e = v = mg_acquire(ctx, LLAMA_UNIT_EMBED, ph);
		if (!v)
			return NULL;
		i = 0;
	}
	if (grad)
		*grad = ph == MG_PHASE_BACKWARD && v->grads[i].data
				? &v->grads[i]
				: NULL;
	return &v->params[i];
}

static struct mg_tensor work_of(const struct llama *m,
				const struct mg_tensor *hn, void *work)
{
	const int64_t R = mg_tensor_numel(hn) / m->c.dim;
	int64_t shape[2] = {llama_flce_chunk(m, R), m->c.vocab};
	return mg_tensor_make(work, m->ctx->compute_dtype, m->ctx->dev->kind, 2,
			      shape);
}

/* The head adapter's low-rank term (B and, in backward, the gradients of
 * B and of its input), or NULL without one. */
static const struct mg_lowrank *head_lowrank(const struct llama *m,
					     struct mg_unit_view *head,
					     struct llama_head_lora *lo,
					     bool bwd, struct mg_tensor *das,
					     struct mg_lowrank *lr)
{
	if (!lo)
		return NULL;
	const int b = m->lora.ib[LT_HEAD];
	lr->x2 = &lo->as;
	lr->w2 = &head->params[b];
	lr->dx2 = bwd ? das : NULL;
	lr->dw2 = bwd && head->grads[b].data ? &head->grads[b] : NULL;
	return lr;
}

int llama_head_flce_forward(struct llama *m, struct mg_ctx *ctx,
			    enum mg_phase ph, struct mg_unit_view *head,
			    const struct mg_tensor *hn,
			    const struct mg_tensor *labels, void *work,
			    struct llama_head_lora *lora,
			    struct mg_tensor *metrics)
{
	struct mg_lowrank lr;
	const struct mg_lowrank *lrp =
		head_lowrank(m, head, lora, false, NULL, &lr);
	if (lrp && llama_lora_down(m, ctx, (int)m->c.layers, LT_HEAD,
				   &head->params[m->lora.ia[LT_HEAD]], hn,
				   &lora->as, lora->xd, lora->tmp))
		return -1;
	struct mg_unit_view *e;
	const struct mg_tensor *W = head_weight(ctx, m, head, ph, &e, NULL);
	if (!W)
		return -1;
	struct mg_tensor wk = work_of(m, hn, work);
	int rc = mg_op_linear_lora_xent(ctx, hn, W, lrp, labels, NULL, &wk,
					metrics, NULL, NULL);
	if (e)
		mg_release(ctx, LLAMA_UNIT_EMBED, ph);
	return rc;
}

int llama_head_flce_backward(struct llama *m, struct mg_ctx *ctx,
			     struct mg_unit_view *head,
			     const struct mg_tensor *hn,
			     const struct mg_tensor *labels, void *work,
			     struct llama_head_lora *lora,
			     struct mg_tensor *dhn)
{
	struct mg_unit_view *e;
	struct mg_tensor *dW;
	const struct mg_tensor *W =
		head_weight(ctx, m, head, MG_PHASE_BACKWARD, &e, &dW);
	if (!W)
		return -1;
	struct mg_tensor wk = work_of(m, hn, work), das;
	struct mg_lowrank lr;
	if (lora) {
		das = lora->as;
		das.data = lora->das;
	}
	const struct mg_lowrank *lrp =
		head_lowrank(m, head, lora, true, &das, &lr);
	int rc = mg_op_linear_lora_xent(ctx, hn, W, lrp, labels,
					&ctx->grad_scale, &wk, NULL, dhn, dW);
	if (e)
		mg_release(ctx, LLAMA_UNIT_EMBED, MG_PHASE_BACKWARD);
	if (!rc && lrp) {
		const int a = m->lora.ia[LT_HEAD];
		rc = llama_lora_down_backward(
			m, ctx, (int)m->c.layers, LT_HEAD, &head->params[a],
			head->grads[a].data ? &head->grads[a] : NULL, hn, &das,
			dhn, lora->da, lora->xd, lora->dxd);
	}
	return rc;
}
