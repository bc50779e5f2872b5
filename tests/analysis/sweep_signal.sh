#!/bin/sh
# sweep_signal.sh MGRUN BAD_PLUGIN_DIR WORKDIR - a sweep point whose
# child dies of a signal (a model plugin that raises SIGSEGV) is reported
# by the signal's name, not as "exit 139", on stdout, in the summary of
# failed runs, in the table and in sweep.json; the other point runs.
# A second sweep of a directory in use is refused.
set -u
mgrun=$1 bad=$2 work=$3
# Under AddressSanitizer the crash must stay a SIGSEGV (ASan would catch
# it and abort).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
cat >sweep.ini <<'INI'
[run]
max_steps = 3
batch_size = 16
checkpoint = false
eval = false
threads = 1
[model]
name = mlp
[dataset]
name = mnist
limit_train = 256
limit_test = 64
[sweep]
model.name = mlp, bad_model_crash
INI
"$mgrun" -c sweep.ini --plugin-path "$bad" --set run.out_dir="$work/runs" \
	>out.txt 2>&1
rc=$?
[ $rc -eq 1 ] || { cat out.txt; fail "exit $rc, expected 1"; }
grep -q "failed (killed by SIGSEGV)" out.txt || { cat out.txt; fail "signal not named"; }
grep -Eq "points/.*bad_model_crash.*: killed by SIGSEGV" out.txt ||
	{ cat out.txt; fail "summary without the signal"; }
if grep -q "exit 139" out.txt; then cat out.txt; fail "exit 139 shown"; fi
grep -q '"ended":	"killed by SIGSEGV"' runs/sweep/sweep.json ||
	fail "sweep.json without the signal"
echo "ok: a child's signal named"
# A sweep directory in use (its lock held, here by flock(1) for a
# process that wrote its pid) is refused naming that process; nothing
# runs.
if command -v flock >/dev/null; then
	echo "pid 4242 on host elsewhere" >runs/sweep/mgrun.lock
	flock runs/sweep/mgrun.lock sleep 30 &
	holder=$!
	sleep 0.5
	"$mgrun" -c sweep.ini --plugin-path "$bad" --set run.out_dir="$work/runs" \
		>busy.txt 2>&1
	rc=$?
	kill $holder
	[ $rc -eq 1 ] || { cat busy.txt; fail "busy sweep: exit $rc, expected 1"; }
	grep -q "sweep: run directory .*/runs/sweep is in use by mgrun pid 4242 on host elsewhere" busy.txt ||
		{ cat busy.txt; fail "busy sweep: holder not named"; }
	if grep -q "== sweep run" busy.txt; then fail "busy sweep ran points"; fi
	echo "ok: a sweep directory in use refused"
else
	echo "skipped: no flock(1) for the sweep lock case"
fi
