#!/bin/sh
# resume_changed.sh MGRUN INI WORK
# --resume with a configuration that cannot continue the checkpoint is
# refused with the reason, exit 1, report.json untouched: fewer steps
# than done, a run already complete, a changed global batch or training
# set (the data order, as for the seed), an option that changes what is
# trained unless --resume-changed names it. The unchanged one resumes.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
run() {
	"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=r "$@" 2>&1
}
run --set run.stop_after=6 >/dev/null
cp "$work/r/report.json" "$work/report.before"
bad() {
	pat=$1
	shift
	set +e
	out=$(run --resume "$@")
	rc=$?
	set -e
	[ $rc -eq 1 ] || { echo "$out"; echo "$*: exit $rc, expected 1"; exit 1; }
	echo "$out" | grep -Eq -- "$pat" || { echo "$out"; echo "$*: missing: $pat"; exit 1; }
	cmp -s "$work/r/report.json" "$work/report.before" ||
		{ echo "$*: report.json overwritten"; exit 1; }
}
bad "is at step 6, beyond this run's 4 steps \(run.max_steps or run.epochs lowered\?\)" \
	--set run.max_steps=4
bad "written with a global batch of 16 .*this run has 32 \(resuming would change the data order\)" \
	--set run.batch_size=32
bad "written for another experiment: dataset.limit_train = 1024 then, 512 now" \
	--set dataset.limit_train=512
# what is trained (issue 35): each option named with both values, a
# deliberate change let through by --resume-changed
bad "optimizer.lr = 0.05 then, 0.1 now" --set optimizer.lr=0.1
bad "model.hidden = 48,24 then, 48,12 now" --set model.hidden=48,12
bad "run.precision = fp64 then, fp32 now" --set run.precision=fp32
set +e
out=$(run --resume-changed optimizer.lr)
rc=$?
set -e
[ $rc -eq 2 ] && echo "$out" | grep -q -- "--resume-changed goes with --resume" ||
	{ echo "$out"; echo "--resume-changed without --resume: exit $rc"; exit 1; }
run --resume --resume-changed optimizer.lr --set optimizer.lr=0.1 \
	--set run.stop_after=1 >"$work/named.log"
grep -q "resumed from .* at step 6" "$work/named.log"
run --resume --set optimizer.lr=0.1 >"$work/last.log"
grep -q "resumed from .* at step 7" "$work/last.log"
# finished (report.json says so): nothing left to resume
cp "$work/r/report.json" "$work/report.before"
bad "is at step 12 of 12: the run is complete, nothing to resume" \
	--set optimizer.lr=0.1
echo "resume with a changed configuration refused with its reason"
