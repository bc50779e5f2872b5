#!/usr/bin/env python3
"""torch_mbv2_l4l.py - the PyTorch MobileNetV2 baseline measured like
mgrun (bench/like4like.py runs both): one configuration per process, so
the driver's peak for the process is this configuration's alone.

Model and step as ../shared/baselines/torch_mbv2.py (torchvision
MobileNetV2, 1-channel stem, 10 classes, batch 64, SGD momentum 0.9,
synthetic data already on the GPU, cudnn.benchmark; fp16/bf16 by
autocast over fp32 parameters, GradScaler for fp16).

MODE
  eager    the step as written (foreach SGD)
  compile  torch.compile (default mode) of the forward and backward, its
           warm-up outside the windows
  graph    PyTorch at its best for a launch-bound step: the whole step
           (zero_grad, forward, backward, GradScaler, fused SGD) captured
           once with torch.cuda.graph on static buffers after warm-up on a
           side stream, and replayed (autocast with cache_enabled=False,
           as the CUDA-graph docs require); fp16's GradScaler runs inside
           the graph through the fused SGD's found_inf/grad_scale path (no
           host sync). A capture that fails prints its error and exits 1:
           the row then says so, never a silent eager fallback.
LAYOUT nhwc (channels_last, the default for fp16/bf16) or nchw (the
  default for fp32); like4like.py measures both where asked.
PyTorch's fp32 convolutions use TF32 (its default); TORCH_TF32=0 turns
it off (convolutions and matmuls).

usage: torch_mbv2_l4l.py SIZE PREC MODE [WINDOWS STEPS WARM [LAYOUT]]
  PREC fp32 | fp16 | bf16; prints one JSON line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_measure as tm  # noqa: E402

size, prec, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
windows, steps, warm = (int(v) for v in (sys.argv[4:7] or (5, 20, 5)))
layout = sys.argv[7] if len(sys.argv) > 7 else ("nchw" if prec == "fp32" else "nhwc")
assert prec in ("fp32", "fp16", "bf16") and mode in ("eager", "compile", "graph")
assert layout in ("nchw", "nhwc")
mem = tm.DeviceMemory().open()  # before CUDA starts

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402

torch.backends.cudnn.benchmark = True
if os.environ.get("TORCH_TF32") == "0":
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
torch.cuda.init()
torch.zeros(1, device="cuda")  # the context
mem.context_ready().start()
amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(prec)
m = torchvision.models.mobilenet_v2(num_classes=10)
m.features[0][0] = nn.Conv2d(1, 32, 3, 2, 1, bias=False)
m = m.cuda()
x = torch.randn(64, 1, size, size, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
if layout == "nhwc":
    m = m.to(memory_format=torch.channels_last)
    x = x.to(memory_format=torch.channels_last)
# The graphed step uses the fused SGD (one kernel, and the found_inf path
# that keeps GradScaler on the device); eager keeps the default foreach.
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9,
                      fused=True if mode == "graph" else None)
scaler = torch.amp.GradScaler(enabled=amp == torch.float16)
lossf = nn.CrossEntropyLoss()


def fwd_bwd(x, y):
    with torch.autocast("cuda", dtype=amp or torch.float32,
                        enabled=amp is not None, cache_enabled=mode != "graph"):
        loss = lossf(m(x), y)
    scaler.scale(loss).backward()


f = torch.compile(fwd_bwd) if mode == "compile" else fwd_bwd


def eager_step():
    opt.zero_grad(set_to_none=True)
    f(x, y)
    scaler.step(opt)
    scaler.update()


def graphed_step():
    """Warm up on a side stream (cudnn.benchmark's choices, the momentum
    buffers, the scaler's state), then capture one whole step; returns
    the replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            eager_step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        f(x, y)
        scaler.step(opt)
        scaler.update()
    return g.replay


try:
    step = graphed_step() if mode == "graph" else eager_step
except Exception as e:  # noqa: BLE001 - the row must say why
    print(json.dumps({"error": f"{mode} {prec} {layout}: {type(e).__name__}: {e}"[:600]}),
          flush=True)
    sys.exit(1)
r = dict(size=size, prec=prec, mode=mode, layout=layout, batch=64,
         tf32=torch.backends.cudnn.allow_tf32,
         **tm.measure(step, windows, steps, warm, mem), torch=torch.__version__)
print(json.dumps(r), flush=True)
