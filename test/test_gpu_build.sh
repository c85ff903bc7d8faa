#!/usr/bin/env bash
# The GPU trainer builds, and behaves, on a machine without a GPU:
#   - `make train_gpt` (nvcc, sm_80 + sm_90, -Werror for nvcc and the host compiler) succeeds
#     and prints no warning at all;
#   - every shared header compiles on its own as CUDA C++ (trainer.h and model.h are compiled through
#     train_gpt.cu: it needs the including trainer's definitions);
#   - the binary needs no GPU for what needs none: --help, option errors (the same line as the
#     CPU trainer), --plan (the same table); and without a usable GPU a run fails at once with
#     one line naming the CUDA error (no hang).
# Skips (exit 77) only when nvcc is absent. Running on a GPU: test/gpu/run_gpu_checks.sh.
set -u
cd "$(dirname "$0")/.." || exit 1
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
if [ ! -x "$NVCC" ]; then
  echo "nvcc not found at $NVCC (set CUDA_HOME or NVCC): the GPU trainer was not built"
  exit 77
fi
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
d=test/out/gpu_build
rm -rf "$d"; mkdir -p "$d"

echo "== make train_gpt (sm_80 + sm_90, no warnings)"
start=$(date +%s)
rm -f train_gpt
if make --no-print-directory train_gpt >"$d/build.log" 2>&1; then
  echo "ok   built in $(( $(date +%s) - start )) s"
  # -Werror turns warnings into errors, but nvcc's driver prints some of its own that are not
  # ("nvcc warning : ..."): any warning line is a failure too (gcc "warning:", cudafe "warning #").
  if grep -iE 'warning ?[:#]' "$d/build.log"; then fail "the build printed warnings"; fi
else
  cat "$d/build.log"; fail "make train_gpt"
fi

echo "== every shared header compiles alone as CUDA C++"
for h in *.h; do
  case "$h" in trainer.h|model.h) continue ;; esac # need the including trainer's GPT2, kernels and functions
  printf '#include "%s"\n' "$h" >"$d/hdr_$h.cu"
  if "$NVCC" -std=c++17 -D_GNU_SOURCE -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -I. \
       -c "$d/hdr_$h.cu" -o "$d/hdr_$h.o" >"$d/hdr_$h.log" 2>&1; then
    echo "ok   $h"
  else
    cat "$d/hdr_$h.log"; fail "$h as CUDA C++"
  fi
done

if [ -x train_gpt ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  echo "== no GPU needed: --help, option errors, --plan"
  if timeout 60 ./train_gpt --help >"$d/help.txt" 2>&1 && grep -q "^usage:" "$d/help.txt"; then echo "ok   --help"
  else cat "$d/help.txt"; fail "--help"; fi
  [ -x train_gpt_cpu ] || make --no-print-directory train_gpt_cpu >/dev/null 2>&1
  for args in "--bogus" "--zero-stage 7" "--batch 0"; do
    # shellcheck disable=SC2086
    timeout 60 ./train_gpt $args >"$d/err_gpu.txt" 2>&1; rg=$?
    # shellcheck disable=SC2086
    timeout 60 ./train_gpt_cpu $args >"$d/err_cpu.txt" 2>&1; rc=$?
    if [ $rg -ne 0 ] && [ $rg -eq $rc ] && diff -q "$d/err_gpu.txt" "$d/err_cpu.txt" >/dev/null; then
      echo "ok   '$args' fails as the CPU trainer does: $(head -n 1 "$d/err_gpu.txt")"
    else
      echo "gpu (rc $rg):"; cat "$d/err_gpu.txt"; echo "cpu (rc $rc):"; cat "$d/err_cpu.txt"
      fail "'$args' differs from the CPU trainer"
    fi
  done
  if timeout 60 ./train_gpt --plan --model d12 --zero-stage 3 --world 8 >"$d/plan_gpu.txt" 2>&1 &&
     timeout 60 ./train_gpt_cpu --plan --model d12 --zero-stage 3 --world 8 >"$d/plan_cpu.txt" 2>&1 &&
     diff "$d/plan_gpu.txt" "$d/plan_cpu.txt"; then echo "ok   --plan prints the CPU trainer's table"
  else cat "$d/plan_gpu.txt"; fail "--plan"; fi

  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== a GPU is present: test/gpu/run_gpu_checks.sh runs the GPU checks (not part of this suite)"
  else
    echo "== no usable GPU: a training run fails at once, naming the CUDA error"
    timeout 120 ./train_gpt --model d12 --steps 1 >"$d/nogpu.txt" 2>&1; rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: rank 0: cuda" "$d/nogpu.txt"; then
      echo "ok   $(grep -m1 '^error:' "$d/nogpu.txt")"
    else
      cat "$d/nogpu.txt"; fail "run without a GPU (rc $rc)"
    fi
  fi
fi

echo "$fails failures"
[ $fails -eq 0 ]
