# test/gpu_emu_lib.sh: sourced by test_gpu_emu.sh and test_gpu_emu_memory.sh (the GPU trainer on the
# CUDA emulator, in two files so that the suite runs the halves side by side) after they `cd` to
# the repository root: their environment, scratch directory ($d) and helpers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-python3}
# Debian's OpenBLAS takes its slowest kernels on CPUs it does not know (see openblas_pick_core in
# cpu/openblas.h); the emulated cuBLASLt calls it too.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
# Idle OpenMP threads (the host code's and OpenBLAS's, under the emulated cuBLASLt) sleep instead
# of spinning: the emulator's many short parallel calls, two ranks of two threads on two cores,
# spent about a sixth of this test's CPU time spinning. The thread count, and so every number, is
# the same.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# emu_build TARGET...: the binaries the file runs, two compiles at a time
emu_build() { make -s -j2 "$@" || { echo "FAIL: build"; exit 1; }; }
. test/lib.sh
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' | tr '\n' ' '; } # of the step lines on stdin
# emu_checks "N ...": test/gpu/run_gpu_checks.sh's sections N on the emulator, 2 ranks, results in $d/checks
emu_checks() {
  EMULATED=1 GPU_BIN=test/bin/train_gpt_emu_ NGPU=2 ZERO_STEPS=2 OUT="$d/checks" SECTIONS="$1" bash test/gpu/run_gpu_checks.sh ||
    fail "run_gpu_checks.sh sections $1 on the emulator"
}
