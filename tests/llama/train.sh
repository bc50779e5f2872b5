#!/bin/sh
# train.sh MGRUN INI WORK - the tiny llama learns: trained for 120 steps
# on synthetic rows whose next token follows the current one 3 times in
# 4, its held-out loss must fall from ln(256) = 5.55 below 2.8 (the data's
# floor is about 1.9) and its token accuracy rise above 70%; then
# --eval-only of the checkpoint must print the same loss.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
set -- --set run.out_dir="$work" --set run.name=tiny --set run.max_steps=120 \
	--set run.threads=2 --set run.log_every=40
"$mgrun" -c "$ini" "$@" >"$work/train.log" 2>&1 || {
	cat "$work/train.log"
	echo "FAIL: training did not finish"
	exit 1
}
cat "$work/train.log"
line=$(grep '^epoch 1: ' "$work/train.log")
loss=$(echo "$line" | sed 's/.*test loss \([0-9.]*\).*/\1/')
acc=$(echo "$line" | sed 's/.*test loss [0-9.]* ppl [0-9.]* acc \([0-9.]*\)%.*/\1/')
echo "test loss $loss, token accuracy $acc%"
awk -v l="$loss" -v a="$acc" 'BEGIN { exit !(l < 2.8 && a > 70) }' || {
	echo "FAIL: the model did not learn (loss $loss, accuracy $acc%)"
	exit 1
}
"$mgrun" -c "$ini" "$@" --eval-only >"$work/eval.log" 2>&1 || {
	cat "$work/eval.log"
	echo "FAIL: --eval-only"
	exit 1
}
cat "$work/eval.log"
grep -q "test loss $loss " "$work/eval.log" || {
	echo "FAIL: --eval-only does not reproduce the test loss $loss"
	exit 1
}
# Activation checkpointing: the same 20 steps (identical steps.csv, since
# CPU kernels are deterministic) with less activation memory.
for ac in false true; do
	"$mgrun" -c "$ini" "$@" --set run.name=ac_$ac --set run.max_steps=20 \
		--set model.activation_checkpointing=$ac >"$work/ac.log" 2>&1 || {
		cat "$work/ac.log"
		echo "FAIL: training with activation_checkpointing = $ac"
		exit 1
	}
	cut -d, -f1-7 "$work/ac_$ac/steps.csv" >"$work/ac_$ac.csv"
done
cmp "$work/ac_false.csv" "$work/ac_true.csv" || {
	echo "FAIL: activation checkpointing changed the training"
	exit 1
}
python3 - "$work/ac_false/report.json" "$work/ac_true/report.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["ranks"][0]["memory_peak_bytes"]["activations"]
        for p in sys.argv[1:])
print(f"activations: {a} bytes kept, {b} with checkpointing")
assert b < a, "activation checkpointing saved no activation memory"
PY
