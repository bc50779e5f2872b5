#!/bin/sh
# kill_rank.sh MPIEXEC MGRUN INI WORK
# A rank that dies (SIGKILL, as the OOM killer sends) must end the whole
# job, within a bounded time, with a message naming it - never a hang.
set -eu
mpiexec=$1 mgrun=$2 ini=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
"$mpiexec" -np 4 "$mgrun" -c "$ini" --set strategy.name=ddp_ds \
	--set run.max_steps=0 --set run.epochs=50 \
	--set run.out_dir="$work" --set run.name=victim \
	>"$work/job.log" 2>&1 &
job=$!
# Wait for training to be under way (the steps file grows).
i=0
while [ "$(wc -l 2>/dev/null <"$work/victim/steps.csv" || echo 0)" -lt 3 ]; do
	i=$((i + 1))
	if [ $i -gt 600 ]; then
		cat "$work/job.log"
		echo "FAIL: training did not start"
		kill -9 $job 2>/dev/null || true
		exit 1
	fi
	sleep 0.1
done
# The ranks: processes with the run's name on their command line, other
# than the MPI launcher itself; kill the third.
victim=$(pgrep -f "run.name=victim" | grep -vx "$job" | sort -n | sed -n 3p)
[ -n "$victim" ] || { echo "FAIL: no rank found"; kill -9 $job; exit 1; }
t0=$(date +%s)
kill -9 "$victim"
rc=0
# Bounded wait: the job must end by itself.
i=0
while kill -0 $job 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 600 ]; then
		echo "FAIL: the job still runs 60 s after a rank was killed"
		pkill -9 -f "run.name=victim" || true
		exit 1
	fi
	sleep 0.1
done
wait $job || rc=$?
t1=$(date +%s)
cat "$work/job.log" | tail -n 20
test "$rc" -ne 0
grep -Eiq "rank [0-9]+.*(signal 9|killed)|killed.*rank" "$work/job.log"
pgrep -f "run.name=victim" && { echo "FAIL: ranks left behind"; exit 1; }
echo "PASS: job ended $((t1 - t0)) s after rank pid $victim was killed (exit $rc)"
