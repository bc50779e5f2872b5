/*
 * env.c - where this process sits in a multi-rank job, read from the
 * variables its launcher set: mgrun's own launcher, Open MPI, SLURM,
 * MPICH/Hydra or torchrun (the first family whose rank variable is set
 * wins). A process nobody launched is rank 0 of 1.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

/* One launcher family: the names it gives the four numbers. local_rank
 * and local_world may be NULL (SLURM's local world is derived). */
struct env_family {
	const char *source;
	const char *rank, *world, *local_rank, *local_world;
	bool mpi;
};

static const struct env_family families[] = {
	{"mgrun", MG_ENV_RANK, MG_ENV_WORLD, MG_ENV_LOCAL_RANK,
	 MG_ENV_LOCAL_WORLD, false},
	{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", true},
	{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, false},
	{"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
	 true},
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
	 false},
};

/* Parse a whole string as a non-negative int (decimal, nothing else). */
static int parse_count(const char *s, int *out)
{
	char *end;
	long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v > INT_MAX)
		return -1;
	*out = (int)v;
	return 0;
}

/* The variable `name` as a non-negative int; *out untouched when unset.
 * Returns 1 when set, 0 when unset, -1 (error set) when malformed. */
static int read_var(const char *name, int *out)
{
	const char *s = name ? getenv(name) : NULL;

	if (!s)
		return 0;
	if (parse_count(s, out))
		return mg_error("%s='%s' is not a non-negative integer", name,
				s);
	return 1;
}

/*
 * SLURM_TASKS_PER_NODE lists tasks per node compressed, e.g. "4(x2),3":
 * two nodes with 4 tasks, then one with 3. Pick the entry of node
 * `node` (SLURM_NODEID; the first when unknown). Returns 0 or -1 with
 * the error set.
 */
static int slurm_tasks_on_node(const char *s, int node, int *out)
{
	const char *p = s;

	for (;;) {
		char *end;
		long tasks, repeat = 1;

		errno = 0;
		tasks = strtol(p, &end, 10);
		if (end == p || *p < '0' || *p > '9' || errno ||
		    tasks > INT_MAX)
			break;
		p = end;
		if (p[0] == '(' && p[1] == 'x') {
			repeat = strtol(p + 2, &end, 10);
			if (end == p + 2 || *end != ')' || repeat < 1)
				break;
			p = end + 1;
		}
		if (node < repeat) {
			*out = (int)tasks;
			return 0;
		}
		node -= (int)repeat;
		if (*p != ',')
			return mg_error("SLURM_TASKS_PER_NODE='%s' lists fewer "
					"nodes than SLURM_NODEID",
					s);
		p++;
	}
	return mg_error("SLURM_TASKS_PER_NODE='%s' is not a task list like "
			"'4(x2),3'",
			s);
}

/* SLURM's tasks on this node: SLURM_NTASKS_PER_NODE when the job asked
 * for a fixed number, else this node's entry of SLURM_TASKS_PER_NODE.
 * Returns 1 when known (*name: the variable used), 0 when neither is
 * set, -1 on error. */
static int slurm_local_world(int *out, const char **name)
{
	const char *list = getenv("SLURM_TASKS_PER_NODE");
	int r, node = 0;

	*name = "SLURM_NTASKS_PER_NODE";
	r = read_var(*name, out);
	if (r)
		return r;
	if (!list)
		return 0;
	*name = "SLURM_TASKS_PER_NODE";
	if (read_var("SLURM_NODEID", &node) < 0)
		return -1;
	if (slurm_tasks_on_node(list, node, out))
		return -1;
	return 1;
}

/* Fill e from one family whose rank variable is set, and check that the
 * numbers fit together. */
static int read_family(const struct env_family *f, struct mg_dist_env *e)
{
	int r;

	if (read_var(f->rank, &e->rank) < 0)
		return -1;
	r = read_var(f->world, &e->world);
	if (r < 0)
		return -1;
	if (r == 0)
		return mg_error("%s is set but %s is not", f->rank, f->world);
	if (e->world < 1)
		return mg_error("%s=%d: a job has at least one rank", f->world,
				e->world);
	if (e->rank >= e->world)
		return mg_error("%s=%d is not below %s=%d", f->rank, e->rank,
				f->world, e->world);

	/* Without local numbers every rank is taken to be on this host. */
	e->local_rank = e->rank;
	e->local_world = e->world;
	if (read_var(f->local_rank, &e->local_rank) < 0)
		return -1;
	const char *lw_name = f->local_world;
	if (f->local_world)
		r = read_var(f->local_world, &e->local_world);
	else
		r = slurm_local_world(&e->local_world, &lw_name);
	if (r < 0)
		return -1;
	if (r == 0)
		lw_name = f->world;
	if (e->local_world < 1 || e->local_world > e->world)
		return mg_error("%s=%d: ranks on this host must be between 1 "
				"and %s=%d",
				lw_name, e->local_world, f->world, e->world);
	if (e->local_rank >= e->local_world)
		return mg_error("%s=%d is not below %s=%d",
				f->local_rank ? f->local_rank : f->rank,
				e->local_rank, lw_name, e->local_world);
	e->source = f->source;
	e->mpi = f->mpi;
	return 0;
}

int mg_dist_env_detect(struct mg_dist_env *e)
{
	static const struct mg_dist_env single = {0, 1, 0, 1, "none", false};
	size_t i;

	*e = single;
	for (i = 0; i < sizeof families / sizeof families[0]; i++) {
		if (!getenv(families[i].rank))
			continue;
		if (read_family(&families[i], e)) {
			mg_error_prefix("%s environment", families[i].source);
			*e = single;
			return -1;
		}
		return 0;
	}
	return 0;
}
