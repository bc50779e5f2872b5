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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mg_reduce_op { MG_REDUCE_SUM = 0, MG_REDUCE_MAX = 1 };

/* The collectives of struct mg_comm, for supports(). */
enum mg_comm_coll {
	MG_COLL_ALL_REDUCE = 0,
	MG_COLL_REDUCE_SCATTER,
	MG_COLL_ALL_GATHER,
	MG_COLL_BROADCAST,
	MG_COLL_ALL_REDUCE_HOST,
};

/* What collectives cost this rank since the last collect(). */
struct mg_comm_stats {
	int64_t bytes;	     /* payload bytes this rank put into collectives */
	int64_t calls;	     /* collectives issued */
	double busy_seconds; /* collectives in flight (device or host time) */
	double exposed_seconds; /* of that, time compute waited for them */
	/* Device bytes the communicator holds now outside mg_buf (NCCL's
	 * buffers: measured around its init and split, plus staging), not
	 * reset by collect; the core accounts them as "libraries". */
	int64_t device_bytes;
};

/* Core-only: how a CUDA graph capture of the step relates to the
 * collectives issued inside it (see capture()). */
enum mg_comm_capture {
	MG_COMM_CAPTURE_BEGIN = 0, /* capture of the step starts */
	MG_COMM_CAPTURE_END,	   /* capture done: calls since BEGIN are
				      what one replay issues */
	MG_COMM_CAPTURE_ABORT,	   /* capture failed: forget it */
	MG_COMM_REPLAY,		   /* one replay of the graph was launched */
};

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
	/* Order compute after all collectives issued so far (on a GPU the
	 * compute stream waits for the communication stream; on the host
	 * the call blocks). */
	int (*wait)(struct mg_comm *c);
	void (*destroy)(struct mg_comm *c);

	/* Added in ABI 1.1. Blocking all-reduce of a small host buffer
	 * (metrics, flags, per-rank tables), whatever the backend. */
	int (*all_reduce_host)(struct mg_comm *c, void *buf, int64_t count,
			       enum mg_dtype dt, enum mg_reduce_op op);
	/* A communicator over the ranks that pass the same color, ordered
	 * by key (FSDP hybrid shard groups); destroy() it when done. */
	struct mg_comm *(*split)(struct mg_comm *c, int color, int key);
	/* Core only: accounting since the last call (then reset), graph
	 * capture bookkeeping, and stopping the whole job after an error
	 * on this rank (never returns). */
	int (*collect)(struct mg_comm *c, struct mg_comm_stats *st);
	void (*capture)(struct mg_comm *c, enum mg_comm_capture what);
	void (*abort)(struct mg_comm *c, int code);

	/*
	 * Added in ABI 1.4. Whether collective coll takes buffers of dtype
	 * dt (and, for reductions, reduction op; ignored otherwise): ask
	 * this instead of comparing backend names. What each backend does:
	 *   self  every dtype and op (one rank: copies or nothing)
	 *   nccl  F32 F64 F16 BF16 I32 I64 U8, SUM and MAX, every
	 *         collective (F16/BF16 reduced as NCCL does, per hop)
	 *   mpi   F32 F64 I32 I64 U8, SUM and MAX, every collective; F16
	 *         and BF16 too, reductions accumulating in F32 with one
	 *         rounding at the end (so CPU ranks test what GPU ranks
	 *         run)
	 * A collective a backend does not support fails with an error that
	 * names the dtype; it never silently converts.
	 */
	bool (*supports)(const struct mg_comm *c, enum mg_comm_coll coll,
			 enum mg_dtype dt, enum mg_reduce_op op);

	/*
	 * Added in ABI 1.8. Device memory that this communicator's
	 * all-gathers can move on the GPU's copy engines, leaving every SM
	 * to the compute they overlap. NCCL (2.28 or later, one node, every
	 * GPU a direct peer) allocates it with ncclMemAlloc and registers
	 * it as a symmetric window on a second communicator over the same
	 * ranks whose CTA policy is zero; an all-gather whose send and
	 * receive buffers both lie in windows, at the same offsets on every
	 * rank, is issued there, and NCCL runs it without kernels where it
	 * can. Collective: every rank calls it in the same order with the
	 * same bytes, outside graph capture; all ranks get a window or none
	 * does (-1, error set). NULL where a backend has no such memory
	 * (self, mpi). Strategies call mg_buf_alloc_comm(), which falls back
	 * to ordinary memory by itself; window_free is collective too.
	 */
	int (*window_alloc)(struct mg_comm *c, size_t bytes, void **ptr);
	void (*window_free)(struct mg_comm *c, void *ptr);
};

#ifdef __cplusplus
}
#endif
#endif
