/*
 * kit.h - the strategy kit: the pieces mgrun's own strategies are built
 * from, installed for third-party strategies (link mgrun::mg_kit, or
 * pkg-config mgrun-kit). Include this one header.
 *
 *   kit/sampler.h     per-epoch shuffled order, global-batch blocks, the
 *                     own-block plan, last-batch padding
 *   kit/replica.h     a full replica's flat storage and optimizer step
 *   kit/ddp.h         the bucketed, overlapped DDP core and its
 *                     communication hooks (bf16 compression built in)
 *   kit/flat.h        flat parameters and shards (FSDP-style layouts)
 *   kit/unit_pipe.h   the unit-by-unit gradient pipeline of sharded
 *                     strategies (gather before use, reductions as units
 *                     are ready, accumulation, a final action per unit)
 *                     with storage policies (ZeRO-1/2/3, fsdp, offload)
 *   kit/shard_store.h resident parameters with sharded master weights and
 *                     optimizer state, on the device or the host (ZeRO)
 *   kit/shard_ckpt.h  checkpoints of sharded flat state
 *   kit/host_optim.h  the vectorised, threaded host optimizer
 *
 * The kit is a static library: a strategy carries the kit it was built
 * with, so its run-time contract with mgrun stays the plugin ABI (abi.h)
 * alone. Its source interface has its own version below: the minor grows
 * with additions only (new functions, fields appended to structs the kit
 * allocates); a change that breaks source compatibility bumps the major.
 *   1.0  sampler, replica, flat, shard_ckpt, host_optim, ddp with
 *        communication hooks (mg_ddp_comm_hook, mg_ddp_hook_bf16)
 *   1.1  frozen MG_NF4 parameters: replica keeps their blobs, flat puts
 *        them in packed flats (mg_flat.packed, packed_off,
 *        mg_flat_layout.n_packed, mg_flat_host_bytes)
 *   1.2  mg_flat_init_shard: a rank's shard of the initial values only
 *        (the model's init_unit_part, ABI 1.7)
 *   1.3  mg_flat_ubw_check: the rules of update_in_backward (no
 *        clipping, no fp16), shared by fsdp and offload
 *   1.4  mg_host_optim_zero: host state zeroed (first touched) by the
 *        threads that update it
 *   1.5  unit_pipe.h (mg_unit_pipe_*: the pipeline fsdp and offload are
 *        built on; mg_unit_strategy, the head of a sharded strategy),
 *        shard_store.h (ZeRO-1/2 storage, device or host), mg_flat_slices,
 *        mg_flat_upload, mg_host_optim_default_threads
 */
#ifndef MG_KIT_H
#define MG_KIT_H

#define MG_KIT_VERSION_MAJOR 1
#define MG_KIT_VERSION_MINOR 5

#include "kit/ddp.h"
#include "kit/flat.h"
#include "kit/host_optim.h"
#include "kit/replica.h"
#include "kit/sampler.h"
#include "kit/shard_ckpt.h"
#include "kit/shard_store.h"
#include "kit/unit_pipe.h"

#endif
