/*
 * comm.h - collectives between ranks, as the core offers them to strategies.
 *
 * One interface over MPI (CPU buffers), NCCL (CUDA buffers) and the
 * single-rank case. Collectives are asynchronous on the communicator's
 * stream where the backend allows; mg_comm_wait() orders them before
 * compute that needs the result.
 */
#ifndef MG_COMM_H
#define MG_COMM_H

#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_reduce_op { MG_REDUCE_SUM = 0, MG_REDUCE_MAX = 1 };

struct mg_comm {
	int rank, world;
	const char *backend; /* "self", "mpi", "nccl" */
	void *impl;
	int (*all_reduce)(struct mg_comm *c, void *buf, int64_t count,
			  enum mg_dtype dt, enum mg_reduce_op op);
	int (*reduce_scatter)(struct mg_comm *c, const void *send, void *recv,
			      int64_t recv_count, enum mg_dtype dt,
			      enum mg_reduce_op op);
	int (*all_gather)(struct mg_comm *c, const void *send, void *recv,
			  int64_t send_count, enum mg_dtype dt);
	int (*broadcast)(struct mg_comm *c, void *buf, int64_t count,
			 enum mg_dtype dt, int root);
	int (*barrier)(struct mg_comm *c);
	/* Wait for all collectives issued so far. */
	int (*wait)(struct mg_comm *c);
	void (*destroy)(struct mg_comm *c);
};

#ifdef __cplusplus
}
#endif
#endif
