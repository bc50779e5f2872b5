#!/usr/bin/env python3
"""dpo_check.py - mgrun's DPO against TRL's formula in PyTorch (GPU machine).

  dpo_check.py MGRUN WORKDIR

Saves a random-weight LlamaForCausalLM (untied head, GQA) with
transformers and writes preference pairs as pre-tokenized rows
(token_jsonl: [prompt + chosen | prompt + rejected], position_ids
restarting at the rejected sequence, labels on the responses only).
mgrun DPO-trains LoRA adapters on it for a few steps (objective = dpo,
beta 0.5, label smoothing 0.1, so B is not zero) and evaluates the run
(--eval-only). The same numbers are then computed here in a few lines of
PyTorch: the policy is the base with W + s B A merged from the run's
adapter/, the reference the base itself; per sequence the log-probs are
summed over the response tokens, and TRL's DPOTrainer formula gives the
loss, rewards/chosen, rewards/rejected, rewards/accuracies,
rewards/margins, logps/chosen and logps/rejected, each compared with
mgrun's eval.json. On the CPU and on CUDA, fp32. Every comparison
asserts; the exit status is the verdict.
"""
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import LlamaForCausalLM
from hf_common import TINY, check, finish, save_tiny

mgrun, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
BETA, EPS, ALPHA, RANK = 0.5, 0.1, 8, 4


def make_pairs(path, n=16):
    """Rows of [prompt + chosen | prompt + rejected]; returns, per pair,
    the two sequences as (ids, HF-aligned labels)."""
    g = torch.Generator().manual_seed(1)
    V = TINY["vocab_size"]
    pairs = []
    with open(path, "w") as f:
        for _ in range(n):
            P = int(torch.randint(3, 12, (1,), generator=g))
            prompt = torch.randint(0, V, (P,), generator=g).tolist()
            seqs, ids, labels, pos = [], [], [], []
            for _ in range(2):
                R = int(torch.randint(2, 20, (1,), generator=g))
                resp = torch.randint(0, V, (R,), generator=g).tolist()
                doc, lab = prompt + resp, [-100] * P + resp
                seqs.append((doc, lab))
                ids += doc
                labels += lab
                pos += list(range(len(doc)))
            pairs.append(seqs)
            f.write(json.dumps({"input_ids": ids, "labels": labels,
                                "position_ids": pos}) + "\n")
    return pairs


def seq_logp(m, doc, lab, dev):
    """Sum of log p(token) over the labelled tokens of one sequence (HF
    alignment: labels[t] is predicted from position t - 1)."""
    x = torch.tensor([doc], device=dev)
    y = torch.tensor(lab[1:], device=dev)
    lp = F.log_softmax(m(input_ids=x).logits[0, :-1].float(), dim=-1)
    keep = y != -100
    return lp[keep].gather(1, y[keep].unsqueeze(1)).sum().double()


def trl_metrics(policy, ref, pairs, dev):
    """TRL DPOTrainer's sigmoid loss with label smoothing, and its logged
    metrics, over all pairs."""
    policy, ref = policy.to(dev).eval(), ref.to(dev).eval()
    pc, pr, rc, rr = [], [], [], []
    with torch.no_grad():
        for (cd, cl), (rd, rl) in pairs:
            pc.append(seq_logp(policy, cd, cl, dev))
            pr.append(seq_logp(policy, rd, rl, dev))
            rc.append(seq_logp(ref, cd, cl, dev))
            rr.append(seq_logp(ref, rd, rl, dev))
    pc, pr, rc, rr = (torch.stack(v) for v in (pc, pr, rc, rr))
    logits = (pc - rc) - (pr - rr)
    losses = (-F.logsigmoid(BETA * logits) * (1 - EPS)
              - F.logsigmoid(-BETA * logits) * EPS)
    chosen, rejected = BETA * (pc - rc), BETA * (pr - rr)
    return {
        "loss": float(losses.mean()),
        "rewards/chosen": float(chosen.mean()),
        "rewards/rejected": float(rejected.mean()),
        "rewards/accuracies": float((chosen > rejected).double().mean()),
        "rewards/margins": float((chosen - rejected).mean()),
        "logps/chosen": float(pc.mean()),
        "logps/rejected": float(pr.mean()),
    }


def mgrun_run(base, data, dev, name, extra):
    ini = os.path.join(work, name + ".ini")
    with open(ini, "w") as f:
        f.write(f"""[run]
device = {dev}
precision = fp32
batch_size = 4
eval_batch_size = 16
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
hf_dir = {base}
lora_rank = {RANK}
lora_alpha = {ALPHA}
lora_targets = all,head
objective = dpo
dpo_beta = {BETA}
dpo_label_smoothing = {EPS}
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
data = os.path.join(work, "pairs.jsonl")
pairs = make_pairs(data)
for dev in ["cpu", "cuda"]:
    tag = f"dpo_{dev}"
    rc, run = mgrun_run(base_dir, data, dev, tag, [])
    check(rc == 0, f"{tag}: mgrun DPO training exits 0")
    if rc:
        continue
    rc, _ = mgrun_run(base_dir, data, dev, tag, ["--eval-only"])
    check(rc == 0, f"{tag}: mgrun --eval-only exits 0")
    if rc:
        continue
    mg = json.load(open(os.path.join(run, "eval.json")))["metrics"]
    sd = load_file(os.path.join(run, "adapter", "adapter_model.safetensors"))
    ref = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    policy = LlamaForCausalLM.from_pretrained(base_dir,
                                              torch_dtype=torch.float32)
    mp = dict(policy.named_parameters())
    for k, a in sd.items():
        if ".lora_A." not in k:
            continue
        b = sd[k.replace(".lora_A.", ".lora_B.")]
        wname = k[len("base_model.model."):].replace(".lora_A.weight",
                                                     ".weight")
        with torch.no_grad():
            mp[wname] += (ALPHA / RANK) * (b.double() @ a.double()).float()
    want = trl_metrics(policy, ref, pairs, dev)
    check(abs(want["rewards/margins"]) > 1e-3,
          f"{tag}: the adapters moved the rewards (margin "
          f"{want['rewards/margins']:.4g})")
    for k, v in want.items():
        got = mg.get(k)
        # a pair within rounding of a tie may fall either way
        tol = (2e-4 * max(1.0, abs(v)) if k != "rewards/accuracies"
               else 1.0 / len(pairs) + 1e-9)
        check(got is not None and abs(got - v) <= tol,
              f"{tag}: {k} mgrun {got} vs TRL's formula {v:.6g} "
              f"(tolerance {tol:.1e})")

finish("dpo_check")
