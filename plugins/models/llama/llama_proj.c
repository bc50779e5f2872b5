/*
 * llama_proj.c - the run's projection kind: how every layer projection's
 * base GEMM reads its weight and its input, chosen once at create from
 * the quant and qat options. The forward, backward and decode call the
 * kind (llama.h: llama_base_weight, llama_base_fq_input,
 * llama_base_weight_grad) and never test an option, so a new storage or
 * arithmetic for the base weights (FP8) is a new entry here and the
 * functions it names.
 *
 *   dense  the weight as stored (full fine-tuning, LoRA)
 *   nf4    QLoRA: the frozen NF4 blob dequantized just before each GEMM
 *          (llama_quant.c)
 *   qat    8da4w: int8 per-token inputs and int4 weights fake-quantized,
 *          straight-through gradients (llama_qat.c)
 *   int4   an int4 export's weights (dequantized at load), int8
 *          per-token inputs: the model QAT trains for
 */
#include "llama.h"

static const struct mg_tensor *as_stored(struct llama *m, struct mg_ctx *ctx,
					 const struct mg_tensor *w)
{
	(void)m, (void)ctx;
	return w;
}

static void say_nothing(const struct llama *m)
{
	(void)m;
}

const struct llama_proj_kind llama_proj_dense = {
	"dense", false, as_stored, NULL, say_nothing,
};
const struct llama_proj_kind llama_proj_nf4 = {
	"nf4", false, llama_weight, NULL, llama_quant_describe,
};
const struct llama_proj_kind llama_proj_qat = {
	"qat",
	true,
	llama_qat_weight,
	llama_qat_weight_grad,
	llama_qat_describe,
};
const struct llama_proj_kind llama_proj_int4 = {
	"int4", true, as_stored, NULL, llama_qat_describe,
};

void llama_proj_select(struct llama *m)
{
	m->proj = m->nf4    ? &llama_proj_nf4
		  : m->qat  ? &llama_proj_qat
		  : m->int4 ? &llama_proj_int4
			    : &llama_proj_dense;
}
