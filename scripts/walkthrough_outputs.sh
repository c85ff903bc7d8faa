#!/usr/bin/env bash
# Runs every command of docs/walkthrough.md as written (docs/zh/walkthrough.md runs the same ones),
# in order, from the root of a fresh copy of the repository (DIR/clone/docs_walkthrough_md), and
# keeps each command's whole output in DIR/docs_walkthrough_md-NN.txt: what the trimmed outputs
# quoted there come from. It also checks those quotes (test/docs_check.py, as test_docs does, with
# the long commands too), and exits 1 when one no longer matches. Its commands take about 4 minutes
# of CPU time (14 minutes of wall time on this project's 2-core VM shared with other jobs). After a
# change that moves numbers, `test/docs_check.py --replay DIR --fix FILE.md` rewrites them from
# these outputs (read the diff before committing it).
#   scripts/walkthrough_outputs.sh DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: $0 DIR}
[ ! -e "$out/clone" ] || { echo "$out/clone exists: give a new DIR"; exit 1; }
make -s train_gpt_cpu test/bin/train_gpt_emu_bf16 || exit 1
${PYTHON:-/usr/bin/python3} test/docs_check.py --long --clone "$out/clone" --out "$out" docs/walkthrough.md
