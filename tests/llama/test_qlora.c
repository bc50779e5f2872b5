/*
 * test_qlora.c - the llama plugin's QLoRA base (quant = nf4) against the
 * same model in floats with its base set to dequant(quant(W)).
 *
 *   test_qlora PLUGIN.so TEST
 *
 * Tests: equal (fp64 and fp32: the NF4 blobs are the quantized values a
 * float run starts from; with fresh adapters the loss and every decode
 * logit equal the dequantized float base's exactly; with trained-looking
 * adapters the loss and every adapter gradient equal the float LoRA
 * model's over the dequantized base; the NF4 blobs get no gradient and
 * are never written; quantization did change the model), learns (a few
 * SGD steps on the adapters lower the loss), errors (quant = nf4 without
 * adapters refused, naming lora_rank).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_env.h"

static const char untied[] = "vocab_size = 32\nhidden_size = 16\n"
			     "num_heads = 4\nnum_kv_heads = 2\n"
			     "intermediate_size = 24\nnum_layers = 2\n"
			     "tie_embeddings = no\n";
static const char adapters[] = "lora_rank = 3\nlora_alpha = 6\n"
			       "lora_targets = all,head\n";

/* Element j of a float tensor (F32 or F64) as a double. */
static double get(const struct mg_tensor *t, int64_t j)
{
	return t->dtype == MG_F64 ? ((double *)t->data)[j]
				  : ((float *)t->data)[j];
}

static void set(struct mg_tensor *t, int64_t j, double v)
{
	if (t->dtype == MG_F64)
		((double *)t->data)[j] = v;
	else
		((float *)t->data)[j] = (float)v;
}

/* Small random lora_B's, the same in both models (a fresh B is zero). */
static void randomize_b2(struct env *e)
{
	for (int i = 0; i < e->st.spec.nparams; i++) {
		if (!strstr(e->st.spec.params[i].name, ".lora_B."))
			continue;
		struct mg_tensor *p = &e->st.p[i];
		for (int64_t j = 0; j < mg_tensor_numel(p); j++)
			set(p, j,
			    0.3 * mg_rng_normal(77 + (uint64_t)i, (uint64_t)j));
	}
}

/* One training forward and backward; the loss sum. */
static double step(struct env *e, struct tbatch *tb)
{
	double m[MG_METRIC_N];
	int64_t nm = MG_METRIC_N;
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	ts_zero_grads(&e->st);
	e->ctx.training = true;
	if (M->forward(e->model, &e->ctx, &tb->b, &mt) ||
	    M->backward(e->model, &e->ctx)) {
		fail("train step: %s", mg_last_error());
		return NAN;
	}
	ts_check_step(&e->st, true);
	return m[MG_METRIC_LOSS_SUM];
}

/*
 * eq (quant = nf4) against ef (floats): every NF4 blob of eq must be the
 * quantization of ef's value of that weight (same seed, same base); then
 * ef's weight becomes dequant(blob). Returns the NF4 parameters seen.
 */
static int dequantize_into(struct env *eq, struct env *ef)
{
	int nq = 0;
	double moved = 0;
	const struct mg_model_spec *sq = &eq->st.spec, *sf = &ef->st.spec;
	CHECK(sq->nunits == sf->nunits);
	for (int i = 0; i < sq->nparams; i++) {
		const struct mg_param_decl *d = &sq->params[i];
		if (d->dtype != MG_NF4)
			continue;
		/* The same parameter of the float model: the base comes
		 * first in each unit, whatever the adapters. */
		int u = 0;
		while (u + 1 < sq->nunits && sq->units[u + 1].first_param <= i)
			u++;
		const int k = sf->units[u].first_param +
			      (i - sq->units[u].first_param);
		CHECK(!strcmp(d->name, sf->params[k].name));
		nq++;
		CHECK(!(d->flags & MG_P_TRAIN));
		CHECK(eq->st.p[i].dtype == MG_NF4);
		CHECK(eq->st.g[i].data == NULL);
		struct mg_tensor *w = &ef->st.p[k];
		const int64_t n = d->numel;
		const size_t bytes = mg_tensor_bytes(&eq->st.p[i]);
		CHECK(bytes == mg_nf4_layout(n).bytes && bytes % 256 == 0);
		float *x = malloc((size_t)n * sizeof *x);
		void *blob = malloc(bytes);
		CHECK(x && blob);
		for (int64_t j = 0; j < n; j++)
			x[j] = (float)get(w, j);
		CHECK(mg_nf4_quantize_host(blob, x, n) == 0);
		if (memcmp(blob, eq->st.p[i].data, bytes))
			fail("%s: the NF4 blob is not the quantized float "
			     "initial values",
			     d->name);
		CHECK(mg_nf4_dequantize_host(x, eq->st.p[i].data, n) == 0);
		for (int64_t j = 0; j < n; j++) {
			moved = fmax(moved, fabs(get(w, j) - x[j]));
			set(w, j, x[j]);
		}
		free(x);
		free(blob);
	}
	/* Quantization changed the weights (4 bits of N(0, 0.02)). */
	CHECK(moved > 1e-4);
	return nq;
}

/* Decode logits of a short sequence. */
static int logits_of(struct env *e, float *z)
{
	const int32_t ids[6] = {3, 17, 5, 29, 11, 2};
	e->ctx.training = false;
	return M->decode(e->model, &e->ctx, ids, 6, 0, 8, z);
}

static void equal(enum mg_dtype dt, double rtol)
{
	env_dtype = dt;
	char lq[512], lf[512];
	snprintf(lq, sizeof lq, "%s%squant = nf4\n", untied, adapters);
	snprintf(lf, sizeof lf, "%s%s", untied, adapters);
	struct env eq, ef, eb;
	memset(&ef, 0, sizeof ef);
	memset(&eb, 0, sizeof eb);
	if (env_open(&eq, lq) || env_open(&ef, lf) || env_open(&eb, untied)) {
		fail("equal %s: %s", mg_dtype_name(dt), mg_last_error());
		env_close(&eq);
		env_close(&ef);
		env_close(&eb);
		return;
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	const double before = loss_of(&ef, &tb.b, NULL);
	const int nq = dequantize_into(&eq, &ef);
	CHECK(nq == 7 * 2);
	CHECK(dequantize_into(&eq, &eb) == nq);
	/* A fresh adapter (B = 0) changes no logit of the dequantized
	 * base, and the float LoRA model over that base agrees. */
	const double l0 = loss_of(&eq, &tb.b, NULL);
	CHECK(l0 == loss_of(&eb, &tb.b, NULL));
	CHECK(l0 == loss_of(&ef, &tb.b, NULL));
	CHECK(l0 != before);
	float zq[32], zb[32];
	CHECK(logits_of(&eq, zq) == 0 && logits_of(&eb, zb) == 0);
	for (int v = 0; v < 32; v++)
		if (zq[v] != zb[v])
			fail("equal %s: decode logit %d: qlora %.9g, "
			     "dequantized base %.9g",
			     mg_dtype_name(dt), v, zq[v], zb[v]);
	/* Adapters that change the model: one loss, one gradient. */
	randomize_b2(&eq);
	randomize_b2(&ef);
	void *copy[64] = {0};
	for (int i = 0; i < eq.st.spec.nparams && i < 64; i++)
		if (eq.st.p[i].dtype == MG_NF4) {
			size_t b = mg_tensor_bytes(&eq.st.p[i]);
			copy[i] = malloc(b);
			memcpy(copy[i], eq.st.p[i].data, b);
		}
	double c = 0;
	loss_of(&eq, &tb.b, &c);
	eq.grad_scale = ef.grad_scale = (float)(1.0 / c);
	const double sq = step(&eq, &tb), sf = step(&ef, &tb);
	printf("equal %s: %d NF4 tensors, float base %.9f, dequantized %.9f, "
	       "with adapters qlora %.12f lora %.12f\n",
	       mg_dtype_name(dt), nq, before, l0, sq / c, sf / c);
	CHECK(fabs(sq - sf) <= rtol * fabs(sf));
	CHECK(fabs(sq / c - l0) > 1e-6);
	int ng = 0;
	double worst = 0;
	for (int i = 0; i < eq.st.spec.nparams; i++) {
		const struct mg_tensor *gq = &eq.st.g[i], *gf = &ef.st.g[i];
		if (!gq->data)
			continue;
		ng++;
		double scale = 0;
		for (int64_t j = 0; j < mg_tensor_numel(gf); j++)
			scale = fmax(scale, fabs(get(gf, j)));
		for (int64_t j = 0; j < mg_tensor_numel(gf); j++) {
			double e = fabs(get(gq, j) - get(gf, j));
			worst = fmax(worst, e / (scale + 1e-30));
			if (e > rtol * scale)
				fail("equal %s: gradient of %s[%lld]: qlora "
				     "%.12g, lora %.12g",
				     mg_dtype_name(dt),
				     eq.st.spec.params[i].name, (long long)j,
				     get(gq, j), get(gf, j));
		}
	}
	CHECK(ng == 2 * (2 * 7 + 1)); /* A, B: 2 layers x 7 and the head */
	for (int i = 0; i < eq.st.spec.nparams && i < 64; i++)
		if (copy[i]) {
			if (memcmp(copy[i], eq.st.p[i].data,
				   mg_tensor_bytes(&eq.st.p[i])))
				fail("equal: NF4 %s was written",
				     eq.st.spec.params[i].name);
			free(copy[i]);
		}
	printf("equal %s: %d adapter gradients, worst relative difference "
	       "%.2e\n",
	       mg_dtype_name(dt), ng, worst);
	env_close(&eq);
	env_close(&ef);
	env_close(&eb);
	env_dtype = MG_F64;
}

static void test_equal(void)
{
	/* The same ops on the same values: equal up to the order of
	 * nothing at all, so exact in fp64; fp32 alike. */
	equal(MG_F64, 1e-12);
	equal(MG_F32, 1e-6);
}

/* SGD on the adapters lowers the loss over the frozen NF4 base. */
static void test_learns(void)
{
	char lq[512];
	snprintf(lq, sizeof lq, "%s%squant = nf4\n", untied, adapters);
	struct env e;
	if (env_open(&e, lq)) {
		fail("learns: %s", mg_last_error());
		env_close(&e);
		return;
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	double c = 0;
	const double first = loss_of(&e, &tb.b, &c);
	e.grad_scale = (float)(1.0 / c);
	double last = first;
	for (int s = 0; s < 30; s++) {
		last = step(&e, &tb) / c;
		for (int i = 0; i < e.st.spec.nparams; i++) {
			struct mg_tensor *p = &e.st.p[i], *g = &e.st.g[i];
			if (!g->data)
				continue;
			for (int64_t j = 0; j < mg_tensor_numel(p); j++)
				((double *)p->data)[j] -=
					0.5 * ((double *)g->data)[j];
		}
	}
	last = loss_of(&e, &tb.b, NULL);
	printf("learns: loss %.6f -> %.6f after 30 steps\n", first, last);
	CHECK(last < first - 0.1);
	env_close(&e);
}

static void test_errors(void)
{
	struct env e;
	char l[512];
	snprintf(l, sizeof l, "%squant = nf4\n", untied);
	CHECK(env_open(&e, l) != 0);
	CHECK(strstr(mg_last_error(), "lora_rank > 0") != NULL);
	env_close(&e);
}

static const struct test_case cases[] = {
	{"equal", test_equal},
	{"learns", test_learns},
	{"errors", test_errors},
};

int main(int argc, char **argv)
{
	return llama_test_main("test_qlora", cases,
			       sizeof cases / sizeof cases[0], argc, argv);
}
