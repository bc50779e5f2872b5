#!/usr/bin/env python3
"""techniques_ratios.py SWEEP_JSON - issue 17's two cost targets from a
conf/sweep_techniques.ini run (scripts/techniques.sh, GPU: scripts/gpu.sh
techniques): per technique the steady step median and tokens/s (the
sweep's own figures), and against the LoRA SFT point (`lora`) the step
ratio and the per-token ratio (tokens/s of lora over the technique's:
a DPO row holds a pair, chosen and rejected, so its steps carry about the
same tokens as SFT's, the reference pass included). Targets: DPO at most
2.2x the SFT step on the same tokens, QAT at most 1.3x. Exit 1 when the
lora point or a figure is missing (nothing is guessed)."""
import json
import sys


def main(path):
    d = json.load(open(path))
    rows = {}
    for p in d["points"]:
        t = p["values"].get("technique", p["id"])
        s = p["summary"]
        rows[t] = (s.get("step_median_s"), s.get("tokens_per_s"))
    base = rows.get("lora")
    if not base or not base[0] or not base[1]:
        sys.exit(f"{path}: no lora point with a step median and tokens/s")
    print("| technique | step median (ms) | tokens/s | step vs lora | per token vs lora | issue 17's target (per token) |")
    print("| --- | --- | --- | --- | --- | --- |")
    bad = 0
    for t, (step, tps) in rows.items():
        if not step or not tps:
            print(f"| {t} | - | - | - | - | no steady steps |")
            bad += 1
            continue
        target = {"dpo": "at most 2.2x", "qat": "at most 1.3x"}.get(t, "-")
        print(f"| {t} | {1e3 * step:.1f} | {tps:,.0f} | {step / base[0]:.2f}x | "
              f"{base[1] / tps:.2f}x | {target} |")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: techniques_ratios.py SWEEP_JSON")
    sys.exit(main(sys.argv[1]))
