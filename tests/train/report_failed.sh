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
