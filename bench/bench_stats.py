#!/usr/bin/env python3
"""bench_stats.py - the one timing method of every benchmark script, so
mgrun and its PyTorch baselines are summarised the same way.

A measurement is several timed windows of consecutive steady steps (after
warm-up); each window's value is its wall time / its steps (seconds per
step). Reported: the median window and the spread (min/max and p10/p90
with linear interpolation, numpy's default and mgrun's mg_quantile). The
PyTorch side times windows with CUDA events (bench/torch_measure.py);
mgrun's windows are cut from the run's steps.csv (sum of step_s over the
window's steps). Ratios are given against the baseline's median window
AND against its fastest window, so a noisy baseline cannot flatter us.

Pure Python (no torch): the shell scripts use it as a command,
    bench_stats.py run RUN_DIR [--warm N] [--windows K]   -> JSON line
and tests/bench/test_bench_stats.py checks the arithmetic.
"""
import csv
import json
import math
import os
import re
import sys


def quantile(values, q):
    """q-quantile with linear interpolation (numpy's default); NaN when
    there are no values."""
    v = sorted(values)
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(window_s):
    """Seconds per step of each window -> median, min, max, p10, p90, n
    (seconds per step)."""
    assert window_s, "no windows"
    assert all(w > 0 for w in window_s), f"non-positive window {window_s}"
    return {"median": quantile(window_s, 0.5), "min": min(window_s),
            "max": max(window_s), "p10": quantile(window_s, 0.1),
            "p90": quantile(window_s, 0.9), "n": len(window_s),
            "windows": list(window_s)}


def windows_from_steps(step_s, warm, windows):
    """Cut per-step seconds into `windows` windows of consecutive steps
    after `warm` warm-up steps (the remainder of a division is left out
    at the end); each window: sum of its steps / its steps."""
    steady = step_s[warm:]
    per = len(steady) // windows
    assert per >= 1, (f"{len(step_s)} steps: not enough for {warm} warm-up "
                      f"and {windows} windows")
    return [sum(steady[i * per:(i + 1) * per]) / per for i in range(windows)]


def per_second(summary, items):
    """Throughput (items per second) of a seconds-per-step summary: the
    median window and the spread, fastest first in max."""
    return {"median": items / summary["median"],
            "min": items / summary["max"], "max": items / summary["min"],
            "p10": items / summary["p90"], "p90": items / summary["p10"]}


def ratios(ours, base):
    """Our median throughput against the baseline's median window and
    against its fastest window (both per-second dicts)."""
    return {"vs_median": ours["median"] / base["median"],
            "vs_fastest": ours["median"] / base["max"]}


def pool(rates):
    """Several processes' throughputs (per_second dicts) as one cell: the
    median of their median windows, the slowest and fastest window of
    any of them, and each process's median (the spread between
    processes); a single process passes through with procs [its median]."""
    assert rates, "no processes"
    meds = [r["median"] for r in rates]
    return {"median": quantile(meds, 0.5), "min": min(r["min"] for r in rates),
            "max": max(r["max"] for r in rates), "procs": meds}


def fmt_procs(r):
    """' [a / b / c]': each process's median, when there were several."""
    procs = r.get("procs") or []
    return " [" + " / ".join(f"{v:,.0f}" for v in procs) + "]" if len(procs) > 1 else ""


def mgrun_steps(run_dir):
    """step_s of every step of an mgrun run (steps.csv, by column name)."""
    with open(os.path.join(run_dir, "steps.csv")) as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{run_dir}/steps.csv has no steps"
    return [float(r["step_s"]) for r in rows]


def mgrun_memory(run_dir):
    """Rank-maximum memory of an mgrun run: the driver's peak (None when
    not measured), its method, and mgrun's accounted peak, in bytes."""
    rep = json.load(open(os.path.join(run_dir, "report.json")))
    ranks = rep["ranks"]
    dm = [r.get("device_memory") or {} for r in ranks]
    drv = [d.get("driver_peak") for d in dm]
    return {"driver_peak": None if any(v is None for v in drv) else max(drv),
            "method": ",".join(sorted({d.get("method", "none") for d in dm})),
            "accounted_peak": max(r["memory_peak_bytes"]["total"]
                                  for r in ranks),
            "categories": ranks[0]["memory_peak_bytes"]}


def mgrun_run(run_dir, warm, windows):
    """An mgrun run summarised like a baseline: windows of seconds per
    step, and memory."""
    s = summarize(windows_from_steps(mgrun_steps(run_dir), warm, windows))
    s["memory"] = mgrun_memory(run_dir)
    return s


def read_tagged(path, tag):
    """The key=value fields of every line of file `path` that starts with
    `tag` and a blank (bench_gpu_ops' ATTN and RMSNORM lines), as dicts of
    strings; [] without a path, and a message (not an exception) when the
    file cannot be read, so a baseline script still prints its own side."""
    if not path:
        return []
    try:
        with open(path) as f:
            return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in f
                    if line.startswith(tag + " ")]
    except OSError as e:
        print(f"cannot read {path}: {e}")
        return []


def fmt_rate(r, digits=0):
    """'12345 (12000-12500)': median (slowest-fastest window)."""
    f = f"{{:,.{digits}f}}"
    return f"{f.format(r['median'])} ({f.format(r['min'])}-{f.format(r['max'])})"


def fmt_bytes(b, unit="MiB"):
    """Bytes in MiB or GiB, or 'not measured' (None: never a made-up 0)."""
    if b is None:
        return "not measured"
    return f"{b / 2**20:,.0f} MiB" if unit == "MiB" else f"{b / 2**30:.2f} GiB"


def main(argv):
    if len(argv) < 2 or argv[0] != "run":
        sys.exit("usage: bench_stats.py run RUN_DIR [--warm N] [--windows K]")
    opts = {"--warm": 10, "--windows": 5}
    rest = argv[2:]
    while rest:
        k = rest.pop(0)
        assert k in opts and rest, f"unknown or incomplete option {k}"
        opts[k] = int(rest.pop(0))
    print(json.dumps(mgrun_run(argv[1], opts["--warm"], opts["--windows"])))


if __name__ == "__main__":
    main(sys.argv[1:])
