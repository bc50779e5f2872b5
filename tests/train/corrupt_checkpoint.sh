#!/bin/sh
# corrupt_checkpoint.sh MGRUN INI WORK
# A truncated or garbled checkpoint must stop --resume with a message
# naming the file and what is wrong, exit 1, and no crash.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=c \
	--set run.max_steps=3 >/dev/null
ck="$work/c/checkpoint.safetensors"
size=$(stat -c %s "$ck")
check() {
	set +e
	out=$("$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=c \
		--set run.max_steps=6 --resume 2>&1)
	rc=$?
	set -e
	[ $rc -eq 1 ] || { echo "$out"; echo "exit $rc, expected 1"; exit 1; }
	echo "$out" | grep -Eq "$1" || { echo "$out"; echo "missing: $1"; exit 1; }
}
cp "$ck" "$work/good"
head -c $((size / 2)) "$work/good" >"$ck"
check "checkpoint.safetensors: tensor '.*': data_offsets .* outside the .* data bytes"
head -c 5 "$work/good" >"$ck"
check "checkpoint.safetensors: 5 bytes, too short"
printf '\377\377\377\377\0\0\0\0' | cat - "$work/good" >"$ck"
check "checkpoint.safetensors: header length .* exceeds the file size"
rm -f "$ck"
check "checkpoint.safetensors: No such file"
echo "corrupt checkpoints refused"
