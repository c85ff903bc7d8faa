#!/usr/bin/env python3
"""test_gpu_colsum's reference: reads the dump of test/gpu_colsum_emu.cu and checks every result
against fp64 numpy written from the kernels' contracts (gpu/colsum.cuh, gpu/kernels.cuh):
  bias:      db = db0 + sum_n dout
  LayerNorm: norm = (x - mean) * rstd; dnorm = w * dout;
             dinp = dinp0 + (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)) * rstd
             dw = dw0 + sum_n norm * dout;  db = db0 + sum_n dout
  norm:      the sum of squares of every unit's values (double).
The device sums in fp32 and rounds each result once to floatX: allowed error = one floatX ulp of
the reference (its rounding) + the fp32 sum's bound (terms x 2^-24 x the sum of |terms|, with
headroom); the norm's double sum: 1e-12 relative. Prints one line per case; exit 1 on any failure."""
import sys
import numpy as np

def main():
    raw = open(sys.argv[1], 'rb').read()
    pos = 0
    def ints(k):
        nonlocal pos
        v = np.frombuffer(raw, np.int32, k, pos); pos += 4 * k; return v
    def floats(k):
        nonlocal pos
        v = np.frombuffer(raw, np.float32, k, pos).astype(np.float64); pos += 4 * k; return v
    xsize, is_fp16 = ints(2)
    mant = 23 if xsize == 4 else (10 if is_fp16 else 7)
    def ulp(v): # one floatX ulp at |v| (normal range; fp16's subnormals: its smallest step)
        e = np.floor(np.log2(np.maximum(np.abs(v), 1e-30)))
        u = np.exp2(e - mant)
        return np.maximum(u, 2.0 ** -24 if is_fp16 else 2.0 ** -149)
    fails = cases = 0
    def check(what, got, ref, terms, absum):
        nonlocal fails
        tol = ulp(ref) + 4.0 * terms * 2.0 ** -24 * absum + 1e-30
        err = np.abs(got - ref)
        bad = ~(err <= tol)
        if bad.any():
            i = int(np.argmax(bad))
            print(f"FAIL {what}: {int(bad.sum())} of {bad.size} beyond tolerance; first at {i}: got {got.flat[i]!r} "
                  f"reference {ref.flat[i]!r} tolerance {tol.flat[i]:.3g}")
            fails += 1
        return float((err / tol).max()) if err.size else 0.0
    while pos < len(raw):
        kind = int(ints(1)[0])
        cases += 1
        if kind == 2:
            units = int(ints(1)[0]); ns = ints(units)
            vals = [floats(int(n)) for n in ns]
            got = float(np.frombuffer(raw, np.float64, 1, pos)[0]); pos += 8
            ref = float(sum(np.sum(v * v) for v in vals))
            ok = abs(got - ref) <= 1e-12 * ref
            print(f"{'ok  ' if ok else 'FAIL'} norm over {units} units {list(map(int, ns))}: {got!r} vs numpy {ref!r}")
            fails += 0 if ok else 1
            continue
        N, C, sm, off, vec = (int(v) for v in ints(5))
        NC = N * C
        dout = floats(NC).reshape(N, C)
        if kind == 1:
            x = floats(NC).reshape(N, C); w = floats(C); mean = floats(N); rstd = floats(N)
            dinp0 = floats(NC).reshape(N, C); dw0 = floats(C)
        db0 = floats(C)
        if kind == 1:
            dinp = floats(NC).reshape(N, C); dw = floats(C)
        db = floats(C)
        name = f"{'layernorm' if kind else 'bias'} N={N} C={C} sms={sm} {'V=VEC' if vec else 'V=1'}{' unaligned' if off else ''}"
        r = check(name + " db", db, db0 + dout.sum(0), N, np.abs(dout).sum(0) + np.abs(db0))
        if kind == 1:
            norm = (x - mean[:, None]) * rstd[:, None]
            r = max(r, check(name + " dw", dw, dw0 + (norm * dout).sum(0), N, np.abs(norm * dout).sum(0) + np.abs(dw0)))
            dn = w * dout
            a, b = dn.mean(1, keepdims=True), (dn * norm).mean(1, keepdims=True)
            ref = dinp0 + (dn - a - norm * b) * rstd[:, None]
            # fp32 row sums over C, then a few products: C terms of the row's magnitude
            absum = (np.abs(dn).sum(1, keepdims=True) + np.abs(dn * norm).sum(1, keepdims=True) * np.abs(norm)) / C * rstd[:, None] \
                    + np.abs(dn * rstd[:, None]) + np.abs(dinp0)
            r = max(r, check(name + " dinp", dinp, ref, C + 8, absum))
        print(f"ok   {name}: worst error {r:.2f} of tolerance" if True else "")
    print(f"colsum_check: {cases} cases, {fails} failed")
    return 1 if fails else 0

sys.exit(main())
