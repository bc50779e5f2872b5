/*
 * test_frozen.c - frozen parameters (a LoRA base) in strategy storage,
 * under mixed precision on the CPU device (master F32, compute BF16):
 * the path GPU runs take, checked where CI can run it.
 *
 *   test_frozen replica|flat
 *
 * replica: a frozen tensor is kept once in the compute dtype (the
 * MG_P_FP32 one in F32), lent with no gradient, its values the model's
 * rounded to BF16; the accounted parameter memory is exactly the
 * trained master + compute copies plus the frozen tensors once, and less
 * than the same model fully trained. flat: a frozen flat lent in BF16
 * has no master shard, the master buffer holds the trained flats only.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/test_util.h"
#include "mg/kit/flat.h"
#include "mg/kit/replica.h"
#include "mg/mg.h"
#include "runtime/runtime.h"

/* Initial value of element j of unit parameter i. */
static double value(int unit, int i, int64_t j)
{
	return 0.37 * (double)(j % 11) - 1.1 + 0.01 * i + 0.5 * unit;
}

static int init_unit(void *self, int unit, struct mg_tensor *p, uint64_t seed)
{
	(void)self;
	(void)seed;
	const int n = unit == 0 ? 3 : 1;
	for (int i = 0; i < n; i++)
		for (int64_t j = 0; j < mg_tensor_numel(&p[i]); j++)
			((float *)p[i].data)[j] = (float)value(unit, i, j);
	return 0;
}

static const struct mg_model_ops ops = {.init_unit = init_unit};

/* Unit 0: a trained matrix, a frozen matrix, a frozen fp32 norm; unit 1:
 * a trained bias. frozen: declare the two frozen ones frozen (else all
 * trained). */
static void make_spec(struct mg_model_spec *s, bool frozen)
{
	memset(s, 0, sizeof *s);
	const int64_t w[2] = {4, 8}, f[2] = {16, 8}, n[1] = {8}, b[1] = {3};
	const int T = MG_P_TRAIN;
	mg_spec_add_unit(s, "u0");
	mg_spec_add_param(s, "w", MG_DTYPE_AUTO, T, 2, w);
	mg_spec_add_param(s, "base", MG_DTYPE_AUTO, frozen ? 0 : T, 2, f);
	mg_spec_add_param(s, "norm", MG_DTYPE_AUTO,
			  (frozen ? 0 : T) | MG_P_FP32 | MG_P_NO_DECAY, 1, n);
	mg_spec_add_unit(s, "u1");
	mg_spec_add_param(s, "b", MG_DTYPE_AUTO, T | MG_P_NO_DECAY, 1, b);
}

struct env {
	struct mg_device dev;
	struct mg_stats stats;
	struct mg_ctx ctx;
};

static void env_init(struct env *e)
{
	memset(e, 0, sizeof *e);
	e->dev.kind = MG_DEV_CPU;
	e->dev.threads = 1;
	e->ctx.struct_size = sizeof e->ctx;
	e->ctx.dev = &e->dev;
	e->ctx.world = 1;
	e->ctx.master_dtype = MG_F32;
	e->ctx.compute_dtype = MG_BF16;
	e->ctx.model_ops = &ops;
	e->ctx.stats = &e->stats;
}

/* Parameter memory of a replica of the spec (frozen or not). */
static int64_t replica_params(bool frozen, bool check_views)
{
	struct env e;
	env_init(&e);
	struct mg_model_spec s;
	make_spec(&s, frozen);
	struct mg_replica r;
	if (mg_replica_init(&r, &e.ctx, &s)) {
		fail("replica init: %s", mg_last_error());
		return -1;
	}
	int64_t bytes = e.stats.mem_cur[MG_MEM_PARAMS];
	if (check_views) {
		/* The lent views of unit 0. */
		struct mg_unit_view *v =
			mg_replica_view(&r, 0, MG_PHASE_FORWARD);
		CHECK(v->params[0].dtype == MG_BF16 && v->grads[0].data);
		CHECK(v->params[1].dtype == MG_BF16 && !v->grads[1].data);
		CHECK(v->params[2].dtype == MG_F32 && !v->grads[2].data);
		for (int64_t j = 0; j < 128; j++) {
			float want = mg_bf16_to_float(
				mg_float_to_bf16((float)value(0, 1, j)));
			CHECK(mg_bf16_to_float(
				      ((uint16_t *)v->params[1].data)[j]) ==
			      want);
		}
		for (int64_t j = 0; j < 8; j++)
			CHECK(((float *)v->params[2].data)[j] ==
			      (float)value(0, 2, j));
		/* Trained: 32 + 3 in the F32 master and a BF16 copy;
		 * frozen: 128 BF16 and 8 F32, each 256-aligned; no
		 * gradient for them. */
		CHECK(r.n_train == 35 && r.n_params == 35);
		CHECK(r.frozen_bytes == 256 + 256);
		CHECK(e.stats.mem_cur[MG_MEM_GRADS] == 35 * 2);
	}
	mg_replica_free(&r);
	mg_spec_free(&s);
	return bytes;
}

static void test_replica(void)
{
	int64_t lora = replica_params(true, true);
	int64_t full = replica_params(false, false);
	printf("replica parameter bytes: frozen base %lld, fully trained "
	       "%lld\n",
	       (long long)lora, (long long)full);
	CHECK(lora == 35 * 4 + 35 * 2 + 512);
	/* Fully trained: every element in the F32 master, all but the
	 * fp32 norm in BF16 as well. */
	CHECK(full == (32 + 128 + 8 + 3) * 4 + (32 + 128 + 3) * 2);
	CHECK(lora < full);
}

static void test_flat(void)
{
	struct mg_model_spec s;
	make_spec(&s, true);
	struct mg_flat_layout L;
	if (mg_flat_build(&L, &s, MG_F32, MG_BF16, 2, false)) {
		fail("flat build: %s", mg_last_error());
		return;
	}
	int64_t trained = 0;
	for (int k = 0; k < L.nflats; k++) {
		const struct mg_flat *f = &L.flats[k];
		if (f->train)
			trained += f->shard;
		if (!f->train && f->lent == MG_BF16) {
			CHECK(mg_flat_frozen_lp(f));
			CHECK(f->master_off == -1);
		} else {
			CHECK(!mg_flat_frozen_lp(f));
			CHECK(f->master_off >= 0);
		}
	}
	/* The master holds trained flats and the frozen fp32 one (lent as
	 * stored), never the frozen BF16 flat. */
	int64_t fp32_frozen = 0;
	for (int k = 0; k < L.nflats; k++)
		if (!L.flats[k].train && L.flats[k].lent == MG_F32)
			fp32_frozen += L.flats[k].shard;
	CHECK(L.n_master == trained + fp32_frozen);
	mg_flat_free(&L);
	mg_spec_free(&s);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_frozen replica|flat\n");
		return 2;
	}
	if (!strcmp(argv[1], "replica"))
		test_replica();
	else if (!strcmp(argv[1], "flat"))
		test_flat();
	else {
		fprintf(stderr, "unknown test %s\n", argv[1]);
		return 2;
	}
	if (failures) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
