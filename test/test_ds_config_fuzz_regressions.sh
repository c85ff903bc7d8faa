#!/usr/bin/env bash
# Replays every input the DeepSpeed-config fuzzer ever crashed on (test/fuzz_regressions/ds_config/)
# and its seeds (test/ds_configs/, examples/) through test/fuzz_ds_config.c built with
# gcc and AddressSanitizer + UBSan: a fixed bug must stay fixed. New inputs come from `make fuzz`.
set -eu
cd "$(dirname "$0")/.."
make -s test/bin/fuzz_ds_config_asan
inputs=()
for f in test/ds_configs/* test/fuzz_regressions/ds_config/* examples/*.json; do
  case "$(basename "$f")" in README*) continue;; esac
  [ -f "$f" ] && inputs+=("$f")
done
echo "${#inputs[@]} inputs"
log="${TMPDIR:-/tmp}/zero_ds_fuzz_replay.$$"
test/bin/fuzz_ds_config_asan "${inputs[@]}" 2>"$log" || { tail -n 30 "$log"; rm -f "$log"; exit 1; }
# Error and warning lines are expected (many inputs are bad configs); sanitizer reports are not.
if grep -E "runtime error|AddressSanitizer|LeakSanitizer" "$log"; then rm -f "$log"; exit 1; fi
rm -f "$log"
