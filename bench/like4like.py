#!/usr/bin/env python3
"""like4like.py - bench/RESULTS.md's MobileNetV2 and LoRA tables measured
the same way on both sides, in one GPU-machine call (scripts/gpu.sh
like4like), printed as markdown to paste.

Both sides: one process per cell; timing by bench/bench_stats.py (W
windows of S steady steps after warm-up: median window, slowest-fastest
window; mgrun's windows cut from its steps.csv, PyTorch's timed with CUDA
events); memory = the process's peak as the driver sees it (mgrun's
report.json device_memory, bench/torch_measure.py for PyTorch; the same
method names), beside mgrun's accounted peak and PyTorch's caching
allocator peaks (max_memory_reserved / max_memory_allocated of the steady
windows). Ratios: mgrun's median against PyTorch's median window and
against its fastest window.

Still not the same work: mgrun reads Fashion-MNIST through its input
pipeline (uint8 uploaded, resized on the GPU); PyTorch trains on
synthetic tensors already on the GPU. PyTorch's fp32 uses TF32
convolutions (its default); mgrun's fp32 is exact FP32.

Full fine-tuning cells (`full`) set mgrun's llama against
../shared/baselines/torch_full.py's step (bench/torch_full_l4l.py): fp32
master weights and AdamW state, bf16 compute, no gradient clipping on
either side; model TFLOP/s = 6 x parameters x tokens/s (attention's
products not counted, as torch_full.py counts them).

usage: like4like.py MGRUN OUTDIR [mbv2] [lora] [full]    (default: mbv2 lora)
environment (defaults in brackets):
  MG_L4L_SIZES [28,100,224,500]  MG_L4L_PRECS [fp32,fp16,bf16]
  MG_L4L_COMPILE [224:fp32,224:bf16]  torch.compile cells, run last
  MG_L4L_LORA ["llama3.2-1b,2,512,qv llama3.2-1b,8,512,tt"]
      cells shape,batch,seq,targets[,nf4]: targets qv (q, v), tt (q, v,
      o, gate, up, down: torchtune's) or all (the seven projections);
      nf4 is QLoRA (model.quant = nf4), mgrun only (no bitsandbytes
      baseline on the GPU machines)
  MG_L4L_FULL ["llama3.2-1b,8,512 llama3.2-1b,4,2048 llama3.2-3b,4,1024,ckpt"]
      cells shape,batch,seq[,ckpt]: ckpt = activation checkpointing on
      both sides
  MG_L4L_FULL_KERNELS [none,fused]  mgrun's model.kernels, one mgrun run
      per value beside one PyTorch run
  MG_L4L_WINDOWS [5]  MG_L4L_STEPS [20] (MobileNetV2), MG_L4L_LORA_STEPS [4]
  MG_L4L_BUDGET_S [360]  compile cells starting past this are skipped
  MG_L4L_DEADLINE_S [470]  a compile cell is stopped at this (its warm-up
                           is 50-70 s)
Exit status 1 when a cell failed on either side.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_stats as bs  # noqa: E402

ROOT = os.path.dirname(HERE)
T0 = time.monotonic()
env = os.environ.get
WINDOWS = int(env("MG_L4L_WINDOWS", "5"))
STEPS = int(env("MG_L4L_STEPS", "20"))
LORA_STEPS = int(env("MG_L4L_LORA_STEPS", "4"))
MBV2_WARM, LORA_WARM = 15, 3
BUDGET = float(env("MG_L4L_BUDGET_S", "360"))
DEADLINE = float(env("MG_L4L_DEADLINE_S", "470"))
PYTHON = env("MG_L4L_PYTHON", sys.executable)  # tests: a stand-in


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


def sh(cmd, logpath, timeout=300):
    """Run cmd, its output to logpath; (exit code, output)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"timed out after {timeout} s\n{e.stdout or ''}", 124
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


def torch_cell(out, name, script, args, items, timeout=300):
    rc, text = sh([PYTHON, os.path.join(HERE, script)] + args,
                  os.path.join(out, f"{name}.log"), timeout)
    j = torch_json(text)
    if rc or j is None:
        return {"error": f"{script} exit {rc}: " + text[-400:]}
    j["rate"] = bs.per_second(j["step_s"], items)
    return j


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


def ratio_cells(m, t):
    if "error" in m or "error" in t:
        return "-", "-"
    r = bs.ratios(m["rate"], t["rate"])
    return f"**{r['vs_median']:.2f}x**", f"{r['vs_fastest']:.2f}x"


def methods(rows):
    """Which driver-memory method each side used (one line)."""
    mg = sorted({m["memory"]["method"] for m in rows["mgrun"] if "error" not in m})
    ok = [t for t in rows["torch"] if "error" not in t and "skip" not in t]
    tt = sorted({t["device_memory"]["method"] for t in ok})
    why = sorted({t["device_memory"]["why"] for t in ok if t["device_memory"]["why"]})
    return (f"driver memory: mgrun {', '.join(mg) or '-'}; PyTorch "
            f"{', '.join(tt) or '-'}" + (f" ({'; '.join(why)})" if why else ""))


def mbv2(mgrun, out, results):
    sizes = [int(s) for s in env("MG_L4L_SIZES", "28,100,224,500").split(",")]
    precs = env("MG_L4L_PRECS", "fp32,fp16,bf16").split(",")
    conf = os.path.join(ROOT, "conf", "fashion_mnist.ini")
    cells = []
    for size in sizes:
        for prec in precs:
            name = f"l4l_mbv2_{size}_{prec}"
            sets = ["-c", conf, "--set", "run.device=cuda",
                    "--set", f"run.precision={prec}",
                    "--set", f"dataset.image_size={size}",
                    "--set", f"run.max_steps={MBV2_WARM + WINDOWS * STEPS}",
                    "--set", "run.eval=false", "--set", "run.checkpoint=false",
                    "--set", "run.batch_size=64", "--set", "run.log_every=1000",
                    "--set", "optimizer.warmup_steps=0"]
            if env("MG_FASHION_DIR"):
                sets += ["--set", "dataset.dir=" + env("MG_FASHION_DIR")]
            m = mgrun_cell(mgrun, out, name, sets, MBV2_WARM, 64)
            t = torch_cell(out, f"torch_{name}", "torch_mbv2_l4l.py",
                           [str(size), prec, "eager", str(WINDOWS), str(STEPS), "5"], 64)
            log(f"mbv2 {size} {prec}: mgrun "
                f"{m.get('rate', {}).get('median', 0):.0f} img/s, torch "
                f"{t.get('rate', {}).get('median', 0):.0f} img/s")
            cells.append({"size": size, "prec": prec, "mgrun": m, "torch": t})
    results["mbv2"] = cells


def mbv2_compile(out, results):
    want = [c for c in env("MG_L4L_COMPILE", "224:fp32,224:bf16").split(",") if c]
    for c in results.get("mbv2", []):
        key = f"{c['size']}:{c['prec']}"
        if key not in want:
            continue
        if elapsed() > BUDGET:
            c["compile"] = {"error": f"skipped: {elapsed():.0f} s > budget {BUDGET:.0f} s"}
            continue
        c["compile"] = torch_cell(out, f"torch_compile_{c['size']}_{c['prec']}",
                                  "torch_mbv2_l4l.py",
                                  [str(c["size"]), c["prec"], "compile",
                                   str(WINDOWS), str(STEPS), "5"], 64,
                                  timeout=max(30, int(DEADLINE - elapsed())))
        log(f"compile {key}: {c['compile'].get('rate', {}).get('median', 0):.0f} img/s")


def mbv2_table(cells):
    print(f"\nMobileNetV2, batch 64, one GPU; img/s = median window ({WINDOWS} "
          f"windows of {STEPS} steps after warm-up; slowest-fastest window in "
          "brackets); memory = the process's peak as the driver sees it "
          "(mgrun's accounted peak; PyTorch's max_memory_reserved / "
          "max_memory_allocated)\n")
    print("| size | prec | mgrun img/s | PyTorch eager img/s | vs median | "
          "vs fastest | torch.compile img/s | mgrun driver MiB (accounted) | "
          "PyTorch driver MiB (reserved / allocated) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        m, t = c["mgrun"], c["torch"]
        vm, vf = ratio_cells(m, t)
        comp = c.get("compile")
        comp = ("-" if comp is None else comp["error"][:40] if "error" in comp
                else bs.fmt_rate(comp["rate"]))
        print(f"| {c['size']} | {c['prec']} | "
              f"{'FAILED' if 'error' in m else bs.fmt_rate(m['rate'])} | "
              f"{'FAILED' if 'error' in t else bs.fmt_rate(t['rate'])} | {vm} | {vf} | "
              f"{comp} | {'-' if 'error' in m else mem_pair(m, 'MiB').replace(' MiB', '')} | "
              f"{'-' if 'error' in t else torch_mem(t, 'MiB').replace(' MiB', '')} |")
    print("\n" + methods({"mgrun": [c["mgrun"] for c in cells],
                          "torch": [c["torch"] for c in cells]}))


def lora(mgrun, out, results):
    cells = []
    for cell in env("MG_L4L_LORA",
                    "llama3.2-1b,2,512,qv llama3.2-1b,8,512,tt").split():
        shape, b, s, tg, *q = cell.split(",")
        quant = q[0] if q else "none"
        assert quant in ("none", "nf4") and len(q) <= 1, f"cell {cell}"
        b, s = int(b), int(s)
        targets = {"qv": "q,v", "tt": "q,v,o,gate,up,down",
                   "all": "all"}[tg]
        name = f"l4l_lora_{shape}_{b}x{s}_{tg}" + ("_nf4" if q else "")
        steps = LORA_WARM + WINDOWS * LORA_STEPS
        sets = ["-c", os.path.join(ROOT, "conf", "llama_tiny.ini"),
                "--set", f"model.preset={shape}", "--set", "dataset.vocab_size=128256",
                "--set", f"dataset.seq_len={s}", "--set", "dataset.lengths=fixed",
                "--set", "dataset.prompt_frac=0",
                "--set", f"dataset.train_samples={b * (steps + 4)}",
                "--set", f"dataset.test_samples={b}",
                "--set", "model.lora_rank=8", "--set", "model.lora_alpha=16",
                "--set", f"model.lora_targets={targets}",
                "--set", f"model.quant={quant}",
                "--set", f"run.batch_size={b}", "--set", f"run.eval_batch_size={b}",
                "--set", "run.device=cuda", "--set", "run.precision=bf16",
                "--set", f"run.max_steps={steps}", "--set", "run.checkpoint=false",
                "--set", "run.log_every=10"]
        m = mgrun_cell(mgrun, out, name, sets, LORA_WARM, b * s)
        t = {"skip": "no bitsandbytes baseline"} if q else torch_cell(
            out, f"torch_{name}", "torch_lora_l4l.py",
            [shape, str(b), str(s), tg, str(WINDOWS), str(LORA_STEPS),
             str(LORA_WARM)], b * s)
        log(f"lora {cell}: mgrun {m.get('rate', {}).get('median', 0):.0f} tok/s, "
            f"torch {t.get('rate', {}).get('median', 0):.0f} tok/s")
        cells.append({"cell": cell, "mgrun": m, "torch": t})
    results["lora"] = cells


def lora_table(cells):
    print(f"\nLoRA (r 8, alpha 16, bf16, random weights), one GPU; tok/s = "
          f"median window ({WINDOWS} windows of {LORA_STEPS} steps after "
          f"{LORA_WARM} warm-up); memory = the process's peak as the driver "
          "sees it (mgrun's accounted peak; PyTorch's max_memory_reserved / "
          "max_memory_allocated)\n")
    print("| cell | mgrun tok/s | transformers + peft tok/s | vs median | "
          "vs fastest | mgrun driver GiB (accounted) | PyTorch driver GiB "
          "(reserved / allocated) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        m, t = c["mgrun"], c["torch"]
        shape, b, s, tg, *q = c["cell"].split(",")
        mg = (f"{'FAILED' if 'error' in m else bs.fmt_rate(m['rate'])} | ")
        mmem = '-' if 'error' in m else mem_pair(m, 'GiB').replace(' GiB', '')
        if "skip" in t:  # QLoRA: mgrun only
            print(f"| {shape} {b}x{s} {tg} {q[0]} | {mg}n/a | n/a | n/a | "
                  f"{mmem} | n/a |")
            continue
        vm, vf = ratio_cells(m, t)
        print(f"| {shape} {b}x{s} {tg} | {mg}"
              f"{'FAILED' if 'error' in t else bs.fmt_rate(t['rate'])} | {vm} | {vf} | "
              f"{mmem} | "
              f"{'-' if 'error' in t else torch_mem(t, 'GiB').replace(' GiB', '')} |")
    print("\n" + methods({"mgrun": [c["mgrun"] for c in cells],
                          "torch": [c["torch"] for c in cells]}))


def full(mgrun, out, results):
    cells = []
    kernels = env("MG_L4L_FULL_KERNELS", "none,fused").split(",")
    for cell in env("MG_L4L_FULL", "llama3.2-1b,8,512 llama3.2-1b,4,2048 "
                    "llama3.2-3b,4,1024,ckpt").split():
        shape, b, s, *rest = cell.split(",")
        assert rest in ([], ["ckpt"]), f"cell {cell}"
        ckpt = bool(rest)
        b, s = int(b), int(s)
        steps = LORA_WARM + WINDOWS * LORA_STEPS
        runs = {}
        for k in kernels:
            name = f"l4l_full_{shape}_{b}x{s}" + ("_ckpt" if ckpt else "") + f"_{k}"
            sets = ["-c", os.path.join(ROOT, "conf", "llama_tiny.ini"),
                    "--set", f"model.preset={shape}", "--set", "dataset.vocab_size=128256",
                    "--set", f"dataset.seq_len={s}", "--set", "dataset.lengths=fixed",
                    "--set", "dataset.prompt_frac=0",
                    "--set", f"dataset.train_samples={b * (steps + 4)}",
                    "--set", f"dataset.test_samples={b}",
                    "--set", f"model.kernels={k}",
                    "--set", f"model.activation_checkpointing={'true' if ckpt else 'false'}",
                    "--set", "optimizer.max_grad_norm=0",
                    "--set", f"run.batch_size={b}", "--set", f"run.eval_batch_size={b}",
                    "--set", "run.device=cuda", "--set", "run.precision=bf16",
                    "--set", f"run.max_steps={steps}", "--set", "run.checkpoint=false",
                    "--set", "run.eval=false", "--set", "run.log_every=10"]
            runs[k] = mgrun_cell(mgrun, out, name, sets, LORA_WARM, b * s)
        t = torch_cell(out, f"torch_l4l_full_{shape}_{b}x{s}", "torch_full_l4l.py",
                       [shape, str(b), str(s), "1" if ckpt else "0", str(WINDOWS),
                        str(LORA_STEPS), str(LORA_WARM)], b * s)
        log(f"full {cell}: " + ", ".join(
            f"mgrun {k} {r.get('rate', {}).get('median', 0):.0f}" for k, r in runs.items())
            + f" tok/s, torch {t.get('rate', {}).get('median', 0):.0f} tok/s")
        cells.append({"cell": cell, "mgrun": runs, "torch": t})
    results["full"] = cells


def full_table(cells):
    print(f"\nFull fine-tuning (bf16 compute, fp32 master weights and AdamW, "
          f"random weights), one GPU; tok/s = median window ({WINDOWS} windows "
          f"of {LORA_STEPS} steps after {LORA_WARM} warm-up); model TFLOP/s = "
          "6 x parameters x tok/s; memory = the process's peak as the driver "
          "sees it (mgrun's accounted peak; PyTorch's max_memory_reserved / "
          "max_memory_allocated)\n")
    print("| cell | mgrun kernels | mgrun tok/s | HF transformers tok/s | vs median | "
          "vs fastest | mgrun model TFLOP/s | mgrun driver GiB (accounted) | "
          "PyTorch driver GiB (reserved / allocated) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        t = c["torch"]
        params = t.get("params")
        for k, m in c["mgrun"].items():
            vm, vf = ratio_cells(m, t)
            tf = ("-" if "error" in m or not params else
                  f"{6 * params * m['rate']['median'] / 1e12:.0f}")
            print(f"| {c['cell']} | {k} | "
                  f"{'FAILED' if 'error' in m else bs.fmt_rate(m['rate'])} | "
                  f"{'FAILED' if 'error' in t else bs.fmt_rate(t['rate'])} | {vm} | {vf} | "
                  f"{tf} | {'-' if 'error' in m else mem_pair(m, 'GiB').replace(' GiB', '')} | "
                  f"{'-' if 'error' in t else torch_mem(t, 'GiB').replace(' GiB', '')} |")
    print("\n" + methods({"mgrun": [m for c in cells for m in c["mgrun"].values()],
                          "torch": [c["torch"] for c in cells]}))


def failures(results):
    bad = []
    for c in results.get("full", []):
        for k, m in c["mgrun"].items():
            if "error" in m:
                bad.append(f"full {c['cell']} mgrun {k}: {m['error']}")
        if "error" in c["torch"]:
            bad.append(f"full {c['cell']} torch: {c['torch']['error']}")
    for sect in ("mbv2", "lora"):
        for c in results.get(sect, []):
            for side in ("mgrun", "torch", "compile"):
                e = c.get(side, {}).get("error")
                if e and not e.startswith("skipped"):
                    bad.append(f"{sect} {c.get('cell') or (c['size'], c['prec'])} "
                               f"{side}: {e}")
    return bad


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    mgrun, out = argv[0], argv[1]
    what = argv[2:] or ["mbv2", "lora"]
    assert all(w in ("mbv2", "lora", "full") for w in what), what
    os.makedirs(out, exist_ok=True)
    results = {}
    if "mbv2" in what:
        mbv2(mgrun, out, results)
    if "lora" in what:
        lora(mgrun, out, results)
    if "full" in what:
        full(mgrun, out, results)
    if "mbv2" in what:
        mbv2_compile(out, results)
    results["host_load"] = LOADS
    json.dump(results, open(os.path.join(out, "like4like.json"), "w"), indent=1)
    print("\n== like4like tables")
    if "mbv2" in results:
        mbv2_table(results["mbv2"])
    if "lora" in results:
        lora_table(results["lora"])
    if "full" in results:
        full_table(results["full"])
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
