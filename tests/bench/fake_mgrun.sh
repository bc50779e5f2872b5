#!/bin/sh
# fake_mgrun.sh - stands in for mgrun in test_like4like.sh: writes the
# run directory bench/like4like.py reads (steps.csv, report.json with the
# driver's view not measured), or fails when the name has "fail" in it.
for a; do
	case $a in
	run.out_dir=*) out=${a#*=} ;;
	run.name=*) name=${a#*=} ;;
	run.max_steps=*) steps=${a#*=} ;;
	esac
done
case $name in *fail*) echo "fake failure" >&2; exit 3 ;; esac
mkdir -p "$out/$name"
{
	echo "step,epoch,step_s"
	i=0
	while [ $i -lt "$steps" ]; do
		echo "$i,0,0.01"
		i=$((i + 1))
	done
} >"$out/$name/steps.csv"
cat >"$out/$name/report.json" <<JSON
{"ranks": [{"memory_peak_bytes": {"total": 1048576, "params": 1},
 "device_memory": {"method": "none", "driver_peak": null, "at_start": null,
 "unaccounted": null, "accounted_peak": 1048576}}]}
JSON
