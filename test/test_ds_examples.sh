#!/usr/bin/env bash
# DeepSpeed configs as people write them (issue 45): the 80 of DeepSpeedExamples (test/ds_examples,
# commit 45b4b71), each given to the CPU trainer as scripts/ds_examples_survey.sh does.
#  1. Every one through --plan (the trainer's own resolution: ds_config_apply and config_validate,
#     the same error and warning lines as a training run): each is refused only for a feature
#     this trainer does not implement, named in its error (templates that are not JSON, DeepSpeed
#     Compression, the 1-bit and 0/1 optimizers, data efficiency, progressive layer drop, ZenFlow,
#     16-bit master weights, the autotuner, BERT's sparse attention), never for anything else
#     (a batch default, an unknown key, LAMB, offload_param without offload_optimizer: those
#     train); the counts are asserted, and at least 90% of those that train print no warning (the
#     two that warn are named: tensor and sequence parallelism; SGLang's aio.use_gds true is what
#     the CPU trainer's direct I/O does).
#  2. Each that plans is trained for one step on a tiny model (a 512-token vocabulary and 4 tokens
#     per sequence, so that a config's own batch, up to 256 sequences, stays small), two at a time:
#     it must train, and print the error and warning lines the plan printed.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch ds_examples
export OMP_NUM_THREADS=1 # one step of a tiny model: threads only wait for each other
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

echo "== 1. the 80 configs through --plan"
OUT=$d/plan bash scripts/ds_examples_survey.sh --plan > $d/plan.txt 2>&1 || { cat $d/plan.txt; fail "the survey"; }
S=$d/plan/summary.tsv
[ "$(grep -c . $S)" = 80 ] || fail "expected 80 configs, got $(grep -c . $S)"
count() { awk -F'\t' -v c="$1" -v r="$2" '$1 == c && (r == "" || $2 == r)' $S | grep -c .; }
# reason: how many are refused for it
while read -r reason want; do
  got=$(count refused "$reason")
  [ "$got" = "$want" ] && echo "ok   $got refused: $reason" || fail "$got refused for $reason, expected $want"
done <<'EOF'
not-json 6
compression 13
1-bit-0/1-optimizer 18
data-efficiency 4
autotuning 6
progressive-layer-drop 1
zenflow 1
bf16-master-weights 1
lamb 0
offload-param-alone 0
sparse-attention 1
EOF
awk -F'\t' '$1 == "refused" && $2 == "other" || $1 == "timeout"' $S | while IFS=$'\t' read -r c r f line; do
  echo "FAIL $f: $c for something this survey did not expect: $line"; done | tee $d/other.txt
[ -s $d/other.txt ] && fails=$((fails + 1))
grep -q 'train_batch_size.*multiple\|--batch' $S && fail "a refusal over the batch: $(grep -m1 'multiple\|--batch' $S)"
trains=$(count trains ""); warns=$(count warns "")
[ $((trains + warns)) = 29 ] && echo "ok   $((trains + warns)) train (4 of them LAMB's or offload_param alone's)" \
  || fail "$((trains + warns)) train, expected 29"
[ "$(awk -F'\t' '$1 == "warns" { print $3 }' $S | tr '\n' ' ')" = \
  "benchmarks/autosp/configs/autosp_config.json training/tensor_parallel/hf_integration/configs/ds_config.json " ] \
  && echo "ok   2 warn: AutoSP's sequence_parallel_size 2, AutoTP's tensor_parallel.autotp_size 4" \
  || fail "those that warn: $(awk -F'\t' '$1 == "warns" { print $3 ": " $4 }' $S)"
[ $((100 * trains)) -ge $((90 * (trains + warns))) ] && echo "ok   $trains of the $((trains + warns)) that train print no warning" \
  || fail "only $trains of the $((trains + warns)) that train print no warning (at least 90%)"
# a foreign key (ImageNet's cuda_visible_devices) is a note, not a warning
grep -q "^note: .*cuda_visible_devices: not a DeepSpeed key; ignored" $d/plan/training_imagenet_config_ds_config.json.err \
  && echo "ok   ImageNet's cuda_visible_devices: a note" || fail "ImageNet's cuda_visible_devices: $(cat $d/plan/training_imagenet_config_ds_config.json.err)"

echo "== 2. one training step of each that plans"
mkdir -p $d/run
${PYTHON:-/usr/bin/python3} test/zero_check.py shard $d/train.bin 20000 512 1
awk -F'\t' '$1 == "trains" || $1 == "warns" { print $3 }' $S > $d/trainable.txt
# a config whose own batch is over 1024 sequences (LAMB's 64k, once it trains) is left to the survey
# (one Python for all of them)
${PYTHON:-/usr/bin/python3} - $d/trainable.txt > $d/run.txt <<'PY'
import json, sys
for f in open(sys.argv[1]).read().splitlines():
    b = json.load(open("test/ds_examples/" + f)).get("train_batch_size")
    if not (isinstance(b, int) and b > 1024): print(f)
    else: print(f"(left to the survey, its batch is over 1024 sequences: {f})", file=sys.stderr)
PY
# a config that names an NVMe directory (SGLang's /local_nvme/sglang) runs with it pointed into
# the scratch directory, as a user points it at a disk of theirs (the file otherwise unchanged)
mkdir -p $d/cfg $d/nvme
run_one() {
  local f=$1 n cfg; n=$(echo "$1" | tr / _); cfg="test/ds_examples/$f"
  if grep -q '"nvme_path"' "$cfg"; then
    ${PYTHON:-/usr/bin/python3} - "$cfg" "$d/cfg/$n" "$d/nvme/$n" <<'PY'
import json, sys
def point(v):
    if isinstance(v, dict): return {k: (sys.argv[3] if k == "nvme_path" else point(x)) for k, x in v.items()}
    return [point(x) for x in v] if isinstance(v, list) else v
json.dump(point(json.load(open(sys.argv[1]))), open(sys.argv[2], "w"), indent=1)
PY
    mkdir -p "$d/nvme/$n"; cfg="$d/cfg/$n"
  fi
  ./train_gpt_cpu --deepspeed "$cfg" --layers 1 --channels 32 --heads 1 --vocab-size 512 \
    --max-seq-len 8 --seq-len 4 --train-data "$d/train.bin" --steps 1 --val-every 0 --sample-every 0 --log "$d/run/$n.jsonl" > "$d/run/$n.out" 2> "$d/run/$n.err"
  echo $? > "$d/run/$n.rc"
}
export -f run_one; export d
xargs -P 2 -I{} bash -c 'run_one "$@"' _ {} < $d/run.txt
ran=0
while read -r f; do
  n=$(echo "$f" | tr / _)
  if [ "$(cat $d/run/$n.rc)" != 0 ]; then fail "$f did not train: $(grep -m1 . $d/run/$n.err)"; continue; fi
  grep -q '"step":1,' $d/run/$n.jsonl || { fail "$f: no step 1 in its log"; continue; }
  # the same lines as the plan (the file name is the same; the plan's ran with another model)
  diff <(grep -e '^error:' -e '^warning:' -e '^note: test' $d/plan/$n.err) \
       <(grep -e '^error:' -e '^warning:' -e '^note: test' $d/run/$n.err) > /dev/null \
    || { fail "$f: the training run's messages differ from the plan's: $(cat $d/run/$n.err)"; continue; }
  ran=$((ran + 1))
done < $d/run.txt
[ "$ran" = "$(grep -c . $d/run.txt)" ] && echo "ok   all $ran trained one step, with the plan's messages"

[ $fails = 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
