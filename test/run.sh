#!/usr/bin/env bash
# The whole test suite: runs every test/test_*.sh (or those named as arguments).
# A test script exits 0 for pass, 77 for skip (it prints why), anything else for fail.
# Ends with the test time (in all, and the ten slowest tests) and the line "N passed, N failed, N skipped".
# Each run's logs go to a directory of its own, test/out/run.XXXXXX (test/out/last-run points
# to the newest), and each test works in its own scratch directory (test/lib.sh), so that two
# suites can run at once, in two clones or in one.
cd "$(dirname "$0")/.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHON=/usr/bin/python3
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
pass=0; fail=0; skip=0; failed=(); times=()
# the CPU seconds (user + system) of the tests run so far: on a shared machine a truer measure of
# what a test costs than its wall time, which other jobs stretch
# (`times` run by this shell, not in a $(...) subshell, which would count its own children only)
cpu_seconds() { awk 'NR == 2 { split($0, f, /[ms ]+/); print int(f[1] * 60 + f[2] + f[3] * 60 + f[4]) }' "$logs/.times"; }
for t in "${tests[@]}"; do
  name=$(basename "$t" .sh); log=$logs/$name.log
  times >"$logs/.times"; start=$(date +%s) cpu0=$(cpu_seconds)
  bash "$t" >"$log" 2>&1; rc=$?
  times >"$logs/.times"; secs=$(( $(date +%s) - start )) cpu=$(( $(cpu_seconds) - cpu0 ))
  times+=("$secs $name $cpu")
  if [ $rc -eq 0 ]; then pass=$((pass+1)); printf 'PASS %-40s %4ds  (CPU %ds)\n' "$name" "$secs" "$cpu"
  elif [ $rc -eq 77 ]; then skip=$((skip+1)); printf 'SKIP %-40s %s\n' "$name" "$(tail -n 1 "$log")"
  else fail=$((fail+1)); failed+=("$name"); printf 'FAIL %-40s %4ds  (CPU %ds)\n' "$name" "$secs" "$cpu"; tail -n 20 "$log" | sed 's/^/    | /'
  fi
done
# where the time went: the total and the ten slowest (the suite's aim is about 15 minutes on a 2-core machine)
if [ ${#times[@]} -gt 1 ]; then
  printf '%s\n' "${times[@]}" | awk '{ w += $1; c += $3 } END { printf "test time: %d s in all (CPU %d s); the slowest:\n", w, c }'
  printf '%s\n' "${times[@]}" | sort -rn | head -n 10 | awk '{ printf "  %5d s  (CPU %5d s)  %s\n", $1, $3, $2 }'
fi
echo "(logs in $logs)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
