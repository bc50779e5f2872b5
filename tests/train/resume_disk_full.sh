#!/bin/sh
# resume_disk_full.sh MGRUN INI WORK
# --resume when steps.csv cannot be rewritten (the file size limit stands
# in for a full disk): mgrun stops with the reason, steps.csv is left as
# it was, no .tmp is left behind. And a steps.csv that lost its header
# and its last row half-written (kill -9) gets them repaired.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
run() {
	"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=d \
		--set run.max_steps=40 --set run.eval=false "$@"
}
run --set run.stop_after=20 >/dev/null
csv="$work/d/steps.csv"
cp "$csv" "$work/before.csv"
test "$(wc -c <"$csv")" -gt 1024
set +e
out=$(trap '' XFSZ; ulimit -f 1; run --resume 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] || { echo "$out"; echo "exit $rc, expected 1"; exit 1; }
echo "$out" | grep -q "steps.csv.tmp: write failed: File too large" ||
	{ echo "$out"; echo "no reason given"; exit 1; }
cmp "$csv" "$work/before.csv" || { echo "steps.csv changed"; exit 1; }
[ ! -e "$csv.tmp" ] || { echo "steps.csv.tmp left behind"; exit 1; }
# Header lost, rows 0..9 kept, a half row: resumed at 20, the header is
# back, the half row gone, rows 10..19 stay lost, 20..39 appended.
sed -n 2,11p "$work/before.csv" >"$csv"
printf '15,0,1.2' >>"$csv"
run --resume >/dev/null
head -1 "$csv" | grep -q "^step,epoch,loss" || { head -3 "$csv"; echo "no header"; exit 1; }
test "$(wc -l <"$csv")" -eq 31 || { cat "$csv"; echo "expected 31 lines"; exit 1; }
! grep -q "^15,0,1.2$" "$csv"
echo "steps.csv kept on a failed write; header and half row repaired"
