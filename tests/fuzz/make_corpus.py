#!/usr/bin/env python3
"""make_corpus.py - write the seed corpus of the fuzz targets
(tests/fuzz/corpus/<target>/): a few valid inputs of each format and the
edge cases the readers must refuse cleanly (issue 18's cases among them).
Run from anywhere; rewrites the seeds it owns (seed-*) and keeps the
regression inputs (regress-*: past findings, checked in as found).
Usage: make_corpus.py [CORPUS_DIR]"""
import gzip
import json
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clean():
    for t in ("ini", "idx", "safetensors", "report", "chat"):
        d = os.path.join(out, t)
        if os.path.isdir(d):
            for n in os.listdir(d):
                if n.startswith("seed-"):
                    os.remove(os.path.join(d, n))


clean()

# ---- INI: an experiment file; the first line doubles as a --set ------
put("ini", "valid", """[s]
i = 12
j = -3
f = 0.5
b = false
e = bf16
s = some text ; a comment
p = data/x.idx
r = yes

[run]
epochs = 2
""")
put("ini", "set_first_line", "s.i=7\n[s]\nr = 1\n")
put("ini", "bad_values", """[s]
i = 0x10
f = 1e999
b = maybe
e = fp8
i = 5
r =
j = 99999999999999999999
""")
put("ini", "syntax", "key before section\n[unclosed\n[]\n = v\n[s]\nnovalue\n[s]\n")
put("ini", "bom_crlf", "\ufeff[s]\r\nr = x\r\n  continued\r\nf=.5\r\n")
put("ini", "long_line", "[s]\nr = " + "x" * 5000 + "\n")
put("ini", "typos", "[sx]\nr=1\n[s]\nrr = 1\nIi = 3\n")
put("ini", "no_newline", "[s]\nr=1")
put("ini", "nul", "[s]\nr=a\0b\n")

# ---- IDX: 4-byte magic (0 0 type ndim), big-endian dims, bytes -------


def idx(dims, payload=None, typ=8):
    n = 1
    for d in dims:
        n *= d
    if payload is None:
        payload = bytes(i % 10 for i in range(n))
    return bytes([0, 0, typ, len(dims)]) + b"".join(
        struct.pack(">I", d) for d in dims) + payload


images = idx([3, 4, 4])
labels = idx([3])
put("idx", "images", images)
put("idx", "labels", labels)
put("idx", "images.gz", gzip.compress(images, mtime=0))
put("idx", "labels.gz", gzip.compress(labels, mtime=0))
put("idx", "two_members.gz",
    gzip.compress(labels[:6], mtime=0) + gzip.compress(labels[6:], mtime=0))
put("idx", "gz_trailing", gzip.compress(labels, mtime=0) + b"junk")
put("idx", "gz_truncated", gzip.compress(images, mtime=0)[:-9])
put("idx", "truncated", images[:-5])
put("idx", "trailing", labels + b"\1\2")
put("idx", "type_float", idx([2], b"\0" * 8, typ=0x0D))
put("idx", "huge_dims", bytes([0, 0, 8, 3]) + b"\xff\xff\xff\xff" * 3)
put("idx", "zero_dim", idx([0, 4, 4], b""))
put("idx", "bad_label", idx([2], b"\x07\xff"))
put("idx", "empty", b"")

# ---- safetensors: u64 header length, JSON header, data --------------


def st(header, data=b"", raw=None):
    h = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


f32 = struct.pack("<4f", 1, 2, 3, 4)
put("safetensors", "valid", st({
    "__metadata__": {"next_step": "3", "optimizer_step": "3"},
    "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "F64", "shape": [1], "data_offsets": [16, 24]},
}, f32 + struct.pack("<d", 0.5)))
put("safetensors", "zero_length", st({
    "a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
    "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
}, f32[:4]))
put("safetensors", "meta_array", st({"__metadata__": ["a", "b"]}))
put("safetensors", "meta_number", st({"__metadata__": {"k": 5}}))
put("safetensors", "shape_float", st({
    "w": {"dtype": "F32", "shape": [10.7], "data_offsets": [0, 4]}}, f32))
put("safetensors", "overlap", st({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
}, f32))
put("safetensors", "out_of_file", st({
    "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32[:8]))
put("safetensors", "bad_dtype", st({
    "a": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
put("safetensors", "huge_shape", st({
    "a": {"dtype": "F64", "shape": [4611686018427387904, 4],
          "data_offsets": [0, 8]}}, b"\0" * 8))
put("safetensors", "header_len_huge", struct.pack("<Q", 1 << 62) + b"{}")
put("safetensors", "not_json", st(None, raw=b"{\"a\": "))
put("safetensors", "short", b"\x02\0\0")

# ---- report: report.json, steps.csv, memory.csv, profile_memcpy.csv,
# separated by lines "%%" ---------------------------------------------
report = {
    "schema": "mgrun-report-2", "status": "finished", "config": "[run]\n",
    "run": {"world": 2, "device": "cpu", "precision": "F32",
            "batch_size": 64, "total_steps": 5, "wall_s": 2.5,
            "train_s": 2.0, "samples_per_s": 160.0,
            "step_s": {"median": 0.4}, "test_accuracy": 0.5},
    "epochs": [{"epoch": 0, "steps": 5, "samples": 320, "seconds": 2.0,
                "test_accuracy": 0.5}],
    "ranks": [{"rank": r, "time_s": {"data": 0.1, "forward": 1.0},
               "memory_peak_bytes": {"params": 100, "total": 300}}
              for r in range(2)],
    "profile": {"metrics": ["gemm", "copy"], "window": {"seconds": 1.5},
                "ranks": [{"gemm": {"count": 3, "seconds": 0.2,
                                    "bytes": 0}}, {"copy": {}}]},
}
cols = ("step,epoch,loss,accuracy,lr,grad_norm,skipped,step_s,data_s,"
        "h2d_s,forward_s,backward_s,comm_exposed_s,comm_overlapped_s,"
        "optimizer_s,mem_bytes,mem_peak_bytes\n")
steps = cols + "".join(
    "%d,0,2.3,0.1,0.01,5,0,0.4,0.01,0,0.2,0.15,0,0,0.04,100,200\n" % i
    for i in range(5))
memory = ("t_s,step,params,grads,optimizer,gather,activations,input,other,"
          "total,host_pinned\n0.5,0,10,0,0,0,0,0,0,10,0\n")
copies = ("t_s,kind,bytes,duration_s\n0.0,h2d,4096,0.0002\n"
          "0.001,d2h,4096,0.00025\n")


def run(*parts):
    return "\n%%\n".join(parts)


put("report", "valid", run(json.dumps(report), steps, memory, copies))
put("report", "report_only", run(json.dumps(report)))
r1 = dict(report, schema="mgrun-report-1")
del r1["run"]["train_s"]
put("report", "schema1", run(json.dumps(r1), steps))
put("report", "wrong_types", run(json.dumps({
    "schema": "mgrun-report-2", "status": 5, "config": ["x"],
    "run": {"world": "two", "total_steps": -1, "step_s": [1]},
    "epochs": {"a": 1}, "ranks": [1, "x", {"time_s": 3}],
    "profile": {"metrics": [1, "m", None], "ranks": [{"m": 2}]}}), steps))
put("report", "csv_ragged", run(json.dumps(report),
                                "step,step_s\n1\n2,0.1,9\n,\n\n3,x\n",
                                "t_s\n", "t_s,kind\n1,h2d"))
put("report", "not_json", run("{\"schema\": ", steps))
put("report", "empty", "")

# chat: the templates of the chat-template corpus (tests/text/chat), and
# the constructs most likely to go wrong: deep nesting, runaway loops and
# recursion, unclosed tags, bad escapes
tdir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "text", "chat", "templates")
for name in sorted(os.listdir(tdir)):
    with open(os.path.join(tdir, name), encoding="utf-8") as f:
        put("chat", name[:-len(".jinja")], f.read())
put("chat", "nesting", "{{ " + "(" * 300 + "1" + ")" * 300 + " }}")
put("chat", "loops", "{% for a in range(9999) %}{% for b in range(9999) %}"
    "{{ a }}{% endfor %}{% endfor %}")
put("chat", "recursion", "{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(1) }}")
put("chat", "unclosed", "{% if x %}{{ 'a' ~ \"\\u12\" }}{# no end")
put("chat", "ws", " {%- if 1 -%} \n {%+ if 2 +%}\n{#- c -#}{{- 3 -}}{% endif %}{% endif %}")
