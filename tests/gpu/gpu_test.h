/*
 * gpu_test.h - harness shared by the GPU tests and benchmarks: a CUDA and
 * a CPU context, paired test tensors (the same values on the CPU, in F32
 * or F64, and on the GPU in the dtype under test), NaN poisoning, relative
 * error checks with one PASS/FAIL line each, and the skip (exit 77) when
 * no GPU is usable.
 */
#ifndef MG_GPU_TEST_H
#define MG_GPU_TEST_H

#include <stdbool.h>
#include <stdint.h>

#include "mg/mg.h"

#define GT_SKIP 77

extern struct mg_ctx gt_cpu, gt_gpu;
extern uint64_t gt_seed;
extern int gt_fail, gt_checks;

/* Create the CUDA context or exit(77) with "SKIPPED: no GPU". */
void gt_init(int argc, char **argv);
/* Print the summary, free the context; returns the exit code. */
int gt_finish(void);

double gt_urand(void); /* uniform [0, 1) from the run's seed */
/* v rounded to what dtype dt can hold. */
double gt_round(enum mg_dtype dt, double v);
/* Reference (CPU) dtype for GPU dtype dt: F64 stays, others F32. */
enum mg_dtype gt_ref_dtype(enum mg_dtype dt);

/* A tensor present on both sides. v holds the values last uploaded. */
struct gt {
	struct mg_tensor c, g;
	int64_t n;
	double *v;
};

/* g in gdt on the GPU, c in cdt on the CPU (cdt < 0: gt_ref_dtype). */
void gt_make(struct gt *t, enum mg_dtype gdt, int cdt, int ndim, int64_t d0,
	     int64_t d1, int64_t d2, int64_t d3);
void gt_free(struct gt *t);
/* Write v to both sides (rounded to the GPU dtype first). */
void gt_upload(struct gt *t);
/* Uniform values in [lo, hi) on both sides. */
void gt_rand(struct gt *t, double lo, double hi);
/* NaN on both sides (ints: 0x7f7f7f7f). */
void gt_poison(struct gt *t);
/* Copy the CPU side's values (rounded to the GPU dtype) to both sides. */
void gt_from_cpu(struct gt *t);
/* GPU values as doubles (waits for the stream). */
double *gt_read(struct gt *t);
double gt_cpu_at(const struct gt *t, int64_t i);

/* Wait for the GPU stream; report and return -1 on a CUDA error. */
int gt_sync(const char *what);
/* Record an op's return code: prints FAIL with mg_last_error(). */
int gt_ok(int rc, const char *what);

/* Compare GPU with CPU: ||g - c|| / ||c||, NaN counted; one line. */
double gt_check(const char *what, enum mg_dtype dt, struct gt *t, double tol);
/* Same for the change since upload (accumulated gradients). */
double gt_check_delta(const char *what, enum mg_dtype dt, struct gt *t,
		      double tol);
/* Print one result line and count it. */
void gt_report(const char *what, enum mg_dtype dt, double err, double tol,
	       int64_t nans, const char *note);

/* Report the fraction of the n elements of es bytes whose bits differ
 * between got and want (limit 0): the checks that must be bitwise. */
void gt_report_bits(const char *what, enum mg_dtype dt, const void *got,
		    const void *want, int64_t n, size_t es);

/* Default limit for dtype: F64 1e-12, F32 1e-5, F16/BF16 1e-2. */
double gt_tol(enum mg_dtype dt);

#endif
