#!/bin/sh
# replot.sh MGRUN SRCDIR WORKDIR - `mgrun --replot` and traffic.svg on
# CPU: the tiny sweep of sweep.ini runs; one point's report is edited to
# look as if written on another machine (another plugin path), so that
# a normal run would run it again, and --replot rebuilds the table and
# charts without starting any child; missing and unfinished runs are
# listed as missing; profile_memcpy.csv files (as CUDA runs with
# [profile] write them; made up here) give traffic.svg, with each copy's
# bytes spread over its duration; a malformed line names file and line.
set -u
mgrun=$1 src=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
dir=$work/runs/sweep pts=$work/runs/sweep/points
sweep() { "$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/runs" "$@"; }
wellformed() {
	if command -v xmllint >/dev/null; then
		xmllint --noout "$1" || fail "$1: not well-formed"
	else
		python3 -c "import sys,xml.dom.minidom as m; m.parse(sys.argv[1])" \
			"$1" || fail "$1: not well-formed"
	fi
}

# 1. The sweep. No point has profile_memcpy.csv: no traffic.svg.
sweep >out.txt 2>&1 || { cat out.txt; fail "sweep exited $?"; }
grep -q "== sweep run 8 of 8" out.txt || fail "not 8 runs"
test ! -e "$dir/traffic.svg" || fail "traffic.svg without copies"

# 2. p01-r1 as reported on another machine: another plugin path in its
# effective configuration. --replot runs nothing and rewrites table.md.
p1=$pts/p01-batch_size16-sgd-r1
sed -i 's#from /[^\\"]*libmg_mlp\.so#from /elsewhere/plugins/libmg_mlp.so#' \
	"$p1/report.json"
grep -q "from /elsewhere/plugins/libmg_mlp.so" "$p1/report.json" ||
	fail "could not edit the report's configuration"
rm "$dir/table.md" "$dir/sweep.json"
touch marker
sweep --replot >replot.txt 2>&1 || { cat replot.txt; fail "--replot exited $?"; }
grep -q "mgrun: replot: 8 of 8 runs loaded, nothing run" replot.txt ||
	{ cat replot.txt; fail "--replot: no 'nothing run' line"; }
! grep -q "== sweep run" replot.txt || fail "--replot ran a point"
! grep -q "^\[p0" replot.txt || fail "--replot started a child"
test -z "$(find "$pts" -newer marker)" ||
	{ find "$pts" -newer marker; fail "--replot changed a run directory"; }
test "$(grep -c '^| ' "$dir/table.md")" = 6 || fail "table.md not rebuilt"
test "$(grep -c '| ok |' "$dir/table.md")" = 4 || fail "table.md status"
test -s "$dir/sweep.json" || fail "sweep.json not rebuilt"
for f in time_vs_batch_size speedup_vs_batch_size phases memory; do
	test "$dir/$f.svg" -nt marker || fail "$f.svg not rewritten"
	wellformed "$dir/$f.svg"
done
# ... where a normal run would have run p01-r1 again:
sweep >stale.txt 2>&1 || { cat stale.txt; fail "sweep exited $?"; }
grep -q "another configuration: running again" stale.txt ||
	{ cat stale.txt; fail "the edited point was not stale"; }
test "$(grep -c '== sweep run' stale.txt)" = 1 || fail "stale: not 1 run"

# 3. A run without report.json and one not finished: "missing", in the
# table, sweep.json and the output; the rest is drawn; exit 0.
rm "$pts/p03-batch_size32-sgd-r1/report.json"
python3 - "$pts/p04-batch_size32-adamw-r2/report.json" <<'PY' || fail "edit"
import json, sys
r = json.load(open(sys.argv[1])); r["status"] = "running"
json.dump(r, open(sys.argv[1], "w"))
PY
sweep --replot >missing.txt 2>&1 || { cat missing.txt; fail "missing: exit $?"; }
grep -q "6 of 8 runs loaded, nothing run" missing.txt || fail "missing: count"
grep -q "p03-batch_size32-sgd-r1: no report.json" missing.txt ||
	{ cat missing.txt; fail "missing: p03 not listed"; }
grep -q "p04-batch_size32-adamw-r2: report.json not finished" missing.txt ||
	fail "missing: p04 not listed"
test "$(grep -c '| 1 missing |' "$dir/table.md")" = 2 ||
	{ cat "$dir/table.md"; fail "missing: table.md status"; }
python3 - "$dir/sweep.json" <<'PY' || fail "missing: sweep.json"
import json, sys
d = json.load(open(sys.argv[1]))
st = [[r["status"] for r in p["runs"]] for p in d["points"]]
assert st == [["finished"] * 2, ["finished"] * 2, ["missing", "finished"],
              ["finished", "missing"]], st
assert d["points"][2]["runs"][0]["reason"] == "no report.json"
assert d["points"][2]["summary"]["repeats_ok"] == 1
PY

# 4. Nothing to replot: exit 1, nothing written; --replot with
# --no-sweep: exit 2.
"$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/none" --replot \
	>none.txt 2>&1
rc=$?
test $rc = 1 || { cat none.txt; fail "no sweep: exit $rc, not 1"; }
grep -q "no such directory" none.txt || { cat none.txt; fail "no sweep: message"; }
test ! -e "$work/none" || fail "no sweep: something written"
mkdir -p "$work/empty/sweep/points"
"$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/empty" --replot \
	>empty.txt 2>&1
rc=$?
test $rc = 1 || { cat empty.txt; fail "empty sweep: exit $rc, not 1"; }
grep -q "no finished run" empty.txt || { cat empty.txt; fail "empty: message"; }
test ! -e "$work/empty/sweep/table.md" || fail "empty sweep: table written"
sweep --replot --no-sweep >usage.txt 2>&1
rc=$?
test $rc = 2 || { cat usage.txt; fail "--replot --no-sweep: exit $rc"; }

# 5. Copies in two points: traffic.svg with one panel each. p01: one
# 1 GB host-to-device copy over 100 ms in a 1 s window (5 ms bins), so
# 10 GB/s at most (all in one bin would read 200 GB/s), and 20 MB back;
# p02: a few copies, no window length in its report.
python3 - "$pts/p01-batch_size16-sgd-r1" "$pts/p02-batch_size16-adamw-r1" <<'PY' ||
import json, os, sys
a, b = sys.argv[1], sys.argv[2]
with open(a + "/profile_memcpy.csv", "w") as f:
    f.write("t_s,kind,bytes,duration_s\n")
    f.write("0.002500000,h2d,1000000000,0.100000000\n")
    for i in range(10):
        f.write("%.9f,d2h,2000000,0.000100000\n" % (0.5 + 0.01 * i))
    f.write("0.900000000,d2d,5000000000,0.001000000\n")
r = json.load(open(a + "/report.json"))
r["profile"] = {"window": {"seconds": 1.0}, "metrics": [], "ranks": []}
json.dump(r, open(a + "/report.json", "w"))
with open(b + "/profile_memcpy.csv", "w") as f:
    f.write("t_s,kind,bytes,duration_s\n")
    for i in range(20):
        f.write("%.9f,h2d,4194304,0.000200000\n" % (0.002 * i))
        f.write("%.9f,d2h,4194304,0.000250000\n" % (0.002 * i + 0.001))
    f.write("0.050000000,other,100,0.000001000\n")
PY
	fail "could not write profile_memcpy.csv"
sweep --replot >traffic.txt 2>&1 || { cat traffic.txt; fail "traffic: exit $?"; }
grep -q "traffic.svg" traffic.txt || { cat traffic.txt; fail "traffic.svg not listed"; }
test -s "$dir/traffic.svg" || fail "no traffic.svg"
wellformed "$dir/traffic.svg"
svg=$dir/traffic.svg
test "$(grep -c 'copies=' "$svg")" = 2 || fail "traffic.svg: not 2 panels"
grep -q "p01-batch_size16-sgd-r1: copies=12 h2d_bytes=1000000000 d2h_bytes=20000000 h2d_peak_GBps=10 " "$svg" ||
	{ grep copies= "$svg"; fail "traffic.svg: p01's numbers"; }
grep -q "p02-batch_size16-adamw-r1: copies=41 h2d_bytes=83886080 d2h_bytes=83886080 " "$svg" ||
	{ grep copies= "$svg"; fail "traffic.svg: p02's numbers"; }
grep -q "bin_s=0.005" "$svg" || fail "traffic.svg: bin width"
grep -q ">h2d 1 GB, d2h 20 MB<" "$svg" || fail "traffic.svg: totals label"
grep -q ">batch_size=16 optimizer=adamw<" "$svg" || fail "traffic.svg: panel label"

# 6. A malformed line: file:line named; that run is unreadable (failed),
# the rest is drawn; exit 0 (runs were loaded).
echo "0.06,h2x,100,0.001" >>"$pts/p02-batch_size16-adamw-r1/profile_memcpy.csv"
sweep --replot >bad.txt 2>&1 || { cat bad.txt; fail "malformed: exit $?"; }
grep -q "p02-batch_size16-adamw-r1/profile_memcpy.csv:43: kind 'h2x' is not h2d, d2h, d2d or other" bad.txt ||
	{ cat bad.txt; fail "malformed: no file:line message"; }
test "$(grep -c 'copies=' "$svg")" = 1 || fail "malformed: not 1 panel"
grep -q "| 1 unreadable |" "$dir/table.md" || fail "malformed: status"
wellformed "$svg"
echo "ok"
