#!/usr/bin/env python3
"""Checks ZeRO runs of train_gpt_cpu against independent facts.

  zero_check.py shard PATH NTOKENS VOCAB SEED      write a random token shard (llm.c format)
  zero_check.py check DIR L C NH V MAXT T B TOTAL  compare the logs DIR/n{N}_s{S}.jsonl (and
                                                   DIR/n{N}_s{S}_{R}.jsonl: runs with activation
                                                   recompute, whose losses must equal n{N}_s{S}'s)
  zero_check.py gathers L C V MAXT N ESIZE ACCUM RECOMPUTE K
                                                   ZeRO-3's all-gather bytes per rank per step with
                                                   activation recompute (none, full every K, selective)

The check recomputes, from the model shape alone, the flat layout (units padded to
world*16 elements), the model-state bytes each stage must allocate and the bytes each
collective must move per step, and compares them with what the trainer logged. Loss
trajectories must agree across stages and world sizes at the same global batch.
"""
import json, math, sys, glob, os
import numpy as np

def write_shard(path, n, vocab, seed):
    # Learnable tokens: mostly a fixed successor of the previous token, sometimes random.
    rng = np.random.RandomState(seed)
    header = np.zeros(256, np.int32); header[0] = 20240520; header[1] = 1; header[2] = n
    tokens = np.zeros(n, np.uint16)
    noise, jump = rng.rand(n) < 0.2, rng.randint(0, vocab, size=n)
    for i in range(1, n):
        tokens[i] = jump[i] if noise[i] else (int(tokens[i - 1]) * 5 + 1) % vocab
    with open(path, "wb") as f:
        f.write(header.tobytes()); f.write(tokens.tobytes())

def unit_sizes(L, C, V, maxT):
    Vp = (V + 127) // 128 * 128
    embed = Vp * C + maxT * C
    layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    return [embed] + [layer] * L + [2 * C]

def layer_gathers(L, mode, K):
    """Layer all-gathers per micro-step under ZeRO-3. The order in which the passes need the
    layers: the forward 0..L-1; the backward from the top segment down, where full recompute
    first runs a segment's layers from its first (K layers; K = 1 otherwise) and then every
    backward goes top-down. Two layer buffers: the one in use and the one receiving the next
    layer, so a layer is gathered unless it is one of the last two (distinct) layers used."""
    K = K if mode == "full" else 1
    order = list(range(L))
    for s in reversed(range(0, L, K)):
        e = min(s + K, L)
        if mode == "full": order += list(range(s, e))
        order += list(range(e - 1, s - 1, -1))
    used, n = [], 0
    for u in order:
        if used and used[-1] == u: continue
        if u not in used[-2:]: n += 1
        used.append(u)
    return n

def gathers(L, C, V, maxT, N, esize, accum, mode, K):
    units = unit_sizes(L, C, V, maxT)
    pu = [(u + N * 16 - 1) // (N * 16) * (N * 16) * esize for u in units]  # bytes per padded unit
    # the embeddings and the final LayerNorm once per micro-step; every layer the same size
    return accum * (pu[0] + pu[-1] + layer_gathers(L, mode, K) * pu[1]) * (N - 1) // N

def read_log(path):
    steps, mem, comm = {}, {}, {}
    for line in open(path):
        o = json.loads(line)
        if o.get("event") == "config":
            st = o["settings"]
            steps["accum"] = st["grad-accum"]["value"]
            steps["recompute"] = (st["recompute"]["value"], st["recompute-every"]["value"])
        elif o.get("event") == "memory": mem[o["rank"]] = o
        elif o.get("event") == "comm": comm[(o["step"], o["rank"])] = o
        elif "loss" in o: steps[o["step"]] = o
    return steps, mem, comm

def check(d, L, C, NH, V, maxT, T, B, total):
    units = unit_sizes(L, C, V, maxT)
    P = sum(units)
    failures = []
    def expect(cond, msg):
        if not cond: failures.append(msg)
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "n*_s*.jsonl"))):
        name = os.path.basename(path)[:-6]
        N, S, R = int(name.split("_")[0][1:]), int(name.split("_")[1][1:]), "_".join(name.split("_")[2:])
        runs[(N, S, R)] = read_log(path)
    accum = {key: run[0].pop("accum") for key, run in runs.items()}
    recompute = {key: run[0].pop("recompute") for key, run in runs.items()}
    base = [runs[(1, 0, "")][0][k]["loss"] for k in sorted(runs[(1, 0, "")][0])]
    print(f"reference N=1 S=0: {len(base)} steps, loss {base[0]:.6f} -> {base[-1]:.6f}")
    expect(base[-1] < base[0] - 0.05, "the reference run did not learn")
    for (N, S, R), (steps, mem, comm) in sorted(runs.items()):
        losses = [steps[k]["loss"] for k in sorted(steps)]
        same_n = [runs[(N, 0, "")][0][k]["loss"] for k in sorted(runs[(N, 0, "")][0])]
        mode, K = recompute[(N, S, R)]
        if R:  # activation recompute changes memory, never results: the same losses, bit for bit
            plain = [runs[(N, S, "")][0][k]["loss"] for k in sorted(runs[(N, S, "")][0])]
            expect(losses == plain, f"N={N} S={S} {R} (recompute {mode}, every {K}): losses {losses} != {plain}")
        d_base = max(abs(a - b) for a, b in zip(losses, base))
        d_stage = max(abs(a - b) for a, b in zip(losses, same_n))
        # fp32 sums in another order: the trajectories drift apart slowly, never by much.
        expect(len(losses) == len(base), f"N={N} S={S}: {len(losses)} steps")
        expect(d_base < 2e-4, f"N={N} S={S}: loss differs from one process by {d_base:.2e}")
        expect(d_stage < 2e-5, f"N={N} S={S}: loss differs from stage 0 at N={N} by {d_stage:.2e}")
        # memory: exact bytes per rank for the padded layout, textbook within the padding
        padded = sum((u + N * 16 - 1) // (N * 16) * (N * 16) for u in units)
        states = {0: 16 * padded, 1: 8 * padded + 8 * padded // N,
                  2: 4 * padded + 12 * padded // N, 3: 16 * padded // N}[S]
        textbook = {0: 16 * P, 1: 8 * P + 8 * P / N, 2: 4 * P + 12 * P / N, 3: 16 * P / N}[S]
        expect(len(mem) == N, f"N={N} S={S}: {len(mem)} memory entries")
        for r, m in mem.items():
            got = m["params"] + m["grads"] + m["master"] + m["adam_m"] + m["adam_v"]
            expect(m["num_params"] == P and m["padded_params"] == padded, f"N={N} S={S}: parameter counts {m}")
            expect(got == states, f"N={N} S={S} rank {r}: model states {got} != {states}")
            expect(abs(got - textbook) <= 16 * (padded - P), f"N={N} S={S}: {got} vs textbook {textbook}")
            expect(m["grads"] == 4 * (padded if S < 2 else padded // N), f"N={N} S={S}: grads {m['grads']}")
            expect(m["params"] == 4 * (padded if S < 3 else padded // N), f"N={N} S={S}: params {m['params']}")
        # communication: bytes per rank per step, ring model, from the schedule in zero.h
        A = accum[(N, S, R)]  # micro-steps per optimizer step, as the run resolved it
        pu = [(u + N * 16 - 1) // (N * 16) * (N * 16) * 4 for u in units]  # bytes per padded unit
        f = (N - 1) / N
        if S == 0: want = (2 * sum(pu) * f, 0, 0)
        elif S == 1: want = (0, sum(pu) * f, sum(pu) * f)
        elif S == 2: want = (0, A * sum(pu) * f, sum(pu) * f)
        else:
            # embeddings and final norm once per micro-step; layers for the forward, and again
            # for the backward except the last two (still in the two gather buffers)
            layers = sum(pu[1:L + 1]) + sum(pu[1:L - 1])
            if mode != "none":  # (a recompute asks for layers again: the schedule's model above)
                layers = layer_gathers(L, mode, K) * pu[1]
            want = (0, A * sum(pu) * f, A * (pu[0] + pu[-1] + layers) * f)
        for (k, r), o in comm.items():
            got = (o["all_reduce"], o["reduce_scatter"], o["all_gather"])
            expect(all(abs(g - w) < 1 for g, w in zip(got, want)), f"N={N} S={S} step {k} rank {r}: comm {got} != {want}")
        expect(len(comm) == N * len(losses), f"N={N} S={S}: {len(comm)} comm entries")
        print(f"N={N} S={S}{' ' + R if R else ''}: max |loss - one process| {d_base:.2e}, vs stage 0 {d_stage:.2e}; "
              f"model states {states} B/rank (textbook {textbook:.0f}); comm/step {sum(want):.0f} B/rank")
    for msg in failures: print("FAIL", msg)
    return 1 if failures else 0

if __name__ == "__main__":
    if sys.argv[1] == "shard":
        write_shard(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "gathers":
        a = sys.argv[2:]
        print(gathers(*map(int, a[:7]), a[7], int(a[8])))
    else:
        sys.exit(check(sys.argv[2], *map(int, sys.argv[3:])))
