#!/bin/sh
# fake_mgrun_dist.sh - stands in for mgrun in test_bench_scripts.sh: a run
# directory as a multi-GPU run leaves it (every memory category, the
# driver's peak; one key a line where ddp_scaling.sh greps, as mgrun
# writes it, and the arguments in args), or exit 3 when MG_FAKE_FAIL
# names the run. Steps take 0.02 s, or with MG_FAKE_SLOWER set
# 0.02 + 0.0025 x (run.gpus - 1) s.
for a; do
	case $a in
	run.out_dir=*) out=${a#*=} ;;
	run.name=*) name=${a#*=} ;;
	run.max_steps=*) steps=${a#*=} ;;
	run.gpus=*) gpus=${a#*=} ;;
	esac
done
case ${MG_FAKE_FAIL:-none} in "$name") echo "fake failure" >&2; exit 3 ;; esac
step_s=0.02
[ -n "${MG_FAKE_SLOWER:-}" ] &&
	step_s=$(awk -v g="${gpus:-1}" 'BEGIN { printf "%.4f", 0.02 + 0.0025 * (g - 1) }')
mkdir -p "$out/$name"
echo "$*" >"$out/$name/args" # for the scripts' option checks
{
	echo "step,epoch,step_s"
	i=0
	while [ $i -lt "$steps" ]; do
		echo "$i,0,$step_s"
		i=$((i + 1))
	done
} >"$out/$name/steps.csv"
cat >"$out/$name/report.json" <<JSON
{"run": {"trainable_parameters": 1000000000},
 "ranks": [{"memory_peak_bytes": {"total": 2097152, "params": 1048576,
 "grads": 1, "optimizer": 1, "gather": 0, "activations": 5,
 "input": 0, "other": 0, "libraries": 33554432, "host_pinned": 7,
 "host_pageable": 3221225472},
 "counters": {
  "h2d_bytes": 100},
 "comm": {
  "busy_s": 0.5,
  "exposed_s": 0.1},
 "device_memory": {"method": "nvml-process", "driver_peak": 9437184,
 "at_start": 1, "unaccounted": 1, "accounted_peak": 2097152}}]}
JSON
