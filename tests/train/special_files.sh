#!/bin/sh
# special_files.sh MGRUN INI WORK
# A FIFO where a dataset file or the checkpoint is expected is refused
# at once (not an open() that blocks forever); a symlink loop is named
# as one, not as a missing file.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work/ds"
src=/usr/share/datasets/fashion-mnist
for f in train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
	t10k-labels-idx1-ubyte.gz; do
	ln -s "$src/$f" "$work/ds/$f"
done
mkfifo "$work/ds/train-images-idx3-ubyte.gz"
ln -s loop2 "$work/ds/loop1"
ln -s loop1 "$work/ds/loop2"
# expect CODE PATTERN ARGS...: mgrun (limited to 60 s) exits CODE saying PATTERN.
expect() {
	code=$1 pat=$2
	shift 2
	set +e
	out=$(timeout 60 "$mgrun" -c "$ini" --set run.out_dir="$work" \
		--set run.name=s "$@" 2>&1)
	rc=$?
	set -e
	[ $rc -eq "$code" ] || { echo "$out"; echo "$*: exit $rc, expected $code"; exit 1; }
	echo "$out" | grep -Eq -- "$pat" || { echo "$out"; echo "$*: missing: $pat"; exit 1; }
}
expect 1 "train-images-idx3-ubyte.gz: not a regular file" --set dataset.dir="$work/ds"
expect 1 "train_images: .*loop1: Too many levels of symbolic links" \
	--set dataset.dir="$work/ds" --set dataset.train_images=loop1
expect 0 "test accuracy|wall time" --set run.max_steps=2
rm "$work/s/checkpoint.safetensors"
mkfifo "$work/s/checkpoint.safetensors"
expect 1 "checkpoint.safetensors: not a regular file" --set run.max_steps=4 --resume
# steps.csv as a FIFO: neither trimmed on --resume nor truncated by a
# new run; refused without blocking.
rm "$work/s/checkpoint.safetensors"
expect 0 "wall time" --set run.max_steps=2
rm "$work/s/steps.csv"
mkfifo "$work/s/steps.csv"
expect 1 "steps.csv: not a regular file" --set run.max_steps=4 --resume
expect 1 "steps.csv: not a regular file" --set run.max_steps=2
echo "FIFOs and symlink loops refused with their names"
