#!/usr/bin/env python3
"""phi3_fuse.py SRC DST - a Phi-3 folder made from a Llama one (Python's
standard library only), as transformers' Phi3 lays its weights out, so
that mgrun's reading of Phi-3 folders is checked against that layout
and not against its own export: per layer, qkv_proj.weight is q_proj,
k_proj and v_proj's rows in that order (Phi3Attention slices q, k, v
out of qkv_proj's output so) and gate_up_proj.weight is gate_proj's rows
then up_proj's (Phi3MLP's chunk(2): gate first); every other tensor as
it is; config.json's model_type phi3, Phi3ForCausalLM, no window, full
rotary. The same weights, so the folder must evaluate as SRC does.
"""
import json
import os
import struct
import sys

src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    raw = f.read()
(n,) = struct.unpack("<Q", raw[:8])
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
base = 8 + n


def data(name):
    a, b = head[name]["data_offsets"]
    return raw[base + a:base + b]


FUSE = {"self_attn.qkv_proj.weight": ["self_attn.q_proj.weight",
                                      "self_attn.k_proj.weight",
                                      "self_attn.v_proj.weight"],
        "mlp.gate_up_proj.weight": ["mlp.gate_proj.weight",
                                    "mlp.up_proj.weight"]}
parts = {p for ps in FUSE.values() for p in ps}
out = []  # (name, dtype, shape, bytes)
for name in sorted(head, key=lambda k: head[k]["data_offsets"][0]):
    e = head[name]
    pre, _, leaf = name.partition(".layers.")
    layer, _, tail = leaf.partition(".")
    if tail in parts:
        if tail not in (ps[0] for ps in FUSE.values()):
            continue
        fused = next(k for k, ps in FUSE.items() if ps[0] == tail)
        names = [f"{pre}.layers.{layer}.{p}" for p in FUSE[fused]]
        rows = sum(head[m]["shape"][0] for m in names)
        out.append((f"{pre}.layers.{layer}.{fused}", e["dtype"],
                    [rows, e["shape"][1]], b"".join(data(m) for m in names)))
    else:
        out.append((name, e["dtype"], e["shape"], data(name)))
hdr, off = {"__metadata__": {"format": "pt"}}, 0
for name, dt, shape, b in out:
    hdr[name] = {"dtype": dt, "shape": shape,
                 "data_offsets": [off, off + len(b)]}
    off += len(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _, _, _, b in out:
        f.write(b)
cfg = json.load(open(os.path.join(src, "config.json")))
cfg["model_type"] = "phi3"
cfg["architectures"] = ["Phi3ForCausalLM"]
for k in ("attention_bias", "mlp_bias", "pretraining_tp", "sliding_window"):
    cfg.pop(k, None)
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
print(f"phi3_fuse: {len(out)} tensors into {dst}")
