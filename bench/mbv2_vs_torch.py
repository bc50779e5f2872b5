#!/usr/bin/env python3
"""mbv2_vs_torch.py - MobileNetV2 training throughput and memory, mgrun
against PyTorch on one GPU in one call (scripts/gpu.sh compare): the
MobileNetV2 part of bench/like4like.py for the given sizes and
precisions (its docstring says how both sides are measured), then the
effect of CUDA graphs on mgrun's step (the same windows, graphs off).

usage: bench/mbv2_vs_torch.py MGRUN OUTDIR [sizes] [precs]
  sizes default 28,100,224,500; precs default fp32,fp16,bf16
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_stats as bs  # noqa: E402
import like4like as l4l  # noqa: E402

mgrun, out = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    os.environ["MG_L4L_SIZES"] = sys.argv[3]
if len(sys.argv) > 4:
    os.environ["MG_L4L_PRECS"] = sys.argv[4]
os.environ.setdefault("MG_L4L_COMPILE", "")
rc = l4l.main([mgrun, out, "mbv2"])

# The launch-overhead effect: the same step without CUDA graphs.
print("\nCUDA graph effect (mgrun, batch 64, median window):")
for c in l4l.json.load(open(os.path.join(out, "like4like.json")))["mbv2"]:
    if (c["size"], c["prec"]) not in ((28, "fp32"), (224, "bf16")):
        continue
    on = c["mgrun"]
    off = l4l.mgrun_cell(
        mgrun, out, f"l4l_mbv2_{c['size']}_{c['prec']}_eager",
        ["-c", os.path.join(l4l.ROOT, "conf", "fashion_mnist.ini"),
         "--set", "run.device=cuda", "--set", f"run.precision={c['prec']}",
         "--set", f"dataset.image_size={c['size']}",
         "--set", f"run.max_steps={l4l.MBV2_WARM + l4l.WINDOWS * l4l.STEPS}",
         "--set", "run.eval=false", "--set", "run.checkpoint=false",
         "--set", "run.batch_size=64", "--set", "run.log_every=1000",
         "--set", "optimizer.warmup_steps=0", "--set", "run.cuda_graph=false"]
        + (["--set", "dataset.dir=" + os.environ["MG_FASHION_DIR"]]
           if os.environ.get("MG_FASHION_DIR") else []),
        l4l.MBV2_WARM, 64)
    if "error" in on or "error" in off:
        print(f"{c['size']:>5} {c['prec']:>5} failed")
        rc = 1
        continue
    print(f"{c['size']:>5} {c['prec']:>5} graph {1e3 * on['median']:.2f} ms/step "
          f"({1e3 * on['min']:.2f}-{1e3 * on['max']:.2f}), eager "
          f"{1e3 * off['median']:.2f} ms/step ({1e3 * off['min']:.2f}-"
          f"{1e3 * off['max']:.2f}): {off['median'] / on['median']:.2f}x")
sys.exit(rc)
