#!/usr/bin/env bash
# Replays every input the fuzzer ever crashed on (test/fuzz_regressions/) and the
# seed inputs (test/fuzz_seeds/) through the fuzz target built with gcc and
# AddressSanitizer + UBSan: a fixed bug must stay fixed. New inputs come from
# `make fuzz` (libFuzzer via clang).
set -eu
cd "$(dirname "$0")/.."
make -s test/bin/fuzz_dataloader_asan
inputs=()
for f in test/fuzz_seeds/* test/fuzz_regressions/*; do
  case "$(basename "$f")" in README*) continue;; esac
  [ -f "$f" ] && inputs+=("$f")
done
echo "${#inputs[@]} inputs"
# Inputs are a few KB: an allocation over 16 MB means a size taken from the file
# was trusted before it was checked (what oom-* inputs found), so make it fatal.
ASAN_OPTIONS=max_allocation_size_mb=16:allocator_may_return_null=0 \
  test/bin/fuzz_dataloader_asan "${inputs[@]}" 2>"${TMPDIR:-/tmp}/zero_fuzz_replay.$$" || {
  tail -n 30 "${TMPDIR:-/tmp}/zero_fuzz_replay.$$"; rm -f "${TMPDIR:-/tmp}/zero_fuzz_replay.$$"; exit 1; }
# The loader's error lines are expected (most inputs are malformed); sanitizer reports are not.
if grep -E "runtime error|AddressSanitizer|LeakSanitizer" "${TMPDIR:-/tmp}/zero_fuzz_replay.$$"; then
  rm -f "${TMPDIR:-/tmp}/zero_fuzz_replay.$$"; exit 1
fi
rm -f "${TMPDIR:-/tmp}/zero_fuzz_replay.$$"
