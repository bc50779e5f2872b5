#!/bin/sh
# chain.sh MGRUN REPO WORK - the README's text chain at a few steps:
# conf/fortunes.ini trains, `mgrun generate --prompt` writes text,
# `mgrun export` makes the Hugging Face folder (with the tokenizer
# copied in), conf/fortunes_lora.ini LoRA-tunes it (hf_dir pointed at
# that folder), generates, and exports merged; conf/fortunes_qlora.ini
# QLoRA-tunes it (the base in NF4) and exports dequantized and merged,
# a folder that evaluates to the QLoRA run's loss. Skipped (77) without the
# fortunes package or .deps/tokenizers.
set -u
mgrun=$1 repo=$2 work=$3
for n in /usr/share/games/fortunes "$repo/.deps/tokenizers/llama2"; do
	[ -e "$n" ] || { echo "skipped: no $n"; exit 77; }
done
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
S="--set run.out_dir=$work --set run.threads=2 --set run.max_steps=3"
F="$repo/conf/fortunes.ini" L="$repo/conf/fortunes_lora.ini"
Q="$repo/conf/fortunes_qlora.ini"
hf=$work/fortunes/hf
step() { # step LOG ARGS...: stops the chain when a step fails
	log=$1
	shift
	"$mgrun" "$@" >"$work/$log" 2>&1 || {
		tail -20 "$work/$log"
		echo "FAIL: $log: exit $?"
		exit 1
	}
}
# shellcheck disable=SC2086
step fortunes.log -c "$F" $S
# shellcheck disable=SC2086
"$mgrun" generate -c "$F" $S --prompt "The meaning of life" \
	--max-new-tokens 8 --seed 1 >"$work/gen1.out" 2>"$work/gen1.err" ||
	fail "generate: $(cat "$work/gen1.err")"
[ -s "$work/gen1.out" ] || fail "generate printed no text"
# shellcheck disable=SC2086
step export.log export -c "$F" $S --out "$hf"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
	[ -s "$hf/$f" ] || fail "the export has no $f"
	grep -q "$hf/$f" "$work/export.log" || fail "export did not name $f"
done
# shellcheck disable=SC2086
step lora.log -c "$L" $S --set model.hf_dir="$hf"
grep -q "^test " "$work/lora.log" || fail "the LoRA run evaluated nothing"
# shellcheck disable=SC2086
"$mgrun" generate -c "$L" $S --set model.hf_dir="$hf" --max-new-tokens 8 \
	--prompt "### Instruction:
Name a color.

### Response:
" --seed 1 >"$work/gen2.out" 2>"$work/gen2.err" ||
	fail "generate (LoRA): $(cat "$work/gen2.err")"
[ -s "$work/gen2.out" ] || fail "generate (LoRA) printed no text"
# shellcheck disable=SC2086
step export2.log export -c "$L" $S --set model.hf_dir="$hf" \
	--out "$work/fortunes_lora/hf"
grep -q lora_ "$work/fortunes_lora/hf/model.safetensors" &&
	fail "the merged export holds adapters"
# shellcheck disable=SC2086
step qlora.log -c "$Q" $S --set model.hf_dir="$hf"
grep -q "frozen in NF4" "$work/qlora.log" || fail "the QLoRA base is not NF4"
# shellcheck disable=SC2086
step qlora_eval.log -c "$Q" $S --set model.hf_dir="$hf" --eval-only
# shellcheck disable=SC2086
step export3.log export -c "$Q" $S --set model.hf_dir="$hf" \
	--out "$work/fortunes_qlora/hf"
# shellcheck disable=SC2086
step qlora_hf.log -c "$L" $S --set run.name=qlora_hf --set model.lora_rank=0 \
	--set model.hf_dir="$work/fortunes_qlora/hf" --eval-only
a=$(sed -n 's/.*"loss": *\([-0-9.e+]*\).*/\1/p' \
	"$work/fortunes_qlora/eval.json")
b=$(sed -n 's/.*"loss": *\([-0-9.e+]*\).*/\1/p' "$work/qlora_hf/eval.json")
echo "qlora: run loss $a, dequantized merged export $b"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d
	exit !(a != "" && d <= 1e-4 * (a < 1 ? 1 : a)) }' ||
	fail "qlora: loss $a, from the export $b"
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "chain: all passed"
