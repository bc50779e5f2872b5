#!/bin/sh
# sweep_cpu.sh MGRUN SRCDIR WORKDIR - a sweep end to end on CPU: the
# tiny mlp sweep of sweep.ini (2 axes x 2 values x 2 repeats) runs, its
# table, JSON and charts are well-formed, a second run skips every
# finished point, a failing point is recorded while the others run, and
# a bad axis value fails before anything runs, at its file:line.
set -u
mgrun=$1 src=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
dir=$work/runs/sweep

# 1. The sweep: 8 runs, exit 0, the table at the end.
"$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/runs" >out.txt 2>&1 ||
	{ cat out.txt; fail "sweep exited $?"; }
grep -q "== sweep run 8 of 8" out.txt || fail "not 8 runs"
grep -Eq "^32 +adamw +2 " out.txt || { cat out.txt; fail "no table on stdout"; }
grep -q "^\[p01-batch_size16-sgd-r1\] " out.txt || fail "output not prefixed"
for r in 1 2; do
	for p in p01-batch_size16-sgd p02-batch_size16-adamw \
		p03-batch_size32-sgd p04-batch_size32-adamw; do
		test -f "$dir/points/$p-r$r/report.json" || fail "no $p-r$r"
	done
done

# 2. table.csv: a header and one row per point, axis columns first.
test "$(head -1 "$dir/table.csv" | cut -d, -f1-3)" = \
	"run.batch_size,optimizer.name,repeats_ok" || fail "table.csv header"
test "$(tail -n +2 "$dir/table.csv" | cut -d, -f1-3 | tr '\n' ' ')" = \
	"16,sgd,2 16,adamw,2 32,sgd,2 32,adamw,2 " ||
	{ cat "$dir/table.csv"; fail "table.csv rows"; }
grep -q "efficiency_vs_batch_size=16_pct" "$dir/table.csv" ||
	fail "no efficiency column"
test "$(grep -c '^| ' "$dir/table.md")" = 6 || fail "table.md rows"

# 3. Every chart exists and is well-formed XML.
for f in time_vs_batch_size speedup_vs_batch_size phases memory; do
	test -s "$dir/$f.svg" || fail "no $f.svg"
	if command -v xmllint >/dev/null; then
		xmllint --noout "$dir/$f.svg" || fail "$f.svg: not well-formed"
	else
		python3 -c "import sys,xml.dom.minidom as m; m.parse(sys.argv[1])" \
			"$dir/$f.svg" || fail "$f.svg: not well-formed"
	fi
done
test ! -e "$dir/profile.svg" || fail "profile.svg without a profile"

# 4. sweep.json parses and holds every run.
python3 - "$dir/sweep.json" <<'PY' || fail "sweep.json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "mgrun-sweep-1", d["schema"]
assert [a["key"] for a in d["axes"]] == ["run.batch_size", "optimizer.name"]
assert len(d["points"]) == 4
for p in d["points"]:
    assert [r["status"] for r in p["runs"]] == ["finished"] * 2, p["runs"]
    s = p["summary"]
    assert s["repeats_ok"] == 2 and s["time_min_s"] <= s["time_median_s"] <= s["time_max_s"]
    assert 0 <= s["test_accuracy"] <= 1
assert d["points"][0]["summary"]["efficiency_pct"]["batch_size=16"] == 100
PY

# 5. Again: nothing runs, every run is skipped, same results.
"$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/runs" >again.txt 2>&1 ||
	{ cat again.txt; fail "second sweep exited $?"; }
test "$(grep -c 'finished earlier: skipped' again.txt)" = 8 ||
	{ cat again.txt; fail "finished points not skipped"; }
! grep -q "== sweep run" again.txt || fail "a finished point ran again"

# 5b. Profiled points (as CUDA runs with [profile] write them; injected
# here): the table gets the metrics' columns and profile.svg is drawn.
python3 - "$dir/points" <<'PY' || fail "inject profile"
import glob, json, os, sys
for i, f in enumerate(sorted(glob.glob(sys.argv[1] + "/*/report.json"))):
    r = json.load(open(f))
    names = ["memcpy_h2d", "cudaLaunchKernel", "cudaStreamSynchronize",
             "nccl_AllGather", "kernels_compute"]
    row = {"rank": 0}
    for k, n in enumerate(names):
        row[n] = {"count": 10 + k, "seconds": 0.01 * (k + 1) * (1 + i % 4),
                  "bytes": 1000 * k}
    r["profile"] = {"window": {}, "metrics": names, "ranks": [row],
                    "top_kernels": []}
    json.dump(r, open(f + ".tmp", "w"))
    os.rename(f + ".tmp", f)
PY
"$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/runs" >prof.txt 2>&1 ||
	{ cat prof.txt; fail "profiled sweep exited $?"; }
grep -q "memcpy_h2d \[s\]" prof.txt || { cat prof.txt; fail "no profile columns"; }
test -s "$dir/profile.svg" || fail "no profile.svg"
if command -v xmllint >/dev/null; then
	xmllint --noout "$dir/profile.svg" || fail "profile.svg: not well-formed"
fi
grep -q "profile_nccl_AllGather_s" "$dir/table.csv" || fail "csv profile column"

# 6. A point that fails while running: recorded, the others run, exit 1.
"$mgrun" -c "$src/sweep.ini" --set run.out_dir="$work/fail" --repeats 1 \
	--sweep optimizer.name=sgd --sweep dataset.dir=/nonexistent,/usr/share/datasets/fashion-mnist \
	>fail.txt 2>&1
rc=$?
test $rc = 1 || { cat fail.txt; fail "a failed point: exit $rc, not 1"; }
grep -q "failed (exit 1)" fail.txt || fail "failure not reported"
test -f "$work/fail/sweep/points/p04-batch_size32-sgd-_usr_share_datasets_fashion-mnist-r1/report.json" ||
	{ ls "$work/fail/sweep/points"; fail "the sweep stopped at the failure"; }
grep -q ",failed" "$work/fail/sweep/sweep.json" ||
	grep -q '"failed"' "$work/fail/sweep/sweep.json" || fail "sweep.json status"

# 7. A bad value at the last points: file:line, exit 2, nothing run.
"$mgrun" -c "$src/bad_axis.ini" --set run.out_dir="$work/bad" >bad.txt 2>&1
rc=$?
test $rc = 2 || { cat bad.txt; fail "bad axis: exit $rc, not 2"; }
grep -Eq "bad_axis.ini:18: \[sweep\] optimizer.name = adam: \[optimizer\] name: 'adam' is not one of" bad.txt ||
	{ cat bad.txt; fail "bad axis: no file:line message"; }
grep -q "2 of 6 points not valid, nothing run" bad.txt || fail "bad axis count"
test ! -e "$work/bad" || fail "bad axis: something ran"

# 8. --print-config lists the points; --no-sweep is one ordinary run.
"$mgrun" -c "$src/sweep.ini" --print-config >print.txt 2>&1 || fail "print"
grep -q "^;   p04-batch_size32-adamw  *run.batch_size=32 optimizer.name=adamw" \
	print.txt || { cat print.txt; fail "print-config plan"; }
"$mgrun" -c "$src/sweep.ini" --no-sweep --set run.out_dir="$work/one" \
	>one.txt 2>&1 || { cat one.txt; fail "--no-sweep"; }
test -f "$work/one/sweep/report.json" || fail "--no-sweep: no run"
echo "ok"
