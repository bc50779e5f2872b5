#!/bin/sh
# many_keys.sh MGRUN WORK
# 100,000 unknown keys in one section: parsed in linear time (duplicate
# lookups are hashed; this took 1.5 minutes when they were a linear scan)
# and reported as the first 50 problems and a count, not 100,000 lines.
set -eu
mgrun=$1 work=$2
mkdir -p "$work"
ini=$work/many_keys.ini
awk 'BEGIN { print "[run]"; for (i = 0; i < 100000; i++) print "k" i " = 1";
	print "k5 = 2"; print "[model]\nname = mlp\n[dataset]\nname = mnist" }' >"$ini"
rc=0
out=$(timeout 30 "$mgrun" -c "$ini" --print-config 2>&1) || rc=$?
[ $rc -eq 2 ] || { echo "$out" | tail -5; echo "FAIL: exit $rc, expected 2 (124: too slow)"; exit 1; }
n=$(echo "$out" | wc -l)
[ "$n" -le 55 ] || { echo "FAIL: $n lines of output"; exit 1; }
echo "$out" | grep -q "^\.\.\. and 99951 more (the first 50 shown)$" ||
	{ echo "$out" | tail -3; echo "FAIL: no count of the rest"; exit 1; }
echo "$out" | grep -q "mgrun: 100001 configuration errors, nothing run" ||
	{ echo "FAIL: total"; exit 1; }
echo "ok: 100,001 problems in ${n} lines"
