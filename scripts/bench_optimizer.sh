#!/usr/bin/env bash
# The CPU optimizer engine (core/optimizer_engine.h) against the memory bandwidth and against
# torch.optim.AdamW on this machine, in one run: ms per AdamW step for GPT-2 124M (d12) and 1.5B
# (d48) in fp32 and bf16 mixed precision, each against the bandwidth of its own streams measured
# beside it (test/bench_optimizer.c says how), then torch's best setting (scripts/bench_torch_adamw.py:
# d12 fp32 at 1/2 threads, foreach off/on, fused where it exists; d48 bf16 mixed precision as a
# torch trainer does it). Ends with the targets (issue 41): d12 fp32 and d48 bf16 each at >= 85%
# of the bandwidth and >= 3x torch's best. Run it on an otherwise idle machine; `make
# bench-optimizer` builds first. STEPS (default 5) steps per case, best counted.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp); trap 'rm -f "$out"' EXIT
threads=${OMP_NUM_THREADS:-$(nproc)}
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
OMP_NUM_THREADS=$threads test/bin/bench_optimizer --steps "${STEPS:-5}" | tee "$out"
"$PY" scripts/bench_torch_adamw.py --steps "${STEPS:-5}" | tee -a "$out"
# (a case's ms is the field before its first "ms/step", its percentage the field before "of the bandwidth")
awk 'function ms(  i) { for (i = 2; i <= NF; i++) if ($i == "ms/step") return $(i - 1); return 0 }
     function pct(  i) { for (i = 2; i <= NF; i++) if ($i == "of" && $(i + 1) == "the" && $(i + 2) == "bandwidth") return $(i - 1) + 0; return 0 }
     function verdict(name, ours, p, t) {
       printf "%s: the engine %.1f ms/step, %.1f%% of the bandwidth (target >= 85%%); torch best %.1f ms: %.2fx (target >= 3x): %s\n",
              name, ours, p, t, t / ours, (p >= 85 && t / ours >= 3) ? "met" : "NOT met" }
     /^d12 fp32 \(whole-model/ {d12=ms(); d12p=pct()} /^d48 bf16 \(unit/ {d48=ms(); d48p=pct()}
     /^torch AdamW best/ {t12=$4} /^torch mixed AdamW best/ {t48=$5}
     END {if (d12 && t12) verdict("d12 fp32 (whole-model arrays)", d12, d12p, t12)
          if (d48 && t48) verdict("d48 bf16 (unit by unit)", d48, d48p, t48)}' "$out"
