#!/usr/bin/env python3
"""Independent PyTorch reference for zero.c's GPT-2 trainer, written from the spec.

It runs in float64, so its numbers are the truth the fp32 C trainer is measured against.

  init      write a random llm.c checkpoint (version 3, fp32)
  tokens    write a token shard of random tokens
  check     replay a C training run (same checkpoint, tokens, hyper-parameters) and compare
            the trainer's JSON-lines log, its --dump-grads file (checkpoint format: header, then
            the gradients) and its last checkpoint against the reference
  checks    several checks in one process (PyTorch's start costs 2-3 CPU seconds): one per line
            of stdin, "NAME" then the check's options (shell-quoted); prints "check NAME: PASS"
            or "check NAME: N FAILED" after each, and exits 1 if any failed
  selftest  prove the reference itself: finite differences, the building blocks against
            torch's own ops, our AdamW and SGD loops against torch.optim.AdamW / SGD, our Lion
            against a second writing of the paper's Algorithm 2, and the comparison logic fed
            with the reference's own fp32 outputs (must pass) and corrupted ones (must fail)

Optimizers (--optimizer): adamw (torch.optim.AdamW's arithmetic), lion (Chen et al. 2023,
"Symbolic Discovery of Optimization Algorithms", Algorithm 2: c = b1 m + (1-b1) g,
p = p - lr (sign(c) + wd p), m = b2 m + (1-b2) g), sgd and sgd-momentum (torch.optim.SGD:
g += wd p, buf = mu buf + g, p -= lr buf). Weight decay on the 2-D weights only.

Model: token + learned position embeddings, pre-LN blocks (LayerNorm eps 1e-5), causal
multi-head attention scaled by 1/sqrt(head size), 4x MLP with tanh-GELU, final LayerNorm,
LM head tied to wte. Only the first V rows of wte take part in the softmax, so the padded rows
Vp-V (zero in the file) get exactly zero gradient.
"""
import argparse, hashlib, json, math, os, shlex, sys, tempfile
from collections import namedtuple

import numpy as np
import torch

CKPT_MAGIC, SHARD_MAGIC = 20240326, 20240520
Config = namedtuple("Config", "V Vp maxT L H C")
# AdamW weight decay applies to the 2-D weight matrices only, never to biases or LayerNorm.
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def param_shapes(c):
    """Checkpoint order and shapes; per-layer tensors are stacked over layers."""
    L, C = c.L, c.C
    return [("wte", (c.Vp, C)), ("wpe", (c.maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


# ---------------------------------------------------------------- file formats

def read_checkpoint(path, dtype=torch.float64):
    with open(path, "rb") as f:
        hdr = np.frombuffer(f.read(1024), dtype="<i4")
        data = np.frombuffer(f.read(), dtype="<f4")
    if hdr[0] != CKPT_MAGIC or hdr[1] != 3:
        sys.exit(f"{path}: not an fp32 llm.c checkpoint (magic {hdr[0]}, version {hdr[1]})")
    cfg = Config(V=int(hdr[3]), Vp=int(hdr[7]), maxT=int(hdr[2]), L=int(hdr[4]), H=int(hdr[5]), C=int(hdr[6]))
    return cfg, split_flat(cfg, torch.from_numpy(data.copy()).to(dtype), path)


def split_flat(cfg, flat, what):
    """Cut a flat parameter-ordered vector into named tensors (the checkpoint and the grad dump share it)."""
    shapes = param_shapes(cfg)
    n = sum(math.prod(s) for _, s in shapes)
    if flat.numel() != n:
        raise ValueError(f"{what}: {flat.numel()} floats, expected {n} for {cfg}")
    out, o = {}, 0
    for name, s in shapes:
        k = math.prod(s)
        out[name] = flat[o:o + k].view(s)
        o += k
    return out


def flatten(cfg, P):
    return torch.cat([P[name].detach().reshape(-1) for name, _ in param_shapes(cfg)])


def write_checkpoint(path, cfg, P):
    hdr = np.zeros(256, dtype="<i4")
    hdr[:8] = [CKPT_MAGIC, 3, cfg.maxT, cfg.V, cfg.L, cfg.H, cfg.C, cfg.Vp]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(flatten(cfg, P).to(torch.float32).numpy().astype("<f4").tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        hdr = np.frombuffer(f.read(1024), dtype="<i4")
        toks = np.frombuffer(f.read(), dtype="<u2")
    if hdr[0] != SHARD_MAGIC or hdr[1] != 1 or hdr[2] != len(toks):
        sys.exit(f"{path}: bad shard header {hdr[:3]} for {len(toks)} tokens")
    return torch.from_numpy(toks.astype(np.int64))


def write_tokens(path, toks):
    hdr = np.zeros(256, dtype="<i4")
    hdr[:3] = [SHARD_MAGIC, 1, len(toks)]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(toks, dtype="<u2").tobytes())


def init_params(cfg, seed, perturb=False):
    """GPT-2 init. perturb=True gives LayerNorm params and biases small random values instead of
    1/0, so a test exercises their gradients (and their effect on the others) non-trivially."""
    g = torch.Generator().manual_seed(seed)
    randn = lambda s, std: torch.randn(s, generator=g, dtype=torch.float64) * std
    proj_std = 0.02 / math.sqrt(2 * cfg.L)  # residual projections: scaled by depth as in GPT-2
    P = {}
    for name, s in param_shapes(cfg):
        if name in ("attprojw", "fcprojw"):
            P[name] = randn(s, proj_std)
        elif name in DECAY:
            P[name] = randn(s, 0.02)
        elif name in ("ln1w", "ln2w", "lnfw"):
            P[name] = 1 + (randn(s, 0.1) if perturb else 0)
        else:  # biases, LayerNorm biases
            P[name] = randn(s, 0.02) if perturb else torch.zeros(s, dtype=torch.float64)
    P["wte"][cfg.V:] = 0  # padded vocabulary rows are zero in the file
    return P


# ---------------------------------------------------------------- the model

def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance, as GPT-2
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu(x):  # GPT-2's tanh approximation
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def hidden(P, cfg, idx):
    """Final-LayerNorm output (B,T,C) for tokens idx (B,T)."""
    B, T = idx.shape
    C, H = cfg.C, cfg.H
    hs = C // H
    x = P["wte"][idx] + P["wpe"][:T]
    future = ~torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg.L):
        h = layernorm(x, P["ln1w"][l], P["ln1b"][l])
        qkv = h @ P["qkvw"][l].T + P["qkvb"][l]  # rows of qkvw: [q all heads | k | v]
        q, k, v = (t.reshape(B, T, H, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)  # heads back side by side
        x = x + y @ P["attprojw"][l].T + P["attprojb"][l]
        h = layernorm(x, P["ln2w"][l], P["ln2b"][l])
        h = gelu(h @ P["fcw"][l].T + P["fcb"][l])
        x = x + h @ P["fcprojw"][l].T + P["fcprojb"][l]
    return layernorm(x, P["lnfw"], P["lnfb"])


def forward(P, cfg, idx, targets):
    """Mean cross-entropy over all B*T positions of idx (B,T) predicting targets (B,T)."""
    logits = hidden(P, cfg, idx) @ P["wte"][:cfg.V].T  # tied head; padded rows never enter the softmax
    nll = logits.logsumexp(-1) - logits.gather(-1, targets[..., None])[..., 0]
    return nll.mean()


def grads_of(P, cfg, idx, targets):
    leaves = {n: p.detach().requires_grad_(True) for n, p in P.items()}
    loss = forward(leaves, cfg, idx, targets)
    g = torch.autograd.grad(loss, list(leaves.values()))
    return loss.item(), dict(zip(leaves.keys(), g))


# ---------------------------------------------------------------- training

def lr_at(s, a):
    """LR of update s (0-based): linear warmup to the peak, then the schedule down to min_lr_frac*peak."""
    if s < a.warmup:
        return a.lr * (s + 1) / a.warmup
    p = (s - a.warmup) / max(1, a.steps - a.warmup)
    lo = a.lr * a.min_lr_frac
    if a.schedule == "constant":
        return a.lr
    if a.schedule == "linear":
        return lo + (a.lr - lo) * (1 - p)
    if a.schedule == "cosine":
        return lo + (a.lr - lo) * 0.5 * (1 + math.cos(math.pi * p))
    raise ValueError(a.schedule)


class AdamW:
    """torch.optim.AdamW's math written out so the decay mask is explicit:
    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr*wd*p (decoupled, DECAY tensors only);
    p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)."""

    def __init__(self, P, b1, b2, eps, wd):
        self.P, self.b1, self.b2, self.eps, self.wd, self.t = P, b1, b2, eps, wd, 0
        self.m = {n: torch.zeros_like(p) for n, p in P.items()}
        self.v = {n: torch.zeros_like(p) for n, p in P.items()}

    @torch.no_grad()
    def step(self, grads, lr):
        self.t += 1
        bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for n, p in self.P.items():
            g, m, v = grads[n], self.m[n], self.v[n]
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            if n in DECAY:
                p.mul_(1 - lr * self.wd)
            p.sub_(lr * (m / bc1) / ((v / bc2).sqrt() + self.eps))


class Lion:
    """Lion, from the paper's update rule (Algorithm 2), decoupled decay on DECAY tensors only."""

    def __init__(self, P, b1, b2, wd):
        self.P, self.b1, self.b2, self.wd = P, b1, b2, wd
        self.m = {n: torch.zeros_like(p) for n, p in P.items()}

    @torch.no_grad()
    def step(self, grads, lr):
        for n, p in self.P.items():
            g, m = grads[n], self.m[n]
            update = (self.b1 * m + (1 - self.b1) * g).sign()
            if n in DECAY:
                p.mul_(1 - lr * self.wd)
            p.sub_(lr * update)
            m.mul_(self.b2).add_(g, alpha=1 - self.b2)


class SGD:
    """torch.optim.SGD (dampening 0, not Nesterov): L2 weight decay on DECAY tensors, then momentum."""

    def __init__(self, P, momentum, wd):
        self.P, self.mu, self.wd = P, momentum, wd
        self.buf = {n: torch.zeros_like(p) for n, p in P.items()}

    @torch.no_grad()
    def step(self, grads, lr):
        for n, p in self.P.items():
            d = grads[n] + self.wd * p if n in DECAY else grads[n].clone()
            if self.mu:
                d = self.buf[n].mul_(self.mu).add_(d)
            p.sub_(lr * d)


def make_optimizer(P, a):
    if a.optimizer == "lion":
        return Lion(P, a.beta1, a.beta2, a.wd)
    if a.optimizer in ("sgd", "sgd-momentum"):
        return SGD(P, a.momentum if a.optimizer == "sgd-momentum" else 0.0, a.wd)
    return AdamW(P, a.beta1, a.beta2, a.eps, a.wd)


def clip_scale(norm, clip):
    return min(1.0, clip / norm) if clip > 0 else 1.0


def train(P, cfg, tokens, a):
    """Replays a run. The loader walks the token file in order, B*T tokens per micro-batch
    (plus one for the last target), and wraps to the start when the next one would not fit:
    with --no-shuffle that is the C trainer's order."""
    B, T, accum = a.B, a.T, a.accum
    if len(tokens) < B * T + 1:
        raise ValueError("token file too short for one micro-batch")
    P = {n: p.clone() for n, p in P.items()}
    opt = make_optimizer(P, a)
    pos, records, first_grads = 0, [], None
    for s in range(a.steps):
        total, loss = {n: torch.zeros_like(p) for n, p in P.items()}, 0.0
        for _ in range(accum):
            if pos + B * T + 1 > len(tokens):
                pos = 0
            buf = tokens[pos:pos + B * T + 1]
            pos += B * T
            l, g = grads_of(P, cfg, buf[:-1].view(B, T), buf[1:].view(B, T))
            loss += l / accum  # equal-sized micro-batches: mean of means = mean over all positions
            for n in total:
                total[n] += g[n] / accum
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in total.values()))
        if s == 0:
            first_grads = {n: g.clone() for n, g in total.items()}
        sc = clip_scale(norm, a.clip)
        lr = lr_at(s, a)
        opt.step({n: g * sc for n, g in total.items()}, lr)
        records.append(dict(step=s + 1, loss=loss, lr=lr, grad_norm=norm, clip_scale=sc))
    return records, first_grads, P


# ---------------------------------------------------------------- comparison

def read_log(path):
    recs = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not JSON ({e}): {line.strip()[:120]}")
            if isinstance(o, dict) and "loss" in o:  # other objects (events, val) are skipped
                recs.append(o)
    return recs


def read_grad_dump(path, cfg):
    """--dump-grads writes a checkpoint-format file: the llm.c header of this very model, then the
    fp32 gradients in checkpoint order. Returns (tensors, None) or (None, what is wrong)."""
    n = sum(math.prod(s) for _, s in param_shapes(cfg))
    raw = np.fromfile(path, dtype="<f4")
    if raw.size != 256 + n:
        return None, f"{path}: {raw.size} floats, expected 256 (header) + {n} for {cfg}"
    hdr = raw[:256].view("<i4")
    if hdr[0] != CKPT_MAGIC or hdr[1] != 3 or list(hdr[2:8]) != [cfg.maxT, cfg.V, cfg.L, cfg.H, cfg.C, cfg.Vp]:
        what = "all zero (a hole left by seeking to checkpoint offsets?)" if not hdr.any() else list(hdr[:8])
        return None, f"{path}: header {what} is not the fp32 checkpoint header of {cfg}"
    return split_flat(cfg, torch.from_numpy(raw[256:].astype(np.float64)), path), None


def bad_is_inf(x):
    """NaN compares false with everything, so it would pass `x <= tol` tests and vanish in max()."""
    return x if math.isfinite(x) else float("inf")


def compare(cfg, ref_records, ref_grads, ref_final, log_records, dump_path, final_path, a, out=print):
    """Returns the number of failed checks; prints one line per check. final_path: the trainer's
    checkpoint after the last step (None to skip), compared with the reference's parameters.
    dump_path None skips the gradients (the trainer cannot dump them when they are partitioned)."""
    fails = 0

    def verdict(ok, msg):
        nonlocal fails
        fails += not ok
        out(("  ok    " if ok else "  FAIL  ") + msg)

    # Gradients of the first step: per tensor max|c - r| <= atol + rtol * max|r|.
    G = None
    if dump_path:
        out(f"gradients of step 1 (per tensor: max|c-r| <= {a.grad_atol:g} + {a.grad_rtol:g}*max|r|; margin = diff/tol, must be <= 1)")
        G, msg = read_grad_dump(dump_path, cfg)
        if G is None:
            verdict(False, msg)
    if G is not None:
        worst = (-1.0, "")
        for name, _ in param_shapes(cfg):
            c, r = G[name], ref_grads[name].double()
            if name == "wte":  # padded rows compared exactly below
                c, r = c[:cfg.V], r[:cfg.V]
            diff = bad_is_inf(float((c - r).abs().max()))
            tol = a.grad_atol + a.grad_rtol * float(r.abs().max())
            margin = diff / tol
            worst = max(worst, (margin, name))
            verdict(margin <= 1, f"{name:9s} max|r| {float(r.abs().max()):.3e}  max|c-r| {diff:.3e}  tol {tol:.3e}  margin {margin:.3f}")
        pad = G["wte"][cfg.V:]
        verdict(bool((pad == 0).all()), f"wte padded rows {cfg.V}..{cfg.Vp - 1} exactly zero ({int((pad != 0).sum())} nonzero)")
        out(f"  worst tensor: {worst[1]} at margin {worst[0]:.3f}")

    # Parameters after the last step: catches what the losses barely see (the decay mask, betas, eps).
    # Adam divides by |g|, so an element whose exact gradient is ~0 turns fp32 rounding noise into
    # real steps (the key bias is one: q.b_k shifts a whole softmax row, so its exact gradient is 0).
    # Such elements wander a little, so the max only bounds each element to a small fraction of the
    # path Adam walks (sum of the LRs: a skipped, doubled or misplaced update is the whole path),
    # and systematic errors, which move every element (a wrong decay mask), show in the median.
    # Lion moves every element by exactly lr per step, in the direction of sign(c): where c is
    # within rounding of 0 (an exactly-zero gradient, like the key bias's, leaves rounding noise)
    # fp32 and float64 can take opposite signs, a 2 lr difference per such step. So for Lion the
    # max bounds each element by the whole path it can walk, and the share of elements that
    # differ by more than lr/2 (a sign taken the other way at least once) must stay below 0.1%.
    lion = getattr(a, "optimizer", "adamw") == "lion"
    if final_path:
        walk = sum(r["lr"] for r in ref_records)
        max_tol = (2.0 + 1e-3) * walk if lion else a.param_walk_frac * walk
        out(f"parameters after step {a.steps} (per tensor: max|c-r| <= {a.param_walk_frac:g}*sum(lr) = {max_tol:.2e}, "
            f"median|c-r| <= {a.param_med_atol:g} + {a.param_med_rtol:g}*median|r|; margin = the worse ratio)")
        try:
            fcfg, F = read_checkpoint(final_path)
            if fcfg != cfg:
                raise ValueError(f"{final_path}: config {fcfg} != {cfg}")
        except (ValueError, SystemExit) as e:
            verdict(False, str(e))
            F = None
        if F is not None:
            worst = (-1.0, "")
            for name, _ in param_shapes(cfg):
                r = ref_final[name].double()
                d = (F[name] - r).abs()
                diff, med = float(d.max()), float(d.median())
                margin = bad_is_inf(max(diff / max_tol, med / (a.param_med_atol + a.param_med_rtol * float(r.abs().median()))))
                worst = max(worst, (margin, name))
                verdict(margin <= 1, f"{name:9s} max|c-r| {diff:.3e}  median|c-r| {med:.3e}  margin {margin:.3f}")
            verdict(bool((F["wte"][cfg.V:] == 0).all()), "wte padded rows still exactly zero")
            out(f"  worst tensor: {worst[1]} at margin {worst[0]:.3f}")
            if lion:
                lr0 = max(r["lr"] for r in ref_records)
                off = sum(int(((F[n] - ref_final[n].double()).abs() > lr0 / 2).sum()) for n, _ in param_shapes(cfg))
                total = sum(F[n].numel() for n, _ in param_shapes(cfg))
                verdict(off <= 1e-3 * total, f"Lion: {off} of {total} elements ({off / total:.2e}) took a sign the other way "
                        f"at least once (at most 1e-3)")

    # Per-step log: loss, lr, grad_norm.
    steps = [int(o.get("step", -1)) for o in log_records]
    verdict(steps == list(range(1, a.steps + 1)), f"log has steps 1..{a.steps} (found {steps[:3]}..{steps[-3:]}, {len(steps)} records)")
    if steps != list(range(1, a.steps + 1)):
        return fails
    out(f"per-step log (step-1 loss rel <= {a.loss1_rtol:g}; losses abs <= {a.loss_atol:g}; lr rel <= {a.lr_rtol:g}; grad_norm rel <= {a.norm_rtol:g})")
    out("  step      loss C          loss ref      |dloss|     lr C          lr ref       grad_norm C   grad_norm ref  clip")
    worst_loss = worst_lr = worst_norm = 0.0
    for o, r in zip(log_records, ref_records):
        lc, lrc, nc = float(o["loss"]), float(o["lr"]), float(o["grad_norm"])
        dl = bad_is_inf(abs(lc - r["loss"]))  # a NaN must not slip through max()
        rl = bad_is_inf(abs(lrc - r["lr"]) / max(abs(r["lr"]), 1e-30))
        rn = bad_is_inf(abs(nc - r["grad_norm"]) / r["grad_norm"])
        worst_loss, worst_lr, worst_norm = max(worst_loss, dl), max(worst_lr, rl), max(worst_norm, rn)
        out(f"  {r['step']:4d}  {lc:.9g}  {r['loss']:.9g}  {dl:.2e}  {lrc:.6e}  {r['lr']:.6e}  {nc:.6e}  {r['grad_norm']:.6e}  {r['clip_scale']:.3f}")
    r1 = bad_is_inf(abs(float(log_records[0]["loss"]) - ref_records[0]["loss"]) / ref_records[0]["loss"])
    verdict(r1 <= a.loss1_rtol, f"step-1 loss rel err {r1:.2e}")
    verdict(worst_loss <= a.loss_atol, f"all losses: worst abs err {worst_loss:.2e}")
    verdict(worst_lr <= a.lr_rtol, f"lr: worst rel err {worst_lr:.2e}")
    verdict(worst_norm <= a.norm_rtol, f"grad_norm: worst rel err {worst_norm:.2e}")
    if a.expect_clip:
        clipped = sum(r["clip_scale"] < 1 for r in ref_records)
        verdict(ref_records[0]["clip_scale"] < 1, f"clipping active: step-1 norm {ref_records[0]['grad_norm']:.4f} > clip {a.clip} "
                f"(scale {ref_records[0]['clip_scale']:.4f}); clipped on {clipped}/{a.steps} steps")
    return fails


def reference_run(a):
    """train() for a check, memoised on disk under --cache DIR: cases that replay the same run
    (same checkpoint, tokens and hyper-parameters, e.g. one step split over processes) share it."""
    cfg, P = read_checkpoint(a.model, torch.float64 if a.dtype == "float64" else torch.float32)
    path = None
    if a.cache:
        h = hashlib.sha1()
        for f in (a.model, a.tokens):
            with open(f, "rb") as fh:
                h.update(fh.read())
        h.update(repr([a.B, a.T, a.accum, a.steps, a.lr, a.warmup, a.schedule, a.min_lr_frac, a.wd, a.clip,
                       a.beta1, a.beta2, a.eps, a.dtype, a.optimizer, a.momentum]).encode())
        path = os.path.join(a.cache, f"ref_{h.hexdigest()[:16]}.pt")
        if os.path.exists(path):
            return cfg, torch.load(path)
    ref = train(P, cfg, read_tokens(a.tokens), a)
    if path:
        torch.save(ref, path)
    return cfg, ref


def run_check(a, out=print):
    cfg, ref = reference_run(a)
    log_records = read_log(a.log)
    out(f"config: {cfg}  B={a.B} T={a.T} accum={a.accum} steps={a.steps} lr={a.lr} warmup={a.warmup} "
        f"schedule={a.schedule} min_lr_frac={a.min_lr_frac} wd={a.wd} clip={a.clip} betas=({a.beta1},{a.beta2}) eps={a.eps} "
        f"optimizer={a.optimizer} momentum={a.momentum}")
    return compare(cfg, *ref, log_records, a.grads, a.final, a, out)


# ---------------------------------------------------------------- self-test

def selftest(a):
    torch.manual_seed(0)
    fails = 0

    def verdict(ok, msg):
        nonlocal fails
        fails += not ok
        print(("  ok    " if ok else "  FAIL  ") + msg)

    # 1. Building blocks against torch's own implementations.
    print("building blocks vs torch.nn.functional")
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    w, b = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    F = torch.nn.functional
    verdict(torch.allclose(layernorm(x, w, b), F.layer_norm(x, (16,), w, b, 1e-5), rtol=0, atol=1e-12), "layernorm == F.layer_norm")
    verdict(torch.allclose(gelu(x), F.gelu(x, approximate="tanh"), rtol=0, atol=1e-14), "gelu == F.gelu(approximate='tanh')")

    # 2. Finite differences on a tiny model, float64.
    cfg = Config(V=13, Vp=16, maxT=8, L=2, H=2, C=8)
    P = init_params(cfg, seed=3, perturb=True)
    idx, tgt = torch.randint(0, cfg.V, (2, 6)), torch.randint(0, cfg.V, (2, 6))  # T=6 < maxT
    loss, G = grads_of(P, cfg, idx, tgt)
    lg = hidden(P, cfg, idx) @ P["wte"].T  # all Vp rows, the padded ones masked out instead of sliced off
    lg[..., cfg.V:] = float("-inf")
    ce = float(F.cross_entropy(lg.reshape(-1, cfg.Vp), tgt.reshape(-1)))
    verdict(abs(loss - ce) < 1e-12, f"loss {loss:.12f} == F.cross_entropy over masked padded logits {ce:.12f}")
    print("finite differences (central, h=1e-6; |fd-an| <= 1e-9 + 1e-6*|an|), 4 coordinates per tensor")
    worst = 0.0
    for name, s in param_shapes(cfg):
        rows = cfg.V if name == "wte" else s[0]  # padded wte rows are not in the model's function
        for _ in range(4):
            i = (int(torch.randint(0, rows, ())),) + tuple(int(torch.randint(0, d, ())) for d in s[1:])
            Pp = {n: p.clone() for n, p in P.items()}
            Pp[name][i] += 1e-6
            lp = forward(Pp, cfg, idx, tgt).item()
            Pp[name][i] -= 2e-6
            lm = forward(Pp, cfg, idx, tgt).item()
            fd, an = (lp - lm) / 2e-6, float(G[name][i])
            err = abs(fd - an) / (1e-9 + 1e-6 * abs(an))
            worst = max(worst, err)
            if err > 1:
                verdict(False, f"{name}{list(i)}: fd {fd:.10e} autograd {an:.10e}")
    verdict(worst <= 1, f"all {4 * len(param_shapes(cfg))} coordinates agree (worst margin {worst:.3f})")
    verdict(bool((G["wte"][cfg.V:] == 0).all()), "padded wte rows get exactly zero gradient")
    verdict(bool((G["wpe"][6:] == 0).all()), "wpe rows >= T get exactly zero gradient")
    # Causality: changing the last input token changes no earlier position's loss.
    Pd = {n: p.detach() for n, p in P.items()}
    idx2 = idx.clone(); idx2[:, -1] = (idx2[:, -1] + 1) % cfg.V
    same = all(abs(forward(Pd, cfg, idx[:, :t], tgt[:, :t]).item() - forward(Pd, cfg, idx2[:, :t], tgt[:, :t]).item()) < 1e-15
               for t in range(1, 6))
    verdict(same, "causal: a later token does not affect earlier positions")

    # 3. Our AdamW loop (+ schedule + clipping) against torch.optim.AdamW with two param groups.
    print("AdamW loop vs torch.optim.AdamW (decay / no-decay param groups, cosine+warmup, clipping)")
    h = argparse.Namespace(lr=1e-2, warmup=2, steps=6, schedule="cosine", min_lr_frac=0.1, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.1, clip=0.05)
    mine = {n: p.clone() for n, p in P.items()}
    opt = AdamW(mine, h.beta1, h.beta2, h.eps, h.wd)
    theirs = {n: p.clone().requires_grad_(True) for n, p in P.items()}
    topt = torch.optim.AdamW([{"params": [theirs[n] for n in theirs if n in DECAY], "weight_decay": h.wd},
                              {"params": [theirs[n] for n in theirs if n not in DECAY], "weight_decay": 0.0}],
                             lr=h.lr, betas=(h.beta1, h.beta2), eps=h.eps)
    clipped = 0
    for s in range(h.steps):
        _, g = grads_of(mine, cfg, idx, tgt)  # both optimizers see the same gradient
        norm = math.sqrt(sum(float((x ** 2).sum()) for x in g.values()))
        sc = clip_scale(norm, h.clip)
        clipped += sc < 1
        opt.step({n: x * sc for n, x in g.items()}, lr_at(s, h))
        # clip_grad_norm_ scales by clip/(norm+1e-6); ours has no eps, so check its norm and
        # scale agree, then hand torch the exact same clipped gradient.
        for n, p in theirs.items():
            p.grad = g[n].clone()
        tnorm = float(torch.nn.utils.clip_grad_norm_(list(theirs.values()), h.clip))
        tsc = float(theirs["fcb"].grad.view(-1)[0] / g["fcb"].view(-1)[0])
        if abs(tnorm - norm) > 1e-12 * norm or abs(tsc - sc) > 1e-5:
            verdict(False, f"clip_grad_norm_: norm {tnorm} vs ours {norm}, scale {tsc} vs ours {sc}")
        for n, p in theirs.items():
            p.grad = g[n] * sc
        for grp in topt.param_groups:
            grp["lr"] = lr_at(s, h)
        topt.step()
    rel = max(float((mine[n] - theirs[n].detach()).abs().max() / theirs[n].detach().abs().max()) for n in mine)
    verdict(rel < 1e-9, f"parameters after {h.steps} steps: max rel diff {rel:.2e} (clipped on {clipped} steps)")

    # 3b. Our SGD (with and without momentum) against torch.optim.SGD with decay / no-decay groups.
    for mu in (0.0, 0.9):
        print(f"SGD loop vs torch.optim.SGD (momentum {mu}, decay / no-decay param groups)")
        mine = {n: p.clone() for n, p in P.items()}
        opt = SGD(mine, mu, 0.1)
        theirs = {n: p.clone().requires_grad_(True) for n, p in P.items()}
        topt = torch.optim.SGD([{"params": [theirs[n] for n in theirs if n in DECAY], "weight_decay": 0.1},
                                {"params": [theirs[n] for n in theirs if n not in DECAY], "weight_decay": 0.0}],
                               lr=0.05, momentum=mu)
        for s in range(4):
            _, g = grads_of(mine, cfg, idx, tgt)
            opt.step(g, 0.05)
            for n, p in theirs.items():
                p.grad = g[n].clone()
            topt.step()
        rel = max(float((mine[n] - theirs[n].detach()).abs().max() / theirs[n].detach().abs().max()) for n in mine)
        verdict(rel < 1e-12, f"parameters after 4 steps: max rel diff {rel:.2e}")

    # 3c. Our Lion against a second, independent writing of Algorithm 2 (torch 1.13 has no Lion):
    # interpolate, take the sign, add the decay to the update, scale by lr; momentum with beta2.
    print("Lion loop vs the paper's Algorithm 2 written out element by element")
    mine = {n: p.clone() for n, p in P.items()}
    opt = Lion(mine, 0.9, 0.99, 0.1)
    alg = {n: p.clone() for n, p in P.items()}
    mom = {n: torch.zeros_like(p) for n, p in P.items()}
    for s in range(3):
        _, g = grads_of(mine, cfg, idx, tgt)
        opt.step(g, 1e-3)
        for n in alg:
            flat_p, flat_m, flat_g = alg[n].view(-1), mom[n].view(-1), g[n].reshape(-1)
            for i in range(flat_p.numel()):
                c_t = 0.9 * float(flat_m[i]) + 0.1 * float(flat_g[i])
                upd = (c_t > 0) - (c_t < 0)
                wd = 0.1 if n in DECAY else 0.0
                flat_p[i] = float(flat_p[i]) - 1e-3 * (upd + wd * float(flat_p[i]))
                flat_m[i] = 0.99 * float(flat_m[i]) + 0.01 * float(flat_g[i])
    rel = max(float((mine[n] - alg[n]).abs().max()) for n in mine)
    verdict(rel < 1e-12, f"parameters after 3 steps: max abs diff {rel:.2e}")

    # 4. The comparison logic: the reference in fp32 plays the C trainer (clipping, warmup and cosine
    # on); it must pass, and each corruption must be caught.
    print("comparison logic on the reference's own float32 outputs")
    with tempfile.TemporaryDirectory() as d:
        cfg = Config(V=4000, Vp=4096, maxT=32, L=2, H=4, C=64)  # small V: the logic, not the head, is tested
        c = argparse.Namespace(**vars(a))
        c.__dict__.update(grads=f"{d}/grads.bin", B=4, T=16, accum=1, steps=10, lr=1e-3, clip=1.0,
                          schedule="cosine", warmup=3, min_lr_frac=0.1, expect_clip=True)
        write_checkpoint(f"{d}/model.bin", cfg, init_params(cfg, seed=1, perturb=True))
        tokens = torch.randint(0, cfg.V, (c.accum * c.B * c.T + 1,))
        ref = train(read_checkpoint(f"{d}/model.bin", torch.float64)[1], cfg, tokens, c)
        recs, g32, p32 = train(read_checkpoint(f"{d}/model.bin", torch.float32)[1], cfg, tokens, c)
        logrecs = [dict(step=r["step"], loss=float(f"{r['loss']:.9g}"), lr=r["lr"], grad_norm=r["grad_norm"]) for r in recs]

        def check(G, log, final=p32, out=lambda s: None, hole=False):
            write_checkpoint(c.grads, cfg, G)  # the trainer dumps gradients in checkpoint format
            if hole:  # header zeroed: what seeking to checkpoint offsets in a plain file leaves
                with open(c.grads, "r+b") as f:
                    f.write(bytes(1024))
            write_checkpoint(f"{d}/final.bin", cfg, final)
            return compare(cfg, *ref, log, c.grads, f"{d}/final.bin", c, out)
        lines = []
        verdict(check(g32, logrecs, out=lines.append) == 0, "fp32 reference passes the checks:")
        print("\n".join("      " + x for x in lines))
        verdict(check(g32, logrecs, hole=True) > 0, "detects: a gradient dump without its header (1024 zero bytes)")
        G = {n: g.clone() for n, g in g32.items()}
        G["fcb"][1, 5] += 0.01 * float(G["fcb"].abs().max())
        verdict(check(G, logrecs) > 0, "detects: one fcb gradient off by 1% of its tensor's max")
        G = {n: g.clone() for n, g in g32.items()}
        G["wte"][cfg.V + 1, 3] = 1e-30
        verdict(check(G, logrecs) > 0, "detects: a padded wte row gradient nonzero (1e-30)")
        P0 = read_checkpoint(f"{d}/model.bin")[1]
        F = {k: p.clone() for k, p in p32.items()}
        F["fcw"][1, 7, 9] = float(P0["fcw"][1, 7, 9])
        verdict(check(g32, logrecs, F) > 0, "detects: one fcw element that was never updated")
        for n in ("fcprojb", "ln2w"):  # a decay mask that also decays biases / LayerNorm weights
            F = {k: p.clone() for k, p in p32.items()}
            F[n] *= (1 - c.lr * c.wd) ** c.steps
            verdict(check(g32, logrecs, F) > 0, f"detects: {n} decayed as if it were a 2-D weight")
        bad = [dict(o) for o in logrecs]
        bad[7]["loss"] += 2e-4
        verdict(check(g32, bad) > 0, "detects: step-8 loss off by 2e-4")
        bad = [dict(o) for o in logrecs]
        bad[3]["loss"] = float("nan")
        verdict(check(g32, bad) > 0, "detects: a NaN loss")
        bad = [dict(o) for o in logrecs]
        bad[4]["lr"] *= 1.001
        verdict(check(g32, bad) > 0, "detects: step-5 lr off by 0.1%")
    print("selftest:", "PASS" if fails == 0 else f"{fails} FAILED")
    return fails


# ---------------------------------------------------------------- CLI

def add_run_args(p):
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--log")
    p.add_argument("--grads")
    p.add_argument("--final", help="the trainer's checkpoint after the last step (optional)")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=16)
    p.add_argument("--accum", type=int, default=1, help="micro-batches per step (total-batch / (B*T))")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--schedule", choices=["constant", "linear", "cosine"], default="constant")
    p.add_argument("--min-lr-frac", type=float, default=0.0)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--expect-clip", action="store_true", help="fail unless step 1 is actually clipped")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--cache", help="directory to keep reference runs in, shared between checks")


def add_tolerances(p):
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--optimizer", choices=["adamw", "lion", "sgd", "sgd-momentum"], default="adamw")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--grad-atol", type=float, default=1e-5)
    p.add_argument("--grad-rtol", type=float, default=1e-3)
    p.add_argument("--loss1-rtol", type=float, default=1e-5)
    p.add_argument("--loss-atol", type=float, default=1e-4)
    p.add_argument("--lr-rtol", type=float, default=1e-5)
    p.add_argument("--norm-rtol", type=float, default=1e-4)
    p.add_argument("--param-walk-frac", type=float, default=0.05)
    p.add_argument("--param-med-atol", type=float, default=1e-7)
    p.add_argument("--param-med-rtol", type=float, default=1e-6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("--out", required=True)
    for k, v in dict(V=50257, Vp=50304, maxT=32, L=2, H=4, C=64, seed=1).items():
        p.add_argument(f"--{k}", type=int, default=v)
    p.add_argument("--perturb", action="store_true", help="random LayerNorm params and biases (for tests)")
    p = sub.add_parser("tokens")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--V", type=int, default=50257)
    p.add_argument("--seed", type=int, default=1)
    check_p = p = sub.add_parser("check")
    add_run_args(p)
    add_tolerances(p)
    sub.add_parser("checks")
    p = sub.add_parser("selftest")
    add_tolerances(p)
    a = ap.parse_args()

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if a.cmd == "init":
        cfg = Config(a.V, a.Vp, a.maxT, a.L, a.H, a.C)
        write_checkpoint(a.out, cfg, init_params(cfg, a.seed, a.perturb))
    elif a.cmd == "tokens":
        g = torch.Generator().manual_seed(a.seed)
        write_tokens(a.out, torch.randint(0, a.V, (a.n,), generator=g).numpy())
    elif a.cmd == "check":
        if not a.log:
            sys.exit("check needs --log")
        fails = run_check(a)
        print("check:", "PASS" if fails == 0 else f"{fails} FAILED")
        sys.exit(fails > 0)
    elif a.cmd == "checks":
        failed = []
        for line in sys.stdin:
            if not line.strip():
                continue
            name, *args = shlex.split(line)
            c = check_p.parse_args(args)
            if not c.log:
                sys.exit(f"{name}: check needs --log")
            print(f"\n=== check {name}", flush=True)
            fails = run_check(c)
            print(f"check {name}:", "PASS" if fails == 0 else f"{fails} FAILED", flush=True)
            failed += [name] * (fails > 0)
        sys.exit(1 if failed else 0)
    else:
        sys.exit(selftest(a) > 0)


if __name__ == "__main__":
    main()
