"""torch_llm_best.py - what the transformers / peft baselines share to run
"at their best": the SDPA backend chosen by timing the ones that run at
the model's attention shape, and torch.compile of the model. One place,
so the full fine-tuning and LoRA rows are set up alike.

Importing this module does not import torch (the CPU tests use it).
"""
import os

# SDPA backends tried by ATTN=auto, in this order; each must run forward
# and backward at the model's shape to be timed.
AUTO_BACKENDS = ("cudnn", "flash")


def sdpa_backends(torch):
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def time_sdpa(torch, backend, batch, heads, kv_heads, seq, head_dim, reps=30):
    """Median ms of causal SDPA forward + backward in bf16 with one
    backend on random inputs (grouped heads expanded as HF's sdpa path
    does); raises where the backend cannot run the shape."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    q = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    rep = heads // kv_heads
    times = []
    with sdpa_kernel([sdpa_backends(torch)[backend]]):
        for i in range(reps + 5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                               v.repeat_interleave(rep, 1), is_causal=True)
            o.backward(torch.ones_like(o))
            b.record()
            b.synchronize()
            if i >= 5:
                times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def choose_attention(torch, cfg, batch, seq):
    """The SDPA backend for the run: ATTN=cudnn|flash|efficient|math forces
    one; ATTN=auto (default) times each of AUTO_BACKENDS that runs at the
    model's shape and takes the fastest. Returns (backend name, a dict
    for the JSON row: each candidate's ms or why it could not run)."""
    want = os.environ.get("ATTN", "auto")
    hd = cfg.hidden_size // cfg.num_attention_heads
    shape = (batch, cfg.num_attention_heads, cfg.num_key_value_heads, seq, hd)
    cands = AUTO_BACKENDS if want == "auto" else (want,)
    tried = {}
    for name in cands:
        try:
            tried[name] = round(time_sdpa(torch, name, *shape), 4)
        except Exception as e:  # noqa: BLE001 - recorded in the row
            tried[name] = f"cannot run: {type(e).__name__}: {str(e)[:160]}"
    ok = {n: t for n, t in tried.items() if isinstance(t, float)}
    if not ok:
        raise RuntimeError(f"no SDPA backend runs at {shape}: {tried}")
    return min(ok, key=ok.get), {"asked": want, "fwd_bwd_ms": tried}


CAUSAL_SDPA = "sdpa_causal"


def register_causal_sdpa():
    """transformers' SDPA attention told the rows are causal and unpadded,
    registered as CAUSAL_SDPA (set config._attn_implementation to it).
    Eager transformers already calls SDPA with is_causal=True and no mask
    for such rows; under torch.compile it builds a [batch, 1, T, T]
    boolean mask instead, which the flash backend cannot take (and the
    others run slower with). The benchmark rows have no padding, so
    dropping the mask is exact - what a user who packs rows does."""
    import transformers
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def causal(module, query, key, value, attention_mask, **kwargs):
        return sdpa_attention_forward(module, query, key, value, None, **kwargs)
    transformers.AttentionInterface.register(CAUSAL_SDPA, causal)
    masks = getattr(transformers, "AttentionMaskInterface", None)
    if masks is not None:  # no mask built at all (transformers 4.53+)
        masks.register(CAUSAL_SDPA, lambda *a, **k: None)
    return CAUSAL_SDPA


def set_up(torch, model, mode, backend):
    """The model as the step calls it, and a context manager factory that
    pins SDPA to `backend` (entered around tracing and every step, so the
    compiled graph keeps the backend). mode eager | compile (torch.compile
    default mode of the whole model: its loss is inside forward when
    labels are passed, so it compiles with it)."""
    from torch.nn.attention import sdpa_kernel
    be = sdpa_backends(torch)[backend]

    def attn():
        return sdpa_kernel([be])
    if mode == "compile":
        model = torch.compile(model)
    elif mode != "eager":
        raise ValueError(f"mode {mode}: eager or compile")
    return model, attn
