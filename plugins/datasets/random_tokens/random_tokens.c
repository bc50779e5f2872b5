/*
 * random_tokens.c - a synthetic token dataset: seeded random documents
 * with a chosen length distribution, a masked "prompt" at the start of
 * each (labels MG_IGNORE_INDEX), optionally packed several to a row with
 * positions restarting at each document, or as preference pairs for
 * DPO (pairs = true: a document, then the same prompt with a noise
 * continuation, in one row).
 *
 * Why: sequence models, strategies and benchmarks need token batches
 * with realistic raggedness and masks without any data files. Documents
 * are not pure noise: with probability `predictable` the next token is a
 * fixed permutation of the current one, so a model can learn something
 * and a falling loss means training works (the floor is the entropy of
 * the rest). Every sample is a pure function of (seed, split, index), so
 * reads are thread-safe and identical on every rank.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"

enum { LEN_FIXED = 0, LEN_UNIFORM = 1 };

struct rtok {
	int64_t vocab, seq_len, min_len, count[2];
	int lengths;
	double predictable, prompt_frac;
	bool pack, pairs;
	uint64_t seed;
	int32_t *next; /* [vocab]: the predictable successor of each id */
};

static const struct mg_option rtok_options[] = {
	MG_OPT_I("vocab_size", "256", 2, 1 << 24,
		 "token ids are 0..vocab_size-1"),
	MG_OPT_I("seq_len", "128", 2, 1 << 20, "longest row in tokens"),
	MG_OPT_E("lengths", "uniform", "fixed|uniform",
		 "document lengths: all seq_len, or uniform in "
		 "[min_len, seq_len]"),
	MG_OPT_I("min_len", "16", 1, 1 << 20, "shortest document (uniform)"),
	MG_OPT_F("prompt_frac", "0.25", 0, 0.95,
		 "leading fraction of each document whose labels are masked "
		 "(an instruction's prompt: no loss there)"),
	MG_OPT_B("pack", "false",
		 "pack documents into full rows of seq_len tokens; positions "
		 "restart at each document and attention stays inside it"),
	MG_OPT_B("pairs", "false",
		 "rows of preference pairs (DPO, model objective = dpo): a "
		 "document of at most seq_len / 2 tokens (chosen), then the "
		 "same prompt continued with uniform noise (rejected), "
		 "positions restarting there"),
	MG_OPT_F("predictable", "0.75", 0, 1,
		 "probability that a token is a fixed function of the one "
		 "before (0: pure noise, loss floor ln(vocab_size))"),
	MG_OPT_I("train_samples", "4096", 1, 1ll << 40,
		 "rows in the train split"),
	MG_OPT_I("test_samples", "512", 1, 1ll << 40, "rows in the test split"),
	MG_OPT_I("seed", "1234", 0, 9.2e18,
		 "data seed (independent of run.seed, so runs with other "
		 "seeds see the same data)"),
	MG_OPT_END,
};

static int rtok_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	(void)ctx;
	struct rtok *d = calloc(1, sizeof *d);
	if (!d)
		return mg_error("random_tokens: out of memory");
	d->vocab = mg_opt_int(o, "vocab_size");
	d->seq_len = mg_opt_int(o, "seq_len");
	d->lengths = mg_opt_enum(o, "lengths");
	d->min_len = mg_opt_int(o, "min_len");
	d->prompt_frac = mg_opt_float(o, "prompt_frac");
	d->pack = mg_opt_bool(o, "pack");
	d->pairs = mg_opt_bool(o, "pairs");
	d->predictable = mg_opt_float(o, "predictable");
	d->count[MG_SPLIT_TRAIN] = mg_opt_int(o, "train_samples");
	d->count[MG_SPLIT_TEST] = mg_opt_int(o, "test_samples");
	d->seed = (uint64_t)mg_opt_int(o, "seed");
	if (d->pairs && d->pack) {
		free(d);
		return mg_error("random_tokens: pairs and pack exclude each "
				"other (one pair a row)");
	}
	if (d->lengths == LEN_UNIFORM && d->min_len > d->seq_len) {
		int rc = mg_error("random_tokens: min_len %lld exceeds seq_len "
				  "%lld",
				  (long long)d->min_len, (long long)d->seq_len);
		free(d);
		return rc;
	}
	int64_t *perm = malloc((size_t)d->vocab * sizeof *perm);
	d->next = malloc((size_t)d->vocab * sizeof *d->next);
	if (!perm || !d->next) {
		free(perm);
		free(d->next);
		free(d);
		return mg_error("random_tokens: out of memory");
	}
	mg_rng_permutation(mg_rng_key(d->seed, 0xF00D), d->vocab, perm);
	for (int64_t v = 0; v < d->vocab; v++)
		d->next[v] = (int32_t)perm[v];
	free(perm);
	*self = d;
	return 0;
}

static void rtok_destroy(void *self)
{
	struct rtok *d = self;
	if (!d)
		return;
	free(d->next);
	free(d);
}

static int64_t rtok_count(void *self, enum mg_split split)
{
	const struct rtok *d = self;
	return d->count[split == MG_SPLIT_TEST];
}

static int rtok_layout(void *self, struct mg_sample_layout *l)
{
	const struct rtok *d = self;
	mg_token_layout(l, d->seq_len, d->vocab);
	return 0;
}

/* Document length from draw u in [0, 1). */
static int64_t doc_len(const struct rtok *d, double u)
{
	if (d->lengths == LEN_FIXED)
		return d->seq_len;
	return d->min_len +
	       (int64_t)(u * (double)(d->seq_len - d->min_len + 1));
}

/* Write one document of n tokens at ids/labels/pos; its random stream is
 * key, counters from 0. */
static void write_doc(const struct rtok *d, uint64_t key, int64_t n,
		      int32_t *ids, int32_t *labels, int32_t *pos)
{
	uint64_t c = 1; /* counter 0 drew the length */
	int32_t x = (int32_t)(mg_rng_u64(key, c++) % (uint64_t)d->vocab);
	int64_t prompt = (int64_t)floor(d->prompt_frac * (double)n);
	for (int64_t t = 0; t < n; t++) {
		int32_t y = mg_rng_uniform(key, c++) < d->predictable
				    ? d->next[x]
				    : (int32_t)(mg_rng_u64(key, c++) %
						(uint64_t)d->vocab);
		ids[t] = x;
		labels[t] = t < prompt ? MG_IGNORE_INDEX : y;
		pos[t] = (int32_t)t;
		x = y;
	}
}

/* A preference pair at ids/labels/pos: the document of key (chosen, at
 * most half the row), then its prompt continued with noise (rejected).
 * Returns the tokens written. */
static int64_t write_pair(const struct rtok *d, uint64_t key, int32_t *ids,
			  int32_t *labels, int32_t *pos)
{
	int64_t n = doc_len(d, mg_rng_uniform(key, 0));
	if (n > d->seq_len / 2)
		n = d->seq_len / 2;
	write_doc(d, key, n, ids, labels, pos);
	const int64_t prompt = (int64_t)floor(d->prompt_frac * (double)n);
	const uint64_t k2 = mg_rng_key(key, 0x5EC0);
	int32_t *ri = ids + n, *rl = labels + n, *rp = pos + n;
	for (int64_t t = 0; t <= n; t++) {
		/* the shared prompt is ids[0..prompt]: its last token's
		 * label is the first response token */
		int32_t v = t <= prompt && t < n
				    ? ids[t]
				    : (int32_t)(mg_rng_u64(k2, (uint64_t)t) %
						(uint64_t)d->vocab);
		if (t < n) {
			ri[t] = v;
			rp[t] = (int32_t)t;
		}
		if (t > 0)
			rl[t - 1] = t - 1 < prompt ? MG_IGNORE_INDEX : v;
	}
	return 2 * n;
}

static int rtok_read_tokens(void *self, enum mg_split split, const int64_t *idx,
			    int64_t n, const struct mg_token_rows *out)
{
	const struct rtok *d = self;
	const int64_t L = d->seq_len, cnt = rtok_count(self, split);
	uint64_t skey = mg_rng_key(d->seed, (uint64_t)split + 1);
	for (int64_t i = 0; i < n; i++) {
		if (idx[i] < 0 || idx[i] >= cnt)
			return mg_error("random_tokens: index %lld outside the "
					"%lld samples of the split",
					(long long)idx[i], (long long)cnt);
		int32_t *ids = out->ids + i * out->stride;
		int32_t *lab = out->labels + i * out->stride;
		int32_t *pos = out->positions + i * out->stride;
		uint64_t rkey = mg_rng_key(skey, (uint64_t)idx[i]);
		int64_t used = 0;
		if (d->pairs)
			used = write_pair(d, mg_rng_key(rkey, 0), ids, lab,
					  pos);
		for (uint64_t doc = 0; !d->pairs && used < L; doc++) {
			uint64_t key = mg_rng_key(rkey, doc);
			int64_t len = doc_len(d, mg_rng_uniform(key, 0));
			if (len > L - used)
				len = L - used;
			write_doc(d, key, len, ids + used, lab + used,
				  pos + used);
			used += len;
			if (!d->pack)
				break;
		}
		for (int64_t t = used; t < L; t++) {
			ids[t] = 0;
			lab[t] = MG_IGNORE_INDEX;
			pos[t] = 0;
		}
		out->lens[i] = (int32_t)used;
	}
	return 0;
}

static const struct mg_dataset_ops rtok_ops = {
	.count = rtok_count,
	.layout = rtok_layout,
	.read_tokens = rtok_read_tokens,
};

static const struct mg_plugin rtok_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_DATASET,
	.name = "random_tokens",
	.version = "1.0",
	.description = "synthetic token rows: seeded documents with ragged "
		       "lengths, masked prompts, optional packing or "
		       "preference pairs",
	.options = rtok_options,
	.create = rtok_create,
	.destroy = rtok_destroy,
	.ops = &rtok_ops,
};

MG_PLUGIN_DEFINE(rtok_plugin)
