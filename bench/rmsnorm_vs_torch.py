#!/usr/bin/env python3
"""rmsnorm_vs_torch.py - seed 002's kernel swap (Liger's fused RMSNorm in
place of LitGPT's, 1.594x at micro-batch 32) beside mgrun's: a residual
add then RMSNorm, forward and backward, on Llama-2-7B's [micro-batch x
512, 4096] residual stream in bf16 with an fp32 weight, timed as
tests/gpu/bench_gpu_ops.c's `fused` mode times mgrun's (CUDA events
around windows of 10 calls, the median of 7 windows after 3 warm-up
calls, fastest and slowest beside it).

PyTorch, three ways: the unfused module the seed swapped out (LitGPT's
RMSNorm arithmetic: upcast to fp32, mean of squares, rsqrt, scale, cast
back; several kernels each way), torch.nn.functional.rms_norm (PyTorch's
own op), and the unfused module under torch.compile (inductor fuses it;
PyTorch's best working set-up). Liger itself is not installed on the GPU
machine.

usage: bench/rmsnorm_vs_torch.py [BENCH_LOG]
  BENCH_LOG: output of `bench_gpu_ops fused` (its RMSNORM lines); with
  it, mgrun's unfused and fused times and the ratios are printed too.
Exit status 0, or 1 when PyTorch or CUDA is missing or a run fails.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_stats as bs  # noqa: E402
import torch_measure as tm  # noqa: E402

SHAPES = [(8 * 512, 4096), (32 * 512, 4096)]  # as bench_gpu_ops.c
TRIALS, ITERS, WARM = 7, 10, 3
EPS = 1e-5


def read_mgrun(path):
    """{(rows, impl): (ms, min, max)} from the RMSNORM lines of a log."""
    return {(int(kv["rows"]), kv["impl"]):
            tuple(float(kv[k]) for k in ("ms", "min", "max"))
            for kv in bs.read_tagged(path, "RMSNORM")}


def main():
    log = sys.argv[1] if len(sys.argv) > 1 else None
    torch = tm.cuda_torch()
    if torch is None:
        return 1
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16")

    def unfused(x, r, w):
        # the seed's reference: residual add, then RMSNorm computed in
        # fp32 op by op and cast back to the stream's dtype
        s = x + r
        f = s.float()
        y = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + EPS)
        return s, (y * w).to(s.dtype)

    def functional(x, r, w):
        s = x + r
        return s, torch.nn.functional.rms_norm(
            s.float(), (s.shape[-1],), w, EPS).to(s.dtype)

    variants = [("LitGPT-style, eager", unfused), ("F.rms_norm", functional)]
    try:
        variants.append(("LitGPT-style, torch.compile", torch.compile(unfused)))
    except Exception as e:  # no inductor here
        print(f"torch.compile unavailable: {e}")

    mg = read_mgrun(log)
    failed = False
    rows_out = []
    for R, D in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(R, D, device="cuda", dtype=torch.bfloat16,
                        requires_grad=True)
        r = torch.randn(R, D, device="cuda", dtype=torch.bfloat16,
                        requires_grad=True)
        w = (1 + 0.1 * torch.randn(D, device="cuda")).requires_grad_(True)
        dy = torch.randn(R, D, device="cuda", dtype=torch.bfloat16)
        # the residual's own gradient from the layers above, as mgrun's
        # bench adds it (dres)
        ds = torch.randn(R, D, device="cuda", dtype=torch.bfloat16)
        for name, fn in variants:
            def call():
                s, y = fn(x, r, w)
                torch.autograd.backward((s, y), (ds, dy))
                x.grad = r.grad = w.grad = None
            try:
                for _ in range(WARM):
                    call()
                torch.cuda.synchronize()
                t = tm.time_windows(call, TRIALS, ITERS)  # s per call
            except Exception as e:
                print(f"FAIL {name} at [{R}, {D}]: {e}")
                failed = True
                continue
            rows_out.append((R, D, name, 1e3 * t["median"], 1e3 * t["min"],
                             1e3 * t["max"]))

    print(f"\nresidual add + RMSNorm, forward and backward, bf16 stream, "
          f"fp32 weight; ms per call, median [fastest, slowest] of "
          f"{TRIALS} windows of {ITERS}\n")
    print("| micro-batch x 512 | PyTorch | PyTorch ms | mgrun unfused ms | "
          "mgrun fused ms | PyTorch / mgrun fused (median) | "
          "PyTorch fastest / mgrun fused |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for R, D, name, med, lo, hi in rows_out:
        u, f = mg.get((R, "unfused")), mg.get((R, "fused"))
        us = f"{u[0]:.4f}" if u else "-"
        fs = f"{f[0]:.4f} [{f[1]:.4f}, {f[2]:.4f}]" if f else "-"
        ratio = f"**{med / f[0]:.2f}x**" if f else "-"
        fast = f"{lo / f[0]:.2f}x" if f else "-"
        print(f"| {R // 512} | {name} | {med:.4f} [{lo:.4f}, {hi:.4f}] | "
              f"{us} | {fs} | {ratio} | {fast} |")
    for R, _ in SHAPES:
        u, f = mg.get((R, "unfused")), mg.get((R, "fused"))
        if u and f:
            print(f"mgrun's own swap at micro-batch {R // 512}: unfused / "
                  f"fused {u[0] / f[0]:.2f}x")
    print("(> 1: mgrun's fused kernel faster; the seed's Liger swap: "
          "1.594x at micro-batch 32)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
