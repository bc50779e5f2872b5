"""hf_common.py - what the GPU machine's transformers checks share
(hf_check.py, family_check.py, export_check.py, peft_check.py,
dpo_check.py): one verdict list with check() and finish(), random-weight
models of any family transformers knows (save_random; TINY, the
LlamaForCausalLM the LoRA and DPO checks save), token rows with masked
prompts (make_rows) and transformers' loss and gradients on them
(hf_loss), and the one-step run both compare against it (step_ini)."""
import os
import sys

failures = []


def check(ok, what):
    """Print ok / FAIL and what was checked; remember a failure."""
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def finish(name):
    """The verdict line, then exit 1 after any failure (else 0)."""
    print(f"{name}: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


TINY = dict(vocab_size=256, hidden_size=96, intermediate_size=200,
            num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
            rope_theta=10000.0, max_position_embeddings=256,
            tie_word_embeddings=False, rms_norm_eps=1e-5)


def save_random(path, kw, family="llama", attn=None, **save_kw):
    """A causal LM of model_type family (config kw) with clearly nonzero
    weights (matrices N(0, 0.08), larger than the default 0.02 so logits
    are far from uniform and differences show; 1-D tensors, norms and
    biases, in [0.5, 1.5]) saved by transformers into path (save_kw:
    save_pretrained's options; attn: attn_implementation); returns the
    model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(family, **kw)
    extra = {"attn_implementation": attn} if attn else {}
    m = AutoModelForCausalLM.from_config(cfg, **extra).float()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
            else:
                p.uniform_(0.5, 1.5)
    m.save_pretrained(path, safe_serialization=True, **save_kw)
    return m


def step_ini(work, d, data, dev, prec, name):
    """WORK/NAME.ini: one SGD step with lr 1 (no momentum, decay or
    clipping, so the weight change is minus the gradient of the per-token
    mean loss) of the llama plugin on folder d and the token rows in
    data, run dir WORK/runs/NAME; returns its path."""
    ini = os.path.join(work, name + ".ini")
    with open(ini, "w") as f:
        f.write(f"""[run]
device = {dev}
precision = {prec}
batch_size = 12
eval_batch_size = 12
epochs = 1
max_steps = 1
threads = 4
cuda_graph = false
out_dir = {work}/runs
name = {name}
[optimizer]
name = sgd
lr = 1
momentum = 0
schedule = constant
max_grad_norm = 0
[model]
name = llama
hf_dir = {d}
[dataset]
name = token_jsonl
train = {data}
seq_len = 128
[strategy]
name = single
shuffle = false
""")
    return ini


def make_rows(vocab, path, n=12):
    """n pre-tokenized rows of 8-69 random ids below vocab, the first
    third of each masked (-100), written to path as token_jsonl; the
    (ids, labels) list."""
    import json
    import torch

    g = torch.Generator().manual_seed(1)
    rows = []
    with open(path, "w") as f:
        for _ in range(n):
            L = int(torch.randint(8, 70, (1,), generator=g))
            ids = torch.randint(0, vocab, (L,), generator=g).tolist()
            labels = list(ids)
            for t in range(L // 3):
                labels[t] = -100
            rows.append((ids, labels))
            f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
    return rows


def hf_loss(m, rows, dtype):
    """On CUDA: the mean next-token loss over every counted label token,
    and each parameter's gradient (float64 on the host). dtype fp32,
    bf16 (autocast) or fp64 (a float64 copy of m: the reference the
    fp32 gradients are held to)."""
    import copy
    import torch

    if dtype == "fp64":
        m = copy.deepcopy(m).double()
    m = m.to("cuda")
    m.zero_grad()
    cnt, losses = 0, []
    for ids, labels in rows:
        x = torch.tensor([ids], device="cuda")
        y = torch.tensor([labels], device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16,
                            enabled=dtype == "bf16"):
            logits = m(input_ids=x).logits
        logits = logits.double() if dtype == "fp64" else logits.float()
        losses.append(torch.nn.functional.cross_entropy(
            logits[0, :-1], y[0, 1:], ignore_index=-100, reduction="sum"))
        cnt += int((y[0, 1:] != -100).sum())
    total = torch.stack(losses).sum() / cnt
    total.backward()
    return float(total), {k: p.grad.detach().double().cpu()
                          for k, p in m.named_parameters()}


def save_tiny(work):
    """TINY saved into WORK/base (save_random); returns the path."""
    d = os.path.join(work, "base")
    save_random(d, TINY)
    return d
