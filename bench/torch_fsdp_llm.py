# What a PyTorch user runs instead of mgrun's fsdp / offload on a 7B
# llama: ../shared/baselines/torch_fsdp.py (HF LlamaForCausalLM in the
# Llama-2-7B shape, FSDP2 fully_shard on every decoder layer and the root,
# MixedPrecisionPolicy(param bf16, reduce fp32), SDPA attention, AdamW,
# labels = inputs) measured the way bench/fsdp_llm.sh measures mgrun:
# W windows of S steps after warm-up, timed with CUDA events on every rank
# (the slowest rank's window counts), and each rank's process peak as the
# driver sees it (bench/torch_measure.py) beside the caching allocator's.
#
# Best working configuration: fused AdamW where FSDP2's DTensor
# parameters take it, else foreach (the policy field says which ran);
# offload is FSDP2's CPUOffloadPolicy (pinned host parameters, gradients
# and optimizer step on the CPU) over full sharding; ddp is DDP under bf16
# autocast (no shard). An out-of-memory run prints {"oom": true}.
#
# Usage (torchrun): torch_fsdp_llm.py MODE MICRO_BATCH [WINDOWS STEPS WARM]
#   MODE: full | grad_op | hybrid | ddp | offload
#   env LAYERS (32: the 7B shape; fewer for a quick look), SEQ (512),
#   CKPT (0; 1: transformers' gradient checkpointing of every decoder
#   layer, non-reentrant, as mgrun's model.activation_checkpointing)
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_measure as tm  # noqa: E402
from llama_shapes import LLAMA_SHAPES  # noqa: E402

mode, mb = sys.argv[1], int(sys.argv[2])
windows, steps, warm = (int(v) for v in (sys.argv[3:6] or (5, 2, 3)))
assert mode in ("full", "grad_op", "hybrid", "ddp", "offload"), mode
seq = int(os.environ.get("SEQ", 512))
layers = int(os.environ.get("LAYERS", 32))
local = int(os.environ["LOCAL_RANK"])
mem = tm.DeviceMemory(local_rank=local).open()  # before CUDA starts

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,  # noqa: E402
                                    fully_shard)
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.zeros(1, device="cuda")  # the context
mem.context_ready().start()

cfg = LlamaConfig(**dict(LLAMA_SHAPES["llama2-7b"], num_hidden_layers=layers))
cfg._attn_implementation = "sdpa"
with torch.device("meta"):
    m = LlamaForCausalLM(cfg)
ckpt = os.environ.get("CKPT", "0") == "1"
if ckpt:
    m.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False})
    m.config.use_cache = False
m.train()
params = sum(p.numel() for p in m.parameters())
policy = "DDP, bf16 autocast"
if mode != "ddp":
    if mode == "hybrid":
        mesh = init_device_mesh("cuda", (2, world // 2),
                                mesh_dim_names=("rep", "shard"))
    else:
        mesh = init_device_mesh("cuda", (world,))
    # REDUCE=bf16: gradients reduced in bf16, MixedPrecisionPolicy's
    # default; fp32 (the default here) as mgrun's strategy.reduce_dtype
    reduce_bf16 = os.environ.get("REDUCE", "fp32") == "bf16"
    kw = dict(mesh=mesh, reshard_after_forward=(mode != "grad_op"),
              mp_policy=MixedPrecisionPolicy(
                  param_dtype=torch.bfloat16,
                  reduce_dtype=torch.bfloat16 if reduce_bf16 else torch.float32))
    policy = f"FSDP2 MixedPrecisionPolicy(bf16, reduce {'bf16' if reduce_bf16 else 'fp32'})"
    if mode == "offload":
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
        policy += ", CPUOffloadPolicy"
    for layer in m.model.layers:
        fully_shard(layer, **kw)
    fully_shard(m, **kw)
if ckpt:
    policy += ", activation checkpointing"
m.to_empty(device="cpu" if mode == "offload" else "cuda")
with torch.no_grad():
    for p in m.parameters():
        p.normal_(0, 0.02)
    # to_empty left the rotary buffers uninitialised
    re = m.model.rotary_emb
    hd = cfg.hidden_size // cfg.num_attention_heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device="cuda").float() / hd))
    re.inv_freq = inv
    re.original_inv_freq = inv
if mode == "ddp":
    m = torch.nn.parallel.DistributedDataParallel(
        m, device_ids=[torch.cuda.current_device()], gradient_as_bucket_view=True)
x = torch.randint(0, cfg.vocab_size, (mb, seq), device="cuda")


def make_opt(fused):
    if fused:
        return torch.optim.AdamW(m.parameters(), lr=1e-5, fused=True)
    return torch.optim.AdamW(m.parameters(), lr=1e-5, foreach=True)


opt = make_opt(mode != "offload")


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "ddp")):
        loss = m(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


r = dict(mode=mode, world=world, mb=mb, seq=seq, layers=layers, params=params,
         ckpt=ckpt)
try:
    try:
        step()
        policy += ", fused AdamW" if mode != "offload" else ", foreach AdamW"
    except (RuntimeError, NotImplementedError) as e:
        if isinstance(e, torch.OutOfMemoryError) or mode == "offload":
            raise
        opt = make_opt(False)  # fused AdamW refused the DTensors
        policy += f", foreach AdamW (fused: {str(e).splitlines()[0][:80]})"
        step()
    res = tm.measure(step, windows, steps, warm, mem)
    dm = res["device_memory"]
    job = tm.across_ranks(res["step_s"]["windows"], res["torch_memory"], dm)
    import bench_stats as bs
    r.update(policy=policy, tok_s_gpu=bs.per_second(job["step_s"], mb * seq), **job,
             driver_method=dm["method"], warmup_s=res["warmup_s"],
             torch=torch.__version__)
except torch.OutOfMemoryError as e:
    r.update(oom=True, why=str(e).splitlines()[0][:200])
if rank == 0:
    print(json.dumps(r), flush=True)
dist.destroy_process_group()
