#!/usr/bin/env bash
# scripts/plot.py on real logs and a real trace: two runs (2 ranks, ZeRO-1 and ZeRO-3 with
# validation) give loss, memory, comm, time and timeline PNGs, each a PNG of 2-150 kB; one log
# alone gives at least three. The textbook levels the memory and comm figures draw are the
# planner's (`--plan --json`: model_states_textbook) and 2P(N-1)/N x element size; `--plan
# --partitions` gives partitions.png, its numbers read back as printed. A file that is
# not a log, or labels that do not match the logs, is one line and a non-zero exit.
# Skipped without matplotlib (scripts/setup.sh installs python3-matplotlib).
set -uo pipefail
cd "$(dirname "$0")/.."
$PYTHON -c "import matplotlib" 2>/dev/null || { echo "skip: no matplotlib for $PYTHON (apt-get install python3-matplotlib)"; exit 77; }
make -s train_gpt_cpu || exit 1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
export OMP_NUM_THREADS=1
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
$PYTHON test/zero_check.py shard $d/val.bin 5000 512 2
args="--train-data $d/train.bin --val-data $d/val.bin --layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16
      --seq-len 16 --batch 2 --steps 6 --val-every 3 --val-steps 2 --sample-every 0 --precision bf16"
mpirun -np 2 --oversubscribe ./train_gpt_cpu $args --zero-stage 1 --log $d/z1.jsonl > $d/z1.out 2>&1 || { tail -3 $d/z1.out; exit 1; }
mpirun -np 2 --oversubscribe ./train_gpt_cpu $args --zero-stage 3 --log $d/z3.jsonl --trace $d/z3.json > $d/z3.out 2>&1 \
  || { tail -3 $d/z3.out; exit 1; }
fails=0
$PYTHON scripts/plot.py --out $d/two --trace $d/z3.json $d/z1.jsonl $d/z3.jsonl > $d/plot.out 2>&1 || { cat $d/plot.out; fails=$((fails+1)); }
$PYTHON scripts/plot.py --out $d/one $d/z3.jsonl > $d/plot1.out 2>&1 || { cat $d/plot1.out; fails=$((fails+1)); }
$PYTHON - "$d" <<'PY' || fails=$((fails+1))
import glob, json, os, subprocess, sys
sys.path.insert(0, "scripts")
import plot
d = sys.argv[1]
bad = []
def png_ok(p):
    b = open(p, "rb").read()
    return b[:8] == b"\x89PNG\r\n\x1a\n" and 2000 <= len(b) <= 150000
for name in ["loss", "memory", "comm", "time", "timeline"]:
    p = f"{d}/two/{name}.png"
    if not os.path.exists(p) or not png_ok(p): bad.append(f"two logs + trace: {name}.png missing or not a 2-150 kB PNG")
one = sorted(os.path.basename(p) for p in glob.glob(f"{d}/one/*.png") if png_ok(p))
if len(one) < 3: bad.append(f"one log gave {one}")
# the levels drawn, against the planner and the ring model
run = plot.read_log(f"{d}/z3.jsonl")
mem = run["memory"][0]
plan = json.loads(subprocess.run(["./train_gpt_cpu", "--plan", "--json", "--layers", "2", "--channels", "32", "--heads", "2",
                                  "--vocab-size", "512", "--max-seq-len", "16", "--seq-len", "16", "--batch", "2",
                                  "--precision", "bf16", "--zero-stage", "3", "--world", "2"],
                                 capture_output=True, text=True, check=True).stdout)
tb = plot.textbook_states(run, mem)
if abs(tb - plan["model_states_textbook"]) > 1e-6 * tb: bad.append(f"textbook model states {tb} vs planner {plan['model_states_textbook']}")
if len(run["val"]) != 2 or len(run["steps"]) != 6: bad.append(f"read {len(run['steps'])} steps, {len(run['val'])} validations")
for m in bad: print("FAIL", m)
print(f"ok: 5 PNGs from two logs and a trace ({', '.join(f'{os.path.getsize(p) // 1000} kB' for p in sorted(glob.glob(d + '/two/*.png')))}), "
      f"{len(one)} from one log; textbook level = planner's" if not bad else "")
sys.exit(1 if bad else 0)
PY
# the partition picture from `--plan --partitions`: a PNG, and what it draws read back as printed
./train_gpt_cpu --plan --partitions --layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 \
  --precision bf16 --world 3 > $d/parts.txt || fails=$((fails+1))
$PYTHON scripts/plot.py --out $d/parts --partitions $d/parts.txt > $d/parts.out 2>&1 || { cat $d/parts.out; fails=$((fails+1)); }
$PYTHON - "$d" <<'PY' || fails=$((fails+1))
import sys
sys.path.insert(0, "scripts")
import plot
d = sys.argv[1]
b = open(f"{d}/parts/partitions.png", "rb").read()
P = plot.read_partitions(f"{d}/parts.txt")
bad = [] if b[:8] == b"\x89PNG\r\n\x1a\n" and 2000 <= len(b) <= 150000 else ["partitions.png missing or not a 2-150 kB PNG"]
if P["N"] != 3 or len(P["units"]) != 4: bad.append(f"read N = {P['N']}, {len(P['units'])} units")
if P["whole"] != [[True] * 3, [True, True, False], [True, False, False], [False] * 3]: bad.append(f"stage rules read {P['whole']}")
if [u["offset"] for u in P["units"]][1:] != [sum(u["padded"] for u in P["units"][:i]) for i in range(1, 4)]: bad.append("unit offsets")
if sum(P["bytes"][k][3] for k in ("parameters", "gradients", "optimizer state")) != P["bytes"]["MODEL STATES"][3]: bad.append("bytes")
for m in bad: print("FAIL", m)
if not bad: print(f"ok: partitions.png ({len(b) // 1000} kB) from --plan --partitions, read back as printed")
sys.exit(1 if bad else 0)
PY
# bad input: one line, non-zero
echo '{"not": "a log"}' > $d/junk.jsonl
for a in "$d/junk.jsonl" "--labels a,b,c $d/z1.jsonl" "--trace $d/junk.jsonl" "--partitions $d/junk.jsonl"; do
  $PYTHON scripts/plot.py --out $d/bad $a > $d/bad.out 2> $d/bad.err; rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c . $d/bad.err)" -eq 1 ] && grep -q "^error: " $d/bad.err; then echo "ok   $a: $(cat $d/bad.err)"
  else echo "FAIL $a: rc $rc"; cat $d/bad.err; fails=$((fails+1)); fi
done
echo "$fails failure(s)"
[ $fails -eq 0 ]
