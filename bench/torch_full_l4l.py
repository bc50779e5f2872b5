#!/usr/bin/env python3
"""torch_full_l4l.py - the transformers full fine-tuning baseline measured
like mgrun (bench/like4like.py runs both): one cell per process, timed
windows with CUDA events, the driver's peak for the process beside the
caching allocator's.

The model and step are ../shared/baselines/torch_full.py's: HF
LlamaForCausalLM with random weights, fp32 parameters and fused AdamW
state, bf16 autocast, SDPA attention, labels = inputs (every token
counted); CKPT 1 turns on HF gradient checkpointing.
MODE eager, or compile (torch.compile of the model, the loss inside it);
SDPA on the fastest backend that runs at the model's shape (ATTN=auto,
bench/torch_llm_best.py), named in the row.

usage: torch_full_l4l.py SHAPE BATCH SEQ CKPT [WINDOWS STEPS WARM [MODE]]
  SHAPE llama3.2-1b | llama3.2-3b; prints one JSON line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llm_best as best  # noqa: E402
import torch_measure as tm  # noqa: E402
from llama_shapes import LLAMA_SHAPES  # noqa: E402

shape, batch, seq, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
windows, steps, warm = (int(v) for v in (sys.argv[5:8] or (5, 4, 3)))
mode = sys.argv[8] if len(sys.argv) > 8 else "eager"
mem = tm.DeviceMemory().open()  # before CUDA starts

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

torch.cuda.init()
torch.zeros(1, device="cuda")  # the context
mem.context_ready().start()
cfg = LlamaConfig(**LLAMA_SHAPES[shape])
cfg._attn_implementation = best.register_causal_sdpa()
with torch.device("cuda"):
    m = LlamaForCausalLM(cfg)
if ckpt:
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.config.use_cache = False
opt = torch.optim.AdamW(m.parameters(), lr=2e-5, fused=True)
x = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
backend, attn_row = best.choose_attention(torch, cfg, batch, seq)
fm, attn = best.set_up(torch, m, mode, backend)


def step():
    with attn(), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = fm(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


n = sum(p.numel() for p in m.parameters())
r = dict(shape=shape, batch=batch, seq=seq, ckpt=ckpt, params=n, tokens=batch * seq,
         mode=mode, attention=backend, attention_probe=attn_row,
         **tm.measure(step, windows, steps, warm, mem), torch=torch.__version__)
print(json.dumps(r), flush=True)
