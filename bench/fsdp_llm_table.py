#!/usr/bin/env python3
"""fsdp_llm_table.py JSONL - bench/fsdp_llm.sh's markdown table: per shard
mode, mgrun's tokens/s per GPU (median window, slowest-fastest), model
TFLOP/s per GPU (6 x parameters x tokens/s; attention's products not
counted) and its share of the GEMM ceiling measured in the same call,
memory per rank (the largest rank's process peak as the driver sees it,
mgrun's accounted peak and categories beside it), and PyTorch FSDP2's
figures for the same mode with the ratios against its median and fastest
window. The parameter count is mgrun's report (trainable_parameters),
else PyTorch's. Reads the mgrun reports the script copied beside JSONL."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_stats as bs  # noqa: E402


def gib(b):
    return "not measured" if b is None else f"{b / 2**30:.1f}"


def params_of(jsonl, r):
    rep = os.path.join(os.path.dirname(jsonl), f"fsdp_llm_{r['mode']}.json")
    try:
        return json.load(open(rep))["run"]["trainable_parameters"]
    except (OSError, KeyError, ValueError):
        return r["torch"].get("params")


def main(jsonl):
    print("| mode (PyTorch) | micro-batch/GPU | mgrun tok/s/GPU | model TFLOP/s/GPU "
          "| of GEMM ceiling | mgrun GiB/rank: driver (accounted) | grads | gather | optimizer "
          "| host GiB: pinned (pageable) | PyTorch tok/s/GPU | PyTorch GiB/rank: driver (reserved / "
          "allocated) | vs median | vs fastest |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ceiling = None
    for line in open(jsonl):
        r = json.loads(line)
        ceiling = r.get("ceiling") or ceiling
        m, t = r["mgrun"], r["torch"]
        ck = ", checkpointing" if r.get("ckpt") else ""
        row = [f"{r['mode']} ({r['tmode']}){ck}", str(r["mb"])]
        tokens = r["mb"] * r["seq"]
        rate = None
        if m.get("oom"):
            row += ["out of memory"] + ["-"] * 7
        elif "error" in m:
            row += ["FAILED"] + ["-"] * 7
        else:
            rate = bs.per_second(m, tokens)
            n = params_of(jsonl, r)
            tf = 6 * n * rate["median"] / 1e12 if n else None
            c = m["memory"]["categories"]
            row += [bs.fmt_rate(rate),
                    "-" if tf is None else f"{tf:.0f}",
                    "-" if tf is None or not r.get("ceiling") else f"{100 * tf / r['ceiling']:.0f}%",
                    f"{gib(m['memory']['driver_peak'])} ({gib(m['memory']['accounted_peak'])})",
                    gib(c.get("grads")), gib(c.get("gather")), gib(c.get("optimizer")),
                    f"{gib(c.get('host_pinned'))} ({gib(c.get('host_pageable'))})"]
        if t.get("oom"):
            row += ["out of memory", "-", "-", "-"]
        elif "error" in t:
            row += [t["error"], "-", "-", "-"]
        else:
            tr = t["tok_s_gpu"]
            row += [f"{bs.fmt_rate(tr)} ({t.get('policy', '')})",
                    f"{gib(t.get('driver_peak_rank'))} ({gib(t.get('max_reserved_rank'))} / "
                    f"{gib(t.get('max_allocated_rank'))})"]
            if rate:
                q = bs.ratios(rate, tr)
                row += [f"{q['vs_median']:.2f}x", f"{q['vs_fastest']:.2f}x"]
            else:
                row += ["-", "-"]
        print("| " + " | ".join(row) + " |")
    print()
    print("GEMM ceiling (bf16, mg_op_linear, same call): "
          + (f"{ceiling:.0f} TFLOP/s" if ceiling else "not measured"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fsdp_llm_table.py FSDP_LLM_JSONL")
    main(sys.argv[1])
