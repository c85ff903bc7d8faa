# The bytes a trainer counted against the step-time model's (test_timemodel_zeropp, test_multihost):
#   zeropp_comm_check.py LABEL PLAN LOG [LOG2]
# PLAN: `--plan --time --json` output (its inside_bytes and across_bytes per rank: run/timemodel.h
# running zero.h's schedule on a simulated backend); LOG: a run's --log. Every rank's comm event
# from step 2 on (step 1 has no prefetch from a previous step) must equal the model's, all 4 ranks
# present at step 2; with LOG2, its comm events must equal LOG's at every step and rank.
# load_plan and find are also imported by test_timemodel_zeropp's textbook check.
import json, sys

def load_plan(path):
    t = open(path).read()
    return json.loads(t[t.index("{"):])

def find(o, key):
    if isinstance(o, dict):
        if key in o: return o[key]
        for v in o.values():
            r = find(v, key)
            if r is not None: return r
    return None

if __name__ == "__main__":
    label, plan_path, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
    plan = load_plan(plan_path)
    model = (find(plan, "inside_bytes"), find(plan, "across_bytes"))
    runs = [{(e["step"], e["rank"]): (e["inside_host"], e["across_hosts"]) for e in map(json.loads, open(p))
             if e.get("event") == "comm"} for p in logs]
    later = {k: v for k, v in runs[0].items() if k[0] >= 2}
    ok = sorted(r for s, r in later if s == 2) == [0, 1, 2, 3] and all(v == model for v in later.values()) and model[1] > 0
    same = all(r == runs[0] for r in runs[1:])
    print(f"{'ok  ' if ok and same else 'FAIL'} {label}: model inside/across {model}, the run's (4 ranks) {sorted(set(later.values()))}"
          + (f"; the second run's the same at every step: {same}" if len(runs) > 1 else ""))
    sys.exit(0 if ok and same else 1)
