#!/bin/sh
# compare.sh MGRUN SRCDIR WORKDIR - mgrun compare on two CPU runs: every
# section printed with marks (the model's declared test metrics too),
# the settings that differ (optimizer.name), --csv, and exit 2 naming
# the file for a directory that is not a run.
set -u
mgrun=$1 src=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
for o in sgd adamw; do
	"$mgrun" -c "$src/sweep.ini" --no-sweep --set run.out_dir="$work" \
		--set run.name=$o --set optimizer.name=$o --set run.max_steps=30 \
		>$o.txt 2>&1 || { cat $o.txt; fail "run $o"; }
done
"$mgrun" compare "$work/sgd" "$work/adamw" >cmp.txt 2>&1 ||
	{ cat cmp.txt; fail "compare exited $?"; }
for s in "^throughput" "^phases" "^communication" "^memory peak" \
	"^transfers" "^accuracy" "^  step median .* [~*?]$" \
	"^  optimizer \(rank 0\) .* \*$" "^  params \(rank 0\) .* =$" \
	"^  forward .* [~*?]$" "^  test accuracy" "^  test loss " "bootstrap" \
	"^settings that differ" "^  optimizer\.name +sgd +adamw$"; do
	grep -Eq -- "$s" cmp.txt || { cat cmp.txt; fail "missing: $s"; }
done
"$mgrun" compare "$work/sgd" "$work/sgd" --csv >csv.txt 2>&1 ||
	fail "compare --csv"
head -1 csv.txt | grep -q "^section,quantity,a,b,ratio,mark" || fail "csv"
grep -q '"step median",.*,1,~' csv.txt || { cat csv.txt; fail "A vs A not ~"; }
"$mgrun" compare "$work/sgd" "$work/nothere" >miss.txt 2>&1
test $? = 2 || fail "missing dir: not exit 2"
grep -q "nothere/report.json" miss.txt || { cat miss.txt; fail "file not named"; }
echo '{"schema": "mgrun-report-2", "run": ' >"$work/sgd/report.json"
"$mgrun" compare "$work/sgd" "$work/adamw" >bad.txt 2>&1
test $? = 2 || fail "malformed: not exit 2"
grep -q "sgd/report.json: not valid JSON" bad.txt || { cat bad.txt; fail "malformed"; }
echo "ok"
