#!/usr/bin/env python3
"""Checks for test_mixed_training.sh, from the trainer's --log files and checkpoints.

  mixed_check.py curves DIR              16-bit runs vs the fp32 run; memory split per stage
  mixed_check.py overflow DIR NAME...    the injected-overflow runs: skips, scales, nothing changed
  mixed_check.py resume A.jsonl B.jsonl K   B (resumed after step K) continues A bit for bit
"""
import glob, json, math, os, sys

failures = []
def expect(cond, msg):
    if not cond: failures.append(msg)

def load(path):
    steps, mem = {}, []
    for line in open(path):
        e = json.loads(line)
        if e.get("event") == "memory": mem.append(e)
        elif "loss" in e and "step" in e: steps[e["step"]] = e
    return steps, mem

# Tolerances on |loss(16-bit) - loss(fp32)| at every one of the 50 steps. Measured maxima over
# the 8 runs of each (this test's model, loss 6.26 -> 4.74): bf16 7.4e-4, fp16 1.1e-4 (fp16
# keeps 3 more mantissa bits). The bounds leave ~7x room and stay far below what one skipped,
# doubled or wrongly scaled update changes (the loss falls ~0.03 per step).
TOL = {"bf16": 0.005, "fp16": 0.001}

def memory_split(name, mem, precision):
    for m in mem:
        F, N, S = m["padded_params"], m["world"], m["zero_stage"]
        full = lambda full_cond: F if full_cond else F // N
        if precision == "fp32":
            want = {"params": 4 * full(S < 3), "grads": 4 * full(S < 2), "master": 0,
                    "adam_m": 4 * full(S == 0), "adam_v": 4 * full(S == 0)}
        else:  # 2 + 2 + (4 + 4 + 4): the 16 bytes behind "7B needs 112 GB"
            want = {"params": 2 * full(S < 3), "grads": 2 * full(S < 2), "master": 4 * full(S == 0),
                    "adam_m": 4 * full(S == 0), "adam_v": 4 * full(S == 0)}
        for k, v in want.items():
            expect(m[k] == v, f"{name} rank {m['rank']}: {k} {m[k]} != {v} (F={F} N={N} S={S})")
        # (the workspace, fp32's too, which is gemm_f32's packing scratch alone: test_planner
        # checks it kind by kind against cpu/workspace.h's prediction)

def curves(d):
    ref, mem = load(f"{d}/fp32.jsonl")
    memory_split("fp32", mem, "fp32")
    expect(len(ref) == 50, f"fp32: {len(ref)} steps")
    expect(ref[50]["loss"] < ref[1]["loss"] - 1.0, f"fp32 does not learn: {ref[1]['loss']} -> {ref[50]['loss']}")
    print(f"fp32: loss {ref[1]['loss']:.4f} -> {ref[50]['loss']:.4f}")
    for path in sorted(glob.glob(f"{d}/bf16_*.jsonl") + glob.glob(f"{d}/fp16_*.jsonl")):
        name = os.path.basename(path)[:-6]
        p = name.split("_")[0]
        steps, mem = load(path)
        memory_split(name, mem, p)
        expect(len(steps) == 50, f"{name}: {len(steps)} steps")
        diffs = [abs(steps[s]["loss"] - ref[s]["loss"]) for s in ref if s in steps]
        worst = max(diffs) if diffs else math.inf
        expect(worst <= TOL[p], f"{name}: max |loss - fp32 loss| {worst:.4g} > {TOL[p]}")
        expect(any(d_ > 0 for d_ in diffs), f"{name}: bitwise the fp32 curve: did it run in 16 bits?")
        expect(steps[50]["loss"] < steps[1]["loss"] - 1.0, f"{name} does not learn")
        if p == "fp16":
            expect(all("loss_scale" in e and e["skipped"] is False for e in steps.values()), f"{name}: fp16 keys / skips")
        else:
            expect(all("loss_scale" not in e for e in steps.values()), f"{name}: bf16 has no loss scale")
        print(f"{name}: max |loss - fp32| over 50 steps {worst:.5f} (tolerance {TOL[p]}), "
              f"final {steps[50]['loss']:.4f}")

def scaler_replay(flags, scale, hysteresis=2, window=1000, min_scale=1.0):
    """DeepSpeed's DynamicLossScaler.update_scale, rewritten from its documentation: the scale
    each step runs at, given which steps overflowed."""
    scales, cur_h, last_overflow = [], hysteresis, -1
    for it, overflow in enumerate(flags):
        scales.append(scale)
        if overflow:
            if hysteresis == 1 or cur_h == 1: scale = max(scale / 2, min_scale)
            else: cur_h -= 1
            last_overflow = it
        else:
            if (it - last_overflow) % window == 0:
                scale *= 2
                cur_h = hysteresis
    return scales

def payload(path):  # a rank file without its 256-int32 header
    with open(path, "rb") as f: return f.read()[1024:]

def overflow(d, names):
    init = sorted(glob.glob(f"{d}/ck_lr0/step_00000001/model_rank*.bin"))
    expect(len(init) == 2, "lr0 checkpoint")
    for name in names:
        steps, _ = load(f"{d}/{name}.jsonl")
        flags = [steps[s]["skipped"] for s in sorted(steps)]
        scales = [steps[s]["loss_scale"] for s in sorted(steps)]
        k = flags.index(False) if False in flags else len(flags)
        # 2^32 needs halving to below fp16's range: several skipped steps first, then training
        expect(k >= 3 and k < len(flags) - 5, f"{name}: {k} skipped steps first of {len(flags)}")
        expect(scales == scaler_replay(flags, 2.0 ** 32), f"{name}: scales {scales} break DeepSpeed's rules")
        expect(all(steps[s]["grad_norm"] is None for s in sorted(steps)[:k]), f"{name}: skipped steps report no norm")
        # the schedule did not advance: the first applied step runs at warmup step 0 (lr/5)
        first = steps[sorted(steps)[k]]
        expect(abs(first["lr"] - 3e-3 / 5) < 1e-9, f"{name}: first applied step lr {first['lr']}")
        # parameters and optimizer state untouched by the skipped steps, on every rank
        for s in range(1, k + 1):
            ck = f"{d}/ck_{name}/step_{s:08d}"
            for q in range(2):
                expect(payload(f"{ck}/model_rank{q:05d}.bin") == payload(init[q]), f"{name} step {s}: rank {q} weights changed")
                opt = payload(f"{ck}/optim_rank{q:05d}.bin")
                expect(opt == bytes(len(opt)), f"{name} step {s}: rank {q} Adam state changed")
        ck = f"{d}/ck_{name}/step_{k + 1:08d}"
        expect(payload(f"{ck}/model_rank00000.bin") != payload(init[0]), f"{name}: the first applied step changed nothing")
        last = steps[max(steps)]
        expect(math.isfinite(last["loss"]) and last["loss"] < steps[1]["loss"], f"{name}: training did not continue")
        print(f"{name}: steps 1-{k} skipped at scales {[int(math.log2(x)) for x in scales[:k + 1]]} (log2), "
              f"parameters and Adam state unchanged through step {k}; then loss {steps[k + 1]['loss']:.4f} -> {last['loss']:.4f}")

def resume(a, b, k):
    sa, _ = load(a)
    sb, _ = load(b)
    later = [s for s in sa if s > k]
    expect(sorted(sb) == later, f"{b}: steps {sorted(sb)} != {later}")
    for s in later:
        if s not in sb: continue
        for key in ("loss", "lr", "grad_norm", "loss_scale", "skipped"):
            expect(sa[s].get(key) == sb[s].get(key), f"step {s}: {key} {sa[s].get(key)} != resumed {sb[s].get(key)}")
    scales = sorted({e.get("loss_scale") for e in sa.values() if "loss_scale" in e})
    print(f"{os.path.basename(b)}: steps {later[0]}-{later[-1]} equal the uninterrupted run"
          + (f" (loss scales seen: {scales})" if scales else ""))

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "curves": curves(sys.argv[2])
    elif cmd == "overflow": overflow(sys.argv[2], sys.argv[3:])
    elif cmd == "resume": resume(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    for f in failures: print("FAIL", f)
    sys.exit(1 if failures else 0)
