#!/bin/sh
# resume_identical.sh MGRUN CKPT_DIFF INI WORK [--set ...]
# Train 2N steps in one go; train N steps, stop (run.stop_after), and
# --resume to 2N. The
# resumed run must continue exactly: same per-step losses, accuracies,
# learning rates and gradient norms, and final checkpoints whose tensors
# are bit-identical (the metadata records the epochs' wall times, which
# differ from run to run).
set -eu
mgrun=$1 ckpt_diff=$2 ini=$3 work=$4
shift 4
rm -rf "$work"
n=20
"$mgrun" -c "$ini" "$@" --set run.out_dir="$work" --set run.name=full \
	--set run.max_steps=$((2 * n)) >/dev/null
"$mgrun" -c "$ini" "$@" --set run.out_dir="$work" --set run.name=split \
	--set run.max_steps=$((2 * n)) --set run.stop_after=$n >/dev/null
"$mgrun" -c "$ini" "$@" --set run.out_dir="$work" --set run.name=split \
	--set run.max_steps=$((2 * n)) --resume >"$work/resume.log"
grep -q "resumed from .* at step $n" "$work/resume.log"
# Columns 1-7: step, epoch, loss, accuracy, lr, grad_norm, skipped.
cut -d, -f1-7 "$work/full/steps.csv" >"$work/full.csv"
cut -d, -f1-7 "$work/split/steps.csv" >"$work/split.csv"
test "$(wc -l <"$work/full.csv")" -eq $((2 * n + 1))
diff "$work/full.csv" "$work/split.csv"
for prefix in param/ optim/; do
	"$ckpt_diff" "$work/full/checkpoint.safetensors" \
		"$work/split/checkpoint.safetensors" 0 $prefix
done
echo "resume: $((2 * n)) steps identical"
