#!/bin/sh
# truncated.sh MGRUN PLUGIN.so INI WORK
# A truncated plugin (an interrupted copy) is refused with a message,
# not a SIGBUS inside dlopen: for a run (exit 2) and in --list-plugins,
# which warns about it and lists every other plugin, beyond 256 of them.
set -eu
mgrun=$1 so=$2 ini=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
head -c 5000 "$so" >"$work/libmg_trunc.so"
set +e
out=$("$mgrun" -c "$ini" --set dataset.path="$work/libmg_trunc.so" 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] || { echo "$out"; echo "run: exit $rc, expected 2"; exit 1; }
echo "$out" | grep -q "libmg_trunc.so is truncated: segment .* the file has 5000" ||
	{ echo "$out"; echo "run: no truncation message"; exit 1; }
i=0
while [ $i -lt 300 ]; do
	ln -s "$so" "$work/libmg_many$i.so"
	i=$((i + 1))
done
set +e
# The listing (stdout) and the warnings (stderr) apart: captured together,
# a warning can land inside a listing line when stdout's buffer fills.
out=$("$mgrun" --list-plugins --plugin-path "$work" 2>"$work/stderr")
rc=$?
set -e
err=$(cat "$work/stderr")
[ $rc -eq 0 ] || { echo "$out$err"; echo "--list-plugins: exit $rc"; exit 1; }
echo "$err" | grep -q "warning: .*libmg_trunc.so is truncated" ||
	{ echo "$err"; echo "--list-plugins: no warning"; exit 1; }
# 300 links to the mlp plugin plus the build tree's own
n=$(echo "$out" | grep -Ec "^  model +mlp ")
[ "$n" -eq 301 ] || { echo "$out"; echo "--list-plugins: mlp $n times, expected 301"; exit 1; }
for p in mnist single fsdp mobilenetv2; do
	echo "$out" | grep -Eq "^  [a-z]+ +$p " ||
		{ echo "$out"; echo "--list-plugins: $p missing"; exit 1; }
done
echo "truncated plugin refused; --list-plugins lists the $n others"
