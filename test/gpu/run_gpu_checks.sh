#!/usr/bin/env bash
# The GPU checks, for a machine with NVIDIA GPUs (`make gpu_check`, or run directly):
#   1. GPU vs CPU: the same checkpoint and batch through train_gpt and train_gpt_cpu; the first
#      step's loss and every tensor of the gradient (--dump-grads) must agree (compare_grads.py).
#      Two shapes, so that both attention batching paths (B <= NH and B > NH) run.
#   2. ZeRO stage equivalence on the GPUs present (mpirun -np NGPU): stages 0-3, with gradient
#      accumulation, give the same losses step by step.
#   3. Benchmark: GPT-2 124M (d12), T=1024, 524,288 tokens per step, ZeRO-2 and ZeRO-3:
#      ms/step, tokens/s and MFU. MFU needs the GPU's peak: H100 (989 TFLOP/s dense bf16) is
#      known; any other GPU needs --peak-tflops, otherwise no MFU is printed.
# Options: --peak-tflops X   --batch B (benchmark micro-batch per GPU, default 16)
#          --steps N (benchmark steps, default 10)   --tol REL (gradient tolerance, default 1e-3)
#          --skip-bench   --only-bench
# Results go to test/out/gpu_checks/ (summary.txt is what to paste into the README).
set -u
cd "$(dirname "$0")/../.." || exit 1
peak="" bench_B=16 bench_steps=10 tol=1e-3 do_bench=1 do_checks=1
while [ $# -gt 0 ]; do
  case "$1" in
    --peak-tflops) peak=$2; shift 2 ;;
    --batch) bench_B=$2; shift 2 ;;
    --steps) bench_steps=$2; shift 2 ;;
    --tol) tol=$2; shift 2 ;;
    --skip-bench) do_bench=0; shift ;;
    --only-bench) do_checks=0; shift ;;
    *) echo "unknown option $1 (see the comment at the top of $0)"; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here (nvidia-smi -L failed)"; exit 77; }
ngpu=$(nvidia-smi -L | wc -l)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
make -s train_gpt train_gpt_cpu || { echo "FAIL: build"; exit 1; }
d=test/out/gpu_checks
rm -rf "$d"; mkdir -p "$d"
summary=$d/summary.txt
echo "GPU checks on $ngpu x $gpu_name, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null)" | tee "$summary"
fails=0
fail() { echo "FAIL $*" | tee -a "$summary"; fails=$((fails + 1)); }
data="data/brown_train_*.bin"
common=(--train-data "$data" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)
mpi() { local np=$1; shift; mpirun -np "$np" --oversubscribe --bind-to none "$@"; }
first_loss() { sed -n 's/.*"step":1,"loss":\([^,]*\),.*/\1/p' "$1" | head -n 1; }

if [ $do_checks -eq 1 ]; then
  echo "== 1. GPU vs CPU: one checkpoint, one batch, loss and every gradient" | tee -a "$summary"
  # The checkpoint: the CPU trainer's model after one step from a seed (not the plain init, so
  # that nothing is symmetric by construction).
  ./train_gpt_cpu --layers 4 --channels 128 --heads 4 --batch 2 --seq-len 64 --steps 1 "${common[@]}" \
    --out "$d/init" >"$d/init.log" 2>&1 || { cat "$d/init.log"; fail "making the checkpoint"; }
  for shape in "2 128" "8 64"; do # B <= NH and B > NH
    set -- $shape; B=$1; T=$2
    for t in cpu gpu; do
      bin=./train_gpt_cpu; [ $t = gpu ] && bin=./train_gpt
      $bin --init "$d/init/model_00000001.bin" --batch "$B" --seq-len "$T" --steps 1 "${common[@]}" \
        --dump-grads "$d/grads_${t}_B$B.bin" --log "$d/log_${t}_B$B.jsonl" >"$d/run_${t}_B$B.log" 2>&1 ||
        { tail -n 20 "$d/run_${t}_B$B.log"; fail "$t run B=$B T=$T"; }
    done
    lc=$(first_loss "$d/log_cpu_B$B.jsonl"); lg=$(first_loss "$d/log_gpu_B$B.jsonl")
    if $PY -c "import sys; a,b=float('$lc'),float('$lg'); sys.exit(0 if abs(a-b) <= 1e-5*max(1,abs(a)) else 1)" 2>/dev/null; then
      echo "ok   B=$B T=$T loss: cpu $lc, gpu $lg" | tee -a "$summary"
    else fail "B=$B T=$T loss: cpu '$lc', gpu '$lg'"; fi
    if $PY test/gpu/compare_grads.py "$d/grads_cpu_B$B.bin" "$d/grads_gpu_B$B.bin" --tol "$tol" >"$d/cmp_B$B.txt"; then
      echo "ok   B=$B T=$T gradients: $(tail -n 1 "$d/cmp_B$B.txt")" | tee -a "$summary"
    else cat "$d/cmp_B$B.txt"; fail "B=$B T=$T gradients"; fi
  done

  echo "== 2. ZeRO stages 0-3 on $ngpu GPU(s), 2 micro-steps per step: the same losses" | tee -a "$summary"
  for s in 0 1 2 3; do
    mpi "$ngpu" ./train_gpt --init "$d/init/model_00000001.bin" --batch 4 --seq-len 64 --grad-accum 2 --steps 4 \
      "${common[@]}" --zero-stage "$s" --log "$d/zero$s.jsonl" >"$d/zero$s.log" 2>&1 ||
      { tail -n 20 "$d/zero$s.log"; fail "ZeRO-$s run"; }
  done
  if $PY - "$d" <<'EOF' | tee -a "$summary"; then :; else fail "ZeRO stages disagree"; fi
import json, sys
d = sys.argv[1]
loss = {}
for s in range(4):
    loss[s] = [json.loads(l)["loss"] for l in open(f"{d}/zero{s}.jsonl") if '"loss"' in l and '"step"' in l]
ok = all(len(loss[s]) == 4 for s in loss)
worst = max((abs(a - b) / max(1.0, abs(a)) for s in (1, 2, 3) for a, b in zip(loss[0], loss[s])), default=0.0)
ok = ok and worst <= 1e-5
print(f"{'ok  ' if ok else 'FAIL'} losses by stage: " + "; ".join(f"{s}: " + " ".join(f"{x:.6f}" for x in loss[s]) for s in loss)
      + f" (worst relative difference {worst:.2e})")
sys.exit(0 if ok else 1)
EOF
fi

if [ $do_bench -eq 1 ]; then
  echo "== 3. benchmark: d12, T=1024, 524,288 tokens/step, B=$bench_B per GPU, $ngpu GPU(s)" | tee -a "$summary"
  if [ -z "$peak" ]; then
    case "$gpu_name" in *H100*) peak=989 ;; esac # dense bf16 tensor-core peak of the H100 SXM
  fi
  flops_per_token=$($PY -c "print(6*124475904 + 12*12*768*1024)")
  for s in 2 3; do
    mpi "$ngpu" ./train_gpt --model d12 --seq-len 1024 --batch "$bench_B" --total-batch 524288 --steps "$bench_steps" \
      "${common[@]}" --zero-stage "$s" >"$d/bench_zero$s.log" 2>&1 || { tail -n 20 "$d/bench_zero$s.log"; fail "benchmark ZeRO-$s"; continue; }
    line=$(grep "^average step" "$d/bench_zero$s.log")
    ms=$(echo "$line" | sed 's/.*: \([0-9.]*\) ms.*/\1/'); toks=$(echo "$line" | sed 's/.*ms, \([0-9]*\) tok.*/\1/')
    if [ -n "$peak" ]; then
      mfu=$($PY -c "print(f'{100*$toks*$flops_per_token/($ngpu*$peak*1e12):.1f}%')")
      echo "ZeRO-$s: $ms ms/step, $toks tokens/s, MFU $mfu of $ngpu x $peak TFLOP/s" | tee -a "$summary"
    else
      echo "ZeRO-$s: $ms ms/step, $toks tokens/s, MFU not computed ($gpu_name: pass --peak-tflops)" | tee -a "$summary"
    fi
    eval "ms$s=$ms"
  done
  if [ -n "${ms2:-}" ] && [ -n "${ms3:-}" ]; then
    echo "ZeRO-3 / ZeRO-2 step time: $($PY -c "print(f'{$ms3/$ms2:.3f}')") (target <= 1.03); ZeRO-2 target on 8xH100: <= 125 ms" | tee -a "$summary"
  fi
fi
echo "$fails failures (summary in $summary)"
[ $fails -eq 0 ]
