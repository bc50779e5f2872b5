/*
 * llama_objective.c - the training objective, a policy chosen at create
 * from the `objective` option: what a forward computes over the model
 * (one pass, or DPO's reference pass then the policy's), the loss
 * metrics from the logits, their gradient in place, and the metrics the
 * run declares. The decoder (llama_model.c) calls the objective and
 * never tests which one it is, so a new objective is a new entry and the
 * functions it names.
 *
 *   sft  next-token cross-entropy on the label tokens, per-token metrics
 *        (loss, ppl, token accuracy)
 *   dpo  Direct Preference Optimization on preference pairs (llama_dpo.c)
 */
#include <string.h>

#include "llama.h"

static int sft_head(struct llama *m, struct mg_ctx *ctx,
		    const struct mg_tensor *logits, const struct mg_batch *b,
		    struct mg_tensor *metrics)
{
	(void)m;
	return mg_op_softmax_xent(ctx, logits, &b->labels, metrics);
}

static int sft_head_backward(struct llama *m, struct mg_ctx *ctx,
			     struct mg_tensor *logits)
{
	return mg_op_softmax_xent_backward(ctx, logits, &m->labels,
					   &ctx->grad_scale, logits);
}

static int sft_metrics(struct mg_metric_spec *ms)
{
	memset(ms, 0, sizeof *ms);
	ms->nsums = MG_METRIC_N;
	ms->per_token = 1;
	mg_metric_declare(ms, "loss", MG_METRIC_LOSS_SUM, MG_METRIC_COUNT,
			  MG_SHOW_PLAIN, 1);
	mg_metric_declare(ms, "ppl", MG_METRIC_LOSS_SUM, MG_METRIC_COUNT,
			  MG_SHOW_EXP, 1);
	mg_metric_declare(ms, "acc", MG_METRIC_CORRECT, MG_METRIC_COUNT,
			  MG_SHOW_PERCENT, 0);
	return 0;
}

const struct llama_objective llama_objective_sft = {
	"sft", llama_forward, sft_head, sft_head_backward, sft_metrics,
};
const struct llama_objective llama_objective_dpo = {
	"dpo",
	llama_dpo_forward,
	llama_dpo_head,
	llama_dpo_head_backward,
	llama_dpo_metrics,
};
