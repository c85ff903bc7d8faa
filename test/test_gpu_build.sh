#!/usr/bin/env bash
# The GPU trainer builds, and behaves, on a machine without a GPU:
#   - `make train_gpt` (nvcc, sm_80 + sm_90, -Werror for nvcc and the host compiler) builds the
#     default precision, bf16, and prints no warning at all; the other two precisions build the
#     same way under their own names (make train_gpt_fp16 train_gpt_fp32: both architectures,
#     about as long as the first build each), so that train_gpt itself is never another precision;
#   - every shared header compiles on its own as CUDA C++ (trainer.h and model.h are compiled through
#     train_gpt.cu: it needs the including trainer's definitions);
#   - each binary needs no GPU for what needs none: --help (its default precision is the one it
#     was built for), --precision refusing the other two with one line, option errors (the same
#     line as the CPU trainer), --plan (the CPU trainer's model states and buffers, its own
#     activations, computed here independently, with and without recompute, and no workspace);
#     and without a usable GPU a run fails at once with one line naming the CUDA error and what
#     to run instead (no hang).
# Skips (exit 77) only when nvcc is absent. Running on a GPU: test/gpu/run_gpu_checks.sh.
set -u
cd "$(dirname "$0")/.." || exit 1
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
PY=${PYTHON:-python3}
if [ ! -x "$NVCC" ]; then
  echo "nvcc not found at $NVCC (set CUDA_HOME or NVCC): the GPU trainer was not built"
  exit 77
fi
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
. test/lib.sh; new_scratch gpu_build

# -Werror turns warnings into errors, but nvcc's driver prints some of its own that are not
# ("nvcc warning : ..."): any warning line is a failure too (gcc "warning:", cudafe "warning #").
# The three trainers come from one make, two at a time: nvcc's host compile runs on one thread
# (its two device compiles on two, --threads 2), so a 2-core machine finishes them sooner side
# by side; the log is one, and a warning in it is any build's failure.
build() { # build TARGET...
  local start; start=$(date +%s)
  rm -f "$@"
  if env -u PRECISION make --no-print-directory -j2 "$@" >"$d/build.log" 2>&1; then
    echo "ok   $* built in $(( $(date +%s) - start )) s"
    if grep -iE 'warning ?[:#]' "$d/build.log"; then fail "$*: the build printed warnings"; fi
  else
    cat "$d/build.log"; fail "make $*"
  fi
}
echo "== make train_gpt (bf16, the default; sm_80 + sm_90, no warnings), train_gpt_fp16 train_gpt_fp32 (the other precisions, under their own names)"
build train_gpt train_gpt_fp16 train_gpt_fp32

echo "== every shared header compiles alone as CUDA C++"
# (two compiles at a time, for the same reason; each its own file, log and exit status)
hdr() { # HEADER
  local n=${1//\//_}
  printf '#include "%s"\n' "$1" >"$d/hdr_$n.cu"
  # (with MPI's include path, as the trainer's build: run/job.h speaks MPI)
  "$NVCC" -std=c++17 -D_GNU_SOURCE -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -I. $(mpicc -showme:compile) \
    -c "$d/hdr_$n.cu" -o "$d/hdr_$n.o" >"$d/hdr_$n.log" 2>&1
  echo $? >"$d/hdr_$n.rc"
}
hdrs=()
for h in *.h core/*.h zero/*.h run/*.h data/*.h gpu/layout.h; do
  case "$h" in run/trainer.h|core/model.h) continue ;; esac # need the including trainer's GPT2, kernels and functions
  hdrs+=("$h")
  hdr "$h" &
  [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n
done
wait
for h in "${hdrs[@]}"; do
  n=${h//\//_}
  if [ "$(cat "$d/hdr_$n.rc" 2>/dev/null)" = 0 ]; then echo "ok   $h"
  else cat "$d/hdr_$n.log"; fail "$h as CUDA C++"; fi
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The ~50 runs below are MPI singletons (no mpirun): without the orted daemon OpenMPI would start
# beside each (0.3 s, 0.2 CPU s); none spawns processes.
export OMPI_MCA_ess_singleton_isolated=1
[ -x train_gpt_cpu ] || make --no-print-directory train_gpt_cpu >/dev/null 2>&1

# The GPU trainer's activation bytes, computed here from the list in gpt2.h's order: every
# tensor at the element size but the fp32 LayerNorm statistics and losses, each tensor starting
# on a 256-byte boundary, the per-layer ones for the layers the recompute keeps them (none: all
# L; selective: qkv, residual2, fch, residual3 all L, the rest 1; full every K: residual3 for the
# ceil(L/K) segments' outputs and K - 1 more, the rest K; cpu_checkpointing: two of the segments'
# outputs on the device, the others but the last two in host memory); with flash attention
# (bf16/fp16, head size a multiple of 16 up to 64, and 128 in the default ATTENTION=flash2 build:
# flash2's kernels take 64 and 128; none in ATTENTION=matmul) the attention keeps fp32
# log-sum-exp rows (B,NH,T) per layer instead of (B,NH,T,T). Prints the device bytes and the host
# bytes.
gpu_activations() { # L C NH Vp B T elem [recompute K host]
  ATTENTION=${ATTENTION:-flash2} "$PY" - "$@" <<'EOF'
import os, sys
L, C, NH, Vp, B, T, e = map(int, sys.argv[1:8])
mode, K, host = (sys.argv[8], int(sys.argv[9]), int(sys.argv[10])) if len(sys.argv) > 8 else ("none", 1, 0)
BT = B * T
segments = -(-L // K)
def layers(name):  # how many layers' worth of a per-layer tensor the device holds
    if mode == "none": return L
    if mode == "selective": return L if name in ("qkv", "residual2", "fch", "residual3") else 1
    if name != "residual3": return K
    return (min(2, segments) if host else segments) + K - 1
hs, attention = C // NH, os.environ["ATTENTION"]  # (the build's: make's default, or what the caller set)
flash = e == 2 and attention != "matmul" and (hs % 16 == 0 and hs <= 64 or attention == "flash2" and hs == 128)
att = (B * NH * T, 1) if flash else (B * NH * T * T, 0)  # flash: fp32 log-sum-exp rows, else the probabilities
per_layer = [("ln1", BT * C, 0), ("ln1_mean", BT, 1), ("ln1_rstd", BT, 1), ("qkv", BT * 3 * C, 0), ("atty", BT * C, 0),
             ("att",) + att, ("residual2", BT * C, 0), ("ln2", BT * C, 0), ("ln2_mean", BT, 1), ("ln2_rstd", BT, 1),
             ("fch", BT * 4 * C, 0), ("fch_gelu", BT * 4 * C, 0), ("residual3", BT * C, 0)]
tensors = [(BT * C, 0)] + [(n * layers(name), f32) for name, n, f32 in per_layer] + [  # (elements, fp32?)
    (BT * C, 0), (BT, 1), (BT, 1), (BT * Vp, 0), (BT, 1), (BT * C, 0), (BT * C, 0), (BT * 4 * C, 0), (BT * 3 * C, 0)]
at = 0
for n, f32 in tensors:
    at = (at + 255) // 256 * 256 + n * (4 if f32 else e)
print(at, max(0, segments - 2) * BT * C * e if host and mode == "full" else 0)
EOF
}

for p in bf16 fp16 fp32; do
  bin=./train_gpt_$p; [ $p = bf16 ] && bin=./train_gpt
  [ -x "$bin" ] || continue
  echo "== $bin: no GPU needed: --help, --precision, option errors, --plan"
  if timeout 60 "$bin" --help >"$d/help_$p.txt" 2>&1 && grep -q "^usage:" "$d/help_$p.txt" &&
     grep -q -- "--precision P .*(default $p)" "$d/help_$p.txt"; then echo "ok   --help (default precision $p)"
  else cat "$d/help_$p.txt"; fail "$bin --help"; fi
  if timeout 60 "$bin" --precision $p --help >/dev/null 2>&1; then echo "ok   --precision $p accepted"
  else fail "$bin --precision $p"; fi
  for q in fp32 bf16 fp16; do
    [ $q = $p ] && continue
    timeout 60 "$bin" --precision $q --steps 1 >"$d/refuse_${p}_$q.txt" 2>&1; rc=$?
    want="error: --precision $q: this binary was built for $p (make train_gpt PRECISION=$(echo $q | tr a-z A-Z))"
    if [ $rc -ne 0 ] && [ "$(cat "$d/refuse_${p}_$q.txt")" = "$want" ]; then echo "ok   --precision $q refused: $want"
    else cat "$d/refuse_${p}_$q.txt"; fail "$bin --precision $q (rc $rc)"; fi
  done
  if [ $p = bf16 ]; then # option errors read as the CPU trainer's (the precision lines aside)
    for args in "--bogus" "--zero-stage 7" "--batch 0"; do
      # shellcheck disable=SC2086
      timeout 60 "$bin" $args >"$d/err_gpu.txt" 2>&1; rg=$?
      # shellcheck disable=SC2086
      timeout 60 ./train_gpt_cpu $args >"$d/err_cpu.txt" 2>&1; rc=$?
      if [ $rg -ne 0 ] && [ $rg -eq $rc ] && diff -q "$d/err_gpu.txt" "$d/err_cpu.txt" >/dev/null; then
        echo "ok   '$args' fails as the CPU trainer does: $(head -n 1 "$d/err_gpu.txt")"
      else
        echo "gpu (rc $rg):"; cat "$d/err_gpu.txt"; echo "cpu (rc $rc):"; cat "$d/err_cpu.txt"
        fail "'$args' differs from the CPU trainer"
      fi
    done
    if "$PY" test/planner_check.py cli "$bin" --plan >"$d/plan_cli.txt" 2>&1; then echo "ok   --plan's command line"
    else cat "$d/plan_cli.txt"; fail "$bin --plan command line"; fi
  fi
  # --plan: model states and buffers as the CPU trainer's planner says; activations this
  # trainer's own; no workspace. d12 at ZeRO-3 on 8 ranks, a small odd shape on 1, and head size
  # 128 (flash2's second head size).
  elem=2; [ $p = fp32 ] && elem=4
  for shape in "d12 none 1 0 --model d12 --zero-stage 3 --world 8 --batch 4 --seq-len 64" \
               "odd none 1 0 --layers 3 --channels 48 --heads 3 --vocab-size 300 --max-seq-len 16 --seq-len 7 --batch 3" \
               "d12_full_host full 1 1 --model d12 --batch 4 --seq-len 64 --recompute full --cpu-checkpointing" \
               "odd_full3 full 3 0 --layers 5 --channels 48 --heads 3 --vocab-size 300 --max-seq-len 16 --seq-len 7 --batch 3
                --recompute full --recompute-every 3" \
               "odd_selective selective 1 0 --layers 3 --channels 48 --heads 3 --vocab-size 300 --max-seq-len 16 --seq-len 7
                --batch 3 --recompute selective" \
               "hs128 none 1 0 --layers 2 --channels 256 --heads 2 --vocab-size 300 --max-seq-len 16 --seq-len 7
                --batch 3"; do
    set -- $shape; name=$1 rc="$2 $3 $4"; shift 4
    # shellcheck disable=SC2068
    if timeout 60 "$bin" --plan --precision $p $@ --json >"$d/plan_gpu_${p}_$name.json" 2>&1 &&
       timeout 60 ./train_gpt_cpu --plan --precision $p $@ --json >"$d/plan_cpu_${p}_$name.json" 2>&1; then
      case $name in d12*) want=$(gpu_activations 12 768 12 50304 4 64 $elem $rc) ;;
                    odd_full3) want=$(gpu_activations 5 48 3 384 3 7 $elem $rc) ;;
                    hs128) want=$(gpu_activations 2 256 2 384 3 7 $elem $rc) ;;
                    *) want=$(gpu_activations 3 48 3 384 3 7 $elem $rc) ;; esac
      # shellcheck disable=SC2086
      if "$PY" - "$d/plan_gpu_${p}_$name.json" "$d/plan_cpu_${p}_$name.json" $want <<'EOF'; then
import json, sys
g, c, want, host = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
bad = [k for k in ("params", "grads", "master", "adam_m", "adam_v", "buffers", "model_states", "num_params") if g[k] != c[k]]
if bad: print("differ from the CPU plan:", bad)
if g["activations"] != want: print(f"activations {g['activations']} != {want} computed independently"); bad.append(1)
if g["host_activations"] != host or g["host"] != host: print(f"host checkpoints {g['host_activations']}, host {g['host']} != {host}"); bad.append(1)
if g["workspace"] != 0: print(f"workspace {g['workspace']} != 0"); bad.append(1)
if g["device"] != g["model_states"] + g["buffers"] + g["activations"] or g["total"] != g["device"] + host:
    print("device/total is not the sum"); bad.append(1)
print(f"activations {g['activations']} (CPU trainer {c['activations']}), host {host}, workspace 0, the rest as the CPU trainer's")
sys.exit(1 if bad else 0)
EOF
        echo "ok   --plan $name"
      else fail "$bin --plan $name"; fi
    else cat "$d/plan_gpu_${p}_$name.json" "$d/plan_cpu_${p}_$name.json"; fail "$bin --plan $name"; fi
  done
  if timeout 60 "$bin" --plan --model d12 --json | grep -q "\"precision\":\"$p\""; then echo "ok   --plan defaults to $p"
  else fail "$bin --plan's default precision"; fi
done

if [ -x train_gpt ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== a GPU is present: test/gpu/run_gpu_checks.sh runs the GPU checks (not part of this suite)"
  else
    echo "== no usable GPU: a training run fails at once, naming the CUDA error and what to run instead"
    timeout 120 ./train_gpt --model d12 --steps 1 >"$d/nogpu.txt" 2>&1; rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c . "$d/nogpu.txt")" -eq 1 ] &&
       grep -q "^error: no usable GPU (rank 0: cudaGetDeviceCount: .*): .* run the CPU trainer (make train_gpt_cpu" "$d/nogpu.txt"; then
      echo "ok   $(grep -m1 '^error:' "$d/nogpu.txt")"
    else
      cat "$d/nogpu.txt"; fail "run without a GPU (rc $rc)"
    fi
  fi
fi

echo "$fails failures"
[ $fails -eq 0 ]
