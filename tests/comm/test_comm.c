/*
 * test_comm.c - the CPU ranks' communicator, end to end: the environment
 * an MPI launcher (or nobody) set is detected, mg_comm_create() picks the
 * communicator (self for one rank, the MPI module otherwise), and every
 * collective is checked against values computed locally.
 *
 *   test_comm all      run the checks (under mpirun -np N, or alone)
 *   test_comm no_mpi   a multi-rank environment without an MPI launcher
 *                      must fail at once with an error saying so
 *
 * The dist sources are compiled into this program (their functions are
 * private to libmg); the MPI module is loaded from libmg's directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_checks.h"
#include "dist/dist.h"

static void *host_alloc(size_t bytes)
{
	return malloc(bytes);
}

static void host_free(void *p)
{
	free(p);
}

static void host_copy(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
}

static const struct ct_mem host_mem = {host_alloc, host_free, host_copy,
				       host_copy};

/*
 * Half precision on CPU ranks accumulates in F32 and rounds once: rank 0
 * holds 256, every other rank 1, so with 4 ranks the sum 259 rounds to
 * 260 in BF16, where rounding after each addition (256 + 1 = 256) would
 * stay at 256. With fewer than 3 ranks both orders agree, so the check
 * needs 3 or more.
 */
static void t_bf16_accumulates(struct mg_comm *c)
{
	if (c->world < 3)
		return;
	uint16_t v[2] = {mg_float_to_bf16(c->rank ? 1.0f : 256.0f),
			 mg_float_to_bf16(c->rank ? 1.0f : 256.0f)};
	double want = mg_bf16_to_float(
		mg_float_to_bf16(256.0f + (float)(c->world - 1)));
	ct_ok(c->all_reduce(c, v, 1, MG_BF16, MG_REDUCE_SUM), "bf16 sum");
	ct_ok(c->wait(c), "bf16 wait");
	ct_ok(c->all_reduce_host(c, v + 1, 1, MG_BF16, MG_REDUCE_SUM),
	      "bf16 host sum");
	ct_check(mg_bf16_to_float(v[0]) == want &&
			 mg_bf16_to_float(v[1]) == want,
		 "bf16 sum of 256 and %d ones: %g and %g, expected %g "
		 "(accumulated in F32)",
		 c->world - 1, mg_bf16_to_float(v[0]), mg_bf16_to_float(v[1]),
		 want);
}

static int run_all(void)
{
	struct mg_device dev = {.kind = MG_DEV_CPU, .threads = 1};
	struct mg_dist_env e;
	if (mg_dist_env_detect(&e)) {
		printf("FAIL: environment: %s\n", mg_last_error());
		return 1;
	}
	struct mg_comm *c = mg_comm_create(&e, &dev);
	if (!c) {
		printf("FAIL: rank %d of %d (%s): %s\n", e.rank, e.world,
		       e.source, mg_last_error());
		return 1;
	}
	if (c->rank == 0)
		printf("environment from %s (mpi %s): %d ranks, communicator "
		       "%s\n",
		       e.source, e.mpi ? "yes" : "no", e.world, c->backend);
	/* What to exercise and what must be refused comes from the
	 * communicator's own supports(), checked against comm.h's table
	 * (every backend: F16/BF16 reductions included, NF4 never, nor
	 * INT4, a name for export formats only). */
	enum mg_dtype dts[MG_DTYPE_COUNT], reject[MG_DTYPE_COUNT];
	int ndt = 0, nrej = 0;
	for (int d = 0; d < MG_DTYPE_COUNT; d++) {
		bool yes = c->supports(c, MG_COLL_ALL_REDUCE, (enum mg_dtype)d,
				       MG_REDUCE_SUM);
		/* U8 is checked by the byte broadcast only: the value
		 * pattern is signed. */
		if (yes && d != MG_U8)
			dts[ndt++] = (enum mg_dtype)d;
		else if (!yes)
			reject[nrej++] = (enum mg_dtype)d;
		ct_check(yes == (d != MG_NF4 && d != MG_INT4),
			 "%s: supports(all_reduce, %s) = %d", c->backend,
			 mg_dtype_name((enum mg_dtype)d), yes);
	}
	ct_check(ndt == 6 && !c->supports(c, MG_COLL_ALL_REDUCE, MG_F32,
					  (enum mg_reduce_op)7),
		 "%s: %d dtypes besides U8 supported (expected 6), or an "
		 "unknown op accepted",
		 c->backend, ndt);
	ct_run_all(c, &host_mem, dts, ndt, reject, nrej);
	t_bf16_accumulates(c);
	int rc = ct_finish(c, "test_comm");
	c->destroy(c);
	return rc;
}

/* Ranks set by hand, no MPI launcher: the factory must refuse, naming
 * the way out, instead of waiting for peers that never come. */
static int run_no_mpi(void)
{
	struct mg_device dev = {.kind = MG_DEV_CPU, .threads = 1};
	struct mg_dist_env e;
	if (mg_dist_env_detect(&e)) {
		printf("FAIL: environment: %s\n", mg_last_error());
		return 1;
	}
	if (e.world < 2 || e.mpi) {
		printf("FAIL: expected a multi-rank environment without MPI "
		       "(set MG_RANK/MG_WORLD_SIZE), got %d ranks from %s\n",
		       e.world, e.source);
		return 1;
	}
	struct mg_comm *c = mg_comm_create(&e, &dev);
	if (c) {
		printf("FAIL: mg_comm_create succeeded (%s)\n", c->backend);
		c->destroy(c);
		return 1;
	}
	printf("error: %s\n", mg_last_error());
	return 3;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *mode = argc > 1 ? argv[1] : "all";
	if (!strcmp(mode, "all"))
		return run_all();
	if (!strcmp(mode, "no_mpi"))
		return run_no_mpi();
	fprintf(stderr, "usage: %s all|no_mpi\n", argv[0]);
	return 2;
}
