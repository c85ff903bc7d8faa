#!/usr/bin/env bash
# Defaults that name files (the embedded data set, the tokenizer) are relative paths: started
# from another directory, the trainer finds them next to itself; where neither place has them,
# one line says where it looked (an error for the training data, a note for the tokenizer, whose
# absence only turns samples into token ids). Paths given as options are taken as given.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
make -s train_gpt_cpu || exit 1
new_scratch default_paths
repo=$PWD
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
quick="--steps 1 --batch 1 --seq-len 16 --val-steps 1 --sample-len 8"
mkdir -p $d/elsewhere $d/bin && cp train_gpt_cpu $d/bin/ && cd $d/elsewhere || exit 1

echo "== the repository's binary, started elsewhere"
$repo/train_gpt_cpu $quick --val-every 1 --sample-every 1 > found.out 2> found.err || { cat found.err; fail "run from elsewhere"; }
grep -E "^\| (train data|val data|train tokens)" found.out
grep -q "^| train data *| $repo/data/brown_train_\*.bin" found.out && grep -q "^| train tokens *| 1237371 " found.out \
  && grep -q "^| val data *| $repo/data/brown_val_\*.bin" found.out || fail "the embedded data set was not found next to the program"
grep -q "^val loss" found.out || fail "no validation"
sample=$(grep -a '^sample: ' found.out | cut -c9-); echo "sample: $sample"
echo "$sample" | grep -aq '[A-Za-z]\{3\}' || fail "the sample is not text: the tokenizer was not found"
[ -s found.err ] && { cat found.err; fail "stderr not empty"; }

echo "== a binary with no data beside it"
$repo/$d/bin/train_gpt_cpu $quick > lost.out 2> lost.err; rc=$?
cat lost.err
[ $rc -eq 1 ] && [ "$(grep -c . lost.err)" -eq 1 ] || fail "exit $rc, $(grep -c . lost.err) lines"
grep -q "^error: data/brown_train_\*.bin (the default --train-data) matches nothing in the working directory $repo/$d/elsewhere, nor next to the program in $repo/$d/bin; give --train-data$" lost.err \
  || fail "the error does not say where it looked"
$repo/$d/bin/train_gpt_cpu $quick --train-data "$repo/data/brown_train_*.bin" --val-every 0 --sample-every 1 > ids.out 2> ids.err \
  || { cat ids.err; fail "run with --train-data"; }
cat ids.err
[ "$(grep -c . ids.err)" -eq 1 ] && grep -q "^note: data/gpt2_tokenizer.bin (the default --tokenizer) matches nothing in the working directory .*, nor next to the program in $repo/$d/bin; samples print token ids$" ids.err \
  || fail "no one-line note on the tokenizer"
grep -aEq '^sample: [0-9]+( [0-9]+)+ *$' ids.out || fail "samples are not token ids"

echo "== an option is taken as given"
$repo/train_gpt_cpu $quick --train-data "data/brown_train_*.bin" > given.out 2> given.err; rc=$?
cat given.err
[ $rc -eq 1 ] && grep -q "^error: data/brown_train_\*.bin: no files match$" given.err || fail "a relative --train-data was looked for elsewhere"
echo "$fails failures"
[ $fails -eq 0 ]
