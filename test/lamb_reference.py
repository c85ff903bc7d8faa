#!/usr/bin/env python3
"""LAMB in PyTorch (float64), independent of the C trainer, for test_lamb.sh.

Written from the paper (You et al. 2019, "Large Batch Optimization for Deep Learning: Training
BERT in 76 minutes", Algorithm 2) with the choices DeepSpeed's FusedLamb (csrc/lamb) makes:
  m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2            (g: the clipped gradient)
  u = m / (sqrt(v) + eps) + wd p                             (moments NOT bias-corrected here;
                                                              wd only on the 2-D weights, p before the step)
  ratio = |p| / |u| over the whole tensor, clamped to [min_coeff, max_coeff]; 1 if either norm is 0
  p = p - step_size * ratio * u,  step_size = lr sqrt(1 - b2^t) / (1 - b1^t)  (bias correction on)
"Tensor" is each layer's own: the checkpoint's stacked per-layer tensors are cut per layer.

  replay INIT LR CLIP BETA1 BETA2 EPS WD MAXC MINC GRADS... : prints a JSON list, one entry per
      step: {"params": FILE written (checkpoint format), "clamped_max", "clamped_min", "zero_norm"}
      (the params of step k written to OUTDIR/ref_k.bin, OUTDIR = the first GRADS file's directory)
  check P0 RTOL [LABEL CKPT_DIR REF]... : for each sharded checkpoint CKPT_DIR (model_rank*.bin:
      each rank's slice of every padded unit, units padded to world x 16 elements), its fp32 master
      weights reassembled, then per tensor the update since P0 (C's against the reference's in REF),
      relative in the 2-norm: prints "LABEL: worst ..." for each, then "FAIL LABEL" for each above
      RTOL (or unreadable), and exits 1 if any is. (All in one process: PyTorch's start, 2-3 CPU
      seconds, was most of test_lamb's time when each checkpoint took two.)
"""
import json, math, os, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_gpt2 import read_checkpoint, param_shapes, DECAY  # the file format and the decay mask only


def per_layer(cfg, P):
    """name -> list of (key, tensor view): the stacked per-layer tensors cut per layer."""
    out = []
    for name, shape in param_shapes(cfg):
        t = P[name]
        if len(shape) >= 2 and shape[0] == cfg.L and name not in ("wte", "wpe"):
            out += [((name, l), t[l]) for l in range(cfg.L)]
        else:
            out.append(((name, None), t))
    return out


def write_like(path_in, path_out, cfg, P):
    with open(path_in, "rb") as f:
        header = f.read(1024)
    flat = torch.cat([P[n].reshape(-1) for n, _ in param_shapes(cfg)]).to(torch.float32).numpy()
    with open(path_out, "wb") as f:
        f.write(header)
        f.write(flat.astype("<f4").tobytes())


def replay(a):
    init, lr, clip, b1, b2, eps, wd, maxc, minc = a[0], *map(float, a[1:9])
    grads = a[9:]
    cfg, P = read_checkpoint(init, torch.float64)
    P = {n: t.clone() for n, t in P.items()}
    m = {n: torch.zeros_like(t) for n, t in P.items()}
    v = {n: torch.zeros_like(t) for n, t in P.items()}
    out, outdir = [], os.path.dirname(grads[0])
    for t, gpath in enumerate(grads, 1):
        _, G = read_checkpoint(gpath, torch.float64)
        norm = math.sqrt(sum(float((g ** 2).sum()) for g in G.values()))
        sc = min(1.0, clip / norm) if clip > 0 else 1.0
        step_size = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        stats = {"clamped_max": 0, "clamped_min": 0, "zero_norm": 0, "tensors": 0}
        Pl, Gl, Ml, Vl = (dict(per_layer(cfg, X)) for X in (P, G, m, v))
        for key, p in Pl.items():
            g = Gl[key] * sc
            mk, vk = Ml[key], Vl[key]
            mk.mul_(b1).add_((1 - b1) * g)
            vk.mul_(b2).add_((1 - b2) * g * g)
            u = mk / (vk.sqrt() + eps)
            if key[0] in DECAY:
                u = u + wd * p
            if key[0] == "wte":  # the padded vocabulary rows are no tensor's: they stay zero
                u[cfg.V:] = 0
            wn, un = float(p.norm()), float(u.norm())
            stats["tensors"] += 1
            if wn == 0.0 or un == 0.0:
                ratio = 1.0
                stats["zero_norm"] += 1
            else:
                ratio = wn / un
                if ratio > maxc:
                    ratio, stats["clamped_max"] = maxc, stats["clamped_max"] + 1
                elif ratio < minc:
                    ratio, stats["clamped_min"] = minc, stats["clamped_min"] + 1
            p.sub_(step_size * ratio * u)  # the views write through into P, m, v
        path = os.path.join(outdir, f"ref_{t}.bin")
        write_like(init, path, cfg, P)
        out.append(dict(step=t, params=path, clip_scale=sc, **stats))
    print(json.dumps(out))


def master_params(ckdir, like):
    """(cfg, name -> float64 tensor): the fp32 master weights of the sharded checkpoint in CKDIR
    (LIKE: a model file of the same shape)"""
    man = json.load(open(os.path.join(ckdir, "manifest.json")))
    N = man["world"]
    cfg, _ = read_checkpoint(like, torch.float64)
    shapes = dict(param_shapes(cfg))
    numel = lambda n: int(np.prod(shapes[n][1:])) if n not in ("wte", "wpe", "lnfw", "lnfb") else int(np.prod(shapes[n]))
    layered = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]
    units = [["wte", "wpe"]] + [layered] * cfg.L + [["lnfw", "lnfb"]]
    align = N * 16
    padded = [-(-sum(numel(n) for n in u) // align) * align for u in units]
    ranks = []
    for r in range(N):
        raw = np.fromfile(os.path.join(ckdir, f"model_rank{r:05d}.bin"), dtype="<f4")
        body = raw[len(raw) - sum(padded) // N:]  # after the file's header
        ranks.append(body)
    flat_units, off = [], [0] * N
    for p in padded:
        k = p // N
        flat_units.append(np.concatenate([ranks[r][off[r]:off[r] + k] for r in range(N)]))
        off = [o + k for o in off]
    P = {n: [] for n, _ in param_shapes(cfg)}
    for ui, u in enumerate(units):
        pos = 0
        for n in u:
            P[n].append(flat_units[ui][pos:pos + numel(n)])
            pos += numel(n)
    P = {n: torch.from_numpy(np.concatenate(v).astype(np.float64)).reshape(shapes[n]) for n, v in P.items()}
    return cfg, P


def check(a):
    p0, rtol, rest = a[0], float(a[1]), a[2:]
    if not rest or len(rest) % 3:
        sys.exit("check: expected P0 RTOL and triples LABEL CKPT_DIR REF")
    failed = []
    for label, ckdir, ref in zip(rest[0::3], rest[1::3], rest[2::3]):
        print(f"{label}: ", end="")
        try:
            worst = compare_params(ref, master_params(ckdir, p0)[1], p0)
        except Exception as e:  # a missing or short checkpoint: that one fails, the others are still checked
            print(f"cannot compare: {e!r}")
            worst = float("inf")
        if not worst <= rtol:
            failed.append(label)
    for label in failed:
        print(f"FAIL {label}")
    sys.exit(1 if failed else 0)


def compare_params(ref, C, p0):
    """prints and returns the worst per-tensor |update C - update ref| / |update ref| since P0"""
    cfg, R = read_checkpoint(ref, torch.float64)
    _, P0 = read_checkpoint(p0, torch.float64)
    worst, where = 0.0, ""
    for key, r in per_layer(cfg, R):
        cc, p = dict(per_layer(cfg, C))[key], dict(per_layer(cfg, P0))[key]
        dr, dc = r - p, cc - p
        den = float(dr.norm())
        err = float((dc - dr).norm()) / den if den > 0 else float((dc - dr).norm())
        if not err <= worst:  # (a NaN is the worst)
            worst, where = err if err == err else float("inf"), f"{key[0]}" + (f"[layer {key[1]}]" if key[1] is not None else "")
    print(f"worst |update C - update ref| / |update ref| over the tensors: {worst:.2e} ({where})", flush=True)
    return worst


if __name__ == "__main__":
    {"replay": replay, "check": check}[sys.argv[1]](sys.argv[2:])
