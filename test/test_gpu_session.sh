#!/usr/bin/env bash
# make gpu_pack + make gpu_session (scripts/gpu_session.sh) end to end on the CUDA emulator, so
# that a lent GPU never finds the session script broken: the pack builds and unpacks, every
# stage runs (the profiled run beside a baseline binary, the checks' QUICK set, the grid), and
# the summary holds what docs and the issue ask of it. Independent checks:
#   - summary.json: commit = this checkout's, checks_failed = 0 with checks passed, one run per
#     configuration (each attention build's profiled run, the baseline, the grid at ZeRO 1-3 and
#     twice the batch at ZeRO-2, a bigger model, the delayed update), each with tokens_per_s = total_batch / (ms_per_step / 1000) within the
#     rounding of the log's numbers (the trainer prints both independently);
#   - the kernel profile: rows for every kind of wrapper the step runs (forward and backward
#     matmuls, attention, LayerNorm, GELU, the classifier, the optimizer), calls per step as the
#     model's shape says (2 layers x 2 micro-steps: 8 layernorm_forward per step, ...), and the
#     spans' time no more than the step's;
#   - the Twin-Flow run (offload ratio 0.5): its update's wall time, the device's update kernels in
#     it (> 0: half the state updates on the GPU) and the GPU's idle share of the update in [0, 1];
#   - the delayed update's run: the GPU's idle fraction of the step in [0, 1], its kernels' time
#     positive and within the step;
#   - a run that fails (a batch that does not divide the total) is recorded as failed, not lost.
set -u
cd "$(dirname "$0")/.." || exit 1
. test/lib.sh
new_scratch gpu_session
# Idle OpenMP threads sleep instead of spinning (as in test_gpu_emu): the emulated runs' many short
# parallel calls; the thread count, and so every number, is the same
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
PY=${PYTHON:-python3}
fail=0
PACK_DIR=$d/pack EMULATED=1 bash scripts/gpu_session.sh pack --base HEAD > "$d/pack.log" 2>&1 ||
  { tail -n 20 "$d/pack.log"; echo "FAIL pack"; exit 1; }
PACK_DIR=$d/pack EMULATED=1 bash scripts/gpu_session.sh run --out "$d/run" --budget 900 > "$d/run.log" 2>&1
rc=$?
tail -n 25 "$d/run.log"
[ $rc -eq 0 ] || { echo "FAIL the session exited $rc"; fail=1; }
$PY - "$d/run" "$(git rev-parse --short HEAD)" <<'PYEOF' || fail=1
import json, os, sys
out, head = sys.argv[1], sys.argv[2]
s = json.load(open(os.path.join(out, "summary.json")))
bad = []
def want(c, msg):
    if not c: bad.append(msg)
want(s["commit"].split("+")[0] == head, f"commit {s['commit']} is not this checkout's {head}")
want(s["checks_failed"] == 0 and s["checks_passed"] >= 5, f"checks: {s['checks_passed']} passed, {s['checks_failed']} failed")
tags = [r["tag"] for r in s["runs"]]
grid = [f"d12_B2_z{z}" for z in (1, 2, 3)] + ["d12_B4_z2"]  # the emulated grid: 2B at ZeRO-2 only
for t in ["d12_B2_z2_profile", "d12_B2_z2_mm_profile", "base_d12_B2_z2", "bigger_B1_z3", "delayed_d12_B2_z2"] + grid:
    want(t in tags, f"no run {t}")
for r in s["runs"]:
    for k in ("model", "seq_len", "batch", "zero_stage", "tokens_per_s", "mfu"):
        want(k in r, f"{r['tag']}: no {k}")
    if r.get("failed"): bad.append(f"{r['tag']} failed"); continue
    want(abs(r["tokens_per_s"] - r["total_batch"] / (r["ms_per_step"] / 1e3)) <= 1.0 + 1e-3 * r["tokens_per_s"],
         f"{r['tag']}: tokens/s {r['tokens_per_s']} != {r['total_batch']} / {r['ms_per_step']} ms")
p = s["kernel_profiles"].get("d12_B2_z2_profile")
want(p is not None, "no kernel profile")
if p:
    rows = {r["kernel"]: r for r in p["rows"]}
    # 2 layers; 256 tokens a step at B=2, T=64: 2 micro-steps
    micro = 256 // (2 * 64)
    expect = {"layernorm_forward": (2 * 2 + 1) * micro, "layernorm_backward": (2 * 2 + 1) * micro,
              "attention_forward": 2 * micro, "attention_backward": 2 * micro, "gelu_forward": 2 * micro,
              "matmul_backward dinp+dgelu 256->64": 2 * micro, "residual_forward": 2 * 2 * micro, "encoder_forward": micro,
              "encoder_backward": micro, "classifier (softmax, cross-entropy, loss)": micro,
              "matmul_forward 64->192": 2 * micro, "matmul_backward dweight 256->64": 2 * micro, "gradient norm": 1}
    for k, n in expect.items():
        want(k in rows and abs(rows[k]["calls"] - n) < 1e-9, f"profile: {k} {rows.get(k, {}).get('calls')} calls per step, want {n}")
    want("optimizer update" in rows, "profile: no optimizer update row")
    # the GELU's backward rides in the fc projection's dinp product (cuBLASLt's DGELU epilogue)
    want("gelu_backward" not in rows and "matmul_backward dinp 256->64" not in rows, "profile: the GELU backward is not fused")
    want(sum(r["ms"] for r in p["rows"]) <= p["step_ms"] * 1.0001, "profile: the spans take longer than the step")
    want(rows.get("matmul_forward 64->192", {}).get("flops") == (2 * 128 * 64 * 192) * 2 * micro, "profile: qkv matmul FLOPs")
tw = [r for r in s["runs"] if r["tag"] == "twin_d12_B2_z2_r0.5"]
want(len(tw) == 1, "no Twin-Flow run (twin_d12_B2_z2_r0.5)")
for r in tw:
    want(r.get("offload_ratio") == 0.5 and r.get("device_update_ms", 0) > 0 and 0.0 <= r.get("gpu_idle_in_update", -1) <= 1.0
         and r["optim_ms"] > 0, f"Twin-Flow run: ratio, device update ms, GPU idle share {r}")
for r in [r for r in s["runs"] if r["tag"] == "delayed_d12_B2_z2" and not r.get("failed")]:
    f = r.get("gpu_idle_fraction")
    want(f is not None and 0.0 <= f <= 1.0 and 0 < r["gpu_kernels_ms"] <= r["profile_step_ms"],
         f"delayed run: the GPU's idle fraction {f} not in [0, 1], or its kernels' "
         f"{r.get('gpu_kernels_ms')} ms not within the step")
md = open(os.path.join(out, "summary.md")).read()
want("GPU idle during the update" in md and "delayed parameter update: the GPU's idle" in md,
     "summary.md lacks an offload table")
want("| d12_B2_z2_profile |" in md and "Kernel profile" in md, "summary.md lacks the run table or the profile")
for b in bad: print("FAIL", b)
print(f"{'ok' if not bad else 'FAIL'}: {len(s['runs'])} runs, {s['checks_passed']} checks passed, profile rows "
      f"{len(p['rows']) if p else 0}")
sys.exit(1 if bad else 0)
PYEOF
exit $fail
