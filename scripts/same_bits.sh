#!/usr/bin/env bash
# Are two builds of the CPU trainer the same trainer? Runs five configurations with each binary
# and compares, bit for bit, every step's loss, learning rate and gradient norm (the JSON log's
# floats, printed with 9 significant digits: each float's exact value) and every file of the
# checkpoint each run saves at its end (weights, optimizer state, master weights).
#   1. `make bench`'s fp32 run: d12, B=4, T=64
#   2. `make bench`'s bf16 run
#   3. 2 ranks, ZeRO-3, fp16 (dynamic loss scale), a small model
#   4. the optimizer state and the parameters on NVMe, ZeRO-3, bf16, 2 ranks
#   5. full recompute every 2 layers, bf16, ZeRO-2, 2 ranks
# Usage: scripts/same_bits.sh OLD_BINARY NEW_BINARY   (e.g. a build of 4b98c00 and ./train_gpt_cpu)
# Prints one line per configuration and exits non-zero if any differs. STEPS (default 3).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2")
steps=${STEPS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset OPENBLAS_CORETYPE
d=$(mktemp -d "${TMPDIR:-/tmp}/same_bits.XXXXXX"); trap 'rm -rf "$d"' EXIT
small="--layers 4 --channels 128 --heads 4 --vocab-size 50257 --max-seq-len 64 --batch 2 --seq-len 32"
cases=(
  "bench_fp32|1|--model d12 --batch 4 --seq-len 64 --precision fp32"
  "bench_bf16|1|--model d12 --batch 4 --seq-len 64 --precision bf16"
  "zero3_fp16|2|$small --precision fp16 --zero-stage 3"
  "nvme_zero3|2|$small --precision bf16 --zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path NVME"
  "recompute|2|$small --precision bf16 --zero-stage 2 --recompute full --recompute-every 2"
)
run() { # binary tag np args
  local bin=$1 tag=$2 np=$3 args=${4//NVME/$d/nvme_$2}
  mkdir -p "$d/nvme_$tag"
  local launch=()
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np" --oversubscribe)
  "${launch[@]}" "$bin" $args --steps "$steps" --val-every 0 --sample-every 0 --seed 7 \
    --out "$d/out_$tag" --save-every "$steps" --log "$d/$tag.jsonl" > "$d/$tag.txt" 2>&1
}
fails=0
for c in "${cases[@]}"; do
  IFS='|' read -r name np args <<< "$c"
  run "$old" "old_$name" "$np" "$args" || { echo "FAIL $name: the old binary's run failed"; tail -3 "$d/old_$name.txt"; fails=$((fails+1)); continue; }
  run "$new" "new_$name" "$np" "$args" || { echo "FAIL $name: the new binary's run failed"; tail -3 "$d/new_$name.txt"; fails=$((fails+1)); continue; }
  steps_of() { grep '^{"step"' "$1" | sed -E 's/.*("loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*).*/\1/'; }
  a=$(steps_of "$d/old_$name.jsonl"); b=$(steps_of "$d/new_$name.jsonl")
  ck=0; nf=0
  for f in $(cd "$d/out_old_$name" && find . -type f -name '*.bin' | sort); do
    nf=$((nf+1)); cmp -s "$d/out_old_$name/$f" "$d/out_new_$name/$f" || { ck=1; echo "  differs: $f"; }
  done
  if [ -n "$a" ] && [ "$a" = "$b" ] && [ $ck = 0 ] && [ $nf -gt 0 ]; then
    echo "same $name: $(echo "$a" | wc -l) steps' loss, lr and norm, and $nf checkpoint files"
  else
    echo "FAIL $name"; diff <(echo "$a") <(echo "$b") | head -6; fails=$((fails+1))
  fi
done
[ $fails = 0 ] && echo "all ${#cases[@]} configurations bit-identical" || { echo "$fails configurations differ"; exit 1; }
