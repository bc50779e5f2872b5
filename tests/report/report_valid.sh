#!/bin/sh
# report_valid.sh PYTHON SCHEMA WORK NRANKS COMMAND...: train once with
# COMMAND (mgrun -c INI ..., or mpiexec -np N mgrun ...; the run folder's
# --set keys are appended), then validate the run directory's
# report.json, steps.csv and memory.csv (check_report.py --self-test).
set -eu
py=$1 schema=$2 work=$3 world=$4
shift 4
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
if ! "$@" --set run.out_dir="$work" --set run.name=run >"$work/log" 2>&1; then
	cat "$work/log"
	echo "FAIL: the run did not finish"
	exit 1
fi
exec "$py" "$(dirname "$0")/check_report.py" "$schema" "$work/run" \
	--world "$world" --self-test
