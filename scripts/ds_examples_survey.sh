#!/usr/bin/env bash
# ds_examples_survey.sh DIR [BINARY]: runs every *.json in DIR (DeepSpeed configs, e.g. those of
# DeepSpeedExamples, collected by hand: none are kept in this repository) through the CPU trainer
# for one step on a small model, as docs/deepspeed_config.md's survey did, and counts: trains
# (nothing on stderr), trains with warnings, refused (with the first error line). Run it from
# the repository root (the default data is under data/).
set -u
dir=$1; bin=${2:-./train_gpt_cpu}
out=$(mktemp -d "${TMPDIR:-/tmp}/ds-survey.XXXXXX")
for f in "$dir"/*.json; do
  n=$(basename "$f")
  timeout 120 "$bin" --deepspeed "$f" --layers 2 --channels 64 --heads 2 --max-seq-len 64 --seq-len 32 --steps 1 \
    --val-every 0 --sample-every 0 > "$out/$n.out" 2> "$out/$n.err"
  rc=$?
  w=$(grep -c '^warning:' "$out/$n.err")
  if [ $rc = 0 ]; then [ "$w" = 0 ] && cls=trains || cls=warns; elif [ $rc = 124 ]; then cls=timeout; else cls=refused; fi
  printf '%s\t%s\t%s\n' "$cls" "$n" "$(grep -m1 -e '^error:' -e '^warning:' "$out/$n.err" | sed "s#$dir/##")"
done | tee "$out/summary.tsv"
echo; cut -f1 "$out/summary.tsv" | sort | uniq -c; echo "(outputs in $out)"
