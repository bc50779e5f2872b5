#!/bin/sh
# run_lock.sh MGRUN INI WORK
# One mgrun at a time per run directory: a second run (or --resume) of a
# directory in use is refused naming the holder's pid; the lock of a
# process killed with SIGKILL is free at once and taken over with a note;
# a run that ended released it (no note).
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() {
	echo "FAIL: $*"
	exit 1
}
run() { # LOG ARGS...
	log=$1
	shift
	set +e
	"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=r \
		--set run.max_steps=0 --set run.epochs=5000 "$@" >"$work/$log" 2>&1
	rc=$?
	set -e
}
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=r \
	--set run.max_steps=0 --set run.epochs=5000 --set run.log_every=1 \
	--set run.checkpoint_every=1 >"$work/a.out" 2>&1 &
pid=$!
i=0
until grep -q "step 3/" "$work/a.out"; do
	i=$((i + 1))
	[ $i -lt 600 ] && kill -0 $pid || { cat "$work/a.out"; fail "run A did not start"; }
	sleep 0.1
done
run b.out --set run.stop_after=2
[ $rc -eq 1 ] || { cat "$work/b.out"; kill -9 $pid; fail "B: exit $rc, expected 1"; }
grep -q "run directory $work/r is in use by mgrun pid $pid on host" "$work/b.out" ||
	{ cat "$work/b.out"; kill -9 $pid; fail "B: holder not named"; }
run c.out --set run.stop_after=2 --resume
[ $rc -eq 1 ] && grep -q "in use by mgrun pid $pid" "$work/c.out" ||
	{ cat "$work/c.out"; kill -9 $pid; fail "--resume beside a running run"; }
kill -0 $pid || fail "A did not survive B and C"
echo "ok: a second run and a --resume refused while A runs"
kill -9 $pid
wait $pid || true
run d.out --set run.stop_after=2 --resume
[ $rc -eq 0 ] || { cat "$work/d.out"; fail "resume after kill -9: exit $rc"; }
grep -q "taking over the lock of mgrun pid $pid on host .* (killed?)" "$work/d.out" ||
	{ cat "$work/d.out"; fail "no take-over note"; }
echo "ok: the lock of a killed run taken over"
run e.out --set run.stop_after=2 --resume
[ $rc -eq 0 ] || { cat "$work/e.out"; fail "E: exit $rc"; }
if grep -q "taking over" "$work/e.out"; then
	fail "E: a take-over after a run that ended normally"
fi
rm "$work/r/mgrun.lock"
mkfifo "$work/r/mgrun.lock"
run f.out --set run.stop_after=2 --resume
[ $rc -eq 1 ] && grep -q "mgrun.lock: not a regular file" "$work/f.out" ||
	{ cat "$work/f.out"; fail "a FIFO as the lock file"; }
echo "ok: the lock released at the end; a FIFO as the lock refused"
