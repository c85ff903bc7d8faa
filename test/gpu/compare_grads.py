#!/usr/bin/env python3
"""Compare two gradient dumps (--dump-grads: llm.c checkpoint format, fp32) tensor by tensor.

usage: compare_grads.py A.bin B.bin [--tol REL]

For every tensor (layered ones per layer): the relative L2 error |a - b| / max(|a|, tiny) and
the largest elementwise difference relative to the tensor's largest magnitude. A tensor fails
when its relative L2 error exceeds --tol (default 1e-3: fp32 on both sides, differing only in
summation order; 16-bit runs of the two trainers round at different points and need more:
run_gpu_checks.sh passes its per-precision tolerances). Padded vocabulary rows of
wte must be exactly zero in both. Exit status 0 when everything passes. numpy only.
"""
import sys
import numpy as np

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
LAYERED = set(range(2, 14))


def numel(t, C, Vp, maxT):
    return {0: Vp * C, 1: maxT * C, 4: 3 * C * C, 5: 3 * C, 6: C * C, 10: 4 * C * C,
            11: 4 * C, 12: 4 * C * C}.get(t, C)


def read(path):
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(1024), dtype=np.int32)
        if h[0] != 20240326 or h[1] != 3:
            sys.exit(f"{path}: not an fp32 llm.c checkpoint (magic {h[0]}, version {h[1]})")
        data = np.frombuffer(f.read(), dtype=np.float32)
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    out, off = {}, 0
    for t, name in enumerate(NAMES):
        n = numel(t, C, Vp, maxT)
        for l in range(L if t in LAYERED else 1):
            key = f"{name}[{l}]" if t in LAYERED else name
            out[key] = data[off:off + n]
            off += n
    if off != data.size:
        sys.exit(f"{path}: {data.size} floats after the header, the header describes {off}")
    return out, (V, C)


def main():
    args = sys.argv[1:]
    tol = 1e-3
    if "--tol" in args:
        i = args.index("--tol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    a, (V, C) = read(args[0])
    b, shape_b = read(args[1])
    if a.keys() != b.keys() or (V, C) != shape_b:
        sys.exit("the two dumps describe different models")
    bad = 0
    worst = (0.0, "")
    for k in a:
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            print(f"FAIL {k}: non-finite values"); bad += 1; continue
        norm = max(np.linalg.norm(x), np.linalg.norm(y), 1e-30)
        rel = np.linalg.norm(x - y) / norm
        peak = max(np.abs(x).max(), np.abs(y).max(), 1e-30)
        elem = np.abs(x - y).max() / peak
        if rel > worst[0]:
            worst = (rel, k)
        if rel > tol:
            print(f"FAIL {k}: relative L2 error {rel:.3e} > {tol:g} (largest element difference {elem:.3e} of the peak)")
            bad += 1
    for name, g in (("first", a), ("second", b)):
        pad = g["wte"][V * C:]
        if pad.size and np.any(pad != 0):
            print(f"FAIL wte: padded vocabulary rows are not zero in the {name} dump"); bad += 1
    print(f"{len(a)} tensors, worst relative L2 error {worst[0]:.3e} ({worst[1]}), tolerance {tol:g}: "
          f"{'ok' if bad == 0 else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
