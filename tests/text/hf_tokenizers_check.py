#!/usr/bin/env python3
"""hf_tokenizers_check.py - `mgrun tokenize` against Hugging Face's own
`tokenizers` library (the Rust implementation transformers uses), on the
GPU machine where it is installed (scripts/gpu.sh text).

The CI reference test compares against JavaScript ports; this one compares
against the implementation that defines the format. For every tokenizer
folder given and every text of the corpus (one JSON string per line), the
ids with and without special tokens and the decoded text must be equal.
Exits 1 on any difference, printing the first ones; 77 when `tokenizers`
is missing.

usage: hf_tokenizers_check.py MGRUN CORPUS TOKENIZER_DIR...
"""
import json
import subprocess
import sys
import time


def mgrun_lines(mgrun, args, stdin):
    p = subprocess.run([mgrun, "tokenize"] + args, input=stdin,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"mgrun tokenize {' '.join(args)} failed "
                 f"({p.returncode}): {p.stderr.strip()}")
    return p.stdout.splitlines()


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("hf_tokenizers_check: skipped (no tokenizers module)")
        sys.exit(77)
    mgrun, corpus = sys.argv[1], sys.argv[2]
    with open(corpus, encoding="utf-8") as f:
        raw = [ln for ln in f.read().splitlines() if ln.strip()]
    texts = [json.loads(ln) for ln in raw]
    stdin = "\n".join(raw) + "\n"
    bad = 0
    for d in sys.argv[3:]:
        tok = Tokenizer.from_file(f"{d}/tokenizer.json")
        for special in (True, False):
            args = ["--tokenizer", d, "--json"]
            if not special:
                args.append("--no-special")
            t0 = time.perf_counter()
            got = mgrun_lines(mgrun, args, stdin)
            t_mg = time.perf_counter() - t0
            t0 = time.perf_counter()
            want = [tok.encode(t, add_special_tokens=special).ids
                    for t in texts]
            t_hf = time.perf_counter() - t0
            if len(got) != len(texts):
                sys.exit(f"{d}: {len(got)} output lines for "
                         f"{len(texts)} texts")
            miss = 0
            for t, g, w in zip(texts, got, want):
                gi = [int(x) for x in g.split()]
                if gi != w:
                    miss += 1
                    if miss <= 5:
                        print(f"MISMATCH {d} special={special} "
                              f"text={json.dumps(t)[:200]}\n  mgrun {gi[:40]}"
                              f"\n  hf    {w[:40]}")
            print(f"{d}: special={special}: {len(texts) - miss}/"
                  f"{len(texts)} texts equal to tokenizers "
                  f"(mgrun {t_mg:.2f} s incl. start, hf {t_hf:.2f} s)")
            bad += miss
        # decode: HF's decode of the HF ids against mgrun --decode.
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        got = mgrun_lines(mgrun, ["--tokenizer", d, "--decode"],
                          "\n".join(" ".join(map(str, i)) for i in ids)
                          + "\n")
        miss = 0
        for t, i, g in zip(texts, ids, got):
            w = tok.decode(i, skip_special_tokens=False)
            if json.loads(g) != w:
                miss += 1
                if miss <= 5:
                    print(f"DECODE MISMATCH {d} text={json.dumps(t)[:200]}"
                          f"\n  mgrun {g[:200]}\n  hf    "
                          f"{json.dumps(w)[:200]}")
        print(f"{d}: decode: {len(texts) - miss}/{len(texts)} equal")
        bad += miss
    if bad:
        print(f"hf_tokenizers_check: FAILED, {bad} differences")
        sys.exit(1)
    print("hf_tokenizers_check: all equal")


if __name__ == "__main__":
    main()
