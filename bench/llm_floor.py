#!/usr/bin/env python3
"""llm_floor.py - the floor of each kernel group of one mgrun Llama
training step (bf16 compute, fp32 master weights and AdamW, the default
kernels = rmsnorm path of plugins/models/llama/llama_model.c): the bytes
each group must move through device memory (every input read once, every
output written once, as the kernels mgrun runs do it) over the memory
bandwidth, and the FLOPs of the products over the bf16 GEMM ceiling; the
larger of the two is the group's floor. METHOD's "two numbers first",
written down per group so that bench/llm_kernels.py's measured profile
can be set beside it (a group far above its floor is the lever; one at
its floor can only be removed, overlapped or fused away).

usage: llm_floor.py CELL [BW_TBs] [CEILING_TFLOPs]
  CELL as bench/llm_kernels.py takes it: full:SHAPE,B,SEQ or
  lora:SHAPE,B,SEQ,TARGETS (qv, tt, all); BW: device memory bandwidth
  counting bytes read plus written [4.0: a large device-to-device copy
  moved 4.3 TB/s on an H200 here, KINDS.md 2026-10-28]; CEILING: the bf16
  GEMM ceiling on random data [820: bench_gpu_ops gemm, 818-830 in the
  2026-11-28 calls]
Pure Python, no torch; tests/bench/test_llm_floor.py checks the
arithmetic on a shape small enough to count by hand.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_shapes  # noqa: E402

ES = 2  # bf16 activations, lent weights and gradients
TARGETS = {"qv": ("q", "v"), "tt": ("q", "v", "o", "gate", "up", "down"),
           "all": ("q", "k", "v", "o", "gate", "up", "down")}


def dims(shape):
    s = llama_shapes.LLAMA_SHAPES[shape]
    D, H = s["hidden_size"], s["num_attention_heads"]
    hd = D // H
    return dict(D=D, H=H, KV=s["num_key_value_heads"], hd=hd, qd=H * hd,
                kvd=s["num_key_value_heads"] * hd, I=s["intermediate_size"],
                L=s["num_hidden_layers"], V=s["vocab_size"],
                tied=s.get("tie_word_embeddings", False))


def lora_io(d, t):
    """(in, out) of a LoRA target (llama_lora.c's llama_lora_dims)."""
    D, qd, kvd, I = d["D"], d["qd"], d["kvd"], d["I"]
    return {"q": (D, qd), "k": (D, kvd), "v": (D, kvd), "o": (qd, D),
            "gate": (D, I), "up": (D, I), "down": (I, D)}[t]


def items(cell, lora_path="epilogue"):
    """[(group, bytes, flops)] of one step of cell, one item a kind of
    kernel: an item's floor is the larger of its two times, a group's the
    sum of its items' (the adapters' memory-bound products and the frozen
    projections' compute-bound ones are both GEMMs, and add).
    lora_path: "epilogue" (the adapter's term written first and the base
    GEMM adding onto it, the input gradient added by its GEMM: this
    branch) or "add" (a product in scratch, then an add, as before)."""
    kind, spec = cell.split(":", 1)
    f = spec.split(",")
    d = dims(f[0])
    b, s = int(f[1]), int(f[2])
    R = b * s
    D, L, I, V, qd, kvd = d["D"], d["L"], d["I"], d["V"], d["qd"], d["kvd"]
    full = kind == "full"
    g = []

    def add(name, nbytes=0.0, flops=0.0):
        g.append((name, float(nbytes), float(flops)))

    # norms: forward rmsnorm (layer 0: x -> y), add + rmsnorm elsewhere
    # (x, r -> s, y); backward with the residual's gradient added (x, dy,
    # dres -> dx), the final norm's backward unfused (x, dy -> dx)
    add("norms", ES * R * D * (2 + 4 * (L - 1) + 4 * L + 4))
    add("norms", ES * R * D * (8 * L + 3))
    # RoPE in place on q and k, forward and backward
    add("rope", ES * R * (qd + kvd) * 2 * 2 * L)
    # SwiGLU: g, u -> s; g, u, ds -> dg, du
    add("swiglu", ES * R * I * (3 + 5) * L)
    # attention: causal products (QK^T and PV forward; QK^T again, dP,
    # dV, dQ, dK backward) and the tensors read and written
    prod = 1.0 * b * d["H"] * s * s * d["hd"]  # one product, causal half
    add("attention fwd", ES * R * L * (2 * qd + 2 * kvd), 2 * L * prod)
    add("attention bwd", ES * R * L * (5 * qd + 4 * kvd), 5 * L * prod)
    # loss: logits read (forward), read and the gradient written in place
    add("loss / head", ES * R * V * 3)
    # embedding gather forward (and its gradient's scatter when it trains)
    add("embedding", ES * R * D * (4 if full else 2))
    per_layer = D * qd + 2 * D * kvd + qd * D + 3 * D * I
    head = V * D
    if full:
        P = L * (per_layer + 2 * D) + D + head + (0 if d["tied"] else V * D)
        # fp32 master, both moments read and written, the bf16 gradient
        # read and the bf16 copy written: 28 bytes a parameter
        add("optimizer", 28.0 * P)
        add("memset", ES * P)  # the bf16 gradients zeroed each step
        add("GEMM", 0, 6.0 * R * (L * per_layer + head))
        return g
    add("GEMM", 0, 4.0 * R * (L * per_layer + head))
    r = 8
    tg = TARGETS[f[3]]
    P = 0
    # the targets reading one input (llama_model.c's groups): their A's
    # are one GEMM that reads x once, forward and backward, and one input
    # gradient into dx (llama_lora_fusable: no dropout here)
    for grp in (("q", "k", "v"), ("o",), ("gate", "up"), ("down",)):
        ft = [t for t in grp if t in tg]
        if not ft:
            continue
        tin = lora_io(d, ft[0])[0]
        outs = sum(lora_io(d, t)[1] for t in ft)
        P += L * r * (len(ft) * tin + outs)
        # memory-bound products: forward A x (x read) and B (s A x) into
        # y; backward dB and dy B (dy read twice each), dA (x read)
        add("GEMM", ES * R * L * (2 * tin + 2 * outs),
            6.0 * R * L * r * (len(ft) * tin + outs))
        if lora_path == "epilogue":
            # y written (the base GEMM adds onto it), dx read + written
            add("GEMM", ES * R * L * (outs + 2 * tin))
        else:
            add("GEMM", ES * R * L * (outs + tin))  # products in scratch
            add("elementwise", ES * R * L * 3 * (outs + tin))  # the adds
    add("optimizer", 28.0 * P)
    add("memset", ES * P)
    return g


def groups(cell, lora_path="epilogue"):
    """{group: {"bytes": b, "flops": f}}: the items summed by group."""
    out = {}
    for name, nb, fl in items(cell, lora_path):
        e = out.setdefault(name, {"bytes": 0.0, "flops": 0.0})
        e["bytes"] += nb
        e["flops"] += fl
    return out


def floors(cell, bw=4.0e12, ceiling=820e12, lora_path="epilogue"):
    """{group: floor seconds} (each item's larger of bytes / bw and
    flops / ceiling, summed by group) and the step's floor, their sum."""
    out = {}
    for name, nb, fl in items(cell, lora_path):
        out[name] = out.get(name, 0.0) + max(nb / bw, fl / ceiling)
    return out, sum(out.values())


def main(argv):
    if not argv:
        sys.exit(__doc__)
    bw = float(argv[1]) * 1e12 if len(argv) > 1 else 4.0e12
    ceil = float(argv[2]) * 1e12 if len(argv) > 2 else 820e12
    cell = argv[0]
    gr = groups(cell)
    fl, total = floors(cell, bw, ceil)
    print(f"\n{cell}: floor {1e3 * total:.2f} ms a step at {bw / 1e12:.1f} TB/s "
          f"and {ceil / 1e12:.0f} TFLOP/s\n")
    print("| group | GB moved | TFLOP | floor ms | share of the floor |")
    print("| --- | --- | --- | --- | --- |")
    for k, v in sorted(fl.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {gr[k]['bytes'] / 1e9:.2f} | {gr[k]['flops'] / 1e12:.2f} | "
              f"{1e3 * v:.2f} | {100 * v / total:.1f}% |")
    if cell.startswith("lora:"):
        _, old = floors(cell, bw, ceil, "add")
        print(f"\nthe adapters through a product in scratch and an add (before "
              f"this path): floor {1e3 * old:.2f} ms a step")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
