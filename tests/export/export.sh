#!/bin/sh
# export.sh MGRUN REPO WORK - `mgrun export` round trips on tiny llamas
# (conf/llama_tiny.ini, a few steps): the exported Hugging Face folder,
# loaded back through model.hf_dir, evaluates (--eval-only) to the loss
# of the run it came from and greedy `generate --ids` gives the same
# ids; untied fp32, tied, fp64 (written fp32), bf16 and fp16 (close), and
# LoRA runs (rslora too) exported merged (a plain full model then) to
# the LoRA run's loss, the decoder families (Qwen2, Qwen3, Mistral, Gemma
# 2 and 3, Phi-3 with its fused projections and PEFT adapter, and a Llama
# folder fused into Phi-3's layout by phi3_fuse.py) as
# their own model types, and a QLoRA run (quant = nf4) exported with its
# NF4 base dequantized and the adapters merged, to the QLoRA run's loss.
# Then the refusals: no checkpoint, a model without save_hf, run.gpus >
# 1, --out the model's own hf_dir, bad arguments.
set -u
mgrun=$1 repo=$2 work=$3
ini=$repo/conf/llama_tiny.ini
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
B="--set run.out_dir=$work --set run.threads=2 --set run.max_steps=8"
B="$B --set dataset.train_samples=512 --set dataset.test_samples=16"
# loss NAME: the test loss of eval.json
loss() {
	sed -n 's/.*"loss": *\([-0-9.e+]*\).*/\1/p' "$work/$1/eval.json"
}
# near A B TOL: |A - B| <= TOL * max(1, |A|)
near() {
	awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN {
		d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; if (m < 1) m = 1
		exit !(a != "" && b != "" && d <= t * m) }'
}
P="5 17 42 99 3"
# eval_folder RUN DIR WHAT [--set ...]: evaluate the Hugging Face folder
# DIR as run RUN (its loss: `loss RUN`), failing with WHAT when it cannot
eval_folder() {
	run=$1 dir=$2 what=$3
	shift 3
	# shellcheck disable=SC2086
	"$mgrun" -c "$ini" $B --set run.name="$run" --set model.hf_dir="$dir" \
		"$@" --eval-only >"$work/$run.eval" 2>&1 ||
		fail "$what: $(tail -3 "$work/$run.eval")"
}
# roundtrip TAG TOL [--set ...]: train run TAG, export it, evaluate and
# decode both; the export's run is TAG_hf
roundtrip() {
	tag=$1 tol=$2
	shift 2
	# shellcheck disable=SC2086
	"$mgrun" -c "$ini" $B --set run.name="$tag" "$@" >"$work/$tag.train" 2>&1 ||
		{ fail "$tag: training: $(tail -5 "$work/$tag.train")"; return; }
	# shellcheck disable=SC2086
	"$mgrun" export -c "$ini" $B --set run.name="$tag" "$@" $XO \
		--out "$work/$tag.hf" >"$work/$tag.exp" 2>"$work/$tag.experr" ||
		{ fail "$tag: export: $(cat "$work/$tag.experr")"; return; }
	grep -q "model.safetensors" "$work/$tag.exp" ||
		fail "$tag: export did not say what it wrote: $(cat "$work/$tag.exp")"
	# shellcheck disable=SC2086
	"$mgrun" -c "$ini" $B --set run.name="$tag" "$@" --eval-only \
		>"$work/$tag.eval" 2>&1 || fail "$tag: eval: $(tail -3 "$work/$tag.eval")"
	# the folder is a plain model: no LoRA, the precision it was written in
	# shellcheck disable=SC2086
	eval_folder "${tag}_hf" "$work/$tag.hf" "$tag: eval from the export" $HO
	grep -q "eval (initial weights of $work/$tag.hf," "$work/${tag}_hf.eval" ||
		fail "$tag: the eval does not name the folder it read: $(grep 'eval (' "$work/${tag}_hf.eval")"
	a=$(loss "$tag") b=$(loss "${tag}_hf")
	echo "$tag: run loss $a, exported $b"
	near "$a" "$b" "$tol" || fail "$tag: loss $a, from the export $b (tol $tol)"
	# shellcheck disable=SC2086
	[ -n "$IDS" ] || return
	# shellcheck disable=SC2086
	"$mgrun" generate -c "$ini" $B --set run.name="$tag" "$@" --ids \
		--prompt "$P" --greedy --max-new-tokens 10 >"$work/$tag.ids" 2>/dev/null
	# shellcheck disable=SC2086
	"$mgrun" generate -c "$ini" $B --set run.name="${tag}_hf" \
		--set model.hf_dir="$work/$tag.hf" $HO --ids --prompt "$P" \
		--greedy --max-new-tokens 10 >"$work/${tag}_hf.ids" 2>/dev/null
	[ -s "$work/$tag.ids" ] && cmp -s "$work/$tag.ids" "$work/${tag}_hf.ids" ||
		fail "$tag: greedy ids $(cat "$work/$tag.ids") vs $(cat "$work/${tag}_hf.ids")"
}
XO="" HO="" IDS=1
roundtrip untied 1e-6
grep -q '"lm_head.weight"' "$work/untied.hf/model.safetensors" ||
	fail "untied: no lm_head.weight"
grep -q '"architectures".*LlamaForCausalLM' "$work/untied.hf/config.json" &&
	grep -q '"torch_dtype":.*"float32"' "$work/untied.hf/config.json" &&
	grep -q '"tie_word_embeddings":.*false' "$work/untied.hf/config.json" ||
	fail "untied: config.json: $(cat "$work/untied.hf/config.json")"
# Phi-3's folder layout as transformers defines it (phi3_fuse.py: q, k,
# v rows fused into qkv_proj, gate then up into gate_up_proj), not as
# mgrun's export writes it: the untied folder so fused evaluates and
# decodes as the folder itself
if python3 "$repo/tests/export/phi3_fuse.py" "$work/untied.hf" \
	"$work/fused.hf" >"$work/fused.log" 2>&1; then
	eval_folder fused_hf "$work/fused.hf" "fused: eval"
	a=$(loss untied_hf) b=$(loss fused_hf)
	echo "phi3 layout: llama folder loss $a, fused as Phi-3 $b"
	near "$a" "$b" 1e-12 || fail "fused: loss $a, as Phi-3 $b"
	# shellcheck disable=SC2086
	"$mgrun" generate -c "$ini" $B --set run.name=fused_hf \
		--set model.hf_dir="$work/fused.hf" --ids --prompt "$P" \
		--greedy --max-new-tokens 10 >"$work/fused_hf.ids" 2>/dev/null
	[ -s "$work/fused_hf.ids" ] &&
		cmp -s "$work/untied_hf.ids" "$work/fused_hf.ids" ||
		fail "fused: greedy ids $(cat "$work/fused_hf.ids") vs $(cat "$work/untied_hf.ids")"
else
	fail "phi3_fuse.py: $(tail -3 "$work/fused.log")"
fi
roundtrip tied 1e-6 --set model.tie_embeddings=yes
grep -q '"lm_head.weight"' "$work/tied.hf/model.safetensors" &&
	fail "tied: lm_head.weight written (HF writes the embedding once)"
grep -q '"tie_word_embeddings":.*true' "$work/tied.hf/config.json" ||
	fail "tied: tie_word_embeddings not true"
# fp64 training, written (by default) in fp32: fp32 rounding apart
roundtrip fp64 1e-5 --set run.precision=fp64
grep -q '"F64"' "$work/fp64.hf/model.safetensors" && fail "fp64: F64 tensors"
# bf16 weights: close, not equal (greedy ids may differ); evaluated in
# fp32
XO="--dtype bf16" IDS=""
roundtrip bf16 2e-2
XO="" IDS=1
grep -q '"torch_dtype":.*"bfloat16"' "$work/bf16.hf/config.json" &&
	grep -q '"BF16"' "$work/bf16.hf/model.safetensors" ||
	fail "bf16: not written in bf16"
# fp16 weights likewise
XO="--dtype fp16" IDS=""
roundtrip fp16 1e-2
XO="" IDS=1
grep -q '"torch_dtype":.*"float16"' "$work/fp16.hf/config.json" &&
	grep -q '"F16"' "$work/fp16.hf/model.safetensors" ||
	fail "fp16: not written in fp16"
# rank-stabilised LoRA (scale alpha / sqrt(r)) on q and v, merged
# shellcheck disable=SC2086
roundtrip rslora 1e-5 --set model.lora_rank=4 --set model.lora_alpha=8 \
	--set model.rslora=true --set optimizer.lr=0.02
# LoRA (every projection and the head) from the seed's base, merged: the
# plain model evaluates as the LoRA run did, and not as the base did
L="--set model.lora_rank=4 --set model.lora_alpha=8 --set model.lora_targets=all,head --set optimizer.lr=0.02"
# shellcheck disable=SC2086
roundtrip lora 1e-5 $L
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $B --set run.name=base --eval-only >"$work/base.eval" 2>&1
lb=$(loss base) ll=$(loss lora)
echo "lora: base loss $lb, LoRA run $ll"
near "$lb" "$ll" 1e-4 && fail "lora: the adapters changed nothing ($lb, $ll)"
grep -q "lora" "$work/lora.hf/model.safetensors" && fail "lora: adapters written"
# QLoRA: the same adapters over the NF4 base; the export is that base
# dequantized with the adapters merged, a plain fp32 model that
# evaluates as the QLoRA run did (greedy ids too), and not as the float
# base's LoRA run
# shellcheck disable=SC2086
roundtrip qlora 1e-5 $L --set model.quant=nf4
lq=$(loss qlora)
near "$ll" "$lq" 1e-6 && fail "qlora: the NF4 base changed nothing ($ll, $lq)"
grep -q "lora" "$work/qlora.hf/model.safetensors" && fail "qlora: adapters written"
grep -q '"torch_dtype":.*"float32"' "$work/qlora.hf/config.json" ||
	fail "qlora: not written in fp32"

# the decoder families: each folder written as its model_type with its
# own tensors (Qwen2's q/k/v biases, Qwen3's q/k norms, Mistral's window
# in config.json) loads back to the run's loss and greedy ids; Qwen2 with
# LoRA on every projection merged over its trained biases
roundtrip qwen2 1e-6 --set model.family=qwen2
grep -q '"model_type":.*"qwen2"' "$work/qwen2.hf/config.json" &&
	grep -q '"Qwen2ForCausalLM"' "$work/qwen2.hf/config.json" &&
	grep -q '"model.layers.1.self_attn.v_proj.bias"' \
		"$work/qwen2.hf/model.safetensors" ||
	fail "qwen2: config.json or biases: $(cat "$work/qwen2.hf/config.json")"
roundtrip qwen3 1e-6 --set model.family=qwen3 --set model.head_dim=24
grep -q '"model_type":.*"qwen3"' "$work/qwen3.hf/config.json" &&
	grep -q '"model.layers.0.self_attn.k_norm.weight"' \
		"$work/qwen3.hf/model.safetensors" ||
	fail "qwen3: config.json or q/k norms"
roundtrip mistral 1e-6 --set model.family=mistral --set model.sliding_window=5
grep -q '"sliding_window":.*5' "$work/mistral.hf/config.json" ||
	fail "mistral: sliding_window not written: $(cat "$work/mistral.hf/config.json")"
# Gemma 2: its four norms' names, the soft-caps, the layer types (layer
# 1 full) and the (1 + w) norms written as w; Gemma 3 with q/k norms, a
# local RoPE base and its pattern
roundtrip gemma2 1e-6 --set model.family=gemma2 --set model.sliding_window=5 \
	--set model.attn_logit_softcapping=3 --set model.final_logit_softcapping=5
grep -q '"model_type":.*"gemma2"' "$work/gemma2.hf/config.json" &&
	grep -q '"final_logit_softcapping":.*5' "$work/gemma2.hf/config.json" &&
	grep -q '"full_attention"' "$work/gemma2.hf/config.json" &&
	grep -q '"model.layers.1.post_feedforward_layernorm.weight"' \
		"$work/gemma2.hf/model.safetensors" &&
	grep -q '"model.layers.0.pre_feedforward_layernorm.weight"' \
		"$work/gemma2.hf/model.safetensors" ||
	fail "gemma2: config.json or norms: $(cat "$work/gemma2.hf/config.json")"
roundtrip gemma3 1e-6 --set model.family=gemma3_text --set model.head_dim=24 \
	--set model.sliding_window=4 --set model.sliding_window_pattern=2 \
	--set model.rope_local_base_freq=500
grep -q '"model_type":.*"gemma3_text"' "$work/gemma3.hf/config.json" &&
	grep -q '"rope_local_base_freq":.*500' "$work/gemma3.hf/config.json" &&
	grep -q '"model.layers.0.self_attn.q_norm.weight"' \
		"$work/gemma3.hf/model.safetensors" ||
	fail "gemma3: config.json or q/k norms"
# a Gemma 3 multimodal folder (model_type gemma3, text_config, the
# language model's tensors prefixed, both of transformers' layouts) made
# from that export: its language model evaluates to the same loss
for pre in language_model.model. model.language_model.; do
	python3 "$(dirname "$0")/gemma3_mm.py" "$work/gemma3.hf" \
		"$work/gemma3mm.hf" "$pre" || fail "gemma3_mm.py"
	eval_folder gemma3mm "$work/gemma3mm.hf" "gemma3 multimodal ($pre)"
	a=$(loss gemma3_hf) b=$(loss gemma3mm)
	echo "gemma3 ($pre): text folder $a, multimodal folder $b"
	near "$a" "$b" 1e-12 || fail "gemma3 multimodal ($pre): loss $b vs $a"
	rm -rf "$work/gemma3mm.hf" "$work/gemma3mm"
done
# Phi-3: 12 of 16 dims rotary, a window; written with its fused
# qkv_proj and gate_up_proj (and no split projection), read back split
roundtrip phi3 1e-6 --set model.family=phi3 \
	--set model.partial_rotary_factor=0.75 --set model.sliding_window=5
grep -q '"model_type":.*"phi3"' "$work/phi3.hf/config.json" &&
	grep -q '"Phi3ForCausalLM"' "$work/phi3.hf/config.json" &&
	grep -q '"partial_rotary_factor":.*0.75' "$work/phi3.hf/config.json" &&
	grep -q '"sliding_window":.*5' "$work/phi3.hf/config.json" &&
	grep -q "self_attn.qkv_proj.weight" "$work/phi3.hf/model.safetensors" &&
	grep -q "mlp.gate_up_proj.weight" "$work/phi3.hf/model.safetensors" ||
	fail "phi3: config.json or fused tensors: $(cat "$work/phi3.hf/config.json")"
grep -q -e "q_proj.weight" -e "gate_proj.weight" \
	"$work/phi3.hf/model.safetensors" && fail "phi3: split projections written"
# Phi-4-mini's rope_scaling longrope written into the phi3 folder:
# short factors and the attention factor change the loss, the export
# writes them back (and evaluates as the run), rows past
# original_max_position_embeddings (where transformers takes the long
# factors) are refused
lr=$work/phi3_lr.src
rm -rf "$lr"
cp -r "$work/phi3.hf" "$lr"
sed -i 's/"rope_scaling":[[:space:]]*null/"rope_scaling": {"type": "longrope", "short_factor": [1, 1.5, 2, 1.25, 3, 1.1], "long_factor": [2, 2, 2, 2, 2, 2]}, "original_max_position_embeddings": 128/' \
	"$lr/config.json"
grep -q longrope "$lr/config.json" || fail "phi3_lr: config.json not edited"
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $B --set run.name=phi3_lr_base --set model.hf_dir="$lr" \
	--eval-only >"$work/phi3_lr_base.eval" 2>&1 ||
	fail "phi3_lr: eval: $(tail -3 "$work/phi3_lr_base.eval")"
a=$(loss phi3_hf) b=$(loss phi3_lr_base)
echo "phi3: folder loss $a, with longrope $b"
near "$a" "$b" 1e-6 && fail "phi3_lr: longrope changed nothing ($a, $b)"
roundtrip phi3_lr 1e-6 --set model.hf_dir="$lr"
grep -q '"longrope"' "$work/phi3_lr.hf/config.json" &&
	grep -q '"original_max_position_embeddings":.*128' \
		"$work/phi3_lr.hf/config.json" &&
	grep -q '"short_factor"' "$work/phi3_lr.hf/config.json" ||
	fail "phi3_lr: longrope not written: $(cat "$work/phi3_lr.hf/config.json")"
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $B --set run.name=phi3_lr_long --set model.hf_dir="$lr" \
	--set dataset.seq_len=160 --eval-only >"$work/phi3_lr_long.eval" 2>&1 &&
	fail "phi3_lr: rows of 160 tokens past original_max_position_embeddings ran"
grep -q "original_max_position_embeddings 128 of rope_scaling longrope" \
	"$work/phi3_lr_long.eval" ||
	fail "phi3_lr: long rows: $(tail -2 "$work/phi3_lr_long.eval")"
# LoRA on the Phi-3 folder (fused modules: one adapter each), merged;
# its PEFT adapter names the fused modules and, loaded back with
# lora_adapter, evaluates to the run's loss
# shellcheck disable=SC2086
roundtrip phi3_lora 1e-5 $L --set model.hf_dir="$work/phi3.hf"
A=$work/phi3_lora/adapter
grep -q "self_attn.qkv_proj.lora_A" "$A/adapter_model.safetensors" &&
	grep -q "mlp.gate_up_proj.lora_B" "$A/adapter_model.safetensors" &&
	grep -q '"qkv_proj"' "$A/adapter_config.json" &&
	grep -q '"gate_up_proj"' "$A/adapter_config.json" ||
	fail "phi3_lora: adapter: $(cat "$A/adapter_config.json")"
grep -q -e "\.q_proj\.lora" -e "\.up_proj\.lora" "$A/adapter_model.safetensors" &&
	fail "phi3_lora: split adapters written"
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $B --set run.name=phi3_ad $L \
	--set model.hf_dir="$work/phi3.hf" --set model.lora_adapter="$A" \
	--eval-only >"$work/phi3_ad.eval" 2>&1 ||
	fail "phi3 adapter: eval: $(tail -3 "$work/phi3_ad.eval")"
a=$(loss phi3_lora) b=$(loss phi3_ad)
echo "phi3_lora: run loss $a, its adapter loaded back $b"
near "$a" "$b" 1e-6 || fail "phi3 adapter: loss $a, loaded back $b"
# (from the qwen2 export, whose biases trained away from zero)
# shellcheck disable=SC2086
roundtrip qwen2_lora 1e-5 $L --set model.hf_dir="$work/qwen2.hf"
grep -q "lora" "$work/qwen2_lora.hf/model.safetensors" &&
	fail "qwen2_lora: adapters written"

# refusals
# shellcheck disable=SC2086
"$mgrun" export -c "$ini" $B --set run.name=none --out "$work/none.hf" \
	>/dev/null 2>"$work/none.err"
rc=$?
[ $rc -eq 1 ] && grep -q "no checkpoint" "$work/none.err" ||
	fail "no checkpoint: exit $rc: $(cat "$work/none.err")"
[ -e "$work/none.hf/model.safetensors" ] && fail "no checkpoint: wrote a model"
"$mgrun" export -c "$repo/conf/fashion_mnist.ini" --set run.out_dir="$work" \
	--out "$work/mnist.hf" >/dev/null 2>"$work/mnist.err"
rc=$?
[ $rc -eq 2 ] && grep -q "'mobilenetv2'.*no save_hf" "$work/mnist.err" ||
	fail "no save_hf: exit $rc: $(cat "$work/mnist.err")"
# shellcheck disable=SC2086
"$mgrun" export -c "$ini" $B --set run.name=untied --set run.gpus=2 \
	--out "$work/g2.hf" >/dev/null 2>"$work/g2.err"
rc=$?
[ $rc -eq 2 ] && grep -q "one process" "$work/g2.err" ||
	fail "run.gpus=2: exit $rc: $(cat "$work/g2.err")"
"$mgrun" export -c "$ini" --out "$work/x" --dtype fp8 >/dev/null 2>"$work/dt.err"
rc=$?
[ $rc -eq 2 ] && grep -q "fp8" "$work/dt.err" || fail "--dtype fp8: exit $rc"
"$mgrun" export -c "$ini" >/dev/null 2>"$work/out.err"
rc=$?
[ $rc -eq 2 ] && grep -q "\-\-out" "$work/out.err" || fail "no --out: exit $rc"

# shellcheck disable=SC2086
"$mgrun" export -c "$ini" $B --set run.name=lora_hf \
	--set model.hf_dir="$work/lora.hf" --out "$work/lora.hf/" \
	>/dev/null 2>"$work/src.err"
rc=$?
[ $rc -eq 2 ] && grep -q "is the model's hf_dir" "$work/src.err" ||
	fail "--out = hf_dir: exit $rc: $(cat "$work/src.err")"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "export: all passed"
