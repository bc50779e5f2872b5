/*
 * llama_arch.c - the decoder families' features (llama_family.c) as the
 * ops the forward, backward and decoding call, so those read no family:
 * the MLP gate (SwiGLU or Gemma's tanh-GELU GeGLU, picked once at
 * create), each layer's attention options (its window, the scale, the
 * soft-cap) and rotary frequencies (Gemma 3's local base on sliding
 * layers), the RMSNorm weight (w, or Gemma's 1 + w made just before the
 * norm from the stored w: one norm op, w exported as it was read, and
 * the gradient of 1 + w is w's), and the embedding scale.
 */
#include <math.h>

#include "llama.h"

void llama_arch_setup(struct llama *m)
{
	m->glu = m->c.geglu ? mg_op_geglu : mg_op_swiglu;
	m->glu_backward =
		m->c.geglu ? mg_op_geglu_backward : mg_op_swiglu_backward;
}

struct mg_attn_opts llama_attn_opts(const struct llama *m, int64_t l)
{
	const struct llama_cfg *c = &m->c;
	const double scale = c->attn_scale > 0
				     ? c->attn_scale
				     : 1.0 / sqrt((double)c->head_dim);
	return MG_ATTN_OPTS_CAP(scale, llama_slides(c, l) ? c->window : 0,
				c->attn_softcap);
}

struct mg_tensor llama_inv_freq_of(const struct llama *m, int64_t l)
{
	/* [rot_dim / 2]: its length tells the RoPE op how many dims turn
	 * (partial rotary, Phi-3) */
	int64_t half = llama_rot_dim(&m->c) / 2;
	const bool local = m->c.rope_local_theta > 0 && llama_slides(&m->c, l);
	return mg_tensor_make((float *)m->inv_freq.ptr + (local ? half : 0),
			      MG_F32, m->ctx->dev->kind, 1, &half);
}

const struct mg_tensor *llama_norm_w(struct llama *m, struct mg_ctx *ctx,
				     const struct mg_tensor *w, int slot)
{
	if (!m->c.norm_offset)
		return w;
	const int64_t D = m->c.dim > m->c.head_dim ? m->c.dim : m->c.head_dim;
	const size_t per = llama_al((size_t)D * sizeof(double));
	if (mg_buf_reserve(ctx, &m->normw, per * 8, MG_MEM_ACTIVATIONS)) {
		mg_error_prefix("llama: norm weights");
		return NULL;
	}
	struct mg_tensor *t = &m->normw_t[slot & 7];
	*t = *w;
	t->data = (char *)m->normw.ptr + per * (size_t)(slot & 7);
	if (mg_op_scale_shift(ctx, w, 1, 1, t)) {
		mg_error_prefix("llama: norm weights");
		return NULL;
	}
	return t;
}

int llama_embed_scale(const struct llama *m, struct mg_ctx *ctx,
		      struct mg_tensor *x)
{
	double a = m->c.embed_scale;
	if (!(a > 0))
		return 0;
	/* transformers: the normalizer is a tensor of the hidden dtype */
	switch (x->dtype) {
	case MG_F32:
		a = (float)a;
		break;
	case MG_BF16:
		a = mg_bf16_to_float(mg_float_to_bf16((float)a));
		break;
	case MG_F16:
		a = mg_half_to_float(mg_float_to_half((float)a));
		break;
	default:
		break;
	}
	return mg_op_scale_shift(ctx, x, a, 0, x);
}

int llama_norm_ws(struct llama *m, struct mg_ctx *ctx,
		  const struct mg_tensor *W, const struct mg_tensor **nw)
{
	static const int kind[NW_N] = {LP_IN_NORM,	 LP_POST_NORM,
				       LP_Q_NORM,	 LP_K_NORM,
				       LP_ATTN_OUT_NORM, LP_MLP_OUT_NORM};
	for (int i = 0; i < NW_N; i++) {
		const int p = m->lp[kind[i]];
		nw[i] = p >= 0 ? llama_norm_w(m, ctx, &W[p], i) : NULL;
		if (p >= 0 && !nw[i])
			return -1;
	}
	return 0;
}
