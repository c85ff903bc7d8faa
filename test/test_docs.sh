#!/usr/bin/env bash
# The docs as a tested artifact: every `$ ` command of README.md, docs/walkthrough.md and
# docs/zh/walkthrough.md runs as written, from the root of a fresh copy of the repository (its
# files as a clone has them: no ../shared, no build outputs but the trainers), and every number
# their output blocks show must be what the program prints now. test/docs_check.py holds the
# rules and the environment; in short, for whoever writes a block:
#   * "$ " starts a command (a trailing backslash continues it); the lines after it are its
#     output, trimmed: each must equal a line it printed, in order; lines may be left out, and
#     "…" stands for text left out within a line. Numbers are compared as printed (a loss to its
#     6 decimals, a byte count to the byte); runs of spaces match any run of spaces.
#   * "~" before a number marks a timing, exempt: "| ~471.0 ms |", "(~7259 bytes)" for a PNG drawn
#     from timings. Nothing else is exempt.
#   * <!-- docs-test: long --> on the line before a block's fence: too long for the suite; its
#     commands run under `make test-docs-long` (this script with --long), and the suite's run
#     names each one it leaves out. <!-- docs-test: continued [TEXT] --> before a block without
#     commands: more output of the previous command (or of the latest one starting with TEXT).
#     <!-- docs-test: as DOC.md -->: DOC.md runs the block's commands, in that order: each must
#     equal one DOC.md ran (runs of spaces apart) and its lines are checked against that output
#     (the README's examples the walkthrough runs: each runs once).
# mpirun runs without the suite's OMPI_MCA_rmaps_base_oversubscribe: a command with more ranks
# than cores must say --oversubscribe, as a user's must. Also checked: no doc, example or script
# points outside the repository. scripts/walkthrough_outputs.sh runs the same commands and keeps
# their whole outputs. Measured on this project's 2-core VM with other jobs running (load 3-10):
# 121 s of CPU, 5 minutes of wall time (the walkthrough's first run, 20 steps, a fifth of it); with
# --long 246 s of CPU, 14 minutes (§4's four GPT-2 124M runs on 4 ranks: 114 s of CPU, 6.7 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
long=; [ "${1:-}" = --long ] && long=--long
PYTHON=${PYTHON:-/usr/bin/python3}
make -s train_gpt_cpu test/bin/train_gpt_emu_bf16 || exit 1
new_scratch docs
fail=0

echo "== no doc, example or script points outside the repository (../shared)"
if grep -rn '\.\./shared' README.md docs examples scripts; then echo "FAIL: the lines above"; fail=1
else echo "ok"; fi

echo "== scripts/walkthrough_outputs.sh is executable"
[ -x scripts/walkthrough_outputs.sh ] && echo ok || { echo "FAIL: chmod +x scripts/walkthrough_outputs.sh"; fail=1; }

echo "== every command as written, every number shown"
$PYTHON test/docs_check.py $long --clone $d/clone --out $d/outputs README.md docs/walkthrough.md docs/zh/walkthrough.md || fail=1
exit $fail
