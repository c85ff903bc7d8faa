#!/usr/bin/env bash
# Activation recompute changes memory, never results. The CPU trainer with --recompute full,
# full --recompute-every 2 and 3, and selective, in fp32, bf16 and fp16, on 1 rank (ZeRO-0) and
# 2 ranks (ZeRO 0-3), two micro-steps per step: every step's loss and gradient norm, and the
# weights it saves at the end, equal the run without recompute bit for bit; so do the bf16
# matmuls through sgemm and an odd shape on two threads. Every run's
# activation bytes equal what its layout implies (test/planner_check.py computes them apart
# from the C code) and its table says the plan equals what each rank allocated. Under ZeRO-3
# the all-gather bytes per step follow the recompute's schedule: the same as without recompute
# for one recompute per layer (the backward's gather serves it), a segment's extra gathers for
# full recompute of K > 2 layers at a time (test/zero_check.py layer_gathers, a model of the
# two gather buffers written apart from zero.h).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
L=4 C=32 NH=2 V=512 B=2 T=16
$PYTHON test/zero_check.py shard "$d/train.bin" 20000 $V 1
args=(--layers $L --channels $C --heads $NH --vocab-size $V --max-seq-len $T --seq-len $T --batch $B --grad-accum 2
      --steps 3 --lr 3e-3 --warmup 1 --val-every 0 --sample-every 0 --train-data "$d/train.bin")
modes=("none 1" "full 1" "full 2" "full 3" "selective 1") # mode, K
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
. test/lib.sh
steps() { log_steps "$1"; } # loss, lr, grad_norm (and the fp16 scaler's state)
gathers() { grep '"event":"comm"' "$1" | sed -E 's/.*"all_gather":([0-9]+).*/\1/' | sort -u | tr '\n' ' '; }
# ranks N, command...: N ranks through mpirun; one as an MPI singleton that starts no orted daemon
# (a third of a 1-rank run's wall time here went to mpirun and the daemon; the process is the same)
ranks() {
  local n=$1; shift
  if [ "$n" -eq 1 ]; then OMPI_MCA_ess_singleton_isolated=1 "$@"; else mpirun -np "$n" --oversubscribe --bind-to none "$@"; fi
}
runs=0
for p in fp32 bf16 fp16; do
  for ns in "1 0" "2 0" "2 1" "2 2" "2 3"; do
    read -r n s <<<"$ns"
    for mk in "${modes[@]}"; do
      read -r mode k <<<"$mk"
      tag=${p}_n${n}_s${s}_${mode}$k
      OMP_NUM_THREADS=1 ranks "$n" ./train_gpt_cpu "${args[@]}" --precision $p --zero-stage "$s" \
        --recompute "$mode" --recompute-every "$k" --log "$d/$tag.jsonl" --out "$d/$tag" >"$d/$tag.out" 2>&1 ||
        { tail -n 5 "$d/$tag.out"; fail "$tag: the run"; continue; }
      runs=$((runs + 1))
      $PYTHON test/planner_check.py activations "$d/$tag.jsonl" $L $C $NH $V $B $T $p "$mode" "$k" || fail "$tag: activation bytes"
      grep -q "plan vs allocated: every kind on every rank matches exactly" "$d/$tag.out" || fail "$tag: plan != allocated"
      if [ "$n" -eq 2 ] && [ "$s" -eq 3 ]; then
        e=2; [ $p = fp32 ] && e=4 # bytes per element
        want=$($PYTHON test/zero_check.py gathers $L $C $V $T 2 $e 2 "$mode" "$k")
        got=$(gathers "$d/$tag.jsonl")
        [ "$got" = "$want " ] || fail "$tag: all_gather bytes per step '$got', the schedule says '$want'"
      fi
      [ "$mode" = none ] && continue
      ref=${p}_n${n}_s${s}_none1
      if [ "$(steps "$d/$ref.jsonl")" = "$(steps "$d/$tag.jsonl")" ] && [ -n "$(steps "$d/$tag.jsonl")" ]; then :
      else diff <(steps "$d/$ref.jsonl") <(steps "$d/$tag.jsonl") | head -n 4 || true; fail "$tag: steps differ from no recompute"; fi
      cmp -s "$d/$ref/model_00000003.bin" "$d/$tag/model_00000003.bin" || fail "$tag: saved weights differ from no recompute"
    done
    echo "$p N=$n ZeRO-$s: none, full, full every 2 and 3, selective: losses, norms, weights bit for bit; bytes as planned"
  done
done
# the bf16 matmuls through sgemm on rounded operands (the path of CPUs without AVX512-BF16), and an
# odd shape (B=3, T=13, C=48, 3 heads) on two threads per rank, whose slots start at odd offsets
odd=(--channels 48 --heads 3 --batch 3 --seq-len 13)
for c in "sgemm bf16 2 3" "odd fp32 1 0" "odd bf16 1 0" "odd fp16 2 3"; do
  read -r what p n s <<<"$c"
  extra=(); envs=(OMP_NUM_THREADS=2)
  [ "$what" = odd ] && extra=("${odd[@]}")
  [ "$what" = sgemm ] && envs=(OMP_NUM_THREADS=1 ZEROC_BF16_MATMUL=sgemm)
  for mk in "none 1" "full 1" "full 2" "selective 1"; do
    read -r mode k <<<"$mk"
    tag=${what}_${p}_${mode}$k
    (export "${envs[@]}"; ranks "$n" ./train_gpt_cpu "${args[@]}" "${extra[@]}" --precision $p --zero-stage "$s" \
      --recompute "$mode" --recompute-every "$k" --log "$d/$tag.jsonl" --out "$d/$tag") >"$d/$tag.out" 2>&1 ||
      { tail -n 5 "$d/$tag.out"; fail "$tag: the run"; continue; }
    runs=$((runs + 1))
    [ "$mode" = none ] && continue
    ref=${what}_${p}_none1
    [ "$(steps "$d/$ref.jsonl")" = "$(steps "$d/$tag.jsonl")" ] && [ -n "$(steps "$d/$tag.jsonl")" ] ||
      fail "$tag: steps differ from no recompute"
    cmp -s "$d/$ref/model_00000003.bin" "$d/$tag/model_00000003.bin" || fail "$tag: saved weights differ from no recompute"
  done
  echo "$what $p N=$n ZeRO-$s: full, full every 2, selective equal no recompute bit for bit"
done
echo "$runs runs, $fails failures"
[ $fails -eq 0 ]
