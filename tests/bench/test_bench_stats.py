#!/usr/bin/env python3
"""test_bench_stats.py - the benchmarks' one timing method and the PyTorch
side's driver-memory reading, without a GPU: quantiles as numpy computes
them, windows cut from steps.csv, ratios against the median and the
fastest window, and device memory that is not measured reported as None
("not measured"), never 0.
    test_bench_stats.py BENCH_DIR [FAKE_NVML_SO]
(with the stand-in libnvidia-ml of tests/runtime/fake_nvml.c, the ctypes
NVML path is checked too).
"""
import json
import os
import ctypes
import stat
import sys
import tempfile
import time

sys.path.insert(0, sys.argv[1])
sys.modules["pynvml"] = None  # as on a machine without it: import fails
import bench_stats as bs  # noqa: E402
import torch_measure as tm  # noqa: E402

checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        sys.exit(f"FAIL: {what}")


def near(a, b, tol=1e-12):
    return abs(a - b) <= tol * max(1.0, abs(b))


# quantiles: numpy.quantile(..., method="linear") values
check(near(bs.quantile([4, 1, 3, 2], 0.5), 2.5), "median of 4")
check(near(bs.quantile([1, 2, 3, 4], 0.1), 1.3), "p10 of 4")
check(near(bs.quantile([1, 2, 3, 4], 0.9), 3.7), "p90 of 4")
check(near(bs.quantile([7.0], 0.9), 7.0), "one value")
check(bs.quantile([], 0.5) != bs.quantile([], 0.5), "empty is NaN")

s = bs.summarize([0.012, 0.010, 0.011, 0.030, 0.0105])
check(near(s["median"], 0.011) and s["min"] == 0.010 and s["max"] == 0.030,
      f"summary {s}")
check(near(s["p10"], 0.0102) and near(s["p90"], 0.0228), f"p10/p90 {s}")
try:
    bs.summarize([0.01, 0.0])
    check(False, "a zero window accepted")
except AssertionError:
    pass

# windows: warm-up dropped, consecutive steps, remainder left out
steps = [9.0] * 3 + [1.0, 3.0, 2.0, 2.0, 4.0, 4.0, 100.0]
w = bs.windows_from_steps(steps, 3, 3)
check(w == [2.0, 2.0, 4.0], f"windows {w}")
try:
    bs.windows_from_steps(steps, 3, 8)
    check(False, "8 windows of 7 steps accepted")
except AssertionError:
    pass

# throughput and the two ratios
ours = bs.per_second(bs.summarize([0.010, 0.011, 0.012]), 64)
base = bs.per_second(bs.summarize([0.020, 0.016, 0.032]), 64)
check(near(ours["median"], 64 / 0.011) and near(base["max"], 64 / 0.016),
      "per second")
r = bs.ratios(ours, base)
check(near(r["vs_median"], 0.020 / 0.011) and
      near(r["vs_fastest"], 0.016 / 0.011), f"ratios {r}")
check(r["vs_fastest"] <= r["vs_median"], "fastest window is the harder bar")
check(bs.fmt_rate({"median": 1234.4, "min": 1000, "max": 1500.2}) ==
      "1,234 (1,000-1,500)", "rate format")

# processes pooled: median of their medians, the extreme windows of any,
# each process's median kept; one process passes through
p3 = bs.pool([{"median": 10, "min": 9, "max": 11}, {"median": 14, "min": 12, "max": 15},
              {"median": 12, "min": 8, "max": 13}])
check(p3 == {"median": 12, "min": 8, "max": 15, "procs": [10, 14, 12]}, f"pool {p3}")
check(bs.fmt_procs(p3) == " [10 / 14 / 12]", "process medians format")
p1 = bs.pool([{"median": 10, "min": 9, "max": 11}])
check(p1["median"] == 10 and bs.fmt_procs(p1) == "", f"one process {p1}")
check(bs.ratios(p1, p3)["vs_fastest"] == 10 / 15, "ratio against the pooled fastest window")

with tempfile.TemporaryDirectory() as d:
    # an mgrun run without the driver's figure: not measured, not 0
    with open(f"{d}/steps.csv", "w") as f:
        f.write("step,epoch,step_s\n")
        for i, v in enumerate([0.5, 0.5] + [0.01, 0.02] * 5):
            f.write(f"{i},0,{v}\n")
    rank = {"memory_peak_bytes": {"total": 3 << 20},
            "device_memory": {"method": "none", "driver_peak": None,
                              "at_start": None, "unaccounted": None,
                              "accounted_peak": 3 << 20}}
    json.dump({"ranks": [rank]}, open(f"{d}/report.json", "w"))
    run = bs.mgrun_run(d, 2, 5)
    check(near(run["median"], 0.015) and run["n"] == 5, f"mgrun run {run}")
    check(run["memory"]["driver_peak"] is None and
          run["memory"]["method"] == "none", f"memory {run['memory']}")
    check(bs.fmt_bytes(run["memory"]["driver_peak"]) == "not measured",
          "None prints as not measured")
    check(bs.fmt_bytes(3 << 20) == "3 MiB", "MiB format")

    # PyTorch side, no pynvml and no nvidia-smi: nothing to read
    os.environ["MG_NVML_LIB"] = f"{d}/no-such-libnvidia-ml.so.1"
    m = tm.DeviceMemory(smi=f"{d}/no-such-smi").open()
    check(m.method == "cudaMemGetInfo", f"fallback chosen: {m.method}")
    m.context_ready()  # no GPU here: mem_get_info fails (or no torch)
    res = m.start().stop().result()
    check(res["method"] == "none" and res["driver_peak"] is None,
          f"no GPU: not measured, got {res}")
    check("no NVML" in res["why"], f"why: {res['why']}")

    # nvidia-smi's process list (a fake), this PID listed at 2048 MiB
    smi = f"{d}/nvidia-smi"
    with open(smi, "w") as f:
        f.write(f"#!/bin/sh\necho '77, 512'\necho '{os.getpid()}, 2048'\n")
    os.chmod(smi, os.stat(smi).st_mode | stat.S_IEXEC)
    m = tm.DeviceMemory(smi=smi, period_s=0.001).open()
    check(m.method == "nvidia-smi-process", f"smi method {m.method}")
    m.context_ready().start()
    res = m.stop().result()
    check(res["driver_peak"] == 2048 << 20 and res["at_start"] == 2048 << 20,
          f"smi peak {res}")
    check(res["samples"] >= 2, f"samples {res['samples']}")
    check(tm.parse_smi_apps("1, 5\n2, [N/A]\n", 2) is None, "N/A is None")
    check(tm.parse_smi_apps("1, 5\n", 3) is None, "unlisted is None")

# NVML through ctypes (the stand-in library): this PID's bytes, a peak
# between window boundaries seen by the thread; the device less its use
# before the context when the PID is not listed
if len(sys.argv) > 2:
    os.environ["MG_NVML_LIB"] = sys.argv[2]
    G = 1 << 30
    fake = ctypes.CDLL(sys.argv[2])
    fake.fake_nvml_set.argtypes = [ctypes.c_longlong] * 2 + [ctypes.c_int]
    fake.fake_nvml_set(10 * G, 0, 0)
    m = tm.DeviceMemory(period_s=0.002).open()
    check(m.method == "nvml-device" and m.nvml == "CNvml", f"nvml {m.method}")
    fake.fake_nvml_set(11 * G, G // 2, 1)
    m.context_ready().start()
    check(m.method == "nvml-process" and m.at_start == G // 2, f"{m.result()}")
    fake.fake_nvml_set(20 * G, 3 * G, 1)
    time.sleep(0.05)
    fake.fake_nvml_set(12 * G, G, 1)
    res = m.stop().result()
    check(res["driver_peak"] == 3 * G, f"thread peak {res}")
    fake.fake_nvml_set(10 * G, 0, 0)
    m = tm.DeviceMemory().open()
    fake.fake_nvml_set(14 * G, 0, 0)
    m.context_ready()
    fake.fake_nvml_set(15 * G, 0, 0)
    res = m.stop().result()
    check(res["method"] == "nvml-device" and res["at_start"] == 4 * G and
          res["driver_peak"] == 5 * G and "not in NVML's process list" in res["why"],
          f"device-wide {res}")
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"  # a device NVML lacks
    m = tm.DeviceMemory(smi=None).open()
    check(m.method == "cudaMemGetInfo" and "NVML has no device 1" in m.why,
          f"no device: {m.method} {m.why}")

# tagged key=value lines (bench_gpu_ops' ATTN / RMSNORM), read as the
# *_vs_torch.py scripts read them
with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
    f.write("RMSNORM rows=4096 dim=4096 impl=fused ms=0.1 min=0.09 max=0.2\n"
            "residual add + RMSNorm ... RMSNORM rows=1\n"
            "ATTN shape=x impl=flash dir=fwd ms=1.5\n"
            "RMSNORM rows=16384 impl=unfused ms=0.5\n")
rows = bs.read_tagged(f.name, "RMSNORM")
check(len(rows) == 2 and rows[0]["impl"] == "fused" and rows[0]["max"] == "0.2"
      and rows[1]["rows"] == "16384", f"tagged lines {rows}")
check(bs.read_tagged(f.name, "ATTN") == [{"shape": "x", "impl": "flash",
                                          "dir": "fwd", "ms": "1.5"}], "ATTN")
check(bs.read_tagged(None, "ATTN") == [], "no log")
check(bs.read_tagged(f.name + ".missing", "ATTN") == [], "unreadable log")
os.unlink(f.name)

# CUDA_VISIBLE_DEVICES picks NVML's device
os.environ["CUDA_VISIBLE_DEVICES"] = "3,1"
check(tm.nvml_index(1) == "1" and tm.nvml_index(0) == "3", "visible devices")
print(f"bench stats: {checks} checks ok")
