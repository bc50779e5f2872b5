/*
 * dist.h - the core's multi-rank plumbing: where this process sits in the
 * job (environment of mgrun's own launcher, SLURM, Open MPI, MPICH or
 * torchrun), the local launcher that starts and supervises one rank per
 * GPU, the TCP rendezvous that spreads rank 0's NCCL id, and the factory
 * that picks a communicator (self, NCCL or MPI) for a rank.
 */
#ifndef MG_DIST_H
#define MG_DIST_H

#include "mg_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mg/mg.h"

struct mg_stats;

/* This process's place in the job. */
struct mg_dist_env {
	int rank, world;	     /* global */
	int local_rank, local_world; /* on this host */
	/* Who set it: "mgrun" (our launcher), "slurm", "openmpi", "mpich",
	 * "torchrun", or "none" (a single process: rank 0 of 1). */
	const char *source;
	bool mpi; /* started by an MPI launcher (MPI_Init will find peers) */
};

/* Read the environment. Inconsistent values (rank >= world, a number
 * that does not parse) are an error naming the variable. */
MG_INTERNAL int mg_dist_env_detect(struct mg_dist_env *e);

/* Environment variables the launcher sets in each rank. */
#define MG_ENV_RANK "MG_RANK"
#define MG_ENV_WORLD "MG_WORLD_SIZE"
#define MG_ENV_LOCAL_RANK "MG_LOCAL_RANK"
#define MG_ENV_LOCAL_WORLD "MG_LOCAL_WORLD_SIZE"
/* Rendezvous: rank 0 serves its blob on MG_MASTER_ADDR:MG_MASTER_PORT
 * (MASTER_ADDR/MASTER_PORT as torchrun names them are read too); under
 * the local launcher rank 0 inherits the listening socket as fd
 * MG_RENDEZVOUS_FD, so no port can be taken by someone else meanwhile. */
#define MG_ENV_MASTER_ADDR "MG_MASTER_ADDR"
#define MG_ENV_MASTER_PORT "MG_MASTER_PORT"
#define MG_ENV_RENDEZVOUS_FD "MG_RENDEZVOUS_FD"
/* Optional: the NCCL unique id as hex, when something else already
 * distributed it (tests). */
#define MG_ENV_NCCL_ID "MG_NCCL_ID"

/* The local launcher: run argv (argv[0] is the program, exec'd as is)
 * as nranks processes on this host with the MG_* variables above (and
 * the rendezvous socket), relay their output, and supervise them: when
 * one exits non-zero or is killed, stop the others (SIGTERM, then SIGKILL
 * after grace_s) and report the rank, its exit status or signal and its
 * last output line. SIGINT/SIGTERM to the launcher stop every rank.
 * Returns the exit code mgrun should exit with (0 when every rank
 * succeeded). */
struct mg_launch_opts {
	char *const *argv;
	int nranks;
	double grace_s; /* <= 0: 5 s */
	bool quiet;	/* tests: do not relay the ranks' output */
};
MG_INTERNAL int mg_launch(const struct mg_launch_opts *o);

/* Rank 0's n-byte blob reaches every rank through the TCP rendezvous
 * (see the variables above); gives up with an error after timeout_s. */
int mg_rendezvous_bcast(const struct mg_dist_env *e, void *blob, size_t n,
			double timeout_s);

/* The communicator for this rank: self for one rank; NCCL on CUDA
 * devices (dev->stream is the compute stream it orders against); MPI for
 * CPU ranks (loaded from libmg_comm_mpi.so next to libmg, so a GPU
 * machine without Open MPI still runs). NULL with the error set. */
struct mg_comm *mg_comm_create(const struct mg_dist_env *e,
			       struct mg_device *dev);

/* comm_self.c: the one-rank communicator. */
struct mg_comm *mg_comm_self(void);

/*
 * watchdog.c: the collective watchdog. mg_watchdog_wrap() returns a
 * communicator that forwards to world (owned by it from then on) and
 * aborts the job, naming this rank, the collective and the step, when
 * one call (or, on NCCL, the device work of a wait) makes no progress
 * for timeout_s; world itself when timeout_s <= 0; NULL with the error
 * set (world untouched). One per process. The abort exits with
 * MG_EXIT_WATCHDOG after a line holding MG_WATCHDOG_MARK, which mgrun's
 * launcher looks for.
 */
#define MG_EXIT_WATCHDOG 75 /* EX_TEMPFAIL: a resubmit may well work */
#define MG_WATCHDOG_MARK "collective watchdog:"
struct mg_comm *mg_watchdog_wrap(struct mg_comm *world, double timeout_s);
/* Where the job is, for the message: step (-1 before training) and a
 * static phase name ("setup", "training", "evaluation", "checkpoint"). */
void mg_watchdog_at(int64_t step, const char *phase);
/* Calls armed while on are not timed: a wait whose length is not a
 * collective's (the other ranks waiting for rank 0's checkpoint write). */
void mg_watchdog_untimed(bool on);

#endif
