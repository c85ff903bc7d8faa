#!/usr/bin/env python3
"""Checks a --trace file against its run's --log, recomputing everything from the raw events.

  trace_check.py TRACE LOG WORLD UNITS ACCUM

TRACE must be valid Chrome-trace JSON with one process (pid) per rank, each named "rank R".
On every rank:
  - the compute lane (tid 0) nests: a span ends before the one around it does;
  - no two spans of one comm lane overlap; collectives are named all_gather, reduce_scatter or
    all_reduce, and each with a unit ends no later than the wait for it on the compute lane
    (same name, unit, step and micro-step) ends;
  - every micro-step has a "forward" and a "backward" span for each of the UNITS units;
  - the bytes of its collectives with a unit started within a step's span, per kind, equal the
    log's {"event":"comm"} entry for that rank and step, exactly.
For rank 0 (whose times the step log reports), per step: fwd_ms, bwd_ms, optim_ms are the
lengths of its forward_pass, backward_pass and optimizer spans; exposed_comm_ms the length of its
outermost "wait" spans; comm_ms the union of its collectives' spans; and fwd + bwd + optim + data
does not exceed the step's ms.
"""
import json, sys
from collections import defaultdict

failures = []
def expect(cond, msg):
    if not cond: failures.append(msg)

EPS = 0.002  # microseconds: the file rounds ts and dur to 0.001

def nests(spans, where):
    stack = []
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] <= e["ts"] + EPS: stack.pop()
        end = e["ts"] + e["dur"]
        if stack and end > stack[-1] + EPS:
            expect(False, f"{where}: {e['name']} at {e['ts']} ends at {end}, after the span around it ({stack[-1]})")
            return
        stack.append(end)

def union(intervals):
    total, cur = 0.0, None
    for a, b in sorted(intervals):
        if cur is None or a > cur[1]:
            if cur: total += cur[1] - cur[0]
            cur = [a, b]
        else: cur[1] = max(cur[1], b)
    return total + (cur[1] - cur[0] if cur else 0.0)

def outermost(spans):
    """Total length of the spans not inside another span of the list."""
    total, end = 0.0, -1e300
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] + EPS >= end:
            total += e["dur"]; end = e["ts"] + e["dur"]
    return total

def main():
    trace_path, log_path, world, units, accum = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    with open(trace_path) as f: t = json.load(f)
    ev = t["traceEvents"]
    expect(t["otherData"]["world"] == world, f"otherData world {t['otherData']}")
    expect(t["otherData"]["dropped_events"] == 0, "dropped events")
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    expect(names == {r: f"rank {r}" for r in range(world)}, f"process rows {names}")
    spans = [e for e in ev if e["ph"] == "X"]
    expect(all(e["pid"] in names for e in ev), "an event outside the ranks' processes")
    expect(all(e["dur"] >= 0 for e in spans), "a negative duration")
    log = [json.loads(l) for l in open(log_path)]
    steps = {e["step"]: e for e in log if "loss" in e and "step" in e}
    comm_log = {(e["step"], e["rank"]): e for e in log if e.get("event") == "comm"}
    for r in range(world):
        mine = [e for e in spans if e["pid"] == r]
        lane0 = [e for e in mine if e["tid"] == 0]
        nests(lane0, f"rank {r} compute lane")
        coll = [e for e in mine if e["cat"] == "comm"]
        expect(all(1 <= e["tid"] < 100 for e in coll), f"rank {r}: a collective off the comm lanes")
        expect(all(e["name"] in ("all_gather", "reduce_scatter", "all_reduce") for e in coll),
               f"rank {r}: collective names {set(e['name'] for e in coll)}")
        by_tid = defaultdict(list)
        for e in coll: by_tid[e["tid"]].append(e)
        for tid, es in by_tid.items():
            es.sort(key=lambda e: e["ts"])
            for a, b in zip(es, es[1:]):
                expect(a["ts"] + a["dur"] <= b["ts"] + EPS, f"rank {r} comm lane {tid}: overlap at {b['ts']}")
        waits = defaultdict(list)
        for e in lane0:
            if e["cat"] == "wait" and e["name"].startswith("wait "):
                waits[(e["name"][5:], e["args"].get("unit"), e["args"]["step"], e["args"]["micro"])].append(e)
        for e in coll:
            if "unit" not in e["args"]: continue
            key = (e["name"], e["args"]["unit"], e["args"]["step"], e["args"]["micro"])
            w = [x for x in waits.get(key, []) if x["ts"] + EPS >= e["ts"]]
            expect(w, f"rank {r}: no wait for {key}")
            if w:
                expect(e["ts"] + e["dur"] <= w[0]["ts"] + w[0]["dur"] + EPS,
                       f"rank {r}: {key} ends after its wait returned")
        # units' forward and backward in every micro-step of every step
        seen = defaultdict(set)
        for e in lane0:
            if e["name"] in ("forward", "backward"):
                seen[(e["name"], e["args"]["step"], e["args"]["micro"])].add(e["args"]["unit"])
        for s in steps:
            for m in range(accum):
                for kind in ("forward", "backward"):
                    expect(seen[(kind, s, m)] == set(range(units)),
                           f"rank {r} step {s} micro {m}: {kind} units {sorted(seen[(kind, s, m)])}")
        # bytes per step and kind, exactly the comm log's
        window = {e["args"]["step"]: (e["ts"] - EPS, e["ts"] + e["dur"] + EPS) for e in lane0 if e["name"] == "step"}
        expect(sorted(window) == sorted(steps), f"rank {r}: step spans {sorted(window)}")
        def within(e, s): return s in window and window[s][0] <= e["ts"] <= window[s][1]
        sums = defaultdict(float)
        for e in coll:
            if "unit" in e["args"] and within(e, e["args"]["step"]): sums[(e["args"]["step"], e["name"])] += e["args"].get("bytes", 0)
        for s in steps:
            c = comm_log.get((s, r))
            expect(c is not None, f"no comm log entry for step {s} rank {r}")
            if c is None: continue
            for kind in ("all_gather", "reduce_scatter", "all_reduce"):
                expect(sums[(s, kind)] == c[kind], f"rank {r} step {s} {kind}: trace {sums[(s, kind)]} log {c[kind]}")
        if r != 0: continue
        for s, row in steps.items():
            st = [e for e in lane0 if e["args"]["step"] == s]
            step_span = [e for e in st if e["name"] == "step"]
            expect(len(step_span) == 1, f"step {s}: {len(step_span)} step spans")
            lo = step_span[0]["ts"] if step_span else 0
            hi = lo + step_span[0]["dur"] if step_span else 0
            def total(name): return sum(e["dur"] for e in st if e["name"] == name) / 1e3
            for key, name in [("fwd_ms", "forward_pass"), ("bwd_ms", "backward_pass"), ("optim_ms", "optimizer"),
                              ("data_ms", "data")]:
                expect(abs(row[key] - total(name)) <= 0.01 + 1e-4 * row[key], f"step {s}: {key} {row[key]} vs trace {total(name)}")
            inside = [e for e in st if e["ts"] >= lo - EPS and e["ts"] + e["dur"] <= hi + EPS]
            exposed = outermost([e for e in inside if e["cat"] == "wait"]) / 1e3
            flight = union([(e["ts"], e["ts"] + e["dur"]) for e in coll if within(e, s)]) / 1e3
            expect(abs(row["exposed_comm_ms"] - exposed) <= 0.01 + 1e-4 * exposed,
                   f"step {s}: exposed_comm_ms {row['exposed_comm_ms']} vs trace {exposed}")
            expect(abs(row["comm_ms"] - flight) <= 0.01 + 1e-4 * flight, f"step {s}: comm_ms {row['comm_ms']} vs trace {flight}")
            parts = row["fwd_ms"] + row["bwd_ms"] + row["optim_ms"] + row["data_ms"]
            expect(parts <= row["ms"] + 0.05, f"step {s}: fwd+bwd+optim+data {parts} > step {row['ms']}")
    n = len(spans)
    if failures:
        for m in failures[:20]: print("FAIL", m)
        print(f"{len(failures)} failures")
        sys.exit(1)
    print(f"ok: {n} spans on {world} ranks, {len(steps)} steps")

main()
