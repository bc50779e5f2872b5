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
# The example as a new user runs it: one epoch with evaluation.
if run example -c "$conf/../../conf/fashion_mnist_ddp.ini" --set run.gpus=$n \
	--set dataset.image_size=28 --set run.epochs=1; then
	echo "PASS: conf/fashion_mnist_ddp.ini on $n GPUs: $(grep -E 'test accuracy' "$work/example.log")"
fi

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
