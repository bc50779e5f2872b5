/*
 * host_optim.h - the optimizer engine of host-offload strategies
 * (ZeRO-Offload style): master weights and optimizer state live in host
 * memory and every step updates them on the CPU, vectorised (AVX-512F,
 * AVX2 or portable C, chosen at run time) and spread over a persistent
 * thread pool.
 *
 * The arithmetic is that of mg_optim_update() on a CPU context (SGD with
 * momentum/dampening/Nesterov/L2, AdamW with decoupled weight decay), in
 * the same operation order and without fused multiply-adds, so with the
 * reference built in ISO C mode (-ffp-contract=off, as CMake does) the
 * results are bit for bit the same; on top of it the engine takes F16 or
 * BF16 gradients for an F32 master (converted exactly, then multiplied by
 * grad_mul, as the CUDA kernel does) and refreshes an optional F16/BF16
 * copy after the update (round to nearest even, mg_float_to_half /
 * mg_float_to_bf16; NaN payloads may differ).
 */
#ifndef MG_KIT_HOST_OPTIM_H
#define MG_KIT_HOST_OPTIM_H

#include "mg/mg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A thread pool (workers created once, woken per run) and the chosen
 * instruction set. One run at a time per pool. */
struct mg_host_optim;

/* threads: the pool's size, caller included; 0 = the cores this process
 * may run on (its affinity mask). 1 runs inline, without workers. The
 * instruction set is the best the CPU has ("avx512", "avx2", "scalar"),
 * or MG_HOST_OPTIM_ISA if set (an error if the CPU lacks it). */
int mg_host_optim_create(int threads, struct mg_host_optim **out);
void mg_host_optim_destroy(struct mg_host_optim *o);
/* The cores this process may run on (its affinity mask; online cores if
 * the mask cannot be read): what threads = 0 means. */
int mg_host_optim_cores(void);
const char *mg_host_optim_isa(const struct mg_host_optim *o);
int mg_host_optim_threads(const struct mg_host_optim *o);

/* Update n slices, all in host memory, with h's optimizer and this step's
 * vals (vals->skip set: nothing is touched), the total work split evenly
 * over the pool's threads across slice boundaries; returns when done.
 * Each slice: dtype F32 or F64; grad_dtype the master dtype, or F16/BF16
 * with an F32 master; param_lp NULL or an F16/BF16 copy. Pointers need
 * only their element type's alignment. Every slice is checked before any
 * is touched: an error (-1, mg_error set) changes nothing. */
int mg_host_optim_run(struct mg_host_optim *o, const struct mg_optim_hparams *h,
		      const struct mg_optim_vals *v,
		      const struct mg_optim_slice *s, int n);

/* Zero bytes at p on the pool's threads, each its even share, as a run
 * over as many floats would split them. Why: a page is placed on the
 * memory node of the thread that first touches it, so state zeroed here
 * before the first update is spread over the host's memory nodes as the
 * update reads it, not all on the node of one allocating thread (whose
 * bandwidth then bounds every update). Returns 0, or -1 for NULL. */
/* Added in kit 1.5: this rank's share of the cores: ranks of one node
 * that all see every core split them; ranks already pinned to a core or
 * two keep theirs. */
int mg_host_optim_default_threads(const struct mg_ctx *ctx);

int mg_host_optim_zero(struct mg_host_optim *o, void *p, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
