#!/usr/bin/env python3
"""test_llm_kernels.py - bench/llm_kernels.py (scripts/gpu.sh llm_kernels)
and the floors it prints (bench/llm_floor.py) without a GPU: kernels grouped by name, each group's device ms a step and
share of the device time (kernels + memsets + device copies, the kernels
past the listed top counted as "other"), and the runs it makes: like4like's
mgrun options for each cell plus the [profile] window, a failed run
failing the call.
    test_llm_kernels.py BENCH_DIR TMP
"""
import contextlib
import io
import json
import os
import stat
import subprocess
import sys

bench, tmp = sys.argv[1], sys.argv[2]
sys.path.insert(0, bench)
import llm_kernels as lk  # noqa: E402

checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        sys.exit(f"FAIL: {what}")


# names as the CUPTI lists hold them (demangled, cuBLAS's raw)
NAMES = {
    "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT": "GEMM",
    "void (anonymous namespace)::fa_fwd_k<__nv_bfloat16, 64>(fa_dims, ...)": "attention fwd",
    "void (anonymous namespace)::fa_dkv_k<__nv_bfloat16, 64>(fa_dims, ...)": "attention bwd",
    "void (anonymous namespace)::fa_dt_k<__nv_bfloat16>(fa_dims, ...)": "attention bwd",
    "void adamw_vec_kernel<__nv_bfloat16, __nv_bfloat16>(hp, ...)": "optimizer",
    "void (anonymous namespace)::swiglu_bwd_v_k<__nv_bfloat16>(...)": "swiglu",
    "void (anonymous namespace)::rms_bwd_add_vk<__nv_bfloat16, float>(...)": "norms",
    "void (anonymous namespace)::add_rms_vk<__nv_bfloat16, float>(...)": "norms",
    "void (anonymous namespace)::rope_k<__nv_bfloat16>(...)": "rope",
    "void (anonymous namespace)::xent_bwd_k<__nv_bfloat16>(...)": "loss / head",
    "void (anonymous namespace)::embed_bwd_k<__nv_bfloat16>(...)": "embedding",
    "void convert8_kernel<__nv_bfloat16, float>(...)": "convert",
    "void (anonymous namespace)::add_k<__nv_bfloat16>(...)": "elementwise",
    "void mystery_kernel(int)": "other",
}
for n, g in NAMES.items():
    check(lk.group_of(n) == g, f"{n} -> {lk.group_of(n)}, expected {g}")
check(lk.short(list(NAMES)[1]) == "fa_fwd_k<bf16, 64>", lk.short(list(NAMES)[1]))

# A window of 4 steps: 40 ms of listed kernels, 4 ms not listed, 2 ms of
# memsets and 2 of device copies: 48 ms, 12 a step.
REPORT = {"profile": {
    "window": {"first_step": 6, "last_step": 9, "steps": 4, "seconds": 0.06},
    "overhead": {"step_s_in_window": 0.015, "step_s_outside": 0.014},
    "memset": {"count": 8, "seconds": 0.002, "bytes": 1e9},
    "ranks": [{"rank": 0, "kernels_compute": {"count": 400, "seconds": 0.044, "bytes": 0},
               "memcpy_d2d": {"count": 4, "seconds": 0.002, "bytes": 1e6}}],
    "top_kernels": [
        {"name": "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", "count": 200, "seconds": 0.024},
        {"name": "sm90_xmma_gemm_bf16bf16_bf16f32", "count": 40, "seconds": 0.004},
        {"name": "void adamw_vec_kernel<__nv_bfloat16, __nv_bfloat16>(hp, ...)",
         "count": 8, "seconds": 0.008},
        {"name": "void (anonymous namespace)::swiglu_bwd_v_k<__nv_bfloat16>(...)",
         "count": 64, "seconds": 0.004},
    ]}}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    s = lk.tables(REPORT, "full:test", 25)
text = out.getvalue()
print(text)
check(abs(s["device_ms"] - 12.0) < 1e-9, f"device ms {s['device_ms']}")
check(abs(s["groups"]["GEMM"] - 7.0) < 1e-9, f"GEMM {s['groups']}")
check(abs(s["groups"]["other"] - 1.0) < 1e-9, f"other (unlisted) {s['groups']}")
check(abs(s["groups"]["memset"] - 0.5) < 1e-9, "memset")
lines = text.splitlines()
for want in ("| GEMM | 60 | 7.00 | 58.3% | - |", "| optimizer | 2 | 2.00 | 16.7% | - |",
             "| swiglu | 16 | 1.00 | 8.3% | - |", "| other | 0 | 1.00 | 8.3% | - |",
             "| memset | 2 | 0.50 | 4.2% | - |", "| memcpy d2d | 1 | 0.50 | 4.2% | - |",
             "| `adamw_vec_kernel<bf16, bf16>` | optimizer | 2 | 2.000 | 16.7% |"):
    check(want in lines, f"missing line: {want}")
check("12.00 ms of device time a step" in text, "the headline")
# groups sorted by time, largest first
gl = [l.split(" | ")[0][2:] for l in lines if l.startswith("| ") and " | " in l
      and not l.startswith("| group") and not l.startswith("| ---")
      and not l.startswith("| `") and not l.startswith("| kernel")]
check(gl[0] == "GEMM" and gl[1] == "optimizer", f"order {gl}")
# with a cell, each group's floor beside it (bench/llm_floor.py)
fl = lk.floor_ms("full:llama3.2-1b,8,512")
check(abs(fl["optimizer"] - 28 * 1235814400 / 4e12 * 1e3) < 1e-6,
      f"optimizer floor {fl.get('optimizer')}")
out = io.StringIO()
with contextlib.redirect_stdout(out):
    lk.tables(REPORT, "full:llama3.2-1b,8,512", 25, fl)
check(f"| optimizer | 2 | 2.00 | 16.7% | {fl['optimizer']:.2f} |" in out.getvalue(),
      "the floor column")
check(lk.floor_ms("full:no-such-shape,8,512") == {}, "an unknown shape: no floors")

# llm_floor's arithmetic against counts made by hand: SwiGLU moves
# 8 R I elements a layer; the causal attention forward is llama_shapes'
# attention FLOPs a token / 3 (forward of forward + backward) x R; the
# adapters' new path saves 3 passes over each target's output and 2 over
# each group's input gradient (8B, q and v: one group of input 4096,
# outputs 4096 + 1024) against the product-and-add path.
import llm_floor  # noqa: E402
import llama_shapes  # noqa: E402
g = llm_floor.groups("full:llama3.2-1b,8,512")
check(g["swiglu"]["bytes"] == 2 * 8 * 16 * 4096 * 8192, f"swiglu bytes {g['swiglu']}")
att = llama_shapes.model_flops_per_token("llama3.2-1b", 512, "all") - \
    llama_shapes.model_flops_per_token("llama3.2-1b", 0, "all")
check(abs(g["attention fwd"]["flops"] - att / 3 * 4096) < 1, "attention forward FLOPs")
new_, old_ = (llm_floor.groups("lora:llama3-8b,2,2048,qv", p) for p in ("epilogue", "add"))
moved = lambda gr: sum(v["bytes"] for v in gr.values())  # noqa: E731
check(moved(old_) - moved(new_) == 2 * 4096 * 32 * (3 * (4096 + 1024) + 2 * 4096),
      f"adapter bytes saved {moved(old_) - moved(new_)}")
check(new_["GEMM"]["flops"] == old_["GEMM"]["flops"], "same adapter FLOPs")

# The runs: a stand-in mgrun writes this report and keeps its arguments.
os.makedirs(tmp, exist_ok=True)
fake = os.path.join(tmp, "fake_mgrun.py")
with open(fake, "w") as f:
    f.write(f"""#!{sys.executable}
import json, os, sys
a = sys.argv[1:]
sets = dict(a[i + 1].split("=", 1) for i in range(len(a) - 1) if a[i] == "--set")
if "fail" in sets["model.preset"]:
    sys.exit(3)
d = os.path.join(sets["run.out_dir"], sets["run.name"])
os.makedirs(d, exist_ok=True)
json.dump({json.dumps(REPORT)}, open(os.path.join(d, "report.json"), "w"))
open(os.path.join(d, "args.txt"), "w").write(" ".join(a))
""")
os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
p = subprocess.run([sys.executable, os.path.join(bench, "llm_kernels.py"), fake,
                    os.path.join(tmp, "ok"), "full:llama3.2-1b,8,512",
                    "lora:llama3-8b,8,512,all"], capture_output=True, text=True)
print(p.stdout, p.stderr)
check(p.returncode == 0, f"exit {p.returncode}")
full = open(os.path.join(tmp, "ok", "k_full_llama3_2_1b_8_512", "args.txt")).read()
lora = open(os.path.join(tmp, "ok", "k_lora_llama3_8b_8_512_all", "args.txt")).read()
for want in ("model.preset=llama3.2-1b", "run.batch_size=8", "dataset.seq_len=512",
             "run.precision=bf16", "model.kernels=rmsnorm", "optimizer.max_grad_norm=0",
             "profile.enabled=true", "profile.first_step=6", "profile.steps=5"):
    check(want in full, f"full cell lacks {want}")
for want in ("model.preset=llama3-8b", "model.lora_targets=all", "model.lora_rank=8",
             "profile.enabled=true"):
    check(want in lora, f"lora cell lacks {want}")
js = json.load(open(os.path.join(tmp, "ok", "llm_kernels.json")))
check(len(js) == 2 and js[1]["label"] == "lora:llama3-8b,8,512,all", "json")
p = subprocess.run([sys.executable, os.path.join(bench, "llm_kernels.py"), fake,
                    os.path.join(tmp, "bad"), "full:fail,8,512"],
                   capture_output=True, text=True)
check(p.returncode == 1 and "FAILED: full:fail,8,512" in p.stdout,
      f"a failed run: exit {p.returncode}")
print(f"llm_kernels: {checks} checks ok")
