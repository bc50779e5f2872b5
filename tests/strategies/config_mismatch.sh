#!/bin/sh
# config_mismatch.sh MPIEXEC MGRUN INI WORK
# Ranks started with different configurations are refused at start-up,
# on every rank, naming the ranks and the keys that differ - not a hang
# in a collective of another size or an MPI_ERR_TRUNCATE. The same value
# given by --set or by the file, and keys that may differ per node
# (run.threads, run.log_every), are no difference.
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
m="$mgrun -c $ini --set strategy.name=ddp --set run.out_dir=$work --set run.max_steps=4"
# job NAME ARGS_OF_RANK_1 ...: rank 0 as the file says, ranks 1 and 2
# with the arguments given (MPMD), at most 60 s; exit status in $rc.
job() {
	name=$1
	shift
	set +e
	timeout 60 "$mpiexec" -np 1 $m --set run.name="$name" : \
		-np 2 $m --set run.name="$name" "$@" >"$work/$name.log" 2>&1
	rc=$?
	set -e
	[ $rc -ne 124 ] || { cat "$work/$name.log"; fail "$name: hung"; }
}
job batch --set run.batch_size=32
[ $rc -ne 0 ] || { cat "$work/batch.log"; fail "batch: exit 0"; }
grep -q "ranks 1, 2 of 3 were started with another configuration than rank 0 .*on rank 1: run.batch_size = 32 (rank 0: 16)" \
	"$work/batch.log" || { cat "$work/batch.log"; fail "batch: ranks or key not named"; }
echo "ok: another batch size refused"
job width --set model.hidden=40,24
[ $rc -ne 0 ] || { cat "$work/width.log"; fail "width: exit 0"; }
grep -q "model.hidden = 40,24 (rank 0: 48,24)" "$work/width.log" ||
	{ cat "$work/width.log"; fail "width: key not named"; }
echo "ok: another model size refused"
job same --set run.seed=11 --set run.threads=2 --set run.log_every=7
[ $rc -eq 0 ] || { cat "$work/same.log"; fail "same: exit $rc"; }
echo "ok: equal values from --set, per-node keys accepted"
