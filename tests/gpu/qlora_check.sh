#!/bin/sh
# qlora_check.sh MGRUN WORK - QLoRA (quant = nf4) on the GPU against the
# CPU, through conf/llama_tiny_qlora.ini. Run by scripts/gpu.sh qlora.
#   1. fp32 on CUDA trains; the CPU re-quantizes the same base from the
#      seed and evaluates the CUDA run's adapters (--eval-only on
#      run.device=cpu) to the same test loss within 1e-4 relative: the
#      CUDA dequantization decodes what the host quantized;
#   2. greedy ids of `mgrun generate` from that run are the same on
#      CUDA and on the CPU (decode dequantizes too);
#   3. bf16 on CUDA learns (test loss below 4.5, as tests/llama/lora.sh
#      asks on the CPU) and says its base is NF4.
# Exits 77 when no CUDA device is usable.
set -u
mgrun=$1 work=$2
ini=conf/llama_tiny_qlora.ini
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
B="--set run.out_dir=$work"
loss() { sed -n 's/.*"loss": *\([-0-9.e+]*\).*/\1/p' "$work/$1/eval.json"; }
"$mgrun" -c "$ini" $B --set run.name=f32 --set run.device=cuda \
	>"$work/f32.log" 2>&1 || {
	if grep -qi "no cuda\|cuda.*not available\|no usable" "$work/f32.log"; then
		echo "SKIPPED: no CUDA device"
		exit 77
	fi
	tail -20 "$work/f32.log"
	echo "FAIL: fp32 QLoRA on CUDA did not finish"
	exit 1
}
grep -q "frozen in NF4" "$work/f32.log" || fail "fp32: the base is not NF4"
"$mgrun" -c "$ini" $B --set run.name=f32 --set run.device=cuda --eval-only \
	>"$work/f32_eval.log" 2>&1 || fail "fp32 eval on CUDA"
a=$(loss f32)
"$mgrun" -c "$ini" $B --set run.name=f32 --set run.device=cpu --eval-only \
	>"$work/f32_cpu.log" 2>&1 || fail "fp32 eval on the CPU"
b=$(loss f32)
echo "qlora fp32: test loss on CUDA $a, the same adapters on the CPU $b"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d
	exit !(a != "" && b != "" && d <= 1e-4 * a) }' ||
	fail "fp32: CUDA $a against CPU $b"
for dev in cuda cpu; do
	"$mgrun" generate -c "$ini" $B --set run.name=f32 --set run.device=$dev \
		--ids --prompt "5 17 42 99 3" --greedy --max-new-tokens 16 \
		>"$work/gen.$dev" 2>"$work/gen.$dev.err" ||
		fail "generate on $dev: $(tail -3 "$work/gen.$dev.err")"
done
echo "greedy ids: cuda $(cat "$work/gen.cuda"), cpu $(cat "$work/gen.cpu")"
[ -s "$work/gen.cuda" ] && cmp -s "$work/gen.cuda" "$work/gen.cpu" ||
	fail "generate: CUDA and CPU ids differ"
"$mgrun" -c "$ini" $B --set run.name=bf16 --set run.device=cuda \
	--set run.precision=bf16 >"$work/bf16.log" 2>&1 ||
	fail "bf16 on CUDA: $(tail -5 "$work/bf16.log")"
c=$(grep '^epoch 1: ' "$work/bf16.log" | sed 's/.*test loss \([0-9.]*\).*/\1/')
grep -E "^epoch 1:|^  (params|gather|activations|total) " "$work/bf16.log"
awk -v l="$c" 'BEGIN { exit !(l != "" && l < 4.5) }' ||
	fail "bf16: test loss $c (must be below 4.5)"
[ $fails -eq 0 ] || { echo "qlora_check: $fails failure(s)"; exit 1; }
echo "qlora_check: ok"
