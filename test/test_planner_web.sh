#!/usr/bin/env bash
# The planner page (make planner-web, docs/planner/): built from the trainers' headers, served by a
# plain static file server, opened in headless Chromium (Debian's, driven by puppeteer-core from
# web/package-lock.json), and checked against the trainers themselves: 30 configurations set
# through the page's own inputs (every stage, offload to cpu and nvme, recompute, fp32/bf16/fp16,
# Lion, 1 to 1024 ranks, both GPU descriptions and a typed-in one; the CPU trainer's layout and
# the GPU trainer's) show exactly what `train_gpt_cpu --plan --json` (or `train_gpt --plan`, through
# its CUDA emulator build) prints: bytes to the byte, times to its digits. Also: each link
# (every third) reproduces its page, a configuration the trainer refuses shows its error line, a pasted
# DeepSpeed config fills the inputs as the trainer's parser reads it, --fit, a 2-rank run's --log
# draws (its ranks allocated what the page predicts), nothing is fetched from outside the
# folder, a plan takes under 50 ms, the page weighs under 1 MB. SCREENSHOT=FILE keeps a picture
# of the page (docs/figures/planner.png).
set -euo pipefail
cd "$(dirname "$0")/.."
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then echo "skip: no chromium (make setup installs Debian's)"; exit 77; fi
if [ ! -d web/node_modules/puppeteer-core ]; then echo "FAIL: web/node_modules/puppeteer-core is missing: run make setup"; exit 1; fi
make -s train_gpt_cpu planner-web test/bin/train_gpt_emu_bf16
export GPU_TRAINER=test/bin/train_gpt_emu_bf16 # the GPU trainer's --plan (its CUDA emulator build runs the same main)
. test/lib.sh; new_scratch planner_web

bytes=$(cat docs/planner/* | wc -c)
echo "== the page weighs $bytes bytes (index.html, planner.js, wasi.js, planner.wasm, chart.umd.min.js)"
[ "$bytes" -lt 1000000 ] || { echo "FAIL: over 1 MB"; exit 1; }
# the committed page is what this build makes (the README links it)
git diff --quiet -- docs/planner || echo "(note: docs/planner differs from the committed copy: commit the rebuilt page)"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory docs/planner >"$d/http.log" 2>&1 &
server=$!
trap 'rc=$?; kill $server 2>/dev/null; (exit $rc); scratch_cleanup' EXIT
python3 - "$port" <<'PY' || { echo "FAIL: the static server did not start"; cat "$d/http.log"; exit 1; }
import sys, time, urllib.request
for _ in range(100):
    try: urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/index.html", timeout=1); sys.exit(0)
    except OSError: time.sleep(0.1)
sys.exit(1)
PY

# a real run to load: 2 ranks, ZeRO-2, a tiny model, one OpenMP thread each (the page's --threads)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS ./train_gpt_cpu --layers 2 --channels 64 --heads 2 \
  --seq-len 32 --batch 2 --steps 4 --zero-stage 2 --val-every 0 --sample-every 0 --log "$d/run.jsonl" > "$d/run.out" 2>&1 ||
  { echo "FAIL: the 2-rank run"; tail -5 "$d/run.out"; exit 1; }
export RUN_LOG="$d/run.jsonl"

export HOME="$d" # chromium's profile and crash files stay in the scratch directory
node test/planner_web_check.cjs "http://127.0.0.1:$port/index.html" ./train_gpt_cpu "$chromium" "$d" "${SCREENSHOT:-}"
