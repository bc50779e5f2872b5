#!/bin/bash
# sharding.sh MGRUN FASHION_DIR OUT [GPUS] - throughput and peak device
# memory per rank of ddp_ds, every fsdp shard mode and offload on
# MobileNetV2, batch 64 per GPU, on GPUS GPUs (default 4), beside PyTorch
# (FSDP2 / DDP / FSDP2 CPU offload: bench/torch_fsdp_mbv2.py) in the same
# call. mgrun reads the real Fashion-MNIST files through its pipeline;
# PyTorch trains on synthetic data already on the GPU.
#
# Step time: median over steps 11..STEPS. Memory: mgrun's accounted peak
# per category on rank 0 (report.json) and PyTorch's max_memory_allocated
# (the largest rank). Environment: MG_BENCH_STEPS (60), MG_BENCH_SIZE
# (224), MG_BENCH_PRECISIONS ("fp32 bf16").
set -u
mgrun=$1 fashion=$2 out=$3 g=${4:-4}
steps=${MG_BENCH_STEPS:-60}
size=${MG_BENCH_SIZE:-224}
precs=${MG_BENCH_PRECISIONS:-fp32 bf16}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
tsv=$out/sharding.tsv
: >"$tsv"
export NCCL_NVLS_ENABLE=0

# name | mgrun settings | PyTorch mode
configs="ddp_ds|--set strategy.name=ddp_ds|ddp
fsdp_full|--set strategy.name=fsdp --set strategy.shard=full|full
fsdp_grad_op|--set strategy.name=fsdp --set strategy.shard=grad_op|grad_op
fsdp_none|--set strategy.name=fsdp --set strategy.shard=none|ddp
fsdp_hybrid|--set strategy.name=fsdp --set strategy.shard=hybrid --set strategy.shard_group_size=$((g / 2))|hybrid
offload|--set strategy.name=offload|offload"

for prec in $precs; do
	while IFS='|' read -r name sets tmode; do
		run=shard_${name}_${prec}
		rm -rf "/tmp/mgshard/$run"
		# shellcheck disable=SC2086
		timeout 400 "$mgrun" -c "$here/sharding.ini" \
			--set dataset.dir="$fashion" --set run.gpus="$g" $sets \
			--set run.precision="$prec" \
			--set dataset.image_size="$size" --set run.epochs=1 \
			--set run.max_steps="$steps" --set run.log_every=1000 \
			--set run.out_dir=/tmp/mgshard --set run.name="$run" \
			>"$out/$run.log" 2>&1
		dir=/tmp/mgshard/$run
		mg="FAILED"
		if [ -f "$dir/report.json" ]; then
			cp "$dir/report.json" "$out/$run.json"
			mg=$(python3 - "$dir" "$g" <<'EOF'
import json, sys
d, g = sys.argv[1], int(sys.argv[2])
rows = [l.split(",") for l in open(d + "/steps.csv").read().split("\n")[1:] if l]
t = sorted(float(r[7]) for r in rows[10:])
med = t[len(t) // 2]
r = json.load(open(d + "/report.json"))
m = r["ranks"][0]["memory_peak_bytes"]
mib = lambda b: "%.1f" % (b / 2**20)
print("\t".join([f"{64 * g / med:.0f}", f"{1000 * med:.2f}",
                 mib(max(x["memory_peak_bytes"]["total"] for x in r["ranks"])),
                 mib(m["params"]), mib(m["grads"]), mib(m["optimizer"]),
                 mib(m["gather"]), mib(m["activations"]),
                 mib(m["host_pinned"])]))
EOF
)
		fi
		tr=$(timeout 300 python3 -m torch.distributed.run --standalone \
			--nproc_per_node="$g" "$here/torch_fsdp_mbv2.py" "$tmode" \
			"$size" "$prec" 2>"$out/torch_${run}.err" |
			python3 -c 'import json,sys
r = json.loads(sys.stdin.read() or "{}")
print("%s\t%s" % (r.get("img_s_total", "FAILED"), r.get("peak_mib_rank", "-")))')
		[ -s "$out/torch_${run}.err" ] && tail -2 "$out/torch_${run}.err"
		printf '%s\t%s\t%s\t%s\t%s\n' "$prec" "$name" "$tmode" "$mg" \
			"$tr" | tee -a "$tsv"
	done <<<"$configs"
done

# One table: mgrun img/s and memory against PyTorch's for the same mode.
awk -F'\t' '
BEGIN {
	print "| precision | strategy | img/s | ms/step | peak MiB/rank | params | grads | optimizer | gather | activations | host pinned | PyTorch (" "mode) img/s | PyTorch peak MiB | speed ratio | memory ratio |"
	print "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
}
NF < 14 { printf "| %s | %s | FAILED |\n", $1, $2; next }
{
	sr = ($13 + 0 > 0) ? sprintf("%.2fx", $4 / $13) : "-"
	mr = ($14 + 0 > 0) ? sprintf("%.2f", $6 / $14) : "-"
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |\n", $1, $2, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $3, $14, sr, mr
}' "$tsv" | tee "$out/sharding.md"
