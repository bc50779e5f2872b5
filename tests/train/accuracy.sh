#!/bin/sh
# accuracy.sh MGRUN INI WORK MIN_PERCENT [--set ...]
# Train as configured and require the final test accuracy >= MIN_PERCENT.
set -eu
mgrun=$1 ini=$2 work=$3 min=$4
shift 4
rm -rf "$work"
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=acc "$@" |
	tee "$work.log"
acc=$(sed -n 's/^test accuracy *\([0-9.]*\)%.*/\1/p' "$work.log" | tail -n 1)
[ -n "$acc" ] || { echo "no test accuracy in the output"; exit 1; }
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' ||
	{ echo "test accuracy $acc% < $min%"; exit 1; }
echo "test accuracy $acc% >= $min%"
