"""hf_common.py - what the GPU machine's transformers checks share
(hf_check.py, export_check.py, peft_check.py, dpo_check.py): one verdict
list with check() and finish(), and the small random-weight
LlamaForCausalLM (untied head, GQA 6:2) the LoRA and DPO checks save."""
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


def save_tiny(work):
    """TINY with clearly nonzero weights (matrices N(0, 0.08), norms in
    [0.5, 1.5]) saved by transformers into WORK/base; returns the path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**TINY)).float()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
            else:
                p.uniform_(0.5, 1.5)
    d = os.path.join(work, "base")
    m.save_pretrained(d, safe_serialization=True)
    return d
