#!/bin/sh
# cpu_warns.sh MGRUN INI WORK_DIR: [profile] enabled = true on the CPU
# warns once, trains to the end, and leaves no profile in report.json.
mgrun=$1
ini=$2
work=$3
rm -rf "$work"
out=$("$mgrun" -c "$ini" --set run.device=cpu --set run.max_steps=4 \
	--set profile.enabled=true --set profile.first_step=1 \
	--set profile.steps=2 --set run.out_dir="$work" --set run.name=cpu 2>&1)
rc=$?
fail() {
	printf '%s\n--- FAIL: %s\n' "$out" "$1"
	exit 1
}
[ $rc -eq 0 ] || fail "exit $rc"
n=$(printf '%s\n' "$out" |
	grep -c "warning: \[profile\] enabled = true: CUPTI profiling needs run.device = cuda; this run continues without it")
[ "$n" -eq 1 ] || fail "the warning was printed $n times, not once"
rep=$work/cpu/report.json
[ -f "$rep" ] || fail "no $rep"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["status"] == "finished" and "profile" not in r else 1)
' "$rep" || fail "report.json: not finished, or has a profile"
[ ! -e "$work/cpu/profile_memcpy.csv" ] || fail "profile_memcpy.csv written"
echo "PASS: CPU run with [profile] warned and has no profile"
