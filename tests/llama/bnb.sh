#!/bin/sh
# bnb.sh MGRUN REPO WORK - bitsandbytes 4-bit folders in and out, end to
# end on the tiny llama (CPU). A base B0 (a float run exported in bf16,
# so every non-quantized tensor is bf16-exact) is loaded with quant = nf4
# (QLoRA run Q, an untouched head adapter: lr 0); `export --dtype nf4`
# of Q gives folder F: loaded back with quant = nf4 its blobs are Q's
# bytes (no re-quantization), so the eval loss and the greedy ids equal
# Q's; loaded without quant F gives the dequantized values: the same
# loss as Q's `export --dtype fp32` loaded as floats. Then hostile
# folders (another quant_method, 8-bit, fp4, a truncated
# model.safetensors, a quant_state of another shape, unnested
# statistics under quant = nf4) are refused naming the file (and the
# tensor), no crash.
set -u
mgrun=$1 repo=$2 work=$3
ini=$repo/conf/llama_tiny_lora.ini
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
S="--set run.out_dir=$work --set run.threads=2 --set run.max_steps=1"
S="$S --set dataset.train_samples=64 --set dataset.test_samples=32"
run() { # run LOG ARGS...: mgrun ARGS; output in LOG.log, rc
	log=$1
	shift
	"$mgrun" "$@" >"$work/$log.log" 2>&1
	rc=$?
}
# a run's eval loss at full precision (eval.json)
loss() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$1/eval.json"; }

# B0: a float model whose non-projection tensors are bf16-exact
# shellcheck disable=SC2086
run t -c "$ini" $S --set run.name=t --set model.lora_rank=0
[ $rc -eq 0 ] || fail "float run: $(tail -3 "$work/t.log")"
# shellcheck disable=SC2086
run b0 export -c "$ini" $S --set run.name=t --set model.lora_rank=0 \
	--dtype bf16 --out "$work/B0"
[ $rc -eq 0 ] || fail "export bf16: $(tail -3 "$work/b0.log")"

Q="--set model.hf_dir=$work/B0 --set model.quant=nf4"
Q="$Q --set model.lora_targets=head --set optimizer.lr=0"
# shellcheck disable=SC2086
run q -c "$ini" $S $Q --set run.name=q
[ $rc -eq 0 ] || fail "QLoRA run: $(tail -3 "$work/q.log")"
for d in nf4 fp32; do
	# shellcheck disable=SC2086
	run "x_$d" export -c "$ini" $S $Q --set run.name=q --dtype "$d" \
		--out "$work/F_$d"
	[ $rc -eq 0 ] || fail "export --dtype $d: $(tail -3 "$work/x_$d.log")"
done
cat "$work/x_nf4.log"
grep -Eq '"quant_method":[[:space:]]*"bitsandbytes"' "$work/F_nf4/config.json" ||
	fail "config.json has no bitsandbytes quantization_config"
grep -Eq '"llm_int8_threshold":[[:space:]]*6.0' "$work/F_nf4/config.json" ||
	fail "llm_int8_threshold is not written as a float"

# Q itself, F with quant = nf4 (same options: the head adapter is fresh,
# B = 0, as Q's after lr 0), F without quant, Q's fp32 export
# shellcheck disable=SC2086
run eq -c "$ini" $S $Q --set run.name=q --eval-only
# shellcheck disable=SC2086
run ef -c "$ini" $S $Q --set model.hf_dir="$work/F_nf4" --set run.name=f \
	--eval-only
# shellcheck disable=SC2086
run ed -c "$ini" $S --set model.lora_rank=0 --set model.hf_dir="$work/F_nf4" \
	--set run.name=d --eval-only
# shellcheck disable=SC2086
run e32 -c "$ini" $S --set model.lora_rank=0 \
	--set model.hf_dir="$work/F_fp32" --set run.name=e --eval-only
lq=$(loss q) lf=$(loss f) ld=$(loss d) l32=$(loss e)
echo "eval loss: Q $lq, F nf4 $lf, F as floats $ld, Q's fp32 export $l32"
[ -n "$lq" ] || fail "no eval loss of Q: $(tail -3 "$work/eq.log")"
[ "$lq" = "$lf" ] || fail "F with quant = nf4: loss $lf, Q's $lq"
[ -n "$ld" ] && [ "$ld" = "$l32" ] ||
	fail "F without quant: loss $ld, the dequantized export's $l32"
grep -q "NF4" "$work/ef.log" || fail "the NF4 load is not said"

# the same greedy ids from Q and from F (quant = nf4)
gen() { # gen OUT ARGS...
	out=$1
	shift
	# shellcheck disable=SC2086
	"$mgrun" generate -c "$ini" $S $Q "$@" --ids --prompt "5 17 42 99 3" \
		--greedy --max-new-tokens 12 >"$work/$out.out" 2>"$work/$out.err"
	rc=$?
}
gen gq --set run.name=q
gen gf --set model.hf_dir="$work/F_nf4" --set run.name=f
echo "greedy: Q $(cat "$work/gq.out"), F $(cat "$work/gf.out")"
[ -s "$work/gq.out" ] && cmp -s "$work/gq.out" "$work/gf.out" ||
	fail "greedy ids differ: $(cat "$work/gf.err")"

# hostile folders, each a copy of F with one thing wrong
hostile() { # hostile NAME PATTERN [quant]: the edit is done by the caller
	name=$1 pattern=$2
	set --
	[ "${3:-}" = quant ] && set -- --set model.quant=nf4
	# shellcheck disable=SC2086
	run "h_$name" -c "$ini" $S --set model.hf_dir="$work/H_$name" \
		--set run.name="h_$name" --set model.lora_targets=head "$@" \
		--eval-only
	[ $rc -ne 0 ] || fail "$name: accepted"
	grep -q "$pattern" "$work/h_$name.log" ||
		fail "$name: no '$pattern' in: $(tail -2 "$work/h_$name.log")"
	grep -q "$work/H_$name" "$work/h_$name.log" ||
		fail "$name: the folder's file is not named"
	echo "$name: $(grep -m1 "$pattern" "$work/h_$name.log" | cut -c1-240)"
}
copy() { cp -r "$work/F_nf4" "$work/H_$1"; }
copy gptq
sed -Ei 's/"quant_method":([[:space:]]*)"bitsandbytes"/"quant_method":\1"gptq"/' \
	"$work/H_gptq/config.json"
hostile gptq "quant_method gptq"
copy int8
sed -Ei 's/"load_in_8bit":([[:space:]]*)false/"load_in_8bit":\1true/' \
	"$work/H_int8/config.json"
hostile int8 "8-bit"
copy cut
f=$work/H_cut/model.safetensors
head -c $(($(wc -c <"$f") - 1000)) "$f" >"$f.cut" && mv "$f.cut" "$f"
hostile cut "H_cut/model.safetensors"
# a quant_state JSON of another shape (same byte length, so the file
# stays valid): q_proj [64, 64] claimed to be [46, 64]
copy shape
sed -i 's/"shape":\[64,64\]/"shape":[46,64]/' "$work/H_shape/model.safetensors"
hostile shape "q_proj.weight.quant_state.bitsandbytes__nf4': shape is not"
copy fp4
sed -i 's/"quant_type":"nf4"/"quant_type":"fp4"/' \
	"$work/H_fp4/model.safetensors"
hostile fp4 "quant_type fp4" quant

[ $fails -eq 0 ] || {
	echo "$fails failures"
	exit 1
}
echo "bitsandbytes folders: all checks passed"
