# test/lib.sh: sourced by the test scripts, after they `cd` to the repository root.
#
# new_scratch NAME sets $d to a new directory test/out/NAME.XXXXXX of this run of the test alone,
# so that two copies of the suite (in two clones, or in one) never share a path, and has it
# removed when the script exits 0 (pass) or 77 (skip); a failing test leaves it and says where.
# It installs an EXIT trap; a test that needs its own calls scratch_cleanup from it.
_scratch_dirs=()
scratch_cleanup() {
  local rc=$? s
  for s in "${_scratch_dirs[@]}"; do
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then rm -rf "$s"; else echo "(test files kept in $s)" >&2; fi
  done
  return $rc
}
new_scratch() {
  mkdir -p test/out
  d=$(mktemp -d "test/out/$1.XXXXXX") || exit 1
  _scratch_dirs+=("$d")
  trap scratch_cleanup EXIT
}

# log_steps LOG prints LOG's step lines (those with a loss) without what may differ between two
# runs that must agree bit for bit: times (every "...ms" field, tok_s), I/O byte counts and page faults.
log_steps() { grep '^{"step"' "$1" | grep '"loss"' | sed -E 's/,"([a-z_]*ms|tok_s|nvme_read|nvme_write|nvme_ahead|page_faults)":[0-9.e+-]+//g'; }
