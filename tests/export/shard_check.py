#!/usr/bin/env python3
"""shard_check.py ONE SHARDED MAX MIN_FILES - a sharded export against
the one-file export of the same model (Python's standard library only).

ONE holds model.safetensors, SHARDED model.safetensors.index.json and
model-0000k-of-0000N.safetensors (N >= MIN_FILES), written with
--max-shard-size MAX (bytes). Checks: the index maps every tensor of ONE
and nothing else, each to the one file that holds it (no tensor split or
written twice), total_size is the sum of the tensors' bytes, every tensor
is bit-identical (dtype, shape, bytes) and in the same order; a
bitsandbytes weight's companions (W.absmax, W.quant_state...) sit in W's
file; each file holds at most MAX bytes of tensors unless it holds one
group alone, and is filled as save_pretrained fills it (the next file's
first group would not have fitted); no model.safetensors or stale shard
is left beside them; every file carries {"format": "pt"}. Exit 1 naming
the first failure.
"""
import json
import os
import re
import struct
import sys


def fail(msg):
    sys.exit("FAIL: " + msg)


def read(path):
    """[(name, dtype, shape, bytes)] in data order, and the metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    base = 8 + n
    out = []
    for name, e in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = e["data_offsets"]
        out.append((name, e["dtype"], e["shape"], raw[base + a:base + b]))
    end = max((e["data_offsets"][1] for e in head.values()), default=0)
    if base + end != len(raw):
        fail(f"{path}: {len(raw)} bytes, the header says {base + end}")
    return out, meta


one, sharded, mx, min_files = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ref, _ = read(os.path.join(one, "model.safetensors"))
idx_path = os.path.join(sharded, "model.safetensors.index.json")
if not os.path.isfile(idx_path):
    fail(f"{sharded}: no model.safetensors.index.json")
if os.path.exists(os.path.join(sharded, "model.safetensors")):
    fail(f"{sharded}: model.safetensors beside the shards")
with open(idx_path) as f:
    idx = json.load(f)
wmap = idx["weight_map"]
files = sorted(set(wmap.values()))
n = len(files)
want = [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
if files != want:
    fail(f"index names {files}, expected {want}")
if n < min_files:
    fail(f"{n} files, expected at least {min_files}")
on_disk = sorted(x for x in os.listdir(sharded) if x.startswith("model"))
if on_disk != sorted(want + ["model.safetensors.index.json"]):
    fail(f"{sharded} holds {on_disk}")
if set(wmap) != {t[0] for t in ref}:
    fail(f"index maps {sorted(set(wmap) ^ {t[0] for t in ref})} wrongly")


def group_of(name, names):
    """The bitsandbytes weight a companion belongs to, else itself."""
    for i in range(len(name)):
        if name[i] == "." and name[:i] in names and \
                name[:i] + ".quant_state.bitsandbytes__nf4" in names:
            return name[:i]
    return name


names = {t[0] for t in ref}
seen, order, per_file = {}, [], []
for fname in want:
    ts, meta = read(os.path.join(sharded, fname))
    if meta.get("format") != "pt":
        fail(f"{fname}: __metadata__ {meta}")
    for t in ts:
        if t[0] in seen:
            fail(f"{t[0]} in {seen[t[0]]} and {fname}")
        seen[t[0]] = fname
        if wmap[t[0]] != fname:
            fail(f"{t[0]} is in {fname}, the index says {wmap[t[0]]}")
    order += ts
    groups = []
    for t in ts:
        g = group_of(t[0], names)
        if groups and groups[-1][0] == g:
            groups[-1][1] += len(t[3])
        else:
            groups.append([g, len(t[3])])
    per_file.append(groups)
if len(order) != len(ref):
    fail(f"{len(order)} tensors in the shards, {len(ref)} in the one file")
for a, b in zip(ref, order):
    if a[0] != b[0]:
        fail(f"order: {b[0]} where the one file has {a[0]}")
    if a[1:] != b[1:]:
        fail(f"{a[0]}: not bit-identical ({b[1]} {b[2]} vs {a[1]} {a[2]})")
total = sum(len(t[3]) for t in ref)
if idx["metadata"]["total_size"] != total:
    fail(f"total_size {idx['metadata']['total_size']}, tensors {total}")
homes = {}
for k, groups in enumerate(per_file):
    for g, _ in groups:
        if g in homes and homes[g] != k:
            fail(f"group {g} split across files {homes[g] + 1} and {k + 1}")
        homes[g] = k
    size = sum(b for _, b in groups)
    if size > mx and len(groups) > 1:
        fail(f"{want[k]}: {size} bytes in {len(groups)} groups, max {mx}")
    if k + 1 < n and size + per_file[k + 1][0][1] <= mx:
        fail(f"{want[k]}: {size} bytes, and the next group "
             f"({per_file[k + 1][0][0]}, {per_file[k + 1][0][1]}) fitted")
lone = sum(1 for g in per_file if len(g) == 1 and g[0][1] > mx)
print(f"{sharded}: {n} files, {len(ref)} tensors, {total} bytes, "
      f"{lone} alone past the size: ok")
