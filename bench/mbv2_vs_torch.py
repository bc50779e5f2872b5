#!/usr/bin/env python3
"""mbv2_vs_torch.py - MobileNetV2 training throughput, mgrun against
PyTorch, on one GPU in one call.

mgrun trains through its real input pipeline (Fashion-MNIST uint8 28x28
uploaded, resized and normalised on the GPU); the PyTorch baseline
(torch_mbv2.py from the project's shared baselines) trains on synthetic
tensors already on the GPU, so the comparison favours PyTorch. Both use
batch 64, SGD with momentum, 1-channel input, 10 classes.

img/s for mgrun is the median over steady-state steps (after warm-up) of
batch / wall-clock step time from steps.csv; peak memory is what mgrun
accounted (parameters, gradients, optimizer, activations, workspaces,
input) against torch.cuda.max_memory_allocated.

usage: bench/mbv2_vs_torch.py MGRUN BASELINE_PY OUTDIR [sizes] [precs]
"""
import csv, json, os, statistics, subprocess, sys

mgrun, baseline, out = sys.argv[1], sys.argv[2], sys.argv[3]
sizes = [int(s) for s in (sys.argv[4] if len(sys.argv) > 4 else "28,100,224,500").split(",")]
precs = (sys.argv[5] if len(sys.argv) > 5 else "fp32,fp16,bf16").split(",")
os.makedirs(out, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))
conf = os.path.join(here, "..", "conf", "fashion_mnist.ini")


def run_mgrun(size, prec, steps=60, warm=15, extra=()):
    name = f"mbv2_{size}_{prec}"
    cmd = [mgrun, "-c", conf, "--set", "run.device=cuda",
           "--set", f"run.precision={prec}", "--set", f"dataset.image_size={size}",
           "--set", f"run.max_steps={steps}", "--set", "run.eval=false",
           "--set", "run.checkpoint=false", "--set", "run.batch_size=64",
           "--set", f"run.out_dir={out}", "--set", f"run.name={name}",
           "--set", "optimizer.warmup_steps=0", *extra]
    if os.environ.get("MG_FASHION_DIR"):
        cmd += ["--set", "dataset.dir=" + os.environ["MG_FASHION_DIR"]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        return {"error": (p.stdout + p.stderr)[-600:]}
    rows = list(csv.DictReader(open(os.path.join(out, name, "steps.csv"))))
    t = [float(r["step_s"]) for r in rows[warm:]]
    rep = json.load(open(os.path.join(out, name, "report.json")))
    mem = rep["ranks"][0]["memory_peak_bytes"]["total"]
    med = statistics.median(t)
    return {"img_s": 64 / med, "ms_step": 1000 * med,
            "spread_ms": 1000 * (max(t) - min(t)), "peak_mb": mem / 2**20}


def run_torch():
    env = dict(os.environ, RESULTS_DIR=out, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, baseline], capture_output=True, text=True, env=env)
    open(os.path.join(out, "torch_mbv2.log"), "w").write(p.stdout + p.stderr)
    res = {}
    path = os.path.join(out, "torch_mbv2.json")
    if os.path.exists(path):
        for r in json.load(open(path)):
            if "prec" in r and "img_s" in r:
                res[(r["size"], r["prec"])] = r
    return res


torch = run_torch() if baseline != "-" else {}
tmap = {"fp32": "fp32", "fp16": "amp16", "bf16": "ampbf16", "fp64": "fp64"}
rows = []
for size in sizes:
    for prec in precs:
        m = run_mgrun(size, prec)
        t = torch.get((size, tmap[prec]), {})
        rows.append((size, prec, m, t))
        json.dump([{"size": s, "prec": p, "mgrun": mm, "torch": tt} for s, p, mm, tt in rows],
                  open(os.path.join(out, "bench_mbv2.json"), "w"), indent=1)
print(f"{'size':>5} {'prec':>5} {'mgrun img/s':>12} {'torch img/s':>12} {'ratio':>6} "
      f"{'mgrun ms':>9} {'mgrun MiB':>10} {'torch MiB':>10}")
for size, prec, m, t in rows:
    if "error" in m:
        print(f"{size:>5} {prec:>5} mgrun failed: {m['error'][-300:]}")
        continue
    ti = t.get("img_s")
    ratio = f"{m['img_s'] / ti:6.2f}" if ti else "     -"
    print(f"{size:>5} {prec:>5} {m['img_s']:12.0f} {ti if ti else '-':>12} {ratio} "
          f"{m['ms_step']:9.2f} {m['peak_mb']:10.0f} {t.get('peak_mb', '-'):>10}")

# The launch-overhead effect: the same step without CUDA graphs.
print("\nCUDA graph effect (mgrun, batch 64):")
for size, prec in ((28, "fp32"), (224, "bf16")):
    off = run_mgrun(size, prec, extra=("--set", "run.cuda_graph=false"))
    on = next((m for s_, p_, m, _ in rows if s_ == size and p_ == prec), None)
    if on and "error" not in on and "error" not in off:
        print(f"{size:>5} {prec:>5} graph {on['ms_step']:.2f} ms/step, "
              f"eager {off['ms_step']:.2f} ms/step ({off['ms_step'] / on['ms_step']:.2f}x)")
