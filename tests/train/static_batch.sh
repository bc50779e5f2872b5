#!/bin/sh
# static_batch.sh MGRUN SMALL_INI WORKDIR - run.static_batch reads,
# copies and transforms one batch and trains on it every step: the
# report counts one batch read and copied and every step computed, and
# the kept batch is learned (its loss falls far below the first step's);
# with evaluation on it is refused, naming the options. run.tf32 on the
# CPU is refused, naming the option; off it changes nothing.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common="--set run.out_dir=$work --set run.checkpoint=false --set run.log_every=1000"
# shellcheck disable=SC2086
if "$mgrun" -c "$ini" $common --set run.static_batch=true --set run.name=eval \
	>"$work/eval.txt" 2>&1; then
	echo "FAIL: run.static_batch with run.eval = true accepted"
	exit 1
fi
grep -q "run.static_batch = true trains on one kept batch: set run.eval = false" \
	"$work/eval.txt"
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $common --set run.static_batch=true --set run.eval=false \
	--set run.max_steps=24 --set optimizer.warmup_steps=0 --set run.name=kept \
	>"$work/kept.txt" 2>&1 || { cat "$work/kept.txt"; exit 1; }
python3 - "$work/kept" <<'PY'
import csv, json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/report.json"))["ranks"][0]["counters"]
assert c["samples_read"] == 32, f"read {c['samples_read']} samples, not one batch of 32"
assert c["samples_computed"] == 24 * 32, f"computed {c['samples_computed']}"
assert c["h2d_bytes"] == 32 * (28 * 28 + 4), f"copied {c['h2d_bytes']} bytes"
rows = list(csv.DictReader(open(f"{d}/steps.csv")))
loss = [float(r["loss"]) for r in rows]
assert len(loss) == 24 and loss[-1] < 0.5 * loss[0], f"one batch not learned: {loss}"
print(f"static batch: 32 samples read, {c['samples_computed']} computed, "
      f"loss {loss[0]:.3f} -> {loss[-1]:.3f}")
PY
# shellcheck disable=SC2086
if "$mgrun" -c "$ini" $common --set run.tf32=true --set run.name=tf32 \
	>"$work/tf32.txt" 2>&1; then
	echo "FAIL: run.tf32 = true accepted on the CPU"
	exit 1
fi
grep -q "run.tf32 = true: TF32 is a tensor-core mode of CUDA GPUs" "$work/tf32.txt"
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $common --set run.tf32=false --set run.eval=false \
	--set run.max_steps=2 --set run.name=exact >"$work/exact.txt" 2>&1 ||
	{ cat "$work/exact.txt"; exit 1; }
echo "static_batch, tf32: ok"
