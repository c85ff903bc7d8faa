#!/usr/bin/env bash
# fetch_ds_examples.sh [SOURCE] [--check]: the DeepSpeed configs of DeepSpeedExamples at a pinned
# commit, copied into test/ds_examples/ under their own paths (test_ds_examples.sh and
# scripts/ds_examples_survey.sh run them; the copies are committed so that the test runs offline).
# SOURCE: a clone of DeepSpeedExamples (any clone holding the commit, bare or not) or a URL to
# clone (default https://github.com/deepspeedai/DeepSpeedExamples.git; a blob-less clone, whose
# files are fetched as they are read). Which files: every *.json in the commit's tree whose text
# names train_batch_size, train_micro_batch_size_per_gpu or zero_optimization (80 at this commit;
# files over 1 MB, data rather than configs, are not read).
# --check: compare with the committed copies instead of writing them (exit 1 on any difference).
set -euo pipefail
COMMIT=45b4b7156c8794a3452a5a7d03dbd8d797068569 # "Add AutoSP example (#999)", 2026-03-29
cd "$(dirname "$0")/.."
src=https://github.com/deepspeedai/DeepSpeedExamples.git check=0
for a in "$@"; do
  case "$a" in --check) check=1;; *) src=$a;; esac
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ds-examples.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -d "$src" ]; then repo=$src
else
  git clone --quiet --bare --filter=blob:none "$src" "$tmp/repo"
  repo=$tmp/repo
fi
git -C "$repo" cat-file -e "$COMMIT^{commit}" 2>/dev/null || { echo "error: $src does not hold commit $COMMIT" >&2; exit 1; }
out=$tmp/ds_examples
n=0
while IFS= read -r f; do
  mkdir -p "$out/$(dirname "$f")"
  git -C "$repo" show "$COMMIT:$f" > "$out/$f"
  if grep -q -E 'train_batch_size|train_micro_batch_size_per_gpu|zero_optimization' "$out/$f"; then n=$((n + 1)); else rm "$out/$f"; fi
done < <(git -C "$repo" ls-tree -r -l "$COMMIT" | awk -F'\t' '$1 ~ / blob / && $2 ~ /\.json$/ { split($1, m, " "); if (m[4] <= 1048576) print $2 }')
find "$out" -type d -empty -delete
git -C "$repo" show "$COMMIT:LICENSE" > "$out/LICENSE"
if [ $check = 1 ]; then
  if diff -r -x README.md "$out" test/ds_examples > "$tmp/diff"; then echo "test/ds_examples: the $n configs of $COMMIT, unchanged"
  else cat "$tmp/diff"; echo "error: test/ds_examples differs from DeepSpeedExamples $COMMIT" >&2; exit 1; fi
else
  [ -f test/ds_examples/README.md ] && cp test/ds_examples/README.md "$out/"
  rm -rf test/ds_examples && cp -r "$out" test/ds_examples
  echo "test/ds_examples: $n configs of DeepSpeedExamples $COMMIT"
fi
