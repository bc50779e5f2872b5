#!/bin/sh
# watchdog.sh MPIEXEC|cuda:N MGRUN CKPT_DIFF INI WORK
# The collective watchdog (core/dist/watchdog.c) on CPU ranks under MPI
# (3 ranks of MPIEXEC), or with cuda:N on N GPUs of mgrun's own launcher
# over NCCL (the GPU machine: scripts/gpu.sh watchdog):
#  stall  rank 1 stalls before a collective of step 3 (the test hook
#         MG_TEST_STALL_*): the job must end non-zero within the timeout
#         and a margin, with a message from a waiting rank naming itself,
#         the collective and the step - never hang (every run is bounded
#         by timeout(1), so this test cannot hang either);
#  slow   every rank sleeps before each collective of step 3, so that
#         step lasts longer than the timeout while no single wait does:
#         the run must finish, with the same parameters as a run with the
#         watchdog off;
#  on     the default timeout and no stall: the same run as with the
#         watchdog off, tensor for tensor.
set -eu
mpiexec=$1 mgrun=$2 ckdiff=$3 ini=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
unset MG_TEST_STALL_RANK MG_TEST_STALL_STEP MG_TEST_STALL_S

fail() {
	echo "FAIL: $*"
	exit 1
}

# job NAME LIMIT [--set ...]: NP ranks of ddp_ds, at most LIMIT seconds
# (then killed: exit 124 or 137); the exit status in $rc.
case $mpiexec in
cuda:*) NP=${mpiexec#cuda:} ;;
*) NP=3 ;;
esac
job() {
	name=$1 limit=$2
	shift 2
	rc=0
	case $mpiexec in
	cuda:*)
		timeout -k 5 "$limit" "$mgrun" -c "$ini" --set run.device=cuda \
			--set run.gpus="$NP" --set run.precision=fp32 \
			--set run.max_steps=12 --set run.eval=false \
			--set strategy.name=ddp_ds --set run.out_dir="$work" \
			--set run.name="$name" "$@" >"$work/$name.log" 2>&1 ||
			rc=$?
		;;
	*)
		timeout -k 5 "$limit" "$mpiexec" -np "$NP" "$mgrun" -c "$ini" \
			--set strategy.name=ddp_ds --set run.out_dir="$work" \
			--set run.name="$name" "$@" >"$work/$name.log" 2>&1 ||
			rc=$?
		;;
	esac
}

# --- stall: a stuck rank stops the job, named by the ranks that waited.
T=5
log=$work/stall.log
(
	MG_TEST_STALL_RANK=1 MG_TEST_STALL_STEP=3 \
		job stall 300 --set run.collective_timeout_s=$T
	echo "$rc" >"$work/stall.rc"
) &
bg=$!
# The time the stall began (rank 1 says so), then the time the job ended.
i=0
until grep -q "MG_TEST_STALL: sleeping" "$log" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 2400 ] || ! kill -0 $bg 2>/dev/null; then
		wait $bg || true
		cat "$log"
		fail "the stall was not injected"
	fi
	sleep 0.1
done
t0=$(date +%s.%N)
wait $bg
t1=$(date +%s.%N)
rc=$(cat "$work/stall.rc")
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
tail -n 25 "$log"
case $rc in
0) fail "the job with a stalled rank exited 0" ;;
124 | 137) fail "the job with a stalled rank hung until timeout(1) killed it" ;;
esac
# The waiting ranks (0 and 2, never the stalled one) name themselves,
# the collective, the step and the timeout.
msg=$(grep "collective watchdog: rank" "$log" | head -n 1)
[ -n "$msg" ] || fail "no collective watchdog message"
echo "$msg" | grep -Eq "^\[rank ([0-9]+)\] error: collective watchdog: rank \1 of $NP: " ||
	fail "the message does not name a waiting rank: $msg"
echo "$msg" | grep -Eq ": (all_reduce|reduce_scatter|all_gather|broadcast|barrier|all_reduce_host|wait)[ (]" ||
	fail "the message does not name the collective: $msg"
echo "$msg" | grep -q "made no progress for [0-9.]* s at step 3 (training)" ||
	fail "the message does not name the step: $msg"
echo "$msg" | grep -q "(run.collective_timeout_s = $T)" ||
	fail "the message does not name the timeout: $msg"
grep -q "collective watchdog: rank 1 of" "$log" &&
	fail "the stalled rank reported itself as waiting"
# Within the timeout and a small margin of the stall: the rest of step 3
# up to the wait, the watchdog's poll and MPI's teardown.
awk -v t="$took" -v T=$T 'BEGIN { exit !(t <= T + 20) }' ||
	fail "the job ended $took s after the stall with a $T s timeout"
pgrep -f "run.name=stall" >/dev/null && fail "ranks left behind"
echo "stall: exit $rc $took s after the stall began (timeout $T s): $msg"

# --- slow: a step longer than the timeout, no wait longer than it.
job off 300 --set run.collective_timeout_s=0
[ "$rc" -eq 0 ] || { cat "$work/off.log"; fail "the run without watchdog failed"; }
# --- on: the default timeout, no stall: the same run as without it.
job on 300
[ "$rc" -eq 0 ] || { cat "$work/on.log"; fail "the run with the watchdog on failed (exit $rc)"; }
grep -Eq "collective_timeout_s += 600 +; default" "$work/on/report.json" ||
	fail "run.collective_timeout_s is not 600 by default in report.json"
for p in param/ optim/; do
	"$ckdiff" "$work/off/checkpoint.safetensors" \
		"$work/on/checkpoint.safetensors" 0 $p ||
		fail "the run with the watchdog on trained something else ($p)"
done
S=2 T=4
MG_TEST_STALL_RANK=all MG_TEST_STALL_STEP=3 MG_TEST_STALL_S=$S \
	job slow 300 --set run.collective_timeout_s=$T
[ "$rc" -eq 0 ] || { cat "$work/slow.log"; fail "the slow run was stopped (exit $rc)"; }
n=$(grep -c "^\[rank 0\] MG_TEST_STALL: sleeping" "$work/slow.log" || true)
[ "$((n * S))" -gt "$T" ] ||
	fail "step 3 stalled $n x $S s on rank 0: not longer than the $T s timeout (the test proves nothing)"
grep -q "collective watchdog" "$work/slow.log" && fail "watchdog message in the slow run"
"$ckdiff" "$work/off/checkpoint.safetensors" \
	"$work/slow/checkpoint.safetensors" 0 || fail "the slow run trained something else"
"$ckdiff" "$work/off/checkpoint.safetensors" \
	"$work/slow/checkpoint.safetensors" 0 optim/ || fail "optimizer state differs"
echo "slow: step 3 stalled $n x $S s a rank with a $T s timeout; finished, parameters equal to the run without watchdog"
echo PASS
