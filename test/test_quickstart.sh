#!/usr/bin/env bash
# The README's training command, shortened: ./train_gpt_cpu with its defaults (the embedded
# Brown corpus, the small model) learns (the loss falls well below the uniform 10.8 and the
# validation loss follows), validates, and prints a sample as text through the tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
. test/lib.sh; new_scratch quickstart
./train_gpt_cpu --steps 30 --val-every 30 --sample-every 30 --sample-len 24 --log $d/log.jsonl > $d/out.txt
first=$(grep '"step":1,' $d/log.jsonl | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(grep '"step":30,' $d/log.jsonl | grep -o '"loss":[0-9.]*' | cut -d: -f2)
val=$(grep '"val_loss"' $d/log.jsonl | tail -1 | grep -o '"val_loss":[0-9.]*' | cut -d: -f2)
echo "loss step 1: $first, step 30: $last, validation: $val"
awk -v a=$first -v b=$last -v v=$val 'BEGIN { exit !(a > 10.5 && b < 8.5 && v < 8.7) }' \
  || { echo "FAIL: the default run did not learn"; exit 1; }
sample=$(grep '^sample: ' $d/out.txt | tail -1 | cut -c9-)
echo "sample: $sample"
# text, not token ids: letters, and not just digits and spaces
grep -q '[A-Za-z]\{3\}' <<<"$sample" || { echo "FAIL: the sample is not text"; exit 1; }
grep -q "train tokens       | 1237371" $d/out.txt || { echo "FAIL: not the embedded training set"; exit 1; }
