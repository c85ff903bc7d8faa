#!/usr/bin/env bash
# One prepared session on a lent GPU (issue: the GPU trainer's speed with its evidence committed).
# A GPU machine comes rarely, for minutes, bare: nothing is compiled there. So the work is split:
#
#   scripts/gpu_session.sh pack [--base COMMIT]     (make gpu_pack; on the CPU machine)
#       builds train_gpt_{bf16,fp16,fp32} for sm_90 (GPU_ARCHS overrides), train_gpt_bf16_flash and
#       train_gpt_bf16_mm (the ATTENTION=flash and matmul builds, benchmarked and checked beside
#       the default, flash2), the CPU trainer for
#       any x86-64-v3 host (the oracle of the checks), and with --base the bf16 trainer of another
#       commit (the same runs, before and after, on the same card), test/gpu/bench_flash2 (the
#       attention kernels alone) and, with VARIANTS="NAME=FLAG,FLAG ...", the bf16 trainer and that
#       benchmark again per variant (train_gpt_bf16_vNAME: candidates in step 2; by default the
#       compile-time switches not yet timed, docs/gpu.md); gathers the shared libraries
#       that a bare CUDA image lacks (OpenMPI with its components and help files, cJSON, OpenBLAS);
#       writes them all, with the commit, into gpu_pack/pack.tar.gz (ignored by git; ~25 MB).
#   scripts/gpu_session.sh run [--out DIR] [--budget SEC]   (make gpu_session; on the GPU machine)
#       unpacks the pack and, within SEC seconds (default 480), in this order:
#         1. the card's facts and its measured ceilings (a device-to-device copy and an 8192^3
#            bf16 matmul through PyTorch, when python3 has it);
#         2. bench_flash2 of each build (errors against fp32, time per call; with NCU=1 first Nsight
#            Compute's counters for its three flash2 kernels at d12's shape); the first benchmark:
#            d12, T=1024, B=16, 524,288 tokens per step, ZeRO-2, with
#            --profile-kernels (the per-kernel table), the same with ATTENTION=matmul, and the
#            --base binary the same way;
#         3. the checks (test/gpu/run_gpu_checks.sh, sections 1-3 and 5, the CPU trainer of the
#            pack as the oracle): GPU vs CPU loss and gradients in fp32, bf16, fp16 and at head
#            sizes 64 and 128; ZeRO 0-3; recompute and cpu_checkpointing bit-identical; offload pageable,
#            pinned, NVMe;
#         4. with the fastest attention build of 2: d12 at ZeRO-1/2/3 (B=16), d48 at B=4 (65,536
#            tokens per step); d12 at ZeRO-2 with the optimizer offloaded (--offload-ratio 1, 0.5,
#            0: Twin-Flow), with the GPU's idle share of the update (1 - its update kernels' time /
#            optim_ms); then d12 at B=32 and 64 at ZeRO-1/2/3, d24; last, the delayed parameter
#            update (its host part during the next forward and backward): d12 as in 4b, then the
#            6.65B shape (L=32, C=4096, B=1, T=1024) when the budget leaves time, each with the
#            GPU's idle fraction of the step (gpu_idle_fraction: 1 - its kernels' time / the step's);
#       each run under a timeout from what is left of the budget, so that a slow card still
#       leaves a complete summary. DIR (default docs/gpu-runs/DATE-COMMIT) receives summary.md,
#       summary.json (commit, device, checks_passed, checks_failed, ceilings, runs: one object
#       per configuration with model, seq_len, batch, zero_stage, tokens_per_s, mfu, ...; the
#       kernel profile) and logs/ (a few MB): commit it as it is.
#   EMULATED=1 (both verbs) does the same on the CUDA emulator with tiny shapes and the checks'
#   QUICK set: what test/test_gpu_session.sh runs in the suite, so a GPU session never finds the
#   script broken.
# MFU counts 6 x parameters + 12 x layers x channels x T FLOPs per token (llm.c's, PaLM's
# appendix B), against the datasheet's dense bf16 peak (989 TFLOP/s for the H100 and H200 SXM);
# the summary also gives each run against the matmul ceiling measured on the card.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
verb=${1:-}; shift || true
emulated=${EMULATED:-0}
pack_dir=${PACK_DIR:-gpu_pack} # PACK_DIR: another place (the suite's test uses its scratch directory)

pack() {
  local base=""
  while [ $# -gt 0 ]; do
    case "$1" in --base) base=$2; shift 2 ;; *) echo "gpu_session pack: unknown option $1"; exit 2 ;; esac
  done
  local commit; commit=$(git rev-parse --short HEAD)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit+dirty"
  [ -n "$base" ] && { base=$(git rev-parse --short "$base") || exit 1; }
  local st=$pack_dir/stage
  rm -rf "$st"; mkdir -p "$st/bin" "$st/lib"
  if [ "$emulated" = 1 ]; then
    make -s test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_fp16 test/bin/train_gpt_emu_fp32 test/bin/train_gpt_emu_bf16_mm \
      test/bin/train_gpt_emu_bf16_flash train_gpt_cpu || { echo "gpu_session pack: build failed"; exit 1; }
    for p in bf16 fp16 fp32 bf16_mm bf16_flash; do cp test/bin/train_gpt_emu_$p "$st/bin/train_gpt_$p"; done
    cp train_gpt_cpu "$st/bin/train_gpt_cpu"
    [ -n "$base" ] && cp test/bin/train_gpt_emu_bf16 "$st/bin/base_bf16" # the emulated run only exercises the path
  else
    local archs=${GPU_ARCHS:-"-gencode arch=compute_90,code=sm_90"}
    for p in bf16 fp16 fp32 bf16_mm bf16_flash; do
      rm -f train_gpt_$p
      make -s train_gpt_$p GPU_ARCHS="$archs" || { echo "gpu_session pack: build of train_gpt_$p failed"; exit 1; }
      cp train_gpt_$p "$st/bin/"
    done
    # the attention kernels alone (test/gpu/bench_flash2.cu: errors against fp32, time per call),
    # and VARIANTS="NAME=NVCC-FLAGS ...": the bf16 trainer and that benchmark built with those flags
    # too (train_gpt_bf16_vNAME, bench_flash2_vNAME: say -DF2_MINB_DQ=4), candidates to time.
    # Unset, the switches still to time (docs/gpu.md, "Variants"); VARIANTS="" builds none.
    local variants=${VARIANTS-"q8=-DF2_QWARPS=8 ds=-DF2_DS_STORE gelu=-DGPU_GELU_FAST rln=-DGPU_FUSED_RESIDUAL_LN
      all=-DF2_QWARPS=8,-DF2_DS_STORE,-DGPU_GELU_FAST,-DGPU_FUSED_RESIDUAL_LN"}
    rm -f test/bin/bench_flash2
    make -s test/bin/bench_flash2 GPU_ARCHS="$archs" || { echo "gpu_session pack: build of bench_flash2 failed"; exit 1; }
    cp test/bin/bench_flash2 "$st/bin/"
    local v
    for v in $variants; do
      local vn=${v%%=*} vf=${v#*=}
      vf=${vf//,/ } # flags within a variant are separated by commas
      rm -f train_gpt_bf16 test/bin/bench_flash2
      make -s train_gpt_bf16 test/bin/bench_flash2 GPU_ARCHS="$archs $vf" || { echo "gpu_session pack: build of variant $vn failed"; exit 1; }
      cp train_gpt_bf16 "$st/bin/train_gpt_bf16_v$vn"
      cp test/bin/bench_flash2 "$st/bin/bench_flash2_v$vn"
      echo "$vn $vf" >> "$st/VARIANTS"
    done
    [ -n "$variants" ] && { rm -f train_gpt_bf16 test/bin/bench_flash2; make -s train_gpt_bf16 GPU_ARCHS="$archs"; }
    # the oracle, for a host that may not be this one's CPU
    make -s .blas_dir
    mpicc -std=c11 -D_GNU_SOURCE -O3 -march=x86-64-v3 -fno-math-errno -fopenmp -Wall -Wextra -Werror -I. train_gpt_cpu.c \
      -o "$st/bin/train_gpt_cpu" -lopenblas -lcjson -lm || { echo "gpu_session pack: CPU trainer build failed"; exit 1; }
    if [ -n "$base" ]; then # the same bf16 trainer at another commit, built from a worktree of it
      local wt; wt=$(mktemp -d /tmp/zeroc-base-XXXXXX)
      git worktree add -q --detach "$wt" "$base" || { echo "gpu_session pack: no commit $base"; exit 1; }
      (cd "$wt" && make -s train_gpt_bf16 GPU_ARCHS="$archs") || { echo "gpu_session pack: build at $base failed"; exit 1; }
      cp "$wt/train_gpt_bf16" "$st/bin/base_bf16"
      git worktree remove --force "$wt"
    fi
    # what a bare CUDA image lacks: every library the binaries and OpenMPI's components need,
    # except the C runtime and CUDA's own (cuBLASLt, cudart, NCCL: the machine's)
    local libs; libs=$( (for f in "$st"/bin/* /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do ldd "$f"; done) |
      awk '/=> \//{print $3}' | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|libcu|libnccl|libnvidia')
    for l in $libs; do cp -L "$l" "$st/lib/"; done
    # OpenBLAS by the name the CPU trainer asks for
    cp -L "$(ldd "$st/bin/train_gpt_cpu" | awk '/libopenblas/{print $3}')" "$st/lib/libopenblas.so.0"
    cp -r /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 "$st/lib/openmpi3"
    mkdir -p "$st/share"; cp -r /usr/share/openmpi "$st/share/openmpi"
  fi
  printf 'commit=%s\nbase=%s\nbuilt=%s\nemulated=%s\n' "$commit" "$base" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$emulated" > "$st/PACK"
  tar -C "$st" -czf "$pack_dir/pack.tar.gz.part" . && mv -f "$pack_dir/pack.tar.gz.part" "$pack_dir/pack.tar.gz"
  rm -rf "$st"
  echo "gpu_session pack: $pack_dir/pack.tar.gz ($(du -h "$pack_dir/pack.tar.gz" | cut -f1)), commit $commit${base:+, base $base}"
}

run() {
  local out="" budget=480
  while [ $# -gt 0 ]; do
    case "$1" in --out) out=$2; shift 2 ;; --budget) budget=$2; shift 2 ;; *) echo "gpu_session run: unknown option $1"; exit 2 ;; esac
  done
  local t_start; t_start=$(date +%s)
  PY=${PYTHON:-python3} # with numpy (and PyTorch for the ceilings, on the GPU machine)
  left() { echo $((budget - ($(date +%s) - t_start))); }
  [ -f "$pack_dir/pack.tar.gz" ] || { echo "gpu_session run: no $pack_dir/pack.tar.gz: run 'make gpu_pack' on the CPU machine first"; exit 1; }
  P=$(mktemp -d /tmp/zeroc-pack-XXXXXX)
  tar -C "$P" -xzf "$pack_dir/pack.tar.gz" || { echo "gpu_session run: the pack does not unpack"; exit 1; }
  # shellcheck disable=SC1090,SC1091
  . "$P/PACK"
  local date; date=$(date -u +%Y-%m-%d)
  out=${out:-docs/gpu-runs/$date-$commit}
  rm -rf "$out"; mkdir -p "$out/logs"
  local L=$out/logs
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if [ "$emulated" != 1 ]; then
    # the pack's OpenMPI, as a singleton (one GPU, no mpirun), its components and help files
    # found where they were unpacked; CUDA's libraries are the machine's
    local cudalibs; cudalibs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
      find /usr/local /usr/lib /usr/lib64 /opt \( -name 'libcublasLt.so.13*' -o -name 'libnccl.so.2*' -o -name 'libcudart.so.13*' \) 2>/dev/null |
      xargs -r -n1 dirname) | awk '!seen[$0]++' | tr '\n' ':')
    export LD_LIBRARY_PATH="$P/lib:${cudalibs}${LD_LIBRARY_PATH:-}"
    export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_mca_base_component_path="$P/lib/openmpi3" OPAL_PKGDATADIR="$P/share/openmpi"
    export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  fi
  local model="--model d12" T=1024 tb=524288 B=16 steps=3
  local small_model small_T=1024
  if [ "$emulated" = 1 ]; then
    # (a 1000-token vocabulary on random tokens: GPT-2's 50257 made the LM head most of each
    # emulated run; nothing the suite checks of these runs depends on it)
    $PY test/zero_check.py shard "$P/tokens.bin" 16384 1000 3
    model="--layers 2 --channels 64 --heads 2 --max-seq-len 64 --vocab-size 1000 --train-data $P/tokens.bin" T=64 tb=256 B=2 steps=2
  fi
  local fails=0
  note() { echo "$*" | tee -a "$L/session.txt"; }

  note "== 1. the card"
  local device="the CUDA emulator (CPU)" driver="" copy_gbps=null mm_tflops=null
  if [ "$emulated" != 1 ]; then
    nvidia-smi > "$L/nvidia-smi.txt" 2>&1
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv >> "$L/nvidia-smi.txt" 2>&1
    # ceilings, measured: a device-to-device copy (bytes read + written) and a bf16 matmul (random data)
    timeout 90 $PY - > "$L/ceilings.txt" 2>&1 <<'EOF'
import torch
d = torch.device("cuda")
x = torch.empty(2**30, dtype=torch.uint8, device=d); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(10):
    s.record(); y.copy_(x); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); print(f"copy_gbps {2 * x.numel() / (ts[len(ts) // 2] * 1e-3) / 1e9:.1f}")
n = 8192
a = torch.randn(n, n, device=d, dtype=torch.bfloat16); b = torch.randn(n, n, device=d, dtype=torch.bfloat16)
for _ in range(3): a @ b
ts = []
for _ in range(10):
    s.record(); a @ b; e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); print(f"matmul_tflops {2 * n**3 / (ts[len(ts) // 2] * 1e-3) / 1e12:.1f}")
EOF
    copy_gbps=$(awk '/^copy_gbps/{print $2}' "$L/ceilings.txt"); copy_gbps=${copy_gbps:-null}
    mm_tflops=$(awk '/^matmul_tflops/{print $2}' "$L/ceilings.txt"); mm_tflops=${mm_tflops:-null}
  fi
  note "device: $device${driver:+, driver $driver}; measured: copy $copy_gbps GB/s, bf16 matmul $mm_tflops TFLOP/s; commit $commit${base:+, base $base}"
  local peaks=()
  [ "$copy_gbps" != null ] && peaks=(--peak-tflops "$mm_tflops" --peak-gbps "$copy_gbps")

  # bench TAG BIN ZERO BATCH [model args and extra options...]: one benchmark run into runs.tsv
  # (at most 240 s, or BENCH_LIMIT, or what is left of the budget)
  local runs=$L/runs.tsv
  : > "$runs"
  bench() {
    local tag=$1 bin=$2 z=$3 b=$4; shift 4
    local limit; limit=$(left)
    if [ "$limit" -lt 20 ]; then note "skip $tag: the budget is spent"; return; fi
    [ "$limit" -gt "${BENCH_LIMIT:-240}" ] && limit=${BENCH_LIMIT:-240}
    timeout "$limit" "$bin" "$@" --batch "$b" --zero-stage "$z" --val-every 0 --sample-every 0 --log "$L/$tag.jsonl" \
      > "$L/$tag.log" 2>&1
    local rc=$?
    local line; line=$(grep "^average step" "$L/$tag.log")
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
      note "FAIL bench $tag (exit $rc): $(grep -m1 -i error "$L/$tag.log")"
      printf '%s\t%s\t%s\t%s\tfailed\t%s\t%s\n' "$tag" "$z" "$b" "$*" "$rc" "$(basename "$bin")" >> "$runs"; return
    fi
    local ms tok; ms=$(echo "$line" | sed 's/.*: \([0-9.]*\) ms.*/\1/'); tok=$(echo "$line" | sed 's/.*ms, \([0-9]*\) tok.*/\1/')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$z" "$b" "$*" "$ms" "$tok" "$(basename "$bin")" >> "$runs"
    note "ok   bench $tag: $ms ms/step, $tok tokens/s"
  }
  local G=$P/bin/train_gpt_bf16
  local common=(--seq-len "$T" --total-batch "$tb" --steps "$steps" --lr 1e-4 --warmup 0)

  note "== 2. the attention kernels alone, then the first benchmark, with the kernel profile, for each attention build; the fastest runs the rest"
  [ -f "$P/VARIANTS" ] && note "variants: $(tr '\n' ';' < "$P/VARIANTS")"
  # NCU=1: Nsight Compute's counters for the three flash2 kernels at d12's shape (bench_flash2's
  # first timed launches, after its 4 checks of 3 kernels each): where their time goes
  local ncu; ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  if [ "${NCU:-0}" = 1 ] && [ -n "$ncu" ] && [ -x "$P/bin/bench_flash2" ]; then
    timeout 150 "$ncu" --clock-control none --kernel-name regex:flash2 --launch-skip 12 --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
      "$P/bin/bench_flash2" > "$L/ncu_flash2.txt" 2>&1
    note "ncu flash2 (exit $?): logs/ncu_flash2.txt ($(grep -c 'flash2_' "$L/ncu_flash2.txt") lines naming the kernels)"
  fi
  local fb
  for fb in "$P"/bin/bench_flash2*; do
    [ -x "$fb" ] || continue
    local fn; fn=$(basename "$fb")
    if timeout 120 "$fb" > "$L/$fn.txt" 2>&1; then note "ok   $fn: $(grep -E 'flash2 (forward|backward)' "$L/$fn.txt" | sed 's/.*flash2 //' | tr -s ' ' | paste -sd ';')"
    else note "FAIL $fn (exit $?): $(tail -n 2 "$L/$fn.txt" | paste -sd ' ')"; fails=$((fails + 1)); fi
  done
  local v best=0
  # SESSION_VARIANTS: which attention builds to profile (default: all three; "-" names the default
  # build), to spend a short lease on the ones still in question
  for v in ${SESSION_VARIANTS:-- _flash _mm $(cd "$P/bin" && ls train_gpt_bf16_v* 2>/dev/null | sed 's/^train_gpt_bf16//')}; do
    [ "$v" = - ] && v=""
    [ -x "$P/bin/train_gpt_bf16$v" ] || continue
    bench d12_B${B}_z2${v}_profile "$P/bin/train_gpt_bf16$v" 2 "$B" $model "${common[@]}" --profile-kernels "${peaks[@]}"
    local tok; tok=$(awk -F'\t' -v t="d12_B${B}_z2${v}_profile" '$1 == t && $5 != "failed" {print int($6)}' "$runs")
    if [ -n "$tok" ] && [ "$tok" -gt "$best" ]; then best=$tok; G=$P/bin/train_gpt_bf16$v; fi
  done
  note "the grid runs $(basename "$G")"
  [ -f "$P/bin/base_bf16" ] && bench base_d12_B${B}_z2 "$P/bin/base_bf16" 2 "$B" $model "${common[@]}"

  note "== 3. the checks"
  if [ "$(left)" -gt 60 ]; then
    local quick=0 ng=1
    [ "$emulated" = 1 ] && quick=1
    timeout $(($(left) - 30)) env PYTHON="$PY" EMULATED="$emulated" NO_BUILD=1 QUICK=$quick KEEP_GRADS=0 NGPU=$ng ZERO_STEPS=2 COMMIT="$commit" \
      GPU_BIN="$P/bin/train_gpt_" CPU_BIN="$P/bin/train_gpt_cpu" OUT="$P/checks" \
      bash test/gpu/run_gpu_checks.sh --skip-bench > "$L/checks.txt" 2>&1
    local crc=$?
    [ $crc -eq 124 ] && note "FAIL the checks ran out of time"
    cp "$P/checks/summary.txt" "$L/checks_summary.txt" 2>/dev/null
    for f in "$P"/checks/cmp_*.txt "$P"/checks/rc_cmp_*.txt; do [ -f "$f" ] && cp "$f" "$L/"; done
  else note "FAIL the checks: no time left"; fi
  local cpass cfail
  cpass=$(grep -c '^ok ' "$L/checks_summary.txt" 2>/dev/null); cfail=$(grep -c '^FAIL' "$L/checks_summary.txt" 2>/dev/null)
  cpass=${cpass:-0}; cfail=${cfail:-0}
  [ "$cpass" -eq 0 ] && cfail=$((cfail + 1)) # no check ran: that is a failure too
  note "checks: $cpass passed, $cfail failed (logs/checks_summary.txt)"

  note "== 4. the grid: ZeRO-1 and 3 beside the profiled ZeRO-2, the biggest model, then 2B and 4B, d24"
  local b z
  bench d12_B${B}_z1 "$G" 1 "$B" $model "${common[@]}"
  bench d12_B${B}_z2 "$G" 2 "$B" $model "${common[@]}"
  bench d12_B${B}_z3 "$G" 3 "$B" $model "${common[@]}"
  if [ "$emulated" = 1 ]; then
    bench bigger_B1_z3 "$G" 3 1 --layers 3 --channels 64 --heads 2 --max-seq-len 64 --vocab-size 1000 --train-data "$P/tokens.bin" \
      --seq-len 64 --total-batch 128 --steps 2 --lr 1e-4
  else
    BENCH_LIMIT=150 bench d48_B4_z1 "$G" 1 4 --model d48 --seq-len 1024 --total-batch 65536 --steps 3 --lr 1e-4 --warmup 0 \
      --profile-kernels "${peaks[@]}"
  fi
  note "== 4b. offload: the optimizer on the host, all of it and half (Twin-Flow), beside none (d12_B${B}_z2)"
  local R ratios=(1 0.5 0)
  [ "$emulated" = 1 ] && ratios=(0.5) # the emulator's path through the same code, in less time
  for R in "${ratios[@]}"; do
    bench twin_d12_B${B}_z2_r$R "$G" 2 "$B" $model "${common[@]}" --offload-optimizer cpu --pin-memory --offload-ratio $R \
      --profile-kernels "${peaks[@]}"
  done

  note "== 4c. the larger batches and d24"
  local bigger=("$((2 * B))" "$((4 * B))") stages=(1 2 3)
  # the emulator's path through the same loop, in less time: one batch size, one stage (the
  # other stages' runs at B are above, and test_gpu_session checks the same identities on them)
  [ "$emulated" = 1 ] && { bigger=("$((2 * B))"); stages=(2); }
  for b in "${bigger[@]}"; do
    for z in "${stages[@]}"; do bench d12_B${b}_z$z "$G" "$z" "$b" $model "${common[@]}"; done
  done
  [ "$emulated" = 1 ] || bench d24_B16_z2 "$G" 2 16 --model d24 --seq-len 1024 --total-batch 131072 --steps 3 --lr 1e-4 --warmup 0

  note "== 4d. the delayed parameter update: the host's update during the next forward and backward (beside 4b's r1)"
  # (last, so that the runs above keep their budget; the 6.65B shape of docs/offload.md, 8.7 s a
  # step synchronous, when the budget leaves time for it)
  local dsteps=6; [ "$emulated" = 1 ] && dsteps=3
  bench delayed_d12_B${B}_z2 "$G" 2 "$B" $model "${common[@]}" --steps $dsteps --offload-optimizer cpu --pin-memory \
    --offload-delayed-update --offload-delay-warmup 1 --profile-kernels "${peaks[@]}"
  [ "$emulated" = 1 ] || BENCH_LIMIT=300 bench delayed_6p65b_B1_z2 "$G" 2 1 --layers 32 --channels 4096 --heads 32 \
    --max-seq-len 1024 --seq-len 1024 --total-batch 1024 --steps 5 --lr 1e-4 --warmup 0 --offload-optimizer cpu \
    --offload-delayed-update --offload-delay-warmup 1 --profile-kernels "${peaks[@]}"

  note "== 5. summary"
  SESSION_NAME="$date-$commit" $PY - "$out" "$commit" "$base" "$device" "$driver" "$copy_gbps" "$mm_tflops" "$cpass" "$cfail" "$emulated" <<'EOF'
import json, os, re, sys
out, commit, base, device, driver, copy_gbps, mm, cpass, cfail, emulated = sys.argv[1:]
L = os.path.join(out, "logs")
num = lambda s: None if s in ("", "null") else float(s)
copy_gbps, mm = num(copy_gbps), num(mm)
peak = 989.0  # dense bf16, H100 / H200 SXM datasheet
runs, profiles = [], {}
for line in open(os.path.join(L, "runs.tsv")):
    tag, z, b, args, ms, tok, binary = line.rstrip("\n").split("\t")
    log = open(os.path.join(L, tag + ".log")).read()
    m = re.search(r"\| parameters\s*\|\s*(\d+)", log)
    shape = re.search(r"L=(\d+) C=(\d+)", log)
    T = int(re.search(r"--seq-len (\d+)", args).group(1))
    tb = int(re.search(r"--total-batch (\d+)", args).group(1))
    model = re.search(r"--model (\w+)", args)
    r = {"tag": tag, "binary": f"{base} bf16" if tag.startswith("base") else f"{commit} {binary.replace('train_gpt_', '')}",
         "model": model.group(1) if model else "tiny",
         "seq_len": T, "batch": int(b), "total_batch": tb, "zero_stage": int(z), "options": args}
    if ms == "failed":
        r.update({"failed": True, "exit": int(tok)})
    else:
        P, Lr, C = int(m.group(1)), int(shape.group(1)), int(shape.group(2))
        fpt = 6.0 * P + 12.0 * Lr * C * T
        r.update({"ms_per_step": float(ms), "tokens_per_s": float(tok), "parameters": P, "flops_per_token": fpt,
                  "tflops": float(tok) * fpt / 1e12, "mfu": None if emulated == "1" else float(tok) * fpt / (peak * 1e12),
                  "of_measured_matmul": None if mm is None else float(tok) * fpt / (mm * 1e12)})
    for l in open(os.path.join(L, tag + ".jsonl")) if os.path.exists(os.path.join(L, tag + ".jsonl")) else []:
        if '"kernel_profile"' in l:
            profiles[tag] = json.loads(l)
    runs.append(r)
s = {"commit": commit, "base": base or None, "device": device, "driver": driver or None, "emulated": emulated == "1",
     "ceilings": {"copy_gbps": copy_gbps, "bf16_matmul_tflops": mm, "datasheet_bf16_tflops": peak},
     "checks_passed": int(cpass), "checks_failed": int(cfail), "runs": runs, "kernel_profiles": profiles}
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
md = [f"# GPU session {os.environ.get('SESSION_NAME') or os.path.basename(out)} ({device})", "",
      f"- device: {device}" + (f", driver {driver}" if driver else ""),
      f"- binaries: commit {commit} (bf16, fp16, fp32 built for sm_90 on the CPU machine)" + (f"; baseline {base}" if base else ""),
      f"- measured ceilings: device copy {copy_gbps} GB/s (read + write), bf16 matmul {mm} TFLOP/s (8192^3, random data)",
      f"- checks: {cpass} passed, {cfail} failed (logs/checks_summary.txt)", "",
      "| run | binary | model | T | B | tokens/step | ZeRO | ms/step | tokens/s | TFLOP/s | MFU (989) | of measured matmul |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in runs:
    if r.get("failed"):
        md.append(f"| {r['tag']} | {r['binary']} | {r['model']} | {r['seq_len']} | {r['batch']} | {r['total_batch']} | {r['zero_stage']} | failed (exit {r['exit']}) | | | | |")
        continue
    f = lambda x: "" if x is None else f"{100 * x:.1f}%"
    md.append(f"| {r['tag']} | {r['binary']} | {r['model']} | {r['seq_len']} | {r['batch']} | {r['total_batch']} | {r['zero_stage']} | "
              f"{r['ms_per_step']:.1f} | {r['tokens_per_s']:.0f} | {r['tflops']:.1f} | {f(r['mfu'])} | {f(r['of_measured_matmul'])} |")
for tag, p in profiles.items():
    md += ["", f"## Kernel profile: {tag} ({p['steps']} steps after the first, {p['step_ms']:.1f} ms per step)", "",
           "| kernel | calls/step | ms/step | % of step | TFLOP/s | GB/s |", "|---|---|---|---|---|---|"]
    for row in sorted(p["rows"], key=lambda x: -x["ms"]):
        t = row["ms"] * 1e-3
        md.append(f"| {row['kernel']} | {row['calls']:.1f} | {row['ms']:.3f} | {100 * row['ms'] / p['step_ms']:.1f} | "
                  f"{row['flops'] / t / 1e12 if t > 0 else 0:.1f} | {row['bytes'] / t / 1e9 if t > 0 else 0:.1f} |")
    rest = p["step_ms"] - sum(r["ms"] for r in p["rows"])
    md.append(f"| (rest of the step: collectives, host gaps) | | {rest:.3f} | {100 * rest / p['step_ms']:.1f} | | |")
# Offload and Twin-Flow: the update's wall time per step (optim_ms, after the first step) against
# the device's own update kernels in it (the kernel profile's "optimizer update" row): the GPU is
# idle for the rest of the update, while the host updates its part and the copies run.
twin = []
for r in runs:
    if not r["tag"].startswith("twin_") or r.get("failed"):
        continue
    steps = [json.loads(l) for l in open(os.path.join(L, r["tag"] + ".jsonl")) if l.startswith('{"step"')][1:]
    p = profiles.get(r["tag"])
    if not steps or not p:
        continue
    optim = sum(x["optim_ms"] for x in steps) / len(steps)
    dev = sum(row["ms"] for row in p["rows"] if row["kernel"] == "optimizer update")
    r.update({"offload_ratio": float(re.search(r"--offload-ratio (\S+)", r["options"]).group(1)), "optim_ms": optim,
              "device_update_ms": dev, "gpu_idle_in_update": max(0.0, 1.0 - dev / optim) if optim > 0 else None})
    twin.append(r)
if twin:
    json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
    md += ["", "## Offload: the GPU's idle time during the update (optimizer on the host, Twin-Flow)", "",
           "| run | offload ratio | ms/step | update ms/step | GPU update kernels ms/step | GPU idle during the update |",
           "|---|---|---|---|---|---|"]
    for r in twin:
        idle = r["gpu_idle_in_update"]
        md.append(f"| {r['tag']} | {r['offload_ratio']:g} | {r['ms_per_step']:.1f} | {r['optim_ms']:.1f} | {r['device_update_ms']:.2f} | "
                  f"{'' if idle is None else f'{100 * idle:.0f}%'} |")
# The delayed update (4d): the GPU's idle fraction of the step, from the device's own spans (the
# kernel profile: 1 - its kernels' time / the step's device time, which runs from one step's end to
# the next): the time the host's update, its copies and the host's gaps leave the GPU without work.
delayed = []
for r in runs:
    p = profiles.get(r["tag"])
    if not r["tag"].startswith("delayed_") or r.get("failed") or not p or p["step_ms"] <= 0:
        continue
    busy = sum(row["ms"] for row in p["rows"])
    r.update({"gpu_kernels_ms": busy, "profile_step_ms": p["step_ms"], "gpu_idle_fraction": 1.0 - busy / p["step_ms"]})
    delayed.append(r)
if delayed:
    json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
    md += ["", "## The delayed parameter update: the GPU's idle fraction of the step (kernel profile)", "",
           "| run | ms/step | GPU kernels ms/step | profiled step ms | GPU idle |", "|---|---|---|---|---|"]
    for r in delayed:
        md.append(f"| {r['tag']} | {r['ms_per_step']:.1f} | {r['gpu_kernels_ms']:.1f} | {r['profile_step_ms']:.1f} | "
                  f"{100 * r['gpu_idle_fraction']:.0f}% |")
# the attention kernels alone (bench_flash2 per build): its error and timing lines
fbs = sorted(f for f in os.listdir(L) if f.startswith("bench_flash2") and f.endswith(".txt"))
if fbs:
    md += ["", "## Attention kernels alone (test/gpu/bench_flash2: errors against fp32, time per call at d12's shape)", ""]
    for f in fbs:
        md += [f"{f[:-4]}:", "", "```"] + [l.rstrip() for l in open(os.path.join(L, f)) if l.strip()] + ["```", ""]
md += ["", "Checks:", "", "```"] + [l.rstrip() for l in open(os.path.join(L, "checks_summary.txt"))] + ["```"] \
    if os.path.exists(os.path.join(L, "checks_summary.txt")) else []
open(os.path.join(out, "summary.md"), "w").write("\n".join(md) + "\n")
EOF
  [ $? -eq 0 ] || { note "FAIL writing the summary"; fails=$((fails + 1)); }
  grep -q '^FAIL' "$L/session.txt" && fails=$((fails + 1))
  rm -rf "$P"
  note "gpu_session: $out ($(du -sh "$out" | cut -f1)); $cpass checks passed, $cfail failed; $(($(date +%s) - t_start)) s"
  [ "$cfail" -eq 0 ] && [ $fails -eq 0 ]
}

case "$verb" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  *) echo "usage: scripts/gpu_session.sh pack [--base COMMIT] | run [--out DIR] [--budget SEC]   (EMULATED=1: on the CUDA emulator)"; exit 2 ;;
esac
