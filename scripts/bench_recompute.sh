#!/usr/bin/env bash
# What activation recompute costs and buys on GPT-2 124M (d12), CPU trainer (`make bench-recompute`).
#   1. Activation bytes as allocated (the plan equals the allocation to the byte) with full and
#      selective recompute against none, at L = 8 and L = 12 (the d12 shape), T = 1024 and T = 64.
#   2. Step time: for each configuration, none / full / selective one after the other, ROUNDS
#      times (interleaved, so that a busy neighbour slows all three alike), STEPS steps each; the
#      median of the trainer's "average step (after the first)", the fastest single step of all
#      rounds (the least disturbed by neighbours), and the CPU time a step takes (the process's
#      user + system seconds of a STEPS-step run less those of a 1-step run, over STEPS - 1:
#      what neighbours disturb least, with one thread), and their ratios to none.
#   3. LONG=1: one step at T = 8192 (--max-seq-len 8192, B = 1, bf16, full recompute) under
#      /usr/bin/time -v: its peak RSS beside the plan (with recompute, and without: above the
#      machine's memory), and the largest T whose plan fits in this machine's memory, with and
#      without recompute.
# Environment: ROUNDS (3), STEPS (5), CONFIGS (a ;-separated list of trainer options), LONG (0).
set -u
cd "$(dirname "$0")/.." || exit 1
make -s train_gpt_cpu || exit 1
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-5} LONG=${LONG:-0}
CONFIGS=${CONFIGS-"--batch 4 --seq-len 64 --precision bf16;--batch 1 --seq-len 1024 --precision bf16;--batch 4 --seq-len 64 --precision fp32"}
PY=/usr/bin/python3
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
modes=(none full selective)
plan_bytes() { ./train_gpt_cpu --plan "$@" --json | $PY -c "import json,sys; p=json.load(sys.stdin); print(p['activations'], p['total'])"; }

echo "== 1. activation bytes (allocated = planned), recompute against none"
printf '%-6s %-5s %-6s %-6s %16s %16s %16s %8s %8s\n' L T B prec none full selective full/none sel/none
for L in 8 12; do
  for TB in "1024 4" "64 4"; do
    read -r T B <<<"$TB"
    for p in fp32 bf16; do
      a=()
      for m in "${modes[@]}"; do
        read -r act _ <<<"$(plan_bytes --layers "$L" --channels 768 --heads 12 --max-seq-len 1024 --seq-len "$T" --batch "$B" --precision $p --recompute $m)"
        a+=("$act")
      done
      printf '%-6s %-5s %-6s %-6s %16s %16s %16s %8.3f %8.3f\n' "$L" "$T" "$B" $p "${a[0]}" "${a[1]}" "${a[2]}" \
        "$($PY -c "print(${a[1]}/${a[0]})")" "$($PY -c "print(${a[2]}/${a[0]})")"
    done
  done
done

echo "== 2. step time, d12, none / full / selective interleaved, $ROUNDS rounds of $STEPS steps ($(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all})"
configs=(); [ -n "$CONFIGS" ] && IFS=";" read -r -a configs <<<"$CONFIGS"
for c in "${configs[@]}"; do
  for r in $(seq "$ROUNDS"); do
    for m in "${modes[@]}"; do
      # shellcheck disable=SC2086
      cpu=()
      for n in 1 "$STEPS"; do
        # shellcheck disable=SC2086
        /usr/bin/time -f "%U %S" -o "$d/time" ./train_gpt_cpu --model d12 $c --steps "$n" --val-every 0 --sample-every 0 \
          --recompute $m >"$d/out" 2>&1 || { tail -n 5 "$d/out"; exit 1; }
        cpu+=("$(awk '{print $1 + $2}' "$d/time")")
      done
      ms=$(sed -n 's/^average step (after the first): \([0-9.]*\) ms.*/\1/p' "$d/out")
      fastest=$(grep '^step' "$d/out" | tail -n +2 | sed -E 's/.*\| +([0-9.]+) ms \|.*/\1/' | sort -g | head -n 1)
      echo "$m $ms $fastest $($PY -c "print((${cpu[1]} - ${cpu[0]}) / ($STEPS - 1) * 1000)")" >>"$d/$r.txt"
      echo "$c | round $r | $m: $ms ms/step" >&2
    done
  done
  cat "$d"/[0-9]*.txt >"$d/all.txt"; rm -f "$d"/[0-9]*.txt
  $PY - "$d/all.txt" "$c" "$STEPS" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for m, ms, fastest, cpu in rows: by.setdefault(m, []).append((float(ms), float(fastest), float(cpu)))
med = {m: (statistics.median(x[0] for x in v), min(x[1] for x in v), statistics.median(x[2] for x in v)) for m, v in by.items()}
print(f"d12 {sys.argv[2]}:")
for m in ("none", "full", "selective"):
    w, f, c = med[m]
    walls = ", ".join(f"{x[0]:.0f}" for x in by[m])
    cpus = ", ".join(f"{x[2]:.0f}" for x in by[m])
    n = med["none"]
    print(f"  {m:9s} median {w:7.0f} ms/step ({walls}) x{w / n[0]:.2f}; fastest step {f:6.0f} ms x{f / n[1]:.2f}; "
          f"CPU {c:6.0f} ms/step ({cpus}) x{c / n[2]:.2f}")
EOF
done

[ "$LONG" = 1 ] || exit 0
echo "== 3. long context: d12 shape with --max-seq-len 8192, T = 8192, B = 1, bf16"
long=(--layers 12 --channels 768 --heads 12 --max-seq-len 8192 --seq-len 8192 --batch 1 --precision bf16)
read -r _ total_none <<<"$(plan_bytes "${long[@]}" --recompute none)"
read -r _ total_full <<<"$(plan_bytes "${long[@]}" --recompute full)"
/usr/bin/time -v -o "$d/long_time" ./train_gpt_cpu "${long[@]}" --recompute full --steps 1 --val-every 0 --sample-every 0 \
  >"$d/long_out" 2>&1 || { tail -n 5 "$d/long_out"; exit 1; }
grep -E "^step|plan vs" "$d/long_out"
rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$d/long_time")
mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024))
echo "plan without recompute: $total_none bytes; with full recompute: $total_full bytes; this machine: $mem bytes"
echo "peak RSS with full recompute: $((rss * 1024)) bytes ($(sed -n 's/.*Elapsed (wall clock) time.*: //p' "$d/long_time") wall)"
over=$((rss * 1024 - total_full)) # what the process holds beyond the plan (code, MPI, data, allocator)
for m in none full selective; do
  best=0
  for T in $(seq 1024 512 32768); do
    read -r _ t <<<"$(plan_bytes --layers 12 --channels 768 --heads 12 --max-seq-len "$T" --seq-len "$T" --batch 1 --precision bf16 --recompute $m)"
    [ $((t + over)) -le "$mem" ] && best=$T
  done
  echo "largest T (a multiple of 512) whose plan + $over bytes beyond it fits in $mem bytes, --recompute $m: $best"
done
