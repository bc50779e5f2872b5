#!/bin/sh
# signals.sh MGRUN INI WORK
# SIGTERM or SIGINT during a run: the step under way finishes, then a
# checkpoint, steps.csv (one row per step done) and report.json (status
# "interrupted") are written and mgrun exits with 128 + the signal;
# --resume continues at that step. A second signal ends the process at
# once, whatever it was doing.
set -eu
mgrun=$1 ini=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() {
	echo "FAIL: $*"
	exit 1
}
# start NAME SIGNAL ARGS...: a long run in the background (SIGNAL not
# ignored, as it is for a background job of a script), its pid in $pid,
# once it printed the progress line of step 3.
start() {
	name=$1 sig=$2
	shift 2
	env --default-signal="$sig" "$mgrun" -c "$ini" --set run.out_dir="$work" \
		--set run.name="$name" --set run.max_steps=0 \
		--set run.epochs=5000 --set run.log_every=1 "$@" \
		>"$work/$name.out" 2>"$work/$name.err" &
	pid=$!
	i=0
	until grep -q "step 3/" "$work/$name.out" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 600 ] || { kill -9 $pid; cat "$work/$name.err"; fail "$name did not start"; }
		kill -0 $pid 2>/dev/null || { cat "$work/$name.err"; fail "$name ended early"; }
		sleep 0.1
	done
}
# finish NAME: wait for $pid (at most 60 s), its exit status in $rc.
finish() {
	i=0
	while kill -0 $pid 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 600 ] || { kill -9 $pid; fail "$1 still runs 60 s after the signal"; }
		sleep 0.1
	done
	rc=0
	wait $pid || rc=$?
}
# graceful NAME SIG CODE: stopped by one SIG, exit CODE; everything
# written; --resume continues at the step it stopped before.
graceful() {
	name=$1 sig=$2 code=$3
	start "$name" "$sig"
	kill -"$sig" $pid
	finish "$name"
	cat "$work/$name.err"
	[ $rc -eq "$code" ] || fail "$name: exit $rc, expected $code"
	grep -q '"status":	"interrupted"' "$work/$name/report.json" ||
		fail "$name: report.json not marked interrupted"
	n=$(sed -n "s/.*interrupted by SIG$sig after step \([0-9]*\) of .*/\1/p" \
		"$work/$name.out")
	[ -n "$n" ] || { cat "$work/$name.out"; fail "$name: no 'interrupted by SIG$sig after step N'"; }
	rows=$(($(wc -l <"$work/$name/steps.csv") - 1))
	[ "$rows" -eq "$n" ] || fail "$name: steps.csv has $rows rows, $n steps were done"
	last=$(tail -1 "$work/$name/steps.csv" | cut -d, -f1)
	[ "$last" -eq $((n - 1)) ] || fail "$name: last row is step $last, not $((n - 1))"
	# the interrupted report is a valid one (docs/report.schema.json)
	if python3 -c "import jsonschema" 2>/dev/null; then
		python3 "$src/tests/report/check_report.py" \
			"$src/docs/report.schema.json" "$work/$name" ||
			fail "$name: report not valid"
	fi
	"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name="$name" \
		--set run.max_steps=0 --set run.epochs=5000 --set run.stop_after=2 \
		--resume >"$work/$name.resume" 2>&1 ||
		{ cat "$work/$name.resume"; fail "$name: --resume failed"; }
	grep -q "resumed from .* at step $n\$" "$work/$name.resume" ||
		{ cat "$work/$name.resume"; fail "$name: not resumed at step $n"; }
	echo "ok: $name: SIG$sig after step $n, exit $code, resumed"
}
graceful term TERM 143
graceful int INT 130

# A second SIGTERM while the first one's step and checkpoint are under
# way (a slow step: about 0.2 s, a checkpoint of about 90 MB) ends the
# process at once.
start twice TERM --set model.hidden=2048,2048 --set run.batch_size=128 \
	--set run.eval=false
kill -TERM $pid
sleep 0.05
kill -TERM $pid 2>/dev/null || true
finish twice
grep -q "second signal, exiting at once" "$work/twice.err" ||
	{ cat "$work/twice.err"; fail "twice: no word of the second signal"; }
[ $rc -eq 143 ] || fail "twice: exit $rc, expected 143 (killed by SIGTERM)"
if grep -q '"status":	"interrupted"' "$work/twice/report.json" 2>/dev/null; then
	fail "twice: finished the graceful stop after a second signal"
fi
echo "ok: a second signal ends the run at once"
