/*
 * test_llama.c - the llama model plugin through the real contract.
 *
 *   test_llama PLUGIN.so TEST
 *
 * The plugin .so is dlopen()ed, created from INI text by the core's
 * option code and driven by the test-local host strategy of
 * tests/common/test_strategy.h, which checks the contract as it goes.
 *
 * Tests: gradcheck (fp64 central differences of the per-token loss
 * against backward, on a sample of every parameter of every unit, with
 * ragged rows, masked labels and two documents packed in a row; GQA and
 * tied or untied embeddings), masking (a masked label or a padding token
 * changes nothing; the loss counts exactly the unmasked labels; a packed
 * document does not see the one before it), errors
 * (non-token input, bad HF folders named), decode (incremental decoding
 * with the key/value cache against the forward's per-token losses), and
 * LoRA: lora_merge (a LoRA
 * model's loss equals the base model's with W + s B A merged in, s =
 * alpha / r or alpha / sqrt(r); a fresh adapter changes no logit; the
 * base is the same whatever the adapter options), lora_gradcheck (the
 * adapters' gradients by central differences, with and without dropout;
 * frozen weights get no gradient and are never written), lora_dropout
 * (masks a function of the step and each row's global sample index),
 * lora_fused (the fused q/k/v and gate/up adapter path equals the
 * per-target one). Fused kernels: kernels_gradcheck (gradcheck with
 * kernels = fused, the head in chunks of 5 tokens, tied, untied and with
 * a LoRA adapter on the head), kernels (training with kernels = none,
 * rmsnorm, flce and fused gives the same losses and parameters: rmsnorm
 * to the last bit, flce within fp64 rounding, LoRA on the head with
 * dropout included; the option's errors). QAT (qat = 8da4w): qat_ste
 * (the whole model's straight-through gradient against central
 * differences of the masked linearization, through interposed
 * fake-quantization ops; full fine-tuning and LoRA, real and synthetic
 * activation clamps), qat_mask (the weight mask bit for bit against a
 * model holding fq4(W); clamped codes get exactly 0).
 */
/* _GNU_SOURCE (the build defines it): RTLD_NEXT, for the QAT tests'
 * fake-quantization interposers */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llama.h"
#include "llama_env.h"
#include "mg/int4.h"

static bool is_lora_b(const char *name)
{
	return strstr(name, ".lora_B.") != NULL;
}

/* Every lora_B to small random values, so the adapters change the
 * model (a fresh B is zero). */
static void randomize_b(struct env *e)
{
	for (int i = 0; i < e->st.spec.nparams; i++) {
		if (!is_lora_b(e->st.spec.params[i].name))
			continue;
		struct mg_tensor *p = &e->st.p[i];
		for (int64_t j = 0; j < mg_tensor_numel(p); j++)
			((double *)p->data)[j] =
				0.3 *
				mg_rng_normal(77 + (uint64_t)i, (uint64_t)j);
	}
}

/* Whether e's model has Gemma's sandwich norms. */
static bool gemma_model(const struct env *e)
{
	for (int i = 0; i < e->st.spec.nparams; i++)
		if (strstr(e->st.spec.params[i].name, "pre_feedforward"))
			return true;
	return false;
}

/* The families' biases (zero at init) and q/k norm weights (one) to
 * random values, so that they change the model where a test compares
 * paths (decode against the forward) and their gradients are generic. */
static void randomize_family(struct env *e)
{
	for (int i = 0; i < e->st.spec.nparams; i++) {
		const char *n = e->st.spec.params[i].name;
		const bool bias = strstr(n, "_proj.bias") != NULL,
			   qk = strstr(n, "_norm.weight") &&
				(strstr(n, "q_norm") || strstr(n, "k_norm")),
			   /* Gemma's (1 + w) norms start at w = 0 */
			gemma = strstr(n, "norm.weight") && gemma_model(e);
		if (!bias && !qk && !gemma)
			continue;
		struct mg_tensor *p = &e->st.p[i];
		for (int64_t j = 0; j < mg_tensor_numel(p); j++)
			((double *)p->data)[j] =
				(qk && !gemma ? 1 : 0) +
				0.3 * mg_rng_normal(91 + (uint64_t)i,
						    (uint64_t)j);
	}
}

/* gradcheck of a model; with LoRA (lora_rank in lines) the B's are
 * randomised first, frozen tensors must have no gradient and keep their
 * values, and the adapters must be among the values checked. */
static void gradcheck(const char *lines)
{
	struct env e;
	if (env_open(&e, lines)) {
		fail("gradcheck '%s': %s", lines, mg_last_error());
		env_close(&e);
		return;
	}
	const bool lora = strstr(lines, "lora_rank") != NULL;
	if (lora)
		randomize_b(&e);
	randomize_family(&e);
	/* Frozen values before training, to check none was written. */
	double *frozen_sum =
		calloc(e.st.spec.nparams > 0 ? (size_t)e.st.spec.nparams : 1,
		       sizeof(double));
	int nfrozen = 0, nadapters = 0;
	for (int i = 0; i < e.st.spec.nparams; i++) {
		const struct mg_param_decl *d = &e.st.spec.params[i];
		if (d->flags & MG_P_TRAIN) {
			nadapters += strstr(d->name, ".lora_") != NULL;
			continue;
		}
		nfrozen++;
		CHECK(e.st.g[i].data == NULL);
		for (int64_t j = 0; j < d->numel; j++)
			frozen_sum[i] += ((double *)e.st.p[i].data)[j] *
					 (double)(j % 7 + 1);
	}
	if (lora)
		CHECK(nfrozen > 0 && nadapters > 0);
	else
		CHECK(nfrozen == 0);
	struct tbatch tb;
	tbatch_make(&tb, 32);
	double count = 0;
	loss_of(&e, &tb.b, &count);
	CHECK(count == 10 - 3 + 12 - 1);
	/* Backward of the mean: grad_scale = 1 / label tokens. */
	e.grad_scale = (float)(1.0 / count);
	double m[MG_METRIC_N];
	int64_t nm = MG_METRIC_N;
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	ts_zero_grads(&e.st);
	e.ctx.training = true;
	if (M->forward(e.model, &e.ctx, &tb.b, &mt) ||
	    M->backward(e.model, &e.ctx)) {
		fail("train step: %s", mg_last_error());
		env_close(&e);
		return;
	}
	ts_check_step(&e.st, true);
	for (int i = 0; i < e.st.spec.nparams; i++) {
		const struct mg_param_decl *d = &e.st.spec.params[i];
		if (d->flags & MG_P_TRAIN)
			continue;
		double sum = 0;
		for (int64_t j = 0; j < d->numel; j++)
			sum += ((double *)e.st.p[i].data)[j] *
			       (double)(j % 7 + 1);
		if (sum != frozen_sum[i])
			fail("gradcheck '%s': frozen %s changed", lines,
			     d->name);
	}
	free(frozen_sum);
	/* grad_scale went through F32: rescale to the exact mean. */
	const double gfix = (1.0 / count) / (double)e.grad_scale;
	/* Central differences at h = 1e-5 are good to about 1e-9 absolute
	 * here; a wrong backward is off by O(1). */
	char what[160];
	snprintf(what, sizeof what, "gradcheck '%s'", lines);
	double worst;
	const int checked =
		fd_check(&e, &tb.b, gfix, 5, 99, 1e-4, what, &worst);
	printf("gradcheck '%s': %d values, worst relative error %.2e\n", lines,
	       checked, worst);
	env_close(&e);
}

static const char tiny[] = "vocab_size = 32\nhidden_size = 16\nnum_heads = "
			   "4\nnum_kv_heads = 2\nintermediate_size = 24\n"
			   "num_layers = 2\n";

static const char qat_tiny[] =
	"vocab_size = 32\nhidden_size = 16\nnum_heads = 4\nnum_kv_heads = "
	"2\nintermediate_size = 24\nnum_layers = 2\ntie_embeddings = no\n"
	"qat = 8da4w\nqat_group = 8\n";

static void test_gradcheck(void)
{
	/* GQA 4/2 untied; multi-query (4/1) tied with another rope base. */
	gradcheck("vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
		  "num_kv_heads = 2\nintermediate_size = 24\nnum_layers = 2\n"
		  "tie_embeddings = no\n");
	gradcheck("vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
		  "num_kv_heads = 1\nintermediate_size = 24\nnum_layers = 2\n"
		  "tie_embeddings = yes\nrope_theta = 100\n");
}

/* The families' features against central differences (fp64): Qwen2's
 * q, k, v biases, Qwen3's per-head q/k norms with a head_dim apart from
 * hidden / heads, Mistral's sliding window shorter than the rows (the
 * test batch's rows are 10 and 12 tokens), Llama's attention and MLP
 * biases; with LoRA on every projection and with the fused kernels. */
static const char fam_tiny[] = "vocab_size = 32\nhidden_size = 16\n"
			       "num_heads = 4\nnum_kv_heads = 2\n"
			       "intermediate_size = 24\nnum_layers = 2\n"
			       "tie_embeddings = no\n";

#define GEMMA2                                                                 \
	"family = gemma2\nsliding_window = 3\nattn_logit_softcapping = "       \
	"0.7\nfinal_logit_softcapping = 1.5\n"
#define GEMMA3                                                                 \
	"family = gemma3_text\nhead_dim = 6\nsliding_window = 3\n"             \
	"sliding_window_pattern = 2\nrope_local_base_freq = 100\n"

static void test_families_gradcheck(void)
{
	static const char *const fam[] = {
		"family = qwen2\n",
		"family = qwen3\nhead_dim = 6\n",
		"family = mistral\nsliding_window = 3\n",
		"family = qwen3\nkernels = none\nactivation_checkpointing = "
		"true\n",
		"family = qwen2\nlora_rank = 2\nlora_targets = all\n",
		"family = qwen3\nlora_rank = 2\nlora_targets = q,k,v,o\n",
		/* Gemma: small caps so that tanh bends (the defaults, 50
		 * and 30, are near linear at these sizes), layer 0 sliding
		 * and layer 1 full; Gemma 3 with its local RoPE base on
		 * layer 0; fused kernels with recomputation; LoRA */
		GEMMA2,
		GEMMA3,
		GEMMA2 "kernels = all\nactivation_checkpointing = true\n",
		GEMMA3 "lora_rank = 2\nlora_targets = all\n",
		/* Phi-3: 6 of 8 dims rotary, a window; fused modules' LoRA
		 * (one A shared by q, k, v and by gate, up) */
		"family = phi3\nhead_dim = 8\npartial_rotary_factor = "
		"0.75\nsliding_window = 5\n",
		"family = phi3\nhead_dim = 8\npartial_rotary_factor = "
		"0.75\nlora_rank = 2\nlora_targets = all\n",
		"family = phi3\nhead_dim = 10\npartial_rotary_factor = "
		"0.4\nkernels = none\nlora_rank = 3\nlora_targets = "
		"qkv_proj,down\n",
	};
	for (size_t i = 0; i < sizeof fam / sizeof *fam; i++) {
		char lines[512];
		snprintf(lines, sizeof lines, "%s%s", fam_tiny, fam[i]);
		gradcheck(lines);
	}
}

/* Phi-3's partial rotary turns the first dims only: the same weights
 * give another loss with 6 of 8 dims rotary than with all 8 (and with a
 * factor of 1 the same as with none); a fused module's adapter is one A
 * (declared once, under the fused name) and one B over the fused
 * output; a part of a fused module cannot be targeted. */
static double family_loss(const char *extra);
static void test_families_phi3(void)
{
	const double all = family_loss("family = phi3\nhead_dim = 8\n"),
		     one = family_loss("family = phi3\nhead_dim = 8\n"
				       "partial_rotary_factor = 1\n"),
		     part = family_loss("family = phi3\nhead_dim = 8\n"
					"partial_rotary_factor = 0.75\n"),
		     llama = family_loss("head_dim = 8\n");
	printf("phi3 loss rotary 8/8 %.12g, factor 1 %.12g, 6/8 %.12g, "
	       "llama %.12g\n",
	       all, one, part, llama);
	CHECK(isfinite(all) && all == one && all == llama);
	CHECK(isfinite(part) && fabs(part - all) > 1e-6);
	char lines[512];
	snprintf(lines, sizeof lines,
		 "%sfamily = phi3\nhead_dim = 8\nlora_rank = 2\n"
		 "lora_targets = all\n",
		 fam_tiny);
	struct env e;
	if (env_open(&e, lines)) {
		fail("'%s': %s", lines, mg_last_error());
		env_close(&e);
		return;
	}
	int qkv_a = 0, qkv_b = 0, gu_b = 0, split = 0;
	for (int i = 0; i < e.st.spec.nparams; i++) {
		const struct mg_param_decl *d = &e.st.spec.params[i];
		if (!strcmp(d->name, "self_attn.qkv_proj.lora_A.weight"))
			qkv_a += d->shape[0] == 2 && d->shape[1] == 16;
		if (!strcmp(d->name, "self_attn.qkv_proj.lora_B.weight"))
			qkv_b += d->shape[0] == 4 * 8 + 2 * 2 * 8 &&
				 d->shape[1] == 2;
		if (!strcmp(d->name, "mlp.gate_up_proj.lora_B.weight"))
			gu_b += d->shape[0] == 2 * 24;
		split += strstr(d->name, "q_proj.lora") ||
			 strstr(d->name, "k_proj.lora") ||
			 strstr(d->name, "gate_proj.lora");
	}
	/* one of each per layer (fam_tiny: 2) */
	CHECK(qkv_a == 2 && qkv_b == 2 && gu_b == 2 && split == 0);
	env_close(&e);
	snprintf(lines, sizeof lines,
		 "%sfamily = phi3\nlora_rank = 2\nlora_targets = q,v\n",
		 fam_tiny);
	CHECK(env_open(&e, lines) != 0);
	CHECK(strstr(mg_last_error(), "target all of them or none") != NULL);
	env_close(&e);
	snprintf(lines, sizeof lines,
		 "%sfamily = qwen2\n"
		 "partial_rotary_factor = 0.5\n",
		 fam_tiny);
	CHECK(env_open(&e, lines) != 0);
	CHECK(strstr(mg_last_error(), "read by family = phi3 only") != NULL);
	env_close(&e);
}

/* Decoding equals the forward for each family (biases, q/k norms in the
 * cache, a window shorter than the prompt). */
static void decode_check(const char *lines);
static void test_families_decode(void)
{
	static const char *const fam[] = {
		"family = qwen2\n",
		"family = qwen3\nhead_dim = 6\n",
		"family = mistral\nsliding_window = 4\n",
		GEMMA2,
		GEMMA3,
		"family = phi3\nhead_dim = 8\npartial_rotary_factor = "
		"0.75\nsliding_window = 4\nlora_rank = 2\nlora_targets = "
		"qkv_proj,gate_up_proj,o,down\n",
	};
	for (size_t i = 0; i < sizeof fam / sizeof *fam; i++) {
		char lines[512];
		snprintf(lines, sizeof lines, "%s%s", fam_tiny, fam[i]);
		decode_check(lines);
	}
}

/* A sliding window changes what the model computes: the same weights
 * (the same seed and shapes) give another loss with a window of 3 than
 * without, and the same loss with a window longer than every row. */
static double family_loss(const char *extra)
{
	char lines[512];
	snprintf(lines, sizeof lines, "%s%s", fam_tiny, extra);
	struct env e;
	if (env_open(&e, lines)) {
		fail("'%s': %s", lines, mg_last_error());
		env_close(&e);
		return NAN;
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	double count = 0, l = loss_of(&e, &tb.b, &count);
	env_close(&e);
	return l;
}

static void test_families_window(void)
{
	const double full = family_loss(""),
		     w3 = family_loss("family = mistral\nsliding_window = 3\n"),
		     w64 = family_loss(
			     "family = mistral\nsliding_window = 64\n");
	printf("loss without a window %.12g, window 3 %.12g, window 64 "
	       "%.12g\n",
	       full, w3, w64);
	CHECK(isfinite(full) && isfinite(w3) && fabs(full - w3) > 1e-6);
	CHECK(w64 == full);
	/* Gemma: the window acts on the sliding layer 0 only (with the
	 * pattern 1 every layer is full: the window then changes nothing),
	 * the soft-caps and the local RoPE base change the loss */
#define G2 "family = gemma2\nattn_logit_softcapping = 0.7\n"
#define G2C G2 "final_logit_softcapping = 1.5\n"
#define G3                                                                     \
	"family = gemma3_text\nhead_dim = 6\nsliding_window = 3\n"             \
	"sliding_window_pattern = 2\n"
	const double g3 = family_loss(GEMMA2),
		     g64 = family_loss(G2C "sliding_window = 64\n"),
		     gfull = family_loss(GEMMA2 "sliding_window_pattern = 1\n"),
		     gfull3 = family_loss(G2C "sliding_window = 5\n"
					      "sliding_window_pattern = 1\n"),
		     gcap = family_loss(G2 "sliding_window = 3\n"
					   "final_logit_softcapping = 0\n"),
		     l100 = family_loss(GEMMA3),
		     l1e4 = family_loss(G3 "rope_local_base_freq = 10000\n");
	printf("gemma2 window 3 %.12g, 64 %.12g, full %.12g / %.12g, no "
	       "final cap %.12g; gemma3 local base 100 %.12g, 1e4 %.12g\n",
	       g3, g64, gfull, gfull3, gcap, l100, l1e4);
	CHECK(isfinite(g3) && fabs(g3 - g64) > 1e-6);
	CHECK(gfull == gfull3 && gfull == g64);
	CHECK(fabs(gcap - g3) > 1e-6);
	CHECK(isfinite(l100) && fabs(l100 - l1e4) > 1e-6);
}

/* Masked labels and padding contribute nothing. */
static void test_masking(void)
{
	struct env e;
	if (env_open(&e, tiny)) {
		fail("masking: %s", mg_last_error());
		env_close(&e);
		return;
	}
	struct tbatch a, b;
	tbatch_make(&a, 32);
	tbatch_make(&b, 32);
	double ca = 0, cb = 0;
	double la = loss_of(&e, &a.b, &ca);
	/* Another token in row 0's padding, another target at a masked
	 * position: the same loss. */
	b.ids[11] = 5;
	b.labels[11] = MG_IGNORE_INDEX;
	b.ids[BT - 1] = 0;
	double lb = loss_of(&e, &b.b, &cb);
	CHECK(ca == cb);
	CHECK(fabs(la - lb) < 1e-12);
	/* A label change at a counted position changes it. */
	b.labels[5] = (b.labels[5] + 1) % 32;
	CHECK(fabs(loss_of(&e, &b.b, NULL) - la) > 1e-9);
	/* Packing: row 1's second document (tokens 7..11) does not see the
	 * first. With the first document's labels masked, changing one of
	 * its tokens leaves the loss as it is; the same row with positions
	 * running on (one document) does change. */
	struct tbatch c;
	tbatch_make(&c, 32);
	for (int j = 0; j < 7; j++)
		c.labels[BT + j] = MG_IGNORE_INDEX;
	double lc = loss_of(&e, &c.b, NULL);
	c.ids[BT + 2] = (c.ids[BT + 2] + 1) % 32;
	CHECK(fabs(loss_of(&e, &c.b, NULL) - lc) < 1e-12);
	for (int j = 0; j < BT; j++)
		c.pos[BT + j] = j;
	double lone = loss_of(&e, &c.b, NULL);
	c.ids[BT + 2] = (c.ids[BT + 2] + 1) % 32;
	CHECK(fabs(loss_of(&e, &c.b, NULL) - lone) > 1e-9);
	env_close(&e);
}

static void test_errors(void)
{
	struct env e;
	if (env_open(&e, tiny)) {
		fail("errors: %s", mg_last_error());
		env_close(&e);
		return;
	}
	double img[4] = {0};
	int32_t lab[1] = {0};
	int64_t s4[4] = {1, 1, 2, 2}, s1[1] = {1};
	struct mg_batch b = {0};
	b.input = mg_tensor_make(img, MG_F64, MG_DEV_CPU, 4, s4);
	b.labels = mg_tensor_make(lab, MG_I32, MG_DEV_CPU, 1, s1);
	b.n = 1;
	double m[MG_METRIC_N];
	int64_t nm = MG_METRIC_N;
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	CHECK(M->forward(e.model, &e.ctx, &b, &mt) != 0);
	CHECK(strstr(mg_last_error(), "not a token batch") != NULL);
	env_close(&e);
	/* An HF folder without weights, and one whose config is not llama,
	 * are refused naming the file. */
	char dir[] = "/tmp/mg_llama_hfXXXXXX";
	if (!mkdtemp(dir)) {
		fail("mkdtemp");
		return;
	}
	char path[600], lines[700];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": 32, "
		   "\"hidden_size\": 16, \"intermediate_size\": 24, "
		   "\"num_hidden_layers\": 1, \"num_attention_heads\": 4}\n");
	fclose(f);
	snprintf(lines, sizeof lines, "hf_dir = %s\n", dir);
	CHECK(env_open(&e, lines) != 0);
	CHECK(strstr(mg_last_error(), "model.safetensors") != NULL);
	env_close(&e);
	f = fopen(path, "w");
	fprintf(f, "{\"model_type\": \"gpt2\", \"vocab_size\": 32}\n");
	fclose(f);
	CHECK(env_open(&e, lines) != 0);
	CHECK(strstr(mg_last_error(), "model_type is \"gpt2\", not one of") !=
	      NULL);
	env_close(&e);
	/* A family's keys the decoder cannot run are refused naming them:
	 * Qwen's sliding window from a middle layer on, layer_types that
	 * mix, a sliding window without a size. */
	static const char *const bad[][2] = {
		{"\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
		 "\"sliding_window\": 8, \"max_window_layers\": 1",
		 "max_window_layers"},
		{"\"model_type\": \"qwen3\", \"use_sliding_window\": true, "
		 "\"layer_types\": [\"sliding_attention\", "
		 "\"full_attention\"], \"sliding_window\": 8",
		 "mixes sliding and full"},
		{"\"model_type\": \"mistral\", \"layer_types\": "
		 "[\"sliding_attention\", \"sliding_attention\"]",
		 "without a 'sliding_window'"},
		{"\"model_type\": \"qwen3\", \"attention_bias\": 1",
		 "'attention_bias' is not true or false"},
		/* rope types not run are refused naming the key; Phi-3's
		 * longrope without its original length, or with factors
		 * that do not match the rotary pairs; a rotary share that
		 * leaves an odd count */
		{"\"model_type\": \"phi3\", \"rope_scaling\": {\"type\": "
		 "\"dynamic\", \"factor\": 2}",
		 "'rope_scaling' has rope type 'dynamic'"},
		{"\"model_type\": \"phi3\", \"rope_scaling\": {\"type\": "
		 "\"longrope\", \"short_factor\": [1, 1], \"long_factor\": "
		 "[1, 1]}",
		 "longrope needs original_max_position_embeddings"},
		{"\"model_type\": \"phi3\", \"rope_scaling\": {\"type\": "
		 "\"longrope\", \"short_factor\": [1], \"long_factor\": "
		 "[1]}, \"original_max_position_embeddings\": 64",
		 "longrope has 1 factors, the heads 2 rotary pairs"},
		{"\"model_type\": \"phi3\", \"partial_rotary_factor\": 0.3",
		 "not an even number"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		f = fopen(path, "w");
		fprintf(f,
			"{%s, \"vocab_size\": 32, \"hidden_size\": 16, "
			"\"intermediate_size\": 24, \"num_hidden_layers\": 2, "
			"\"num_attention_heads\": 4}\n",
			bad[i][0]);
		fclose(f);
		CHECK(env_open(&e, lines) != 0);
		if (!strstr(mg_last_error(), bad[i][1]))
			fail("config %s: '%s' lacks '%s'", bad[i][0],
			     mg_last_error(), bad[i][1]);
		env_close(&e);
	}
	/* sliding_window on a family that has none */
	CHECK(env_open(&e, "family = qwen2\nsliding_window = 4\n") != 0);
	CHECK(strstr(mg_last_error(), "read by family = mistral, phi3 or "
				      "the gemma families only") != NULL);
	env_close(&e);
	remove(path);
	rmdir(dir);
}

/* ------------------------------------------------------------------ */
/* Incremental decoding with the key/value cache against the forward.   */

/* -log softmax(z)[y] in double, and the bound on its error from z's
 * rounding to F32 (each logit off by at most |z| 2^-24, so the value by
 * at most twice the largest). */
static double nll_of(const float *z, int64_t V, int32_t y, double *bound)
{
	double m = -INFINITY, big = 0;
	for (int64_t i = 0; i < V; i++) {
		m = fmax(m, z[i]);
		big = fmax(big, fabs(z[i]));
	}
	double l = 0;
	for (int64_t i = 0; i < V; i++)
		l += exp((double)z[i] - m);
	*bound = 2 * big * ldexp(1, -24) + 1e-12;
	return m + log(l) - z[y];
}

/* The forward's loss with every label masked but position t's (ids[t+1]),
 * one document of T tokens: -log p(ids[t+1] | ids[0..t]) in fp64. */
static double fwd_nll(struct env *e, const int32_t *ids, int T, int t)
{
	int32_t in[64], lab[64], pos[64], len[1] = {T};
	int64_t s2[2] = {1, T}, s1[1] = {1};
	for (int j = 0; j < T; j++) {
		in[j] = ids[j];
		lab[j] = j == t ? ids[j + 1] : MG_IGNORE_INDEX;
		pos[j] = j;
	}
	struct mg_batch b = {0};
	b.input = mg_tensor_make(in, MG_I32, MG_DEV_CPU, 2, s2);
	b.labels = mg_tensor_make(lab, MG_I32, MG_DEV_CPU, 2, s2);
	b.positions = mg_tensor_make(pos, MG_I32, MG_DEV_CPU, 2, s2);
	b.lens = mg_tensor_make(len, MG_I32, MG_DEV_CPU, 1, s1);
	b.lens_host = len;
	b.n = 1;
	b.seq = T;
	double count = 0, l = loss_of(e, &b, &count);
	CHECK(count == 1);
	return l;
}

/*
 * The oracle: on a random model (weights scaled up so attention is far
 * from uniform), the next-token log-probabilities decode gives, after a
 * prefill of P tokens and then one token a call, equal the training
 * forward's per-token losses on the same sequence, up to the F32
 * rounding of the logits decode returns; a prefill of everything at once
 * and token-by-token decoding give the same last logits; a new sequence
 * at position 0 starts clean; misuse is refused.
 */
static void decode_check(const char *lines)
{
	struct env e;
	if (env_open(&e, lines)) {
		fail("decode '%s': %s", lines, mg_last_error());
		env_close(&e);
		return;
	}
	if (!M->decode) {
		fail("llama declares no decode op");
		env_close(&e);
		return;
	}
	for (int i = 0; i < e.st.spec.nparams; i++) {
		struct mg_tensor *p = &e.st.p[i];
		for (int64_t j = 0; j < mg_tensor_numel(p); j++)
			((double *)p->data)[j] *= 4;
	}
	randomize_b(&e); /* with LoRA: adapters that change the model */
	randomize_family(&e);
	enum { T = 14, P = 5, V = 32, MAXLEN = T + 3 };
	int32_t ids[T];
	for (int j = 0; j < T; j++)
		ids[j] = (int32_t)(mg_rng_u64(17, (uint64_t)j) % V);
	float z[V], zall[V];
	double worst = 0;
	e.ctx.training = false;
	/* prefill P tokens, then one at a time */
	int rc = M->decode(e.model, &e.ctx, ids, P, 0, MAXLEN, z);
	CHECK(rc == 0);
	for (int t = P - 1; t < T - 1 && rc == 0; t++) {
		if (t >= P)
			rc = M->decode(e.model, &e.ctx, &ids[t], 1, t, MAXLEN,
				       z);
		CHECK(rc == 0);
		double bound, got = nll_of(z, V, ids[t + 1], &bound);
		double want = fwd_nll(&e, ids, T, t);
		worst = fmax(worst, fabs(got - want));
		if (!(fabs(got - want) <= bound))
			fail("decode '%s': token %d: -log p %.15g, forward "
			     "%.15g (bound %.2g)",
			     lines, t + 1, got, want, bound);
	}
	if (rc)
		fail("decode '%s': %s", lines, mg_last_error());
	/* a new sequence: token by token from position 0, every position
	 * against the forward; its last logits against one prefill */
	for (int t = 0; t < T - 1 && rc == 0; t++) {
		rc = M->decode(e.model, &e.ctx, &ids[t], 1, t, MAXLEN, z);
		CHECK(rc == 0);
		double bound, got = nll_of(z, V, ids[t + 1], &bound);
		double want = fwd_nll(&e, ids, T, t);
		worst = fmax(worst, fabs(got - want));
		if (!(fabs(got - want) <= bound))
			fail("decode '%s' one by one: token %d: -log p %.15g, "
			     "forward %.15g",
			     lines, t + 1, got, want);
	}
	CHECK(M->decode(e.model, &e.ctx, ids, T - 1, 0, MAXLEN, zall) == 0);
	for (int i = 0; i < V; i++)
		if (!(fabsf(z[i] - zall[i]) <= fabsf(zall[i]) * 0x1p-23f))
			fail("decode '%s': logit %d after one prefill %.9g, "
			     "token by token %.9g",
			     lines, i, zall[i], z[i]);
	/* misuse: a gap in the sequence, past max_len, a bad id, a sequence
	 * longer than the model's positions */
	CHECK(M->decode(e.model, &e.ctx, ids, 1, T, MAXLEN, z) != 0);
	CHECK(strstr(mg_last_error(), "does not continue") != NULL);
	CHECK(M->decode(e.model, &e.ctx, ids, 5, T - 1, MAXLEN, z) != 0);
	CHECK(strstr(mg_last_error(), "pos + n <= max_len") != NULL);
	int32_t bad = V;
	CHECK(M->decode(e.model, &e.ctx, &bad, 1, 0, MAXLEN, z) != 0);
	CHECK(strstr(mg_last_error(), "outside the vocabulary") != NULL);
	CHECK(M->decode(e.model, &e.ctx, ids, 2, 0, 1 << 20, z) != 0);
	CHECK(strstr(mg_last_error(), "max_position_embeddings") != NULL);
	ts_check_step(&e.st, false);
	printf("decode '%s': worst |log p - forward| %.2e\n", lines, worst);
	env_close(&e);
}

static void test_decode(void)
{
	/* GQA 4/2 untied; multi-query tied with another rope base; plain
	 * multi-head with a llama3 rope scaling preset's shape */
	decode_check(tiny);
	decode_check("vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
		     "num_kv_heads = 1\nintermediate_size = 24\nnum_layers = "
		     "2\ntie_embeddings = yes\nrope_theta = 100\n");
	decode_check("vocab_size = 32\nhidden_size = 32\nnum_heads = 2\n"
		     "num_kv_heads = 2\nintermediate_size = 40\nnum_layers = "
		     "3\ntie_embeddings = no\n");
	/* LoRA on every projection and the head: decode applies the
	 * adapters as the training forward does */
	decode_check("vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
		     "num_kv_heads = 2\nintermediate_size = 24\nnum_layers = "
		     "2\ntie_embeddings = no\nlora_rank = 3\nlora_alpha = 6\n"
		     "lora_targets = all,head\n");
	/* qat = 8da4w: decode fake-quantizes as the training forward does
	 * (int8 per token, int4 weights), with and without LoRA */
	decode_check(qat_tiny);
	decode_check("vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
		     "num_kv_heads = 1\nintermediate_size = 24\nnum_layers = "
		     "2\ntie_embeddings = yes\nqat = 8da4w\nqat_group = 4\n");
	char lines[640];
	snprintf(lines, sizeof lines,
		 "%slora_rank = 3\nlora_alpha = 6\nlora_targets = all,head\n",
		 qat_tiny);
	decode_check(lines);
}

static const char untied[] = "vocab_size = 32\nhidden_size = 16\n"
			     "num_heads = 4\nnum_kv_heads = 2\n"
			     "intermediate_size = 24\nnum_layers = 2\n"
			     "tie_embeddings = no\n";

static void test_lora_gradcheck(void)
{
	char lines[512];
	/* All seven projections and the head; rank 3, rsLoRA. */
	snprintf(lines, sizeof lines,
		 "%slora_rank = 3\nlora_alpha = 5\nrslora = yes\n"
		 "lora_targets = all,head\n",
		 untied);
	gradcheck(lines);
	/* Dropout: the finite differences run training forwards, which
	 * draw the same masks as the backward's (same step). */
	snprintf(lines, sizeof lines,
		 "%slora_rank = 2\nlora_alpha = 4\nlora_dropout = 0.3\n"
		 "lora_targets = q,v,o,down\n",
		 tiny);
	fd_training = true;
	gradcheck(lines);
	fd_training = false;
}

/* Base parameter index in eb of LoRA parameter i of el ("X.lora_A.weight"
 * -> "X.weight" in the same unit), or -1. */
static int base_of(const struct env *el, const struct env *eb, int i)
{
	const struct mg_model_spec *sl = &el->st.spec, *sb = &eb->st.spec;
	char want[MG_NAME_MAX];
	snprintf(want, sizeof want, "%s", sl->params[i].name);
	char *cut = strstr(want, ".lora_");
	if (!cut)
		return -1;
	strcpy(cut, ".weight");
	int u = 0;
	while (u + 1 < sl->nunits && sl->units[u + 1].first_param <= i)
		u++;
	for (int k = 0; k < sb->units[u].nparams; k++)
		if (!strcmp(sb->params[sb->units[u].first_param + k].name,
			    want))
			return sb->units[u].first_param + k;
	return -1;
}

/* y = W x + s B A x: the LoRA model and the base model with s B A added
 * to W give one loss. A fresh adapter (B = 0) changes nothing, exactly,
 * and the base does not depend on the adapter options. */
static void lora_merge(const char *extra, double s)
{
	char lines[512];
	snprintf(lines, sizeof lines, "%s%s", untied, extra);
	struct env el, eb;
	memset(&eb, 0, sizeof eb);
	if (env_open(&el, lines) || env_open(&eb, untied)) {
		fail("lora_merge '%s': %s", extra, mg_last_error());
		env_close(&el);
		env_close(&eb);
		return;
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	int merged = 0;
	/* Same seed, same base: the adapters come after it in each unit. */
	for (int u = 0; u < eb.st.spec.nunits; u++) {
		const struct mg_unit_decl *ub = &eb.st.spec.units[u],
					  *ul = &el.st.spec.units[u];
		for (int k = 0; k < ub->nparams; k++) {
			const int ib = ub->first_param + k,
				  il = ul->first_param + k;
			CHECK(!strcmp(eb.st.spec.params[ib].name,
				      el.st.spec.params[il].name));
			CHECK(!memcmp(eb.st.p[ib].data, el.st.p[il].data,
				      (size_t)mg_tensor_numel(&eb.st.p[ib]) *
					      sizeof(double)));
		}
	}
	double base = loss_of(&eb, &tb.b, NULL);
	CHECK(loss_of(&el, &tb.b, NULL) == base);
	randomize_b(&el);
	for (int i = 0; i < el.st.spec.nparams; i++) {
		if (!strstr(el.st.spec.params[i].name, ".lora_A."))
			continue;
		int w = base_of(&el, &eb, i);
		int ib = -1;
		char bname[MG_NAME_MAX];
		snprintf(bname, sizeof bname, "%s", el.st.spec.params[i].name);
		strstr(bname, ".lora_A.")[6] = 'B';
		/* lora_B of the same unit: A's first_param bound. */
		for (int k = i + 1; k < el.st.spec.nparams && ib < 0; k++)
			if (!strcmp(el.st.spec.params[k].name, bname))
				ib = k;
		if (w < 0 || ib < 0) {
			fail("lora_merge: no base or B for %s",
			     el.st.spec.params[i].name);
			continue;
		}
		const struct mg_tensor *A = &el.st.p[i], *B = &el.st.p[ib];
		struct mg_tensor *W = &eb.st.p[w];
		const int64_t out = W->shape[0], in = W->shape[1],
			      r = A->shape[0];
		CHECK(A->shape[1] == in && B->shape[0] == out &&
		      B->shape[1] == r);
		for (int64_t o = 0; o < out; o++)
			for (int64_t j = 0; j < in; j++) {
				double acc = 0;
				for (int64_t k = 0; k < r; k++)
					acc += ((double *)B->data)[o * r + k] *
					       ((double *)A->data)[k * in + j];
				((double *)W->data)[o * in + j] += s * acc;
			}
		merged++;
	}
	double ll = loss_of(&el, &tb.b, NULL), lb = loss_of(&eb, &tb.b, NULL);
	printf("lora_merge '%s': %d adapters, base %.9f, lora %.12f, merged "
	       "%.12f\n",
	       extra, merged, base, ll, lb);
	CHECK(merged > 0);
	CHECK(fabs(ll - base) > 1e-6);
	CHECK(fabs(ll - lb) < 1e-12);
	env_close(&el);
	env_close(&eb);
}

static void test_lora_merge(void)
{
	lora_merge("lora_rank = 3\nlora_alpha = 6\nlora_targets = all,head\n",
		   6.0 / 3);
	lora_merge("lora_rank = 4\nlora_alpha = 6\nrslora = true\n"
		   "lora_targets = k,o,up\n",
		   6.0 / sqrt(4.0));
	lora_merge("lora_rank = 2\nlora_alpha = 16\n", 16.0 / 2);
	/* Options refused: unknown target, head on a tied head. */
	struct env e;
	CHECK(env_open(&e, "lora_rank = 2\nlora_targets = q,x\n") != 0);
	CHECK(strstr(mg_last_error(), "unknown target 'x'") != NULL);
	env_close(&e);
	CHECK(env_open(&e, "lora_rank = 2\ntie_embeddings = yes\n"
			   "lora_targets = head\n") != 0);
	CHECK(strstr(mg_last_error(), "untied") != NULL);
	env_close(&e);
}

/* The loss sum of one training forward of rows [r0, r0 + n) of t at
 * global sample offset goff. */
static double train_sum(struct env *e, struct tbatch *t, int r0, int n,
			int64_t goff)
{
	int64_t s2[2] = {n, BT}, s1[1] = {n};
	struct mg_batch b = t->b;
	b.input = mg_tensor_make(t->ids + r0 * BT, MG_I32, MG_DEV_CPU, 2, s2);
	b.labels =
		mg_tensor_make(t->labels + r0 * BT, MG_I32, MG_DEV_CPU, 2, s2);
	b.positions =
		mg_tensor_make(t->pos + r0 * BT, MG_I32, MG_DEV_CPU, 2, s2);
	b.lens = mg_tensor_make(t->lens + r0, MG_I32, MG_DEV_CPU, 1, s1);
	b.lens_host = t->lens + r0;
	b.n = n;
	b.global_offset = goff;
	double m[MG_METRIC_N];
	int64_t nm = MG_METRIC_N;
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	e->ctx.training = true;
	if (M->forward(e->model, &e->ctx, &b, &mt)) {
		fail("forward: %s", mg_last_error());
		return NAN;
	}
	return m[MG_METRIC_LOSS_SUM];
}

/* Dropout masks are a function of (seed, step, layer, target, global
 * sample, position, feature): a batch split over two "ranks" draws what
 * one rank draws, the same step draws the same mask again, another step
 * another one, and evaluation drops nothing. */
static void test_lora_dropout(void)
{
	struct env e;
	char lines[512];
	snprintf(lines, sizeof lines,
		 "%slora_rank = 4\nlora_dropout = 0.5\nlora_targets = all\n",
		 tiny);
	if (env_open(&e, lines)) {
		fail("lora_dropout: %s", mg_last_error());
		env_close(&e);
		return;
	}
	randomize_b(&e);
	struct tbatch tb;
	tbatch_make(&tb, 32);
	e.ctx.step = 4;
	double whole = train_sum(&e, &tb, 0, 2, 10);
	double split =
		train_sum(&e, &tb, 0, 1, 10) + train_sum(&e, &tb, 1, 1, 11);
	double again = train_sum(&e, &tb, 0, 2, 10);
	double shifted = train_sum(&e, &tb, 0, 2, 12);
	e.ctx.step = 5;
	double next = train_sum(&e, &tb, 0, 2, 10);
	double count = 0;
	double eval = loss_of(&e, &tb.b, &count) * count;
	printf("lora_dropout: whole %.12f split %.12f next step %.9f eval "
	       "%.9f\n",
	       whole, split, next, eval);
	CHECK(fabs(whole - split) < 1e-10);
	CHECK(whole == again);
	CHECK(fabs(whole - shifted) > 1e-6);
	CHECK(fabs(whole - next) > 1e-6);
	CHECK(fabs(whole - eval) > 1e-6);
	env_close(&e);
}

/* Lay the lora_A's of each fused group (q, k, v; gate, up) of every
 * layer, and their gradients, back to back in blocks of their own, as
 * replicated storage does; the originals are kept in *saved for
 * unstack(). */
struct stacked {
	void *orig_p[64], *orig_g[64];
	int idx[64], n;
	void *blocks[16];
	int nblocks;
};

static void stack_group(struct env *e, int u, const char *const *mods, int n,
			struct stacked *s)
{
	const struct mg_unit_decl *ud = &e->st.spec.units[u];
	int at[3];
	int64_t total = 0;
	for (int j = 0; j < n; j++) {
		at[j] = -1;
		for (int k = 0; k < ud->nparams; k++) {
			const char *nm =
				e->st.spec.params[ud->first_param + k].name;
			if (strstr(nm, mods[j]) && strstr(nm, ".lora_A."))
				at[j] = ud->first_param + k;
		}
		if (at[j] < 0) {
			fail("lora_fused: unit %d has no %s adapter", u,
			     mods[j]);
			return;
		}
		total += mg_tensor_numel(&e->st.p[at[j]]);
	}
	double *pb = malloc((size_t)total * sizeof *pb),
	       *gb = calloc((size_t)total, sizeof *gb);
	s->blocks[s->nblocks++] = pb;
	s->blocks[s->nblocks++] = gb;
	int64_t off = 0;
	for (int j = 0; j < n; j++) {
		const int i = at[j];
		const int64_t ne = mg_tensor_numel(&e->st.p[i]);
		memcpy(pb + off, e->st.p[i].data, (size_t)ne * sizeof *pb);
		s->idx[s->n] = i;
		s->orig_p[s->n] = e->st.p[i].data;
		s->orig_g[s->n++] = e->st.g[i].data;
		e->st.p[i].data = pb + off;
		e->st.g[i].data = gb + off;
		off += ne;
	}
}

static void unstack(struct env *e, struct stacked *s)
{
	for (int k = 0; k < s->n; k++) {
		e->st.p[s->idx[k]].data = s->orig_p[k];
		e->st.g[s->idx[k]].data = s->orig_g[k];
	}
	for (int k = 0; k < s->nblocks; k++)
		free(s->blocks[k]);
}

/* One forward and backward: the loss, gradients in e->st.g. */
static double train_step(struct env *e, struct tbatch *tb)
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

/* Fused groups (one GEMM over the stacked A's of q, k, v and of gate,
 * up) compute what the per-target path computes: the same loss and
 * gradients, and the model says it fused them. */
static void test_lora_fused(void)
{
	char lines[512];
	snprintf(lines, sizeof lines,
		 "%slora_rank = 3\nlora_alpha = 5\nlora_targets = all\n", tiny);
	struct env a, b;
	memset(&b, 0, sizeof b);
	if (env_open(&a, lines) || env_open(&b, lines)) {
		fail("lora_fused: %s", mg_last_error());
		env_close(&a);
		env_close(&b);
		return;
	}
	randomize_b(&a);
	randomize_b(&b);
	struct stacked s = {0};
	static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
	static const char *const gu[2] = {"gate_proj", "up_proj"};
	for (int u = 1; u + 1 < b.st.spec.nunits; u++) {
		stack_group(&b, u, qkv, 3, &s);
		stack_group(&b, u, gu, 2, &s);
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	a.grad_scale = b.grad_scale = 0.01f;
	double la = train_step(&a, &tb);
	/* The fused run's output, to find the model's word that it fused. */
	fflush(stdout);
	FILE *cap = tmpfile();
	int saved = dup(1);
	dup2(fileno(cap), 1);
	double lb = train_step(&b, &tb);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	char out[4096] = "";
	rewind(cap);
	size_t got = fread(out, 1, sizeof out - 1, cap);
	out[got] = 0;
	fclose(cap);
	CHECK(strstr(out, "forward of q_proj,k_proj,v_proj fused") != NULL);
	CHECK(strstr(out, "backward of gate_proj,up_proj fused") != NULL);
	double worst = 0, gmax = 0;
	for (int i = 0; i < a.st.spec.nparams; i++) {
		if (!a.st.g[i].data)
			continue;
		for (int64_t j = 0; j < mg_tensor_numel(&a.st.g[i]); j++) {
			double ga = ((double *)a.st.g[i].data)[j],
			       gb = ((double *)b.st.g[i].data)[j];
			worst = fmax(worst, fabs(ga - gb));
			gmax = fmax(gmax, fabs(ga));
		}
	}
	printf("lora_fused: loss %.15g vs %.15g, gradients differ by %.2e "
	       "(largest %.2e)\n%s",
	       la, lb, worst, gmax, out);
	CHECK(fabs(la - lb) <= 1e-12 * fabs(la));
	CHECK(gmax > 0 && worst <= 1e-10 * gmax);
	unstack(&b, &s);
	env_close(&a);
	env_close(&b);
}

/* ------------------------------------------------------------------ */
/* Fused kernels (the `kernels` option) against the unfused path.       */

static void test_kernels_gradcheck(void)
{
	char lines[512];
	snprintf(lines, sizeof lines,
		 "%stie_embeddings = no\nkernels = fused\nflce_chunk = 5\n",
		 tiny);
	gradcheck(lines);
	snprintf(lines, sizeof lines,
		 "%stie_embeddings = yes\nkernels = rmsnorm,flce\n"
		 "flce_chunk = 7\n",
		 tiny);
	gradcheck(lines);
	/* a LoRA adapter on the fused head: its A and B by differences */
	snprintf(lines, sizeof lines,
		 "%stie_embeddings = no\nkernels = fused\nflce_chunk = 5\n"
		 "lora_rank = 3\nlora_alpha = 5\nlora_targets = v,head\n",
		 tiny);
	gradcheck(lines);
}

/* Steps of plain SGD (p -= 0.5 g) on one batch; losses[k] of step k. */
static int sgd_steps(struct env *e, struct tbatch *tb, int steps,
		     double *losses)
{
	e->grad_scale = 1.0f / 20;
	for (int k = 0; k < steps; k++) {
		losses[k] = train_step(e, tb);
		for (int i = 0; i < e->st.spec.nparams; i++) {
			struct mg_tensor *p = &e->st.p[i], *g = &e->st.g[i];
			if (!g->data)
				continue;
			for (int64_t j = 0; j < mg_tensor_numel(p); j++)
				((double *)p->data)[j] -=
					0.5 * ((double *)g->data)[j];
		}
	}
	return failures;
}

/* Train with kernels = `ker` and compare with the unfused run: losses
 * and final parameters within tol relative (0: bit-identical). */
static void kernels_case(const char *extra, const char *ker, double tol)
{
	char la[512], lb[512];
	snprintf(la, sizeof la, "%s%skernels = none\n", tiny, extra);
	snprintf(lb, sizeof lb, "%s%skernels = %s\nflce_chunk = 5\n", tiny,
		 extra, ker);
	struct env a, b;
	memset(&b, 0, sizeof b);
	if (env_open(&a, la) || env_open(&b, lb)) {
		fail("kernels %s: %s", ker, mg_last_error());
		env_close(&a);
		env_close(&b);
		return;
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	enum { STEPS = 4 };
	double ra[STEPS], rb[STEPS];
	sgd_steps(&a, &tb, STEPS, ra);
	sgd_steps(&b, &tb, STEPS, rb);
	double worst = 0;
	for (int k = 0; k < STEPS; k++)
		worst = fmax(worst, fabs(ra[k] - rb[k]) / fabs(ra[k]));
	double pworst = 0;
	for (int i = 0; i < a.st.spec.nparams; i++)
		for (int64_t j = 0; j < mg_tensor_numel(&a.st.p[i]); j++) {
			double pa = ((double *)a.st.p[i].data)[j],
			       pb = ((double *)b.st.p[i].data)[j];
			pworst =
				fmax(pworst, fabs(pa - pb) / (fabs(pa) + 1e-3));
		}
	printf("kernels %s [%.*s]: losses %.12g .. %.12g vs %.12g .. %.12g, "
	       "loss difference %.2e, parameters %.2e\n",
	       ker, extra[0] ? (int)strlen(extra) - 1 : 0, extra, ra[0],
	       ra[STEPS - 1], rb[0], rb[STEPS - 1], worst, pworst);
	CHECK(ra[STEPS - 1] < ra[0]); /* it trains */
	CHECK(worst <= tol && pworst <= tol * 100);
	/* evaluation: the same metrics */
	double ca = 0, cb = 0;
	double ea = loss_of(&a, &tb.b, &ca), eb = loss_of(&b, &tb.b, &cb);
	CHECK(ca == cb && fabs(ea - eb) <= tol * 100 * fabs(ea));
	env_close(&a);
	env_close(&b);
}

static void test_kernels(void)
{
	kernels_case("", "rmsnorm", 0);
	kernels_case("tie_embeddings = no\n", "flce", 1e-12);
	kernels_case("tie_embeddings = yes\n", "fused", 1e-12);
	kernels_case("tie_embeddings = no\n", "all", 1e-12);
	/* errors name the kernel and the allowed names */
	struct env e;
	char lines[512];
	snprintf(lines, sizeof lines, "%skernels = rmsnorm,fast_ce\n", tiny);
	CHECK(env_open(&e, lines) != 0);
	CHECK(strstr(mg_last_error(), "unknown kernel 'fast_ce'") &&
	      strstr(mg_last_error(), "rmsnorm, flce, none, fused, all"));
	env_close(&e);
	snprintf(lines, sizeof lines, "%skernels = none,flce\n", tiny);
	CHECK(env_open(&e, lines) != 0);
	CHECK(strstr(mg_last_error(), "'none' with other kernels") != NULL);
	env_close(&e);
	/* LoRA trains with the fused head: elsewhere, and on the head
	 * itself (with dropout: both runs draw the same masks) */
	kernels_case("lora_rank = 2\nlora_targets = q,v\n", "fused", 1e-12);
	kernels_case("tie_embeddings = no\nlora_rank = 2\nlora_targets = "
		     "q,head\nlora_dropout = 0.1\n",
		     "fused", 1e-12);
}

/* Activation checkpointing recomputes each layer in backward: the same
 * loss and bit-identical gradients as keeping every layer (CPU kernels
 * are deterministic), with full fine-tuning and with LoRA dropout (the
 * recomputation must draw the forward's masks), and an fp64
 * finite-difference check of the recomputing model. */
static void recompute_case(const char *lines)
{
	char with[640];
	snprintf(with, sizeof with, "%sactivation_checkpointing = true\n",
		 lines);
	struct env a, b;
	memset(&b, 0, sizeof b);
	if (env_open(&a, lines) || env_open(&b, with)) {
		fail("recompute: %s", mg_last_error());
		env_close(&a);
		env_close(&b);
		return;
	}
	if (strstr(lines, "lora_rank")) {
		randomize_b(&a);
		randomize_b(&b);
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	a.grad_scale = b.grad_scale = 0.01f;
	double la = train_step(&a, &tb), lb = train_step(&b, &tb);
	int64_t differ = 0, ngrad = 0;
	for (int i = 0; i < a.st.spec.nparams; i++) {
		if (!a.st.g[i].data)
			continue;
		int64_t n = mg_tensor_numel(&a.st.g[i]);
		ngrad += n;
		differ += memcmp(a.st.g[i].data, b.st.g[i].data,
				 (size_t)n * sizeof(double)) != 0;
	}
	printf("recompute: loss %.17g vs %.17g, %lld gradient values, %lld "
	       "tensors differ\n",
	       la, lb, (long long)ngrad, (long long)differ);
	CHECK(la == lb && ngrad > 0 && differ == 0);
	env_close(&a);
	env_close(&b);
	fd_training = strstr(lines, "lora_dropout") != NULL;
	gradcheck(with);
	fd_training = false;
}

static void test_recompute(void)
{
	char lines[512];
	/* the default kernels (rmsnorm: the residual add fused into the
	 * next norm, which the recomputation must not add twice) and the
	 * unfused reference */
	recompute_case(untied);
	snprintf(lines, sizeof lines, "%skernels = none\n", untied);
	recompute_case(lines);
	snprintf(lines, sizeof lines, "%skernels = fused\nflce_chunk = 7\n",
		 untied);
	recompute_case(lines);
	snprintf(lines, sizeof lines,
		 "%slora_rank = 2\nlora_alpha = 4\nlora_dropout = 0.3\n"
		 "lora_targets = all\n",
		 tiny);
	recompute_case(lines);
}

/* ------------------------------------------------------------------ */
/* Quantization-aware training (qat = 8da4w): the straight-through      */
/* estimator of the whole model, in fp64.                               */

/*
 * Finite differences of the QAT model itself say nothing: fq4 and fq8
 * are step functions, so the loss is piecewise constant along most
 * directions. The STE gradient is, by definition, the exact gradient of
 * a surrogate model in which every fake quantizer y = fq(v), at the
 * current point v0, is replaced by its masked linearization
 *     y(v) = fq(v0) + M (v - v0),   M = 1 where v0's code is unclamped,
 * which equals the QAT model at v0 and is smooth. These tests interpose
 * the two fake-quantization ops the plugin calls: this executable exports
 * its own mg_op_fq_int4_weight, mg_op_fq_int8_token and
 * mg_op_fq_int8_token_backward (ENABLE_EXPORTS), which the dlopened
 * plugin binds ahead of libmg's; the real ones are reached through
 * RTLD_NEXT. In STE_PASS they are the real ops; in STE_RECORD they run
 * the real op and keep v0, fq(v0) and M (the real backward op of ones)
 * under the input's address (each projection input has its own arena
 * slot, each lent weight its own storage); in STE_SURROGATE they compute
 * the linearization from what was kept. The QAT gradient is taken with
 * the real ops only, and compared with central differences of the
 * surrogate: an ordinary gradcheck of the STE (qat_ste).
 *
 * Real per-token activation ranges cover their row, so the int8 code
 * clamps only at f32 near-ties and the recorded activation masks are
 * all-pass in practice. With ste_drop the recorded activation masks
 * lose elements (every third one, and all of the first recorded input:
 * layer 0's q/k/v input) and the interposed backward op applies them
 * instead of the real one; the surrogate uses the same masks. That
 * checks the model's wiring of the activation STE with clamps present:
 * the summed q/k/v input gradient masked once, the adapters' share
 * (their input is not quantized) added after the mask, and layer 0's
 * input norm getting exactly no gradient through a fully masked input.
 *
 * qat_mask is exact, no differences: the weight STE bit for bit (see
 * qat_mask_case).
 */
enum ste_mode { STE_PASS, STE_RECORD, STE_SURROGATE };
static enum ste_mode ste_mode;
static bool ste_drop;	   /* synthetic clamps in activation masks */
static bool ste_bwd_masks; /* backward: the recorded activation masks */
struct ste_rec {
	const void *key;
	bool act;
	int order; /* among activation records */
	int64_t n;
	double *v0, *y0, *m;
};
static struct ste_rec ste_recs[256];
static int ste_nrec, ste_nact;
static int64_t ste_clamped[2]; /* zeros of the real masks: weights, acts */

static void ste_reset(void)
{
	for (int i = 0; i < ste_nrec; i++) {
		free(ste_recs[i].v0);
		free(ste_recs[i].y0);
		free(ste_recs[i].m);
	}
	memset(ste_recs, 0, sizeof ste_recs);
	ste_nrec = ste_nact = 0;
	ste_clamped[0] = ste_clamped[1] = 0;
	ste_mode = STE_PASS;
	ste_drop = ste_bwd_masks = false;
}

static struct ste_rec *ste_find(const void *key)
{
	for (int i = 0; i < ste_nrec; i++)
		if (ste_recs[i].key == key)
			return &ste_recs[i];
	return NULL;
}

typedef int (*fq4_fn)(struct mg_ctx *, const struct mg_tensor *, int64_t,
		      struct mg_tensor *);
typedef int (*fq4b_fn)(struct mg_ctx *, const struct mg_tensor *, int64_t,
		       const struct mg_tensor *, struct mg_tensor *);
typedef int (*fq8_fn)(struct mg_ctx *, const struct mg_tensor *,
		      struct mg_tensor *);
typedef int (*fq8b_fn)(struct mg_ctx *, const struct mg_tensor *,
		       const struct mg_tensor *, struct mg_tensor *);

static void *real_op(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "no %s after this executable: %s\n", name,
			dlerror());
		abort();
	}
	return f;
}

/* Keep v0 = v, y0 = y and M (the real backward of ones) for v's
 * address; with ste_drop an activation mask loses elements. */
static int ste_record(struct mg_ctx *ctx, const struct mg_tensor *v,
		      const struct mg_tensor *y, bool act, int64_t group)
{
	if (v->dtype != MG_F64)
		return mg_error("qat_ste: F64 tensors only");
	struct ste_rec *r = ste_find(v->data);
	if (!r) {
		if (ste_nrec == (int)(sizeof ste_recs / sizeof *ste_recs))
			return mg_error("qat_ste: too many records");
		r = &ste_recs[ste_nrec++];
		r->key = v->data;
		r->act = act;
		r->order = act ? ste_nact++ : -1;
	} else {
		free(r->v0);
		free(r->y0);
		free(r->m);
	}
	const int64_t n = mg_tensor_numel(v);
	const size_t bytes = (size_t)n * sizeof(double);
	r->n = n;
	r->v0 = malloc(bytes);
	r->y0 = malloc(bytes);
	r->m = malloc(bytes);
	double *ones = malloc(bytes);
	for (int64_t j = 0; j < n; j++)
		ones[j] = 1;
	memcpy(r->v0, v->data, bytes);
	memcpy(r->y0, y->data, bytes);
	struct mg_tensor dy = *v, dm = *v;
	dy.data = ones;
	dm.data = r->m;
	int rc = act ? ((fq8b_fn)real_op("mg_op_fq_int8_token_backward"))(
			       ctx, v, &dy, &dm)
		     : ((fq4b_fn)real_op("mg_op_fq_int4_weight_backward"))(
			       ctx, v, group, &dy, &dm);
	free(ones);
	for (int64_t j = 0; j < n; j++) {
		ste_clamped[act] += r->m[j] == 0;
		if (act && ste_drop && (j % 3 == 0 || r->order == 0))
			r->m[j] = 0;
	}
	return rc;
}

/* y = y0 + M (v - v0) of v's record. */
static int ste_surrogate(const struct mg_tensor *v, struct mg_tensor *y)
{
	const struct ste_rec *r = ste_find(v->data);
	if (v->dtype != MG_F64 || !r || r->n != mg_tensor_numel(v))
		return mg_error("qat_ste: no record of a %lld-element input",
				(long long)mg_tensor_numel(v));
	const double *x = v->data;
	double *o = y->data;
	for (int64_t j = 0; j < r->n; j++)
		o[j] = r->y0[j] + r->m[j] * (x[j] - r->v0[j]);
	return 0;
}

int mg_op_fq_int4_weight(struct mg_ctx *ctx, const struct mg_tensor *w,
			 int64_t group, struct mg_tensor *out)
{
	if (ste_mode == STE_SURROGATE)
		return ste_surrogate(w, out);
	if (((fq4_fn)real_op("mg_op_fq_int4_weight"))(ctx, w, group, out))
		return -1;
	return ste_mode == STE_RECORD ? ste_record(ctx, w, out, false, group)
				      : 0;
}

int mg_op_fq_int8_token(struct mg_ctx *ctx, const struct mg_tensor *x,
			struct mg_tensor *out)
{
	if (ste_mode == STE_SURROGATE)
		return ste_surrogate(x, out);
	if (((fq8_fn)real_op("mg_op_fq_int8_token"))(ctx, x, out))
		return -1;
	return ste_mode == STE_RECORD ? ste_record(ctx, x, out, true, 0) : 0;
}

int mg_op_fq_int8_token_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
				 const struct mg_tensor *dy,
				 struct mg_tensor *dx)
{
	if (!ste_bwd_masks)
		return ((fq8b_fn)real_op("mg_op_fq_int8_token_backward"))(
			ctx, x, dy, dx);
	const struct ste_rec *r = ste_find(x->data);
	if (x->dtype != MG_F64 || !r || r->n != mg_tensor_numel(x))
		return mg_error("qat_ste: backward of an unrecorded input");
	for (int64_t j = 0; j < r->n; j++)
		((double *)dx->data)[j] =
			r->m[j] != 0 ? ((const double *)dy->data)[j] : 0.0;
	return 0;
}

/* Projection kinds the QAT tests swap in (the plugin's own are not
 * exported): the weights and inputs as stored, and the inputs
 * fake-quantized over weights as stored (what quant = int4 runs). */
static const struct mg_tensor *stored_w(struct llama *m, struct mg_ctx *ctx,
					const struct mg_tensor *w)
{
	(void)m, (void)ctx;
	return w;
}

static void no_words(const struct llama *m)
{
	(void)m;
}

static const struct llama_proj_kind plain_kind = {"plain", false, stored_w,
						  NULL, no_words};
static const struct llama_proj_kind fq_input_kind = {"fq_input", true, stored_w,
						     NULL, no_words};

/* The QAT gradient (real ops; with drop the recorded activation masks
 * in backward) against central differences of the surrogate on 6
 * samples of every trainable tensor. */
static void qat_ste_case(const char *what, const char *lines, bool drop)
{
	struct env e;
	ste_reset();
	if (env_open(&e, lines)) {
		fail("qat_ste %s: %s", what, mg_last_error());
		env_close(&e);
		return;
	}
	const bool lora = strstr(lines, "lora_rank") != NULL;
	if (lora)
		randomize_b(&e);
	struct tbatch tb;
	tbatch_make(&tb, 32);
	double count = 0;
	const double lqat = loss_of(&e, &tb.b, &count);
	e.grad_scale = (float)(1.0 / count);
	double m[MG_METRIC_N];
	int64_t nm = MG_METRIC_N;
	struct mg_tensor mt = mg_tensor_make(m, MG_F64, MG_DEV_CPU, 1, &nm);
	ts_zero_grads(&e.st);
	e.ctx.training = true;
	ste_drop = drop;
	ste_mode = STE_RECORD;
	int rc = M->forward(e.model, &e.ctx, &tb.b, &mt);
	ste_mode = STE_PASS;
	ste_bwd_masks = drop;
	rc = rc || M->backward(e.model, &e.ctx);
	ste_bwd_masks = false;
	if (rc) {
		fail("qat_ste %s: train step: %s", what, mg_last_error());
		env_close(&e);
		ste_reset();
		return;
	}
	ts_check_step(&e.st, true);
	const int L = (int)((struct llama *)e.model)->c.layers;
	/* every projection's input and weight of every layer recorded */
	CHECK(ste_nact == 4 * L && ste_nrec == 11 * L);
	/* the surrogate at the point is the QAT model; the plain model is
	 * not (so the fake quantizers are in the path) */
	ste_mode = STE_SURROGATE;
	const double lsur = loss_of(&e, &tb.b, NULL);
	ste_mode = STE_PASS;
	struct llama *lm = e.model;
	const struct llama_proj_kind *qat = lm->proj;
	lm->proj = &plain_kind;
	const double lplain = loss_of(&e, &tb.b, NULL);
	lm->proj = qat;
	CHECK(fabs(lsur - lqat) <= 1e-13 * fabs(lqat));
	CHECK(fabs(lplain - lqat) > 1e-6);
	const double gfix = (1.0 / count) / (double)e.grad_scale;
	char label[96];
	snprintf(label, sizeof label, "qat_ste %s%s (surrogate)", what,
		 drop ? " (masks dropped)" : "");
	double worst;
	ste_mode = STE_SURROGATE;
	const int checked =
		fd_check(&e, &tb.b, gfix, 6, 31, 1e-4, label, &worst);
	ste_mode = STE_PASS;
	/* Every group's code of +absmax is 8, clamped: the real weight
	 * masks are never all-pass (with LoRA the frozen base's). */
	CHECK(ste_clamped[0] > 0);
	if (drop && !lora) {
		/* layer 0's q/k/v input fully masked: its input norm gets
		 * nothing, the embedding still gets the residual's share */
		const struct mg_unit_decl *u = &e.st.spec.units[1];
		const struct mg_tensor *gn =
			&e.st.g[u->first_param + LP_IN_NORM];
		double gmax = 0, emax = 0;
		for (int64_t j = 0; j < mg_tensor_numel(gn); j++)
			gmax = fmax(gmax, fabs(((double *)gn->data)[j]));
		for (int64_t j = 0; j < mg_tensor_numel(&e.st.g[0]); j++)
			emax = fmax(emax, fabs(((double *)e.st.g[0].data)[j]));
		CHECK(gmax == 0 && emax > 0);
	}
	printf("qat_ste %s%s: %d values, worst relative error %.2e; loss "
	       "qat %.12f plain %.12f; clamped codes: %lld weight, %lld "
	       "activation\n",
	       what, drop ? " (activation masks dropped)" : "", checked, worst,
	       lqat, lplain, (long long)ste_clamped[0],
	       (long long)ste_clamped[1]);
	env_close(&e);
	ste_reset();
}

static void test_qat_ste(void)
{
	char lines[640];
	qat_ste_case("full", qat_tiny, false);
	qat_ste_case("full", qat_tiny, true);
	/* LoRA on some projections and the head: the frozen base
	 * fake-quantized, the adapters reading the unquantized input */
	snprintf(lines, sizeof lines,
		 "%slora_rank = 3\nlora_alpha = 5\nlora_targets = "
		 "q,v,down,head\n",
		 qat_tiny);
	qat_ste_case("lora q,v,down,head", lines, false);
	qat_ste_case("lora q,v,down,head", lines, true);
	/* every projection adapted: the fused q/k/v and gate/up paths */
	snprintf(lines, sizeof lines,
		 "%slora_rank = 2\nlora_alpha = 4\nlora_targets = all\n",
		 qat_tiny);
	qat_ste_case("lora all (fused)", lines, true);
}

static bool is_proj_weight(const char *name)
{
	return strstr(name, "_proj.weight") && !strstr(name, ".lora_");
}

/*
 * The weight STE exactly. Model A trains with qat (lines + a_extra);
 * model B has the same parameters except that its projection weights are
 * fq4(W) (the op; tests/qat checks its numbers) and fake-quantizes
 * activations only (m->qat off, fq_act on: what quant = int4 runs). Their
 * forwards compute the same numbers (A quantizes W into a scratch, B
 * reads the same values), so by the STE every gradient is equal bit for
 * bit, except a projection weight's: A's is B's where W's int4 code
 * (computed here from mg/int4.h) is unclamped and exactly 0 where it is
 * clamped - in every group whose absmax is positive at least (round(7.5)
 * = 8 > 7), and B's gradient there is not 0.
 */
static void qat_mask_case(const char *lines, const char *a_extra)
{
	char la[768];
	snprintf(la, sizeof la, "%s%s", lines, a_extra);
	struct env a, b;
	memset(&b, 0, sizeof b);
	if (env_open(&a, la) || env_open(&b, lines)) {
		fail("qat_mask '%s': %s", la, mg_last_error());
		env_close(&a);
		env_close(&b);
		return;
	}
	struct llama *mb = b.model;
	const int64_t group = mb->qat_group;
	/* b: the inputs fake-quantized, the weights as stored (the int4
	 * kind) over weights quantized once below */
	CHECK(mb->proj->fq_input && mb->proj->weight_grad);
	mb->proj = &fq_input_kind;
	if (strstr(lines, "lora_rank")) {
		randomize_b(&a);
		randomize_b(&b);
	}
	int nproj = 0;
	for (int i = 0; i < b.st.spec.nparams; i++) {
		if (!is_proj_weight(b.st.spec.params[i].name))
			continue;
		CHECK(mg_op_fq_int4_weight(&b.ctx, &b.st.p[i], group,
					   &b.st.p[i]) == 0);
		nproj++;
	}
	struct tbatch tb;
	tbatch_make(&tb, 32);
	a.grad_scale = b.grad_scale = 0.01f;
	const double lossa = train_step(&a, &tb), lossb = train_step(&b, &tb);
	CHECK(lossa == lossb);
	int64_t nclamp = 0, nclamp_b = 0, nkept = 0, bad = 0;
	int nmasked = 0;
	for (int i = 0; i < a.st.spec.nparams; i++) {
		const struct mg_tensor *g1 = &a.st.g[i], *g2 = &b.st.g[i];
		if (!g1->data) {
			CHECK(!g2->data);
			continue;
		}
		const int64_t n = mg_tensor_numel(g1);
		const double *ga = g1->data, *gb = g2->data,
			     *w = a.st.p[i].data;
		if (!is_proj_weight(a.st.spec.params[i].name)) {
			if (memcmp(ga, gb, (size_t)n * sizeof *ga)) {
				fail("qat_mask '%s': %s differs", la,
				     a.st.spec.params[i].name);
			}
			continue;
		}
		nmasked++;
		for (int64_t g0 = 0; g0 < n; g0 += group) {
			float amax = 0;
			for (int64_t j = g0; j < g0 + group; j++)
				amax = fmaxf(amax, fabsf((float)w[j]));
			const float s = mg_int4_scale(amax), inv = 1.0f / s;
			for (int64_t j = g0; j < g0 + group; j++) {
				const float q = mg_fq_code((float)w[j], inv, 0);
				const bool clamped =
					q < MG_INT4_QMIN || q > MG_INT4_QMAX;
				const double want = clamped ? 0.0 : gb[j];
				nclamp += clamped;
				nclamp_b += clamped && gb[j] != 0;
				nkept += !clamped && gb[j] != 0;
				if (!(ga[j] == want) && bad++ < 5)
					fail("qat_mask '%s': %s[%lld] "
					     "(code %s): %.17g, want %.17g",
					     la, a.st.spec.params[i].name,
					     (long long)j,
					     clamped ? "clamped" : "kept",
					     ga[j], want);
			}
		}
	}
	printf("qat_mask '%s': loss %.15g; %d projections, %d masked: %lld "
	       "clamped codes (%lld with a nonzero gradient unmasked), %lld "
	       "nonzero kept\n",
	       la, lossa, nproj, nmasked, (long long)nclamp,
	       (long long)nclamp_b, (long long)nkept);
	CHECK(nproj == 7 * 2);
	if (strstr(lines, "lora_rank")) {
		CHECK(nmasked == 0);
	} else {
		CHECK(nmasked == nproj && nclamp_b > 0 && nkept > 0);
	}
	CHECK(bad == 0);
	env_close(&a);
	env_close(&b);
}

static void test_qat_mask(void)
{
	char lines[640];
	qat_mask_case(qat_tiny, "");
	/* activation checkpointing: the recomputed layers quantize again */
	qat_mask_case(qat_tiny, "activation_checkpointing = true\n");
	/* group 4, GQA 4/1, tied: other groups, another shape */
	qat_mask_case("vocab_size = 32\nhidden_size = 16\nnum_heads = 4\n"
		      "num_kv_heads = 1\nintermediate_size = 24\nnum_layers = "
		      "2\ntie_embeddings = yes\nqat = 8da4w\nqat_group = 4\n",
		      "");
	/* LoRA: the frozen base is read fake-quantized, the adapters'
	 * gradients bit for bit those of B's base fq4(W) */
	snprintf(lines, sizeof lines,
		 "%slora_rank = 3\nlora_alpha = 5\nlora_targets = all,head\n",
		 qat_tiny);
	qat_mask_case(lines, "");
}

/* init_unit_part: inside each requested range the values init_unit
 * made; outside it, when the tensor is drawn (no LoRA adapters, which
 * are made whole), nothing written. */
static void init_part_case(const char *lines, bool untouched)
{
	struct env e;
	if (env_open(&e, lines))
		return;
	const struct mg_model_spec *s = &e.st.spec;
	uint64_t r = 12345;
	for (int u = 0; u < s->nunits; u++) {
		const struct mg_unit_decl *ud = &s->units[u];
		const int n = ud->nparams;
		struct mg_tensor t[n];
		int64_t lo[n], hi[n];
		for (int k = 0; k < n; k++) {
			const struct mg_tensor *ref =
				&e.st.p[ud->first_param + k];
			const int64_t m = mg_tensor_numel(ref);
			t[k] = *ref;
			t[k].data = malloc((size_t)m * sizeof(double));
			for (int64_t j = 0; j < m; j++)
				((double *)t[k].data)[j] = NAN;
			/* empty, whole and inner ranges in turn */
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			int64_t a = (int64_t)((r >> 33) % (uint64_t)(m + 1));
			int64_t b = a + (int64_t)((r >> 13) %
						  (uint64_t)(m - a + 1));
			lo[k] = k % 3 == 0 ? 0 : a;
			hi[k] = k % 3 == 0 ? (u % 2 ? m : 0) : b;
		}
		CHECK(M->init_unit_part(e.model, u, t,
					mg_rng_key(e.ctx.seed, (uint64_t)u), lo,
					hi) == 0);
		for (int k = 0; k < n; k++) {
			const double *want = e.st.p[ud->first_param + k].data,
				     *got = t[k].data;
			const int64_t m = mg_tensor_numel(&t[k]);
			int64_t bad = 0, spill = 0;
			for (int64_t j = 0; j < m; j++) {
				bool in = j >= lo[k] && j < hi[k];
				if (in &&
				    memcmp(&want[j], &got[j], sizeof *got))
					bad++;
				if (!in && !isnan(got[j]))
					spill++;
			}
			if (bad || (untouched && spill))
				fail("unit %d param %d [%lld, %lld) of %lld: "
				     "%lld differ, %lld written outside",
				     u, k, (long long)lo[k], (long long)hi[k],
				     (long long)m, (long long)bad,
				     (long long)spill);
			free(t[k].data);
		}
	}
	/* a range past the tensor is refused, naming it */
	const struct mg_unit_decl *ud = &s->units[1];
	struct mg_tensor t[ud->nparams];
	int64_t lo[ud->nparams], hi[ud->nparams];
	for (int k = 0; k < ud->nparams; k++) {
		t[k] = e.st.p[ud->first_param + k];
		lo[k] = 0;
		hi[k] = mg_tensor_numel(&t[k]);
	}
	hi[1] += 1;
	CHECK(M->init_unit_part(e.model, 1, t, 7, lo, hi) != 0);
	CHECK(strstr(mg_last_error(), "init range") != NULL);
	env_close(&e);
}

static void test_init_part(void)
{
	init_part_case(tiny, true);
	char lines[512];
	snprintf(lines, sizeof lines, "%slora_rank = 2\nlora_targets = all\n",
		 tiny);
	init_part_case(lines, false);
}

static const struct test_case cases[] = {
	{"gradcheck", test_gradcheck},
	{"families_gradcheck", test_families_gradcheck},
	{"families_decode", test_families_decode},
	{"families_window", test_families_window},
	{"families_phi3", test_families_phi3},
	{"masking", test_masking},
	{"errors", test_errors},
	{"decode", test_decode},
	{"lora_merge", test_lora_merge},
	{"lora_gradcheck", test_lora_gradcheck},
	{"lora_dropout", test_lora_dropout},
	{"lora_fused", test_lora_fused},
	{"kernels_gradcheck", test_kernels_gradcheck},
	{"kernels", test_kernels},
	{"recompute", test_recompute},
	{"qat_ste", test_qat_ste},
	{"qat_mask", test_qat_mask},
	{"init_part", test_init_part},
};

int main(int argc, char **argv)
{
	return llama_test_main("test_llama", cases,
			       sizeof cases / sizeof cases[0], argc, argv);
}
