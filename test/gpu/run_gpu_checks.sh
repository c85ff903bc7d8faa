#!/usr/bin/env bash
# The GPU checks, for a machine with NVIDIA GPUs (`make gpu_check`, or run directly). The GPU
# trainer's precision is fixed when it is built, so each check names its binary: train_gpt_bf16
# (what `make train_gpt` builds by default), train_gpt_fp16, train_gpt_fp32 (make builds them).
#   1. GPU vs CPU, in each precision: the same checkpoint and batch through train_gpt_<p> and
#      train_gpt_cpu --precision <p>; the first step's loss and every tensor of the gradient
#      (--dump-grads) must agree within that precision's tolerances (below; compare_grads.py).
#      fp16 runs at a static loss scale (256), the same on both sides, so that the first step
#      cannot overflow and both dumps hold the same scaled gradient. Two shapes, so that both
#      attention batching paths (B <= NH and B > NH) run.
#   2. ZeRO stage equivalence on the GPUs present (mpirun -np NGPU), fp32 and bf16: stages 0-3,
#      with gradient accumulation, give the same losses step by step (fp32: up to summation
#      order; bf16: within its tolerance, as the stages round gradient sums at different points).
#   3. Activation recompute (--recompute full, full every 2, selective, full with cpu_checkpointing
#      every 1 and 2: 4 and 1 of the 6 layers' checkpoints in host memory), fp32, bf16, fp16, one
#      GPU: every step's loss and the first step's gradient
#      equal the run without recompute bit for bit, the memory table says plan = allocated (host
#      checkpoints included), and full recompute's loss and gradient agree with the CPU trainer's
#      within the tolerances of 1; on NGPU GPUs, ZeRO-3, bf16, two micro-steps: the losses equal
#      the run without recompute and the all-gather bytes per step follow the recompute's
#      schedule (test/zero_check.py gathers).
#   5. Offload (bf16, ZeRO-1 and ZeRO-3, one GPU): the optimizer on the host in pageable and in
#      pinned memory, on NVMe (a directory under the results), and at ZeRO-3 the parameters on the
#      host too: every step's loss, learning rate and gradient norm equal the run without offload,
#      bit for bit (the host update is the device kernel's arithmetic), and plan = allocated.
#   4. Benchmark, bf16: GPT-2 124M (d12), T=1024, 524,288 tokens per step, ZeRO-2 and ZeRO-3 (and
#      ZeRO-2 with --recompute full, with and without --cpu-checkpointing: the step time's ratio):
#      ms/step, tokens/s and MFU. MFU needs the GPU's peak: H100 (989 TFLOP/s dense bf16) is
#      known; any other GPU needs --peak-tflops, otherwise no MFU is printed.
# Tolerances (relative; loss: to max(1, |loss|); gradients: compare_grads.py's relative L2 error
# per tensor): fp32 1e-5 / 1e-3 (summation order only). The 16-bit ones are first estimates, not
# yet calibrated on a GPU: the two trainers round at different points (the GPU keeps logits,
# attention scores, the residual stream and the activation gradients in 16 bits, the CPU in
# fp32), so they differ by a few 16-bit ulps compounded through the layers: bf16 (8-bit
# significand) 5e-3 / 5e-2, fp16 (11-bit) 2e-3 / 2e-2. The summary prints the worst errors
# measured, which should replace these estimates.
# Section 1 also runs bf16 at head size 64 (GPT-2's) on a checkpoint of its own (2 heads of 64),
# at head size 128 (1 head of 128; not with QUICK=1), and the ATTENTION=matmul and ATTENTION=flash
# builds (GPU_BIN's bf16_mm, bf16_flash) where there are (the default build, ATTENTION=flash2, runs
# gpu/flash2.cuh at head sizes 64 and 128 and the WMMA kernels below).
# Environment: CPU_BIN (default ./train_gpt_cpu) and GPU_BIN name the binaries; NO_BUILD=1 runs
# them as they are (scripts/gpu_session.sh: built on another machine); QUICK=1 runs one case of
# each kind (bf16: one shape and head size 64; stages 0 and 3; recompute with cpu_checkpointing,
# selective at ZeRO-3; offload pinned and to NVMe, and at ZeRO-3), for
# the emulated session in the suite. A run on one GPU runs the binary directly (an MPI singleton),
# not through mpirun.
# Options: --peak-tflops X   --batch B (benchmark micro-batch per GPU, default 16)
#          --steps N (benchmark steps, default 10)   --tol REL (fp32 gradient tolerance, default 1e-3)
#          --skip-bench   --only-bench
# Results go to test/out/gpu_checks/ (summary.txt is what to paste into the README).
# SECTIONS="1 2" (default "1 2 3 5") runs only those checks: test_gpu_emu.sh runs 1 on the emulator,
# test_gpu_emu_memory.sh 2, 3 and 5 (side by side in the suite). On a GPU, 2 needs 1 (its checkpoint).
# EMULATED=1 runs the checks without a GPU, on the CUDA emulator (test/cuda_emu/; what
# test/test_gpu_emu.sh does): GPU_BIN names the binaries (default ./train_gpt_, then the
# precision), NGPU the number of emulated GPUs (ranks, default 2), ZERO_STEPS the steps of each
# stage-equivalence run (default 4; 2 keeps the emulated suite short), no benchmark, results in
# test/out/gpu_checks_emu/ (or OUT); section 2 then runs a smaller model of its own (2 layers,
# 64 channels, a 1024-token vocabulary, on random tokens; B=2, T=32) to keep the emulated runs
# short; section 1 a 1000-token vocabulary on random tokens (its runs' LM head, GPT-2's 50257,
# was most of their time). Numbers from the emulator are no GPU's: it computes the kernels' and cuBLASLt's
# arithmetic on the CPU, with its own summation orders.
set -u
cd "$(dirname "$0")/../.." || exit 1
peak="" bench_B=16 bench_steps=10 tol=1e-3 do_bench=1 do_checks=1
sections=" ${SECTIONS:-1 2 3 5} "
has() { [[ "$sections" == *" $1 "* ]]; } # has N: section N was asked for
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
gpu=${GPU_BIN:-./train_gpt_}
cpu=${CPU_BIN:-./train_gpt_cpu}
quick=${QUICK:-0}
if [ "${EMULATED:-0}" = 1 ]; then
  ngpu=${NGPU:-2} gpu_name="the CUDA emulator (CPU)" do_bench=0
  d=${OUT:-test/out/gpu_checks_emu}
  [ "${NO_BUILD:-0}" = 1 ] || make -s train_gpt_cpu || { echo "FAIL: build"; exit 1; }
else
  command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here (nvidia-smi -L failed)"; exit 77; }
  ngpu=$(nvidia-smi -L | wc -l)
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  d=${OUT:-test/out/gpu_checks}
  has 2 && ! has 1 && { echo "SECTIONS=$SECTIONS: on a GPU, section 2 starts from section 1's checkpoint"; exit 2; }
  [ "${NO_BUILD:-0}" = 1 ] || make -s train_gpt_bf16 train_gpt_fp16 train_gpt_fp32 train_gpt_cpu || { echo "FAIL: build"; exit 1; }
fi
rm -rf "$d"; mkdir -p "$d"
summary=$d/summary.txt
echo "GPU checks on $ngpu x $gpu_name, $(date -u +%Y-%m-%d), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" | tee "$summary"
fails=0
fail() { echo "FAIL $*" | tee -a "$summary"; fails=$((fails + 1)); }
data="data/brown_train_*.bin"
common=(--train-data "$data" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)
mpi() { local np=$1; shift; if [ "$np" = 1 ]; then "$@"; else mpirun -np "$np" --oversubscribe --bind-to none "$@"; fi; }
first_loss() { sed -n 's/.*"step":1,"loss":\([^,]*\),.*/\1/p' "$1" | head -n 1; }

loss_tol() { case $1 in fp32) echo 1e-5 ;; bf16) echo 5e-3 ;; fp16) echo 2e-3 ;; esac; }
grad_tol() { case $1 in fp32) echo "$tol" ;; bf16) echo 5e-2 ;; fp16) echo 2e-2 ;; esac; }
prec_opts() { if [ "$1" = fp16 ]; then echo "--loss-scale 256"; fi; } # static: no first-step overflow

. test/lib.sh
steps() { log_steps "$1"; }
# sections 3 and 5: a 512-token vocabulary (random tokens), so that the LM head does not dominate the emulated runs
rargs=(--layers 6 --channels 64 --heads 4 --vocab-size 512 --max-seq-len 32 --batch 2 --seq-len 32 --grad-accum 2
       --steps 2 --train-data "$d/rc_tokens.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)
if [ $do_checks -eq 1 ] && { has 3 || has 5; }; then $PY test/zero_check.py shard "$d/rc_tokens.bin" 4096 512 5; fi

if [ $do_checks -eq 1 ] && has 1; then
  echo "== 1. GPU vs CPU in fp32, bf16, fp16: one checkpoint, one batch, loss and every gradient" | tee -a "$summary"
  # The checkpoint: the CPU trainer's model after one step from a seed (not the plain init, so
  # that nothing is symmetric by construction).
  vocab=()
  if [ "${EMULATED:-0}" = 1 ]; then
    # Emulated: a 1000-token vocabulary (padded to 1024, so the padded columns are still there)
    # on random tokens below it, instead of GPT-2's 50257 on the Brown corpus: that LM head was
    # most of each emulated run's time and of its gradient file, and the comparison does not
    # depend on the vocabulary's size. test_gpu_emu.sh reuses $d/init and $d/tokens.bin.
    $PY test/zero_check.py shard "$d/tokens.bin" 16384 1000 3
    vocab=(--vocab-size 1000)
    common=(--train-data "$d/tokens.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)
  fi
  heads="4 2"; [ "$quick" = 1 ] || heads="4 2 1"
  for h in $heads; do # 4 heads of 32, 2 of 64 (GPT-2's head size), 1 of 128 (flash2's other size)
    $cpu --layers 4 --channels 128 --heads $h "${vocab[@]}" --batch 2 --seq-len 64 --steps 1 "${common[@]}" \
      --out "$d/init$h" >"$d/init$h.log" 2>&1 || { cat "$d/init$h.log"; fail "making the checkpoint"; }
  done
  mv "$d/init4" "$d/init"
  cases=("fp32 2 128" "fp32 8 64" "bf16 2 128" "bf16 8 64" "fp16 2 128" "fp16 8 64" "bf16 4 64 hs64")
  [ "$quick" = 1 ] && cases=("bf16 8 64" "bf16 4 64 hs64")
  if [ "$quick" != 1 ]; then
    [ -x "${gpu}bf16_mm" ] && cases+=("bf16 8 64 mm") # the ATTENTION=matmul build, where there is one
    [ -x "${gpu}bf16_flash" ] && cases+=("bf16 4 64 flash") # the ATTENTION=flash build: the WMMA kernels at head size 64
    cases+=("bf16 4 64 hs128") # head size 128: gpu/flash2.cuh's other instance (the matmul path in other builds)
  fi
  for c in "${cases[@]}"; do
      set -- $c; p=$1; B=$2; T=$3; k=${p}_B$B${4:+_$4}; ck=$d/init/model_00000001.bin
      [ "${4:-}" = hs64 ] || [ "${4:-}" = flash ] && ck=$d/init2/model_00000001.bin
      [ "${4:-}" = hs128 ] && ck=$d/init1/model_00000001.bin
      for t in cpu gpu; do
        bin=$cpu; [ $t = gpu ] && bin=$gpu$p${4:+_$4}; case "${4:-}" in hs*) [ $t = gpu ] && bin=$gpu$p;; esac
        # shellcheck disable=SC2046
        $bin --init "$ck" --batch "$B" --seq-len "$T" --steps 1 "${common[@]}" --precision $p \
          $(prec_opts $p) --dump-grads "$d/grads_${t}_$k.bin" --log "$d/log_${t}_$k.jsonl" >"$d/run_${t}_$k.log" 2>&1 ||
          { tail -n 20 "$d/run_${t}_$k.log"; fail "$t run $p B=$B T=$T"; }
      done
      lc=$(first_loss "$d/log_cpu_$k.jsonl"); lg=$(first_loss "$d/log_gpu_$k.jsonl"); lt=$(loss_tol $p)
      if $PY -c "import sys; a,b=float('$lc'),float('$lg'); sys.exit(0 if abs(a-b) <= $lt*max(1,abs(a)) else 1)" 2>/dev/null; then
        echo "ok   $p B=$B T=$T loss: cpu $lc, gpu $lg (tolerance $lt)" | tee -a "$summary"
      else fail "$p B=$B T=$T loss: cpu '$lc', gpu '$lg' (tolerance $lt)"; fi
      if $PY test/gpu/compare_grads.py "$d/grads_cpu_$k.bin" "$d/grads_gpu_$k.bin" --tol "$(grad_tol $p)" >"$d/cmp_$k.txt"; then
        echo "ok   $p B=$B T=$T${4:+ $4} gradients: $(tail -n 1 "$d/cmp_$k.txt")" | tee -a "$summary"
      else cat "$d/cmp_$k.txt"; fail "$p B=$B T=$T${4:+ $4} gradients"; fi
      [ "${KEEP_GRADS:-1}" = 1 ] || rm -f "$d/grads_cpu_$k.bin" "$d/grads_gpu_$k.bin" # 30 MB each; the comparison stays
  done
fi
if [ $do_checks -eq 1 ] && has 2; then
  echo "== 2. ZeRO stages 0-3 on $ngpu GPU(s), 2 micro-steps per step: the same losses" | tee -a "$summary"
  zprecs="fp32 bf16" zstages="0 1 2 3"
  zinit=$d/init/model_00000001.bin zcommon=("${common[@]}") zshape=(--batch 4 --seq-len 64)
  if [ "${EMULATED:-0}" = 1 ]; then
    # Emulated: a small model (2 layers, 64 channels, a 1024-token vocabulary, random learnable
    # tokens below it) and B=2, T=32 instead of section 1's model (its 50257-token LM head) and
    # B=4, T=64, which made each run 40-60 s; stage equivalence does not depend on the shape.
    # test_gpu_emu_memory.sh reruns these runs (comm-first) from $d/zinit and $d/zero_tokens.bin.
    $PY test/zero_check.py shard "$d/zero_tokens.bin" 16384 1024 7
    zcommon=(--train-data "$d/zero_tokens.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)
    $cpu --layers 2 --channels 64 --heads 4 --vocab-size 1024 --max-seq-len 64 --batch 2 --seq-len 64 --steps 1 \
      "${zcommon[@]}" --out "$d/zinit" >"$d/zinit.log" 2>&1 || { cat "$d/zinit.log"; fail "making the ZeRO checkpoint"; }
    zinit=$d/zinit/model_00000001.bin zshape=(--batch 2 --seq-len 32)
  fi
  [ "$quick" = 1 ] && zprecs=bf16 zstages="0 3"
  for p in $zprecs; do
    for s in $zstages; do
      mpi "$ngpu" $gpu$p --init "$zinit" "${zshape[@]}" --grad-accum 2 --steps "${ZERO_STEPS:-4}" \
        "${zcommon[@]}" --zero-stage "$s" --log "$d/zero_${p}_$s.jsonl" >"$d/zero_${p}_$s.log" 2>&1 ||
        { tail -n 20 "$d/zero_${p}_$s.log"; fail "$p ZeRO-$s run"; }
    done
    if $PY - "$d" "$p" "$(loss_tol $p)" "${ZERO_STEPS:-4}" $zstages <<'EOF' | tee -a "$summary"; then :; else fail "$p: ZeRO stages disagree"; fi
import json, sys
d, p, tol, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
stages = [int(x) for x in sys.argv[5:]]
loss = {}
for s in stages:
    loss[s] = [json.loads(l)["loss"] for l in open(f"{d}/zero_{p}_{s}.jsonl") if '"loss"' in l and '"step"' in l]
ok = all(len(loss[s]) == steps for s in loss)
worst = max((abs(a - b) / max(1.0, abs(a)) for s in stages[1:] for a, b in zip(loss[0], loss[s])), default=0.0)
ok = ok and worst <= tol
print(f"{'ok  ' if ok else 'FAIL'} {p} losses by stage: " + "; ".join(f"{s}: " + " ".join(f"{x:.6f}" for x in loss[s]) for s in loss)
      + f" (worst relative difference {worst:.2e}, tolerance {tol:g})")
sys.exit(0 if ok else 1)
EOF
  done
fi
if [ $do_checks -eq 1 ] && has 3; then
  echo "== 3. activation recompute: the run without it bit for bit, the CPU trainer's numbers within tolerance" | tee -a "$summary"
  rmodes=("none 1" "full 1" "full 2" "selective 1" "full 1 --cpu-checkpointing" "full 2 --cpu-checkpointing")
  rprecs="fp32 bf16 fp16"
  [ "$quick" = 1 ] && rmodes=("none 1" "full 1" "full 2 --cpu-checkpointing") rprecs=bf16 # full 1: compared with the CPU below
  for p in $rprecs; do
    ok=1
    for mk in "${rmodes[@]}"; do
      set -- $mk; mode=$1 k=$2; shift 2; tag=rc_${p}_$mode$k${1:+_host}
      # shellcheck disable=SC2046
      $gpu$p "${rargs[@]}" --precision $p $(prec_opts $p) --recompute "$mode" --recompute-every "$k" "$@" \
        --dump-grads "$d/$tag.bin" --log "$d/$tag.jsonl" >"$d/$tag.log" 2>&1 || { tail -n 20 "$d/$tag.log"; fail "$tag run"; ok=0; continue; }
      grep -q "plan vs allocated: every kind on every rank matches exactly" "$d/$tag.log" || { fail "$tag: plan != allocated"; ok=0; }
      [ "$mode" = none ] && continue
      if [ -z "$(steps "$d/$tag.jsonl")" ] || [ "$(steps "$d/$tag.jsonl")" != "$(steps "$d/rc_${p}_none1.jsonl")" ] ||
         ! cmp -s "$d/$tag.bin" "$d/rc_${p}_none1.bin"; then fail "$tag: losses or gradient differ from no recompute"; ok=0; fi
    done
    # shellcheck disable=SC2046
    $cpu "${rargs[@]}" --precision $p $(prec_opts $p) --recompute full --dump-grads "$d/rc_cpu_$p.bin" \
      --log "$d/rc_cpu_$p.jsonl" >"$d/rc_cpu_$p.log" 2>&1 || fail "CPU recompute run $p"
    lc=$(first_loss "$d/rc_cpu_$p.jsonl"); lg=$(first_loss "$d/rc_${p}_full1.jsonl"); lt=$(loss_tol $p)
    if $PY -c "import sys; a,b=float('$lc'),float('$lg'); sys.exit(0 if abs(a-b) <= $lt*max(1,abs(a)) else 1)" 2>/dev/null &&
       $PY test/gpu/compare_grads.py "$d/rc_cpu_$p.bin" "$d/rc_${p}_full1.bin" --tol "$(grad_tol $p)" >"$d/rc_cmp_$p.txt"; then
      [ $ok = 1 ] && echo "ok   $p: ${rmodes[*]:1} = no recompute, bit for bit;" \
        "full vs CPU: loss $lg vs $lc, gradients $(tail -n 1 "$d/rc_cmp_$p.txt")" | tee -a "$summary"
    else cat "$d/rc_cmp_$p.txt" 2>/dev/null; fail "$p full recompute vs the CPU trainer: loss '$lg' vs '$lc', or gradients"; fi
  done
  ok=1 zmodes=("none 1" "full 3" "full 2 --cpu-checkpointing" "selective 1")
  [ "$quick" = 1 ] && zmodes=("none 1" "selective 1")
  for mk in "${zmodes[@]}"; do
    set -- $mk; mode=$1 k=$2; shift 2; tag=rcz_$mode$k
    mpi "$ngpu" ${gpu}bf16 "${rargs[@]}" --zero-stage 3 --recompute "$mode" --recompute-every "$k" "$@" --log "$d/$tag.jsonl" \
      >"$d/$tag.log" 2>&1 || { tail -n 20 "$d/$tag.log"; fail "$tag ZeRO-3 run"; ok=0; continue; }
    want=$($PY test/zero_check.py gathers 6 64 512 32 "$ngpu" 2 2 "$mode" "$k")
    got=$(grep '"event":"comm"' "$d/$tag.jsonl" | sed -E 's/.*"all_gather":([0-9]+).*/\1/' | sort -u | tr '\n' ' ')
    [ "$got" = "$want " ] || { fail "$tag: all_gather bytes per step '$got', the schedule says '$want'"; ok=0; }
    [ "$mode" = none ] && continue
    [ -n "$(steps "$d/$tag.jsonl")" ] && [ "$(steps "$d/$tag.jsonl")" = "$(steps "$d/rcz_none1.jsonl")" ] ||
      { fail "$tag: ZeRO-3 losses differ from no recompute"; ok=0; }
  done
  [ $ok = 1 ] && echo "ok   ZeRO-3 on $ngpu GPU(s), bf16: ${zmodes[*]:1} = no recompute;" \
    "all-gather bytes as the schedule says" | tee -a "$summary"
fi
if [ $do_checks -eq 1 ] && has 5; then
  echo "== 5. offload: the optimizer on the host (pageable, pinned), on NVMe, and the parameters too: no offload, bit for bit" | tee -a "$summary"
  oargs=("${rargs[@]}" --steps 3)
  for z in 1 3; do
    omodes=("none none" "cpu none" "cpu none --pin-memory" "nvme none --nvme-path $d/nvme")
    [ "$quick" = 1 ] && omodes=("none none" "cpu none --pin-memory" "nvme none --nvme-path $d/nvme")
    [ $z = 3 ] && omodes=("none none" "cpu cpu --pin-memory")
    ok=1
    for mk in "${omodes[@]}"; do
      set -- $mk; oo=$1 op=$2; shift 2; tag=off_z${z}_$oo$op${1:+_${1#--}}; tag=${tag%%-*}
      mkdir -p "$d/nvme"
      mpi 1 ${gpu}bf16 "${oargs[@]}" --zero-stage $z --offload-optimizer $oo --offload-param $op "$@" --log "$d/$tag.jsonl" \
        >"$d/$tag.log" 2>&1 || { tail -n 20 "$d/$tag.log"; fail "$tag run"; ok=0; continue; }
      grep -q "plan vs allocated: every kind on every rank matches exactly" "$d/$tag.log" || { fail "$tag: plan != allocated"; ok=0; }
      [ "$oo" = none ] && continue
      [ -n "$(steps "$d/$tag.jsonl")" ] && [ "$(steps "$d/$tag.jsonl")" = "$(steps "$d/off_z${z}_nonenone.jsonl")" ] ||
        { fail "$tag: losses differ from no offload"; ok=0; }
    done
    [ $ok = 1 ] && echo "ok   ZeRO-$z bf16 offload (optimizer, parameters: ${omodes[*]:1}) = no offload, bit for bit" | tee -a "$summary"
  done
  rm -rf "$d/nvme"
fi

if [ $do_bench -eq 1 ]; then
  echo "== 4. benchmark, bf16: d12, T=1024, 524,288 tokens/step, B=$bench_B per GPU, $ngpu GPU(s)" | tee -a "$summary"
  if [ -z "$peak" ]; then
    case "$gpu_name" in *H100*) peak=989 ;; esac # dense bf16 tensor-core peak of the H100 SXM
  fi
  flops_per_token=$($PY -c "print(6*124475904 + 12*12*768*1024)")
  for s in 2 3; do
    mpi "$ngpu" ./train_gpt_bf16 --model d12 --seq-len 1024 --batch "$bench_B" --total-batch 524288 --steps "$bench_steps" \
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
  # activation recompute's price on the GPU: ZeRO-2 again with full recompute (and its checkpoints in host memory)
  for rc in "full" "full --cpu-checkpointing"; do
    tag=$(echo "$rc" | tr -d ' -')
    # shellcheck disable=SC2086
    mpi "$ngpu" ./train_gpt_bf16 --model d12 --seq-len 1024 --batch "$bench_B" --total-batch 524288 --steps "$bench_steps" \
      "${common[@]}" --zero-stage 2 --recompute $rc >"$d/bench_rc_$tag.log" 2>&1 || { tail -n 20 "$d/bench_rc_$tag.log"; fail "benchmark --recompute $rc"; continue; }
    ms=$(grep "^average step" "$d/bench_rc_$tag.log" | sed 's/.*: \([0-9.]*\) ms.*/\1/')
    act=$(grep -m1 "activations (recompute" "$d/bench_rc_$tag.log" | grep -oE '[0-9]{1,3}(,[0-9]{3})+' | head -n 1)
    echo "ZeRO-2 --recompute $rc: $ms ms/step (x$($PY -c "print(f'{$ms/${ms2:-$ms}:.3f}')") of no recompute), activations $act bytes" | tee -a "$summary"
  done
fi
echo "$fails failures (summary in $summary)"
[ $fails -eq 0 ]
