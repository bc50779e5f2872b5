#!/bin/sh
# adapter.sh MGRUN REPO WORK - `mgrun generate --adapter DIR`: a LoRA run
# of the tiny llama (conf/llama_tiny_lora.ini, a few steps) writes its
# PEFT adapter/; generating with that adapter on the plain tiny llama's
# base (conf/llama_tiny.ini: same preset and seed, no LoRA options: r,
# alpha and the targets come from adapter_config.json) and on the LoRA
# run's own configuration (its checkpoint not read) gives the greedy ids
# of the LoRA run itself, and so does `generate --model` with the base
# exported as a Hugging Face folder; the same for a QLoRA run (quant = nf4) and
# its adapter on the NF4 base. Adapters mgrun cannot honour are refused,
# naming the file and the field: bias, modules_to_save, DoRA, a regex
# target_modules, an unknown module, a rank the tensors do not have,
# not JSON, no folder.
set -u
mgrun=$1 repo=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
S="--set run.out_dir=$work --set run.threads=2 --set run.max_steps=6"
S="$S --set dataset.train_samples=256 --set dataset.test_samples=16"
lora=$repo/conf/llama_tiny_lora.ini base=$repo/conf/llama_tiny.ini
# shellcheck disable=SC2086
"$mgrun" -c "$lora" $S --set run.name=lora >"$work/train.log" 2>&1 || {
	cat "$work/train.log"
	echo "FAIL: the LoRA run did not finish"
	exit 1
}
ad=$work/lora/adapter
P="5 17 42 99 3"
gen() { # gen NAME INI ARGS...: rc in $rc, output in NAME.out / NAME.err
	name=$1 ini=$2
	shift 2
	# shellcheck disable=SC2086
	"$mgrun" generate -c "$ini" $S --ids --prompt "$P" --greedy \
		--max-new-tokens 16 "$@" >"$work/$name.out" 2>"$work/$name.err"
	rc=$?
}
gen run "$lora" --set run.name=lora
[ $rc -eq 0 ] || fail "the LoRA run: exit $rc: $(cat "$work/run.err")"
echo "the LoRA run:           $(cat "$work/run.out")"
gen base "$base" --set run.name=base --adapter "$ad"
[ $rc -eq 0 ] || fail "base + adapter: exit $rc: $(cat "$work/base.err")"
echo "base + its adapter:     $(cat "$work/base.out")"
grep -q "adapter $ad (r 8, lora_alpha 16" "$work/base.err" ||
	fail "the adapter used is not named: $(cat "$work/base.err")"
cmp -s "$work/run.out" "$work/base.out" ||
	fail "generate --adapter differs from the run that trained it"
gen own "$lora" --set run.name=lora --adapter "$ad"
[ $rc -eq 0 ] || fail "own config + adapter: exit $rc: $(cat "$work/own.err")"
cmp -s "$work/run.out" "$work/own.out" ||
	fail "the run's own configuration with --adapter differs"
grep -q "checkpoint is not read" "$work/own.err" ||
	fail "stderr does not say the checkpoint is not read"
# without an INI: `generate --model HF_DIR --adapter DIR`, the base as a
# Hugging Face folder (one step at learning rate 0 keeps the initial
# weights the LoRA run froze, exported in fp32)
# shellcheck disable=SC2086
"$mgrun" -c "$base" $S --set run.name=base0 --set run.max_steps=1 \
	--set optimizer.lr=0 >"$work/base0.log" 2>&1 &&
	"$mgrun" export -c "$base" $S --set run.name=base0 --dtype fp32 \
		--out "$work/base.hf" >>"$work/base0.log" 2>&1 ||
	fail "the base folder was not made: $(cat "$work/base0.log")"
"$mgrun" generate --model "$work/base.hf" --adapter "$ad" --ids "$P" \
	--greedy --max-new-tokens 16 >"$work/model.out" 2>"$work/model.err" ||
	fail "--model + --adapter: $(cat "$work/model.err")"
echo "--model + --adapter:    $(cat "$work/model.out")"
cmp -s "$work/run.out" "$work/model.out" ||
	fail "generate --model HF_DIR --adapter differs from the LoRA run"
# the same on a QLoRA base (conf/llama_tiny_qlora.ini): the adapter of
# the NF4 run on the plain base with quant = nf4
qlora=$repo/conf/llama_tiny_qlora.ini
# shellcheck disable=SC2086
"$mgrun" -c "$qlora" $S --set run.name=qlora >"$work/qtrain.log" 2>&1 || {
	cat "$work/qtrain.log"
	fail "the QLoRA run did not finish"
}
gen qrun "$qlora" --set run.name=qlora
gen qbase "$base" --set run.name=base --set model.quant=nf4 \
	--adapter "$work/qlora/adapter"
echo "the QLoRA run:          $(cat "$work/qrun.out")"
echo "NF4 base + its adapter: $(cat "$work/qbase.out")"
[ -s "$work/qrun.out" ] && cmp -s "$work/qrun.out" "$work/qbase.out" ||
	fail "QLoRA: generate --adapter differs: $(cat "$work/qbase.err")"

# hostile adapter configs: each refused with exit 2 (config) or 1 (load),
# the message naming what
hostile() { # hostile NAME EDIT PATTERN: EDIT is a sed script on the config
	name=$1 edit=$2 pattern=$3
	mkdir -p "$work/$name"
	cp "$ad/adapter_model.safetensors" "$work/$name/"
	sed "$edit" "$ad/adapter_config.json" >"$work/$name/adapter_config.json"
	gen "$name" "$base" --set run.name=base --adapter "$work/$name"
	[ $rc -ne 0 ] || fail "$name: accepted"
	grep -q "$pattern" "$work/$name.err" ||
		fail "$name: the error does not say '$pattern': $(cat "$work/$name.err")"
	grep -q "$work/$name" "$work/$name.err" ||
		fail "$name: the error does not name the folder"
	echo "$name: $(head -c 300 "$work/$name.err")"
}
hostile bias 's/"bias":[^,]*,/"bias": "all",/' 'bias.*all'
hostile save 's/"bias":/"modules_to_save": ["lm_head"], "bias":/' \
	'modules_to_save'
hostile dora 's/"bias":/"use_dora": true, "bias":/' 'use_dora'
hostile regex 's/"target_modules":[^]]*]/"target_modules": ".*proj"/' \
	'regular expression'
hostile unknown 's/"q_proj"/"qq_proj"/' "unknown target 'qq_proj'"
hostile rank 's/"r":[^,]*,/"r": 4,/' 'lora_A.weight. has rank 8 (rows'
hostile notjson 's/{/[/' 'not a JSON object'
# a raw 0 byte: no JSON (cJSON skipped it as white space; fuzz_adapter)
hostile nulbyte 's/"bias":/"bias":\x00/' 'a 0 byte (not JSON) at byte offset'
hostile peft 's/"LORA"/"IA3"/' 'peft_type is not LORA'
# NaN adapter weights make NaN logits: an error, not token 0 and exit 0
mkdir -p "$work/nan"
cp "$ad/adapter_config.json" "$work/nan/"
python3 -c 'import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
assert all(v["dtype"] == "F32" for k, v in json.loads(b[8:8 + n]).items()
           if k != "__metadata__")
b[8 + n:] = struct.pack("<f", float("nan")) * ((len(b) - 8 - n) // 4)
open(sys.argv[2], "wb").write(b)' "$ad/adapter_model.safetensors" \
	"$work/nan/adapter_model.safetensors" || fail "cannot write the NaN adapter"
gen nan "$base" --set run.name=base --adapter "$work/nan"
[ $rc -eq 1 ] && ! grep -q "[0-9]" "$work/nan.out" &&
	grep -q "token 1: the model's logits are not finite" "$work/nan.err" ||
	fail "NaN adapter: exit $rc, stdout '$(cat "$work/nan.out")': $(cat "$work/nan.err")"
# adapter_config.json a FIFO or a link to /dev/zero: refused at once
mkdir -p "$work/fifo" "$work/zero"
mkfifo "$work/fifo/adapter_config.json"
ln -s /dev/zero "$work/zero/adapter_config.json"
for d in fifo zero; do
	# shellcheck disable=SC2086
	timeout 60 "$mgrun" generate -c "$base" $S --set run.name=base --ids \
		--prompt "$P" --adapter "$work/$d" >"$work/$d.out" 2>"$work/$d.err"
	rc=$?
	[ $rc -eq 2 ] && grep -q "$d/adapter_config.json: not a regular file" \
		"$work/$d.err" || fail "$d adapter_config.json: exit $rc: $(cat "$work/$d.err")"
done
gen nodir "$base" --set run.name=base --adapter "$work/absent"
[ $rc -eq 2 ] || fail "a missing folder: exit $rc"
grep -q "$work/absent/adapter_config.json" "$work/nodir.err" ||
	fail "a missing folder is not named: $(cat "$work/nodir.err")"

[ $fails -eq 0 ] || {
	echo "$fails failures"
	exit 1
}
echo "generate --adapter: all checks passed"
