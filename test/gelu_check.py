#!/usr/bin/env python3
# test/gelu_check.py DUMP [DEFAULT_DUMP]: gpu_gelu_emu's outputs (bf16) against GPT-2's GELU
# 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in fp64, from the formula: each output within one
# bf16 unit in the last place of the exact value plus the fp32 tanh's error (3e-7) times |x| / 2,
# finite inputs give finite outputs, +-inf give +inf / -0, NaN gives NaN. With DEFAULT_DUMP (the
# default build's, same inputs): every output equal to the default's or one unit in the last place
# away, and how many differ.
import sys
import numpy as np


def load(path):
    a = np.fromfile(path, dtype=np.uint16)
    n = a.size // 2
    return a[:n], a[n:]


def f64(b):
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def main(args):
    xin, out = load(args[0])
    x, y = f64(xin), f64(out)
    bad = 0
    fin = np.isfinite(x)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    # one bf16 ulp of the reference: 2^(exponent - 7), normals and subnormals alike
    # allowed: the rounding to bf16 (one ulp of the reference, 2^(exponent - 8) for values in
    # [2^(e-1), 2^e)) plus the fp32 tanh's absolute error (3e-7, gpt2_tanh) times 0.5 |x|
    ulp = np.ldexp(1.0, np.maximum(np.frexp(np.abs(ref[fin]))[1] - 8, -133))
    err = np.abs(y[fin] - ref[fin]) / (ulp + 1.5e-7 * np.abs(x[fin]))
    worst = float(err.max())
    if worst > 1.0 or not np.all(np.isfinite(y[fin])):
        bad += 1
    big = np.abs(x[fin]) < 1e20  # +-1e30: x^3 overflows fp32; the output must still be finite
    if not np.all(np.isfinite(y[fin][~big])):
        bad += 1
    pinf, ninf, nan = x == np.inf, x == -np.inf, np.isnan(x)
    if not (np.all(y[pinf] == np.inf) and np.all(np.isnan(y[ninf]) | (y[ninf] == 0)) and np.all(np.isnan(y[nan]))):
        bad += 1
    print(f"gelu_check: {fin.sum()} finite inputs, worst error {worst:.2f} of the bound (1 bf16 ulp + 1.5e-7 |x|) from fp64 GELU")
    if len(args) > 1:
        xd, od = load(args[1])
        if not np.array_equal(xd, xin):
            print("gelu_check: the dumps hold different inputs"); return 1
        yd = f64(od)
        both = np.isfinite(yd) & np.isfinite(y)
        d = np.abs(y[both] - yd[both]) / np.ldexp(1.0, np.maximum(np.frexp(np.abs(yd[both]))[1] - 8, -133))
        ndiff = int((out[both] != od[both]).sum())
        print(f"gelu_check: {ndiff} of {both.sum()} outputs differ from the default build's, by at most {float(d.max()):.2f} ulp")
        if d.max() > 1.0 or not np.array_equal(np.isfinite(yd), np.isfinite(y)):
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
