/*
 * step.c - one training step's device work (every micro-batch's
 * transform, forward and backward, then the strategy's reductions and
 * optimizer), run eagerly or captured once as a CUDA graph and replayed
 * while the step's shape repeats and no buffer it captured was freed.
 */
#include <string.h>

#include "engine/trainer.h"
#ifdef MG_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

/*
 * The device work of one step: for each micro-batch transform, forward
 * and backward (gradients accumulate), then reductions and optimizer. No
 * host synchronisation happens in here (every per-step value is read
 * from device memory), so it can be captured once as a CUDA graph and
 * replayed.
 */
static int step_compute(struct mg_trainer *t, const struct mg_plan *ps,
			struct mg_step_report *sr)
{
	struct mg_ctx *ctx = &t->r.ctx;
	void *strat = t->r.inst[MG_SEC_STRATEGY];
	if (t->r.strat->begin_step(strat))
		return mg_error_prefix("strategy begin_step");
	/* Token-weighted loss over several ranks: the step's label tokens
	 * summed over ranks, then grad_scale = loss scale / tokens, all on
	 * the device before the first backward. */
	if (t->r.mspec.per_token && ctx->world > 1) {
		int64_t one = 1;
		struct mg_tensor cnt = mg_tensor_make(t->count_dev.ptr, MG_F32,
						      ctx->dev->kind, 1, &one);
		if (t->r.comm->all_reduce(t->r.comm, t->count_dev.ptr, 1,
					  MG_F32, MG_REDUCE_SUM) ||
		    t->r.comm->wait(t->r.comm) ||
		    mg_op_reciprocal_scale(ctx, &cnt, t->loss_scale,
					   &ctx->grad_scale))
			return mg_error_prefix("label-token count");
	}
	int64_t offset = 0; /* of micro-batch m in the step's global batch */
	for (int m = 0; m < t->r.accum; m++) {
		const struct mg_plan *p = &ps[m];
		struct mg_batch batch;
		struct mg_tensor mrow = mg_metrics_row(t, m);
		ctx->micro = m;
		mg_timer_start(ctx, MG_T_FORWARD);
		if (mg_input_transform(t, m, p->compute_begin, p->compute_count,
				       &batch))
			return -1;
		batch.global_offset = offset + p->global_offset;
		offset += p->global_count;
		int rc = t->r.model->forward(t->r.inst[MG_SEC_MODEL], ctx,
					     &batch, &mrow);
		mg_timer_stop(ctx, MG_T_FORWARD);
		if (rc)
			return mg_error_prefix("forward at step %lld",
					       (long long)ctx->step);
		/* The step's metrics over all ranks, reduced while the last
		 * backward runs (the strategy's wait or ours below orders
		 * it). */
		if (m + 1 == t->r.accum && ctx->world > 1 &&
		    t->r.comm->all_reduce(t->r.comm, t->metrics.ptr,
					  t->r.accum * MG_METRIC_MAX, MG_F32,
					  MG_REDUCE_SUM))
			return mg_error_prefix("metrics all-reduce");
		mg_timer_start(ctx, MG_T_BACKWARD);
		mg_strategy_bind_reset(&t->r.sbind);
		rc = t->r.model->backward(t->r.inst[MG_SEC_MODEL], ctx);
		mg_timer_stop(ctx, MG_T_BACKWARD);
		/* The strategy's grads_ready failing is the strategy's. */
		if (mg_strategy_bind_check(&t->r.sbind, (long long)ctx->step))
			return -1;
		if (rc)
			return mg_error_prefix("backward at step %lld",
					       (long long)ctx->step);
	}
	ctx->micro = 0;
	mg_timer_start(ctx, MG_T_OPTIM);
	int rc = t->r.strat->step(strat, &t->r.hp, sr);
	if (!rc && ctx->world > 1)
		rc = t->r.comm->wait(t->r.comm);
	mg_timer_stop(ctx, MG_T_OPTIM);
	if (rc)
		return mg_error_prefix("optimizer step %lld",
				       (long long)ctx->step);
	return 0;
}

#ifdef MG_HAVE_CUDA
/* Does key (3 values a micro-batch: slice and token length) describe
 * these micro-batches? With `set`, make it so. */
static bool graph_key_same(struct mg_trainer *t, int64_t *key,
			   const struct mg_plan *ps, bool set)
{
	bool same = true;
	for (int m = 0; m < t->r.accum; m++) {
		int64_t k[3] = {ps[m].compute_begin, ps[m].compute_count,
				t->in.slot[m].seq};
		for (int j = 0; j < 3; j++) {
			same = same && key[3 * m + j] == k[j];
			if (set)
				key[3 * m + j] = k[j];
		}
	}
	return same;
}
#endif

/* Run step_compute eagerly, or as a CUDA graph once the first steps have
 * reserved every buffer and chosen every algorithm. */
int mg_step_launch(struct mg_trainer *t, int64_t step, const struct mg_plan *ps,
		   struct mg_step_report *sr)
{
#ifdef MG_HAVE_CUDA
	struct mg_device *dev = t->r.ctx.dev;
	/* A graph replays the addresses it captured. An eager step since
	 * (a longer token batch, evaluation, a checkpoint) that freed any
	 * buffer - a model's arena growing through mg_buf_reserve frees
	 * the old one - may have taken some away: drop the graph and
	 * capture again once the shape repeats. */
	if (t->graph && mg_buf_frees() != t->graph_frees) {
		mg_cuda_graph_free(t->graph);
		t->graph = NULL;
	}
	if (t->use_graph && mg_buf_windows_live()) {
		mg_info("run.cuda_graph: steps run eagerly while copy-engine "
			"windows are lent (strategy.copy_engine): NCCL's "
			"copy-engine all-gathers hung when replayed from a "
			"captured step");
		t->use_graph = false;
		mg_cuda_graph_free(t->graph); /* captured before the windows */
		t->graph = NULL;
	}
	bool same = t->graph && graph_key_same(t, t->graph_key, ps, false);
	/* Capture only a shape seen twice in a row: ragged token batches
	 * change shape most steps, and a capture costs more than the eager
	 * step it replaces. */
	bool repeat =
		graph_key_same(t, t->graph_key + 3 * t->r.accum, ps, true);
	if (t->use_graph && !same && repeat && step >= t->start_step + 2) {
		mg_cuda_graph_free(t->graph);
		t->graph = NULL;
		const uint64_t frees = mg_buf_frees();
		if (mg_cuda_graph_begin(dev))
			return -1;
		t->r.comm->capture(t->r.comm, MG_COMM_CAPTURE_BEGIN);
		mg_stats_capture(&t->r.stats, true, false);
		int rc = step_compute(t, ps, sr);
		void *g = NULL;
		int rc2 = mg_cuda_graph_end(dev, &g);
		t->r.comm->capture(t->r.comm, rc || rc2 ? MG_COMM_CAPTURE_ABORT
							: MG_COMM_CAPTURE_END);
		mg_stats_capture(&t->r.stats, false, !rc && !rc2);
		if (rc || rc2) {
			/* Something in the step cannot be captured: say
			 * what, and go on without graphs. */
			mg_warn("run.cuda_graph: the step could not be "
				"captured (%s); running without CUDA graphs",
				mg_last_error());
			mg_cuda_graph_free(g);
			t->use_graph = false;
			return step_compute(t, ps, sr);
		}
		if (mg_buf_frees() != frees) {
			/* A buffer was freed (and another taken) while
			 * capturing: kernels captured before that point
			 * would replay its old address. Run this step
			 * eagerly; the next repeat captures with every
			 * buffer in place. */
			mg_cuda_graph_free(g);
			return step_compute(t, ps, sr);
		}
		mg_cuda_timers_mark_captured(dev);
		t->graph = g;
		t->graph_frees = frees;
		graph_key_same(t, t->graph_key, ps, true);
		mg_info("run.cuda_graph: step captured at step %lld; replaying",
			(long long)step);
		same = true;
	}
	if (t->use_graph && same) {
		mg_cuda_timers_arm(dev);
		t->r.comm->capture(t->r.comm, MG_COMM_REPLAY);
		mg_stats_replay(&t->r.stats);
		return mg_cuda_graph_launch(dev, t->graph);
	}
#else
	(void)step;
#endif
	return step_compute(t, ps, sr);
}

void mg_step_graph_drop(struct mg_trainer *t)
{
#ifdef MG_HAVE_CUDA
	mg_cuda_graph_free(t->graph);
#endif
	t->graph = NULL;
}
