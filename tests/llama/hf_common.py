"""hf_common.py - what the GPU machine's transformers checks share
(hf_check.py, export_check.py, peft_check.py, dpo_check.py): one verdict
list with check() and finish(), and the small random-weight
LlamaForCausalLM (untied head, GQA 6:2) the LoRA and DPO checks save,
made by save_random as hf_check.py's models are."""
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


def save_random(path, kw, **save_kw):
    """A LlamaForCausalLM of config kw with clearly nonzero weights
    (matrices N(0, 0.08), larger than the default 0.02 so logits are far
    from uniform and differences show; norms in [0.5, 1.5]) saved by
    transformers into path (save_kw: save_pretrained's options);
    returns the model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**kw)).float()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
            else:
                p.uniform_(0.5, 1.5)
    m.save_pretrained(path, safe_serialization=True, **save_kw)
    return m


def save_tiny(work):
    """TINY saved into WORK/base (save_random); returns the path."""
    d = os.path.join(work, "base")
    save_random(d, TINY)
    return d
