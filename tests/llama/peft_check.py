#!/usr/bin/env python3
"""peft_check.py - an mgrun LoRA adapter in Hugging Face peft (GPU machine).

  peft_check.py MGRUN WORKDIR

Saves a random-weight LlamaForCausalLM (untied head, GQA) with
transformers, writes pre-tokenized rows with masked prompts, LoRA-trains
it with mgrun from that folder (a few AdamW steps, so B is not zero), and
loads the run's adapter/ with peft.PeftModel.from_pretrained on the same
transformers model. Checks: every adapter tensor peft loaded equals the
file's (no key silently ignored); peft's per-token loss over the rows
equals mgrun --eval-only's on the same checkpoint; the logits equal those
of the base model with W + s B A merged by hand (s = alpha / r or alpha /
sqrt(r)); the adapter changes the loss. Two configurations: every
projection and the head (alpha / r), and q, v with rsLoRA and dropout, on
the CPU and on CUDA in fp32. Then the other way: an adapter made and
saved by peft (random nonzero B, q/k/v/o/gate/up/down) loaded by mgrun
(model.lora_adapter) evaluates to peft's loss. Every comparison asserts;
the exit status is the verdict.
"""
import json
import math
import os
import subprocess
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import LlamaForCausalLM
from hf_common import TINY, check, finish, make_rows, save_tiny

mgrun, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def loss_and_logits(m, rows, dev):
    """Per-token mean loss over every counted label, and each row's
    logits."""
    m = m.to(dev).eval()
    tot, cnt, logits = 0.0, 0, []
    with torch.no_grad():
        for ids, labels in rows:
            x = torch.tensor([ids], device=dev)
            y = torch.tensor([labels], device=dev)
            lg = m(input_ids=x).logits.float()
            logits.append(lg[0].cpu())
            tot += float(torch.nn.functional.cross_entropy(
                lg[0, :-1], y[0, 1:], ignore_index=-100, reduction="sum"))
            cnt += int((y[0, 1:] != -100).sum())
    return tot / cnt, logits


def mgrun_run(d, data, dev, name, lora, extra):
    ini = os.path.join(work, name + ".ini")
    with open(ini, "w") as f:
        f.write(f"""[run]
device = {dev}
precision = fp32
batch_size = 4
eval_batch_size = 12
epochs = 1
max_steps = 6
threads = 4
cuda_graph = false
seed = 3
out_dir = {work}/runs
[optimizer]
name = adamw
lr = 0.02
weight_decay = 0
schedule = constant
max_grad_norm = 0
[model]
name = llama
hf_dir = {d}
{lora}
[dataset]
name = token_jsonl
train = {data}
seq_len = 128
[strategy]
name = single
shuffle = false
""")
    r = subprocess.run([mgrun, "-c", ini] + extra, capture_output=True,
                       text=True)
    print(r.stdout[-1500:], r.stderr[-1500:])
    return r.returncode, os.path.join(work, "runs", name)


base_dir = save_tiny(work)
data = os.path.join(work, "rows.jsonl")
rows = make_rows(TINY["vocab_size"], data)
CONFIGS = [
    ("all", "lora_rank = 4\nlora_alpha = 8\nlora_targets = all,head\n",
     8 / 4),
    ("qv_rs", "lora_rank = 4\nlora_alpha = 8\nlora_targets = q,v\n"
     "rslora = true\nlora_dropout = 0.1\n", 8 / math.sqrt(4)),
]
for dev in ["cpu", "cuda"]:
    for cname, lora, scale in CONFIGS:
        tag = f"{cname}_{dev}"
        rc, run = mgrun_run(base_dir, data, dev, tag, lora, [])
        check(rc == 0, f"{tag}: mgrun LoRA training exits 0")
        if rc:
            continue
        rc, _ = mgrun_run(base_dir, data, dev, tag, lora, ["--eval-only"])
        check(rc == 0, f"{tag}: mgrun --eval-only exits 0")
        if rc:
            continue
        mg_loss = json.load(open(os.path.join(run, "eval.json")))[
            "metrics"]["loss"]
        ad_dir = os.path.join(run, "adapter")
        cfg = json.load(open(os.path.join(ad_dir, "adapter_config.json")))
        check(cfg["base_model_name_or_path"] == base_dir,
              f"{tag}: base_model_name_or_path is the hf_dir")
        sd = load_file(os.path.join(ad_dir, "adapter_model.safetensors"))
        base = LlamaForCausalLM.from_pretrained(base_dir,
                                                torch_dtype=torch.float32)
        ref_loss, _ = loss_and_logits(base, rows, dev)
        # Merge by hand on a fresh copy: W += s B A.
        merged = LlamaForCausalLM.from_pretrained(base_dir,
                                                  torch_dtype=torch.float32)
        mp = dict(merged.named_parameters())
        for k, a in sd.items():
            if ".lora_A." not in k:
                continue
            b = sd[k.replace(".lora_A.", ".lora_B.")]
            wname = k[len("base_model.model."):].replace(
                ".lora_A.weight", ".weight")
            with torch.no_grad():
                mp[wname] += scale * (b.double() @ a.double()).float()
        _, merged_logits = loss_and_logits(merged, rows, dev)
        peft = PeftModel.from_pretrained(
            LlamaForCausalLM.from_pretrained(base_dir,
                                             torch_dtype=torch.float32),
            ad_dir)
        # Every tensor of the file is what peft holds (a key peft did not
        # recognise would leave its fresh B at zero).
        held = {k: v for k, v in peft.state_dict().items() if "lora_" in k}
        missing = 0
        for k, v in sd.items():
            hk = k.replace(".weight", ".default.weight")
            if hk not in held or not torch.equal(held[hk].cpu().float(), v):
                missing += 1
        check(missing == 0 and len(held) == len(sd),
              f"{tag}: peft holds all {len(sd)} adapter tensors as written "
              f"({missing} differ, {len(held)} held)")
        peft_loss, peft_logits = loss_and_logits(peft, rows, dev)
        rel = abs(peft_loss - mg_loss) / abs(mg_loss)
        check(rel < 2e-5, f"{tag}: peft loss {peft_loss:.6f} vs mgrun "
              f"{mg_loss:.6f} (rel {rel:.2e} < 2e-5)")
        check(abs(peft_loss - ref_loss) > 1e-4,
              f"{tag}: the adapter changes the loss ({ref_loss:.6f} -> "
              f"{peft_loss:.6f})")
        worst = max(float((p - q).abs().max())
                    for p, q in zip(peft_logits, merged_logits))
        check(worst < 1e-4, f"{tag}: peft logits vs W + s B A merged, "
              f"worst |diff| {worst:.2e} < 1e-4")

# peft -> mgrun: an adapter peft made and saved, evaluated by mgrun.
torch.manual_seed(5)
pm = get_peft_model(
    LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32),
    LoraConfig(r=4, lora_alpha=12, lora_dropout=0.0, task_type="CAUSAL_LM",
               target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                               "gate_proj", "up_proj", "down_proj"]))
with torch.no_grad():
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            p.normal_(0, 0.05)
made = os.path.join(work, "peft_made")
pm.save_pretrained(made)
ref, _ = loss_and_logits(pm, rows, "cpu")
lora = (f"lora_rank = 4\nlora_alpha = 12\nlora_targets = all\n"
        f"lora_adapter = {made}\n")
for dev in ["cpu", "cuda"]:
    tag = f"peft_made_{dev}"
    rc, run = mgrun_run(base_dir, data, dev, tag, lora, ["--eval-only"])
    check(rc == 0, f"{tag}: mgrun --eval-only of peft's adapter exits 0")
    if rc:
        continue
    got = json.load(open(os.path.join(run, "eval.json")))["metrics"]["loss"]
    rel = abs(got - ref) / abs(ref)
    check(rel < 2e-5, f"{tag}: mgrun loss {got:.6f} vs peft {ref:.6f} "
          f"(rel {rel:.2e} < 2e-5)")

finish("peft_check")
