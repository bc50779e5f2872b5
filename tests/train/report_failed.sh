#!/bin/sh
# report_failed.sh MGRUN INI WORK
# A run that fails after it began reporting leaves report.json saying so
# (status "failed" and the error), not "running" or no report at all:
# here the final checkpoint cannot be written (its temporary name is
# taken by a directory).
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work/r/checkpoint.safetensors.tmp"
rc=0
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=r \
	--set run.max_steps=4 >"$work/out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$work/out"; echo "FAIL: exit $rc, expected 1"; exit 1; }
grep -q '"status":	"failed"' "$work/r/report.json" ||
	{ echo "FAIL: report.json not marked failed"; exit 1; }
grep -q '"error":	"checkpoint at step 4: .*checkpoint.safetensors.tmp: Is a directory"' \
	"$work/r/report.json" || { cat "$work/r/report.json"; echo "FAIL: no error"; exit 1; }
# the run's numbers are still readable
"$mgrun" compare "$work/r" "$work/r" >"$work/cmp" 2>&1 ||
	{ cat "$work/cmp"; echo "FAIL: compare of the failed run"; exit 1; }
echo "ok: report.json of a run whose final checkpoint failed: failed, with the error"
# memory.csv is replaced only by a complete copy: when its temporary file
# cannot be written, the previous one stays and the error says why.
rm -rf "$work/r"
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=r \
	--set run.max_steps=4 >"$work/out" 2>&1 || { cat "$work/out"; echo "FAIL: run"; exit 1; }
cp "$work/r/memory.csv" "$work/memory.before"
mkdir "$work/r/memory.csv.tmp"
rc=0
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=r \
	--set run.max_steps=0 --set run.epochs=2 --resume >"$work/out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "memory.csv.tmp: cannot open: Is a directory" "$work/out" ||
	{ cat "$work/out"; echo "FAIL: exit $rc, or the reason not given"; exit 1; }
cmp -s "$work/memory.before" "$work/r/memory.csv" ||
	{ echo "FAIL: memory.csv changed"; exit 1; }
echo "ok: memory.csv kept when its replacement cannot be written"
