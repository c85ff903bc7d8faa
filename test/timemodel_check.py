#!/usr/bin/env python3
"""Checks of the step-time model through the command line.

  timemodel_check.py schedule REAL_TRACE PREDICTED_TRACE STEP
      the collectives of rank 0 in step STEP of a real run's --trace, in the order they were
      started (name, unit, bytes, micro-step), are those of the model's predicted trace (its one
      step), one by one: the model runs the trainer's schedule
  timemodel_check.py cli PLAN...
      llm.c's figure, the --json keys, and bad options (PLAN: the command before the options)
"""
import json, subprocess, sys

failures = []
def expect(cond, msg):
    if not cond: failures.append(msg)

def collectives(path, step):
    """(start, (name, unit, bytes, micro)) of rank 0's collectives in the step, by start."""
    ev = json.load(open(path))["traceEvents"]
    c = [e for e in ev if e["ph"] == "X" and e["cat"] == "comm" and e["pid"] == 0 and e["args"]["step"] == step]
    c.sort(key=lambda e: e["ts"])
    return [(e["ts"], (e["name"], e["args"].get("unit"), e["args"].get("bytes"), e["args"]["micro"])) for e in c]

def schedule(real, predicted, step):
    """The real sequence, in start order, equals the predicted one, where the model starts several
    collectives at the same simulated instant (no compute between them) in any order among them."""
    a, b = [x for _, x in collectives(real, step)], collectives(predicted, 1)
    expect(len(a) > 0, "the real run has no collectives")
    expect(len(a) == len(b), f"{len(a)} real collectives vs {len(b)} predicted")
    i = 0
    while i < min(len(a), len(b)):
        j = i
        while j < len(b) and b[j][0] == b[i][0]: j += 1
        group = sorted(x for _, x in b[i:j])
        if sorted(a[i:j]) != group:
            expect(False, f"collectives #{i}-{j - 1}: real {a[i:j]} vs predicted {group}")
            break
        i = j
    return len(a)

def plan(cmd, *args):
    r = subprocess.run(cmd + list(args), capture_output=True, text=True)
    if r.returncode != 0: raise SystemExit(f"plan {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout

def cli(cmd):
    # llm.c's GPT-2 124M: 8x A100 80GB SXM, ZeRO-1, bf16, B=64, T=1024, no recompute: about 300 ms
    p = json.loads(plan(cmd, "--time", "--json", "--hardware", "a100-80gb-sxm", "--model", "d12", "--precision", "bf16",
                        "--zero-stage", "1", "--world", "8", "--batch", "64", "--seq-len", "1024"))
    for k in ["step_ms", "fwd_ms", "bwd_ms", "optim_ms", "comm_ms", "exposed_comm_ms", "model_states"]:
        expect(k in p, f"--time --json lacks {k}")
    expect(abs(p["step_ms"] - 300) <= 0.3 * 300, f"llm.c's 8xA100 step: predicted {p['step_ms']:.0f} ms, measured ~300")
    expect(p["fwd_ms"] + p["bwd_ms"] + p["optim_ms"] <= p["step_ms"] * 1.000001, "the parts exceed the step")
    expect(p["reduce_scatter_bytes"] == p["all_gather_bytes"] == 2 * p["padded_params"] * 7 / 8,
           f"ZeRO-1 moves 2P(N-1)/N bytes each way: {p['reduce_scatter_bytes']} {p['padded_params']}")
    # more ranks than one node: across the network; ZeRO-3 sends 1.5x; Ethernet is slower than InfiniBand
    common = ["--time", "--json", "--hardware", "h100-80gb-sxm", "--model", "d48", "--precision", "bf16", "--world", "64",
              "--batch", "8", "--seq-len", "1024"]
    ib = json.loads(plan(cmd, *common, "--zero-stage", "3", "--network", "ib-400"))
    eth = json.loads(plan(cmd, *common, "--zero-stage", "3", "--network", "eth-100"))
    z1 = json.loads(plan(cmd, *common, "--zero-stage", "1", "--network", "ib-400"))
    expect(eth["step_ms"] > ib["step_ms"] and eth["comm_work_ms"] > 4 * ib["comm_work_ms"],
           f"Ethernet {eth['comm_work_ms']} ms of collectives vs InfiniBand {ib['comm_work_ms']}")
    sent = lambda q: q["reduce_scatter_bytes"] + q["all_gather_bytes"] + q["all_reduce_bytes"]
    expect(1.2 < sent(ib) / sent(z1) <= 1.5, f"stage 3 / stage 1 bytes {sent(ib) / sent(z1)}")
    # the table prints the same numbers
    t = plan(cmd, "--time", "--hardware", "a100-80gb-sxm", "--model", "d12", "--precision", "bf16", "--zero-stage", "1",
             "--world", "8", "--batch", "64", "--seq-len", "1024")
    expect(f"{p['step_ms']:10.2f} ms" in t, "the table's step differs from --json's")
    # bad options: non-zero, one line naming the culprit
    for args, name in [(["--time", "--hardware", "tpu-v9"], "--hardware"), (["--hardware", "a100-80gb-sxm"], "--hardware"),
                       (["--time", "--params", "7e9"], "--time"), (["--time", "--network", "carrier-pigeon"], "--network"),
                       (["--time", "--world", "12", "--gpus-per-node", "8"], "--time"),
                       (["--time", "--grad-accum", "0"], "--grad-accum"),
                       (["--calibrate", "/nonexistent.jsonl"], "--calibrate")]:
        r = subprocess.run(cmd + args, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        expect(r.returncode != 0 and len(lines) == 1 and name in lines[0] and lines[0].startswith("error:"),
               f"{args}: rc {r.returncode}, stderr {r.stderr!r}")

if __name__ == "__main__":
    if sys.argv[1] == "schedule":
        n = schedule(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        ok = f"{n} collectives, in the same order"
    else:
        cli(sys.argv[2:])
        ok = "llm.c's figure, --json, bad options"
    for m in failures: print("FAIL", m)
    if failures: sys.exit(1)
    print("ok:", ok)
