#!/usr/bin/env bash
# The whole test suite: runs every test/test_*.sh (or those named as arguments).
# A test script exits 0 for pass, 77 for skip (it prints why), anything else for fail.
# Ends with the test time (in all, and the ten slowest tests) and the line "N passed, N failed, N skipped".
# Each run's logs go to a directory of its own, test/out/run.XXXXXX (test/out/last-run points
# to the newest), and each test works in its own scratch directory (test/lib.sh), so that two
# suites can run at once, in two clones or in one.
#
# Tests run TEST_JOBS at a time (default: the machine's cores, at most 4; TEST_JOBS=1 runs them
# one by one). Most of a test's time is one process at a time (a build, a 2-rank run whose ranks
# take turns, Python), so on a 2-core machine two at once take about half the time. What running
# side by side could break is handled here:
#   - make: two tests may build one target at once; every Makefile rule writes its output under
#     a name of its own and renames it into place, so neither runs nor links a half-written file
#     (at worst the same binary is built twice).
#   - timing: a test whose file has a line "# run.sh: alone" (it kills, stops or times out
#     processes, or throttles a link, on a clock) runs by itself once the others are done.
#   - order: the longest tests start first (longest-processing-time-first: `longest` below, by
#     their wall time two at a time on a 2-core machine), the rest after them in name order, so
#     that no long test starts late and leaves its job slot running alone at the end.
#   - idle OpenMP threads sleep (OMP_WAIT_POLICY=passive, unless the environment sets it) instead of
#     spinning on the core the test beside them needs; the thread counts, and so every number, are
#     the same. MPI starts sooner: OpenMPI is told the PML it picks here anyway (ob1), which spares
#     each process probing libfabric/PSM transports (0.2-0.3 s of wall per start), and a process
#     started without mpirun is an isolated singleton, without an orted daemon beside it. The
#     README's commands run without these two (test/docs_check.py: a user's environment).
cd "$(dirname "$0")/.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHON=/usr/bin/python3
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_ess_singleton_isolated=1
# OpenBLAS runs the kernels it and the trainer choose for this CPU (cpu/openblas.h), as a user's
# run does: an OPENBLAS_CORETYPE from the environment is dropped (this project's VM sets Haswell,
# whose fp32 sums depend on the thread count: test_mixed_training's 1-vs-2-thread check fails on
# them). The tests that need particular kernels set them themselves.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then echo "(OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment: unset for the tests)"; fi
unset OPENBLAS_CORETYPE
mkdir -p test/out
logs=$(mktemp -d test/out/run.XXXXXX) || exit 1
ln -sfn "$(basename "$logs")" test/out/last-run
tests=("$@"); [ ${#tests[@]} -eq 0 ] && tests=(test/test_*.sh)
cores=$(nproc 2>/dev/null || echo 1)
jobs=${TEST_JOBS:-$(( cores < 4 ? cores : 4 ))}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: TEST_JOBS=$jobs: want a positive whole number"; exit 2; }

pass=0; fail=0; skip=0; times=()
# A test's CPU seconds (user + system of it and what it waited for): the `times` of the subshell
# that ran it, which counts its own children only.
cpu_seconds() { awk 'NR == 2 { split($0, f, /[ms ]+/); print int(f[1] * 60 + f[2] + f[3] * 60 + f[4]) }' "$1"; }
declare -A name_of start_of
start() { # test file
  local t=$1 name; name=$(basename "$t" .sh)
  ( bash "$t" >"$logs/$name.log" 2>&1; echo $? >"$logs/$name.rc"; times >"$logs/$name.times" ) &
  name_of[$!]=$name; start_of[$!]=$(date +%s)
}
finish() { # pid
  local name=${name_of[$1]} secs cpu rc
  secs=$(( $(date +%s) - ${start_of[$1]} )); rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
  cpu=$(cpu_seconds "$logs/$name.times" 2>/dev/null); cpu=${cpu:-0}
  times+=("$secs $name $cpu")
  if [ "$rc" -eq 0 ]; then pass=$((pass+1)); printf 'PASS %-40s %4ds  (CPU %ds)\n' "$name" "$secs" "$cpu"
  elif [ "$rc" -eq 77 ]; then skip=$((skip+1)); printf 'SKIP %-40s %s\n' "$name" "$(tail -n 1 "$logs/$name.log")"
  else fail=$((fail+1)); printf 'FAIL %-40s %4ds  (CPU %ds)\n' "$name" "$secs" "$cpu"; tail -n 20 "$logs/$name.log" | sed 's/^/    | /'
  fi
  unset "name_of[$1]" "start_of[$1]"
}
wait_one() { local pid; wait -n -p pid; finish "$pid"; }
shared=(); alone=()
for t in "${tests[@]}"; do
  if grep -q '^# run.sh: alone' "$t" 2>/dev/null; then alone+=("$t"); else shared+=("$t"); fi
done
# The longest tests, longest first (wall seconds in a full run two at a time on the 2-core VM at
# load 3, fresh test/bin: test_gpu_emu 204, test_gpu_build 210, test_offload 102, test_gpu_emu_memory
# 222, test_docs 90, test_nvme 102, test_planner_web 81, test_recompute 86, then 30-70 s); a new test
# that takes more than half a minute belongs here. test_gpu_emu builds the emulator's trainers that
# test_offload and test_gpu_emu_memory then find built, so it starts first.
longest=(test_gpu_emu test_gpu_build test_offload test_gpu_emu_memory test_gpu_session test_docs test_nvme
         test_planner_web test_lamb test_recompute test_reference test_blas_build test_trace test_ds_config
         test_planner test_plan_options test_gemm_bf16 test_ds_examples test_checkpoint test_kernels)
ordered=(); declare -A is_long
for n in "${longest[@]}"; do
  is_long[$n]=1; for t in "${shared[@]}"; do [ "$(basename "$t" .sh)" = "$n" ] && ordered+=("$t"); done
done
for t in "${shared[@]}"; do [ -n "${is_long[$(basename "$t" .sh)]:-}" ] || ordered+=("$t"); done
t0=$(date +%s)
for t in "${ordered[@]}"; do
  while [ ${#name_of[@]} -ge "$jobs" ]; do wait_one; done
  start "$t"
done
while [ ${#name_of[@]} -gt 0 ]; do wait_one; done
for t in "${alone[@]}"; do start "$t"; wait_one; done
# where the time went: the suite's wall time, each test's (in all), and the ten slowest (the
# suite's aim is about 15 minutes on a 2-core machine)
if [ ${#times[@]} -gt 1 ]; then
  printf 'suite: %d s wall, %d tests, %d at a time\n' $(( $(date +%s) - t0 )) ${#times[@]} "$jobs"
  printf '%s\n' "${times[@]}" | awk '{ w += $1; c += $3 } END { printf "test time: %d s in all (CPU %d s); the slowest:\n", w, c }'
  printf '%s\n' "${times[@]}" | sort -rn | head -n 10 | awk '{ printf "  %5d s  (CPU %5d s)  %s\n", $1, $3, $2 }'
fi
echo "(logs in $logs)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
