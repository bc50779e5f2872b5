#!/bin/sh
# gpu_equivalence.sh MGRUN CKPT_DIFF CONFDIR FASHION_DIR WORK [N] - the CPU
# equivalence tests again on N GPUs (default 2) with NCCL, started by mgrun's own
# launcher (run.gpus), plus its supervision: a killed rank and a rank that
# fails at start must end the job with a message naming them. Run by
# scripts/gpu.sh on a machine with at least 2 GPUs.
set -u
mgrun=$1 ckdiff=$2 conf=$3 fashion=$4 work=$5 n=${6:-2}
rm -rf "$work"
mkdir -p "$work"
export NCCL_NVLS_ENABLE=0
fails=0
gpu="--set run.device=cuda --set dataset.dir=$fashion"

run() { # run NAME [--set ...]
	name=$1
	shift
	if ! "$mgrun" "$@" $gpu --set run.out_dir="$work" \
		--set run.name="$name" >"$work/$name.log" 2>&1; then
		tail -20 "$work/$name.log"
		echo "FAIL: $name did not finish"
		fails=$((fails + 1))
		return 1
	fi
}

same() { # same A B RTOL WHAT
	if "$ckdiff" "$work/$1/checkpoint.safetensors" \
		"$work/$2/checkpoint.safetensors" "$3"; then
		echo "PASS: $4"
	else
		echo "FAIL: $4"
		fails=$((fails + 1))
	fi
}

mlp=$conf/mlp.ini mbv2=$conf/mbv2.ini
# N GPUs x 16 == 1 GPU x 16N (fp64 and fp32, CUDA graphs on).
run single -c "$mlp" --set run.batch_size=$((16 * n)) &&
	run ds -c "$mlp" --set strategy.name=ddp_ds --set run.gpus=$n &&
	same single ds 1e-10 "ddp_ds on $n GPUs == 1 GPU, fp64"
run single32 -c "$mlp" --set run.batch_size=$((16 * n)) --set run.precision=fp32 &&
	run ds32 -c "$mlp" --set strategy.name=ddp_ds --set run.gpus=$n \
		--set run.precision=fp32 --set strategy.bucket_mb=0.002 &&
	same single32 ds32 1e-4 "ddp_ds on $n GPUs == 1 GPU, fp32, small buckets"
# ddp_rr == ddp_ds on MobileNetV2 (batch norm, dropout), fp32 and bf16.
for p in fp32 bf16; do
	run ds_$p -c "$mbv2" --set strategy.name=ddp_ds --set run.gpus=$n \
		--set run.precision=$p &&
		run rr_$p -c "$mbv2" --set strategy.name=ddp_rr \
			--set run.gpus=$n --set run.precision=$p &&
		same ds_$p rr_$p 1e-3 "ddp_rr == ddp_ds on $n GPUs, MobileNetV2 $p"
done
# ddp on N GPUs == 1 GPU with the same batch.
run one -c "$mlp" && run ddp -c "$mlp" --set strategy.name=ddp --set run.gpus=$n &&
	same one ddp 1e-10 "ddp on $n GPUs == 1 GPU, fp64"
# fsdp: every shard mode == 1 GPU (fp64; hybrid as 2 groups when n >= 4),
# within 1e-8: the gradient norm (for clipping) is summed in fp32 per
# shard, so the clip factor differs from one rank's in the 7th digit;
# fp32 with AdamW, and offload on 1 and n GPUs; each captured as one
# CUDA graph (the log says so).
captured() { # captured NAME
	if grep -q "step captured" "$work/$1.log"; then
		echo "PASS: $1 ran as a CUDA graph"
	else
		echo "FAIL: $1 was not captured as a CUDA graph"
		fails=$((fails + 1))
	fi
}
hyb=$((n >= 4 ? n / 2 : 1))
for mode in full grad_op none hybrid; do
	set -- --set strategy.name=fsdp --set strategy.shard=$mode
	[ $mode = hybrid ] && set -- "$@" --set strategy.shard_group_size=$hyb
	run fsdp_$mode -c "$mlp" --set run.gpus=$n "$@" &&
		same single fsdp_$mode 1e-8 "fsdp $mode on $n GPUs == 1 GPU, fp64" &&
		captured fsdp_$mode
done
adamw="--set optimizer.name=adamw --set optimizer.lr=0.003 --set run.precision=fp32"
run single_adamw -c "$mlp" --set run.batch_size=$((16 * n)) $adamw &&
	run fsdp_adamw -c "$mlp" --set run.gpus=$n --set strategy.name=fsdp $adamw &&
	same single_adamw fsdp_adamw 1e-4 "fsdp full on $n GPUs == 1 GPU, AdamW fp32"
run off1 -c "$mlp" --set run.batch_size=$((16 * n)) --set strategy.name=offload &&
	same single off1 1e-8 "offload on 1 GPU == 1 GPU, fp64" && captured off1
run offn -c "$mlp" --set run.gpus=$n --set strategy.name=offload &&
	same single offn 1e-8 "offload on $n GPUs == 1 GPU, fp64" && captured offn
run offn_adamw -c "$mlp" --set run.gpus=$n --set strategy.name=offload $adamw &&
	same single_adamw offn_adamw 1e-4 "offload on $n GPUs == 1 GPU, AdamW fp32"
# MobileNetV2 (batch norm, fp32 and bf16 with fp32 norm weights and
# master). With 8 samples a rank its batch norm is chaotic: the last-bit
# differences between an all-reduce and a reduce-scatter of the same sums
# grow about 100x a step, so several GPUs are compared after one step;
# one GPU (no reductions to round differently) after all four. In bf16
# ddp_ds sums gradients in bf16 (1 ulp = 0.4%) and the first update is
# as large as some depthwise weights, so a step differs by up to ~1%.
for p in fp32 bf16; do
	tol=1e-5
	[ $p = bf16 ] && tol=2e-2
	run ds1_$p -c "$mbv2" --set run.gpus=$n --set run.precision=$p \
		--set strategy.name=ddp_ds --set run.max_steps=1 || continue
	for s in "fsdp --set strategy.shard=full" \
		"fsdp --set strategy.shard=grad_op" \
		"fsdp --set strategy.reduce_dtype=fp32" "offload"; do
		tag=$(echo "$s" | tr -c 'a-z0-9\n' _ | cut -c1-40)
		# shellcheck disable=SC2086
		run mb_${tag}_$p -c "$mbv2" --set run.gpus=$n --set run.precision=$p \
			--set run.max_steps=1 --set strategy.name=$s &&
			same ds1_$p mb_${tag}_$p $tol "$s on $n GPUs == ddp_ds, MobileNetV2 $p, 1 step"
	done
done
run one_bf16 -c "$mbv2" --set run.batch_size=32 --set run.precision=bf16 &&
	for s in fsdp offload; do
		run one_${s}_bf16 -c "$mbv2" --set run.batch_size=32 \
			--set run.precision=bf16 --set strategy.name=$s &&
			same one_bf16 one_${s}_bf16 1e-5 "$s on 1 GPU == single, MobileNetV2 bf16, 4 steps"
	done
# Save on n GPUs with fsdp, resume on 1 GPU with ddp_ds.
run resume -c "$mlp" --set run.gpus=$n --set strategy.name=fsdp \
	--set run.stop_after=6 &&
	run resume -c "$mlp" --set run.batch_size=$((16 * n)) --resume &&
	same single resume 1e-10 "fsdp on $n GPUs, resumed on 1 GPU == 1 GPU"

# The example as a new user runs it: one epoch with evaluation.
if run example -c "$conf/../../conf/fashion_mnist_ddp.ini" --set run.gpus=$n \
	--set dataset.image_size=28 --set run.epochs=1; then
	echo "PASS: conf/fashion_mnist_ddp.ini on $n GPUs: $(grep -E 'test accuracy' "$work/example.log")"
fi

for ex in fsdp offload; do
	if run example_$ex -c "$conf/../../conf/fashion_mnist_$ex.ini" \
		--set run.gpus=$n --set dataset.image_size=28; then
		echo "PASS: conf/fashion_mnist_$ex.ini on $n GPUs: $(grep -E 'test accuracy' "$work/example_$ex.log" | tail -1)"
	fi
done

# Supervision: kill rank 1 mid-run.
"$mgrun" -c "$mlp" $gpu --set strategy.name=ddp_ds --set run.gpus=$n \
	--set run.max_steps=0 --set run.epochs=200 --set run.out_dir="$work" \
	--set run.name=victim >"$work/victim.log" 2>&1 &
job=$!
i=0
while [ "$(wc -l 2>/dev/null <"$work/victim/steps.csv" || echo 0)" -lt 20 ] &&
	[ $i -lt 600 ]; do
	i=$((i + 1))
	sleep 0.1
done
victim=$(pgrep -P $job | sed -n 2p)
t0=$(date +%s.%N)
kill -9 "$victim"
wait $job
rc=$?
t1=$(date +%s.%N)
if [ $rc -ne 0 ] && grep -q "rank 1 .*signal 9" "$work/victim.log" &&
	! pgrep -f "run.name=victim" >/dev/null; then
	echo "PASS: killed rank 1 ended the job in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s: $(grep 'rank 1 ' "$work/victim.log" | tail -1)"
else
	tail "$work/victim.log"
	echo "FAIL: killed rank (exit $rc)"
	fails=$((fails + 1))
fi
# A rank that cannot start (no third GPU on a 2-GPU machine).
n=$(nvidia-smi -L | wc -l)
"$mgrun" -c "$mlp" $gpu --set run.gpus=$((n + 1)) --set run.out_dir="$work" \
	--set run.name=toomany >"$work/toomany.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "rank $n " "$work/toomany.log"; then
	echo "PASS: rank $n without a GPU: $(grep "rank $n " "$work/toomany.log" | tail -1)"
else
	tail "$work/toomany.log"
	echo "FAIL: rank without a GPU (exit $rc)"
	fails=$((fails + 1))
fi
echo "gpu equivalence: $fails failure(s)"
[ $fails -eq 0 ]
