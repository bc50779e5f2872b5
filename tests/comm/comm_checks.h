/*
 * comm_checks.h - the collective checks every communicator must pass,
 * shared by the MPI/self test (host buffers, tests/comm) and the NCCL
 * test (device buffers, tests/gpu). Each rank computes the expected
 * result of every collective locally from the same value formula and
 * prints one FAIL line per wrong result, with the rank.
 */
#ifndef MG_COMM_CHECKS_H
#define MG_COMM_CHECKS_H

#include <stdbool.h>
#include <stddef.h>

#include "mg/mg.h"

/* Where a communicator's buffers live and how the test fills and reads
 * them: host memory for MPI, device memory (through the compute stream)
 * for NCCL. get() is called after the communicator's wait(), and must
 * order itself after the work wait() ordered (device: the compute
 * stream). */
struct ct_mem {
	void *(*alloc)(size_t bytes);
	void (*free)(void *p);
	void (*put)(void *dst, const void *host, size_t bytes);
	void (*get)(void *host, const void *src, size_t bytes);
};

extern int ct_rank;	       /* for messages */
extern int ct_fail, ct_checks; /* totals so far */

/* Count one check; print a FAIL line when !cond. */
void ct_check(bool cond, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* rc == 0, or FAIL with mg_last_error(). Returns rc. */
int ct_ok(int rc, const char *what);

/* The value rank r holds at element i (small integers, exact in every
 * float type whatever the reduction order), and its reductions over the
 * first `world` ranks. */
double ct_val(int r, int64_t i);

/* Element i of a buffer of dtype dt, as a double, and back. */
double ct_get(enum mg_dtype dt, const void *p, int64_t i);
void ct_set(enum mg_dtype dt, void *p, int64_t i, double v);

/* Run every check on c over the dtypes listed (reductions, scatter,
 * gather, broadcast, barrier, host all-reduce, split, accounting, bad
 * arguments). reject lists dtypes c must refuse with an error naming
 * them. Returns the number of failures on this rank. */
int ct_run_all(struct mg_comm *c, const struct ct_mem *mem,
	       const enum mg_dtype *dts, int ndt, const enum mg_dtype *reject,
	       int nreject);

/* Agree on the result: every rank's failure count summed over c (host
 * all-reduce). Prints the summary on rank 0; returns the exit code. */
int ct_finish(struct mg_comm *c, const char *name);

#endif
