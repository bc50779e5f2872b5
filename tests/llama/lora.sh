#!/bin/sh
# lora.sh MGRUN INI WORK - LoRA fine-tuning of the tiny llama end to end
# (conf/llama_tiny_lora.ini): the adapters alone must bring the held-out
# loss well below the frozen random base's ln(256) = 5.55; the checkpoint
# must hold the adapters only and --eval-only (the base re-created from
# the seed) must print the same loss; adapter/ must be a PEFT adapter:
# adapter_config.json fields and every key and shape of
# adapter_model.safetensors (peft_check.py loads it in peft on the GPU
# machine); a fresh run started from that adapter (model.lora_adapter)
# must evaluate to the same loss, and one whose lora_alpha differs from
# the adapter's must be refused. Also run on conf/llama_tiny_qlora.ini
# (the base in NF4), whose start-up line must say so.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
set -- --set run.out_dir="$work" --set run.name=lora --set run.threads=2
"$mgrun" -c "$ini" "$@" >"$work/train.log" 2>&1 || {
	cat "$work/train.log"
	echo "FAIL: training did not finish"
	exit 1
}
cat "$work/train.log"
# conf/llama_tiny_qlora.ini: the start-up line says the base is NF4.
if grep -q "^quant = nf4" "$ini" && ! grep -q "frozen in NF4" "$work/train.log"
then
	echo "FAIL: a quant = nf4 run that does not say its base is NF4"
	exit 1
fi
loss=$(grep '^epoch 1: ' "$work/train.log" |
	sed 's/.*test loss \([0-9.]*\).*/\1/')
echo "test loss $loss"
awk -v l="$loss" 'BEGIN { exit !(l < 4.5) }' || {
	echo "FAIL: the adapters did not learn (test loss $loss)"
	exit 1
}
"$mgrun" -c "$ini" "$@" --eval-only >"$work/eval.log" 2>&1 || {
	cat "$work/eval.log"
	echo "FAIL: --eval-only"
	exit 1
}
grep -q "test loss $loss " "$work/eval.log" || {
	cat "$work/eval.log"
	echo "FAIL: --eval-only does not reproduce the test loss $loss"
	exit 1
}
ad="$work/lora/adapter"
"$mgrun" -c "$ini" "$@" --set run.name=from_adapter \
	--set model.lora_adapter="$ad" --eval-only >"$work/from.log" 2>&1 || {
	cat "$work/from.log"
	echo "FAIL: --eval-only from the PEFT adapter"
	exit 1
}
grep -q "test loss $loss " "$work/from.log" || {
	cat "$work/from.log"
	echo "FAIL: the PEFT adapter does not reproduce the test loss $loss"
	exit 1
}
if "$mgrun" -c "$ini" "$@" --set run.name=bad_alpha --set model.lora_alpha=32 \
	--set model.lora_adapter="$ad" --eval-only >"$work/bad.log" 2>&1; then
	echo "FAIL: an adapter of another lora_alpha was accepted"
	exit 1
fi
grep -q "lora_alpha 16.*lora_alpha 32" "$work/bad.log" || {
	cat "$work/bad.log"
	echo "FAIL: the refusal does not name lora_alpha"
	exit 1
}
python3 - "$work/lora" <<'PY'
import json, struct, sys

run = sys.argv[1]


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


ck = header(run + "/checkpoint.safetensors")
params = sorted(k for k in ck if k.startswith("param/"))
assert params and all(".lora_" in k for k in params), params
cfg = json.load(open(run + "/adapter/adapter_config.json"))
assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
assert cfg["r"] == 8 and cfg["lora_alpha"] == 16, cfg
assert cfg["use_rslora"] is False and cfg["bias"] == "none", cfg
assert cfg["base_model_name_or_path"] is None, cfg
mods = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
        "down_proj", "lm_head"]
assert sorted(cfg["target_modules"]) == sorted(mods), cfg
# The tiny preset: hidden 64, 4 heads of 16, 2 kv heads, SwiGLU 176,
# vocabulary 256, 2 layers.
D, Q, KV, I, V, r = 64, 64, 32, 176, 256, 8
io = {"self_attn.q_proj": (D, Q), "self_attn.k_proj": (D, KV),
      "self_attn.v_proj": (D, KV), "self_attn.o_proj": (Q, D),
      "mlp.gate_proj": (D, I), "mlp.up_proj": (D, I),
      "mlp.down_proj": (I, D)}
want = {}
for n in range(2):
    for m, (i, o) in io.items():
        p = "base_model.model.model.layers.%d.%s" % (n, m)
        want[p + ".lora_A.weight"] = [r, i]
        want[p + ".lora_B.weight"] = [o, r]
want["base_model.model.lm_head.lora_A.weight"] = [r, D]
want["base_model.model.lm_head.lora_B.weight"] = [V, r]
ad = header(run + "/adapter/adapter_model.safetensors")
got = {k: v["shape"] for k, v in ad.items()}
assert got == want, (sorted(set(got) ^ set(want)), got)
assert all(v["dtype"] == "F32" for v in ad.values())
assert len(params) == len(want), (len(params), len(want))
print("PEFT adapter: %d tensors, keys and shapes as peft names them"
      % len(got))
PY
