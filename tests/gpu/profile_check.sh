#!/bin/bash
# profile_check.sh MGRUN REPO_ROOT WORK_DIR [FASHION_DIR]
#
# The [profile] window on a GPU, checked against mgrun's own counters
# (report.json's "profile", docs/REPORT.md):
#   1 GPU, CUDA graphs on:  CUPTI's host->device bytes over the window ==
#     the input pipeline's count over the same window + the trainer's
#     per-step value uploads (exactly), no NCCL kernels, compute kernels
#     present, one cudaGraphLaunch per step, profile_memcpy.csv agrees,
#     and the median step in the window at most MG_PROFILE_MAX_RATIO
#     (default 1.05) times the median outside it;
#   1 GPU, CUDA graphs off: the same counts, and kernel launches become
#     cudaLaunchKernel calls (printed beside the graph run's);
#   2 GPUs (only when 2 are visible), ddp_ds: NCCL AllReduce kernels on
#     every rank, and rank 0's NCCL kernels == its collective calls.
# Exit 77 with "SKIPPED: no GPU" where no GPU is visible.
set -u
mgrun=$1
root=$2
work=$3
fashion=${4:-${MG_FASHION_DIR:-/usr/share/datasets/fashion-mnist}}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -lt 1 ]; then
	echo "SKIPPED: no GPU (nvidia-smi -L lists none)"
	exit 77
fi
rm -rf "$work"
mkdir -p "$work"

# The trainer uploads a float (the loss-gradient scale) and a struct
# mg_optim_vals (40 bytes) before each step (trainer.c,
# upload_step_values); the pipeline's h2d_bytes counts input copies only.
upload=${MG_PROFILE_STEP_UPLOAD:-44}
max_ratio=${MG_PROFILE_MAX_RATIO:-1.05}
first=50
steps=50
status=0

# train NAME [--set ...]: a short run with the window at steps 50-99, at
# 224 px (the seed paper's 100-700 px range): CUPTI's kernel tracing costs
# the GPU about 0.5-1 us per kernel, so at the config's 56 px (563 kernels
# in a 5.3 ms step on an H200) the ratio measured 1.037-1.067, at 224 px
# (20 ms steps) 1.03.
train() {
	local name=$1
	shift
	echo "== $name"
	"$mgrun" -c "$root/conf/fashion_mnist_gpu.ini" \
		--set dataset.dir="$fashion" --set dataset.image_size=224 \
		--set run.epochs=1 \
		--set run.max_steps=200 --set run.eval=false \
		--set run.checkpoint=false --set run.log_every=1000 \
		--set profile.enabled=true --set profile.first_step=$first \
		--set profile.steps=$steps --set run.out_dir="$work" \
		--set run.name="$name" "$@" >"$work/$name.log" 2>&1
	local rc=$?
	sed -n '/^profile (CUPTI)/,/^wall time/p' "$work/$name.log"
	if [ $rc -ne 0 ]; then
		echo "FAIL: $name: mgrun exit $rc"
		tail -20 "$work/$name.log"
		status=1
		return 1
	fi
}

# check NAME WORLD GRAPHS: the assertions on NAME's report.json.
check() {
	python3 - "$work/$1" "$2" "$3" "$first" "$steps" "$upload" \
		"$max_ratio" "$root/docs/report.schema.json" \
		>"$work/$1.check" 2>&1 <<'EOF'

import csv, json, sys
run, world, graphs, first, steps, upload = sys.argv[1], int(sys.argv[2]), \
    sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
max_ratio = float(sys.argv[7])
rep = json.load(open(run + "/report.json"))
bad = []
def need(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        bad.append(what)
try:
    import jsonschema
    schema = json.load(open(sys.argv[8]))
    errs = [f"{e.json_path}: {e.message}" for e in
            jsonschema.Draft202012Validator(schema).iter_errors(rep)]
    need(not errs, "report.json matches docs/report.schema.json"
         + "".join("; " + e for e in errs[:3]))
except ImportError:
    print("      (no python3 jsonschema here: schema not checked)")
p = rep.get("profile")
need(p is not None, "report.json has a profile")
if p is None:
    sys.exit(1)
w, ov = p["window"], p["overhead"]
need(w["first_step"] == first and w["steps"] == steps and
     w["last_step"] == first + steps - 1,
     f"window steps {w['first_step']}-{w['last_step']} ({w['steps']})")
need(len(p["ranks"]) == world, f"{len(p['ranks'])} ranks in the profile")
r0 = p["ranks"][0]
h2d, pipe = r0["memcpy_h2d"]["bytes"], w["pipeline"]["h2d_bytes"]
need(h2d - pipe == upload * steps,
     f"host->device: CUPTI {h2d:.0f} B = pipeline {pipe:.0f} B + "
     f"{upload} B x {steps} steps of value uploads "
     f"(difference {h2d - pipe:.0f} B = {(h2d - pipe) / steps:.2f} B/step)")
print(f"      copies: h2d {r0['memcpy_h2d']['count']:.0f}, d2h "
      f"{r0['memcpy_d2h']['count']:.0f} ({r0['memcpy_d2h']['bytes']:.0f} B), "
      f"d2d {r0['memcpy_d2d']['count']:.0f}; pipeline d2h "
      f"{w['pipeline']['d2h_bytes']:.0f} B")
for r in p["ranks"]:
    nccl = {k: r[k]["count"] for k in p["metrics"] if k.startswith("nccl_")}
    if world == 1:
        need(sum(nccl.values()) == 0, f"rank {r['rank']}: no NCCL kernels {nccl}")
    else:
        need(r["nccl_AllReduce"]["count"] > 0,
             f"rank {r['rank']}: NCCL kernels {nccl}")
    need(r["kernels_compute"]["count"] > 0 and
         r["kernels_compute"]["seconds"] > 0,
         f"rank {r['rank']}: {r['kernels_compute']['count']:.0f} compute "
         f"kernels, {r['kernels_compute']['seconds']:.4f} s")
if world > 1:
    # One kernel per collective (mgrun issues no grouped collectives).
    nk = sum(r0[k]["count"] for k in p["metrics"] if k.startswith("nccl_"))
    calls = w["pipeline"]["comm_calls"]
    need(nk == calls, f"rank 0: {nk:.0f} NCCL kernels = the pipeline's "
         f"{calls:.0f} collective calls in the window")
need(len(p["top_kernels"]) > 0, f"top kernel: {p['top_kernels'][0]['name'][:70] if p['top_kernels'] else None}")
gl, lk = r0["cudaGraphLaunch"]["count"], r0["cudaLaunchKernel"]["count"]
print(f"      launches: cudaGraphLaunch {gl:.0f}, cudaLaunchKernel {lk:.0f}")
if graphs:
    need(gl == steps, f"one cudaGraphLaunch per step ({gl:.0f})")
else:
    need(gl == 0 and lk > 0, f"eager: cudaLaunchKernel {lk:.0f} > 0")
# The timeline holds every copy of the window (far below its cap).
rows = list(csv.DictReader(open(run + "/profile_memcpy.csv")))
tl = sum(float(x["bytes"]) for x in rows if x["kind"] == "h2d")
need(tl == h2d, f"profile_memcpy.csv: {len(rows)} copies, h2d {tl:.0f} B")
ratio = ov["ratio"]
msg = (f"overhead: median step {1e3 * ov['step_s_in_window']:.3f} ms in "
       f"the window, {1e3 * ov['step_s_outside']:.3f} ms outside: x{ratio:.3f}"
       f" (CUPTI processing {ov['cupti_processing_s']:.4f} s, flush "
       f"{ov['flush_s']:.4f} s)")
if graphs:
    need(ratio is not None and ratio < max_ratio, msg + f" < {max_ratio}")
else:
    print("      " + msg)
print(f"RESULT {run.rsplit('/', 1)[-1]}: graphs={graphs} world={world} "
      f"cudaGraphLaunch={gl:.0f} cudaLaunchKernel={lk:.0f} ratio={ratio}")
sys.exit(1 if bad else 0)
EOF
	local rc=$?
	cat "$work/$1.check"
	[ $rc -eq 0 ] || status=1
}

train graphs --set run.cuda_graph=true && check graphs 1 1
train eager --set run.cuda_graph=false && check eager 1 0
# The window's other ends: after `seconds` (steps = 0: no step limit),
# and a run that stops inside the window (run.stop_after).
# check_window NAME SECONDS LAST_STEP: the window's bounds in report.json.
check_window() {
	python3 - "$work/$1/report.json" "$2" "$3" "$first" <<'EOF' ||
import json, sys
w = json.load(open(sys.argv[1]))["profile"]["window"]
sec, last, first = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ok = w["first_step"] == first and (last < 0 or w["last_step"] == last)
if sec > 0:
    # closes at the end of the first step that ends past `seconds`
    per = w["seconds"] / w["steps"]
    ok = ok and sec <= w["seconds"] < sec + 2 * per
print(("ok:   " if ok else "FAIL: ") + f"window {w['first_step']}-"
      f"{w['last_step']} ({w['steps']} steps, {w['seconds']:.3f} s), "
      f"want seconds {sec}, last step {last}")
sys.exit(0 if ok else 1)
EOF
		status=1
}
train seconds --set profile.steps=0 --set profile.seconds=0.5 &&
	check_window seconds 0.5 -1
train stopped --set run.stop_after=70 && check_window stopped 0 69
if [ "$ngpu" -ge 2 ]; then
	train ddp2 --set run.gpus=2 --set strategy.name=ddp_ds &&
		check ddp2 2 1
else
	echo "SKIPPED: 2-GPU check (1 GPU visible)"
fi
echo "== launches with and without CUDA graphs"
grep -h '^RESULT' "$work"/*.check 2>/dev/null
[ $status -eq 0 ] && echo "PASS: profile_check" || echo "FAIL: profile_check"
exit $status
