#!/usr/bin/env bash
# make nvme-overlap (issue 41, parts 1 and 2): GPT-2 XL (d48), bf16, ZeRO-1, optimizer on NVMe,
# B=1, T=256, one rank: how much of the NVMe time the step hides, before (BEFORE: a binary of an
# earlier commit, e.g. /work/ref/train_gpt_cpu_*; skipped when unset) and now, with the default
# buffers, with more buffer sets (the next update's reads run during the forward and backward,
# as far as the buffer sets reach), with the host tier (--nvme-host-cache $CACHE), with a
# read-ahead area (--nvme-readahead $AHEAD: the next update's first pieces read during the
# forward and backward into host memory of their own), with both auto (half each), and with the
# delayed update (--offload-delayed-update --offload-delay-warmup 1: step i's update, its NVMe
# traffic too, on a helper thread during step i+1's forward and backward; STEPS + 2 steps, and
# only the steps that apply a held update are summed: from the third to the one before the last,
# which also runs its own update at once).
# For each run, per step (mean of the steps after the first): the step, the NVMe bytes, busy
# and exposed time, and the two floors the step is held to: its compute alone (the step less
# the time it waited on I/O) and its NVMe bytes at bench_nvme's rates on the same disk. With the
# delayed update, exposed is the helper's waits for NVMe while the step's thread waited for it.
#
#   NVME_PATH=DIR   where the files go (default /var/tmp/zeroc_nvme; ~19 GB free per run)
#   STEPS=N         steps per run (default 3)   T=N  sequence length (default 256)
#   CACHE=BYTES     the host tier's budget (default auto), with the default 4 buffer sets
#   AHEAD=BYTES     the read-ahead area's budget (default auto)
#   CASES="..."     which runs, of: before buffers4 buffers16 cache readahead both delayed delayed_cache
#                   (the last: the delayed update with the host tier, --nvme-host-cache $CACHE)
#                   (default all)
#   OUT=DIR         logs (default bench/out/nvme_overlap)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
NVME_PATH=${NVME_PATH:-/var/tmp/zeroc_nvme}
STEPS=${STEPS:-3}
T=${T:-256}
CACHE=${CACHE:-auto}
AHEAD=${AHEAD:-auto}
OUT=${OUT:-bench/out/nvme_overlap}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$NVME_PATH" "$OUT"
make -s train_gpt_cpu test/bin/bench_nvme
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
# the disk as core/nvme.h sees it: 8 requests of 1 MiB at once (the trainer's default pool)
test/bin/bench_nvme "$NVME_PATH/bench" 2 8 1048576 | tee "$OUT/bench_nvme.txt"
W=$(grep -o 'write [0-9.]*' "$OUT/bench_nvme.txt" | awk '{print $2 * 1e9}')
R=$(grep -o 'read [0-9.]*' "$OUT/bench_nvme.txt" | awk '{print $2 * 1e9}')

common="--model d48 --precision bf16 --zero-stage 1 --offload-optimizer nvme --batch 1 --seq-len $T --steps $STEPS
        --val-every 0 --sample-every 0 --lr 1e-4 --warmup 0"
run() { # NAME BINARY, then options
  local name=$1 bin=$2; shift 2
  echo
  echo "== $name: $bin $(echo $common) $*"
  $bin $common "$@" --nvme-path "$NVME_PATH" --log "$OUT/$name.jsonl" > "$OUT/$name.out" 2>&1 || { tail -3 "$OUT/$name.out"; return; }
  grep -E "^(--nvme-host-cache|--nvme-readahead|  = TOTAL)" "$OUT/$name.out" || true
  $PY - "$OUT/$name.jsonl" "$W" "$R" "$name" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
log, W, R = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l) for l in open(log)]
steps = [r for r in rows if "loss" in r and "nvme_read" in r][1:]
if sys.argv[4].startswith("delayed"): steps = steps[1:-1] # (step 2 holds its update; the last also updates at once)
mem = next(r for r in rows if r.get("event") == "memory")
rss = max(r["bytes"] for r in rows if r.get("event") == "peak_rss")
n = len(steps)
avg = lambda k: sum(s[k] for s in steps) / n
rd, wr, busy, exp, ms = avg("nvme_read"), avg("nvme_write"), avg("nvme_ms"), avg("exposed_io_ms"), avg("ms")
ahead = avg("nvme_ahead") if all("nvme_ahead" in s for s in steps) else None
fwd, bwd, opt = avg("fwd_ms"), avg("bwd_ms"), avg("optim_ms")
compute, disk = ms - exp, (rd / R + wr / W) * 1e3
print(f"{log}: planned memory {mem['device']/1e9:.2f} GB, NVMe {mem['nvme']/1e9:.2f} GB; peak RSS {rss/1e9:.2f} GB")
print(f"  step {ms/1e3:.2f} s (forward {fwd/1e3:.2f}, backward {bwd/1e3:.2f}, update {opt/1e3:.2f}), mean of {n}")
print(f"  NVMe per step: read {rd/1e9:.2f} GB" + (f" ({ahead/1e9:.2f} GB of it started ahead)" if ahead is not None else "") +
      f", wrote {wr/1e9:.2f} GB; busy {busy/1e3:.2f} s, exposed {exp/1e3:.2f} s = {exp/busy*100 if busy else 0:.0f}% of nvme_ms")
print(f"  floors: compute alone {compute/1e3:.2f} s, the bytes at bench_nvme's rates {disk/1e3:.2f} s; "
      f"step / max = {ms/max(compute, disk):.2f}")
PY
}
for c in ${CASES:-before buffers4 buffers16 cache readahead both delayed delayed_cache}; do
  case $c in
    before) [ -n "${BEFORE:-}" ] && run before "$BEFORE" ;;
    buffers4) run buffers4 ./train_gpt_cpu ;;
    buffers16) run buffers16 ./train_gpt_cpu --nvme-buffers 16 ;;
    cache) run cache ./train_gpt_cpu --nvme-host-cache "$CACHE" ;;
    readahead) run readahead ./train_gpt_cpu --nvme-readahead "$AHEAD" ;;
    both) run both ./train_gpt_cpu --nvme-host-cache auto --nvme-readahead auto ;;
    delayed) run delayed ./train_gpt_cpu --offload-delayed-update --offload-delay-warmup 1 --steps $((STEPS + 2)) ;;
    delayed_cache) run delayed_cache ./train_gpt_cpu --offload-delayed-update --offload-delay-warmup 1 --steps $((STEPS + 2)) \
      --nvme-host-cache "$CACHE" ;;
  esac
done
