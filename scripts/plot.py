#!/usr/bin/env python3
"""Figures from the trainer's own logs (--log) and traces (--trace), as small PNGs.

  scripts/plot.py --out DIR [--labels A,B,...] [--trace TRACE.json [--step N]] [--partitions TEXT] LOG.jsonl...

Writes into DIR, from the logs:
  loss.png      the loss of every run against the step, validation loss dashed with markers
  memory.png    each run's bytes per rank, stacked by kind (parameters, gradients, master weights,
                optimizer state, ZeRO buffers, activations, workspace), as measured by the ranks
                (the ZeRO paper's Figure 1), with the stage's textbook model states marked
  comm.png      bytes each rank sent per step, by collective, against the textbook 2P(N-1)/N and
                3P(N-1)/N (times the element size)
  time.png      where a step's time goes (fwd_ms, bwd_ms, optim_ms, exposed_comm_ms, the rest),
                with the overlap 1 - exposed/comm; logs written before these fields are skipped
and from a trace, timeline.png: one step (the last, or --step) of every rank: its compute lane
(each unit's forward and backward, the optimizer, waits in red) above its collectives in flight,
on the trace's comm lanes (comm 1, 2, 3: a collective goes on the first lane free when it is issued,
so comm 2 and 3 hold those issued while others were still in flight); and from the output of
`train_gpt_cpu --plan --partitions` (a file, or - for stdin), partitions.png: for each ZeRO stage,
which part of the flat parameter buffer each rank keeps of its parameters, gradients and optimizer
state (whole units, or its slice of every unit), with the bytes per rank (the ZeRO paper's Figure 1).
A run's label is --labels' entry, else "N=<world> stage <S> <precision>" from its log.
Needs matplotlib (Debian: python3-matplotlib; scripts/setup.sh installs it).
"""
import argparse, io, json, os, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"params": "#4c72b0", "grads": "#dd8452", "master": "#55a868", "state": "#8fbf7f", "buffers": "#8172b3",
          "activations": "#937860", "workspace": "#bbbbbb", "staging": "#e5ae38", "host_activations": "#a6761d",
          "hpz": "#c44e52",
          # collectives: three hues far from each other and from the compute lane's (waits are red)
          "all_reduce": "#e377c2", "reduce_scatter": "#17807e", "all_gather": "#8172b3",
          "forward": "#4c72b0", "backward": "#dd8452", "optimizer": "#55a868", "wait": "#d62728", "data": "#999999",
          "recompute": "#64b5cd", "offload": "#ccb974", "nvme": "#8c613c", "checkpoint": "#333333", "other": "#dddddd"}
KNOWN_KINDS = ["params", "grads", "master", "buffers", "staging", "activations", "workspace", "host_activations", "hpz"]
NOT_KINDS = ("event", "rank", "world", "zero_stage", "num_params", "padded_params", "device", "host", "nvme", "where",
             "optimizer_on_device")  # (Twin-Flow: the device part of the offloaded kinds, already counted in them)


def read_log(path):
    run = {"path": path, "config": None, "steps": [], "val": [], "memory": {}, "comm": {}}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line: continue
            e = json.loads(line)
            ev = e.get("event")
            if ev == "config": run["config"] = e
            elif ev == "memory": run["memory"][e["rank"]] = e
            elif ev == "comm": run["comm"].setdefault(e["step"], {})[e["rank"]] = e
            elif "val_loss" in e: run["val"].append((e["step"], e["val_loss"]))
            elif "loss" in e: run["steps"].append(e)
    return run


def setting(run, name, default=None):
    c = run["config"]
    if not c or name not in c["settings"]: return default
    return c["settings"][name]["value"]


def label_of(run):
    world = run["config"]["world"] if run["config"] else len(run["memory"]) or 1
    return f"N={world} stage {setting(run, 'zero-stage', 0)} {setting(run, 'precision', 'fp32')}"


def save(fig, path):
    """A PNG with a 64-colour palette: a few tens of kB."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    try:
        from PIL import Image
        buf.seek(0)
        Image.open(buf).convert("RGB").quantize(colors=64).save(path, optimize=True)
    except ImportError:
        with open(path, "wb") as f: f.write(buf.getvalue())
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def plot_loss(runs, labels, out):
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, (run, lab) in enumerate(zip(runs, labels)):
        col = f"C{i}"
        ax.plot([s["step"] for s in run["steps"]], [s["loss"] for s in run["steps"]], color=col, lw=1.2, label=lab)
        if run["val"]:
            xs, ys = zip(*run["val"])
            ax.plot(xs, ys, color=col, ls="--", marker="o", ms=3, lw=1)
    ax.set_xlabel("step"); ax.set_ylabel("loss"); ax.set_title("training loss (validation: dashed)")
    ax.grid(alpha=0.3); ax.legend(fontsize=8)
    save(fig, os.path.join(out, "loss.png"))


def state_kinds(mem):
    return [k for k in mem if k not in KNOWN_KINDS and k not in NOT_KINDS]


def textbook_states(run, mem):
    """The stage's formula on the real parameter count: (p + g + K)P with K the master weights and
    4 bytes per optimizer state array, partitioned as the stage says."""
    P, N, S = mem["num_params"], mem["world"], mem["zero_stage"]
    prec = setting(run, "precision", "fp32")
    p = g = 4 if prec == "fp32" else 2
    K = (0 if prec == "fp32" else 4) + 4 * len(state_kinds(mem))
    return [(p + g + K) * P, p * P + g * P + K * P / N, p * P + (g + K) * P / N, (p + g + K) * P / N][S]


def plot_memory(runs, labels, out):
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    x, ticks, ticklabels, drawn = 0.0, [], [], set()
    for run, lab in zip(runs, labels):
        ranks = sorted(run["memory"])
        if not ranks: continue
        start = x
        for r in ranks:
            mem, bottom = run["memory"][r], 0.0
            parts = [("params", mem.get("params", 0)), ("grads", mem.get("grads", 0)), ("master", mem.get("master", 0)),
                     ("state", sum(mem[k] for k in state_kinds(mem))), ("buffers", mem.get("buffers", 0)),
                     ("staging", mem.get("staging", 0)), ("activations", mem.get("activations", 0)),
                     ("workspace", mem.get("workspace", 0)), ("host_activations", mem.get("host_activations", 0)),
                     ("hpz", mem.get("hpz", 0))]
            for kind, b in parts:
                if b <= 0: continue
                name = "optimizer state" if kind == "state" else "master weights" if kind == "master" else kind
                ax.bar(x, b / 1e6, bottom=bottom / 1e6, width=0.8, color=COLORS[kind],
                       label=name if kind not in drawn else None)
                drawn.add(kind)
                bottom += b
            x += 1
        tb = textbook_states(run, run["memory"][ranks[0]])
        ax.hlines(tb / 1e6, start - 0.45, x - 0.55, colors="black", lw=1.5,
                  label="textbook model states" if "tb" not in drawn else None)
        drawn.add("tb")
        ticks.append((start + x - 1) / 2); ticklabels.append(lab.replace(" ", "\n", 1))
        x += 0.8
    ax.set_xticks(ticks); ax.set_xticklabels(ticklabels, fontsize=8)
    ax.set_ylabel("MB per rank (1 MB = 1e6 bytes)"); ax.set_title("memory of each rank, as allocated (one bar per rank)")
    ax.legend(fontsize=7, ncol=2); ax.grid(axis="y", alpha=0.3)
    save(fig, os.path.join(out, "memory.png"))


def plot_comm(runs, labels, out):
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = set()
    for i, (run, lab) in enumerate(zip(runs, labels)):
        steps = sorted(run["comm"])
        if not steps or not run["memory"]: continue
        per = run["comm"][steps[-1]][0]
        bottom = 0.0
        for kind in ("all_reduce", "reduce_scatter", "all_gather"):
            b = per.get(kind, 0)
            if b > 0:
                ax.bar(i, b / 2**20, bottom=bottom / 2**20, width=0.6, color=COLORS[kind], label=kind if kind not in drawn else None)
                drawn.add(kind)
            bottom += b
        mem = run["memory"][0]
        P, N = mem["num_params"], mem["world"]
        e = 4 if setting(run, "precision", "fp32") == "fp32" else 2
        for mult, style, name in ((2, "-", "2P(N-1)/N"), (3, ":", "3P(N-1)/N")):
            ax.hlines(mult * P * e * (N - 1) / N / 2**20, i - 0.4, i + 0.4, colors="black", linestyles=style, lw=1.3,
                      label=f"textbook {name}" if name not in drawn else None)
            drawn.add(name)
    ax.set_xticks(range(len(runs))); ax.set_xticklabels([l.replace(" ", "\n", 1) for l in labels], fontsize=8)
    ax.set_ylabel("MiB sent per rank per step"); ax.set_title("communication per rank in one step (ring model)")
    ax.legend(fontsize=7); ax.grid(axis="y", alpha=0.3)
    save(fig, os.path.join(out, "comm.png"))


def plot_time(runs, labels, out):
    rows = []
    for run, lab in zip(runs, labels):
        steps = [s for s in run["steps"] if "fwd_ms" in s]
        if len(steps) > 1: steps = steps[1:]  # the first step warms caches and thread pools
        if not steps: continue
        mean = lambda k: sum((s.get(k) or 0.0) for s in steps) / len(steps)
        rows.append((lab, mean("ms"), mean("fwd_ms"), mean("bwd_ms"), mean("optim_ms"), mean("comm_ms"),
                     mean("exposed_comm_ms"), mean("data_ms")))
    if not rows: return
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, (lab, ms, f, b, o, c, x, d) in enumerate(rows):
        # forward and backward include their waits; show the waits apart
        parts = [("forward", f), ("backward", b), ("optimizer", o), ("data", d), ("other", max(0.0, ms - f - b - o - d))]
        bottom = 0.0
        for kind, v in parts:
            ax.bar(i, v, bottom=bottom, width=0.6, color=COLORS[kind], label=kind if i == 0 else None)
            bottom += v
        ax.bar(i + 0.33, x, width=0.12, color=COLORS["wait"], label="exposed comm (inside the above)" if i == 0 else None)
        if c > 0: ax.text(i, ms * 1.02, f"overlap {100 * (1 - x / c):.0f}%", ha="center", fontsize=7)
    ax.set_xticks(range(len(rows))); ax.set_xticklabels([r[0].replace(" ", "\n", 1) for r in rows], fontsize=8)
    ax.set_ylabel("ms per step (mean after the first)"); ax.set_title("where a step's time goes (rank 0)")
    ax.legend(fontsize=7); ax.grid(axis="y", alpha=0.3)
    save(fig, os.path.join(out, "time.png"))


def plot_timeline(trace_path, step, out):
    try:
        t = json.load(open(trace_path))
        spans = [e for e in t["traceEvents"] if e["ph"] == "X"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"error: {trace_path}: not a --trace file ({err!r})")
    steps = sorted({e["args"]["step"] for e in spans if e["name"] == "step"})
    if not steps: sys.exit(f"error: {trace_path}: no step spans")
    step = steps[-1] if step is None else step
    if step not in steps: sys.exit(f"error: --step {step}: the trace has steps {steps[0]}..{steps[-1]}")
    starts = [e for e in spans if e["name"] == "step" and e["args"]["step"] == step]
    t0 = min(e["ts"] for e in starts)
    t1 = max(e["ts"] + e["dur"] for e in starts)
    ranks = sorted({e["pid"] for e in spans})
    rows = []  # (label, [(start, dur, color)])
    for r in ranks:
        mine = [e for e in spans if e["pid"] == r and t0 <= e["ts"] <= t1]
        comp = [e for e in mine if e["tid"] == 0 and (e["name"] in ("forward", "backward", "lm_head", "update", "data")
                                                      or e["cat"] in ("recompute", "offload", "nvme", "checkpoint"))]
        waits = [e for e in mine if e["tid"] == 0 and e["cat"] == "wait"]
        bars = [(e["ts"], e["dur"], COLORS.get("optimizer" if e["name"] == "update" else e["cat"], COLORS["other"]))
                for e in comp] + [(e["ts"], e["dur"], COLORS["wait"]) for e in waits]
        rows.append((f"rank {r} compute", bars))
        lanes = sorted({e["tid"] for e in mine if e["cat"] == "comm"})
        for k, lane in enumerate(lanes):
            rows.append((f"rank {r} comm {k + 1}" if k == 0 else f"comm {k + 1}", [(e["ts"], e["dur"], COLORS[e["name"]]) for e in mine
                                                             if e["tid"] == lane and e["cat"] == "comm"]))
    fig, ax = plt.subplots(figsize=(7.2, 0.35 * len(rows) + 1.2))
    for i, (_, bars) in enumerate(rows):
        y = len(rows) - 1 - i
        ax.broken_barh([((s - t0) / 1e3, max(d / 1e3, 1e-3)) for s, d, _ in bars], (y - 0.4, 0.8),
                       facecolors=[c for _, _, c in bars], edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(rows))); ax.set_yticklabels([l for l, _ in reversed(rows)], fontsize=7)
    ax.set_xlabel(f"ms since the start of step {step}")
    meta = t.get("otherData", {})
    what = f"predicted on {meta.get('hardware')}: one step of rank 0" if meta.get("predicted") else "one step on every rank"
    ax.set_title(f"{what}: N={meta.get('world', len(ranks))}, stage {meta.get('zero_stage', '?')}, "
                 f"{meta.get('precision', '')}", fontsize=9)
    from matplotlib.patches import Patch
    keys = ["forward", "backward", "optimizer", "wait", "all_gather", "reduce_scatter", "all_reduce"]
    names = {"wait": "wait (compute blocked)"}
    ax.legend(handles=[Patch(color=COLORS[k], label=names.get(k, k)) for k in keys], fontsize=6, ncol=4, loc="upper center",
              bbox_to_anchor=(0.5, -0.28 if len(rows) < 6 else -0.12))
    ax.set_xlim(0, (t1 - t0) / 1e3)
    save(fig, os.path.join(out, "timeline.png"))


def read_partitions(path):
    """The output of `train_gpt_cpu --plan --partitions`: units (offset, padded, slice), N, what each
    stage keeps whole, the bytes per rank by kind and stage."""
    import re
    lines = (sys.stdin if path == "-" else open(path)).read().splitlines()
    m = re.match(r"partition map \(zero.h\): (\d+) units, N = (\d+) ranks", lines[0]) if lines else None
    if not m: sys.exit(f"error: {path}: not the output of --plan --partitions")
    U, N = int(m[1]), int(m[2])
    num = lambda x: int(x.replace(",", ""))
    hdr = next(i for i, l in enumerate(lines) if l.strip().startswith("unit") and "elements" in l)
    units = []
    for l in lines[hdr + 1:hdr + 1 + U]:
        f, n = l.split(), 4 + len(re.findall(r"rank \d+ from", lines[hdr]))  # elements, padded, slice, padding, starts
        name, vals = " ".join(f[1:-n]), [num(x) for x in f[-n:]]
        units.append({"name": name, "numel": vals[0], "padded": vals[1], "slice": vals[2], "offset": vals[4]})
    k = next(i for i, l in enumerate(lines) if l.startswith("what every rank keeps"))
    whole = [[w == "whole" for w in re.findall(r"\b(whole|its)\b", lines[k + 2 + s])] for s in range(4)]
    b = next(i for i, l in enumerate(lines) if l.startswith("model-state bytes of each unit"))
    kinds = {}
    for l in lines[b + 2 + U:b + 6 + U]:
        f = l.replace("=", "").split()
        kinds[" ".join(f[:-4])] = [num(x) for x in f[-4:]]
    return {"N": N, "units": units, "whole": whole, "bytes": kinds, "title": lines[k]}


def plot_partitions(path, out):
    from matplotlib.patches import Patch
    P = read_partitions(path)
    N, units = P["N"], P["units"]
    ranks = list(range(N)) if N <= 8 else [0, 1, 2, N - 1]
    kinds = [("parameters", COLORS["params"]), ("gradients", COLORS["grads"]), ("optimizer state", COLORS["master"])]
    flat = units[-1]["offset"] + units[-1]["padded"]
    fig, axes = plt.subplots(4, 1, figsize=(7.2, 1.15 + 0.42 * 4 * len(ranks) + 0.1), sharex=True)
    for s, ax in enumerate(axes):
        rows, labels = [], []
        for r in ranks:
            for j, (kind, col) in enumerate(kinds):
                y = -(ranks.index(r) * 3.6 + j)
                ax.broken_barh([(0, flat / 1e6)], (y - 0.42, 0.84), facecolors="#eeeeee", edgecolor="none")
                if P["whole"][s][j]: bars = [(u["offset"], u["padded"]) for u in units]
                else: bars = [(u["offset"] + r * u["slice"], u["slice"]) for u in units]
                ax.broken_barh([(a / 1e6, max(w / 1e6, flat * 2e-4 / 1e6)) for a, w in bars], (y - 0.42, 0.84),
                               facecolors=col, edgecolor="none")
            rows.append(-(ranks.index(r) * 3.6 + 1)); labels.append(f"rank {r}")
        for u in units[1:]:
            ax.axvline(u["offset"] / 1e6, color="white", lw=0.6)
        ax.set_yticks(rows); ax.set_yticklabels(labels, fontsize=7)
        ax.tick_params(axis="y", length=0)
        per_rank = sum(P["bytes"][k][s] for k, _ in kinds)
        mb = lambda k: f"{P['bytes'][k][s] / 1e6:,.2f} MB"
        ax.set_title(f"stage {s}: {per_rank / 1e6:,.2f} MB of model states per rank: parameters {mb('parameters')}, "
                     f"gradients {mb('gradients')}, optimizer state {mb('optimizer state')}", fontsize=7.5, loc="left")
        for sp in ("top", "right", "left"): ax.spines[sp].set_visible(False)
        ax.set_xlim(0, flat / 1e6)
    if N > len(ranks): axes[0].text(flat / 1e6, 0.8, f"(ranks 3 to {N - 2} alike)", ha="right", fontsize=6)
    axes[-1].set_xlabel("the flat parameter buffer, millions of elements: the embeddings, then one unit per layer "
                        "(white lines), then the final LayerNorm", fontsize=7)
    fig.legend(handles=[Patch(color=c, label=k) for k, c in kinds] + [Patch(color="#eeeeee", label="not kept on this rank")],
               fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, 0.995))
    fig.suptitle(f"what each of N = {N} ranks keeps, by ZeRO stage (from --plan --partitions)", fontsize=9, y=1.02)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    save(fig, os.path.join(out, "partitions.png"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the PNGs")
    ap.add_argument("--labels", help="comma-separated labels, one per log")
    ap.add_argument("--trace", help="a --trace file: timeline.png")
    ap.add_argument("--step", type=int, help="the trace's step to draw (default: the last)")
    ap.add_argument("--partitions", help="the output of train_gpt_cpu --plan --partitions (- for stdin): partitions.png")
    ap.add_argument("logs", nargs="*", help="--log files")
    a = ap.parse_args()
    if not a.logs and not a.trace and not a.partitions: ap.error("give at least one LOG.jsonl, --trace or --partitions")
    os.makedirs(a.out, exist_ok=True)
    runs = []
    for p in a.logs:
        try: runs.append(read_log(p))
        except (OSError, ValueError) as err: sys.exit(f"error: {p}: {err}")
        if not runs[-1]["steps"]: sys.exit(f"error: {p}: no step entries (is it a --log file?)")
    labels = a.labels.split(",") if a.labels else [label_of(r) for r in runs]
    if len(labels) != len(runs): sys.exit(f"error: --labels: {len(labels)} labels for {len(runs)} logs")
    if runs:
        plot_loss(runs, labels, a.out)
        plot_memory(runs, labels, a.out)
        plot_comm(runs, labels, a.out)
        plot_time(runs, labels, a.out)
    if a.trace: plot_timeline(a.trace, a.step, a.out)
    if a.partitions: plot_partitions(a.partitions, a.out)


if __name__ == "__main__":
    main()
