#!/usr/bin/env bash
# --plan takes exactly the trainer's options that change memory or step time, with the trainer's
# meaning and errors (issue 40: one option table for the trainer, --plan and --plan --time):
#   1. the rows of run/config.h's table that say they matter to the plan (CU_MEM / CU_TIME) are
#      the options this test lists below as changing memory or time, each for its stated reason;
#   2. for each of them --plan accepts a good value (and the value reaches the plan: its output
#      changes), and a bad value gets from --plan the very line the trainer prints (rc non-zero,
#      one line on stderr), the trainer run here on the same arguments;
#   3. the checks across options (--offload-param below stage 3, --total-batch not a
#      multiple of B x T x processes, recompute's, the model's, a --deepspeed file's conflict) give
#      the trainer's line;
#   4. every other trainer option is refused by --plan with one line naming it, every --plan-only
#      option by the trainer; --plan --help lists exactly the rows --plan takes;
#   5. --plan --time with --total-batch X equals --plan --time with --grad-accum G, where G is the
#      micro-steps the trainer itself derives from X (its resolved configuration in a real run's
#      --log), and differs from --grad-accum 1.
#   6. each binary's --plan refuses and warns as that binary's own training runs do (its
#      ConfigBuild): the GPU trainer (its CUDA emulator build, bf16) refuses LAMB and warns on
#      aio.use_gds with the very lines its training run prints, the CPU trainer does neither; the
#      bf16 build's --plan still plans fp32 and fp16 (each build of it runs one), by default bf16.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch plan_options
export OMP_NUM_THREADS=1
$PYTHON test/zero_check.py shard $d/train.bin 5000 512 1
# a checkpoint (for --init) and a sharded one (for --resume) of a small model, from the trainer
small="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2"
# shellcheck disable=SC2086
./train_gpt_cpu $small --steps 1 --val-every 0 --sample-every 0 --train-data $d/train.bin --out $d/ckpt \
  --log $d/small.jsonl > $d/ckpt.out 2>&1 || { echo "FAIL: could not make a checkpoint"; tail -3 $d/ckpt.out; exit 1; }
echo '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}' > $d/ds.json
$PYTHON - "$d" <<'PY'
import glob, json, os, re, subprocess, sys
d = sys.argv[1]
fails = []
def fail(msg): fails.append(msg); print("FAIL", msg)

# the table's rows: CO_KIND("name", KEY, uses, ...
rows = {}
for m in re.finditer(r'CO_(NUM|STR|FLAG|CHOICE)\("([a-z0-9-]+)", (\w+), ([A-Z_ |]+),', open("run/config.h").read()):
    kind, name, key, uses = m.groups()
    rows[name] = (kind, set(u.strip() for u in uses.split("|")))
if len(rows) < 70: fail(f"found only {len(rows)} rows in run/config.h")
planned = {n for n, (k, u) in rows.items() if "CU_TRAIN" in u and u & {"CU_MEM", "CU_TIME"}}
trainer_only = {n for n, (k, u) in rows.items() if u == {"CU_TRAIN"}}
plan_only = {n for n, (k, u) in rows.items() if "CU_TRAIN" not in u}

ckpt = sorted(glob.glob(f"{d}/ckpt/model_*.bin"))[-1]
# The trainer's options that change memory or step time, why, and a good value for --plan (with
# the options it needs: `need`); the plan's output must change with it.
good = {
    "init": (["--init", ckpt], ["--seq-len", "16"], "the model is the checkpoint's"),
    "resume": (["--resume", f"{d}/ckpt"], ["--seq-len", "16"], "the model is the checkpoint's"),
    "model": (["--model", "d12"], [], "the model"),
    "layers": (["--layers", "2"], [], "the model"),
    "channels": (["--channels", "64"], [], "the model"),
    "heads": (["--heads", "8"], [], "the model"),
    "max-seq-len": (["--max-seq-len", "512"], [], "wpe's rows"),
    "vocab-size": (["--vocab-size", "1000"], [], "wte's rows"),
    "batch": (["--batch", "2"], [], "activations, compute"),
    "seq-len": (["--seq-len", "32"], [], "activations, compute"),
    "total-batch": (["--total-batch", "1024"], ["--time"], "micro-steps per step: the step time"),
    "grad-accum": (["--grad-accum", "2"], ["--time"], "micro-steps per step: the step time"),
    "optimizer": (["--optimizer", "lion"], [], "optimizer state"),
    "precision": (["--precision", "bf16"], [], "bytes per element"),
    "recompute": (["--recompute", "full"], [], "activations, compute"),
    "recompute-every": (["--recompute-every", "2"], ["--recompute", "full"], "activations"),
    "cpu-checkpointing": (["--cpu-checkpointing"], ["--recompute", "full"], "where checkpoints live"),
    "trace": (["--trace", f"{d}/pred.json"], ["--time"], "the predicted step's timeline"),
    "zero-stage": (["--zero-stage", "3"], ["--world", "2"], "partitions"),
    "offload-optimizer": (["--offload-optimizer", "cpu"], ["--zero-stage", "1"], "where the state lives"),
    "offload-param": (["--offload-param", "nvme"], ["--zero-stage", "3"], "where params live (alone: DeepSpeed takes it)"),
    "offload-ratio": (["--offload-ratio", "0.5"], ["--params", "1e9", "--zero-stage", "1", "--offload-optimizer", "cpu"],
                      "Twin-Flow: the optimizer state's share on the device (a bare count plans a GPU)"),
    "offload-delayed-update": (["--offload-delayed-update"], ["--zero-stage", "1", "--offload-optimizer", "cpu"],
                               "the held gradient shard"),
    "nvme-buffers": (["--nvme-buffers", "6"], ["--zero-stage", "1", "--offload-optimizer", "nvme"], "staging"),
    "nvme-buffer-size": (["--nvme-buffer-size", "4096"], ["--zero-stage", "1", "--offload-optimizer", "nvme"], "staging"),
    "zeropp-qwz": (["--zeropp-qwz", "1"], ["--zero-stage", "3", "--world", "2"], "qwZ's message buffers"),
    "zeropp-hpz": (["--zeropp-hpz", "2"], ["--zero-stage", "3", "--world", "2"], "hpZ's secondary shard"),
    "zeropp-qgz": (["--zeropp-qgz", "4"], ["--zero-stage", "2", "--world", "2"], "qgZ's message buffers"),
    "zeropp-block": (["--zeropp-block", "1024"], ["--zero-stage", "3", "--world", "2", "--zeropp-qwz", "1"],
                     "the messages' scales"),
    "nvme-host-cache": (["--nvme-host-cache", "1e6"], ["--zero-stage", "1", "--offload-optimizer", "nvme"], "the host tier: staging, nvme"),
    "nvme-readahead": (["--nvme-readahead", "1e9"], ["--zero-stage", "1", "--offload-optimizer", "nvme"], "the read-ahead area: staging"),
    "deepspeed": (["--deepspeed", f"{d}/ds.json"], [], "the file sets stage, batch, offload, precision"),
    "strict": (["--strict"], ["--deepspeed", f"{d}/ds.json"], "decides which --deepspeed files run"),
}
if set(good) != planned:
    fail(f"rows flagged as mattering to the plan {sorted(planned)} != this test's {sorted(good)}: "
         f"extra {sorted(planned - set(good))}, missing {sorted(set(good) - planned)}")

def run(args):
    r = subprocess.run(["./train_gpt_cpu"] + args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr.strip().splitlines()
train_ctx = ["--train-data", f"{d}/train.bin", "--val-every", "0", "--sample-every", "0", "--steps", "1"]

def same_error(args, what):
    """--plan ARGS fails with the one line the trainer prints for ARGS."""
    rt, _, et = run(args + train_ctx)
    rp, out, ep = run(["--plan"] + args)
    if rt == 0 or rp == 0 or len(et) != 1 or ep != et or out:
        fail(f"{what}: {' '.join(args)}: trainer rc {rt} {et}, --plan rc {rp} {ep}")
        return False
    return True

# 2. good values accepted and used; bad ones: the trainer's line
accepted = same = 0
for name, (opt, need, why) in sorted(good.items()):
    if name not in rows: continue
    base = run(["--plan", "--json"] + need)
    r = run(["--plan", "--json"] + need + opt)
    if r[0] != 0: fail(f"--plan {' '.join(need + opt)}: rc {r[0]} {r[2]}"); continue
    accepted += 1
    if name == "trace":
        if not os.path.exists(f"{d}/pred.json"): fail("--plan --time --trace wrote no timeline")
    elif name != "strict" and r[1] == base[1]:
        fail(f"--{name} ({why}) does not change --plan's output: {' '.join(need + opt)}")
    kind = rows[name][0]
    bad = {"NUM": ["bogus", "-1e30"], "CHOICE": ["bogus"], "FLAG": []}.get(kind, [])
    if name in ("init", "resume", "deepspeed"): bad = [f"{d}/nonexistent"]
    if name == "model": bad = ["d7"]
    for b in bad:
        same += same_error(["--" + name, b] + ([] if name in ("total-batch", "grad-accum") else need), f"bad --{name}")
print(f"{accepted} options accepted by --plan and changing its output; {same} bad values refused with the trainer's line")

# 3. the checks across options
cross = [["--zero-stage", "2", "--offload-param", "cpu", "--offload-optimizer", "cpu"],  # needs stage 3
         ["--offload-optimizer", "cpu"],                             # needs a stage
         ["--zero-stage", "1", "--offload-ratio", "0.5"],            # Twin-Flow needs --offload-optimizer cpu
         ["--zero-stage", "1", "--offload-delayed-update"],          # the delayed update: cpu or nvme
         ["--total-batch", "1000"],                                  # not a multiple of 8 x 64 x 1
         ["--total-batch", "1024", "--grad-accum", "3"],             # disagree
         ["--recompute-every", "2"], ["--cpu-checkpointing"], ["--recompute", "full", "--recompute-every", "9"],
         ["--seq-len", "512"], ["--channels", "250"], ["--model", "d12", "--layers", "2"],
         ["--init", ckpt, "--model", "d12"],
         ["--deepspeed", f"{d}/ds.json", "--zero-stage", "1"],       # the file says 2
         ["--precision", "fp16", "--total-batch", "256"]]
n = sum(same_error(a, "cross-option check") for a in cross)
print(f"{n} of {len(cross)} checks across options: the trainer's line")

# 4. refusals, and --help
for name in sorted(trainer_only):
    args = ["--plan", "--" + name] + ([] if rows[name][0] == "FLAG" else ["1"])
    rc, out, err = run(args)
    if rc == 0 or len(err) != 1 or f"--{name}:" not in err[0] or "not a --plan option" not in err[0]:
        fail(f"{' '.join(args)}: rc {rc} {err}")
for name in sorted(plan_only - {"plan"}):
    args = ["--" + name] + ([] if rows[name][0] == "FLAG" else ["1"])
    rc, out, err = run(args)
    if rc == 0 or len(err) != 1 or f"--{name}: only with --plan" not in err[0]:
        fail(f"the trainer {' '.join(args)}: rc {rc} {err}")
print(f"{len(trainer_only)} trainer options refused by --plan, {len(plan_only) - 1} --plan options by the trainer")
rc, help_text, _ = run(["--plan", "--help"])
listed = set(re.findall(r"^  --([a-z0-9-]+)", help_text, re.M)) - {"help"}
if rc != 0 or listed != planned | plan_only:
    fail(f"--plan --help lists {sorted(listed ^ (planned | plan_only))} wrongly")

# 5. --total-batch X = --grad-accum G, G as the trainer derives it
small = "--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2".split()
cfg = [json.loads(l) for l in open(f"{d}/small.jsonl") if '"event":"config"' in l][0]["settings"]
X = 2 * 16 * 1 * 3  # B x T x processes x 3 micro-steps
r = subprocess.run(["./train_gpt_cpu"] + small + train_ctx + ["--total-batch", str(X), "--log", f"{d}/tb.jsonl"],
                   capture_output=True, text=True)
tb = [json.loads(l) for l in open(f"{d}/tb.jsonl") if '"event":"config"' in l][0]["settings"] if r.returncode == 0 else {}
G = tb.get("grad-accum", {}).get("value")
if G != 3 or tb["grad-accum"]["source"] != "derived" or cfg["grad-accum"]["value"] != 1:
    fail(f"the trainer derived grad-accum {G} from --total-batch {X} (rc {r.returncode} {r.stderr.strip()})")
else:
    for world in (1, 4):
        common = ["--plan", "--time", "--json", "--hardware", "a100-80gb-sxm", "--zero-stage", "2", "--world", str(world)] + small
        a = run(common + ["--total-batch", str(X * world)])
        b = run(common + ["--grad-accum", str(G)])
        one = run(common + ["--grad-accum", "1"])
        if a[0] or b[0] or a[1] != b[1] or json.loads(a[1])["step_ms"] == json.loads(one[1])["step_ms"]:
            fail(f"N={world}: --total-batch {X * world} vs --grad-accum {G}: rc {a[0]} {b[0]} {a[2]} {b[2]}, "
                 f"outputs {'equal' if a[1] == b[1] else 'differ'}")
        else:
            print(f"N={world}: --total-batch {X * world} = --grad-accum {G} (step {json.loads(a[1])['step_ms']:.3f} ms; "
                  f"one micro-step {json.loads(one[1])['step_ms']:.3f} ms)")
print(f"{len(fails)} failure(s)")
sys.exit(1 if fails else 0)
PY
rc=$?

# 6. --plan with the binary's own build
make -s test/bin/train_gpt_emu_bf16 || exit 1
gpu=test/bin/train_gpt_emu_bf16
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
echo '{"train_micro_batch_size_per_gpu": "auto", "aio": {"use_gds": true}}' > $d/gds.json
train=(--train-data $d/missing_*.bin --steps 1) # a training run that stops at its data, after the options
for bin in $gpu ./train_gpt_cpu; do
  # shellcheck disable=SC2086
  $bin $small --optimizer lamb "${train[@]}" > $d/t.out 2> $d/t.err; trc=$?
  # shellcheck disable=SC2086
  $bin --plan $small --optimizer lamb > $d/p.out 2> $d/p.err; prc=$?
  tl=$(grep '^error: --optimizer' $d/t.err); pl=$(cat $d/p.err)
  if [ $bin = $gpu ]; then
    [ $trc -ne 0 ] && [ $prc -eq 1 ] && [ -n "$tl" ] && [ "$pl" = "$tl" ] \
      && echo "$bin --plan --optimizer lamb: refused as its training run is: $pl" \
      || fail "$bin --plan --optimizer lamb: rc $prc, '$pl'; its training run: rc $trc, '$tl'"
  else
    [ $prc -eq 0 ] && [ -z "$tl" ] && grep -q "LAMB" $d/p.out && echo "$bin --plan --optimizer lamb: planned, as its training runs take it" \
      || fail "$bin --plan --optimizer lamb: rc $prc, '$pl' (its training run said '$tl')"
  fi
  # shellcheck disable=SC2086
  $bin $small --deepspeed $d/gds.json "${train[@]}" > $d/t.out 2> $d/t.err
  # shellcheck disable=SC2086
  $bin --plan $small --deepspeed $d/gds.json > $d/p.out 2> $d/p.err; prc=$?
  tl=$(grep 'use_gds' $d/t.err); pl=$(grep 'use_gds' $d/p.err)
  want=0; [ $bin = $gpu ] && want=1
  if [ $prc -eq 0 ] && [ "$pl" = "$tl" ] && [ "$(echo -n "$pl" | grep -c '^warning: .*aio.use_gds: true: GPUDirect Storage is not implemented')" = $want ]; then
    echo "$bin --plan, aio.use_gds true: ${pl:-no warning}, as its training run"
  else
    fail "$bin --plan, aio.use_gds true: rc $prc, '$pl'; its training run: '$tl'"
  fi
done
for p in fp32 bf16 fp16 default; do
  arg=(--precision $p); [ $p = default ] && arg=()
  # shellcheck disable=SC2086
  line=$($gpu --plan $small "${arg[@]}" 2> $d/p.err | grep '^  training')
  want=$p; [ $p = default ] && want=bf16
  echo "$line" | grep -q "^  training  $want" && [ ! -s $d/p.err ] && echo "$gpu --plan ${arg[*]}: $line" \
    || fail "$gpu --plan ${arg[*]}: '$line' $(cat $d/p.err)"
done
# ... while its training runs refuse the precisions it was not built for
# shellcheck disable=SC2086
$gpu $small --precision fp32 "${train[@]}" > $d/t.out 2> $d/t.err \
  && fail "$gpu trained --precision fp32" || grep -q "^error: --precision fp32: this binary was built for bf16" $d/t.err \
  || fail "$gpu --precision fp32: $(cat $d/t.err)"
echo "$fails failure(s) in 6"
[ $rc -eq 0 ] && [ $fails -eq 0 ]
