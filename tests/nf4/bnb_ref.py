#!/usr/bin/env python3
"""bnb_ref.py - an independent NumPy reference of bitsandbytes'
quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True),
written from its published description (QLoRA paper, bitsandbytes docs and
functional.py's algorithm), not from mgrun's C, producing the blob of
mg/nf4.h for test_nf4's byte comparison.

    bnb_ref.py IN.f32 N OUT.bin

IN.f32 holds N little-endian f32 values; OUT.bin receives the blob.

The algorithm, all in f32 with one rounding per operation:
  * per block of 64: absmax = max |x|; x * (1 / absmax) goes to the NF4
    code whose interval between bitsandbytes' thresholds holds it; it
    tests x > threshold, so a value on a threshold takes the lower code. A block
    of zeros is stored as code 7 (0.0): mgrun's choice, where
    bitsandbytes' 0 * inf = NaN would give code 0.
  * double quantization: offset = mean of the absmax values (summed in
    f64: runs of 1024 in order, then those sums in order; rounded once); per 256 values of absmax - offset,
    nested_absmax = max |v|, and v * (1 / nested_absmax) goes to the
    nearest entry of create_dynamic_map(signed=True): bitsandbytes'
    binary search ends on an even index and compares with the f32
    midpoint (a + b) * 0.5 strictly, so a tie goes to the even index; a
    NaN (nested_absmax 0) ends at index 0.
"""
import sys
from fractions import Fraction

import numpy as np

F = np.float32

NF4 = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
    0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0], dtype=F)


def f32_literal(text):
    """The f32 nearest to a decimal literal (or a Fraction), ties to even,
    as C's 1.5f rounds it: directly, not through f64 (which differs for
    some of the thresholds below)."""
    exact = Fraction(text)
    f = F(float(exact))
    best = min((f, np.nextafter(f, F(2)), np.nextafter(f, F(-2))),
               key=lambda c: (abs(Fraction(float(c)) - exact),
                              int(c.view(np.uint32)) & 1))
    return F(best)


# bitsandbytes' decision thresholds (the f32 literals of its dQuantizeNF4
# tree): the f64 midpoints of the table values, rounded directly to f32,
# which puts four of them one ulp from the f32 midpoints.
THRESHOLDS = np.array([f32_literal(t) for t in (
    "-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906",
    "-0.33967943489551544", "-0.23460740596055984", "-0.13791173323988914",
    "-0.045525018125772476", "0.03979014977812767", "0.1202552504837513",
    "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
    "0.5016634166240692", "0.6427869200706482", "0.8614784181118011")],
    dtype=F)


def fma_f32(a, b, c):
    """a * b + c with one rounding to f32 (exact rational arithmetic)."""
    return f32_literal(Fraction(float(a)) * Fraction(float(b)) +
                       Fraction(float(c)))


def linspace_f32(start, end, n):
    """torch.linspace(start, end, n, dtype=float32): step = (end - start) /
    (n - 1); the first half counts up from start, the second down from
    end, each point one fused multiply-add (as torch's compiled kernel
    does it; this reproduces bitsandbytes' published map)."""
    start, end = F(start), F(end)
    step = F((end - start) / F(n - 1))
    return np.array([fma_f32(step, F(k), start) if k < n // 2 else
                     fma_f32(-step, F(n - 1 - k), end) for k in range(n)],
                    dtype=F)


def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)."""
    data = []
    for i in range(7):
        b = linspace_f32(0.1, 1.0, 2 ** i + 1)
        means = (b[:-1] + b[1:]) / F(2)
        s = F(10.0 ** (i - 6))
        data.extend(s * means)
        data.extend(-(s * means))
    data.extend([F(0), F(1)])
    assert len(data) == 256
    return np.sort(np.array(data, dtype=F))


def nf4_codes(xn):
    return np.searchsorted(THRESHOLDS, xn, side="left").astype(np.uint8)


def nested_index(xn, qmap):
    mid = ((qmap[:-1] + qmap[1:]) * F(0.5)).astype(F)
    c = np.searchsorted(mid, xn, side="left")  # count of mid < x
    tie = (c < 255) & (mid[np.minimum(c, 254)] == xn)
    c = np.where(tie & (c % 2 == 1), c + 1, c)
    c = np.where(np.isnan(xn), 0, c)
    return c.astype(np.uint8)


def quantize(x):
    n = x.size
    nblocks = (n + 63) // 64
    pad = np.zeros(nblocks * 64, dtype=F)
    pad[:n] = x
    blocks = pad.reshape(nblocks, 64)
    absmax = np.abs(blocks).max(axis=1).astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (F(1) / absmax).astype(F)
        xn = (blocks * r[:, None]).astype(F)
    codes = nf4_codes(xn)
    codes[absmax == 0, :] = 7
    codes = codes.reshape(-1)[:n]
    if n % 2:
        codes = np.append(codes, np.uint8(0))
    packed = (codes[0::2] << 4) | codes[1::2]

    a64 = absmax.astype(np.float64)
    parts = [np.add.accumulate(a64[c:c + 1024])[-1]
             for c in range(0, nblocks, 1024)]
    offset = F(np.add.accumulate(np.array(parts))[-1] / nblocks)
    v = (absmax - offset).astype(F)
    nnested = (nblocks + 255) // 256
    vpad = np.zeros(nnested * 256, dtype=F)
    vpad[:nblocks] = v
    groups = vpad.reshape(nnested, 256)
    nested = np.abs(groups).max(axis=1).astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        rn = (F(1) / nested).astype(F)
        vn = (groups * rn[:, None]).astype(F)
    qabs = nested_index(vn.reshape(-1), dynamic_map())[:nblocks]

    out = bytearray(packed.astype(np.uint8).tobytes())
    out += qabs.tobytes()
    out += bytes((-len(out)) % 4)
    out += nested.astype("<f4").tobytes()
    out += np.array([offset], dtype="<f4").tobytes()
    out += bytes((-len(out)) % 256)
    return bytes(out)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: bnb_ref.py IN.f32 N OUT.bin")
    n = int(sys.argv[2])
    x = np.fromfile(sys.argv[1], dtype="<f4", count=n).astype(F)
    if x.size != n:
        sys.exit("bnb_ref.py: %s holds fewer than %d values" %
                 (sys.argv[1], n))
    with open(sys.argv[3], "wb") as f:
        f.write(quantize(x))


if __name__ == "__main__":
    main()
