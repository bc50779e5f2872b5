#!/usr/bin/env python3
"""bnb_format_check.py MGRUN REPO WORK - mgrun's bitsandbytes 4-bit folders
against an independent NumPy reading of the format, written from
bitsandbytes' published description (QLoRA paper's NF4 table;
functional.py quantize_4bit / dequantize_4bit / create_dynamic_map /
QuantState.as_dict; the default backend's blockwise kernels), not from
mgrun's C.

1. A QLoRA run of the tiny llama (quant = nf4, adapters on q and v) is
   exported with --dtype nf4 and --dtype fp32. Here, from the nf4 folder
   alone (safetensors parsed by hand: 8-byte little-endian header length,
   JSON, data): every projection's tensors have bitsandbytes' names,
   dtypes, shapes, tables and quant_state JSON; each is dequantized and
   equals the fp32 export's values within 1e-6 relative where no adapter
   was merged (the NF4 base as it is), and where one was (q, v: merged,
   then quantized) NumPy's own quantization of the fp32 export's merged
   values dequantizes to the same weights; the other tensors are the
   fp32 export's in bf16; config.json's quantization_config is
   transformers' BitsAndBytesConfig for nf4 with double quantization.
2. A random float llama (several nested blocks per weight, a partial
   last one) is written twice: as floats, and as a bitsandbytes folder
   quantized here. mgrun evaluates the bitsandbytes folder with
   quant = nf4 (its bytes taken as they are) and the float folder with
   quant = nf4 (quantized at load): the losses agree within rounding;
   the folder split in two shards with an index (each weight's
   bitsandbytes companions in the other shard than its codes) gives the
   same loss, and loaded without quant (dequantized) too. A folder
   quantized without double quantization loads as floats to the loss of
   NumPy's dequantization of it, and is refused under quant = nf4
   (mgrun's blob holds double-quantized scales only), naming the file
   and the tensor.

Exit 77 without NumPy (scripts/setup.sh installs python3-numpy).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("bnb_format_check: NumPy is missing (python3-numpy): skipped")
    sys.exit(77)

# The 16 NF4 values of the QLoRA paper (bitsandbytes get_4bit_type("nf4")).
NF4 = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
    0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0], dtype=np.float32)
BLOCK, NESTED = 64, 256
PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    for exponent i, the means of adjacent points of an f32 linspace(0.1, 1,
    2^i + 1), scaled by 10^(i - 6), both signs; then 0 and 1; sorted."""
    data = []
    for i in range(7):
        b = np.linspace(0.1, 1, 2 ** i + 1, dtype=np.float32)
        means = (b[:-1] + b[1:]) / np.float32(2)
        data += [10.0 ** (i - 6) * float(m) for m in means]
        data += [-(10.0 ** (i - 6)) * float(m) for m in means]
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), dtype=np.float32)


DYN = dynamic_map()

# ---- safetensors, by hand ----
DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16,
      "U8": np.uint8, "I32": np.int32, "I64": np.int64}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        buf = body[a:b]
        if e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=DT[e["dtype"]])
        out[name] = (e["dtype"], tuple(e["shape"]),
                     arr.reshape(e["shape"]) if e["shape"] else arr)
    return out


def write_st(path, tensors):
    """tensors: name -> (dtype name, numpy array)."""
    head, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dt, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        head[name] = {"dtype": dt, "shape": list(arr.shape),
                      "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- bitsandbytes NF4 with double quantization, from its description ----
def blockwise(x, code, block):
    """quantize_blockwise: per block absmax, x / absmax (full blocks
    multiply by the reciprocal, the tail divides, as the default backend
    does), clamped to [-1, 1], the index of the nearest code value with
    ties to the lower one (bucketize over the midpoints)."""
    x = x.astype(np.float32).reshape(-1)
    n = x.size
    nb = -(-n // block)
    absmax = np.zeros(nb, np.float32)
    scaled = np.zeros(n, np.float32)
    full = n - n % block
    if full:
        xs = x[:full].reshape(-1, block)
        am = np.abs(xs).max(axis=1)
        absmax[:full // block] = am
        inv = np.float32(1) / np.maximum(am, np.float32(1e-38))
        scaled[:full] = (xs * inv[:, None]).reshape(-1)
    if n % block:
        am = np.abs(x[full:]).max()
        absmax[-1] = am
        scaled[full:] = x[full:] / max(am, np.float32(1e-38))
    scaled = np.clip(scaled, -1, 1)
    bounds = (code[:-1] + code[1:]) / np.float32(2)
    q = np.searchsorted(bounds, scaled, side="left").astype(np.uint8)
    return q, absmax


def quantize_nf4(w):
    """quantize_4bit(nf4, blocksize 64, compress_statistics=True)."""
    q, absmax = blockwise(w, NF4, BLOCK)
    if q.size % 2:
        q = np.append(q, np.uint8(7))  # the pad element 0.0 is code 7
    packed = ((q[0::2] << 4) | q[1::2]).astype(np.uint8)
    offset = np.float32(absmax.mean(dtype=np.float32))
    q2, absmax2 = blockwise(absmax - offset, DYN, NESTED)
    return packed, q2, absmax2, offset


def dequantize_nf4(packed, qabs, nested_absmax, offset, n, qmap, nmap):
    """dequantize_4bit: absmax = nmap[qabs] * nested_absmax[b / 256] +
    offset, then qmap[code] * absmax[i / 64], in f32."""
    absmax = (nmap[qabs] * np.repeat(nested_absmax, NESTED)[:qabs.size]
              + np.float32(offset)).astype(np.float32)
    codes = np.empty(packed.size * 2, np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 15
    codes = codes[:n]
    return (qmap[codes] * np.repeat(absmax, BLOCK)[:n]).astype(np.float32)


def bnb_unnested(name, w):
    """quantize_4bit(nf4, compress_statistics=False): absmax in f32, no
    nested_*; and the weight as bitsandbytes dequantizes it."""
    q, absmax = blockwise(w, NF4, BLOCK)
    deq = (NF4[q] * np.repeat(absmax, BLOCK)[:q.size]).reshape(w.shape)
    if q.size % 2:
        q = np.append(q, np.uint8(7))
    packed = ((q[0::2] << 4) | q[1::2]).astype(np.uint8)
    state = {"quant_type": "nf4", "blocksize": BLOCK, "dtype": "float32",
             "shape": list(w.shape)}
    js = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8)
    return {name: ("U8", packed.reshape(-1, 1)),
            name + ".absmax": ("F32", absmax),
            name + ".quant_map": ("F32", NF4),
            name + ".quant_state.bitsandbytes__nf4": ("U8", js)}, deq


def bnb_tensors(name, w, dtype="float32"):
    packed, q2, absmax2, offset = quantize_nf4(w)
    state = {"quant_type": "nf4", "blocksize": BLOCK, "dtype": dtype,
             "shape": list(w.shape), "nested_blocksize": NESTED,
             "nested_dtype": "float32", "nested_offset": float(offset)}
    js = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8)
    return {name: ("U8", packed.reshape(-1, 1)),
            name + ".absmax": ("U8", q2),
            name + ".quant_map": ("F32", NF4),
            name + ".nested_absmax": ("F32", absmax2),
            name + ".nested_quant_map": ("F32", DYN),
            name + ".quant_state.bitsandbytes__nf4": ("U8", js)}


# ---- checks ----
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL:", msg)


def read_weight(t, name):
    """A bitsandbytes NF4 weight of folder tensors t, checked, as f32."""
    qs = t.get(name + ".quant_state.bitsandbytes__nf4")
    if qs is None:
        fail(f"{name}: no quant_state.bitsandbytes__nf4")
        return None
    st = json.loads(bytes(qs[2]).decode())
    # QuantState.from_dict asserts every key, the JSON's and the tensors'
    # after "W.", is one of its valid_qs_keys
    valid = {"absmax", "quant_map", "nested_absmax", "nested_quant_map",
             "quant_state", "quant_type", "blocksize", "dtype", "shape",
             "nested_blocksize", "nested_dtype", "nested_offset"}
    subs = {k[len(name) + 1:].split(".")[0] for k in t
            if k.startswith(name + ".")}
    if not set(st) <= valid or not subs <= valid:
        fail(f"{name}: keys outside bitsandbytes' valid_qs_keys: "
             f"{(set(st) | subs) - valid}")
    shape = tuple(st["shape"])
    n = shape[0] * shape[1]
    nb = -(-n // BLOCK)
    nn = -(-nb // NESTED)
    for k, v in (("quant_type", "nf4"), ("blocksize", 64),
                 ("nested_blocksize", 256), ("nested_dtype", "float32")):
        if st.get(k) != v:
            fail(f"{name}: quant_state {k} = {st.get(k)!r}, not {v!r}")
    if st.get("dtype") not in ("bfloat16", "float16", "float32"):
        fail(f"{name}: quant_state dtype {st.get('dtype')!r}")
    want = {"": ("U8", ((n + 1) // 2, 1)), ".absmax": ("U8", (nb,)),
            ".quant_map": ("F32", (16,)), ".nested_absmax": ("F32", (nn,)),
            ".nested_quant_map": ("F32", (256,))}
    for suf, (dt, sh) in want.items():
        got = t.get(name + suf)
        if got is None or got[0] != dt or got[1] != sh:
            fail(f"{name}{suf}: {got and got[:2]}, expected {dt} {sh}")
            return None
    if not np.array_equal(t[name + ".quant_map"][2], NF4):
        fail(f"{name}.quant_map is not the NF4 table")
    nmap = t[name + ".nested_quant_map"][2]
    if np.abs(nmap - DYN).max() > 1e-7:
        fail(f"{name}.nested_quant_map differs from the dynamic map by "
             f"{np.abs(nmap - DYN).max():.3g}")
    w = dequantize_nf4(t[name][2].reshape(-1), t[name + ".absmax"][2],
                       t[name + ".nested_absmax"][2],
                       st["nested_offset"], n, NF4, DYN)
    return w.reshape(shape)


def mgrun(args, log):
    with open(log, "w") as f:
        rc = subprocess.call(args, stdout=f, stderr=subprocess.STDOUT)
    if rc:
        print(open(log).read()[-2000:])
        fail(f"{' '.join(args[:3])}... exit {rc} (log {log})")
    return rc


def eval_loss(run_dir):
    try:
        with open(os.path.join(run_dir, "eval.json")) as f:
            return json.load(f)["metrics"]["loss"]
    except (OSError, ValueError, KeyError):
        return None


def part1(exe, ini, work, S):
    Q = S + ["--set", "model.quant=nf4", "--set", "model.lora_targets=q,v",
             "--set", "run.name=q"]
    if mgrun([exe, "-c", ini] + Q, f"{work}/q.log"):
        return
    for d in ("nf4", "fp32"):
        if mgrun([exe, "export", "-c", ini] + Q +
                 ["--dtype", d, "--out", f"{work}/F_{d}"],
                 f"{work}/x_{d}.log"):
            return
    cfg = json.load(open(f"{work}/F_nf4/config.json"))
    qc = cfg.get("quantization_config", {})
    for k, v in (("quant_method", "bitsandbytes"), ("load_in_4bit", True),
                 ("load_in_8bit", False), ("bnb_4bit_quant_type", "nf4"),
                 ("bnb_4bit_use_double_quant", True),
                 ("bnb_4bit_compute_dtype", "bfloat16"),
                 ("bnb_4bit_quant_storage", "uint8")):
        if qc.get(k) != v:
            fail(f"quantization_config {k} = {qc.get(k)!r}, not {v!r}")
    if not isinstance(qc.get("llm_int8_threshold"), float):
        fail("llm_int8_threshold is not a float (BitsAndBytesConfig "
             "refuses an int)")
    t4 = read_st(f"{work}/F_nf4/model.safetensors")
    t32 = read_st(f"{work}/F_fp32/model.safetensors")
    checked = 0
    for name, (dt, shape, f32) in t32.items():
        proj = any(f".{p}.weight" in name for p in PROJ)
        if not proj:
            got = t4.get(name)
            if got is None or got[0] != "BF16":
                fail(f"{name}: not BF16 in the nf4 export")
                continue
            want = read_st_bf16(f32)
            if not np.array_equal(got[2], want):
                fail(f"{name}: the nf4 export's bf16 is not the fp32 "
                     f"export's values rounded")
            continue
        w = read_weight(t4, name)
        if w is None:
            continue
        if w.shape != shape:
            fail(f"{name}: shape {w.shape}, fp32 export {shape}")
            continue
        merged = ".q_proj." in name or ".v_proj." in name
        if merged:
            # quantized after the merge: NumPy's quantization of the
            # merged fp32 values dequantizes to the same weights (the
            # rounding of the offset's mean may move a rare code)
            p, q2, a2, off = quantize_nf4(f32)
            ref = dequantize_nf4(p, q2, a2, off, f32.size, NF4,
                                 DYN).reshape(shape)
            same = (p == t4[name][2].reshape(-1)).mean()
            if same < 0.999:
                fail(f"{name}: only {same:.4%} of the packed code bytes "
                     f"are NumPy's quantization's")
            scale = np.abs(f32).max()
            bad = np.abs(ref - w) > 1e-6 * scale
            if bad.mean() > 1e-3:
                fail(f"{name}: {bad.sum()} of {w.size} values differ "
                     f"from NumPy's quantization of the merged weight")
            if np.abs(w - f32).max() > 0.2 * scale:
                fail(f"{name}: the NF4 weight is far from the merged one")
        else:
            err = np.abs(w - f32) / np.maximum(np.abs(f32), 1e-30)
            if not (err <= 1e-6).all():
                fail(f"{name}: dequantized differs from the fp32 export "
                     f"by {err.max():.3g} relative")
        checked += 1
    print(f"part 1: {checked} NF4 projections read and dequantized, "
          f"{len(t32) - checked} bf16 tensors")
    if checked != 14:
        fail(f"{checked} projections, expected 14 (2 layers x 7)")


def read_st_bf16(f32):
    """f32 values rounded to bf16 (nearest even), as f32."""
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).reshape(f32.shape)


def part2(exe, ini, work, S):
    rng = np.random.default_rng(5)
    V, D, F, L, H, KV = 256, 128, 344, 2, 4, 2
    hd = D // H
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "vocab_size": V, "hidden_size": D, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "head_dim": hd,
           "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "rope_scaling": None,
           "tie_word_embeddings": False, "initializer_range": 0.02,
           "hidden_act": "silu", "torch_dtype": "float32"}
    shapes = {"self_attn.q_proj": (H * hd, D), "self_attn.k_proj": (KV * hd, D),
              "self_attn.v_proj": (KV * hd, D), "self_attn.o_proj": (D, H * hd),
              "mlp.gate_proj": (F, D), "mlp.up_proj": (F, D),
              "mlp.down_proj": (D, F)}

    def rnd(*s):
        w = rng.standard_normal(s).astype(np.float32) * np.float32(0.05)
        w.reshape(-1)[::331] *= 30  # outliers: uneven block scales
        return w

    flt = {"model.embed_tokens.weight": ("F32", rnd(V, D))}
    bnb = dict(flt)
    # HU: without double quantization; GU: its dequantized floats
    unn, unn_f = dict(flt), dict(flt)
    for layer in range(L):
        pre = f"model.layers.{layer}."
        for nm in ("input_layernorm", "post_attention_layernorm"):
            v = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
            flt[pre + nm + ".weight"] = bnb[pre + nm + ".weight"] = ("F32", v)
            unn[pre + nm + ".weight"] = unn_f[pre + nm + ".weight"] = \
                ("F32", v)
        for p, sh in shapes.items():
            w = rnd(*sh)
            flt[pre + p + ".weight"] = ("F32", w)
            bnb.update(bnb_tensors(pre + p + ".weight", w))
            t, deq = bnb_unnested(pre + p + ".weight", w)
            unn.update(t)
            unn_f[pre + p + ".weight"] = ("F32", deq)
    for nm, v in (("model.norm.weight", np.ones(D, np.float32)),
                  ("lm_head.weight", rnd(V, D))):
        flt[nm] = bnb[nm] = unn[nm] = unn_f[nm] = ("F32", v)
    for d, tensors, extra in (("GU", unn_f, {}), ("HU", unn, {}),
                              ("G", flt, {}), ("H", bnb, {
            "quantization_config": {
                "quant_method": "bitsandbytes", "load_in_4bit": True,
                "load_in_8bit": False, "bnb_4bit_quant_type": "nf4",
                "bnb_4bit_use_double_quant": True,
                "bnb_4bit_compute_dtype": "float32",
                "bnb_4bit_quant_storage": "uint8",
                "llm_int8_threshold": 6.0}})):
        os.makedirs(f"{work}/{d}", exist_ok=True)
        with open(f"{work}/{d}/config.json", "w") as f:
            json.dump(dict(cfg, **extra), f, indent=2)
        write_st(f"{work}/{d}/model.safetensors", tensors)
    # HS: H as two shards and an index, each weight's bitsandbytes
    # companions in the other shard than its codes
    os.makedirs(f"{work}/HS", exist_ok=True)
    shutil.copy(f"{work}/H/config.json", f"{work}/HS/config.json")
    parts = ({}, {})
    for name, t in bnb.items():
        parts[1 if name.endswith(".weight") and "." not in
              name[name.rindex(".weight") + 7:] and ".absmax" not in name
              else 0][name] = t
    wmap = {}
    for i, part in enumerate(parts):
        fn = f"model-0000{i + 1}-of-00002.safetensors"
        write_st(f"{work}/HS/{fn}", part)
        wmap.update({name: fn for name in part})
    with open(f"{work}/HS/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)
    E = S + ["--set", "model.quant=nf4", "--set", "model.lora_targets=head",
             "--eval-only"]
    losses = {}
    for d in ("G", "H", "HS"):
        if mgrun([exe, "-c", ini] + E + ["--set", f"model.hf_dir={work}/{d}",
                                         "--set", f"run.name=e{d}"],
                 f"{work}/e{d}.log"):
            return
        losses[d] = eval_loss(f"{work}/e{d}")
    g, h = losses["G"], losses["H"]
    print(f"part 2: eval loss, quantized at load {g}, NumPy's bitsandbytes "
          f"folder {h}, the same sharded {losses['HS']}")
    if losses["HS"] != h:
        fail(f"sharded: loss {losses['HS']}, one file {h}")
    if g is None or h is None or abs(g - h) > 1e-5 * abs(g):
        fail(f"the bitsandbytes folder's loss {h} is not the quantize-at-"
             f"load loss {g}")
    # and the same folder without quant: its dequantized values as floats
    if mgrun([exe, "-c", ini] + S + ["--set", "model.lora_rank=0",
                                     "--set", f"model.hf_dir={work}/H",
                                     "--set", "run.name=eHf", "--eval-only"],
             f"{work}/eHf.log"):
        return
    hf = eval_loss(f"{work}/eHf")
    print(f"part 2: the bitsandbytes folder loaded as floats {hf}")
    if hf is None or abs(hf - h) > 1e-6 * abs(h):
        fail(f"loaded as floats {hf}, with quant = nf4 {h}")
    # without double quantization: dequantized as floats, refused as NF4
    for d in ("GU", "HU"):
        if mgrun([exe, "-c", ini] + S + ["--set", "model.lora_rank=0",
                                         "--set", f"model.hf_dir={work}/{d}",
                                         "--set", f"run.name=e{d}",
                                         "--eval-only"], f"{work}/e{d}.log"):
            return
    gu, hu = eval_loss(f"{work}/eGU"), eval_loss(f"{work}/eHU")
    print(f"part 2: unnested statistics: loaded as floats {hu}, NumPy's "
          f"dequantized floats {gu}")
    if hu is None or gu is None or abs(hu - gu) > 1e-6 * abs(gu):
        fail(f"unnested: {hu}, NumPy's dequantization {gu}")
    log = f"{work}/eHUq.log"
    with open(log, "w") as f:
        rc = subprocess.call([exe, "-c", ini] + E + [
            "--set", f"model.hf_dir={work}/HU", "--set", "run.name=eHUq"],
            stdout=f, stderr=subprocess.STDOUT)
    text = open(log).read()
    want = (f"{work}/HU/model.safetensors", "no double quantization",
            "model.layers.0.self_attn.q_proj.weight")
    if rc == 0 or not all(w in text for w in want):
        fail(f"unnested under quant = nf4: exit {rc}, {text[-400:]}")
    else:
        print("part 2: unnested under quant = nf4 refused: " +
              text.strip().splitlines()[-1][:200])


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    exe, repo, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ini = os.path.join(repo, "conf", "llama_tiny_lora.ini")
    S = ["--set", f"run.out_dir={work}", "--set", "run.threads=2",
         "--set", "run.max_steps=3", "--set", "dataset.train_samples=64",
         "--set", "dataset.test_samples=32"]
    part1(exe, ini, work, S)
    part2(exe, ini, work, S)
    if fails:
        print(f"{fails} failures")
        return 1
    print("bnb_format_check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
