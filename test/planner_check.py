#!/usr/bin/env python3
"""Checks the memory planner's command line and its agreement with the trainer.

  planner_check.py cli PLAN...              the CLI (PLAN: the command before the options)
  planner_check.py agree LOG PLAN_JSON      the trainer's {"event":"memory"} entries in LOG
                                            equal the plan, kind by kind, on every rank
  planner_check.py activations LOG L C NH Vp B T PRECISION RECOMPUTE K
                                            the CPU trainer's activation bytes in LOG, on every
                                            rank, equal what its layout implies (computed here)
"""
import json, subprocess, sys

failures = []

def expect(cond, msg):
    if not cond: failures.append(msg)

def plan(cmd, *args):
    out = subprocess.run(cmd + list(args) + ["--json"], capture_output=True, text=True)
    if out.returncode != 0: raise SystemExit(f"plan {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)

def cli(cmd):
    # LLaMA2-7B-size pretraining, bf16 mixed precision + AdamW, one device: 7e9 x 16 = 112 GB
    p = plan(cmd, "--params", "7e9", "--precision", "bf16", "--optimizer", "adamw")
    for k in ["params", "grads", "optimizer", "model_states", "activations", "total"]: expect(k in p, f"JSON lacks {k}")
    expect(p["model_states"] == 112 * 10**9, f"7B model states {p['model_states']}")
    expect(p["params"] + p["grads"] + p["optimizer"] == p["model_states"], "model_states = params + grads + optimizer")
    expect(p["activations"] is None and p["total"] == 112 * 10**9 and p["device"] == p["total"], f"7B without a shape: activations unknown {p}")
    # the stages at N = 1024: 2P + 2P + 12P/N, 2P + 14P/N, 16P/N; reductions -> 4x, 8x, Nx
    P, N = 7 * 10**9, 1024
    s = [plan(cmd, "--params", "7e9", "--precision", "bf16", "--zero-stage", str(k), "--world", str(N))["model_states"]
         for k in range(4)]
    expect(s == [16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 16 * P / N], f"stages at N=1024: {s}")
    expect(3.95 < s[0] / s[1] < 4 and 7.8 < s[0] / s[2] < 8 and s[0] / s[3] == N, f"reductions {[s[0] / x for x in s]}")
    # offload: the device keeps no optimizer bytes, the host all of them. 7B, bf16, AdamW, ZeRO-2 on
    # one GPU with the optimizer on the CPU: 2P + 2P = 28 GB on the device, 12P = 84 GB of host memory
    o = plan(cmd, "--params", "7e9", "--precision", "bf16", "--zero-stage", "2", "--world", "1", "--offload-optimizer", "cpu")
    expect(o["where"]["master"] == o["where"]["adam_m"] == o["where"]["adam_v"] == "host", f"offload where {o['where']}")
    expect(o["device"] == 28 * 10**9 and o["host"] == 84 * 10**9 and o["optimizer"] == 84 * 10**9, f"7B offload {o}")
    o = plan(cmd, "--params", "7e9", "--precision", "bf16", "--zero-stage", "2", "--world", "8", "--offload-optimizer", "cpu")
    expect(o["device"] == 2 * P + 2 * P / 8 and o["host"] == 12 * P / 8, f"7B offload N=8 {o}")
    # stage 3 with the parameters on the host as well: each of N GPUs keeps only its 2P/N of gradients
    o = plan(cmd, "--params", "7e9", "--precision", "bf16", "--zero-stage", "3", "--world", "8", "--offload-optimizer", "cpu",
             "--offload-param", "cpu")
    expect(o["device"] == 2 * P / 8 and o["host"] == 14 * P / 8, f"7B stage 3 offload {o}")
    # activations of a layer, textbook, by hand: s=2048 b=1 h=4096 a=32 -> sbh(34 + 5*32*2048/4096) = 8388608 * 114
    a = plan(cmd, "--params", "7e9", "--precision", "bf16", "--layers", "32", "--channels", "4096", "--heads", "32",
             "--seq-len", "2048", "--batch", "1")
    expect(a["activations_textbook_per_layer"] == 8388608 * 114, f"textbook layer {a['activations_textbook_per_layer']}")
    expect(a["activations"] == 32 * 8388608 * 114, f"textbook activations {a['activations']}")
    # recompute, textbook (a bare count): full keeps L inputs of 2sbh and one layer, by hand for the
    # 7B at s = 4096: 32 * 2 * 16777216 + 16777216 * 194 = 4,328,521,728; selective L * 34 sbh
    shape7b = ["--params", "7e9", "--precision", "bf16", "--layers", "32", "--channels", "4096", "--heads", "32",
               "--seq-len", "4096", "--batch", "1"]
    r = plan(cmd, *shape7b, "--recompute", "full")
    expect(r["activations"] == 4328521728 and r["input"]["recompute"] == "full", f"7B full recompute {r['activations']}")
    r = plan(cmd, *shape7b, "--recompute", "selective")
    expect(r["activations"] == 32 * 34 * 16777216, f"7B selective recompute {r['activations']}")
    # this trainer's layout: every recompute keeps less than none at d12, T = 1024
    none = plan(cmd, "--model", "d12", "--batch", "4", "--seq-len", "1024")["activations"]
    for args in (["full"], ["full", "--recompute-every", "3"], ["selective"]):
        a = plan(cmd, "--model", "d12", "--batch", "4", "--seq-len", "1024", "--recompute", *args)["activations"]
        expect(a < none, f"d12 --recompute {' '.join(args)}: {a} not below {none}")
    # d12, fp32: what the trainer would allocate on one rank
    d = plan(cmd, "--model", "d12", "--batch", "4", "--seq-len", "1024")
    expect(d["num_params"] == 124475904 and d["model_states"] == 16 * 124475904, f"d12 {d['num_params']}")
    # bad options: non-zero, one line naming the option
    for args, name in [(["--precision", "fp8"], "--precision"), (["--bogus"], "--bogus"), (["--world"], "--world"),
                       (["--zero-stage", "4"], "--zero-stage"), (["--params", "lots"], "--params"),
                       (["--model", "d13"], "--model"), (["--model", "d12", "--seq-len", "2048"], "--seq-len"),
                       (["--params", "7e9", "--layers", "32"], "--params"), (["--recompute", "most"], "--recompute"),
                       (["--recompute-every", "2"], "--recompute-every"),
                       (["--recompute", "full", "--recompute-every", "99", "--model", "d12"], "--recompute-every"),
                       (["--cpu-checkpointing"], "--cpu-checkpointing"),
                       (["--offload-optimizer", "gpu"], "--offload-optimizer"), (["--offload-optimizer", "cpu"], "--offload-optimizer"),
                       (["--zero-stage", "2", "--offload-param", "cpu"], "--offload-param")]:
        r = subprocess.run(cmd + args, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        expect(r.returncode != 0 and len(lines) == 1 and name in lines[0] and r.stdout == "",
               f"bad option {args}: rc {r.returncode}, stderr {r.stderr!r}")
    # the delayed update names its buffers where the table plans them, by hand at d12, fp32, N = 2: the held
    # gradient shard beside the gradients (4P + 4P/N), its new parameters as the staging (4P/N; this trainer's
    # update writes them there, its host is its device: no 2+2 pieces, no host copy of the held gradients)
    r = subprocess.run(cmd + ["--model", "d12", "--precision", "fp32", "--zero-stage", "1", "--world", "2",
                              "--offload-optimizer", "cpu", "--offload-delayed-update"], capture_output=True, text=True)
    rows = {l[2:40].strip(): l[40:].split() for l in r.stdout.splitlines() if l.startswith("  ")}
    g, st, P = rows.get("gradients (fp32) + held shard"), rows.get("staging (delayed update's new params)"), 124475904
    expect(g is not None and g[:3] == ["4P", "+", "4P/N"] and g[4] == f"{4 * P + 4 * P // 2:,}", f"delayed: gradients {g}")
    gpu = rows.get("staging (2+2, delayed: params, grads)")
    if gpu is not None:  # beside a GPU (train_gpt's layout): the plain offload's 2+2 pieces, the new parameters'
        # shard and the held gradients' host copy (4P/N each in fp32), the pieces from the same plan without the delay
        r0 = subprocess.run(cmd + ["--model", "d12", "--precision", "fp32", "--zero-stage", "1", "--world", "2",
                                   "--offload-optimizer", "cpu"], capture_output=True, text=True)
        plain = {l[2:40].strip(): l[40:].split() for l in r0.stdout.splitlines() if l.startswith("  ")}
        pieces = plain.get("staging (offload: 2+2 pieces)")
        expect(pieces is not None and int(gpu[2].replace(",", "")) == int(pieces[2].replace(",", "")) + 2 * (4 * P // 2),
               f"delayed beside a GPU: staging {gpu}, without the delay {pieces}")
    else:
        expect(st is not None and st[2] == f"{4 * P // 2:,}", f"delayed: staging {st} (rows {list(rows)})")
    r = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
    expect(r.returncode == 0 and "--offload-optimizer" in r.stdout, "--help")
    r = subprocess.run(cmd + ["--model", "d48", "--precision", "bf16", "--zero-stage", "3", "--world", "64"],
                       capture_output=True, text=True)
    expect(r.returncode == 0 and "MODEL STATES" in r.stdout, "the table")
    print(f"cli: {len(failures)} failures")

def agree(log, plan_json):
    p = json.load(open(plan_json))
    mem = [json.loads(l) for l in open(log) if '"event":"memory"' in l]
    N = p["input"]["world"]
    expect(len(mem) == N, f"{log}: {len(mem)} memory entries for {N} ranks")
    kinds = p["kinds"]  # the memory kinds, in order: params, grads, master, the optimizer's state arrays, ...
    for m in mem:
        for k in kinds:
            expect(m[k] == p[k], f"{log} rank {m['rank']}: {k} allocated {m[k]} != planned {p[k]}")
        expect(m["padded_params"] == p["padded_params"] and m["num_params"] == p["num_params"], f"{log}: counts")
    states = sum(mem[0][k] for k in kinds[:kinds.index("buffers")]) if mem else -1
    expect(states == p["model_states"], f"{log}: model states {states} != {p['model_states']}")

def cpu_activation_bytes(L, C, NH, Vp, B, T, precision, mode, K):
    """The CPU trainer's activations, from cpu/workspace.h's contract, written out afresh."""
    BT = B * T
    layer = {"ln1": BT * C, "ln1_mean": BT, "ln1_rstd": BT, "qkv": 3 * BT * C, "atty": BT * C, "att": B * NH * T * T,
             "residual2": BT * C, "ln2": BT * C, "ln2_mean": BT, "ln2_rstd": BT, "fch": 4 * BT * C, "fch_gelu": 4 * BT * C,
             "residual3": BT * C}
    stats = {"ln1_mean", "ln1_rstd", "ln2_mean", "ln2_rstd"}
    # always fp32, one each: the embeddings' output, the final LayerNorm, logits, losses, the backward's scratch
    other = BT * C + BT * C + 2 * BT + BT * Vp + BT + BT * C + BT * C + 4 * BT * C + 3 * BT * C
    K = K if mode == "full" else 1
    segments = -(-L // K)
    kept = {"none": set(layer), "selective": {"qkv", "residual2", "fch", "residual3"}, "full": {"residual3"}}[mode]
    if precision == "fp32":  # kept tensors for every layer that keeps them, the rest in scratch slots
        if mode == "none": slots = {t: L for t in layer}
        elif mode == "selective": slots = {t: L if t in kept else 1 for t in layer}
        else: slots = {t: segments + K - 1 if t == "residual3" else K for t in layer}
        return 4 * (other + sum(layer[t] * slots[t] for t in layer))
    # 16-bit: what is kept, at 2 bytes, for each layer that keeps it; fp32 slots to compute in
    keeping = segments if mode == "full" else L
    b16 = 2 * keeping * sum(layer[t] for t in kept if t not in stats)
    if mode == "none": f32 = 2 * sum(layer[t] for t in layer if t not in stats) + L * sum(layer[t] for t in stats)
    else: f32 = K * sum(layer.values()) + layer["residual3"]  # K layers, and a segment's input
    return 4 * (other + f32) + b16

def activations(log, L, C, NH, Vp, B, T, precision, mode, K):
    want = cpu_activation_bytes(*map(int, (L, C, NH, Vp, B, T)), precision, mode, int(K))
    mem = [json.loads(l) for l in open(log) if '"event":"memory"' in l]
    expect(len(mem) > 0, f"{log}: no memory entries")
    for m in mem:
        expect(m["activations"] == want, f"{log} rank {m['rank']}: activations {m['activations']} != {want} computed here")

if __name__ == "__main__":
    if sys.argv[1] == "cli": cli(sys.argv[2:])
    elif sys.argv[1] == "activations": activations(*sys.argv[2:])
    else: agree(sys.argv[2], sys.argv[3])
    for f in failures: print("FAIL", f)
    sys.exit(1 if failures else 0)
