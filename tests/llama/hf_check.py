#!/usr/bin/env python3
"""hf_check.py - mgrun's llama against Hugging Face transformers (GPU machine).

  hf_check.py MGRUN WORKDIR

Saves random-weight LlamaForCausalLM models with transformers (a Llama-3
shape: GQA, llama3 rope scaling, tied embeddings, one safetensors file;
and a Llama-2 shape: no GQA, untied, sharded with an index), writes
pre-tokenized rows with masked prompts, and checks that mgrun loading the
same folder computes the same per-token loss (fp32 on the CPU and on CUDA,
bf16 on CUDA) and, after one SGD step with lr 1, the same gradients.
Every comparison asserts; the exit status is the verdict.
"""
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file
from hf_common import check, finish, hf_loss, make_rows, save_random, \
    step_ini

mgrun, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def make_model(name, **kw):
    d = os.path.join(work, name)
    m = save_random(d, kw,
                    max_shard_size="200KB" if name == "llama2" else "5GB")
    return m, d


def mgrun_run(d, data, dev, prec, extra, name):
    ini = step_ini(work, d, data, dev, prec, name)
    cmd = [mgrun, "-c", ini] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout[-1500:], r.stderr[-1500:])
    return r.returncode, os.path.join(work, "runs", name)


for name, kw in [
    ("llama3", dict(vocab_size=300, hidden_size=128, intermediate_size=344,
                    num_hidden_layers=2, num_attention_heads=8,
                    num_key_value_heads=2, head_dim=16, rope_theta=500000.0,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                  "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 32},
                    max_position_embeddings=256, tie_word_embeddings=True,
                    rms_norm_eps=1e-5)),
    ("llama2", dict(vocab_size=256, hidden_size=96, intermediate_size=200,
                    num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=4, rope_theta=10000.0,
                    max_position_embeddings=256, tie_word_embeddings=False,
                    rms_norm_eps=1e-6)),
]:
    m, d = make_model(name, **kw)
    data = os.path.join(work, name + ".jsonl")
    rows = make_rows(kw["vocab_size"], data)
    ref32, grads = hf_loss(m, rows, "fp32")
    w0 = {k: v.detach().float().cpu().clone() for k, v in m.named_parameters()}
    refbf, _ = hf_loss(m, rows, "bf16")
    for dev, prec, tol in [("cpu", "fp32", 2e-5), ("cuda", "fp32", 2e-5),
                           ("cuda", "bf16", 2e-2)]:
        tag = f"{name}_{dev}_{prec}"
        rc, run = mgrun_run(d, data, dev, prec, ["--eval-only"], tag)
        check(rc == 0, f"{tag}: mgrun --eval-only exits 0")
        if rc:
            continue
        got = json.load(open(os.path.join(run, "eval.json")))
        loss = got["metrics"]["loss"]
        ref = refbf if prec == "bf16" else ref32
        rel = abs(loss - ref) / abs(ref)
        check(rel < tol, f"{tag}: loss {loss:.6f} vs transformers "
              f"{ref:.6f} (rel {rel:.2e} < {tol})")
    # One SGD step with lr 1 (no momentum, decay or clipping): the weight
    # change is minus the gradient of the per-token mean loss.
    for dev in ["cpu", "cuda"]:
        tag = f"{name}_{dev}_step"
        rc, run = mgrun_run(d, data, dev, "fp32", [], tag)
        check(rc == 0, f"{tag}: one training step exits 0")
        if rc:
            continue
        ck = load_file(os.path.join(run, "checkpoint.safetensors"))
        worst, worst_name = 0.0, ""
        for k, g in grads.items():
            key = "param/" + k
            if key not in ck:
                key = "param/head." + k
            if key not in ck:
                check(False, f"{tag}: checkpoint lacks {k}")
                continue
            got = w0[k] - ck[key].float()
            rel = float((got - g).norm() / (g.norm() + 1e-30))
            if rel > worst:
                worst, worst_name = rel, k
        check(worst < 1e-4, f"{tag}: gradients vs transformers, worst "
              f"relative error {worst:.2e} ({worst_name}) < 1e-4")

finish("hf_check")
