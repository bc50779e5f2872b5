#!/usr/bin/env python3
"""llm_kernels.py - where one mgrun LLM step's device time goes: the
[profile] window (CUPTI, core/engine/profile.c) over a few steady steps of
like4like.py's LLM cells, run with the same options as like4like runs
mgrun, its kernels grouped by what they do (GEMMs, attention forward and
backward, norms, RoPE, SwiGLU, ...), each kernel and group as device ms a
step and as a share of the step's device time (kernels + memsets + device
copies). Printed as markdown (scripts/gpu.sh llm_kernels).

usage: llm_kernels.py MGRUN OUTDIR [CELL...]
  CELL: full:SHAPE,B,SEQ[,ckpt] or lora:SHAPE,B,SEQ,TARGETS (like4like's
  cells; default: full:llama3.2-1b,8,512 lora:llama3-8b,8,512,all)
  llm_kernels.py --report REPORT_JSON [CELL]   the tables of one run's
  report.json (no run)
Beside each group: its floor (bench/llm_floor.py) at MG_LLMK_BW TB/s
[4.0] and the GEMM ceiling MG_L4L_CEILING TFLOP/s [820].
environment: MG_LLMK_TOP [25] kernels listed a cell;
  MG_LLMK_FIRST [6], MG_LLMK_STEPS [5] the window (steps 0-2 are the
  eager and capture steps); MG_LLMK_SETS extra --set options (blank-
  separated key=value) for every run
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import like4like  # noqa: E402  (llm_sets: the same mgrun options)
import llm_floor  # noqa: E402  (each group's floor beside its time)

# (group, pattern on the demangled name), first match wins; the order
# puts the specific names before the catch-alls.
GROUPS = [
    ("attention bwd", r"fa_dq_k|fa_dkv_k|fa_dt_k|attn_dt_k|attn_bwd"),
    ("attention fwd", r"fa_fwd_k|attn_fwd|attn_k"),
    ("loss / head", r"xent|lxent"),
    ("optimizer", r"adamw|update_kernel|sumsq|finalize_kernel"),
    ("norms", r"rms|colsum"),
    ("rope", r"rope"),
    ("swiglu", r"swiglu"),
    ("convert", r"convert"),
    ("embedding", r"embed|iota|radix|onesweep|DeviceSort|DeviceRadix"),
    ("GEMM", r"nvjet|gemm|xmma|cutlass|sm90_|sm80_|cublas|Kernel2"),
    ("elementwise", r"add_k|dropout|scale|fill|copy|elementwise"),
]


def group_of(name):
    for g, pat in GROUPS:
        if re.search(pat, name):
            return g
    return "other"


def short(name, n=70):
    """A demangled name without its argument list and namespaces."""
    s = name.replace("(anonymous namespace)::", "")
    s = re.sub(r"\(.*$", "", s)
    s = re.sub(r"^void ", "", s).replace("__nv_bfloat16", "bf16")
    return s if len(s) <= n else s[:n - 3] + "..."


def floor_ms(cell):
    """{group: floor ms a step} of cell (bench/llm_floor.py) at
    MG_LLMK_BW TB/s [4.0] and the call's GEMM ceiling (MG_L4L_CEILING,
    TFLOP/s [820]), or {} when cell is not a cell llm_floor knows."""
    try:
        bw = float(os.environ.get("MG_LLMK_BW", "4.0")) * 1e12
        ceil = (float(os.environ.get("MG_L4L_CEILING", "0") or 0) or 820) * 1e12
        fl, _ = llm_floor.floors(cell, bw, ceil)
    except (KeyError, ValueError, IndexError):
        return {}
    return {k: 1e3 * v for k, v in fl.items()}


def tables(rep, label, top, floors=None):
    """The markdown tables of one run's report.json profile (floors:
    {group: floor ms a step} for a column beside each group's time), and
    the summary dict (group -> ms a step)."""
    floors = floors or {}
    p = rep["profile"]
    steps = p["window"]["steps"]
    r0 = p["ranks"][0]
    ms = lambda s: 1e3 * s / steps  # noqa: E731
    kern = p["top_kernels"]
    listed = sum(k["seconds"] for k in kern)
    total_k = r0["kernels_compute"]["seconds"]
    memset = p.get("memset", {"count": 0, "seconds": 0.0})
    d2d = r0["memcpy_d2d"]
    device = total_k + memset["seconds"] + d2d["seconds"]
    step_in = p["overhead"]["step_s_in_window"]
    step_out = p["overhead"]["step_s_outside"]
    groups = {}
    for k in kern:
        g = group_of(k["name"])
        c, s = groups.get(g, (0, 0.0))
        groups[g] = (c + k["count"], s + k["seconds"])
    if total_k - listed > 1e-9:
        c, s = groups.get("other", (0, 0.0))
        groups["other"] = (c, s + total_k - listed)
    groups["memset"] = (memset["count"], memset["seconds"])
    groups["memcpy d2d"] = (d2d["count"], d2d["seconds"])
    print(f"\n### {label}: {ms(device):.2f} ms of device time a step "
          f"(kernels {ms(total_k):.2f}, memset {ms(memset['seconds']):.2f}, "
          f"d2d copies {ms(d2d['seconds']):.2f}); wall "
          f"{1e3 * step_in:.2f} ms a step in the window, "
          f"{1e3 * (step_out or float('nan')):.2f} outside; window steps "
          f"{p['window']['first_step']}-{p['window']['last_step']}\n")
    print("| group | launches / step | ms / step | share of device time | "
          "floor ms / step |")
    print("| --- | --- | --- | --- | --- |")
    summary = {}
    for g, (c, s) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        summary[g] = ms(s)
        fl = f"{floors[g]:.2f}" if g in floors else "-"
        print(f"| {g} | {c / steps:.0f} | {ms(s):.2f} | {100 * s / device:.1f}% | {fl} |")
    if floors:
        print(f"\nfloor of the step (bench/llm_floor.py): "
              f"{sum(floors.values()):.2f} ms")
    print(f"\n| kernel (top {min(top, len(kern))}) | group | launches / step | "
          "ms / step | share |")
    print("| --- | --- | --- | --- | --- |")
    for k in kern[:top]:
        print(f"| `{short(k['name'])}` | {group_of(k['name'])} | "
              f"{k['count'] / steps:.0f} | {ms(k['seconds']):.3f} | "
              f"{100 * k['seconds'] / device:.1f}% |")
    return {"label": label, "device_ms": ms(device), "step_ms_in": 1e3 * step_in,
            "step_ms_out": 1e3 * step_out if step_out else None, "groups": summary,
            "kernels": [{"name": k["name"], "group": group_of(k["name"]),
                         "per_step": k["count"] / steps, "ms": ms(k["seconds"])}
                        for k in kern]}


def cell_sets(cell):
    kind, spec = cell.split(":", 1)
    f = spec.split(",")
    shape, b, s = f[0], int(f[1]), int(f[2])
    first = int(os.environ.get("MG_LLMK_FIRST", "6"))
    nst = int(os.environ.get("MG_LLMK_STEPS", "5"))
    steps = first + nst + 3
    sets = like4like.llm_sets(shape, b, s, steps)
    if kind == "full":
        ckpt = f[3:] == ["ckpt"]
        sets += ["--set", "model.kernels=rmsnorm",
                 "--set", f"model.activation_checkpointing={'true' if ckpt else 'false'}",
                 "--set", "optimizer.max_grad_norm=0", "--set", "run.eval=false"]
    elif kind == "lora":
        targets = {"qv": "q,v", "tt": "q,v,o,gate,up,down", "all": "all"}[f[3]]
        sets += ["--set", "model.lora_rank=8", "--set", "model.lora_alpha=16",
                 "--set", f"model.lora_targets={targets}", "--set", "model.quant=none"]
    else:
        raise SystemExit(f"cell {cell}: full: or lora:")
    sets += ["--set", "profile.enabled=true", "--set", f"profile.first_step={first}",
             "--set", f"profile.steps={nst}", "--set", "profile.top_kernels=200"]
    for kv in os.environ.get("MG_LLMK_SETS", "").split():
        sets += ["--set", kv]
    return sets


def main(argv):
    top = int(os.environ.get("MG_LLMK_TOP", "25"))
    if argv and argv[0] == "--report":
        rep = json.load(open(argv[1]))
        label = argv[2] if len(argv) > 2 else argv[1]
        tables(rep, label, top, floor_ms(label))
        return 0
    if len(argv) < 2:
        sys.exit(__doc__)
    mgrun, out = argv[0], argv[1]
    cells = argv[2:] or ["full:llama3.2-1b,8,512", "lora:llama3-8b,8,512,all"]
    os.makedirs(out, exist_ok=True)
    results, bad = [], 0
    for cell in cells:
        name = "k_" + re.sub(r"[^A-Za-z0-9]+", "_", cell)
        cmd = [mgrun] + cell_sets(cell) + ["--set", f"run.out_dir={out}",
                                           "--set", f"run.name={name}"]
        with open(os.path.join(out, name + ".log"), "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                timeout=400).returncode
        rpath = os.path.join(out, name, "report.json")
        if rc or not os.path.exists(rpath):
            print(f"\nFAILED: {cell}: mgrun exit {rc} (log {name}.log)")
            bad += 1
            continue
        results.append(tables(json.load(open(rpath)), cell, top, floor_ms(cell)))
    json.dump(results, open(os.path.join(out, "llm_kernels.json"), "w"), indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
