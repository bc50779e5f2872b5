#!/bin/sh
# checkpoint_seconds.sh MGRUN INI WORK
# run.checkpoint_every_s bounds what a kill -9 loses by time: in a long
# epoch (no epoch-end checkpoint yet), a run killed after a few seconds
# has a checkpoint from at most about that long ago, steps.csv holds its
# rows, and --resume continues there. Without it, nothing to resume.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() {
	echo "FAIL: $*"
	exit 1
}
# killed NAME SECONDS ARGS...: run, kill -9 once it trained for SECONDS.
killed() {
	name=$1 secs=$2
	shift 2
	"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name="$name" \
		--set run.max_steps=0 --set run.epochs=1 \
		--set dataset.limit_train=60000 --set run.log_every=1 \
		--set model.hidden=512,512 "$@" \
		>"$work/$name.out" 2>&1 &
	pid=$!
	i=0
	until grep -q "step 3/" "$work/$name.out"; do
		i=$((i + 1))
		[ $i -lt 600 ] && kill -0 $pid || { cat "$work/$name.out"; fail "$name did not start"; }
		sleep 0.1
	done
	sleep "$secs"
	kill -9 $pid
	wait $pid || true
}
killed timed 2 --set run.checkpoint_every_s=0.5
[ -f "$work/timed/checkpoint.safetensors" ] || fail "no checkpoint after 2 s"
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=timed \
	--set run.max_steps=0 --set run.epochs=1 --set dataset.limit_train=60000 \
	--set model.hidden=512,512 \
	--set run.checkpoint_every_s=0.5 --set run.stop_after=2 --resume \
	>"$work/resume.out" 2>&1 || { cat "$work/resume.out"; fail "--resume"; }
n=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$work/resume.out")
[ -n "$n" ] && [ "$n" -gt 0 ] || { cat "$work/resume.out"; fail "not resumed"; }
# the epoch (3750 steps) did not end: the checkpoint is a timed one
[ "$n" -lt 3750 ] || fail "resumed at $n, past the epoch"
rows=$(($(wc -l <"$work/timed/steps.csv") - 1))
[ "$rows" -eq $((n + 2)) ] || fail "steps.csv: $rows rows after resuming at $n for 2 steps"
killed untimed 2
[ ! -f "$work/untimed/checkpoint.safetensors" ] ||
	fail "a checkpoint without run.checkpoint_every_s (the test proves nothing)"
echo "ok: a checkpoint every 0.5 s; killed, resumed at step $n of the first epoch"
