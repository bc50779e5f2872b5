#!/usr/bin/env python3
"""gemma3_mm.py IN OUT - a Gemma 3 multimodal folder (model_type gemma3)
made from a text-only one (gemma3_text, as mgrun export writes it), as
transformers lays such folders out: the language model's tensors under
PREFIX (default "language_model.model.", transformers up to 4.51; or
"model.language_model.") and its config as text_config, with the keys
equal to Gemma3TextConfig's defaults left out as transformers leaves
them out. No vision tower: mgrun reads only the language model.
Python's standard library only (CI)."""
import json
import os
import struct
import sys

src, dst = sys.argv[1], sys.argv[2]
prefix = sys.argv[3] if len(sys.argv) > 3 else "language_model.model."
os.makedirs(dst, exist_ok=True)
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
renamed = {}
for k, v in header.items():
    if k.startswith("model."):
        k = prefix + k[len("model."):]
    elif k == "lm_head.weight" and prefix.startswith("language_model."):
        k = "language_model.lm_head.weight"
    renamed[k] = v
h = json.dumps(renamed).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
text = json.load(open(os.path.join(src, "config.json")))
defaults = {"tie_word_embeddings": True, "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "initializer_range": 0.02}
for k, v in defaults.items():
    if text.get(k) == v:
        del text[k]
for k in ("architectures", "torch_dtype", "hidden_act", "use_cache"):
    text.pop(k, None)
cfg = {"architectures": ["Gemma3ForConditionalGeneration"],
       "model_type": "gemma3", "text_config": text,
       "vision_config": {"model_type": "siglip_vision_model"}}
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
