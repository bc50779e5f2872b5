/*
 * test_nf4_storage.c - frozen MG_NF4 parameters (QLoRA's base) in the
 * kit's strategy storage, on the CPU device under mixed precision (master
 * F32, compute BF16), where CI can check byte for byte what GPU runs do.
 *
 *   test_nf4_storage replica|flat|refuse
 *
 * replica: each blob is kept once in the frozen buffer exactly as the
 * model's init_unit filled it, lent as an MG_NF4 tensor of its logical
 * shape with no gradient; the accounted parameter memory is the trained
 * master + compute copies plus every whole blob (codes and scales) and
 * the frozen norm, nothing else. flat: NF4 parameters go into a packed
 * flat of bytes per unit (no master or lp shard), every blob and every
 * shard at a multiple of 256 bytes for 1, 2 and 3 ranks, the blobs laid
 * into the full flat as the model made them, lent as MG_NF4. refuse: an
 * NF4 parameter that trains or is a buffer is refused with its name by
 * the spec, the replica and the flat layout.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/test_util.h"
#include "mg/kit/flat.h"
#include "mg/kit/replica.h"
#include "mg/mg.h"
#include "runtime/runtime.h"

/* Initial value of element j of unit parameter i. */
static float value(int unit, int i, int64_t j)
{
	return (float)(0.37 * (double)(j % 11) - 1.1 + 0.01 * i + 0.5 * unit +
		       0.001 * (double)(j % 97));
}

/* The blob of unit parameter i, n elements, as the model makes it. */
static void *blob_of(int unit, int i, int64_t n)
{
	float *x = malloc((size_t)n * sizeof *x);
	void *b = calloc(1, mg_nf4_layout(n).bytes);
	if (!x || !b)
		abort();
	for (int64_t j = 0; j < n; j++)
		x[j] = value(unit, i, j);
	if (mg_nf4_quantize_host(b, x, n))
		abort();
	free(x);
	return b;
}

static int init_unit(void *self, int unit, struct mg_tensor *p, uint64_t seed)
{
	(void)self;
	(void)seed;
	const int n = unit == 0 ? 3 : 2;
	for (int i = 0; i < n; i++) {
		const int64_t m = mg_tensor_numel(&p[i]);
		if (p[i].dtype == MG_NF4) {
			void *b = blob_of(unit, i, m);
			memcpy(p[i].data, b, mg_tensor_bytes(&p[i]));
			free(b);
			continue;
		}
		if (p[i].dtype != MG_F32)
			return mg_error("init: %s", mg_dtype_name(p[i].dtype));
		for (int64_t j = 0; j < m; j++)
			((float *)p[i].data)[j] = value(unit, i, j);
	}
	return 0;
}

static const struct mg_model_ops ops = {.init_unit = init_unit};

/* Unit 0: a trained matrix, an NF4 [40, 33] (21 blocks, the last one
 * short), a frozen fp32 norm; unit 1: an NF4 [64, 64] and a trained
 * bias. */
static const int64_t q0[2] = {40, 33}, q1[2] = {64, 64};

static void make_spec(struct mg_model_spec *s)
{
	memset(s, 0, sizeof *s);
	const int64_t w[2] = {4, 8}, n[1] = {8}, b[1] = {3};
	const int T = MG_P_TRAIN;
	mg_spec_add_unit(s, "u0");
	mg_spec_add_param(s, "w", MG_DTYPE_AUTO, T, 2, w);
	CHECK(mg_spec_add_param(s, "q", MG_NF4, 0, 2, q0) == 1);
	mg_spec_add_param(s, "norm", MG_DTYPE_AUTO, MG_P_FP32 | MG_P_NO_DECAY,
			  1, n);
	mg_spec_add_unit(s, "u1");
	CHECK(mg_spec_add_param(s, "p", MG_NF4, 0, 2, q1) == 0);
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

/* A lent NF4 tensor: the logical shape, no gradient, the model's blob. */
static void check_lent(const struct mg_tensor *p, const struct mg_tensor *g,
		       int unit, int i, const int64_t *shape)
{
	CHECK(p->dtype == MG_NF4 && p->ndim == 2 && p->shape[0] == shape[0] &&
	      p->shape[1] == shape[1]);
	CHECK(g == NULL || g->data == NULL);
	const int64_t n = shape[0] * shape[1];
	void *b = blob_of(unit, i, n);
	CHECK(mg_tensor_bytes(p) == mg_nf4_layout(n).bytes);
	CHECK(!memcmp(p->data, b, mg_tensor_bytes(p)));
	free(b);
}

static void test_replica(void)
{
	struct env e;
	env_init(&e);
	struct mg_model_spec s;
	make_spec(&s);
	struct mg_replica r;
	if (mg_replica_init(&r, &e.ctx, &s)) {
		fail("replica init: %s", mg_last_error());
		return;
	}
	struct mg_unit_view *v0 = mg_replica_view(&r, 0, MG_PHASE_FORWARD),
			    *v1 = mg_replica_view(&r, 1, MG_PHASE_FORWARD);
	CHECK(v0->params[0].dtype == MG_BF16 && v0->grads[0].data);
	check_lent(&v0->params[1], &v0->grads[1], 0, 1, q0);
	CHECK(v0->params[2].dtype == MG_F32 && !v0->grads[2].data);
	check_lent(&v1->params[0], &v1->grads[0], 1, 0, q1);
	const size_t b0 = mg_nf4_layout(40 * 33).bytes,
		     b1 = mg_nf4_layout(64 * 64).bytes;
	CHECK(b0 % 256 == 0 && b1 % 256 == 0);
	/* Whole blobs (codes and scales) and the norm, each 256-aligned. */
	CHECK(r.frozen_bytes == (int64_t)(b0 + b1 + 256));
	const int64_t params = e.stats.mem_cur[MG_MEM_PARAMS];
	printf("replica: blobs of %zu and %zu bytes, parameter memory %lld\n",
	       b0, b1, (long long)params);
	CHECK(params == 35 * 4 + 35 * 2 + (int64_t)(b0 + b1 + 256));
	CHECK(e.stats.mem_cur[MG_MEM_GRADS] == 35 * 2);
	mg_replica_free(&r);
	mg_spec_free(&s);
}

/* keep() of mg_flat_init_values: copy each full flat. */
struct kept {
	const struct mg_flat_layout *L;
	char *full[8];
};

static int keep(void *arg, int k, const char *full)
{
	struct kept *kp = arg;
	size_t n = mg_flat_host_bytes(kp->L, &kp->L->flats[k]);
	kp->full[k] = malloc(n);
	if (!kp->full[k])
		return mg_error("out of memory");
	memcpy(kp->full[k], full, n);
	return 0;
}

static void flat_for(int group)
{
	struct env e;
	env_init(&e);
	struct mg_model_spec s;
	make_spec(&s);
	struct mg_flat_layout L;
	if (mg_flat_build(&L, &s, MG_F32, MG_BF16, group, false)) {
		fail("flat build: %s", mg_last_error());
		return;
	}
	int npacked = 0;
	int64_t packed = 0;
	for (int k = 0; k < L.nflats; k++) {
		const struct mg_flat *f = &L.flats[k];
		if (!f->packed)
			continue;
		npacked++;
		CHECK(f->lent == MG_U8 && !f->train && !f->lp);
		CHECK(!mg_flat_frozen_lp(f) && f->master_off == -1);
		CHECK(f->shard % 256 == 0 && f->shard * group >= f->n);
		CHECK(f->packed_off == packed);
		packed += f->shard;
	}
	CHECK(npacked == 2 && L.n_packed == packed);
	/* Blobs at 256-byte offsets; the master has no NF4 in it. */
	CHECK(L.param_off[1] % 256 == 0 && L.param_off[3] % 256 == 0);
	CHECK(L.flats[L.param_flat[1]].packed &&
	      L.flats[L.param_flat[3]].packed);
	CHECK(L.param_flat[1] != L.param_flat[3]);
	struct kept kp = {.L = &L};
	float bufs[1];
	CHECK(L.nflats <= 8);
	if (mg_flat_init_values(&L, &e.ctx, keep, &kp, bufs))
		fail("flat init: %s", mg_last_error());
	const int pi[2] = {1, 3}, pu[2] = {0, 1}, pk[2] = {1, 0};
	const int64_t *shp[2] = {q0, q1};
	struct mg_flat_views V;
	CHECK(mg_flat_views_init(&V, &L, MG_DEV_CPU) == 0);
	for (int t = 0; t < 2; t++) {
		const int i = pi[t], k = L.param_flat[i];
		struct mg_tensor p = V.ptensor[i];
		p.data = kp.full[k] + L.param_off[i];
		check_lent(&p, NULL, pu[t], pk[t], shp[t]);
		/* Padding after the blob is zero to the shard's end. */
		const size_t end = (size_t)L.param_off[i] + mg_tensor_bytes(&p);
		for (size_t j = end; j < mg_flat_host_bytes(&L, &L.flats[k]);
		     j++)
			CHECK(kp.full[k][j] == 0);
	}
	mg_flat_views_free(&V);
	for (int k = 0; k < L.nflats; k++)
		free(kp.full[k]);
	printf("flat over %d: %d packed flats, %lld shard bytes\n", group,
	       npacked, (long long)packed);
	mg_flat_free(&L);
	mg_spec_free(&s);
}

static void test_flat(void)
{
	for (int g = 1; g <= 3; g++)
		flat_for(g);
}

static void test_refuse(void)
{
	struct mg_model_spec s;
	memset(&s, 0, sizeof s);
	mg_spec_add_unit(&s, "u");
	CHECK(mg_spec_add_param(&s, "trained_q", MG_NF4, MG_P_TRAIN, 2, q0) <
	      0);
	CHECK(strstr(mg_last_error(), "'trained_q'") &&
	      strstr(mg_last_error(), "must be frozen"));
	CHECK(mg_spec_add_param(&s, "buf_q", MG_NF4, MG_P_BUFFER, 2, q0) < 0);
	CHECK(strstr(mg_last_error(), "'buf_q'") != NULL);
	CHECK(mg_spec_add_param(&s, "u8", MG_U8, 0, 2, q0) < 0);
	mg_spec_free(&s);
	/* A spec changed behind the builder's back: the kit refuses too. */
	make_spec(&s);
	s.params[1].flags |= MG_P_TRAIN;
	struct env e;
	env_init(&e);
	struct mg_replica r;
	CHECK(mg_replica_init(&r, &e.ctx, &s) != 0);
	CHECK(strstr(mg_last_error(), "'q'") &&
	      strstr(mg_last_error(), "not frozen"));
	mg_replica_free(&r);
	struct mg_flat_layout L;
	CHECK(mg_flat_build(&L, &s, MG_F32, MG_BF16, 2, false) != 0);
	CHECK(strstr(mg_last_error(), "'q'") &&
	      strstr(mg_last_error(), "not frozen"));
	mg_flat_free(&L);
	mg_spec_free(&s);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr,
			"usage: test_nf4_storage replica|flat|refuse\n");
		return 2;
	}
	if (!strcmp(argv[1], "replica"))
		test_replica();
	else if (!strcmp(argv[1], "flat"))
		test_flat();
	else if (!strcmp(argv[1], "refuse"))
		test_refuse();
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
