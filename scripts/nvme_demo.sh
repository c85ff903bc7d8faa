#!/usr/bin/env bash
# make nvme-demo: GPT-2 XL (d48, 1.56B parameters, 25 GB of model states in bf16 with AdamW)
# trains on a machine with less memory than that, its optimizer state (and then its parameters)
# on NVMe. For each run: the peak resident memory, the step time and where it goes, and the NVMe
# traffic against what dd measures on the same filesystem with direct I/O.
#
#   NVME_PATH=DIR   where the files go (default /var/tmp/zeroc_nvme; needs ~23 GB free)
#   STEPS=N         steps per run (default 3)
#   OUT=DIR         logs (default bench/out/nvme)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
NVME_PATH=${NVME_PATH:-/var/tmp/zeroc_nvme}
STEPS=${STEPS:-3}
OUT=${OUT:-bench/out/nvme}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$NVME_PATH" "$OUT"
make -s train_gpt_cpu

echo "== the disk: dd with direct I/O on $NVME_PATH (2 GiB, 16 MiB blocks)"
dd if=/dev/zero of="$NVME_PATH/dd.bin" bs=16M count=128 oflag=direct conv=fsync 2> "$OUT/dd_write.txt"
dd if="$NVME_PATH/dd.bin" of=/dev/null bs=16M iflag=direct 2> "$OUT/dd_read.txt"
rm -f "$NVME_PATH/dd.bin"
rate() { grep -o '[0-9.,]* [GM]B/s' "$1" | tail -1 | tr , . | awk '{print ($2 == "GB/s" ? $1 * 1e9 : $1 * 1e6)}'; }
W=$(rate "$OUT/dd_write.txt"); R=$(rate "$OUT/dd_read.txt")
echo "dd: write $(awk "BEGIN{print $W/1e9}") GB/s, read $(awk "BEGIN{print $R/1e9}") GB/s"
echo "== core/nvme.h on the same disk (1 GB written then read, 64 MiB pieces, 2 in flight): requests at once x bytes each"
make -s test/bin/bench_nvme
for tb in "1 1048576" "2 1048576" "4 1048576" "8 1048576" "16 1048576" "8 262144" "8 4194304"; do
  test/bin/bench_nvme "$NVME_PATH/bench" 1 $tb | tee -a "$OUT/bench_nvme.txt"
done
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) of memory"

# B=1 x T=64 keeps activations small: the point is where the model states live.
common="--model d48 --precision bf16 --batch 1 --seq-len 64 --steps $STEPS --val-every 0 --sample-every 0 --lr 1e-4 --warmup 0"
run() { # NAME, then options
  local name=$1; shift
  echo
  echo "== $name: ./train_gpt_cpu $common $*"
  ./train_gpt_cpu $common "$@" --nvme-path "$NVME_PATH" --log "$OUT/$name.jsonl" | tee "$OUT/$name.out" \
    | grep --line-buffered -E "^(step|peak|average|  = TOTAL|note|error)"
  $PY - "$OUT/$name.jsonl" "$W" "$R" <<'PY'
import json, sys
log, W, R = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l) for l in open(log)]
steps = [r for r in rows if "loss" in r and "nvme_read" in r][1:] or [r for r in rows if "loss" in r]  # after the first
mem = next(r for r in rows if r.get("event") == "memory")
rss = max(r["bytes"] for r in rows if r.get("event") == "peak_rss")
n = len(steps)
avg = lambda k: sum(s[k] for s in steps) / n
rd, wr, busy, exp, ms, opt = avg("nvme_read"), avg("nvme_write"), avg("nvme_ms"), avg("exposed_io_ms"), avg("ms"), avg("optim_ms")
ideal = (rd / R + wr / W) * 1e3  # ms the same bytes take at dd's rates, one after the other
print(f"planned: device (this process) {mem['device']/1e9:.2f} GB, NVMe {mem['nvme']/1e9:.2f} GB; peak RSS {rss/1e9:.2f} GB")
print(f"per step (mean of {n} after the first): {ms/1e3:.1f} s, of which the update {opt/1e3:.1f} s")
print(f"  NVMe: read {rd/1e9:.2f} GB, wrote {wr/1e9:.2f} GB, busy {busy/1e3:.1f} s = {(rd+wr)/busy*1e3/1e9:.2f} GB/s; "
      f"dd's rates would take {ideal/1e3:.1f} s: {ideal/busy*100:.0f}% of dd")
print(f"  compute waited on I/O {exp/1e3:.1f} s of the {busy/1e3:.1f} s it was busy ({(1 - exp/busy)*100:.0f}% hidden)")
PY
}
run d48_optimizer_nvme --zero-stage 1 --offload-optimizer nvme
run d48_all_nvme --zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-buffer-size 2097152
