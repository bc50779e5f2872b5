#!/usr/bin/env python3
"""torch_lora_l4l.py - the transformers + peft LoRA baseline measured like
mgrun (bench/like4like.py runs both): one cell per process, timed windows
with CUDA events, the driver's peak for the process beside the caching
allocator's.

The model and step are ../shared/baselines/torch_lora.py's: HF
LlamaForCausalLM with random weights in bf16, SDPA attention, peft LoRA
(r = 8, alpha = 16, no dropout) with fp32 adapter weights, fused AdamW,
bf16 autocast, labels = inputs (every token counted). MODE eager, or
compile (torch.compile of the peft model); SDPA on the fastest backend
that runs at the model's shape (bench/torch_llm_best.py), named in the row.

usage: torch_lora_l4l.py SHAPE BATCH SEQ TARGETS [WINDOWS STEPS WARM [MODE]]
  SHAPE llama3.2-1b | llama3-8b; TARGETS qv | tt | all (the seven projections); prints one JSON line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llm_best as best  # noqa: E402
import torch_measure as tm  # noqa: E402
from llama_shapes import LLAMA_SHAPES  # noqa: E402

shape, batch, seq, targets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
windows, steps, warm = (int(v) for v in (sys.argv[5:8] or (5, 4, 3)))
mode = sys.argv[8] if len(sys.argv) > 8 else "eager"
mem = tm.DeviceMemory().open()  # before CUDA starts

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

TARGETS = {"qv": ["q_proj", "v_proj"],
           "tt": ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                   "down_proj"]}
torch.cuda.init()
torch.zeros(1, device="cuda")  # the context
mem.context_ready().start()
cfg = LlamaConfig(**LLAMA_SHAPES[shape])
cfg._attn_implementation = best.register_causal_sdpa()
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    m = LlamaForCausalLM(cfg)
torch.set_default_dtype(torch.float32)
m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                 target_modules=TARGETS[targets]))
for n, p in m.named_parameters():
    if p.requires_grad:
        p.data = p.data.float()
opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=3e-4,
                        fused=True)
x = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
backend, attn_row = best.choose_attention(torch, cfg, batch, seq)
fm, attn = best.set_up(torch, m, mode, backend)


def step():
    with attn(), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = fm(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


r = dict(shape=shape, batch=batch, seq=seq, targets=targets, tokens=batch * seq,
         mode=mode, attention=backend, attention_probe=attn_row,
         **tm.measure(step, windows, steps, warm, mem), torch=torch.__version__)
print(json.dumps(r), flush=True)
