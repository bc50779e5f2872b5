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

static int run_all(void)
{
	static const enum mg_dtype dts[] = {MG_F32, MG_F64, MG_I32, MG_I64};
	static const enum mg_dtype reject[] = {MG_F16, MG_BF16, MG_NF4};
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
	ct_run_all(c, &host_mem, dts, 4, reject, 3);
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
