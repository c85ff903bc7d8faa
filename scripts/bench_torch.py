#!/usr/bin/env python3
"""PyTorch's time for the step `make bench` times: GPT-2 124M (d12), B=4, T=64, forward,
backward, gradient clipping at 1.0 and AdamW, on this machine's cores, in fp32 and under bf16
autocast (CPU). The model is the one zero.c trains (pre-LN, tanh GELU, tied LM head, vocab
padded to 50304); written with plain torch.nn so that it is what a PyTorch user would run.

  scripts/bench_torch.py [--steps N] [--threads N] [--precision fp32|bf16 ...]
Prints the median ms/step after one warm-up step, and tokens/s.
"""
import argparse, math, os, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L=12, C=768, H=12, Vp=50304, maxT=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    B, T = 4, 64
    for prec in a.precision:
        model = GPT()
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
        times = []
        for step in range(a.steps):
            idx = torch.randint(0, 50257, (B, T))
            tgt = torch.randint(0, 50257, (B, T))
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
                loss = model(idx, tgt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            times.append(time.perf_counter() - t0)
        ms = 1000 * statistics.median(times[1:])
        print(f"torch {torch.__version__} d12 B={B} T={T} {prec}: median {ms:.0f} ms/step of {len(times) - 1} "
              f"(after one warm-up; {min(times[1:]) * 1000:.0f}-{max(times[1:]) * 1000:.0f}), "
              f"{B * T / ms * 1000:.0f} tokens/s, {a.threads} threads")


if __name__ == "__main__":
    main()
