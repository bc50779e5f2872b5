#!/bin/sh
# checkpoint_metadata.sh MGRUN ST_SETMETA INI WORK
# Every number in a checkpoint's metadata is range-checked on --resume:
# a bad value stops with the key, its value and the range named, exit 1,
# no crash; the untouched checkpoint still resumes.
set -eu
mgrun=$1 setmeta=$2 ini=$3 work=$4
rm -rf "$work"
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=m \
	--set run.max_steps=3 --set run.eval=false >/dev/null
ck="$work/m/checkpoint.safetensors"
cp "$ck" "$work/good"
resume() {
	"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=m \
		--set run.max_steps=6 --set run.eval=false --resume "$@" 2>&1
}
# bad KEY VALUE PATTERN: VALUE ("-" drops the key) must be refused.
bad() {
	cp "$work/good" "$ck"
	if [ "$2" = - ]; then "$setmeta" "$ck" "$1"; else "$setmeta" "$ck" "$1" "$2"; fi
	set +e
	out=$(resume)
	rc=$?
	set -e
	[ $rc -eq 1 ] || { echo "$out"; echo "$1=$2: exit $rc, expected 1"; exit 1; }
	echo "$out" | grep -Eq -- "$3" || { echo "$out"; echo "$1=$2: missing: $3"; exit 1; }
}
bad next_step -5 'metadata next_step = "-5" is not an integer in \[0, '
bad next_step "" 'metadata next_step = "" is not an integer'
bad next_step " 3" 'metadata next_step = " 3" is not an integer'
bad next_step 3x 'metadata next_step = "3x" is not an integer'
bad next_step 99999999999999999999 'next_step = "99999999999999999999" is not'
bad next_step 999999999999 'at step 999999999999, beyond this run.s 6 steps'
bad next_step - "metadata 'next_step' missing"
bad optimizer_step 9223372036854775807 'optimizer_step = "9223372036854775807" is not an integer in \[0, 3\]'
bad optimizer_step -1 'optimizer_step = "-1" is not'
bad skipped_steps 4 'skipped_steps = "4" is not an integer in \[0, 3\]'
bad good_steps 5000 'good_steps = "5000" is not'
bad loss_scale nan 'loss_scale = "nan" is not a number'
bad loss_scale 0 'loss_scale = "0" is not a number'
bad loss_scale 1e999 'loss_scale = "1e999" is not a number'
bad loss_scale "" 'loss_scale = "" is not a number'
bad seed -7 'seed = "-7" is not an unsigned'
bad seed 8 'written with seed 8, this run has seed 7'
bad format - 'is not an mgrun checkpoint'
cp "$work/good" "$ck"
resume | grep -q "resumed from .* at step 3"
echo "checkpoint metadata: bad values refused, good resumes"
