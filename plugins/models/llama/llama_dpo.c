/*
 * llama_dpo.c - Direct Preference Optimization (Rafailov et al. 2023) as
 * TRL's DPOTrainer computes it, as the llama model's objective = dpo.
 *
 * Why in the model: a DPO sample is one row holding two packed documents
 * [prompt + chosen | prompt + rejected] (the instruct dataset's format =
 * preference; positions restart where the rejected one starts, labels
 * only on response tokens), so the core's sampler, every strategy and
 * gradient accumulation keep a pair together unchanged, and the loss is
 * a per-sample (per-pair) mean, which the core already scales. Only the
 * head changes: instead of the token loss, the sequence log-probability
 * of each document (mg_op_pair_logprob) goes into the DPO loss
 * (mg_op_dpo_loss), whose gradient per document seeds the same
 * (onehot - softmax) backward through the logits.
 *
 * The reference pass runs first in every forward, without saved
 * activations (acquired for evaluation, its arena overwritten by the
 * policy pass that follows), so nothing is cached across steps. With
 * LoRA the reference is the same weights with the adapters off: no
 * second copy exists. With full fine-tuning the policy's weights move,
 * so the reference is a frozen copy of the starting weights (TRL's
 * ref_model): units of their own after the model's ("ref." + the
 * unit's name), so a strategy gathers them only for the reference pass;
 * frozen (no gradient, no optimizer state, kept in the compute dtype,
 * never checkpointed: a resume remakes it from the same start), and
 * sharded or replicated by the strategy like any frozen parameter.
 * Its cost is one copy of the weights in the compute dtype; precomputed
 * reference log-probs would need a pass over the data before training
 * and a table keyed by row, which the batch contract does not carry.
 */
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int llama_dpo_setup(struct llama *m, const struct mg_opts *o)
{
	struct llama_dpo *d = &m->dpo;
	d->on = mg_opt_enum(o, "objective") == 1;
	m->obj = d->on ? &llama_objective_dpo : &llama_objective_sft;
	d->beta = mg_opt_float(o, "dpo_beta");
	d->eps = mg_opt_float(o, "dpo_label_smoothing");
	/* Full fine-tuning: the policy moves away from its start, so the
	 * reference is a frozen copy of the start (llama_declare adds it
	 * after each unit's parameters, llama_init_unit fills it). */
	d->copy = d->on && m->lora.rank == 0;
	/* The pair log-probabilities read the whole [tokens, vocab]
	 * logits, which kernels flce never materialises (called after
	 * llama_kernels_setup). */
	if (d->on && (m->kern & LK_FLCE))
		return mg_error("llama: objective = dpo reads the full logits; "
				"kernels flce does not keep them (use kernels "
				"= rmsnorm or none with dpo)");
	return 0;
}

void llama_dpo_free(struct llama *m)
{
	mg_buf_free(m->ctx, &m->dpo.buf);
}

int llama_dpo_metrics(struct mg_metric_spec *ms)
{
	memset(ms, 0, sizeof *ms);
	ms->nsums = MG_DPO_NSUMS;
	ms->per_token = 0; /* a mean over pairs */
	mg_metric_declare(ms, "loss", MG_METRIC_LOSS_SUM, MG_METRIC_COUNT,
			  MG_SHOW_PLAIN, 1);
	mg_metric_declare(ms, "rewards/chosen", MG_DPO_REWARD_CHOSEN,
			  MG_METRIC_COUNT, MG_SHOW_PLAIN, 0);
	mg_metric_declare(ms, "rewards/rejected", MG_DPO_REWARD_REJECTED,
			  MG_METRIC_COUNT, MG_SHOW_PLAIN, 1);
	mg_metric_declare(ms, "rewards/accuracies", MG_METRIC_CORRECT,
			  MG_METRIC_COUNT, MG_SHOW_PLAIN, 0);
	mg_metric_declare(ms, "rewards/margins", MG_DPO_MARGIN, MG_METRIC_COUNT,
			  MG_SHOW_PLAIN, 0);
	mg_metric_declare(ms, "logps/chosen", MG_DPO_LOGP_CHOSEN,
			  MG_METRIC_COUNT, MG_SHOW_PLAIN, 0);
	mg_metric_declare(ms, "logps/rejected", MG_DPO_LOGP_REJECTED,
			  MG_METRIC_COUNT, MG_SHOW_PLAIN, 1);
	return 0;
}

/* logp, ref or dlogp ([n, 2], F32 or F64 with the compute dtype). */
static struct mg_tensor pairs(const struct llama *m, int which)
{
	const enum mg_dtype dt =
		m->ctx->compute_dtype == MG_F64 ? MG_F64 : MG_F32;
	int64_t shape[2] = {m->dpo.n, 2};
	size_t bytes = (size_t)(2 * m->dpo.n) * mg_dtype_size(dt);
	return mg_tensor_make((char *)m->dpo.buf.ptr + (size_t)which * bytes,
			      dt, m->ctx->dev->kind, 2, shape);
}

enum { LOGP = 0, REF, DLOGP };

/* Each row must hold a pair: label tokens in its first document and in
 * a second one, none after that (padding only). Checked on a host copy
 * of the first batch of training and of evaluation (before any CUDA
 * graph is captured), and of every batch on the CPU. */
static int check_pairs(struct llama *m, struct mg_ctx *ctx,
		       const struct mg_batch *b)
{
	bool *done = &m->dpo.checked[ctx->training];
	if (*done && ctx->dev->kind != MG_DEV_CPU)
		return 0;
	const int64_t n = b->n, T = b->seq;
	if (b->labels.ndim != 2 || b->labels.shape[0] != n ||
	    b->labels.shape[1] != T || !b->lens_host)
		return mg_error("llama: objective = dpo needs token rows with "
				"labels [n, T] and their lengths");
	int32_t *pos = malloc((size_t)(n * T) * sizeof *pos),
		*lab = malloc((size_t)(n * T) * sizeof *lab);
	int rc = !pos || !lab ? mg_error("llama dpo: out of memory") : 0;
	if (!rc)
		rc = mg_copy_d2h(ctx, pos, b->positions.data,
				 (size_t)(n * T) * sizeof *pos) ||
		     mg_copy_d2h(ctx, lab, b->labels.data,
				 (size_t)(n * T) * sizeof *lab);
	for (int64_t i = 0; !rc && i < n; i++) {
		int64_t docs = 0, labeled[4] = {0, 0, 0, 0};
		for (int64_t t = 0; t < T; t++) {
			const int64_t r = i * T + t;
			/* padding past the row's length starts no document */
			if (pos[r] == 0 && t < b->lens_host[i])
				docs++;
			if (lab[r] >= 0)
				labeled[docs < 3 ? docs : 3]++;
		}
		if (docs != 2 || !labeled[1] || !labeled[2] || labeled[3])
			rc = mg_error(
				"llama: objective = dpo: row %lld of "
				"the batch is not a preference pair (%lld "
				"document(s); chosen %lld, rejected "
				"%lld response tokens): use the instruct "
				"dataset with format = preference",
				(long long)(b->global_offset + i),
				(long long)docs, (long long)labeled[1],
				(long long)labeled[2]);
	}
	free(pos);
	free(lab);
	if (!rc)
		*done = true;
	return rc;
}

int llama_dpo_unit(const struct llama *m, int u)
{
	if (!m->dpo.copy || !m->dpo.ref_pass)
		return u;
	return u + LLAMA_UNIT_HEAD(&m->c) + 1;
}

int llama_dpo_forward(struct llama *m, struct mg_ctx *ctx,
		      const struct mg_batch *b, struct mg_tensor *metrics)
{
	struct llama_dpo *d = &m->dpo;
	m->have_fwd = false;
	if (check_pairs(m, ctx, b))
		return -1;
	const size_t bytes = 3 * (size_t)(2 * b->n) * sizeof(double);
	if (mg_buf_reserve(ctx, &d->buf, bytes, MG_MEM_ACTIVATIONS))
		return mg_error_prefix("llama dpo buffers");
	d->n = b->n;
	/* The reference: the adapter table emptied (every projection its
	 * frozen GEMM), acquired for evaluation, nothing kept. */
	struct llama_lora *lo = &m->lora;
	int ia[LT_COUNT], ib[LT_COUNT];
	memcpy(ia, lo->ia, sizeof ia);
	memcpy(ib, lo->ib, sizeof ib);
	for (int t = 0; t < LT_COUNT; t++)
		lo->ia[t] = lo->ib[t] = -1;
	const bool training = ctx->training;
	ctx->training = false;
	d->ref_pass = true;
	int rc = llama_forward(m, ctx, b, metrics);
	d->ref_pass = false;
	ctx->training = training;
	memcpy(lo->ia, ia, sizeof ia);
	memcpy(lo->ib, ib, sizeof ib);
	if (rc)
		return mg_error_prefix("dpo reference pass");
	return llama_forward(m, ctx, b, metrics);
}

int llama_dpo_head(struct llama *m, struct mg_ctx *ctx,
		   const struct mg_tensor *logits, const struct mg_batch *b,
		   struct mg_tensor *metrics)
{
	struct llama_dpo *d = &m->dpo;
	if (d->ref_pass) {
		struct mg_tensor ref = pairs(m, REF);
		return mg_op_pair_logprob(ctx, logits, &b->labels,
					  &b->positions, &ref);
	}
	struct mg_tensor lp = pairs(m, LOGP), ref = pairs(m, REF);
	return mg_op_pair_logprob(ctx, logits, &b->labels, &b->positions,
				  &lp) ||
	       mg_op_dpo_loss(ctx, &lp, &ref, d->beta, d->eps, metrics);
}

int llama_dpo_head_backward(struct llama *m, struct mg_ctx *ctx,
			    struct mg_tensor *logits)
{
	struct llama_dpo *d = &m->dpo;
	struct mg_tensor lp = pairs(m, LOGP), ref = pairs(m, REF),
			 dlp = pairs(m, DLOGP);
	return mg_op_dpo_loss_backward(ctx, &lp, &ref, d->beta, d->eps,
				       &ctx->grad_scale, &dlp) ||
	       mg_op_pair_logprob_backward(ctx, logits, &m->labels,
					   &m->positions, &dlp, logits);
}
