# What a PyTorch user runs instead of mgrun's fsdp / offload on MobileNetV2:
# FSDP2 (fully_shard on every inverted-residual block, then the root) in
# full / grad_op / hybrid mode, DDP for no-shard, and DeepSpeed-less CPU
# offload through FSDP2's CPUOffloadPolicy; bf16 by autocast. Synthetic data on the GPU,
# batch 64 per GPU, SGD with momentum as bench/sharding.sh runs mgrun.
# Usage (torchrun): torch_fsdp_mbv2.py MODE SIZE PRECISION
#   MODE: ddp | full | grad_op | hybrid | offload;  PRECISION: fp32 | bf16
import json, os, sys, time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

mode, size, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.backends.cudnn.benchmark = True
m = torchvision.models.mobilenet_v2(num_classes=10)
m.features[0][0] = nn.Conv2d(1, 32, 3, 2, 1, bias=False)
m = m.cuda()
bf16 = prec == "bf16"
if mode == "ddp":
    m = nn.parallel.DistributedDataParallel(
        m, device_ids=[torch.cuda.current_device()])
else:
    if mode == "hybrid":
        mesh = init_device_mesh("cuda", (2, world // 2),
                                mesh_dim_names=("rep", "shard"))
    else:
        mesh = init_device_mesh("cuda", (world,))
    kw = dict(mesh=mesh, reshard_after_forward=(mode != "grad_op"))
    if mode == "offload":
        kw["offload_policy"] = CPUOffloadPolicy()
    for blk in m.features:
        fully_shard(blk, **kw)
    fully_shard(m, **kw)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
lossf = nn.CrossEntropyLoss()
x = torch.randn(64, 1, size, size, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    # bf16: autocast over fp32 parameters, the same way in every mode.
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = lossf(m(x), y)
    loss.backward()
    opt.step()


for _ in range(5):
    step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
dist.barrier()
t = time.perf_counter()
n = 20
for _ in range(n):
    step()
torch.cuda.synchronize()
dt = time.perf_counter() - t
peak = torch.tensor([torch.cuda.max_memory_allocated()], device="cuda")
dist.all_reduce(peak, op=dist.ReduceOp.MAX)
if rank == 0:
    r = dict(mode=mode, size=size, prec=prec, world=world, batch_per_gpu=64,
             img_s_total=round(64 * n * world / dt, 1),
             ms_step=round(1000 * dt / n, 2),
             peak_mib_rank=round(peak.item() / 2**20, 1))
    print(json.dumps(r), flush=True)
dist.destroy_process_group()
