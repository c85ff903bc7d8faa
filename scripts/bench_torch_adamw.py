#!/usr/bin/env python3
"""torch.optim.AdamW's time per step over GPT-2 124M's parameters (d12: the 148 tensors of the
model zero.c trains, vocabulary padded to 50304), fp32, on this machine's cores: the peer that
scripts/bench_optimizer.sh compares the CPU optimizer engine with. For each of 1 and 2 threads,
foreach off and on: the best ms/step of N steps after one warm-up step (weight decay on the 2-D
weights only, as zero.c does).

  scripts/bench_torch_adamw.py [--steps N]
"""
import argparse, time

import torch


def d12_shapes(L=12, C=768, Vp=50304, T=1024):
    shapes = [((Vp, C), True), ((T, C), True)]
    for _ in range(L):
        shapes += [((C,), False), ((C,), False), ((3 * C, C), True), ((3 * C,), False), ((C, C), True), ((C,), False),
                   ((C,), False), ((C,), False), ((4 * C, C), True), ((4 * C,), False), ((C, 4 * C), True), ((C,), False)]
    return shapes + [((C,), False), ((C,), False)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    params, decay = [], []
    for shape, d in d12_shapes():
        p = torch.nn.Parameter(torch.randn(shape, generator=g) * 0.02)
        p.grad = torch.randn(shape, generator=g) * 1e-3
        params.append(p)
        decay.append(d)
    n = sum(p.numel() for p in params)
    print(f"torch {torch.__version__}: AdamW over {n} fp32 parameters in {len(params)} tensors")
    best_all = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for foreach in (False, True):
            groups = [{"params": [p for p, d in zip(params, decay) if d], "weight_decay": 0.1},
                      {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0}]
            opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)
            opt.step()  # warm-up: creates the state
            best = float("inf")
            for _ in range(a.steps):
                t0 = time.perf_counter()
                opt.step()
                best = min(best, (time.perf_counter() - t0) * 1e3)
            print(f"torch AdamW threads {threads} foreach {'on ' if foreach else 'off'}: {best:8.1f} ms/step")
            best_all = best if best_all is None else min(best_all, best)
            del opt
    print(f"torch AdamW best: {best_all:.1f} ms/step")


if __name__ == "__main__":
    main()
