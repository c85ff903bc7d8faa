#!/usr/bin/env python3
"""torch.optim.AdamW's time per step on this machine's cores: the peer that
scripts/bench_optimizer.sh compares the CPU optimizer engine with.

d12 fp32: GPT-2 124M's parameters (the 148 tensors of the model zero.c trains, vocabulary padded
to 50304), weight decay on the 2-D weights only, as zero.c does. Every setting torch has: 1 and 2
threads, foreach off and on, and fused where this torch has it (1.13's AdamW has no `fused`: the
line says so). The best ms/step of N steps after one warm-up step, per setting; then the best of all.

d48 bf16 mixed precision: torch has no mixed-precision AdamW, so the step is what a torch trainer
does for it: each bf16 gradient copied into its fp32 master's .grad, AdamW over the fp32 masters,
each master copied (rounded to nearest even) into its bf16 parameter. Unit by unit as
test/bench_optimizer.c does it (the 1.5B model's states do not fit this machine's memory): the
embeddings, one layer's tensors stepped 48 times, the final LayerNorm; the step is the sum. Run
with foreach on (several times faster than off at d12) at 1 and 2 threads, best of N steps.

  scripts/bench_torch_adamw.py [--steps N] [--model d12|d48|all]
"""
import argparse, time

import torch


def layer_shapes(C):
    return [((C,), False), ((C,), False), ((3 * C, C), True), ((3 * C,), False), ((C, C), True), ((C,), False),
            ((C,), False), ((C,), False), ((4 * C, C), True), ((4 * C,), False), ((C, 4 * C), True), ((C,), False)]


def d12_shapes(L=12, C=768, Vp=50304, T=1024):
    return [((Vp, C), True), ((T, C), True)] + layer_shapes(C) * L + [((C,), False), ((C,), False)]


def make(shapes, gen):
    params, decay = [], []
    for shape, d in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=gen) * 0.02)
        p.grad = torch.randn(shape, generator=gen) * 1e-3
        params.append(p)
        decay.append(d)
    return params, decay


def adamw(params, decay, **kw):
    groups = [{"params": [p for p, d in zip(params, decay) if d], "weight_decay": 0.1},
              {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **kw)


def d12(steps):
    params, decay = make(d12_shapes(), torch.Generator().manual_seed(0))
    n = sum(p.numel() for p in params)
    print(f"torch {torch.__version__}: AdamW over {n} fp32 parameters in {len(params)} tensors (d12)")
    best_all = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, kw in (("foreach off", {"foreach": False}), ("foreach on ", {"foreach": True}), ("fused      ", {"fused": True})):
            try:
                opt = adamw(params, decay, **kw)
                opt.step()  # warm-up: creates the state
            except (TypeError, RuntimeError) as e:
                print(f"torch AdamW threads {threads} {name}: not available in this torch ({str(e).splitlines()[0][:60]})")
                continue
            best = float("inf")
            for _ in range(steps):
                t0 = time.perf_counter()
                opt.step()
                best = min(best, (time.perf_counter() - t0) * 1e3)
            print(f"torch AdamW threads {threads} {name}: {best:8.1f} ms/step", flush=True)
            best_all = best if best_all is None else min(best_all, best)
            del opt
    print(f"torch AdamW best: {best_all:.1f} ms/step")


def d48_mixed(steps, L=48, C=1600, Vp=50304, T=1024):
    gen = torch.Generator().manual_seed(0)
    units = [make([((Vp, C), True), ((T, C), True)], gen), make(layer_shapes(C), gen), make([((C,), False), ((C,), False)], gen)]
    repeat = [1, L, 1]
    n = sum(r * sum(p.numel() for p in u[0]) for u, r in zip(units, repeat))
    print(f"torch {torch.__version__}: bf16 mixed-precision AdamW over {n} parameters (d48), unit by unit")
    best_all = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        work = []
        for params, decay in units:
            g16 = [p.grad.to(torch.bfloat16) for p in params]  # the 16-bit gradients; .grad: the fp32 one the optimizer reads
            p16 = [p.detach().to(torch.bfloat16) for p in params]
            work.append((params, g16, p16, adamw(params, decay, foreach=True)))

        def unit_step(params, g16, p16, opt):
            for p, g in zip(params, g16):
                p.grad.copy_(g)
            opt.step()
            for h, p in zip(p16, params):
                h.copy_(p.detach())

        best = float("inf")
        for s in range(steps + 1):  # the first step creates the state
            t0 = time.perf_counter()
            for w, r in zip(work, repeat):
                for _ in range(r):
                    unit_step(*w)
            if s:
                best = min(best, (time.perf_counter() - t0) * 1e3)
        print(f"torch mixed AdamW threads {threads} foreach on : {best:8.1f} ms/step", flush=True)
        best_all = best if best_all is None else min(best_all, best)
        del work
    print(f"torch mixed AdamW best: {best_all:.1f} ms/step")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--model", choices=("d12", "d48", "all"), default="all")
    a = ap.parse_args()
    if a.model in ("d12", "all"):
        d12(a.steps)
    if a.model in ("d48", "all"):
        d48_mixed(a.steps)


if __name__ == "__main__":
    main()
