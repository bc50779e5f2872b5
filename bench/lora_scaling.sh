#!/bin/bash
# lora_scaling.sh MGRUN OUT [GPUS...] - issue 15's scaling target: LoRA
# of the Llama-3-8B shape (bench/lora_scaling.ini) under ddp_ds and fsdp
# (full shard: the frozen bf16 base sharded and gathered a layer at a
# time) on 1, 2 and 4 GPUs (default: 1 2 4), each GPU its own micro-batch.
# Tokens/s of the job and per GPU, and the scaling efficiency: tokens/s
# on N GPUs / (N x the same strategy's tokens/s on 1 GPU). Timing as
# bench/bench_stats.py says (WARM steps, then 5 windows of STEPS steps,
# cut from steps.csv); memory: the largest rank's process peak as the
# driver sees it.
#
# Environment: MG_LORA_SCALING_STRATEGIES ("ddp_ds fsdp"),
# MG_LORA_SCALING_MB (8 per GPU), MG_LORA_SCALING_TARGETS (all),
# MG_LORA_SCALING_STEPS (4 per window), MG_LORA_SCALING_WARM (5),
# MG_LORA_SCALING_SETS (more --set), MG_LORA_SCALING_TIMEOUT (420 s a
# run). Exit status 1 when a run failed.
set -u
mgrun=$1 out=$2
shift 2
gpus=${*:-1 2 4}
strategies=${MG_LORA_SCALING_STRATEGIES:-ddp_ds fsdp}
mb=${MG_LORA_SCALING_MB:-8}
targets=${MG_LORA_SCALING_TARGETS:-all}
per=${MG_LORA_SCALING_STEPS:-4}
warm=${MG_LORA_SCALING_WARM:-5}
extra=${MG_LORA_SCALING_SETS:-}
limit=${MG_LORA_SCALING_TIMEOUT:-420}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
jsonl=$out/lora_scaling.jsonl
: >"$jsonl"
export NCCL_NVLS_ENABLE=0
status=0
steps=$((warm + 5 * per))

for s in $strategies; do
	for g in $gpus; do
		run=lora_scaling_${s}_$g
		rm -rf "/tmp/mgloras/$run"
		# shellcheck disable=SC2086
		timeout "$limit" "$mgrun" -c "$here/lora_scaling.ini" \
			--set run.gpus="$g" --set strategy.name="$s" \
			--set run.batch_size="$mb" \
			--set model.lora_targets="$targets" \
			--set dataset.train_samples=$((mb * g * (steps + 2))) \
			--set run.max_steps="$steps" $extra \
			--set run.out_dir=/tmp/mgloras --set run.name="$run" \
			>"$out/$run.log" 2>&1
		rc=$?
		mg='{"error": "mgrun failed"}'
		if [ $rc -eq 0 ] && [ -f "/tmp/mgloras/$run/report.json" ]; then
			mg=$(python3 "$here/bench_stats.py" run "/tmp/mgloras/$run" \
				--warm "$warm" --windows 5) || { mg='{"error": "no steps"}'; status=1; }
		else
			status=1
			tail -3 "$out/$run.log"
		fi
		printf '{"strategy": "%s", "gpus": %s, "mb": %s, "seq": 512, "targets": "%s", "mgrun": %s}\n' \
			"$s" "$g" "$mb" "$targets" "$mg" >>"$jsonl"
		echo "$s on $g GPUs: done"
	done
done

python3 - "$jsonl" "$here" <<'PY' | tee "$out/lora_scaling.md"
import json, sys
sys.path.insert(0, sys.argv[2])
import bench_stats as bs
rows = [json.loads(l) for l in open(sys.argv[1])]
one = {}
for r in rows:
    if r["gpus"] == 1 and "error" not in r["mgrun"]:
        one[r["strategy"]] = bs.per_second(r["mgrun"], r["mb"] * r["seq"])["median"]
print("| strategy | GPUs | micro-batch/GPU | targets | tok/s (job) | tok/s per GPU | scaling efficiency | driver GiB/rank (accounted) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    m = r["mgrun"]
    head = [r["strategy"], str(r["gpus"]), str(r["mb"]), r["targets"]]
    if "error" in m:
        print("| " + " | ".join(head + ["FAILED", "-", "-", "-"]) + " |")
        continue
    job = bs.per_second(m, r["mb"] * r["seq"] * r["gpus"])
    eff = (f"{100 * job['median'] / (r['gpus'] * one[r['strategy']]):.1f}%"
           if r["strategy"] in one else "- (no 1-GPU run)")
    mem = m["memory"]
    drv = "not measured" if mem["driver_peak"] is None else f"{mem['driver_peak'] / 2**30:.2f}"
    print("| " + " | ".join(head + [bs.fmt_rate(job), f"{job['median'] / r['gpus']:,.0f}",
                                    eff, f"{drv} ({mem['accounted_peak'] / 2**30:.2f})"]) + " |")
PY
exit $status
