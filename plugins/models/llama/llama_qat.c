/*
 * llama_qat.c - quantization-aware training (`qat = 8da4w`) and the
 * int4 evaluation path (`quant = int4`): torchao's int8 dynamic
 * activation / int4 weight scheme (Int8DynActInt4WeightQATQuantizer,
 * mg/int4.h's formulas) on the seven projections of every layer, never
 * the embedding or the head.
 *
 * Forward of a targeted projection: y = fq8(x) fq4(W)^T, fq8 per token
 * (row), fq4 per group of qat_group inputs, W the lent compute copy of
 * this step; the LoRA path (torchao / torchtune QAT + LoRA) reads the
 * unquantized x, and a frozen base is fake-quantized like a trained one.
 * Backward: the straight-through estimator, recomputed rather than
 * stored: the input gradient is masked where fq8(x)'s code was clamped
 * (the mask recomputed from the saved x), the weight gradient where
 * fq4(W)'s was. Nothing new is kept between forward and backward: fq8(x)
 * is rebuilt in one arena slot (the layer's saved x is there anyway),
 * and only for a weight gradient (a frozen base's input gradient is
 * dy fq4(W), so LoRA + QAT skips it),
 * fq4(W) in one scratch sized for the largest projection, accounted as
 * MG_MEM_GATHER like the NF4 dequantization buffer. So sharding
 * strategies see the same parameters, gradients and units as without
 * QAT.
 *
 * The weight gradient is masked in place, in the lent gradient tensor,
 * after the GEMM has added this micro-batch's dy^T fq8(x): W, hence its
 * mask, is the same for every micro-batch of a step and the tensor held
 * either zeros or earlier micro-batches' already masked sums, so
 * masking the sum equals summing the masked terms.
 *
 * quant = int4 reads weights that `mgrun export --dtype int4` wrote
 * (llama_hf.c dequantizes them to the parameters' dtype at load: q *
 * scale, exact in f32) and fake-quantizes activations as in training;
 * the weights are not quantized again (they are on their grid already;
 * re-deriving scales from them would move them).
 */
#include "llama.h"
#include "mg/int4.h"

int llama_qat_setup(struct llama *m, const struct mg_opts *o)
{
	const struct llama_cfg *c = &m->c;
	m->qat = mg_opt_enum(o, "qat") == 1; /* none|8da4w */
	m->qat_group = mg_opt_int(o, "qat_group");
	m->int4 = mg_opt_enum(o, "quant") == 2; /* none|nf4|int4 */
	if (m->qat && m->nf4)
		return mg_error("llama: qat = 8da4w fake-quantizes float "
				"weights; quant = nf4 stores them in NF4 "
				"already: use one or the other");
	if (m->qat && m->int4)
		return mg_error("llama: qat = 8da4w with quant = int4 would "
				"quantize the int4 weights again; train with "
				"qat on float weights, evaluate the export "
				"with quant = int4");
	if (m->int4 && !m->hf_dir[0])
		return mg_error("llama: quant = int4 reads int4 weights: set "
				"hf_dir to a folder written by `mgrun export "
				"--dtype int4`");
	if (!m->qat)
		return 0;
	const int64_t qd = c->heads * c->head_dim;
	const struct {
		const char *what;
		int64_t in;
	} ins[3] = {{"hidden_size (q, k, v, gate, up)", c->dim},
		    {"num_heads * head_dim (o)", qd},
		    {"intermediate_size (down)", c->ffn}};
	for (int i = 0; i < 3; i++)
		if (ins[i].in % m->qat_group || ins[i].in % 2)
			return mg_error("llama: qat_group %lld does not divide "
					"the input width %lld of %s",
					(long long)m->qat_group,
					(long long)ins[i].in, ins[i].what);
	return 0;
}

const struct mg_tensor *llama_qat_weight(struct llama *m, struct mg_ctx *ctx,
					 const struct mg_tensor *w)
{
	if (!w)
		return w;
	const int64_t cap = llama_max_proj(&m->c), n = mg_tensor_numel(w);
	if (n > cap) {
		mg_error("llama: qat: weight of %lld elements exceeds the "
			 "largest projection (%lld)",
			 (long long)n, (long long)cap);
		return NULL;
	}
	if (!m->qatbuf.ptr &&
	    mg_buf_alloc(ctx, &m->qatbuf,
			 (size_t)cap * mg_dtype_size(ctx->compute_dtype),
			 MG_MEM_GATHER)) {
		mg_error_prefix("llama: qat weight buffer");
		return NULL;
	}
	m->qatw = mg_tensor_make(m->qatbuf.ptr, w->dtype, ctx->dev->kind,
				 w->ndim, w->shape);
	if (mg_op_fq_int4_weight(ctx, w, m->qat_group, &m->qatw)) {
		mg_error_prefix("llama: qat");
		return NULL;
	}
	return &m->qatw;
}

int llama_qat_weight_grad(struct llama *m, struct mg_ctx *ctx,
			  const struct mg_tensor *w, struct mg_tensor *g)
{
	return mg_op_fq_int4_weight_backward(ctx, w, m->qat_group, g, g);
}

void llama_qat_describe(const struct llama *m)
{
	if (m->qat)
		mg_info("llama: qat = 8da4w: q, k, v, o, gate, up, down of "
			"every layer see int8 per-token activations and int4 "
			"weights (groups of %lld) fake-quantized, gradients "
			"by the straight-through estimator",
			(long long)m->qat_group);
	else if (m->int4)
		mg_info("llama: quant = int4: projections from %s's int4 "
			"weights, activations fake-quantized to int8 per "
			"token",
			m->hf_dir);
}

void llama_qat_free(struct llama *m)
{
	mg_buf_free(m->ctx, &m->qatbuf);
}
