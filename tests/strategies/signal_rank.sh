#!/bin/sh
# signal_rank.sh MPIEXEC MGRUN INI WORK
# SIGTERM to one rank of an MPI job (as a batch system or a launcher
# passing a signal on may deliver it): every rank stops after the same
# step - none is left waiting in a collective - the checkpoint and
# report.json ("interrupted") are written, and --resume under MPI
# continues from that step.
set -eu
mpiexec=$1 mgrun=$2 ini=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
fail() {
	echo "FAIL: $*"
	exit 1
}
args="-c $ini --set strategy.name=ddp_ds --set run.out_dir=$work
	--set run.name=sig --set run.max_steps=0 --set run.epochs=5000
	--set run.log_every=1"
"$mpiexec" -np 3 "$mgrun" $args >"$work/job.log" 2>&1 &
job=$!
i=0
until grep -q "step 3/" "$work/job.log"; do
	i=$((i + 1))
	[ $i -lt 600 ] && kill -0 $job ||
		{ cat "$work/job.log"; kill -9 $job; fail "training did not start"; }
	sleep 0.1
done
victim=$(pgrep -f "run.name=sig" | grep -vx "$job" | sort -n | sed -n 2p)
[ -n "$victim" ] || { kill -9 $job; fail "no rank found"; }
kill -TERM "$victim"
i=0
while kill -0 $job 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 600 ] || { pkill -9 -f "run.name=sig" || true; fail "job still runs 60 s after SIGTERM"; }
	sleep 0.1
done
rc=0
wait $job || rc=$?
tail -n 5 "$work/job.log"
[ $rc -ne 0 ] || fail "the job exited 0 after SIGTERM"
grep -q '"status":	"interrupted"' "$work/sig/report.json" ||
	fail "report.json not marked interrupted"
n=$(sed -n 's/.*interrupted by SIGTERM after step \([0-9]*\) of .*/\1/p' "$work/job.log")
[ -n "$n" ] || fail "rank 0 did not say where it stopped"
rows=$(($(wc -l <"$work/sig/steps.csv") - 1))
[ "$rows" -eq "$n" ] || fail "steps.csv has $rows rows, $n steps were done"
"$mpiexec" -np 3 "$mgrun" $args --set run.stop_after=2 --resume \
	>"$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "--resume failed"; }
grep -q "resumed from .* at step $n\$" "$work/resume.log" ||
	{ cat "$work/resume.log"; fail "not resumed at step $n"; }
echo "PASS: SIGTERM to rank 1 stopped all 3 ranks after step $n; resumed there"
