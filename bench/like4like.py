#!/usr/bin/env python3
"""like4like.py - bench/RESULTS.md's MobileNetV2, LoRA and full
fine-tuning tables measured the same way on both sides, against PyTorch
at its best, in one GPU-machine call (scripts/gpu.sh like4like), printed
as markdown to paste.

Both sides: one process per run; timing by bench/bench_stats.py (W
windows of S steady steps after warm-up: median window, slowest-fastest
window; mgrun's windows cut from its steps.csv, PyTorch's timed with CUDA
events); memory = the process's peak as the driver sees it (mgrun's
report.json device_memory, bench/torch_measure.py for PyTorch), beside
mgrun's accounted peak and PyTorch's caching allocator peaks. A headline
cell runs MG_L4L_REPEATS processes a side and pools them (bench_stats
.pool: the median of the processes' medians, the slowest and fastest
window of any, each process's median in square brackets). Ratios: mgrun's
pooled median against the baseline's pooled median and against its
fastest window, the bar a target must clear.

The baselines at their best:
- MobileNetV2: the whole step (forward, backward, GradScaler, fused SGD)
  captured once as a CUDA graph and replayed (bench/torch_mbv2_l4l.py
  graph), cudnn.benchmark, channels_last in fp16/bf16; in fp32 both
  layouts are tried and the faster one is repeated. Precisions: tf32
  (PyTorch's default TF32 convolutions against mgrun's run.tf32), fp32
  (TF32 off on both sides: exact fp32), fp16, bf16. Eager and
  torch.compile rows beside. mgrun runs on a static device batch
  (run.static_batch: one batch read, transformed and reused, as PyTorch
  replays one static batch) for the ratio, and once through its input
  pipeline (Fashion-MNIST uploaded and resized on the GPU every step).
- LLMs: transformers (+ peft) with torch.compile of the model, SDPA on
  the fastest backend that runs at the shape (cuDNN or flash, timed in
  the process and named in the row), fused AdamW, fp32 master weights
  and bf16 autocast; the eager row beside. mgrun with its default
  kernels (model.kernels = rmsnorm). MFU = model FLOPs per token (llama_shapes.model_flops_per_token:
  causal attention counted, recomputation not) x tokens/s over 989
  TFLOP/s, the dense bf16 peak of an H100/H200 SXM, and over the bf16
  GEMM ceiling measured on random data in the same call
  (MG_L4L_CEILING, TFLOP/s; gpu.sh like4like measures it first).

usage: like4like.py MGRUN OUTDIR [mbv2] [lora] [full]    (default: mbv2 lora)
environment (defaults in brackets):
  MG_L4L_SIZES [28,100,224,500]  MG_L4L_PRECS [tf32,fp32,fp16,bf16]
  MG_L4L_REPEATS [3]  processes a side in a headline cell
  MG_L4L_HEAD [28:tf32,28:bf16,224:tf32,224:bf16,500:tf32,500:bf16]
      MobileNetV2 headline cells (others: one process a side)
  MG_L4L_EAGER [1]  the eager PyTorch rows, MobileNetV2's and the LLMs'
      (0: not run)
  MG_L4L_COMPILE [224:tf32,224:bf16]  torch.compile cells, run last
  MG_L4L_LORA ["llama3-8b,8,512,all llama3-8b,2,2048,qv"]
      cells shape,batch,seq,targets[,nf4]: targets qv (q, v), tt (q, v,
      o, gate, up, down: torchtune's) or all (the seven projections);
      nf4 is QLoRA (model.quant = nf4), mgrun only (no bitsandbytes
      baseline on the GPU machines)
  MG_L4L_FULL ["llama3.2-1b,8,512 llama3.2-1b,4,2048 llama3.2-3b,4,1024,ckpt"]
      cells shape,batch,seq[,ckpt]: ckpt = activation checkpointing on
      both sides
  MG_L4L_LLM_HEAD ["llama3.2-1b,8,512 llama3-8b,8,512,all"]  LLM
      headline cells (others: one process a side)
  MG_L4L_FULL_KERNELS [rmsnorm]  mgrun's model.kernels, one row each
      (rmsnorm, the default and fastest; fused adds the chunked output
      head, which saves memory and costs time)
  MG_L4L_CEILING  the call's bf16 GEMM ceiling on random data, TFLOP/s
  MG_L4L_WINDOWS [5]  MG_L4L_STEPS [20] (MobileNetV2), MG_L4L_LORA_STEPS [4]
  MG_L4L_BUDGET_S [360]  compile cells starting past this are skipped
  MG_L4L_DEADLINE_S [470]  a compile cell is stopped at this (its warm-up
                           is 50-70 s)
Exit status 1 when a cell failed on either side (a baseline that cannot
run its best configuration fails its cell, never falls back silently).
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_stats as bs  # noqa: E402
import llama_shapes  # noqa: E402

ROOT = os.path.dirname(HERE)
T0 = time.monotonic()
env = os.environ.get
WINDOWS = int(env("MG_L4L_WINDOWS", "5"))
STEPS = int(env("MG_L4L_STEPS", "20"))
LORA_STEPS = int(env("MG_L4L_LORA_STEPS", "4"))
REPEATS = int(env("MG_L4L_REPEATS", "3"))
MBV2_WARM, LORA_WARM = 15, 3
BUDGET = float(env("MG_L4L_BUDGET_S", "360"))
DEADLINE = float(env("MG_L4L_DEADLINE_S", "470"))
PYTHON = env("MG_L4L_PYTHON", sys.executable)  # tests: a stand-in
PEAK_TFLOPS = 989.0  # dense bf16 peak of an H100 / H200 SXM
CEILING = float(env("MG_L4L_CEILING", "0") or 0)  # 0: not measured


def elapsed():
    return time.monotonic() - T0


def log(msg):
    print(f"[{elapsed():6.1f} s] {msg}", flush=True)


# The host's 1-minute load average after each run: PyTorch's eager
# MobileNetV2 is launch-bound, so other work on the host slows its windows
# (2026-11-27: four jobs at once on one host moved them by up to 25%).
LOADS = []


def host_load_note():
    """One line on how busy the host was, flagged when it was."""
    if not LOADS:
        return ""
    cores = os.cpu_count() or 1
    busy = max(LOADS) > cores / 4
    return (f"host load (1-minute average after each run): "
            f"{min(LOADS):.1f}-{max(LOADS):.1f} on {cores} cores"
            + ("; BUSY: other work shared the host, launch-bound baselines "
               "may have run slower than alone" if busy else ""))


def sh(cmd, logpath, timeout=300, extra_env=None):
    """Run cmd, its output to logpath and the command itself (with the
    variables set for it) to NAME.args beside it; (exit code, output)."""
    e = dict(os.environ, **(extra_env or {}))
    with open(logpath[:-len(".log")] + ".args", "w") as f:
        f.write(" ".join([f"{k}={v}" for k, v in (extra_env or {}).items()] + cmd) + "\n")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as ex:
        out, rc = f"timed out after {timeout} s\n{ex.stdout or ''}", 124
    if hasattr(os, "getloadavg"):
        LOADS.append(os.getloadavg()[0])
    with open(logpath, "w") as f:
        f.write(out)
    return rc, out


def torch_json(out):
    """The JSON line a baseline script printed last."""
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def mgrun_cell(mgrun, out, name, sets, warm, items):
    """One mgrun run summarised like a baseline, or {'error': ...}."""
    cmd = [mgrun] + sets + ["--set", f"run.out_dir={out}",
                            "--set", f"run.name={name}"]
    rc, text = sh(cmd, os.path.join(out, f"{name}.log"))
    if rc:
        return {"error": f"mgrun exit {rc}: " + text[-400:]}
    r = bs.mgrun_run(os.path.join(out, name), warm, WINDOWS)
    r["rate"] = bs.per_second(r, items)
    return r


def torch_cell(out, name, script, args, items, timeout=300, extra_env=None):
    rc, text = sh([PYTHON, os.path.join(HERE, script)] + args,
                  os.path.join(out, f"{name}.log"), timeout, extra_env)
    j = torch_json(text)
    if rc or j is None or "error" in j:
        why = j["error"] if j and "error" in j else text[-400:]
        return {"error": f"{script} exit {rc}: " + why}
    j["rate"] = bs.per_second(j["step_s"], items)
    return j


def pooled(runs):
    """Several processes' runs as one cell: their rates pooled ('error'
    when any failed: a headline cell needs all its processes)."""
    bad = [r for r in runs if "error" in r]
    if bad:
        return {"error": bad[0]["error"], "runs": runs}
    return {"runs": runs, "rate": bs.pool([r["rate"] for r in runs]),
            "first": runs[0]}


def repeated(n, run):
    """run(i) for i < n, pooled."""
    return pooled([run(i) for i in range(n)])


def rate_cell(c):
    """'median (slowest-fastest) [process medians]', or why not."""
    if c is None:
        return "-"
    if "skip" in c:
        return "n/a"
    if "error" in c:
        return "FAILED" if not c["error"].startswith("skipped") else c["error"][:40]
    return bs.fmt_rate(c["rate"]) + bs.fmt_procs(c["rate"])


def mem_pair(m, unit):
    """'driver (accounted)' for mgrun."""
    mm = m["memory"]
    return (f"{bs.fmt_bytes(mm['driver_peak'], unit)} "
            f"({bs.fmt_bytes(mm['accounted_peak'], unit)})")


def torch_mem(t, unit):
    tmem = t["torch_memory"]
    return (f"{bs.fmt_bytes(t['device_memory']['driver_peak'], unit)} "
            f"({bs.fmt_bytes(tmem['max_reserved'], unit)} / "
            f"{bs.fmt_bytes(tmem['max_allocated'], unit)})")


def mem_of(c, fmt, unit):
    """A pooled cell's memory: its first process's (the same
    configuration each time)."""
    if c is None or "error" in c:
        return "-"
    return fmt(c.get("first", c), unit).replace(" " + unit, "")


def ratio_cells(m, t):
    if m is None or t is None or "error" in m or "error" in t:
        return "-", "-"
    r = bs.ratios(m["rate"], t["rate"])
    return f"**{r['vs_median']:.2f}x**", f"{r['vs_fastest']:.2f}x"


def runs_of(c):
    if c is None or "error" in c and "runs" not in c:
        return []
    return c.get("runs", [c])


def methods(mg_cells, torch_cells):
    """Which driver-memory method each side used (one line)."""
    mg = sorted({r["memory"]["method"] for c in mg_cells for r in runs_of(c)
                 if "error" not in r})
    ok = [r for c in torch_cells for r in runs_of(c) if "error" not in r and "skip" not in r]
    tt = sorted({t["device_memory"]["method"] for t in ok})
    why = sorted({t["device_memory"]["why"] for t in ok if t["device_memory"]["why"]})
    return (f"driver memory: mgrun {', '.join(mg) or '-'}; PyTorch "
            f"{', '.join(tt) or '-'}" + (f" ({'; '.join(why)})" if why else ""))


# ---- MobileNetV2 -------------------------------------------------------

def mbv2_sets(size, prec, static):
    """mgrun's options for a cell: tf32 is fp32 with run.tf32."""
    sets = ["-c", os.path.join(ROOT, "conf", "fashion_mnist.ini"),
            "--set", "run.device=cuda",
            "--set", f"run.precision={'fp32' if prec == 'tf32' else prec}",
            "--set", f"run.tf32={'true' if prec == 'tf32' else 'false'}",
            "--set", f"run.static_batch={'true' if static else 'false'}",
            "--set", f"dataset.image_size={size}",
            "--set", f"run.max_steps={MBV2_WARM + WINDOWS * STEPS}",
            "--set", "run.eval=false", "--set", "run.checkpoint=false",
            "--set", "run.batch_size=64", "--set", "run.log_every=1000",
            "--set", "optimizer.warmup_steps=0"]
    if env("MG_FASHION_DIR"):
        sets += ["--set", "dataset.dir=" + env("MG_FASHION_DIR")]
    return sets


def torch_mbv2(out, name, size, prec, mode, layout=None, timeout=300):
    args = [str(size), "fp32" if prec == "tf32" else prec, mode,
            str(WINDOWS), str(STEPS), "5"] + ([layout] if layout else [])
    return torch_cell(out, name, "torch_mbv2_l4l.py", args, 64, timeout,
                      {"TORCH_TF32": "0" if prec == "fp32" else "1"})


def mbv2_graphed(out, size, prec, reps):
    """Graphed PyTorch at its best: in fp32 / tf32 one process in each
    layout first, the faster one repeated; channels_last otherwise."""
    layouts = ["nchw", "nhwc"] if prec in ("fp32", "tf32") else ["nhwc"]
    first = {lo: torch_mbv2(out, f"torch_graph_{size}_{prec}_{lo}_0", size, prec,
                            "graph", lo) for lo in layouts}
    ok = {lo: r for lo, r in first.items() if "error" not in r}
    if not ok:
        return {"error": next(iter(first.values()))["error"], "layouts": first}
    best = max(ok, key=lambda lo: ok[lo]["rate"]["median"])
    runs = [ok[best]] + [torch_mbv2(out, f"torch_graph_{size}_{prec}_{best}_{i}", size,
                                    prec, "graph", best) for i in range(1, reps)]
    c = pooled(runs)
    c["layout"] = best
    c["other_layouts"] = {lo: (r["error"][:80] if "error" in r else round(r["rate"]["median"]))
                          for lo, r in first.items() if lo != best}
    return c


def mbv2(mgrun, out, results):
    sizes = [int(s) for s in env("MG_L4L_SIZES", "28,100,224,500").split(",")]
    precs = env("MG_L4L_PRECS", "tf32,fp32,fp16,bf16").split(",")
    head = set(env("MG_L4L_HEAD", "28:tf32,28:bf16,224:tf32,224:bf16,500:tf32,"
                   "500:bf16").split(","))
    cells = []
    for size in sizes:
        for prec in precs:
            assert prec in ("tf32", "fp32", "fp16", "bf16"), prec
            reps = REPEATS if f"{size}:{prec}" in head else 1
            name = f"l4l_mbv2_{size}_{prec}"
            c = {"size": size, "prec": prec, "reps": reps}
            c["mgrun"] = repeated(reps, lambda i: mgrun_cell(
                mgrun, out, f"{name}_static_{i}", mbv2_sets(size, prec, True), MBV2_WARM, 64))
            c["pipeline"] = mgrun_cell(mgrun, out, f"{name}_pipeline",
                                       mbv2_sets(size, prec, False), MBV2_WARM, 64)
            c["torch"] = mbv2_graphed(out, size, prec, reps)
            if env("MG_L4L_EAGER", "1") == "1":
                c["eager"] = torch_mbv2(out, f"torch_eager_{size}_{prec}", size, prec, "eager")
            log(f"mbv2 {size} {prec}: mgrun {rate_cell(c['mgrun'])}, graphed "
                f"{rate_cell(c['torch'])} img/s")
            cells.append(c)
    results["mbv2"] = cells


def mbv2_compile(out, results):
    want = [c for c in env("MG_L4L_COMPILE", "224:tf32,224:bf16").split(",") if c]
    for c in results.get("mbv2", []):
        key = f"{c['size']}:{c['prec']}"
        if key not in want:
            continue
        if elapsed() > BUDGET:
            c["compile"] = {"error": f"skipped: {elapsed():.0f} s > budget {BUDGET:.0f} s"}
            continue
        c["compile"] = torch_mbv2(out, f"torch_compile_{c['size']}_{c['prec']}", c["size"],
                                  c["prec"], "compile",
                                  timeout=max(30, int(DEADLINE - elapsed())))
        log(f"compile {key}: {rate_cell(c['compile'])} img/s")


def mbv2_table(cells):
    print(f"\nMobileNetV2, batch 64, one GPU; img/s = median window ({WINDOWS} "
          f"windows of {STEPS} steps after warm-up; slowest-fastest window in "
          "brackets; a cell of several processes: the median of their medians, "
          "each in square brackets); mgrun on a static device batch "
          "(run.static_batch) for the ratios, and through its input pipeline; "
          "PyTorch's whole step in a CUDA graph; tf32 = TF32 convolutions on "
          "both sides, fp32 = exact; memory = the process's peak as the driver "
          "sees it (mgrun's accounted peak; PyTorch's max_memory_reserved / "
          "max_memory_allocated)\n")
    print("| size | prec | mgrun, static batch | mgrun, input pipeline | "
          "PyTorch, CUDA graph (layout) | vs median | vs fastest | PyTorch eager | "
          "torch.compile | mgrun driver MiB (accounted) | PyTorch graphed driver "
          "MiB (reserved / allocated) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        m, t = c["mgrun"], c["torch"]
        vm, vf = ratio_cells(m, t)
        lay = f" ({t['layout']})" if "layout" in t else ""
        print(f"| {c['size']} | {c['prec']} | {rate_cell(m)} | {rate_cell(c['pipeline'])} | "
              f"{rate_cell(t)}{lay} | {vm} | {vf} | {rate_cell(c.get('eager'))} | "
              f"{rate_cell(c.get('compile'))} | {mem_of(m, mem_pair, 'MiB')} | "
              f"{mem_of(t, torch_mem, 'MiB')} |")
    other = [f"{c['size']} px {c['prec']}: {lo} {v}" for c in cells
             for lo, v in c["torch"].get("other_layouts", {}).items()]
    if other:
        print("\nPyTorch graphed, the slower layout (img/s, one process): " + "; ".join(other))
    print("\n" + methods([c["mgrun"] for c in cells] + [c["pipeline"] for c in cells],
                         [c["torch"] for c in cells]))


# ---- LLMs --------------------------------------------------------------

def llm_sets(shape, b, s, steps):
    """mgrun's llama on random token rows of one fixed length."""
    return ["-c", os.path.join(ROOT, "conf", "llama_tiny.ini"),
            "--set", f"model.preset={shape}", "--set", "dataset.vocab_size=128256",
            "--set", f"dataset.seq_len={s}", "--set", "dataset.lengths=fixed",
            "--set", "dataset.prompt_frac=0",
            "--set", f"dataset.train_samples={b * (steps + 4)}",
            "--set", f"dataset.test_samples={b}",
            "--set", f"run.batch_size={b}", "--set", f"run.eval_batch_size={b}",
            "--set", "run.device=cuda", "--set", "run.precision=bf16",
            "--set", f"run.max_steps={steps}", "--set", "run.checkpoint=false",
            "--set", "run.log_every=10"]


def llm_head(cell):
    return cell in env("MG_L4L_LLM_HEAD", "llama3.2-1b,8,512 llama3-8b,8,512,all").split()


def torch_llm(out, name, script, args, items, reps):
    """The compiled baseline (reps processes) and the eager one (one;
    None with MG_L4L_EAGER=0, a call short of time)."""
    comp = repeated(reps, lambda i: torch_cell(
        out, f"{name}_compile_{i}", script, args + ["compile"], items, timeout=560))
    if env("MG_L4L_EAGER", "1") != "1":
        return comp, None
    eager = torch_cell(out, f"{name}_eager", script, args + ["eager"], items)
    return comp, eager


def flops_per_token(shape, seq, trained):
    """llama_shapes' model FLOPs a token, None for a shape it lacks."""
    if shape not in llama_shapes.LLAMA_SHAPES:
        return None
    return llama_shapes.model_flops_per_token(shape, seq, trained)


def mfu(rate, flops_tok):
    """'MFU of 989 / share of the ceiling' for a tokens/s cell."""
    if rate is None or "error" in rate or "skip" in rate or not flops_tok:
        return "-"
    tf = flops_tok * rate["rate"]["median"] / 1e12
    return f"{100 * tf / PEAK_TFLOPS:.1f}%" + (f" / {100 * tf / CEILING:.0f}%" if CEILING else "")


def attn_of(t):
    """' (backend)': the SDPA backend(s) the baseline's processes chose
    (each times the candidates itself; near-equal ones can differ)."""
    names = [r.get("attention") for r in runs_of(t) if "error" not in r and "skip" not in r]
    names = sorted({n for n in names if n})
    return f" ({', '.join(names)})" if names else ""


def lora(mgrun, out, results):
    cells = []
    for cell in env("MG_L4L_LORA", "llama3-8b,8,512,all llama3-8b,2,2048,qv").split():
        shape, b, s, tg, *q = cell.split(",")
        quant = q[0] if q else "none"
        assert quant in ("none", "nf4") and len(q) <= 1, f"cell {cell}"
        b, s = int(b), int(s)
        targets = {"qv": "q,v", "tt": "q,v,o,gate,up,down", "all": "all"}[tg]
        name = f"l4l_lora_{shape}_{b}x{s}_{tg}" + ("_nf4" if q else "")
        steps = LORA_WARM + WINDOWS * LORA_STEPS
        reps = REPEATS if llm_head(cell) else 1
        sets = llm_sets(shape, b, s, steps) + [
            "--set", "model.lora_rank=8", "--set", "model.lora_alpha=16",
            "--set", f"model.lora_targets={targets}", "--set", f"model.quant={quant}"]
        m = repeated(reps, lambda i: mgrun_cell(mgrun, out, f"{name}_{i}", sets,
                                                LORA_WARM, b * s))
        if q:
            t, e = {"skip": "no bitsandbytes baseline"}, None
        else:
            t, e = torch_llm(out, f"torch_{name}", "torch_lora_l4l.py",
                             [shape, str(b), str(s), tg, str(WINDOWS), str(LORA_STEPS),
                              str(LORA_WARM)], b * s, reps)
        log(f"lora {cell}: mgrun {rate_cell(m)}, compiled {rate_cell(t)} tok/s")
        cells.append({"cell": cell, "mgrun": m, "torch": t, "eager": e,
                      "flops_tok": flops_per_token(shape, s, "frozen")})
    results["lora"] = cells


def lora_table(cells):
    print(f"\nLoRA (r 8, alpha 16, bf16, random weights), one GPU; tok/s = "
          f"median window ({WINDOWS} windows of {LORA_STEPS} steps after "
          f"{LORA_WARM} warm-up; several processes: the median of their "
          "medians, each in square brackets); MFU = model FLOPs (4 per frozen "
          "weight, causal attention counted) x tok/s over 989 TFLOP/s / over "
          "the call's bf16 GEMM ceiling on random data"
          + (f" ({CEILING:.0f} TFLOP/s)" if CEILING else " (not measured)")
          + "; memory = the process's peak as the driver sees it (mgrun's "
          "accounted peak; PyTorch's max_memory_reserved / max_memory_allocated)\n")
    print("| cell | mgrun tok/s | peft + torch.compile tok/s (SDPA backend) | vs median | "
          "vs fastest | peft eager tok/s | mgrun MFU | compiled MFU | mgrun driver GiB "
          "(accounted) | compiled driver GiB (reserved / allocated) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        m, t = c["mgrun"], c["torch"]
        shape, b, s, tg, *q = c["cell"].split(",")
        mmem = mem_of(m, mem_pair, "GiB")
        if "skip" in t:  # QLoRA: mgrun only
            print(f"| {shape} {b}x{s} {tg} {q[0]} | {rate_cell(m)} | n/a | n/a | n/a | n/a | "
                  f"{mfu(m, c['flops_tok'])} | n/a | {mmem} | n/a |")
            continue
        vm, vf = ratio_cells(m, t)
        print(f"| {shape} {b}x{s} {tg} | {rate_cell(m)} | {rate_cell(t)}{attn_of(t)} | "
              f"{vm} | {vf} | {rate_cell(c['eager'])} | {mfu(m, c['flops_tok'])} | "
              f"{mfu(t, c['flops_tok'])} | {mmem} | {mem_of(t, torch_mem, 'GiB')} |")
    print("\n" + methods([c["mgrun"] for c in cells], [c["torch"] for c in cells]))


def full(mgrun, out, results):
    cells = []
    kernels = env("MG_L4L_FULL_KERNELS", "rmsnorm").split(",")
    for cell in env("MG_L4L_FULL", "llama3.2-1b,8,512 llama3.2-1b,4,2048 "
                    "llama3.2-3b,4,1024,ckpt").split():
        shape, b, s, *rest = cell.split(",")
        assert rest in ([], ["ckpt"]), f"cell {cell}"
        ckpt = bool(rest)
        b, s = int(b), int(s)
        steps = LORA_WARM + WINDOWS * LORA_STEPS
        reps = REPEATS if llm_head(cell) else 1
        runs = {}
        for k in kernels:
            name = f"l4l_full_{shape}_{b}x{s}" + ("_ckpt" if ckpt else "") + f"_{k}"
            sets = llm_sets(shape, b, s, steps) + [
                "--set", f"model.kernels={k}",
                "--set", f"model.activation_checkpointing={'true' if ckpt else 'false'}",
                "--set", "optimizer.max_grad_norm=0", "--set", "run.eval=false"]
            runs[k] = repeated(reps, lambda i: mgrun_cell(mgrun, out, f"{name}_{i}", sets,
                                                          LORA_WARM, b * s))
        t, e = torch_llm(out, f"torch_l4l_full_{shape}_{b}x{s}", "torch_full_l4l.py",
                         [shape, str(b), str(s), "1" if ckpt else "0", str(WINDOWS),
                          str(LORA_STEPS), str(LORA_WARM)], b * s, reps)
        log(f"full {cell}: " + ", ".join(f"mgrun {k} {rate_cell(r)}" for k, r in runs.items())
            + f" tok/s, compiled {rate_cell(t)} tok/s")
        cells.append({"cell": cell, "mgrun": runs, "torch": t, "eager": e,
                      "flops_tok": flops_per_token(shape, s, "all")})
    results["full"] = cells


def full_table(cells):
    print(f"\nFull fine-tuning (bf16 compute, fp32 master weights and AdamW, "
          f"random weights), one GPU; tok/s = median window ({WINDOWS} windows "
          f"of {LORA_STEPS} steps after {LORA_WARM} warm-up; several processes: the "
          "median of their medians, each in square brackets); MFU = model FLOPs "
          "(6 per weight, causal attention counted, recomputation not) x tok/s "
          "over 989 TFLOP/s / over the call's bf16 GEMM ceiling on random data"
          + (f" ({CEILING:.0f} TFLOP/s)" if CEILING else " (not measured)")
          + "; memory = the process's peak as the driver sees it (mgrun's "
          "accounted peak; PyTorch's max_memory_reserved / max_memory_allocated)\n")
    print("| cell | mgrun kernels | mgrun tok/s | HF + torch.compile tok/s (SDPA backend) | "
          "vs median | vs fastest | HF eager tok/s | mgrun MFU | compiled MFU | mgrun "
          "driver GiB (accounted) | compiled driver GiB (reserved / allocated) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        t = c["torch"]
        for k, m in c["mgrun"].items():
            vm, vf = ratio_cells(m, t)
            print(f"| {c['cell']} | {k} | {rate_cell(m)} | {rate_cell(t)}{attn_of(t)} | "
                  f"{vm} | {vf} | {rate_cell(c['eager'])} | {mfu(m, c['flops_tok'])} | "
                  f"{mfu(t, c['flops_tok'])} | {mem_of(m, mem_pair, 'GiB')} | "
                  f"{mem_of(t, torch_mem, 'GiB')} |")
    print("\n" + methods([m for c in cells for m in c["mgrun"].values()],
                         [c["torch"] for c in cells]))


def failures(results):
    bad = []
    for sect in ("mbv2", "lora", "full"):
        for c in results.get(sect, []):
            label = c.get("cell") or f"{c['size']} {c['prec']}"
            sides = dict(c)
            if sect == "full":
                sides.update({f"mgrun {k}": v for k, v in c["mgrun"].items()})
                del sides["mgrun"]
            for side, v in sides.items():
                if not isinstance(v, dict):
                    continue
                e = v.get("error")
                if e and not e.startswith("skipped"):
                    bad.append(f"{sect} {label} {side}: {e}")
    return bad


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    mgrun, out = argv[0], argv[1]
    what = argv[2:] or ["mbv2", "lora"]
    assert all(w in ("mbv2", "lora", "full") for w in what), what
    os.makedirs(out, exist_ok=True)
    results = {"ceiling_tflops": CEILING or None}
    if "mbv2" in what:
        mbv2(mgrun, out, results)
    if "full" in what:
        full(mgrun, out, results)
    if "lora" in what:
        lora(mgrun, out, results)
    if "mbv2" in what:
        mbv2_compile(out, results)
    results["host_load"] = LOADS
    json.dump(results, open(os.path.join(out, "like4like.json"), "w"), indent=1)
    print("\n== like4like tables")
    if "mbv2" in results:
        mbv2_table(results["mbv2"])
    if "full" in results:
        full_table(results["full"])
    if "lora" in results:
        lora_table(results["lora"])
    note = host_load_note()
    if note:
        print("\n" + note)
    bad = failures(results)
    for b in bad:
        print("FAILED:", b[:600])
    log(f"done, {len(bad)} failed cells")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
