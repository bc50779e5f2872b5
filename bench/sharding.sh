#!/bin/bash
# sharding.sh MGRUN FASHION_DIR OUT [GPUS] - throughput and peak device
# memory per rank of ddp_ds, every fsdp shard mode and offload on
# MobileNetV2, batch 64 per GPU, on GPUS GPUs (default 4), beside PyTorch
# in its best working configuration (FSDP2 with a bf16
# MixedPrecisionPolicy / DDP with bf16_compress_hook / FSDP2 CPU offload:
# bench/torch_fsdp_mbv2.py) in the same call. mgrun reads the real
# Fashion-MNIST files through its pipeline; PyTorch trains on synthetic
# data already on the GPU.
#
# Both sides as bench/bench_stats.py says: 5 windows of (STEPS - 10) / 5
# steps after 10 warm-up steps, median window and slowest-fastest; ratios
# against PyTorch's median and fastest window. Memory per rank (the
# largest rank): the process's peak as the driver sees it on both sides,
# beside mgrun's accounted peak (and its categories on rank 0) and
# PyTorch's max_memory_reserved / allocated. Environment: MG_BENCH_STEPS
# (60), MG_BENCH_SIZE (224), MG_BENCH_PRECISIONS ("fp32 bf16"). Exit
# status 1 when a run failed.
set -u
mgrun=$1 fashion=$2 out=$3 g=${4:-4}
steps=${MG_BENCH_STEPS:-60}
size=${MG_BENCH_SIZE:-224}
precs=${MG_BENCH_PRECISIONS:-fp32 bf16}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
jsonl=$out/sharding.jsonl
: >"$jsonl"
export NCCL_NVLS_ENABLE=0
status=0

# name | mgrun settings | PyTorch mode
configs="ddp_ds|--set strategy.name=ddp_ds|ddp
fsdp_full|--set strategy.name=fsdp --set strategy.shard=full|full
fsdp_grad_op|--set strategy.name=fsdp --set strategy.shard=grad_op|grad_op
fsdp_none|--set strategy.name=fsdp --set strategy.shard=none|ddp
fsdp_hybrid|--set strategy.name=fsdp --set strategy.shard=hybrid --set strategy.shard_group_size=$((g / 2))|hybrid
offload|--set strategy.name=offload|offload"

# table JSONL [--rows]: the markdown table of mgrun against PyTorch for the
# same mode, from sharding.jsonl lines (--rows: without the header)
table() {
	python3 - "$1" "$here" "${2:-}" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
import bench_stats as bs
mib = lambda b: "not measured" if b is None else f"{b / 2**20:.1f}"
if sys.argv[3] != "--rows":
    print("| precision | strategy | img/s | peak MiB/rank: driver (accounted) | params | grads | optimizer | gather | activations | libraries | host pinned | PyTorch (mode, policy) img/s | PyTorch MiB/rank: driver (reserved / allocated) | vs median | vs fastest |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for line in open(sys.argv[1]):
    r = json.loads(line)
    m, t = r["mgrun"], r["torch"]
    if "error" in m:
        print(f"| {r['prec']} | {r['name']} | FAILED |"); continue
    rate = bs.per_second(m, 64 * r["world"])
    c = m["memory"]["categories"]
    row = [r["prec"], r["name"], bs.fmt_rate(rate),
           f"{mib(m['memory']['driver_peak'])} ({mib(m['memory']['accounted_peak'])})"]
    row += [mib(c[k]) for k in ("params", "grads", "optimizer", "gather",
                                "activations", "libraries", "host_pinned")]
    if "error" in t:
        row += ["FAILED", "-", "-", "-"]
    else:
        q = bs.ratios(rate, t["img_s_total"])
        row += [f"{bs.fmt_rate(t['img_s_total'])} ({r['tmode']}, {t['policy']})",
                f"{mib(t['driver_peak_rank'])} ({mib(t['max_reserved_rank'])} / {mib(t['max_allocated_rank'])})",
                f"{q['vs_median']:.2f}x", f"{q['vs_fastest']:.2f}x"]
    print("| " + " | ".join(row) + " |")
PY
}

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
			>"$out/$run.log" 2>&1 || { status=1; tail -3 "$out/$run.log"; }
		mg='{"error": "mgrun failed"}'
		if [ -f "/tmp/mgshard/$run/report.json" ]; then
			cp "/tmp/mgshard/$run/report.json" "$out/$run.json"
			mg=$(python3 "$here/bench_stats.py" run "/tmp/mgshard/$run" \
				--warm 10 --windows 5) || { mg='{"error": "no steps"}'; status=1; }
		fi
		tr=$(timeout 300 python3 -m torch.distributed.run --standalone \
			--nproc_per_node="$g" "$here/torch_fsdp_mbv2.py" "$tmode" \
			"$size" "$prec" 5 $(((steps - 10) / 5)) \
			2>"$out/torch_${run}.err" | grep '^{' | tail -1)
		[ -n "$tr" ] || { tr='{"error": "PyTorch failed"}'; status=1; grep -E "Error|error:" "$out/torch_${run}.err" | grep -v "elastic/errors" | tail -3; }
		printf '{"prec": "%s", "name": "%s", "tmode": "%s", "world": %s, "mgrun": %s, "torch": %s}\n' \
			"$prec" "$name" "$tmode" "$g" "$mg" "$tr" >>"$jsonl"
		# the row now, so a run cut short still shows what it measured
		table <(tail -n 1 "$jsonl") --rows
	done <<<"$configs"
done

# One table: mgrun against PyTorch for the same mode.
table "$jsonl" | tee "$out/sharding.md"
exit $status
