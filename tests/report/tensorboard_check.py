#!/usr/bin/env python3
"""tensorboard_check.py RUN_DIR - read the run's TensorBoard event file
with a reader written here from the format's description (TFRecord
framing with masked CRC-32C, the tensorflow.Event and Summary protobuf
fields), independently of mgrun's writer, and check it against steps.csv:
one event per step with the step's loss, learning rate and gradient norm,
held-out metrics at each epoch's end when the run evaluated."""
import csv
import glob
import math
import struct
import sys


def crc32c(data):
    # bitwise, from the Castagnoli polynomial (reflected 0x82F63B78)
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise AssertionError("wire type %d" % wire)
        yield num, wire, v


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        head = data[i:i + 8]
        assert len(head) == 8, "cut record header"
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert hc == masked(head), "length CRC"
        body = data[i + 12:i + 12 + n]
        (bc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert len(body) == n and bc == masked(body), "record CRC"
        yield body
        i += 16 + n


def event(body):
    ev = {"values": {}}
    for num, wire, v in fields(body):
        if num == 1:
            assert wire == 1
            ev["wall"] = struct.unpack("<d", v)[0]
        elif num == 2:
            ev["step"] = v
        elif num == 3:
            ev["file_version"] = v.decode()
        elif num == 5:
            for n2, w2, val in fields(v):
                assert n2 == 1 and w2 == 2
                tag = value = None
                for n3, w3, x in fields(val):
                    if n3 == 1:
                        tag = x.decode()
                    elif n3 == 2:
                        assert w3 == 5
                        value = struct.unpack("<f", x)[0]
                assert tag is not None and value is not None
                ev["values"][tag] = value
    return ev


def main():
    run = sys.argv[1]
    files = glob.glob(run + "/events.out.tfevents.*.mgrun")
    assert len(files) == 1, "expected one event file, found %r" % files
    evs = [event(b) for b in records(files[0])]
    assert evs[0].get("file_version") == "brain.Event:2", evs[0]
    steps = {}
    for e in evs[1:]:
        assert "wall" in e and e["wall"] > 1.5e9
        steps.setdefault(e["step"], {}).update(e["values"])
    rows = list(csv.DictReader(open(run + "/steps.csv")))
    assert rows, "steps.csv is empty"
    for r in rows:
        v = steps.get(int(r["step"]))
        assert v is not None, "no event for step %s" % r["step"]
        # the event holds float32s; steps.csv prints loss and lr with 9
        # digits, the gradient norm with 6
        for tag, col, tol in (("train/loss", "loss", 1e-6),
                              ("optim/lr", "lr", 1e-6),
                              ("optim/grad_norm", "grad_norm", 1e-5)):
            want = float(r[col])
            assert math.isclose(v[tag], want, rel_tol=tol, abs_tol=1e-30), \
                (tag, v[tag], want)
        assert v["perf/step_ms"] > 0
        assert any(t.startswith("memory/") for t in v)
    evals = [s for s, v in steps.items() if any(t.startswith("eval/")
                                                for t in v)]
    want_eval = sys.argv[2] if len(sys.argv) > 2 else "0"
    assert len(evals) == int(want_eval), (evals, want_eval)
    print("ok: %d events, %d steps, %d evaluations; CRCs and fields read "
          "back" % (len(evs), len(rows), len(evals)))


main()
