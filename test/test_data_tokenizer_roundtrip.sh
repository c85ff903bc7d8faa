#!/usr/bin/env bash
# Decoding with tokenizer.h must give back, byte for byte, text that tiktoken
# (the reference GPT-2 BPE) encoded: Unicode split across tokens, whitespace runs,
# contractions, digits. And the committed val shard, decoded and re-encoded by
# tiktoken, must give the shard's tokens back. Needs node and data/node_modules.
set -eu
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! [ -d data/node_modules/tiktoken ]; then
  [ -f data/package-lock.json ] && command -v npm >/dev/null && npm ci --prefix data --no-audit --no-fund >/dev/null 2>&1 || true
fi
if ! command -v node >/dev/null || ! [ -d data/node_modules/tiktoken ]; then
  echo "skip: needs node and the npm packages in data/ (npm ci --prefix data)"; exit 77
fi
make -s test/bin/tokenizer_roundtrip_asan
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT

node test/tiktoken_helper.mjs encode "$d/text" "$d/ids"
test/bin/tokenizer_roundtrip_asan decode data/gpt2_tokenizer.bin "$d/ids" >"$d/decoded"
cmp "$d/text" "$d/decoded"
echo "varied text: $(wc -c <"$d/text") bytes, $(wc -w <"$d/ids") tokens, decoded byte-exact"

test/bin/tokenizer_roundtrip_asan shard data/gpt2_tokenizer.bin data/brown_val_000000.bin >"$d/val.txt"
node test/tiktoken_helper.mjs reencode "$d/val.txt" data/brown_val_000000.bin
