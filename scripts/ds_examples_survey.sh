#!/usr/bin/env bash
# ds_examples_survey.sh [--plan] [--seq-len T] [DIR [BINARY]]: gives every *.json under DIR
# (default test/ds_examples: DeepSpeedExamples' 80 DeepSpeed configs, scripts/fetch_ds_examples.sh)
# to the CPU trainer on a small model for one step, as docs/deepspeed_config.md's survey did:
#   BINARY --deepspeed FILE --layers 2 --channels 64 --heads 2 --max-seq-len 64 --seq-len T
#          --steps 1 --val-every 0 --sample-every 0      (T: 32 unless --seq-len says)
# and sorts each into: trains (no "warning:" line), warns (trains, with one), or refused, with the
# reason its first error line gives (the categories below; "other" is one this survey did not
# expect). --plan: BINARY --plan with the same options instead of a step: the same resolution and
# the same error and warning lines (ds_config_apply and config_validate), in seconds instead of
# minutes (a config's own batch, e.g. 4096 sequences, makes its step long), so a training step is
# not checked. Prints one line per file (class, reason, file, first error or warning line), then
# the counts; writes them to $OUT (default a new directory under $TMPDIR) as summary.tsv.
# Run it from the repository root (the default data is under data/).
set -u
plan=0 T=32
while [ $# -gt 0 ]; do
  case "$1" in
    --plan) plan=1; shift;;
    --seq-len) T=$2; shift 2;;
    *) break;;
  esac
done
dir=${1:-test/ds_examples}; bin=${2:-./train_gpt_cpu}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ds-survey.XXXXXX")}
mkdir -p "$out"
args=(--layers 2 --channels 64 --heads 2 --max-seq-len 64 --seq-len "$T")
if [ $plan = 1 ]; then args+=(--plan); else args+=(--steps 1 --val-every 0 --sample-every 0); fi
# the reason a refusal gives, from its first error line
reason() {
  case "$1" in
    '') echo "-";;
    *"not valid JSON"*) echo "not-json";;
    *compression_training*) echo "compression";;
    *'"OnebitAdam"'*|*'"OneBitAdam"'*|*'"ZeroOneAdam"'*|*'"OneBitLamb"'*) echo "1-bit-0/1-optimizer";;
    *'optimizer.type'*'"Lamb"'*) echo "lamb";;
    *"--offload-param"*"needs --offload-optimizer"*) echo "offload-param-alone";;
    *data_efficiency*) echo "data-efficiency";;
    *progressive_layer_drop*) echo "progressive-layer-drop";;
    *sparse_attention*) echo "sparse-attention";;
    *zenflow*) echo "zenflow";;
    *bf16_master_weights_and_grads*) echo "bf16-master-weights";;
    *"autotuning:"*) echo "autotuning";;
    *) echo "other";;
  esac
}
find "$dir" -name '*.json' | LC_ALL=C sort | while IFS= read -r f; do
  n=${f#"$dir"/}; o="$out/$(echo "$n" | tr / _)"
  timeout 300 "$bin" --deepspeed "$f" "${args[@]}" > "$o.out" 2> "$o.err"
  rc=$?
  w=$(grep -c '^warning:' "$o.err")
  first=$(grep -m1 -e '^error:' -e '^warning:' "$o.err" | sed "s#$dir/##")
  if [ $rc = 0 ]; then [ "$w" = 0 ] && cls=trains || cls=warns; r=-
  elif [ $rc = 124 ]; then cls=timeout; r=-
  else cls=refused; r=$(reason "$(grep -m1 '^error:' "$o.err")"); fi
  printf '%s\t%s\t%s\t%s\n' "$cls" "$r" "$n" "$first"
done | tee "$out/summary.tsv"
echo
awk -F'\t' '{ c[$1 ($1 == "refused" ? " " $2 : "")]++ } END { for (k in c) printf "%4d %s\n", c[k], k }' "$out/summary.tsv" | sort -k2
t=$(grep -c '^trains' "$out/summary.tsv"); w=$(grep -c '^warns' "$out/summary.tsv")
[ $((t + w)) -gt 0 ] && echo "$t of the $((t + w)) that train print no warning ($((100 * t / (t + w)))%)"
echo "(outputs in $out)"
