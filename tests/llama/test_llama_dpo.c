/*
 * test_llama_dpo.c - the llama plugin's objective = dpo through the real
 * contract (tests/common/test_strategy.h), in fp64 on the CPU.
 *
 *   test_llama_dpo PLUGIN.so TEST
 *
 * Tests: direct (the DPO loss and every metric equal a computation in
 * this file from separate forwards of each chosen and rejected sequence
 * through the SFT objective: the policy with its adapters, the reference
 * with B = 0, which is the base exactly), step0 (fresh adapters: the
 * policy is the reference, loss log 2 and rewards 0 exactly), gradcheck
 * (central differences of the mean DPO loss over pairs against backward,
 * on every LoRA tensor, with and without label smoothing), ops (the pair
 * log-probabilities against the token loss on each document, the loss
 * and its gradient against the formulas and finite differences, small
 * beta), refuse (full fine-tuning and rows that are not pairs),
 * buffers (what a CUDA graph of the step relies on: training steps of one
 * shape move no buffer; a longer batch grows the arena and the backward
 * buffers through mg_buf_reserve, which frees the old ones and so moves
 * mg_buf_frees(), the count the trainer checks before replaying).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test_strategy.h"
#include "../common/test_util.h"
#include "config/config.h"
#include "llama.h"
#include "llama_plugin.h"
#include "mg/mg.h"

struct env {
	struct mg_device dev;
	struct mg_ctx ctx;
	float grad_scale;
	void *model;
	struct tstrat st;
	struct mg_metric_spec ms;
};

static int env_open(struct env *e, const char *lines)
{
	memset(e, 0, sizeof *e);
	e->dev.kind = MG_DEV_CPU;
	e->dev.threads = 2;
	e->ctx.struct_size = sizeof e->ctx;
	e->ctx.world = 1;
	e->ctx.micro_count = 1;
	e->ctx.dev = &e->dev;
	e->ctx.compute_dtype = e->ctx.master_dtype = MG_F64;
	e->ctx.seed = 5;
	e->ctx.grad_scale =
		mg_tensor_make(&e->grad_scale, MG_F32, MG_DEV_CPU, 0, NULL);
	e->grad_scale = 1;
	struct mg_opts *o = ts_opts(P->options, lines, false);
	if (!o)
		return -1;
	int rc = P->create(o, &e->ctx, &e->model);
	mg_opts_free(o);
	if (rc)
		return -1;
	e->ctx.model = e->model;
	e->ctx.model_ops = M;
	if (M->metrics(e->model, &e->ms) || ts_setup(&e->st, &e->ctx, M)) {
		fail("setup: %s", mg_last_error());
		return -1;
	}
	return 0;
}

static void env_close(struct env *e)
{
	ts_free(&e->st);
	if (e->model)
		P->destroy(e->model);
}

static const char base[] = "vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
			   "num_kv_heads = 2\nintermediate_size = 24\n"
			   "num_layers = 2\ntie_embeddings = no\n"
			   "lora_rank = 3\nlora_alpha = 6\n"
			   "lora_targets = q,v,o,up,head\n";

/* Three pairs in rows of T = 16: [prompt + chosen | prompt + rejected],
 * then padding. Document lengths (prompt, response) per row. */
#define PN 3
#define PT 16
static const int plen[PN][2] = {{3, 4}, {2, 2}, {4, 3}};
static const int rlen[PN][2] = {{4, 3}, {5, 2}, {1, 5}};

struct pbatch {
	struct mg_batch b;
	int32_t ids[PN * PT], labels[PN * PT], pos[PN * PT], lens[PN];
	int start[PN][2], len[PN][2]; /* each document */
};

static void pbatch_make(struct pbatch *t)
{
	memset(t, 0, sizeof *t);
	int64_t s2[2] = {PN, PT}, s1[1] = {PN};
	for (int i = 0; i < PN; i++) {
		int w = 0;
		for (int d = 0; d < 2; d++) {
			const int n = plen[i][d] + rlen[i][d];
			t->start[i][d] = w;
			t->len[i][d] = n;
			for (int j = 0; j < n; j++) {
				/* the prompt is the same in both documents */
				int v = j < plen[i][d]
						? 3 + 5 * i + j
						: 7 + 11 * d + 3 * i + 5 * j;
				t->ids[i * PT + w + j] = v % 32;
				t->pos[i * PT + w + j] = j;
			}
			for (int j = 0; j < n; j++)
				t->labels[i * PT + w + j] =
					j + 1 < n && j + 1 >= plen[i][d]
						? t->ids[i * PT + w + j + 1]
						: MG_IGNORE_INDEX;
			w += n;
		}
		t->lens[i] = w;
		for (int j = w; j < PT; j++)
			t->labels[i * PT + j] = MG_IGNORE_INDEX;
	}
	t->b.input = mg_tensor_make(t->ids, MG_I32, MG_DEV_CPU, 2, s2);
	t->b.labels = mg_tensor_make(t->labels, MG_I32, MG_DEV_CPU, 2, s2);
	t->b.positions = mg_tensor_make(t->pos, MG_I32, MG_DEV_CPU, 2, s2);
	t->b.lens = mg_tensor_make(t->lens, MG_I32, MG_DEV_CPU, 1, s1);
	t->b.lens_host = t->lens;
	t->b.n = PN;
	t->b.seq = PT;
}

/* A forward's metric sums (training mode as given). */
static int forward(struct env *e, const struct mg_batch *b, bool training,
		   double *m)
{
	int64_t nm = MG_METRIC_MAX;
	memset(m, 0, MG_METRIC_MAX * sizeof *m);
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	e->ctx.training = training;
	int rc = M->forward(e->model, &e->ctx, b, &mt);
	ts_check_step(&e->st, false);
	return rc;
}

static bool is_lora_b(const char *name)
{
	return strstr(name, ".lora_B.") != NULL;
}

/* Every lora_B to small random values (scale 0: zero, a fresh B). */
static void set_b(struct env *e, double scale)
{
	for (int i = 0; i < e->st.spec.nparams; i++) {
		if (!is_lora_b(e->st.spec.params[i].name))
			continue;
		struct mg_tensor *p = &e->st.p[i];
		for (int64_t j = 0; j < mg_tensor_numel(p); j++)
			((double *)p->data)[j] =
				scale *
				mg_rng_normal(41 + (uint64_t)i, (uint64_t)j);
	}
}

/* log p of document d of row i of t under an SFT model: that document
 * alone in a row of its own, minus its summed token loss. */
static double doc_logp(struct env *sft, const struct pbatch *t, int i, int d)
{
	int32_t ids[PT] = {0}, lab[PT], pos[PT] = {0}, len = t->len[i][d];
	for (int j = 0; j < PT; j++)
		lab[j] = MG_IGNORE_INDEX;
	const int a = i * PT + t->start[i][d];
	memcpy(ids, t->ids + a, (size_t)len * 4);
	memcpy(lab, t->labels + a, (size_t)len * 4);
	memcpy(pos, t->pos + a, (size_t)len * 4);
	int64_t s2[2] = {1, PT}, s1[1] = {1};
	struct mg_batch b = {
		.input = mg_tensor_make(ids, MG_I32, MG_DEV_CPU, 2, s2),
		.labels = mg_tensor_make(lab, MG_I32, MG_DEV_CPU, 2, s2),
		.positions = mg_tensor_make(pos, MG_I32, MG_DEV_CPU, 2, s2),
		.lens = mg_tensor_make(&len, MG_I32, MG_DEV_CPU, 1, s1),
		.lens_host = &len,
		.n = 1,
		.seq = PT,
	};
	double m[MG_METRIC_MAX];
	if (forward(sft, &b, false, m)) {
		fail("sft forward: %s", mg_last_error());
		return NAN;
	}
	return -m[MG_METRIC_LOSS_SUM];
}

static double nls(double x) /* -log sigmoid(x) */
{
	return log1p(exp(-x));
}

/* The DPO metric sums from separate SFT forwards. */
static void direct(struct env *sft, const struct pbatch *t, double beta,
		   double eps, double bscale, double *m)
{
	double pi[PN][2], ref[PN][2];
	set_b(sft, bscale);
	for (int i = 0; i < PN; i++)
		for (int d = 0; d < 2; d++)
			pi[i][d] = doc_logp(sft, t, i, d);
	set_b(sft, 0); /* adapters contribute nothing: the base */
	for (int i = 0; i < PN; i++)
		for (int d = 0; d < 2; d++)
			ref[i][d] = doc_logp(sft, t, i, d);
	memset(m, 0, MG_METRIC_MAX * sizeof *m);
	for (int i = 0; i < PN; i++) {
		double rc = beta * (pi[i][0] - ref[i][0]),
		       rr = beta * (pi[i][1] - ref[i][1]);
		m[MG_METRIC_LOSS_SUM] +=
			(1 - eps) * nls(rc - rr) + eps * nls(rr - rc);
		m[MG_METRIC_CORRECT] += rc > rr;
		m[MG_METRIC_COUNT] += 1;
		m[MG_DPO_REWARD_CHOSEN] += rc;
		m[MG_DPO_REWARD_REJECTED] += rr;
		m[MG_DPO_MARGIN] += rc - rr;
		m[MG_DPO_LOGP_CHOSEN] += pi[i][0];
		m[MG_DPO_LOGP_REJECTED] += pi[i][1];
	}
}

static void check_close(const char *what, double got, double want, double tol)
{
	if (!(fabs(got - want) <= tol * (1 + fabs(want))))
		fail("%s: %.15g, expected %.15g", what, got, want);
}

/* Returns the pairs counted correct. */
static double direct_case(double beta, double eps, double bscale)
{
	char lines[1024];
	struct env dpo, sft;
	snprintf(lines, sizeof lines,
		 "%sobjective = dpo\ndpo_beta = %g\ndpo_label_smoothing = %g\n",
		 base, beta, eps);
	if (env_open(&dpo, lines) || env_open(&sft, base)) {
		fail("direct: %s", mg_last_error());
		return 0;
	}
	struct pbatch t;
	pbatch_make(&t);
	set_b(&dpo, bscale);
	double got[MG_METRIC_MAX], want[MG_METRIC_MAX];
	CHECK(dpo.ms.nsums == MG_DPO_NSUMS && dpo.ms.per_token == 0);
	if (forward(&dpo, &t.b, false, got))
		fail("dpo forward: %s", mg_last_error());
	direct(&sft, &t, beta, eps, bscale, want);
	static const char *names[MG_DPO_NSUMS] = {
		"loss",		  "correct",	      "count",
		"rewards/chosen", "rewards/rejected", "rewards/margins",
		"logps/chosen",	  "logps/rejected"};
	for (int k = 0; k < MG_DPO_NSUMS; k++)
		check_close(names[k], got[k], want[k], 1e-12);
	/* Not trivially equal: the adapters moved the rewards. */
	CHECK(fabs(want[MG_DPO_MARGIN]) > 1e-3);
	/* A training forward gives the same sums. */
	double tr[MG_METRIC_MAX];
	if (forward(&dpo, &t.b, true, tr) || M->backward(dpo.model, &dpo.ctx))
		fail("training step: %s", mg_last_error());
	ts_check_step(&dpo.st, true);
	for (int k = 0; k < MG_DPO_NSUMS; k++)
		CHECK(tr[k] == got[k]);
	printf("direct beta %g eps %g B %g: loss %.12g (direct %.12g), "
	       "accuracy %g/%d, margin %.6g\n",
	       beta, eps, bscale, got[0] / PN, want[0] / PN,
	       got[MG_METRIC_CORRECT], PN, got[MG_DPO_MARGIN] / PN);
	env_close(&dpo);
	env_close(&sft);
	return got[MG_METRIC_CORRECT];
}

static void test_direct(void)
{
	double correct = direct_case(0.1, 0, 0.4) +
			 direct_case(0.5, 0.2, -0.4) + direct_case(3, 0, -0.7) +
			 direct_case(1, 0, 0.9);
	/* some pairs on either side of the accuracy test */
	CHECK(correct > 0 && correct < 4 * PN);
}

static void test_step0(void)
{
	char lines[1024];
	struct env e;
	snprintf(lines, sizeof lines, "%sobjective = dpo\ndpo_beta = 0.7\n",
		 base);
	if (env_open(&e, lines)) {
		fail("step0: %s", mg_last_error());
		return;
	}
	struct pbatch t;
	pbatch_make(&t);
	double m[MG_METRIC_MAX];
	if (forward(&e, &t.b, true, m))
		fail("forward: %s", mg_last_error());
	/* B = 0: the policy's log-probs are the reference's bit for bit. */
	CHECK(fabs(m[MG_METRIC_LOSS_SUM] / PN - log(2.0)) < 1e-15);
	CHECK(m[MG_DPO_REWARD_CHOSEN] == 0 && m[MG_DPO_REWARD_REJECTED] == 0);
	CHECK(m[MG_DPO_MARGIN] == 0 && m[MG_METRIC_CORRECT] == 0);
	CHECK(m[MG_METRIC_COUNT] == PN && m[MG_DPO_LOGP_CHOSEN] < 0);
	/* ... and the gradient still reaches the adapters (-beta / 2 per
	 * log-prob): B gets one. */
	e.grad_scale = 1.0f / PN;
	ts_zero_grads(&e.st);
	if (M->backward(e.model, &e.ctx))
		fail("backward: %s", mg_last_error());
	double gb = 0;
	for (int i = 0; i < e.st.spec.nparams; i++)
		if (e.st.g[i].data && is_lora_b(e.st.spec.params[i].name))
			for (int64_t j = 0; j < mg_tensor_numel(&e.st.g[i]);
			     j++)
				gb += fabs(((double *)e.st.g[i].data)[j]);
	CHECK(gb > 1e-6);
	printf("step0: loss %.17g (log 2 = %.17g), |dB| %.3g\n",
	       m[MG_METRIC_LOSS_SUM] / PN, log(2.0), gb);
	env_close(&e);
}

static double mean_loss(struct env *e, const struct mg_batch *b)
{
	double m[MG_METRIC_MAX];
	if (forward(e, b, false, m)) {
		fail("forward: %s", mg_last_error());
		return NAN;
	}
	return m[MG_METRIC_LOSS_SUM] / m[MG_METRIC_COUNT];
}

/* One training forward and backward from zeroed gradients, checked
 * against the unit protocol; its metric sums into m (or dropped). */
static int train_step(struct env *e, const struct mg_batch *b, double *m)
{
	double own[MG_METRIC_MAX];
	ts_zero_grads(&e->st);
	if (forward(e, b, true, m ? m : own) ||
	    M->backward(e->model, &e->ctx)) {
		fail("train step: %s", mg_last_error());
		return -1;
	}
	ts_check_step(&e->st, true);
	return 0;
}

/* Every trained tensor's gradient from the step just run (times gfix)
 * against central differences of the mean loss, at `per` elements of
 * each drawn with `seed`; returns the values checked, the worst relative
 * error and the tensors in *worst and *tensors. */
static int fd_check(struct env *e, const struct mg_batch *b, double gfix,
		    int per, uint64_t seed, const char *what, double *worst,
		    int *tensors)
{
	int checked = 0;
	*worst = 0;
	*tensors = 0;
	for (int i = 0; i < e->st.spec.nparams; i++) {
		struct mg_tensor *p = &e->st.p[i], *g = &e->st.g[i];
		if (!g->data)
			continue; /* frozen */
		(*tensors)++;
		const int64_t n = mg_tensor_numel(p);
		for (int k = 0; k < per; k++) {
			int64_t j = (int64_t)(mg_rng_u64(seed + (uint64_t)i,
							 (uint64_t)k) %
					      (uint64_t)n);
			double *w = (double *)p->data + j, w0 = *w, h = 1e-5;
			*w = w0 + h;
			double lp = mean_loss(e, b);
			*w = w0 - h;
			double lm = mean_loss(e, b);
			*w = w0;
			double fd = (lp - lm) / (2 * h);
			double an = ((double *)g->data)[j] * gfix;
			double err = fabs(fd - an) / (fabs(fd) + 1e-7);
			*worst = err > *worst ? err : *worst;
			if (err > 1e-5)
				fail("%s: %s[%lld]: backward %.10g, finite "
				     "difference %.10g",
				     what, e->st.spec.params[i].name,
				     (long long)j, an, fd);
			checked++;
		}
	}
	return checked;
}

static void gradcheck(double beta, double eps)
{
	char lines[1024];
	struct env e;
	snprintf(lines, sizeof lines,
		 "%sobjective = dpo\ndpo_beta = %g\ndpo_label_smoothing = %g\n",
		 base, beta, eps);
	if (env_open(&e, lines)) {
		fail("gradcheck: %s", mg_last_error());
		return;
	}
	set_b(&e, 0.4);
	struct pbatch t;
	pbatch_make(&t);
	double m[MG_METRIC_MAX];
	e.grad_scale = 1.0f / PN;
	if (train_step(&e, &t.b, m)) {
		env_close(&e);
		return;
	}
	char what[64];
	snprintf(what, sizeof what, "gradcheck beta %g eps %g", beta, eps);
	double worst = 0;
	int tensors = 0;
	const int checked =
		fd_check(&e, &t.b, (1.0 / PN) / (double)e.grad_scale, 4, 7,
			 what, &worst, &tensors);
	CHECK(tensors == 2 * 2 * 4 + 2); /* q, v, o, up per layer; head */
	printf("gradcheck beta %g eps %g: %d values of %d LoRA tensors, worst "
	       "relative error %.2e\n",
	       beta, eps, checked, tensors, worst);
	env_close(&e);
}

static void test_gradcheck(void)
{
	gradcheck(0.1, 0);
	gradcheck(2, 0.25);
}

/* ---- the ops on their own ------------------------------------------ */

static struct mg_device cpu_dev = {.kind = MG_DEV_CPU, .threads = 2};
static struct mg_ctx cpu_ctx = {.struct_size = sizeof(struct mg_ctx),
				.dev = &cpu_dev,
				.compute_dtype = MG_F64};

static void test_ops(void)
{
	/* pair_logprob: each document's sum is minus the token loss over
	 * that document's rows. */
	struct pbatch t;
	pbatch_make(&t);
	enum { K = 32 };
	static double lg[PN * PT * K], dl[PN * PT * K], dx[PN * PT * K];
	for (int i = 0; i < PN * PT * K; i++)
		lg[i] = 3 * mg_rng_normal(5, (uint64_t)i);
	int64_t s2[2] = {PN * PT, K}, sp[2] = {PN, 2}, sm = MG_METRIC_MAX;
	struct mg_tensor L = mg_tensor_make(lg, MG_F64, MG_DEV_CPU, 2, s2);
	double lp[PN * 2], ref[PN * 2], dlp[PN * 2], m[MG_METRIC_MAX];
	struct mg_tensor LP = mg_tensor_make(lp, MG_F64, MG_DEV_CPU, 2, sp),
			 RF = mg_tensor_make(ref, MG_F64, MG_DEV_CPU, 2, sp),
			 DLP = mg_tensor_make(dlp, MG_F64, MG_DEV_CPU, 2, sp),
			 MT = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &sm);
	CHECK(!mg_op_pair_logprob(&cpu_ctx, &L, &t.b.labels, &t.b.positions,
				  &LP));
	for (int i = 0; i < PN; i++)
		for (int d = 0; d < 2; d++) {
			int64_t rows = d ? PT - t.start[i][1] : t.len[i][0];
			int64_t r0 = i * PT + t.start[i][d];
			int64_t sh[2] = {rows, K}, s1 = rows;
			struct mg_tensor sub = mg_tensor_make(
				lg + r0 * K, MG_F64, MG_DEV_CPU, 2, sh);
			struct mg_tensor lab = mg_tensor_make(
				t.labels + r0, MG_I32, MG_DEV_CPU, 1, &s1);
			double xm[MG_METRIC_N];
			int64_t nx = MG_METRIC_N;
			struct mg_tensor X =
				mg_tensor_make(xm, MG_F64, MG_DEV_CPU, 1, &nx);
			CHECK(!mg_op_softmax_xent(&cpu_ctx, &sub, &lab, &X));
			check_close("pair_logprob", lp[2 * i + d], -xm[0],
				    1e-13);
			CHECK(xm[MG_METRIC_COUNT] == rlen[i][d]);
		}
	/* pair_logprob_backward: dlogp times (onehot - softmax), against
	 * the token loss's backward scaled per document. */
	for (int i = 0; i < PN * 2; i++)
		dlp[i] = 0.5 + i;
	struct mg_tensor DL = mg_tensor_make(dl, MG_F64, MG_DEV_CPU, 2, s2),
			 DX = mg_tensor_make(dx, MG_F64, MG_DEV_CPU, 2, s2);
	CHECK(!mg_op_pair_logprob_backward(&cpu_ctx, &L, &t.b.labels,
					   &t.b.positions, &DLP, &DL));
	int64_t sl = PN * PT;
	struct mg_tensor LAB =
		mg_tensor_make(t.labels, MG_I32, MG_DEV_CPU, 1, &sl);
	CHECK(!mg_op_softmax_xent_backward(&cpu_ctx, &L, &LAB, NULL, &DX));
	double worst = 0;
	for (int r = 0; r < PN * PT; r++) {
		int i = r / PT, tt = r % PT, d = tt >= t.start[i][1];
		for (int k = 0; k < K; k++)
			worst = fmax(worst,
				     fabs(dl[r * K + k] +
					  dlp[2 * i + d] * dx[r * K + k]));
	}
	CHECK(worst < 1e-14);
	/* dpo_loss: the formula, and its backward by finite differences. */
	for (int i = 0; i < PN * 2; i++) {
		lp[i] = -10 - 3 * mg_rng_normal(8, (uint64_t)i);
		ref[i] = lp[i] + mg_rng_normal(9, (uint64_t)i);
	}
	const double betas[] = {0.1, 1.5}, epss[] = {0, 0.3};
	for (int bi = 0; bi < 2; bi++)
		for (int ei = 0; ei < 2; ei++) {
			const double beta = betas[bi], eps = epss[ei];
			CHECK(!mg_op_dpo_loss(&cpu_ctx, &LP, &RF, beta, eps,
					      &MT));
			double want = 0;
			for (int i = 0; i < PN; i++) {
				double z = beta *
					   ((lp[2 * i] - ref[2 * i]) -
					    (lp[2 * i + 1] - ref[2 * i + 1]));
				want -= (1 - eps) * log(1 / (1 + exp(-z))) +
					eps * log(1 / (1 + exp(z)));
			}
			check_close("dpo_loss", m[0], want, 1e-13);
			float scale = 0.5f;
			struct mg_tensor S = mg_tensor_make(
				&scale, MG_F32, MG_DEV_CPU, 0, NULL);
			CHECK(!mg_op_dpo_loss_backward(&cpu_ctx, &LP, &RF, beta,
						       eps, &S, &DLP));
			for (int i = 0; i < PN * 2; i++) {
				double w0 = lp[i], h = 1e-6, mp[MG_METRIC_MAX],
				       mm[MG_METRIC_MAX];
				struct mg_tensor A = mg_tensor_make(
					mp, MG_F64, MG_DEV_CPU, 1, &sm);
				struct mg_tensor B = mg_tensor_make(
					mm, MG_F64, MG_DEV_CPU, 1, &sm);
				lp[i] = w0 + h;
				mg_op_dpo_loss(&cpu_ctx, &LP, &RF, beta, eps,
					       &A);
				lp[i] = w0 - h;
				mg_op_dpo_loss(&cpu_ctx, &LP, &RF, beta, eps,
					       &B);
				lp[i] = w0;
				check_close("dpo_loss_backward", dlp[i],
					    0.5 * (mp[0] - mm[0]) / (2 * h),
					    1e-7);
			}
		}
	/* beta -> 0: loss log 2 per pair, d/dlogp_c = -beta (1 - 2 eps) / 2 */
	CHECK(!mg_op_dpo_loss(&cpu_ctx, &LP, &RF, 1e-9, 0.2, &MT));
	check_close("small beta loss", m[0] / PN, log(2.0), 1e-8);
	CHECK(!mg_op_dpo_loss_backward(&cpu_ctx, &LP, &RF, 1e-9, 0.2, NULL,
				       &DLP));
	check_close("small beta gradient", dlp[0], -1e-9 * 0.6 / 2, 1e-6);
	check_close("small beta gradient", dlp[1], 1e-9 * 0.6 / 2, 1e-6);
	/* label smoothing 0.5: no preference left; the gradient only pulls
	 * the margin z to 0: beta tanh(z / 2) / 2 */
	CHECK(!mg_op_dpo_loss_backward(&cpu_ctx, &LP, &RF, 1, 0.5, NULL, &DLP));
	const double z0 = (lp[0] - ref[0]) - (lp[1] - ref[1]);
	check_close("label smoothing 0.5", dlp[0], tanh(z0 / 2) / 2, 1e-12);
	/* bad arguments are named */
	CHECK(mg_op_dpo_loss(&cpu_ctx, &LP, &RF, 0, 0, &MT) != 0);
	CHECK_HAS(mg_last_error(), "beta");
	int64_t s3[2] = {PN, 3};
	struct mg_tensor bad = mg_tensor_make(lp, MG_F64, MG_DEV_CPU, 2, s3);
	CHECK(mg_op_pair_logprob(&cpu_ctx, &L, &t.b.labels, &t.b.positions,
				 &bad) != 0);
	CHECK_HAS(mg_last_error(), "need [3, 2]");
	printf("ops: pair log-probs, DPO loss and gradients as computed "
	       "here\n");
}

static void test_refuse(void)
{
	struct env e;
	char lines[1024];
	snprintf(lines, sizeof lines, "%sobjective = dpo\nkernels = flce\n",
		 base);
	CHECK(env_open(&e, lines) != 0);
	CHECK_HAS(mg_last_error(), "kernels flce does not keep them");
	snprintf(lines, sizeof lines, "%sobjective = dpo\n", base);
	if (env_open(&e, lines)) {
		fail("refuse: %s", mg_last_error());
		return;
	}
	/* A row of one document (SFT data) is not a pair. */
	struct pbatch t;
	pbatch_make(&t);
	for (int j = 0; j < PT; j++)
		t.pos[PT + j] = j;
	double m[MG_METRIC_MAX];
	CHECK(forward(&e, &t.b, true, m) != 0);
	CHECK_HAS(mg_last_error(), "row 1 of the batch is not a preference "
				   "pair (1 document(s)");
	CHECK_HAS(mg_last_error(), "format = preference");
	/* Three documents, or a document without response tokens. */
	pbatch_make(&t);
	t.pos[2 * PT + 9] = 0;
	CHECK(forward(&e, &t.b, false, m) != 0);
	CHECK_HAS(mg_last_error(), "row 2 of the batch");
	pbatch_make(&t);
	for (int j = t.start[0][1]; j < PT; j++)
		t.labels[j] = MG_IGNORE_INDEX;
	CHECK(forward(&e, &t.b, false, m) != 0);
	CHECK_HAS(mg_last_error(), "rejected 0 response tokens");
	env_close(&e);
}

/* The pairs of pbatch_make in rows of 2 PT tokens (a longer step). */
struct pbatch2 {
	struct mg_batch b;
	int32_t ids[PN * 2 * PT], labels[PN * 2 * PT], pos[PN * 2 * PT];
};

static void pbatch_long(const struct pbatch *t, struct pbatch2 *u)
{
	int64_t s2[2] = {PN, 2 * PT};
	for (int i = 0; i < PN; i++)
		for (int j = 0; j < 2 * PT; j++) {
			const bool in = j < PT;
			u->ids[i * 2 * PT + j] = in ? t->ids[i * PT + j] : 0;
			u->labels[i * 2 * PT + j] =
				in ? t->labels[i * PT + j] : MG_IGNORE_INDEX;
			u->pos[i * 2 * PT + j] = in ? t->pos[i * PT + j] : 0;
		}
	u->b = t->b;
	u->b.input = mg_tensor_make(u->ids, MG_I32, MG_DEV_CPU, 2, s2);
	u->b.labels = mg_tensor_make(u->labels, MG_I32, MG_DEV_CPU, 2, s2);
	u->b.positions = mg_tensor_make(u->pos, MG_I32, MG_DEV_CPU, 2, s2);
	u->b.seq = 2 * PT;
}

/* One training step's model work: forward (reference and policy) and
 * backward. */
struct where {
	void *arena, *work, *dpo;
};

static struct where where_now(const struct env *e)
{
	const struct llama *m = e->model;
	return (struct where){m->arena.ptr, m->work.ptr, m->dpo.buf.ptr};
}

static bool same_where(struct where a, struct where b)
{
	return a.arena == b.arena && a.work == b.work && a.dpo == b.dpo;
}

static void test_buffers(void)
{
	/* the counter itself: a reserve that grows frees, one that fits
	 * does not */
	struct mg_device dev = {.kind = MG_DEV_CPU, .threads = 1};
	struct mg_ctx ctx = {.struct_size = sizeof ctx, .dev = &dev};
	struct mg_buf b = {0};
	uint64_t f0 = mg_buf_frees();
	CHECK(mg_buf_reserve(&ctx, &b, 64, MG_MEM_OTHER) == 0);
	CHECK(mg_buf_frees() == f0);
	CHECK(mg_buf_reserve(&ctx, &b, 32, MG_MEM_OTHER) == 0);
	CHECK(mg_buf_frees() == f0);
	CHECK(mg_buf_reserve(&ctx, &b, 4096, MG_MEM_OTHER) == 0);
	CHECK(mg_buf_frees() == f0 + 1);
	mg_buf_free(&ctx, &b);
	CHECK(mg_buf_frees() == f0 + 2);

	char lines[1024];
	struct env e;
	snprintf(lines, sizeof lines, "%sobjective = dpo\n", base);
	if (env_open(&e, lines)) {
		fail("buffers: %s", mg_last_error());
		return;
	}
	struct pbatch t;
	struct pbatch2 u;
	pbatch_make(&t);
	pbatch_long(&t, &u);
	/* Two eager steps, then the one a graph would capture: nothing
	 * moves (the reference pass, adapters off, lays out a smaller
	 * arena, which the policy pass then holds). */
	if (train_step(&e, &t.b, NULL) || train_step(&e, &t.b, NULL))
		goto out;
	struct where w2 = where_now(&e);
	if (train_step(&e, &t.b, NULL))
		goto out;
	CHECK(same_where(w2, where_now(&e)));
	/* A longer batch: the arena and backward buffers grow, their old
	 * memory freed - a graph captured above would replay it. */
	uint64_t f1 = mg_buf_frees();
	if (train_step(&e, &u.b, NULL))
		goto out;
	struct where wl = where_now(&e);
	const struct llama *m = e.model;
	CHECK(m->T == 2 * PT);
	CHECK(mg_buf_frees() >= f1 + 2);
	CHECK(wl.dpo == w2.dpo); /* per pair: the same count of pairs */
	/* Back to the short shape: the grown buffers serve it, in place. */
	if (train_step(&e, &t.b, NULL) || train_step(&e, &t.b, NULL))
		goto out;
	CHECK(same_where(wl, where_now(&e)));
	printf("buffers: a longer batch freed %llu buffer(s)\n",
	       (unsigned long long)(mg_buf_frees() - f1));
out:
	env_close(&e);
}

/* ---- full fine-tuning: the frozen reference copy -------------------- */

static const char full_base[] =
	"vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
	"num_kv_heads = 2\nintermediate_size = 24\nnum_layers = 2\n"
	"objective = dpo\n";

/* Full fine-tuning under DPO: a "ref." unit for every unit, its
 * parameters frozen and equal to the start; step 0 is log 2 with zero
 * rewards; once the policy moves (its weights perturbed) the rewards
 * move and the copies do not, and the loss gradient of every trained
 * tensor matches finite differences in fp64. */
static void full_case(bool tied)
{
	char lines[1024];
	struct env e;
	snprintf(lines, sizeof lines,
		 "%sdpo_beta = 0.5\ndpo_label_smoothing = 0.1\n"
		 "tie_embeddings = %s\n",
		 full_base, tied ? "yes" : "no");
	if (env_open(&e, lines)) {
		fail("full: %s", mg_last_error());
		return;
	}
	/* the model's 4 units (embedding, 2 layers, head), then a "ref."
	 * unit for each: the same parameters, frozen, the same values */
	const struct mg_model_spec *sp = &e.st.spec;
	int own = 0, refs = 0;
	CHECK(sp->nunits == 8);
	for (int u = 0; u < sp->nunits && sp->nunits == 8; u++) {
		const struct mg_unit_decl *ud = &sp->units[u];
		const bool ref = u >= 4;
		if (ref) {
			const struct mg_unit_decl *base = &sp->units[u - 4];
			CHECK(!strncmp(ud->name, "ref.", 4) &&
			      !strcmp(ud->name + 4, base->name) &&
			      ud->nparams == base->nparams);
		}
		for (int k = 0; k < ud->nparams; k++) {
			const int i = ud->first_param + k;
			const struct mg_param_decl *d = &sp->params[i];
			if (!ref) {
				own++;
				CHECK(d->flags & MG_P_TRAIN);
				continue;
			}
			refs++;
			const int j = sp->units[u - 4].first_param + k;
			CHECK(!(d->flags & MG_P_TRAIN) && !e.st.g[i].data);
			CHECK(!strcmp(sp->params[j].name, d->name) &&
			      !memcmp(e.st.p[i].data, e.st.p[j].data,
				      mg_tensor_bytes(&e.st.p[i])));
		}
	}
	/* embedding, 2 layers of 9, final norm and the untied head (the tied
	 * one reads the embedding's copy) */
	const int want = tied ? 20 : 21;
	CHECK(own == want && refs == want);
	struct pbatch t;
	pbatch_make(&t);
	double m[MG_METRIC_MAX];
	if (forward(&e, &t.b, false, m))
		fail("forward: %s", mg_last_error());
	CHECK(fabs(m[MG_METRIC_LOSS_SUM] / PN - log(2.0)) < 1e-15);
	CHECK(m[MG_DPO_REWARD_CHOSEN] == 0 && m[MG_DPO_MARGIN] == 0);
	/* the policy moves: every trained value perturbed */
	for (int i = 0; i < e.st.spec.nparams; i++)
		if (e.st.g[i].data)
			for (int64_t j = 0; j < mg_tensor_numel(&e.st.p[i]);
			     j++)
				((double *)e.st.p[i].data)[j] +=
					0.05 * mg_rng_normal(77 + (uint64_t)i,
							     (uint64_t)j);
	e.grad_scale = 1.0f / PN;
	if (train_step(&e, &t.b, m)) {
		env_close(&e);
		return;
	}
	CHECK(m[MG_DPO_REWARD_CHOSEN] != 0 && m[MG_DPO_MARGIN] != 0);
	CHECK(fabs(m[MG_METRIC_LOSS_SUM] / PN - log(2.0)) > 1e-6);
	double worst = 0;
	int tensors = 0;
	const int checked =
		fd_check(&e, &t.b, (1.0 / PN) / (double)e.grad_scale, 3, 9,
			 "full gradcheck", &worst, &tensors);
	CHECK(tensors == want);
	CHECK(checked == 3 * want);
	printf("full (%s embeddings): %d trained tensors with %d frozen "
	       "reference copies; %d gradient values, worst relative error "
	       "%.2e\n",
	       tied ? "tied" : "untied", own, refs, checked, worst);
	env_close(&e);
}

static void test_full(void)
{
	full_case(false);
	full_case(true);
}

static const struct test_case cases[] = {
	{"direct", test_direct},       {"step0", test_step0},
	{"gradcheck", test_gradcheck}, {"ops", test_ops},
	{"refuse", test_refuse},       {"buffers", test_buffers},
	{"full", test_full},
};

int main(int argc, char **argv)
{
	return llama_test_main("test_llama_dpo", cases,
			       sizeof cases / sizeof cases[0], argc, argv);
}
