/*
 * comm_internal.h - what the communicator sources share inside the core:
 * argument checks and accounting common to every backend, the MPI
 * module's entry points (libmg_comm_mpi.so, loaded on demand by comm.c)
 * and the NCCL backend's constructors.
 */
#ifndef MG_COMM_INTERNAL_H
#define MG_COMM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dist/dist.h"

/* The MPI module: file name and the symbols comm.c looks up in it. */
#define MG_COMM_MPI_MODULE "libmg_comm_mpi.so"
#define MG_COMM_MPI_CREATE_SYM "mg_comm_mpi_create"
#define MG_COMM_MPI_BCAST_SYM "mg_comm_mpi_bcast"

/* The world communicator over MPI_COMM_WORLD (MPI_Init_thread on first
 * use). 0, or -1 with the error set. */
typedef int (*mg_comm_mpi_create_fn)(const struct mg_dist_env *e,
				     struct mg_comm **out);
/* Root's n bytes to every rank of MPI_COMM_WORLD, blocking; MPI is
 * initialised for the call (and finalised after it when no communicator
 * holds it), so the NCCL backend can spread its id under mpirun. */
typedef int (*mg_comm_mpi_bcast_fn)(void *buf, size_t n, int root);

struct mg_comm_mpi_module {
	mg_comm_mpi_create_fn create;
	mg_comm_mpi_bcast_fn bcast;
};

/* Load the MPI module from the directory libmg lives in (once; later
 * calls return the same table). NULL with the error set. */
const struct mg_comm_mpi_module *mg_comm_mpi_module(void);

/* Argument checks shared by the backends (inline: the MPI module cannot
 * see libmg's hidden symbols). Each returns 0, or -1 with an error that
 * names the backend (who) and the collective (what). */
static inline int mg_comm_check_buf(const char *who, const char *what,
				    const void *p, int64_t count)
{
	if (count < 0)
		return mg_error("%s: %s: negative element count %lld", who,
				what, (long long)count);
	if (count > 0 && !p)
		return mg_error("%s: %s: NULL buffer for %lld elements", who,
				what, (long long)count);
	return 0;
}

static inline int mg_comm_check_op(const char *who, const char *what,
				   enum mg_reduce_op op)
{
	if (op != MG_REDUCE_SUM && op != MG_REDUCE_MAX)
		return mg_error("%s: %s: unknown reduction %d", who, what,
				(int)op);
	return 0;
}

static inline int mg_comm_check_root(const char *who, const struct mg_comm *c,
				     int root)
{
	if (root < 0 || root >= c->world)
		return mg_error("%s: broadcast: root %d is not a rank of "
				"this communicator (0..%d)",
				who, root, c->world - 1);
	return 0;
}

/* What every backend supports today (comm.h lists it): the plain float
 * and integer dtypes, both reductions, every collective. Backends point
 * mg_comm.supports here, or at their own when they differ. */
static inline bool mg_comm_supports_std(const struct mg_comm *c,
					enum mg_comm_coll coll,
					enum mg_dtype dt, enum mg_reduce_op op)
{
	(void)c;
	bool reduces = coll == MG_COLL_ALL_REDUCE ||
		       coll == MG_COLL_REDUCE_SCATTER ||
		       coll == MG_COLL_ALL_REDUCE_HOST;
	if (coll < MG_COLL_ALL_REDUCE || coll > MG_COLL_ALL_REDUCE_HOST)
		return false;
	if (reduces && op != MG_REDUCE_SUM && op != MG_REDUCE_MAX)
		return false;
	switch (dt) {
	case MG_F32:
	case MG_F64:
	case MG_F16:
	case MG_BF16:
	case MG_I32:
	case MG_I64:
	case MG_U8:
		return true;
	default:
		return false;
	}
}

#ifdef MG_HAVE_NCCL
/* NCCL world communicator for a CUDA rank: the id comes from MG_NCCL_ID,
 * else from rank 0 over MPI (under an MPI launcher), else through the TCP
 * rendezvous. NULL with the error set. */
struct mg_comm *mg_comm_nccl_create(const struct mg_dist_env *e,
				    struct mg_device *dev);
/* A fresh ncclUniqueId as 256 hex digits (n >= 257), for MG_NCCL_ID. */
int mg_nccl_unique_id_hex(char *out, size_t n);
/* For the watchdog's thread: 1 while collectives waited for on c (an
 * NCCL communicator) have not completed on the device, 0 once they have
 * (or none was issued), -1 on a device error. */
int mg_comm_nccl_pending(const struct mg_comm *c);
#endif

/*
 * Sub-communicators (split) report through the communicator they came
 * from: the core only talks to the world communicator (graph capture
 * bookkeeping, per-step accounting), so each backend keeps a family
 * record and forwards capture() and collect() to the children.
 */
struct mg_comm_family {
	struct mg_comm *parent; /* NULL for the world or an orphan */
	struct mg_comm **kids;
	int nkids, cap;
};

static inline int mg_comm_family_add(struct mg_comm_family *f,
				     struct mg_comm *kid)
{
	if (f->nkids == f->cap) {
		int cap = f->cap ? 2 * f->cap : 4;
		struct mg_comm **k = (struct mg_comm **)realloc(
			f->kids, (size_t)cap * sizeof *k);
		if (!k)
			return mg_error("split: out of memory");
		f->kids = k;
		f->cap = cap;
	}
	f->kids[f->nkids++] = kid;
	return 0;
}

static inline void mg_comm_family_remove(struct mg_comm_family *f,
					 struct mg_comm *kid)
{
	for (int i = 0; i < f->nkids; i++)
		if (f->kids[i] == kid) {
			f->kids[i] = f->kids[--f->nkids];
			return;
		}
}

/* Add a child's accounting to st. */
static inline void mg_comm_stats_add(struct mg_comm_stats *st,
				     const struct mg_comm_stats *k)
{
	st->bytes += k->bytes;
	st->calls += k->calls;
	st->busy_seconds += k->busy_seconds;
	st->exposed_seconds += k->exposed_seconds;
	st->device_bytes += k->device_bytes;
}

#endif
