#!/usr/bin/env python3
"""test_zeropp.sh's check of test/bin/zeropp_cli's files (zero.h's ZeRO++ collectives) against
numpy: what each rank gathered against the parameters every rank holds, and the summed gradient
slice each rank owns against the exact sum of every rank's gradient, within bounds derived from
core/quant.h's format (half a quantization step of each block, plus the roundings), independently
of the C code's arithmetic.

  zeropp_check.py DIR PRECISION STAGE QWZ HPZ QGZ BLOCK WORLD PER_HOST
"""
import glob
import os
import sys

import numpy as np

d, prec = sys.argv[1], sys.argv[2]
stage, qwz, hpz, qgz, B, N, L = (int(a) for a in sys.argv[3:10])
H = N // L
EPS = {"fp32": 0.0, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}[prec]  # the element type's half ulp, relative
fails = 0


def load(name):
    return np.fromfile(os.path.join(d, name), dtype=np.float32).astype(np.float64)


def block_amax(x):
    """Each element's block's max |x|, blocks of B from x's start (a message's layout)."""
    n = len(x)
    m = -(-n // B) * B
    a = np.zeros(m)
    a[:n] = np.abs(x)
    return np.repeat(a.reshape(-1, B).max(axis=1), B)[:n]


def step(x, bits):
    """Half a quantization step of each element's block, with quant.h's slack for the roundings."""
    qmax = 127 if bits == 8 else 7
    s = block_amax(x).astype(np.float32) / np.float32(qmax)  # fp32, as the format computes it
    return s.astype(np.float64) / 2 * (1 + 2.0 ** -14) + 2.0 ** -142


def check(what, ok, detail):
    global fails
    if not ok:
        fails += 1
        print(f"FAIL {what}: {detail}")


U = len(glob.glob(os.path.join(d, "param_*.f32")))
assert U > 0, "no files"
quantized_any = False
if stage == 3:
    for u in range(U):
        p = load(f"param_{u}.f32")
        s = len(p) // N
        for r in range(N):
            g = load(f"gather_{r}_{u}.f32")
            check(f"gather rank {r} unit {u}: its own slice exact", np.array_equal(g[r * s:(r + 1) * s], p[r * s:(r + 1) * s]), "")
            if not qwz:
                check(f"gather rank {r} unit {u}: exact", np.array_equal(g, p), f"max error {np.abs(g - p).max():.3g}")
                continue
            for q in range(N):
                if q == r:
                    continue
                x, y = p[q * s:(q + 1) * s], g[q * s:(q + 1) * s]
                bound = step(x, 8) + (np.abs(x) + 2 * step(x, 8)) * EPS
                err = np.abs(y - x)
                quantized_any |= bool((err > 0).any())
                check(f"qwZ rank {r} unit {u} slice {q}: within half a step", (err <= bound).all(),
                      f"worst {err.max():.3g} against {bound[np.argmax(err - bound)]:.3g}")
    if qwz:
        check("qwZ changed some values (the messages were quantized)", quantized_any, "every value exact")

for u in range(U):
    grads = [load(f"grad_{r}_{u}.f32") for r in range(N)]
    s = len(grads[0]) // N
    exact = np.sum(grads, axis=0)
    absum = np.sum(np.abs(grads), axis=0)
    for R in range(N):
        got = load(f"sum_{R}_{u}.f32")
        sl = slice(R * s, (R + 1) * s)
        if not qgz:  # the plain reduce-scatter: roundings of the partial sums only
            bound = absum[sl] * (N * max(EPS, 2.0 ** -24)) + 1e-30
        else:
            h, l = divmod(R, L)
            bound = np.zeros(s)
            for hh in range(H):  # host hh's level-1 sum of slice R, then level 2's quantization of it
                peers = [grads[hh * L + j][sl] for j in range(L)]
                part = np.sum(peers, axis=0)
                e1 = np.zeros(s) if L == 1 else np.sum([step(x, qgz) for x in peers], axis=0)
                e1 += np.sum(np.abs(peers), axis=0) * L * 2.0 ** -24  # the fp32 sums
                if H > 1:  # a block's scale may grow by the level-1 error: take the bound's block max
                    e1 += step(np.abs(part) + block_amax(e1), qgz)
                bound += e1
            bound += absum[sl] * H * 2.0 ** -24 + (np.abs(exact[sl]) + bound) * EPS
        err = np.abs(got - exact[sl])
        check(f"{'qgZ' if qgz else 'reduce-scatter'} rank {R} unit {u}: within its bound", (err <= bound).all(),
              f"worst excess {np.max(err - bound):.3g} (error {err.max():.3g})")
print(f"{'FAIL' if fails else 'ok'}: {U} units, {N} ranks ({H} host(s) x {L}), {prec}, stage {stage}, qwZ {qwz}, hpZ {hpz}, "
      f"qgZ {qgz}, block {B}" + (f"; {fails} failure(s)" if fails else ""))
sys.exit(1 if fails else 0)
