#!/usr/bin/env python3
"""torch_mbv2_l4l.py - the PyTorch MobileNetV2 baseline measured like
mgrun (bench/like4like.py runs both): one configuration per process, so
the driver's peak for the process is this configuration's alone.

Model and step as ../shared/baselines/torch_mbv2.py (torchvision
MobileNetV2, 1-channel stem, 10 classes, batch 64, SGD momentum 0.9,
synthetic data already on the GPU, cudnn.benchmark; fp16/bf16 by
autocast over fp32 parameters with channels_last, GradScaler for fp16).
MODE eager, or compile (torch.compile default mode of the forward and
backward, its warm-up outside the windows). PyTorch's fp32 convolutions
use TF32 (its default); TORCH_TF32=0 turns it off.

usage: torch_mbv2_l4l.py SIZE PREC MODE [WINDOWS STEPS WARM]
  PREC fp32 | fp16 | bf16; prints one JSON line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_measure as tm  # noqa: E402

size, prec, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
windows, steps, warm = (int(v) for v in (sys.argv[4:7] or (5, 20, 5)))
assert prec in ("fp32", "fp16", "bf16") and mode in ("eager", "compile")
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
if amp is not None:
    m = m.to(memory_format=torch.channels_last)
    x = x.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler(enabled=amp == torch.float16)
lossf = nn.CrossEntropyLoss()


def fwd_bwd(x, y):
    with torch.autocast("cuda", dtype=amp or torch.float32,
                        enabled=amp is not None):
        loss = lossf(m(x), y)
    scaler.scale(loss).backward()


f = torch.compile(fwd_bwd) if mode == "compile" else fwd_bwd


def step():
    opt.zero_grad(set_to_none=True)
    f(x, y)
    scaler.step(opt)
    scaler.update()


r = dict(size=size, prec=prec, mode=mode, batch=64,
         tf32=torch.backends.cudnn.allow_tf32,
         **tm.measure(step, windows, steps, warm, mem), torch=torch.__version__)
print(json.dumps(r), flush=True)
