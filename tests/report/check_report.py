#!/usr/bin/env python3
"""check_report.py SCHEMA RUN_DIR [--world N] [--self-test]

Validates a run directory against docs/REPORT.md: report.json against the
JSON Schema, then what a schema cannot say (ranks numbered 0..world-1,
steps.csv and memory.csv columns and rows consistent with report.json).
--self-test also breaks a copy of the report in known ways and requires
each to be rejected, so a validator that accepts everything fails.
"""
import copy
import csv
import json
import sys

import jsonschema

STEPS_COLUMNS = [
    "step", "epoch", "loss", "accuracy", "lr", "grad_norm", "skipped",
    "step_s", "data_s", "h2d_s", "forward_s", "backward_s",
    "comm_exposed_s", "comm_overlapped_s", "optimizer_s", "mem_bytes",
    "mem_peak_bytes",
]
MEM_CATEGORIES = ["params", "grads", "optimizer", "gather", "activations",
                  "input", "other", "libraries"]


def problems(schema, rep, steps, mem, world):
    """Every problem found, as strings (empty: valid)."""
    out = [f"schema: {e.json_path}: {e.message}" for e in
           jsonschema.Draft202012Validator(schema).iter_errors(rep)]
    if out:
        return out
    run = rep["run"]
    if [r["rank"] for r in rep["ranks"]] != list(range(run["world"])):
        out.append("ranks are not numbered 0..world-1")
    if world is not None and run["world"] != world:
        out.append(f"world {run['world']}, expected {world}")
    hdr, rows = steps[0], steps[1:]
    if hdr != STEPS_COLUMNS:
        out.append(f"steps.csv columns {hdr}")
    elif any(len(r) != len(hdr) for r in rows):
        out.append("steps.csv: a row with another field count")
    else:
        want = run["total_steps"] - run["resumed_at_step"]
        if rep["status"] == "finished" and len(rows) != want:
            out.append(f"steps.csv has {len(rows)} rows, want {want}")
        idx = [int(r[0]) for r in rows]
        if idx != sorted(idx) or len(set(idx)) != len(idx):
            out.append("steps.csv: steps out of order")
        tsum = sum(float(r[7]) for r in rows)
        if abs(tsum - run["train_s"]) > 1e-3 * max(1.0, tsum) + 1e-3:
            out.append(f"train_s {run['train_s']} != steps.csv sum {tsum}")
    mhdr, mrows = mem[0], mem[1:]
    if mhdr != ["t_s", "step"] + MEM_CATEGORIES + ["total", "host_pinned"]:
        out.append(f"memory.csv columns {mhdr}")
        return out
    if not mrows:
        out.append("memory.csv has no rows")
        return out
    last_t = -1.0
    for r in mrows:
        v = [int(x) for x in r[2:]]
        if sum(v[:len(MEM_CATEGORIES)]) != v[len(MEM_CATEGORIES)]:
            out.append(f"memory.csv: total != sum of categories: {r}")
            break
        if float(r[0]) < last_t:
            out.append("memory.csv: time goes backwards")
            break
        last_t = float(r[0])
    peak = max(int(r[2 + len(MEM_CATEGORIES)]) for r in mrows)
    want = rep["ranks"][0]["memory_peak_bytes"]["total"]
    if rep["files"]["memory_rows_dropped"] == 0 and peak != want:
        out.append(f"memory.csv peak {peak} != rank 0 peak total {want}")
    for r in rep["ranks"]:
        d = r.get("device_memory")
        if d is None:
            out.append(f"rank {r['rank']}: no device_memory")
            continue
        if d["accounted_peak"] != r["memory_peak_bytes"]["total"]:
            out.append(f"rank {r['rank']}: device_memory.accounted_peak "
                       "!= memory_peak_bytes.total")
        # not measured is null, never a made-up 0
        if (d["method"] == "none") != (d["driver_peak"] is None):
            out.append(f"rank {r['rank']}: device_memory method "
                       f"{d['method']} with driver_peak {d['driver_peak']}")
        if run["device"] == "cpu" and d["method"] != "none":
            out.append(f"rank {r['rank']}: driver memory on the cpu")
    prof = rep.get("profile")
    if prof:
        for r in prof["ranks"]:
            missing = [m for m in prof["metrics"] if m not in r]
            if missing:
                out.append(f"profile rank {r['rank']} lacks {missing}")
    return out


def self_test(schema, rep, steps, mem, world):
    """Known breakages that must each be rejected."""
    def broken(f):
        r, s, m = copy.deepcopy(rep), copy.deepcopy(steps), copy.deepcopy(mem)
        f(r, s, m)
        return problems(schema, r, s, m, world)
    cases = {
        "wrong schema version": lambda r, s, m: r.update(schema="mgrun-report-1"),
        "missing run.train_s": lambda r, s, m: r["run"].pop("train_s"),
        "unknown top-level key": lambda r, s, m: r.update(extra=1),
        "negative phase time": lambda r, s, m: r["ranks"][0]["time_s"].update(forward=-1),
        "accuracy above 1": lambda r, s, m: r["epochs"][0].update(train_accuracy=1.5),
        "rank numbering": lambda r, s, m: r["ranks"][0].update(rank=5),
        "steps.csv row dropped": lambda r, s, m: s.pop(),
        "steps.csv column renamed": lambda r, s, m: s[0].__setitem__(12, "comm_s"),
        "memory.csv total wrong": lambda r, s, m: m[1].__setitem__(-2, "1"),
        "driver memory a made-up 0": lambda r, s, m: r["ranks"][0]["device_memory"].update(driver_peak=0),
        "device_memory missing": lambda r, s, m: r["ranks"][0].pop("device_memory"),
    }
    bad = [name for name, f in cases.items() if not broken(f)]
    if bad:
        sys.exit(f"self-test: accepted a broken report: {', '.join(bad)}")
    print(f"self-test: {len(cases)} broken reports rejected")


def main():
    args = sys.argv[1:]
    world = None
    if "--world" in args:
        i = args.index("--world")
        world = int(args[i + 1])
        del args[i:i + 2]
    selftest = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    schema_path, run_dir = args
    schema = json.load(open(schema_path))
    jsonschema.Draft202012Validator.check_schema(schema)
    rep = json.load(open(f"{run_dir}/report.json"))
    steps = list(csv.reader(open(f"{run_dir}/steps.csv")))
    mem = list(csv.reader(open(f"{run_dir}/memory.csv")))
    found = problems(schema, rep, steps, mem, world)
    if found:
        sys.exit(f"{run_dir}: invalid report:\n  " + "\n  ".join(found))
    print(f"{run_dir}: report valid ({rep['schema']}, world "
          f"{rep['run']['world']}, {len(steps) - 1} steps, "
          f"{len(mem) - 1} memory rows)")
    if selftest:
        self_test(schema, rep, steps, mem, world)


if __name__ == "__main__":
    main()
