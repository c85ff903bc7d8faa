#!/usr/bin/env python3
"""Checks `train_gpt_cpu --plan --partitions` (run/planner.h) against things computed without it.

  partitions_check.py table OUT.txt L C NH V MAXT N PRECISION
      every number of the printout against the GPT-2 tensor shapes (the llm.c file's list), the
      padding rule of zero.h's contract (each unit padded to a multiple of N x 16 elements, rank r
      owns the r-th of N equal slices) and the ZeRO paper's stage rules (stage 1 slices the
      optimizer state, 2 also the gradients, 3 also the parameters; bytes per element 4/4/8 in fp32
      with AdamW, 2/2/12 in 16-bit)
  partitions_check.py memory OUT.txt STAGE LOG.jsonl
      the table's parameters/gradients/optimizer-state bytes at STAGE against what every rank of a
      real run allocated (its --log's memory objects)
  partitions_check.py shards OUT.txt CKPT_STEP_DIR MODEL.bin
      the slices in a checkpoint's model_rankR.bin files (what each rank really held) sit where the
      table says: rank r's slice of unit u, concatenated over ranks, is the unit of MODEL.bin, the
      llm.c model file of a run of the same steps on ONE rank (no partition), and the padding is zero
"""
import json, re, struct, sys

ALIGN = 16


def num(s): return int(s.replace(",", ""))


def parse(path):
    lines = open(path).read().splitlines()
    head = lines[0]
    m = re.match(r"partition map \(zero.h\): (\d+) units, N = (\d+) ranks; each unit padded to a multiple of N x ZERO_ALIGN = (\d+) elements", head)
    assert m, f"first line: {head!r}"
    units, N, align = map(int, m.groups())
    hdr = next(i for i, l in enumerate(lines) if l.strip().startswith("unit") and "elements" in l)
    ranks_shown = [int(x) for x in re.findall(r"rank (\d+) from", lines[hdr])]
    rows = []
    for l in lines[hdr + 1:hdr + 1 + units]:
        m = re.match(r"\s+(\d+) (.{22})\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+(.*)$", l)
        assert m, f"unit row: {l!r}"
        rows.append(dict(u=int(m[1]), name=m[2].strip(), n=num(m[3]), padded=num(m[4]), S=num(m[5]), pad=num(m[6]),
                         starts=[num(x) for x in m[7].split()]))
    total = lines[hdr + 1 + units]
    assert total.strip().startswith("= all units"), total
    tot = [num(x) for x in total.split()[3:]]
    kinds_at = next(i for i, l in enumerate(lines) if l.startswith("what every rank keeps"))
    m = re.search(r"parameters ([\d.]+), gradients ([\d.]+), optimizer state ([\d.]+)", lines[kinds_at])
    bpe = tuple(float(x) for x in m.groups())
    keeps = [lines[kinds_at + 2 + s].split(None, 1)[1] for s in range(4)]
    b_at = next(i for i, l in enumerate(lines) if l.startswith("model-state bytes of each unit"))
    ubytes = [[num(x) for x in l.split()[-4:]] for l in lines[b_at + 2:b_at + 2 + units]]
    totals = {}
    for l in lines[b_at + 2 + units:b_at + 6 + units]:
        parts = re.match(r"\s+(?:= )?([a-zA-Z ]+?)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$", l)
        assert parts, f"total row: {l!r}"
        totals[parts[1].strip()] = [num(parts[i]) for i in range(2, 6)]
    return dict(units=units, N=N, align=align, ranks_shown=ranks_shown, rows=rows, tot=tot, bpe=bpe, keeps=keeps,
                ubytes=ubytes, totals=totals)


def unit_numels(L, C, V, maxT):
    Vp = (V + 127) // 128 * 128
    layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, C * 4 * C, C]  # ln1w..fcprojb
    return [Vp * C + maxT * C] + [sum(layer)] * L + [2 * C], layer, Vp


def check_table(t, L, C, NH, V, maxT, N, prec):
    fails = []
    def want(what, got, exp):
        if got != exp: fails.append(f"{what}: table says {got}, expected {exp}")
    numels, _, _ = unit_numels(L, C, V, maxT)
    want("units", t["units"], L + 2); want("N", t["N"], N); want("alignment", t["align"], N * ALIGN)
    off = 0
    for u, (row, n) in enumerate(zip(t["rows"], numels)):
        padded = -(-n // (N * ALIGN)) * N * ALIGN
        S = padded // N
        want(f"unit {u} elements", row["n"], n); want(f"unit {u} padded", row["padded"], padded)
        want(f"unit {u} slice", row["S"], S); want(f"unit {u} padding", row["pad"], padded - n)
        want(f"unit {u} name", row["name"], "embeddings (wte, wpe)" if u == 0 else "final layernorm" if u == L + 1 else f"layer {u - 1}")
        want(f"unit {u} slice starts", row["starts"], [off + r * S for r in t["ranks_shown"]])
        off += padded
    want("ranks shown", t["ranks_shown"], list(range(N)) if N < 8 else [0, 1, 2, N - 1])
    flat = off
    want("totals", t["tot"], [sum(numels), flat, flat // N, flat - sum(numels)])
    p, g, K = (4, 4, 8) if prec == "fp32" else (2, 2, 12)
    want("bytes per element", t["bpe"], (p, g, K))
    for s in range(4):
        exp = " ".join("its slices" if s >= k else "whole units" for k in (3, 2, 1))
        want(f"stage {s} keeps", " ".join(t["keeps"][s].split()), exp)
    for s in range(4):
        kinds = [0, 0, 0]
        for u, row in enumerate(t["rows"]):
            full, S = row["padded"], row["padded"] // N
            b = [p * (S if s >= 3 else full), g * (S if s >= 2 else full), K * (S if s >= 1 else full)]
            want(f"unit {u} stage {s} bytes", t["ubytes"][u][s], sum(b))
            kinds = [a + c for a, c in zip(kinds, b)]
        want(f"stage {s} parameters", t["totals"]["parameters"][s], kinds[0])
        want(f"stage {s} gradients", t["totals"]["gradients"][s], kinds[1])
        want(f"stage {s} optimizer state", t["totals"]["optimizer state"][s], kinds[2])
        want(f"stage {s} model states", t["totals"]["MODEL STATES"][s], sum(kinds))
        # the textbook on the padded count, as zero.h's contract tabulates it
        P = flat
        tb = [(p + g + K) * P, p * P + g * P + K * P // N, p * P + (g + K) * P // N, (p + g + K) * P // N][s]
        want(f"stage {s} textbook", t["totals"]["MODEL STATES"][s], tb)
    return fails


def check_memory(t, stage, log):
    mems = [json.loads(l) for l in open(log) if '"event":"memory"' in l]
    fails = []
    if len(mems) != t["N"]: fails.append(f"{log}: {len(mems)} ranks logged their memory, the table has N = {t['N']}")
    for m in mems:
        opt = m.get("master", 0) + sum(v for k, v in m.items() if k.startswith(("adam_", "lion_", "sgd_")) and isinstance(v, (int, float)))
        got = [m["params"], m["grads"], opt]
        exp = [t["totals"][k][stage] for k in ("parameters", "gradients", "optimizer state")]
        if got != exp or m["zero_stage"] != stage:
            fails.append(f"rank {m['rank']} stage {m['zero_stage']}: allocated params/grads/optimizer {got}, the table says {exp}")
        else:
            print(f"  rank {m['rank']}, stage {stage}: allocated {got} bytes = the table")
    return fails


def check_shards(t, step_dir, model):
    N, rows = t["N"], t["rows"]
    with open(model, "rb") as f:
        h = struct.unpack("256i", f.read(1024))
        maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
        params = f.read()
    fl = struct.unpack(f"{len(params) // 4}f", params)
    # the llm.c file: each tensor stacked over layers, in this order
    _, layer, _ = unit_numels(L, C, V, maxT)
    sizes = [Vp * C, maxT * C] + [n * L for n in layer] + [C, C]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    def unit_from_file(u):
        if u == 0: return fl[0:sizes[0] + sizes[1]]
        if u == L + 1: return fl[starts[-2]:starts[-2] + 2 * C]
        l, out = u - 1, []
        for k, n in enumerate(layer): out += fl[starts[2 + k] + l * n:starts[2 + k] + (l + 1) * n]
        return out
    slices = []
    for r in range(N):
        with open(f"{step_dir}/model_rank{r:05d}.bin", "rb") as f:
            hh = struct.unpack("256i", f.read(1024))
            data = f.read()
        assert hh[9] == r and hh[10] == N, f"rank file {r}: header says rank {hh[9]} of {hh[10]}"
        want = sum(row["S"] for row in rows) * 4
        if len(data) != want: return [f"model_rank{r:05d}.bin: {len(data)} bytes of slices, the table's slices make {want}"]
        slices.append(struct.unpack(f"{len(data) // 4}f", data))
    fails, pos, worst = [], 0, 0.0
    for u, row in enumerate(rows):
        S = row["S"]
        unit = [x for r in range(N) for x in slices[r][pos:pos + S]]
        pos += S
        ref = unit_from_file(u)
        # the reference trained on one rank: the same updates, gradients summed in another order
        diff = max(abs(x - y) for x, y in zip(unit[:row["n"]], ref))
        worst = max(worst, diff)
        if diff > 1e-6: fails.append(f"unit {u}: the ranks' slices, in rank order, differ from the model's unit by up to {diff:.3g}")
        if any(x != 0.0 for x in unit[row["n"]:]): fails.append(f"unit {u}: padding not zero")
    if not fails: print(f"  {N} ranks' checkpoint slices at the table's offsets = the one-rank run's model, unit by unit "
                        f"(largest difference {worst:.2g}); padding zero")
    return fails


def main():
    a = sys.argv[1:]
    t = parse(a[1])
    if a[0] == "table":
        L, C, NH, V, maxT, N = map(int, a[2:8])
        fails = check_table(t, L, C, NH, V, maxT, N, a[8])
        if not fails: print(f"  table L={L} C={C} N={N} {a[8]}: {t['units']} units, every offset, slice and byte as computed here")
    elif a[0] == "memory": fails = check_memory(t, int(a[2]), a[3])
    elif a[0] == "shards": fails = check_shards(t, a[2], a[3])
    else: sys.exit(__doc__)
    for f in fails: print("FAIL", f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
