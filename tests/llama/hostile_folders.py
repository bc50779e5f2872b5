#!/usr/bin/env python3
"""hostile_folders.py WORK - writes the tiny Hugging Face folders and PEFT
adapters that hostile_hf.sh hands to mgrun (standard library only): a good
one-file folder, a good sharded one, a good adapter, and one folder per
hostile case, each named after the case. The safetensors writer is a
dozen lines of the format itself (8-byte header length, JSON header,
data), so a case can break any of it."""
import json
import os
import random
import struct
import sys

V, D, F, L, H, KV = 64, 16, 24, 1, 4, 2
HD = D // H
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
          "vocab_size": V, "hidden_size": D, "intermediate_size": F,
          "num_hidden_layers": L, "num_attention_heads": H,
          "num_key_value_heads": KV, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "hidden_act": "silu",
          "max_position_embeddings": 64, "tie_word_embeddings": False}
rng = random.Random(5)


def shapes():
    s = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D],
         "lm_head.weight": [V, D]}
    for i in range(L):
        p = f"model.layers.{i}."
        s[p + "self_attn.q_proj.weight"] = [H * HD, D]
        s[p + "self_attn.k_proj.weight"] = [KV * HD, D]
        s[p + "self_attn.v_proj.weight"] = [KV * HD, D]
        s[p + "self_attn.o_proj.weight"] = [D, H * HD]
        s[p + "mlp.gate_proj.weight"] = [F, D]
        s[p + "mlp.up_proj.weight"] = [F, D]
        s[p + "mlp.down_proj.weight"] = [D, F]
        s[p + "input_layernorm.weight"] = [D]
        s[p + "post_attention_layernorm.weight"] = [D]
    return s


def numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def tensor(shape, dtype="F32"):
    n = numel(shape)
    if dtype == "F32":
        return struct.pack(f"<{n}f", *[rng.gauss(0, 0.1) for _ in range(n)])
    if dtype == "I32":
        return struct.pack(f"<{n}i", *[rng.randrange(9) for _ in range(n)])
    if dtype == "F64":
        return struct.pack(f"<{n}d", *[rng.gauss(0, 0.1) for _ in range(n)])
    raise ValueError(dtype)


def save(path, tensors):
    """tensors: name -> (dtype, shape, bytes)"""
    head, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dt, shape, raw) in tensors.items():
        head[name] = {"dtype": dt, "shape": shape,
                      "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def weights():
    return {n: ("F32", s, tensor(s)) for n, s in shapes().items()}


def folder(name, config=None, raw_config=None, files=None):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(raw_config if raw_config is not None
                else json.dumps(CONFIG if config is None else config))
    for fname, content in (files or {}).items():
        if isinstance(content, dict):
            save(os.path.join(d, fname), content)
        else:
            with open(os.path.join(d, fname), "w") as f:
                f.write(content)
    return d


def cfg(**kw):
    c = dict(CONFIG)
    for k, v in kw.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def sharded(name, move=None, index_edit=None, shard_edit=None, drop=None):
    """Two shards: the layer in the second. move: a tensor written to the
    other shard than the index says; drop: a shard not written;
    index_edit / shard_edit change the index dict / the tensors."""
    w = weights()
    s1 = {n: t for n, t in w.items() if not n.startswith("model.layers.")}
    s2 = {n: t for n, t in w.items() if n.startswith("model.layers.")}
    names = ("model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors")
    wmap = {n: names[0] for n in s1}
    wmap.update({n: names[1] for n in s2})
    if move:
        s1[move] = s2.pop(move)
    if shard_edit:
        shard_edit(s1, s2)
    index = {"metadata": {"total_size": 0}, "weight_map": wmap}
    if index_edit:
        index_edit(index)
    files = {"model.safetensors.index.json": json.dumps(index)}
    for fname, t in zip(names, (s1, s2)):
        if fname != drop:
            files[fname] = t
    return folder(name, files=files)


work = sys.argv[1]
os.makedirs(work, exist_ok=True)
# good folders: one file, two shards
folder("good", files={"model.safetensors": weights()})
sharded("good_sharded")
# config.json: each with a good model.safetensors beside it
bad_configs = {
    "hidden_missing": cfg(hidden_size=None),
    "hidden_string": cfg(hidden_size="16"),
    "hidden_negative": cfg(hidden_size=-16),
    "hidden_zero": cfg(hidden_size=0),
    "hidden_fraction": cfg(hidden_size=16.5),
    "heads_missing": cfg(num_attention_heads=None),
    "heads_zero": cfg(num_attention_heads=0),
    "heads_null": dict(CONFIG, num_attention_heads=None),
    "kv_not_dividing": cfg(num_key_value_heads=3),
    "kv_zero": cfg(num_key_value_heads=0),
    "kv_string": cfg(num_key_value_heads="2"),
    "vocab_zero": cfg(vocab_size=0),
    "vocab_one": cfg(vocab_size=1),
    "vocab_huge": cfg(vocab_size=10**15),
    "hidden_huge": cfg(hidden_size=2**40),
    "layers_huge": cfg(num_hidden_layers=10**9),
    "ffn_huge": cfg(intermediate_size=2**62),
    "heads_huge": cfg(num_attention_heads=2**33, num_key_value_heads=1,
                      head_dim=2),
    "head_dim_huge": cfg(head_dim=2**40),
    "params_overflow": cfg(vocab_size=2**24, hidden_size=2**20, head_dim=64),
    "theta_string": cfg(rope_theta="1e4"),
    "eps_negative": cfg(rms_norm_eps=-1e-5),
    # sizes in range that the weights contradict: refused when the folder
    # is opened, before the model's 2^22 x 16 embedding is allocated
    "vocab_lie": cfg(vocab_size=2**22),
    "layers_lie": cfg(num_hidden_layers=3),
}
for name, c in bad_configs.items():
    folder(name, config=c, files={"model.safetensors": weights()})
# numbers past a double's range, which JSON parsers read as infinity
for name, key in (("theta_inf", "rope_theta"), ("eps_inf", "rms_norm_eps"),
                  ("std_inf", "initializer_range")):
    folder(name, raw_config=json.dumps(cfg(**{key: 12345.5})).replace(
        "12345.5", "1e999"), files={"model.safetensors": weights()})
folder("config_not_json", raw_config='{"model_type": "llama", ',
       files={"model.safetensors": weights()})
folder("config_array", raw_config="[1, 2]",
       files={"model.safetensors": weights()})
# the weights
w = weights()
w["model.norm.weight"] = ("I32", [D], tensor([D], "I32"))
folder("dtype_int", files={"model.safetensors": w})
w = weights()
del w["model.layers.0.mlp.up_proj.weight"]
folder("tensor_missing", files={"model.safetensors": w})
w = weights()
w["model.layers.0.mlp.up_proj.weight"] = ("F32", [D, F], tensor([D, F]))
folder("tensor_shape", files={"model.safetensors": w})
# sharded folders
shard2 = "model-00002-of-00002.safetensors"
sharded("shard_missing", drop=shard2)
sharded("shard_wrong", move="model.layers.0.mlp.down_proj.weight")


def int_dtype(s1, s2):
    s2["model.layers.0.self_attn.k_proj.weight"] = (
        "I32", [KV * HD, D], tensor([KV * HD, D], "I32"))


sharded("shard_dtype", shard_edit=int_dtype)


def unmapped(i):
    del i["weight_map"]["model.layers.0.self_attn.o_proj.weight"]


sharded("index_unmapped", index_edit=unmapped)


def escape(i):
    i["weight_map"]["model.norm.weight"] = "../good/model.safetensors"


sharded("index_escape", index_edit=escape)


def not_string(i):
    i["weight_map"]["model.norm.weight"] = 7


sharded("index_number", index_edit=not_string)


def no_map(i):
    del i["weight_map"]


sharded("index_no_map", index_edit=no_map)
d = sharded("index_not_json")
with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
    f.write('{"weight_map": {')

# PEFT adapters on the good folder: r 4, alpha 8, q_proj and v_proj
R = 4


def adapter(name, conf=None, modules=("q_proj", "v_proj"), ranks=None,
            raw_config=None):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    c = {"peft_type": "LORA", "r": R, "lora_alpha": 8,
         "target_modules": list(modules), "bias": "none",
         "use_rslora": False, "lora_dropout": 0.0}
    c.update(conf or {})
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        f.write(raw_config if raw_config is not None else json.dumps(c))
    outs = {"q_proj": H * HD, "k_proj": KV * HD, "v_proj": KV * HD,
            "o_proj": D, "gate_proj": F, "up_proj": F, "down_proj": D}
    ins = {"o_proj": H * HD, "down_proj": F}
    t = {}
    for i in range(L):
        for m in (ranks or {m: R for m in modules}):
            r = (ranks or {}).get(m, R)
            part = "self_attn" if m in ("q_proj", "k_proj", "v_proj",
                                        "o_proj") else "mlp"
            p = f"base_model.model.model.layers.{i}.{part}.{m}."
            a = [r, ins.get(m, D)]
            b = [outs[m], r]
            t[p + "lora_A.weight"] = ("F32", a, tensor(a))
            t[p + "lora_B.weight"] = ("F32", b, tensor(b))
    save(os.path.join(d, "adapter_model.safetensors"), t)


adapter("adapter_good")
adapter("adapter_rank", ranks={"q_proj": 8, "v_proj": 8})
adapter("adapter_rank_one", ranks={"q_proj": 4, "v_proj": 2})
adapter("adapter_no_tensor", modules=("q_proj", "v_proj", "k_proj"),
        ranks={"q_proj": R, "v_proj": R})
adapter("adapter_extra_tensor", ranks={"q_proj": R, "v_proj": R,
                                       "o_proj": R})
adapter("adapter_alpha_string", conf={"lora_alpha": "8"})
adapter("adapter_alpha_null", conf={"lora_alpha": None})
adapter("adapter_r_fraction", conf={"r": 4.5})
adapter("adapter_r_huge", conf={"r": 1e30})
adapter("adapter_targets_unknown", modules=("q_proj", "w_proj"),
        ranks={"q_proj": R})
adapter("adapter_targets_not_list", conf={"target_modules": 5})
adapter("adapter_not_json", raw_config='{"r": 4,')
# a raw 0 byte between tokens: no JSON (cJSON's length-bounded parse took
# it for white space, generate's reader accepted what this one refused)
adapter("adapter_nul_byte", raw_config=json.dumps(
    {"peft_type": "LORA", "r": R, "lora_alpha": 8,
     "target_modules": ["q_proj", "v_proj"]}).replace(", ", ",\0 ", 1))
