#!/usr/bin/env bash
# The batch triple of a --deepspeed file against DeepSpeed's own rules: every combination of
# train_batch_size / train_micro_batch_size_per_gpu / gradient_accumulation_steps absent, "auto" or
# a number, with and without --batch / --grad-accum / --total-batch typed on the command line, on
# 1, 2 and 3 processes. The expected triple (or error) comes from the Python below, written from
# DeepSpeed's DeepSpeedConfig._set_batch_related_parameters and _batch_assertion
# (deepspeed/runtime/config.py) and the command-line rules of docs/deepspeed_config.md; the
# trainer's resolution (test/ds_batch_cli.c: config_parse, ds_config_apply, config_validate, as the
# trainer runs them) must give the same micro batch, accumulation and tokens per step, or an error
# (one line) exactly where the rules say so. Then the same for the triple of each of
# DeepSpeedExamples' configs (test/ds_examples) on 1, 2, 4 and 8 processes.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s test/bin/ds_batch_cli || exit 1
. test/lib.sh; new_scratch ds_batch
PYTHON=${PYTHON:-python3}
$PYTHON - "$d" <<'PY'
import itertools, json, os, subprocess, sys
d = sys.argv[1]
T = 16          # --seq-len in every case below
DEFAULT_B = 8   # --batch's default

def deepspeed(tb, mb, ga, world):
    """DeepSpeed's resolution: None is a key DeepSpeed was not given. Returns (tb, mb, ga) or raises."""
    if tb is not None and mb is not None and ga is not None:
        pass
    elif tb is not None and mb is not None:
        ga = tb // mb
        ga //= world
    elif tb is not None and ga is not None:
        mb = tb // world
        mb //= ga
    elif mb is not None and ga is not None:
        tb = mb * ga * world
    elif tb is not None:
        ga = 1
        mb = tb // world
    elif mb is not None:
        tb = mb * world
        ga = 1
    else:
        raise AssertionError("Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided")
    if not (tb > 0 and mb > 0 and ga > 0 and tb == mb * ga * world):
        raise AssertionError("batch assertion")
    return tb, mb, ga

def expected(file, cli, world):
    """file: key -> None (absent), "auto" or a number; cli: option -> typed value (absent: not typed).
    The command line's rules: a number in the file against a different typed value is an error; a
    typed value stands in for a key the file leaves out or makes "auto"; the command line's defaults
    never do, except that "auto" for the micro batch takes --batch's value, typed or default; with
    neither train_batch_size nor the micro batch known (DeepSpeed refuses) the micro batch is --batch's
    default. --total-batch counts tokens: train_batch_size x --seq-len."""
    tb, mb, ga = file["train_batch_size"], file["train_micro_batch_size_per_gpu"], file["gradient_accumulation_steps"]
    if "total-batch" in cli and cli["total-batch"] % T:
        return None
    if isinstance(mb, int) and "batch" in cli and cli["batch"] != mb: return None
    if isinstance(ga, int) and "grad-accum" in cli and cli["grad-accum"] != ga: return None
    if isinstance(tb, int) and "total-batch" in cli and cli["total-batch"] != tb * T: return None
    known = lambda v, opt, scale=1: v if isinstance(v, int) else (cli[opt] // scale if opt in cli else None)
    ktb, kmb, kga = known(tb, "total-batch", T), known(mb, "batch"), known(ga, "grad-accum")
    if kmb is None and mb == "auto": kmb = DEFAULT_B
    if ktb is None and kmb is None: kmb = DEFAULT_B
    try:
        rtb, rmb, rga = deepspeed(ktb, kmb, kga, world)
    except AssertionError:
        return None
    return (rmb, rga, rtb * T)

states = {"train_batch_size": [None, "auto", 1, 12, 30],
          "train_micro_batch_size_per_gpu": [None, "auto", 2, 4],
          "gradient_accumulation_steps": [None, "auto", 1, 3]}
clis = [{}, {"batch": 2}, {"batch": 3}, {"grad-accum": 3}, {"total-batch": 12 * T}, {"total-batch": 20},
        {"batch": 2, "grad-accum": 3}, {"batch": 2, "total-batch": 12 * T}, {"grad-accum": 3, "total-batch": 12 * T},
        {"batch": 2, "grad-accum": 3, "total-batch": 12 * T}]
cases = ok = errors = 0
fails = []
for vals in itertools.product(*states.values()):
    file = dict(zip(states.keys(), vals))
    text = json.dumps({k: v for k, v in file.items() if v is not None})
    path = os.path.join(d, "c.json")
    with open(path, "w") as f:
        f.write(text)
    for cli in clis:
        for world in (1, 2, 3):
            args = ["test/bin/ds_batch_cli", str(world), path, "--seq-len", str(T)]
            for k, v in cli.items():
                args += ["--" + k, str(v)]
            p = subprocess.run(args, capture_output=True, text=True)
            want = expected(file, cli, world)
            cases += 1
            if want is None:
                errors += 1
                lines = [l for l in p.stderr.splitlines() if l.strip()]
                good = p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ")
            else:
                got = tuple(int(x) for x in p.stdout.split()) if p.returncode == 0 else None
                good = got == want
            if good:
                ok += 1
            else:
                fails.append(f"{text} {' '.join(args[5:])} world {world}: expected {want or 'an error'}, "
                             f"got rc={p.returncode} {p.stdout.strip()} {p.stderr.strip()}")
for f in fails[:30]:
    print("FAIL", f)
print(f"{ok} of {cases} cases agree with DeepSpeed's rules ({errors} of them errors)")
# DeepSpeedExamples' own triples (test/ds_examples, those that are JSON): each file's three keys
# as it writes them (a number, "auto" or absent; the rest of the file is left out, since many are
# refused for a feature), resolved on 1, 2, 4 and 8 processes with nothing typed
examples = agree = 0
n0 = len(fails)
for root, _, names in sorted(os.walk("test/ds_examples")):
    for name in sorted(names):
        if not name.endswith(".json"):
            continue
        try:
            cfg = json.load(open(os.path.join(root, name)))
        except ValueError:
            continue
        file = {k: cfg.get(k) for k in states}
        text = json.dumps({k: v for k, v in file.items() if v is not None})
        path = os.path.join(d, "example.json")
        with open(path, "w") as f:
            f.write(text)
        for world in (1, 2, 4, 8):
            p = subprocess.run(["test/bin/ds_batch_cli", str(world), path, "--seq-len", str(T)], capture_output=True, text=True)
            want = expected(file, {}, world)
            got = tuple(int(x) for x in p.stdout.split()) if p.returncode == 0 else None
            lines = [l for l in p.stderr.splitlines() if l.strip()]
            good = got == want if want else (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "))
            examples += 1
            if good:
                agree += 1
            else:
                fails.append(f"{os.path.join(root, name)} ({text}) world {world}: expected {want or 'an error'}, "
                             f"got rc={p.returncode} {p.stdout.strip()} {p.stderr.strip()}")
for f in fails[n0:n0 + 10]:
    print("FAIL", f)
print(f"DeepSpeedExamples' triples: {agree} of {examples} (file, world size) agree with DeepSpeed's rules")
# the issue's case: train_batch_size alone, --batch's default 8 must not outrank it
for world, want in ((1, (1, 1, 16)), (2, None)):
    with open(os.path.join(d, "tb1.json"), "w") as f:
        f.write('{"train_batch_size": 1}')
    if expected({"train_batch_size": 1, "train_micro_batch_size_per_gpu": None, "gradient_accumulation_steps": None},
                {}, world) != want:
        print("FAIL the model itself: train_batch_size 1 on", world); fails.append("model")
sys.exit(1 if fails else 0)
PY
