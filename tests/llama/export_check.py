#!/usr/bin/env python3
"""export_check.py - `mgrun export` folders loaded by Hugging Face
transformers (GPU machine: scripts/gpu.sh text).

  export_check.py MGRUN WORKDIR

Trains the tiny llama of conf/llama_tiny.ini for a few steps on the CPU
in fp32 (full fine-tuning; and LoRA on every projection and the head,
exported merged), exports each run, loads the folder with
LlamaForCausalLM.from_pretrained, and checks that greedy decoding of the
same prompt gives the same 24 ids as `mgrun generate --greedy` on the run
(on the CPU and on CUDA): 24 argmaxes over the whole forward, so a
misnamed, transposed or unmerged tensor or a wrong config field shows.
The `sharded` case exports the full fine-tune with --max-shard-size
100KB (several shards and model.safetensors.index.json, as an 8B export
is written) and checks the same.
(tests/export checks the loss round trip through model.hf_dir in CI.)
Every check asserts; the exit status is the verdict.
"""
import os
import subprocess
import sys

import torch
from transformers import LlamaForCausalLM
from hf_common import check, finish

mgrun, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.backends.cuda.matmul.allow_tf32 = False
PROMPT = [5, 17, 42, 99, 3, 200, 7]


def sh(*args):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout


for name, extra in [("full", []),
                    ("lora", ["--set", "model.lora_rank=4", "--set",
                              "model.lora_alpha=8", "--set",
                              "model.lora_targets=all,head", "--set",
                              "model.tie_embeddings=no"]),
                    ("sharded", [])]:
    common = ["-c", "conf/llama_tiny.ini", "--set", "run.device=cpu",
              "--set", "run.precision=fp32", "--set",
              f"run.out_dir={work}", "--set", f"run.name={name}"] + extra
    sh(mgrun, *common, "--set", "run.max_steps=30")
    out = f"{work}/{name}_hf"
    shard = ["--max-shard-size", "100KB"] if name == "sharded" else []
    sh(mgrun, "export", *common, "--out", out, "--dtype", "fp32", *shard)
    if shard:
        n = len([f for f in os.listdir(out) if f.endswith(".safetensors")])
        check(n > 1 and os.path.exists(f"{out}/model.safetensors.index.json"),
              f"sharded: {n} shards and an index written")
    ids = {}
    for dev in ["cpu", "cuda"]:
        g = sh(mgrun, "generate", *common, "--set", f"run.device={dev}",
               "--ids", "--prompt", " ".join(map(str, PROMPT)), "--greedy",
               "--max-new-tokens", "24")
        ids[dev] = [int(x) for x in g.split()]
    m = LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
    m.eval()
    check(not any("lora" in k for k in m.state_dict()),
          f"{name}: the exported folder is a plain model (adapters merged)")
    for dev in ["cpu", "cuda"]:
        mm = m.to(dev)
        x = torch.tensor([PROMPT], device=dev)
        with torch.no_grad():
            y = mm.generate(x, max_new_tokens=24, do_sample=False,
                            pad_token_id=0)[0, len(PROMPT):].tolist()
        check(y == ids[dev], f"{name} {dev}: transformers' greedy ids from "
              f"the export equal mgrun generate's ({y[:8]}... vs "
              f"{ids[dev][:8]}...)")
finish("export_check")
print("export_check: 0 failure(s)")
