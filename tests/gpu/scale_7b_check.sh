#!/bin/sh
# scale_7b_check.sh MGRUN WORK [N] - issue 16's GPU test at full size: a
# Llama-2-7B-shaped model (random weights, bench/fsdp_llm.ini's rows of
# 512 synthetic tokens, bf16 compute over fp32 master weights) trained a
# few steps on N GPUs (default 4) in every fsdp shard mode that fits and
# with offload, each against ONE GPU with the optimizer offloaded to the
# host (the only way 7B trains on one 80 GB GPU) and N times the batch.
#
# The data is one global batch seen MG_7B_STEPS times (train_samples =
# the global batch), so the loss falls step by step as the model learns
# it: step 1's loss checks the sharded forward, the later ones the
# sharded updates. Each step's loss must match the one-GPU run within
# MG_7B_TOL (0.02 nats: bf16 GEMMs of a different row count and another
# reduction order), and the one-GPU loss must fall by at least ten times
# that over the run, or the check could not see a wrong update.
# fsdp none holds every parameter's fp32 master and AdamW state on every
# GPU (7B x 12 bytes, 81 GB, beside 13.5 GB of bf16 weights): it joins by
# default, with update_in_backward (no fp32 gradient held), only where
# every GPU has 135 GiB or more (H200), and is left out on 80 GB GPUs.
# Environment: MG_7B_MODES, MG_7B_MB (2 rows a GPU), MG_7B_STEPS (4),
# MG_7B_LR (5e-5), MG_7B_TOL, MG_7B_TIMEOUT (480 s a run), MG_7B_SETS
# (more --set for every run: a smaller model tries the script on a CPU).
set -u
mgrun=$1 work=$2 n=${3:-4}
big=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits \
	2>/dev/null | sort -n | head -1)
none=""
[ "${big:-0}" -ge 138240 ] && none=none_ubw
modes=${MG_7B_MODES:-full full_ubw grad_op hybrid offload $none}
mb=${MG_7B_MB:-2}
steps=${MG_7B_STEPS:-4}
tol=${MG_7B_TOL:-0.02}
limit=${MG_7B_TIMEOUT:-480}
here=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
export NCCL_NVLS_ENABLE=0
fails=0
global=$((mb * n))

run() { # run NAME GPUS BATCH [--set ...]
	name=$1 g=$2 b=$3
	shift 3
	t0=$(date +%s)
	# shellcheck disable=SC2086
	if ! timeout "$limit" "$mgrun" -c "$here/bench/fsdp_llm.ini" \
		--set run.gpus="$g" --set run.batch_size="$b" \
		--set run.epochs="$steps" --set dataset.train_samples="$global" \
		--set model.activation_checkpointing=true \
		--set optimizer.lr="${MG_7B_LR:-5e-5}" \
		--set optimizer.max_grad_norm=0 --set run.log_every=1 \
		--set run.out_dir="$work" --set run.name="$name" "$@" \
		${MG_7B_SETS:-} \
		>"$work/$name.log" 2>&1; then
		tail -5 "$work/$name.log"
		echo "FAIL: $name did not finish"
		fails=$((fails + 1))
		return 1
	fi
	# the wall time, and how much of it the strategy's setup took
	setup=$(grep -o 'setup took [0-9.]* s' "$work/$name.log" | head -1)
	echo "$name: $(($(date +%s) - t0)) s${setup:+ ($setup)}"
}

# losses RUN: the loss column of steps.csv, one a line
losses() { awk -F, 'NR > 1 { print $3 }' "$work/$1/steps.csv"; }

run ref_offload_1 1 "$global" --set strategy.name=offload || {
	echo "scale_7b_check: no reference"
	exit 1
}
ref=$(losses ref_offload_1 | tr '\n' ' ')
echo "1 GPU offload, batch $global: losses $ref"
drop=$(echo "$ref" | awk -v t="$tol" -v s="$steps" '{
	if (NF != s) { print "steps " NF " of " s; exit }
	if ($1 - $NF < 10 * t) print "falls " $1 - $NF " < " 10 * t }')
if [ -n "$drop" ]; then
	echo "FAIL: the reference cannot tell a wrong update ($drop)"
	fails=$((fails + 1))
fi

for m in $modes; do
	case $m in
	full | grad_op | hybrid) set -- --set strategy.shard="$m" ;;
	full_ubw | grad_op_ubw | none_ubw) set -- --set strategy.shard="${m%_ubw}" \
		--set strategy.update_in_backward=true ;;
	none) set -- --set strategy.shard=none ;;
	offload) set -- --set strategy.name=offload ;;
	*) echo "FAIL: unknown mode $m"; fails=$((fails + 1)); continue ;;
	esac
	[ "$m" = hybrid ] && set -- "$@" --set strategy.shard_group_size=$((n / 2))
	run "$m" "$n" "$mb" "$@" || continue
	got=$(losses "$m" | tr '\n' ' ')
	# shellcheck disable=SC2046
	set -- $(awk -F, -f "$here/tests/common/loss_diff.awk" \
		"$work/ref_offload_1/steps.csv" "$work/$m/steps.csv")
	worst=$3
	[ "$1" = "$steps" ] && [ "$2" = "$steps" ] || worst=steps
	if [ "$worst" != steps ] && awk -v w="$worst" -v t="$tol" \
		'BEGIN { exit !(w <= t) }'; then
		echo "PASS: $m on $n GPUs (losses $got) == 1 GPU offload, worst step $worst"
	else
		echo "FAIL: $m on $n GPUs: losses $got against $ref (worst $worst, limit $tol)"
		fails=$((fails + 1))
	fi
done
echo "scale_7b_check: $fails failure(s)"
[ $fails -eq 0 ]
