#!/usr/bin/env python3
"""attention_vs_torch.py - causal grouped-query attention, PyTorch's
F.scaled_dot_product_attention (flash backend where it runs) beside
mgrun's kernels, on the shapes of tests/gpu/bench_gpu_ops.c's attention
mode, timed the same way: CUDA events around windows of 10 calls, the
median of 7 windows (after 3 warm-up calls) with the fastest and slowest
window, TFLOPS of the causal work (forward 2 N Hq T^2 hd, backward 2.5x).

Tensors are laid out as mgrun's, [N, T, H, hd], and handed to SDPA as
transposed views [N, H, T, hd]. GQA: enable_gqa=True where this PyTorch
has it and the flash backend takes it, else k/v repeated to Hq heads
once, outside the timed region (noted in the table).

usage: bench/attention_vs_torch.py [BENCH_LOG] [bf16|f16]
  BENCH_LOG: output of `bench_gpu_ops attention` (its ATTN lines); with
  it, the mgrun times and the ratio torch / mgrun are printed too.
Exit status 0, or 1 when PyTorch or CUDA is missing or a run fails.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_stats as bs  # noqa: E402
import torch_measure as tm  # noqa: E402

SHAPES = [  # name, N, T, Hq, Hkv, hd (as bench_gpu_ops.c)
    ("llama3-8b-T512", 2, 512, 32, 8, 128),
    ("llama3-8b-T2048", 2, 2048, 32, 8, 128),
    ("llama3.2-1b-T512", 8, 512, 32, 8, 64),
    ("llama3.2-1b-T2048", 4, 2048, 32, 8, 64),
    ("llama3.2-3b-T1024", 4, 1024, 24, 8, 128),
]
TRIALS, ITERS, WARM = 7, 10, 3
MUL = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}


def read_mgrun(path):
    """{(shape, impl, dir): ms} from the ATTN lines of a bench log."""
    return {(kv["shape"], kv["impl"], kv["dir"]): float(kv["ms"])
            for kv in bs.read_tagged(path, "ATTN")}


def main():
    log = sys.argv[1] if len(sys.argv) > 1 else None
    dts = sys.argv[2] if len(sys.argv) > 2 else "bf16"
    torch = tm.cuda_torch()
    if torch is None:
        return 1
    import torch.nn.functional as F
    dtype = torch.bfloat16 if dts == "bf16" else torch.float16
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {dts}")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def flash_ctx():
            return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    except ImportError:
        import contextlib

        def flash_ctx():
            return contextlib.nullcontext()

    mg = read_mgrun(log)
    rows = []
    failed = False
    for name, N, T, Hq, Hkv, hd in SHAPES:
        torch.manual_seed(0)
        dev = "cuda"
        q = (torch.rand(N, T, Hq, hd, device=dev) * 4 - 2).to(dtype)
        k = (torch.rand(N, T, Hkv, hd, device=dev) * 4 - 2).to(dtype)
        v = (torch.rand(N, T, Hkv, hd, device=dev) * 2 - 1).to(dtype)
        do = (torch.rand(N, T, Hq, hd, device=dev) * 2 - 1).to(dtype)
        q.requires_grad_(True)
        k.requires_grad_(True)
        v.requires_grad_(True)
        qt = q.transpose(1, 2)
        dot = do.transpose(1, 2)
        # GQA natively if this torch + flash backend take it
        how = "enable_gqa"

        def sdpa_gqa():
            return F.scaled_dot_product_attention(
                qt, k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                enable_gqa=True)

        kr = k.detach().repeat_interleave(Hq // Hkv, dim=2).requires_grad_(True)
        vr = v.detach().repeat_interleave(Hq // Hkv, dim=2).requires_grad_(True)

        def sdpa_rep():
            return F.scaled_dot_product_attention(
                qt, kr.transpose(1, 2), vr.transpose(1, 2), is_causal=True)

        fn = sdpa_gqa
        try:
            with flash_ctx():
                fn().backward(dot)
            torch.cuda.synchronize()
        except Exception as e:  # no enable_gqa, or not on flash
            how = f"repeat_interleave ({type(e).__name__})"
            fn = sdpa_rep
        try:
            with flash_ctx():
                fn().backward(dot)
            torch.cuda.synchronize()
        except Exception as e:
            print(f"FAIL {name}: SDPA flash does not run: {e}")
            failed = True
            continue
        out = {}

        def run_fwd():
            with torch.no_grad():
                fn()

        o_saved = {}

        def prep_bwd():
            o_saved["o"] = fn()

        def run_bwd():
            o_saved["o"].backward(dot, retain_graph=True)

        def run_both():
            fn().backward(dot)

        for d, f in (("fwd", run_fwd), ("bwd", run_bwd), ("fwd+bwd", run_both)):
            with flash_ctx():
                if d == "bwd":
                    prep_bwd()
                for _ in range(WARM):
                    f()
                ts = []
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                for _ in range(TRIALS):
                    e0.record()
                    for _ in range(ITERS):
                        f()
                    e1.record()
                    e1.synchronize()
                    ts.append(e0.elapsed_time(e1) / ITERS)
            ts.sort()
            out[d] = (statistics.median(ts), ts[0], ts[-1])
            q.grad = k.grad = v.grad = kr.grad = vr.grad = None
        fl = 2.0 * N * Hq * T * T * hd
        for d in ("fwd", "bwd", "fwd+bwd"):
            ms, lo, hi = out[d]
            tf = MUL[d] * fl / (ms * 1e-3) / 1e12
            rows.append((name, d, ms, lo, hi, tf, how))
        del q, k, v, do, kr, vr
        torch.cuda.empty_cache()

    print(f"\n{'shape':18s} {'dir':8s} {'torch ms':>9s} {'spread':>21s} "
          f"{'TFLOPS':>7s} {'flash ms':>9s} {'tiled ms':>9s} "
          f"{'torch/flash':>11s} {'torch/tiled':>11s}")
    for name, d, ms, lo, hi, tf, how in rows:
        fm = mg.get((name, "flash", d))
        tiled_ms = mg.get((name, "tiled", d))
        fs = f"{fm:9.4f}" if fm else f"{'-':>9s}"
        ts_ = f"{tiled_ms:9.4f}" if tiled_ms else f"{'-':>9s}"
        rf = f"{ms / fm:10.2f}x" if fm else f"{'-':>11s}"
        rt = f"{ms / tiled_ms:10.2f}x" if tiled_ms else f"{'-':>11s}"
        print(f"{name:18s} {d:8s} {ms:9.4f} [{lo:8.4f}, {hi:8.4f}] "
              f"{tf:7.1f} {fs} {ts_} {rf} {rt}")
    gq = sorted(set(r[6] for r in rows))
    print("torch GQA: " + "; ".join(gq))
    print("ratio torch/mgrun > 1: mgrun faster")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
