#!/bin/sh
# hostile_hf.sh MGRUN REPO WORK - hostile Hugging Face folders (model.hf_dir)
# and PEFT adapters (model.lora_adapter) through mgrun, written by
# hostile_folders.py (tiny: vocab 64, width 16, one layer): each refused
# with exit 1 naming the file and the key or tensor, in under 20 s, with
# no crash; the good one-file and sharded folders and the good adapter
# still train. Among them the regressions of the fixes: sizes past the
# option bounds (1e9 layers was killed for memory, 2^40 wide was "rotary
# table: unknown error", 1e15 vocabulary "out of host memory" naming no
# file), target_modules not checked against lora_targets, adapter tensors
# of modules not targeted silently left out, r 4.5 read as 4.
set -u
mgrun=$1 repo=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
python3 "$repo/tests/llama/hostile_folders.py" "$work" || exit 1
cases=0
. "$(dirname "$0")/../common/fail.sh"
cat >"$work/base.ini" <<INI
[run]
precision = fp32
epochs = 1
max_steps = 1
batch_size = 2
eval_batch_size = 4
threads = 1
seed = 3
out_dir = $work/runs
[optimizer]
name = adamw
lr = 0.01
[model]
name = llama
[dataset]
name = random_tokens
vocab_size = 64
seq_len = 16
min_len = 4
train_samples = 8
test_samples = 4
[strategy]
name = single
INI
LORA="--set model.hf_dir=$work/good --set model.lora_rank=4"
LORA="$LORA --set model.lora_alpha=8 --set model.lora_targets=q,v"
# run NAME ARGS...: rc in $rc, output in NAME.log
run() {
	name=$1
	shift
	timeout 20 "$mgrun" -c "$work/base.ini" --set run.name="$name" "$@" \
		>"$work/$name.log" 2>&1
	rc=$?
}
# check NAME FILE PATTERN: exit 1, PATTERN (basic regex) after FILE
check() {
	cases=$((cases + 1))
	[ $rc -eq 1 ] || fail "$1: exit $rc, not 1: $(tail -3 "$work/$1.log")"
	grep -q "$work/$1/$2:* *$3" "$work/$1.log" ||
		fail "$1: no '$2 $3': $(tail -3 "$work/$1.log")"
	grep -q "Sanitizer\|runtime error" "$work/$1.log" &&
		fail "$1: sanitizer report: $(cat "$work/$1.log")"
	echo "$1: $(grep -m1 "$work/$1" "$work/$1.log" | sed 's/.*\.so): //')"
}
hf() { # hf NAME FILE PATTERN: the folder NAME as model.hf_dir
	run "$1" --set model.hf_dir="$work/$1"
	check "$@"
}
adapter() { # adapter NAME FILE PATTERN [ARGS]: NAME as lora_adapter
	name=$1 file=$2 pattern=$3
	shift 3
	# shellcheck disable=SC2086
	run "$name" $LORA --set model.lora_adapter="$work/$name" "$@"
	check "$name" "$file" "$pattern"
}
for ok in good good_sharded; do
	run $ok --set model.hf_dir="$work/$ok"
	[ $rc -eq 0 ] || fail "$ok: exit $rc: $(tail -3 "$work/$ok.log")"
done
# shellcheck disable=SC2086
run adapter_good $LORA --set model.lora_adapter="$work/adapter_good"
[ $rc -eq 0 ] || fail "adapter_good: exit $rc: $(tail -3 "$work/adapter_good.log")"

C=config.json
hf hidden_missing $C "'hidden_size' is missing"
hf hidden_string $C "'hidden_size' is not a non-negative integer"
hf hidden_negative $C "'hidden_size' is not a non-negative integer"
hf hidden_fraction $C "'hidden_size' is not a non-negative integer"
hf hidden_zero $C "llama: hidden_size is 0, not in \[2, 1048576\]"
hf heads_missing $C "'num_attention_heads' is missing"
hf heads_null $C "'num_attention_heads' is missing"
hf heads_zero $C "llama: num_attention_heads is 0, not in \[1, 4096\]"
hf kv_not_dividing $C "llama: num_attention_heads 4 is not a multiple of num_key_value_heads 3"
hf kv_zero $C "llama: num_key_value_heads is 0, not in \[1, 4096\]"
hf kv_string $C "'num_key_value_heads' is not a non-negative integer"
hf vocab_zero $C "llama: vocab_size is 0, not in \[2, 16777216\]"
hf vocab_one $C "llama: vocab_size is 1, not in \[2, 16777216\]"
hf vocab_huge $C "llama: vocab_size is 1000000000000000, not in"
hf hidden_huge $C "llama: hidden_size is 1099511627776, not in"
hf layers_huge $C "llama: num_hidden_layers is 1000000000, not in \[1, 4096\]"
hf ffn_huge $C "'intermediate_size' is not a non-negative integer"
hf heads_huge $C "llama: num_attention_heads is 8589934592, not in"
hf head_dim_huge $C "llama: head_dim is 1099511627776, not in \[2, 4096\]"
hf params_overflow $C "llama: the sizes make 3.519e+13 parameters, more than 2^42"
hf theta_string $C "'rope_theta' is not a number"
hf eps_negative $C "llama: rms_norm_eps -1e-05 and rope_theta 10000 must be positive"
hf theta_inf $C "'rope_theta' is not a finite number"
hf eps_inf $C "'rms_norm_eps' is not a finite number"
hf std_inf $C "'initializer_range' is not a finite number"
hf config_not_json $C "not a JSON object"
hf config_array $C "not a JSON object"
M=model.safetensors I=model.safetensors.index.json
S2=model-00002-of-00002.safetensors
hf dtype_int $M "tensor 'model.norm.weight': convert: I32 to F32 is not supported"
hf tensor_missing $M "has no tensor 'model.layers.0.mlp.up_proj.weight'"
hf tensor_shape $M "tensor 'model.layers.0.mlp.up_proj.weight' is \[16, 24\], but $work/tensor_shape/config.json makes it \[24, 16\]"
hf vocab_lie $M "tensor 'model.embed_tokens.weight' is \[64, 16\], but $work/vocab_lie/config.json makes it \[4194304, 16\]"
hf layers_lie $M "has no tensor 'model.layers.1.input_layernorm.weight'"
hf shard_missing $I "maps 'model.layers.0.[a-z_.]*' to $S2: $work/shard_missing/$S2: No such file or directory"
hf shard_wrong $S2 "has no tensor 'model.layers.0.mlp.down_proj.weight' (model.safetensors.index.json maps it there)"
hf shard_dtype $S2 "tensor 'model.layers.0.self_attn.k_proj.weight': convert: I32 to F32 is not supported"
hf index_unmapped $I "maps no (valid) file to 'model.layers.0.self_attn.o_proj.weight'"
hf index_escape $I "maps no (valid) file to 'model.norm.weight'"
hf index_number $I "maps no (valid) file to 'model.norm.weight'"
hf index_no_map $I "not a safetensors index (no weight_map object)"
hf index_not_json $I "not a safetensors index (no weight_map object)"

A=adapter_config.json T=adapter_model.safetensors
adapter adapter_rank $T "tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has rank 8 (rows of a 2-D tensor), $work/adapter_rank/$A says r 4"
adapter adapter_rank_one $T "tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight' has rank 2"
adapter adapter_no_tensor $A "'target_modules' is q_proj, k_proj, v_proj; the options' lora_targets make q_proj, v_proj"
adapter adapter_no_tensor $T "has no base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight" \
	--set model.lora_targets=q,k,v
adapter adapter_extra_tensor $T "tensor 'base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight' is for no module the adapter targets (q_proj, v_proj, in 1 layers)"
adapter adapter_alpha_string $A "'lora_alpha' is not a number"
adapter adapter_alpha_null $A "'lora_alpha' is not a number"
adapter adapter_r_fraction $A "'r' is not a whole number in \[1, 65536\]"
adapter adapter_r_huge $A "'r' is not a whole number in \[1, 65536\]"
adapter adapter_targets_unknown $A "'target_modules' names 'w_proj', not a llama module"
adapter adapter_targets_not_list $A "'target_modules' is not a list of module names"
adapter adapter_not_json $A "not a JSON object"
adapter adapter_nul_byte $A "a 0 byte at byte offset 21: not a text file"
adapter adapter_good $A "has r 4, lora_alpha 8, use_rslora false; the options say lora_rank 4, lora_alpha 16" \
	--set model.lora_alpha=16

echo "$cases hostile folders and adapters"
[ $fails -eq 0 ] || {
	echo "$fails failures"
	exit 1
}
echo "PASS: hostile_hf"
