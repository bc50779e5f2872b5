# What a PyTorch user runs instead of mgrun's fsdp / offload / ddp_ds on
# MobileNetV2, in its best working configuration: FSDP2 (fully_shard on
# every inverted-residual block, then the root) in full / grad_op / hybrid
# mode, DDP for no-shard, and FSDP2's CPUOffloadPolicy for offload.
# Synthetic data on the GPU, batch 64 per GPU, SGD with momentum as
# bench/sharding.sh runs mgrun.
#
# bf16 in FSDP2's best working set-up for this network: fp32 parameters
# (gathered as they are), compute under bf16 autocast, gradients reduced
# in bf16 (MixedPrecisionPolicy(reduce_dtype = bf16), or fp32 with
# REDUCE=fp32 as mgrun's strategy.reduce_dtype = fp32). BF16_PARAMS=1
# gathers bf16 parameters as mgrun does (param_dtype = bf16); BatchNorm
# then needs units of its own in fp32 (a bf16 BatchNorm weight fails
# against its fp32 running statistics), and the 52 extra units made it
# 2.2x slower on 4 H100s (bench/RESULTS.md, 2026-11-27, "LoRA cells as
# issue 15 states them").
# DDP: bf16 autocast with bf16_compress_hook (mgrun's ddp_ds reduces
# bf16 gradients). fp32: no policy, no hook.
#
# Measured as bench/bench_stats.py says: W windows of S steps after
# warm-up, timed with CUDA events on every rank (the slowest rank's window
# counts), and each rank's process peak as the driver sees it
# (bench/torch_measure.py) beside max_memory_reserved / allocated.
# Usage (torchrun): torch_fsdp_mbv2.py MODE SIZE PRECISION [WINDOWS STEPS]
#   MODE: ddp | full | grad_op | hybrid | offload;  PRECISION: fp32 | bf16
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_measure as tm  # noqa: E402

mode, size, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
windows, steps = (int(v) for v in (sys.argv[4:6] or (5, 10)))
assert mode in ("ddp", "full", "grad_op", "hybrid", "offload"), mode
assert prec in ("fp32", "bf16"), prec
local = int(os.environ["LOCAL_RANK"])
mem = tm.DeviceMemory(local_rank=local).open()  # before CUDA starts

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,  # noqa: E402
                                    fully_shard)

torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.zeros(1, device="cuda")  # the context
mem.context_ready().start()
torch.backends.cudnn.benchmark = True
m = torchvision.models.mobilenet_v2(num_classes=10)
m.features[0][0] = nn.Conv2d(1, 32, 3, 2, 1, bias=False)
m = m.cuda()
bf16 = prec == "bf16"
reduce = os.environ.get("REDUCE", "param")
policy = "none"
if mode == "ddp":
    m = nn.parallel.DistributedDataParallel(
        m, device_ids=[torch.cuda.current_device()])
    if bf16 and reduce != "fp32":
        m.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
        policy = "bf16_compress_hook"
else:
    if mode == "hybrid":
        mesh = init_device_mesh("cuda", (2, world // 2),
                                mesh_dim_names=("rep", "shard"))
    else:
        mesh = init_device_mesh("cuda", (world,))
    kw = dict(mesh=mesh, reshard_after_forward=(mode != "grad_op"))
    rdt = torch.float32 if reduce == "fp32" else torch.bfloat16
    rname = "fp32" if reduce == "fp32" else "bf16"
    if bf16 and os.environ.get("BF16_PARAMS", "0") == "1":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                               reduce_dtype=rdt)
        policy = f"MixedPrecisionPolicy(bf16, reduce {rname})"
    elif bf16:
        kw["mp_policy"] = MixedPrecisionPolicy(reduce_dtype=rdt)
        policy = f"MixedPrecisionPolicy(fp32 params, reduce {rname}), autocast"
    if mode == "offload":
        kw["offload_policy"] = CPUOffloadPolicy()
    if bf16 and kw["mp_policy"].param_dtype == torch.bfloat16:
        # BatchNorm keeps fp32 weights and running statistics (a bf16
        # param_dtype fails: "Expected running_mean to have type
        # BFloat16"), as under plain autocast: each BatchNorm is its own
        # unit with an fp32 policy that leaves its bf16 input as it is.
        bn = dict(kw, mp_policy=MixedPrecisionPolicy(
            param_dtype=torch.float32, reduce_dtype=kw["mp_policy"].reduce_dtype,
            cast_forward_inputs=False))
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                fully_shard(mod, **bn)
        policy += " (BatchNorm fp32)"
    for blk in m.features:
        fully_shard(blk, **kw)
    fully_shard(m, **kw)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
lossf = nn.CrossEntropyLoss()
x = torch.randn(64, 1, size, size, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    # compute in bf16 in every mode (FSDP2's policy casts the parameters;
    # autocast covers the ops a parameter cast does not)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = lossf(m(x), y)
    loss.backward()
    opt.step()


for _ in range(5):
    step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
dist.barrier()
t = tm.time_windows(step, windows, steps, mem)
dm = mem.stop().result()
job = tm.across_ranks(t["windows"], tm.torch_memory(), dm)
if rank == 0:
    import bench_stats as bs
    r = dict(mode=mode, size=size, prec=prec, world=world, batch_per_gpu=64,
             policy=policy, img_s_total=bs.per_second(job["step_s"], 64 * world), **job,
             driver_method=dm["method"], driver_why=dm["why"])
    print(json.dumps(r), flush=True)
dist.destroy_process_group()
