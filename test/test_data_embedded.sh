#!/usr/bin/env bash
# The committed default data set (data/brown_*.bin, data/gpt2_tokenizer.bin) is
# what the README's training command reads with no network: check it against
# facts about the Brown corpus and GPT-2, reading the files with Python (not with
# our C headers), then serve a full epoch of it through the sanitized loader.
set -eu
cd "$(dirname "$0")/.."
make -s test/bin/tokenizer_roundtrip_asan test/bin/dataloader_cli_asan
test/bin/tokenizer_roundtrip_asan facts data/gpt2_tokenizer.bin

"$PYTHON" - <<'PY'
import glob, struct, sys
docs = 0; total = 0
for split in ("val", "train"):
    files = sorted(glob.glob(f"data/brown_{split}_*.bin"))
    assert files, f"no {split} shards"
    for i, name in enumerate(files):
        data = open(name, "rb").read()
        magic, version, n = struct.unpack_from("<3i", data)
        assert (magic, version) == (20240520, 1), name
        assert len(data) == 1024 + 2 * n, f"{name}: size disagrees with header"
        toks = struct.unpack_from(f"<{n}H", data, 1024)
        assert max(toks) <= 50256, f"{name}: token out of vocab"
        # Documents flow across shards, but each split's first shard starts one.
        if i == 0: assert toks[0] == 50256, f"{name}: does not start with end-of-text"
        docs += toks.count(50256); total += n
    print(f"{split}: {len(files)} shards")
# The Brown corpus is 500 texts, each one document; the val split holds 25 (5%).
assert docs == 500, f"{docs} documents, expected 500"
assert len(glob.glob("data/brown_train_*.bin")) >= 2, "want several train shards to exercise globbing"
print(f"{docs} documents, {total} tokens")
PY

# The first train document is text ca01, which famously begins this way.
"$PYTHON" - <<'PY' >"${TMPDIR:-/tmp}/zero_ids.$$"
import struct
data = open("data/brown_train_000000.bin", "rb").read()
print(*struct.unpack_from("<12H", data, 1024 + 2))
PY
got=$(test/bin/tokenizer_roundtrip_asan decode data/gpt2_tokenizer.bin "${TMPDIR:-/tmp}/zero_ids.$$")
rm -f "${TMPDIR:-/tmp}/zero_ids.$$"
want="The Fulton County Grand Jury said Friday an investigation of Atlanta's"
[ "$got" = "$want" ] || { echo "first train document starts \"$got\", expected \"$want\""; exit 1; }
echo "first document: $got"

# One epoch of each split through the loader, with the real vocab size (B=4, T=64).
test/bin/dataloader_cli_asan "data/brown_train_*.bin" 4 64 --shuffle 1337
test/bin/dataloader_cli_asan "data/brown_val_*.bin" 4 64
