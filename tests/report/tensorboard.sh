#!/bin/sh
# tensorboard.sh PYTHON WORK EVALS COMMAND...: train with COMMAND, then read
# the run's TensorBoard event file back with the test's own reader
# (tensorboard_check.py), expecting EVALS evaluations in it; then train
# again in the same folder and check the earlier run's file was replaced.
set -eu
py=$1 work=$2 evals=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
for pass in 1 2; do
	if ! "$@" --set run.out_dir="$work" --set run.name=run >"$work/log" 2>&1; then
		cat "$work/log"
		echo "FAIL: the run did not finish (pass $pass)"
		exit 1
	fi
	sleep 1 # a new second: the next file gets another name
done
exec "$py" "$(dirname "$0")/tensorboard_check.py" "$work/run" "$evals"
