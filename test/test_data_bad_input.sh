#!/usr/bin/env bash
# Every kind of bad shard input must end in exit status != 0 and exactly one
# stderr line "error: <name>: <reason>" naming the offending file (or the glob),
# never a crash or a silently wrong batch. Runs the sanitized loader so a crash
# or an out-of-bounds read would also fail the test.
set -u
cd "$(dirname "$0")/.."
make -s test/bin/dataloader_cli_asan || exit 1
cli=test/bin/dataloader_cli_asan
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT

# shard NAME COUNT_IN_HEADER NTOKENS [MAGIC VERSION [BADTOKEN_AT]] -> a shard file with tokens 0,1,2,...
shard() {
  "$PYTHON" - "$@" <<'EOF'
import struct, sys
name, count, ntok = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
magic = int(sys.argv[4]) if len(sys.argv) > 4 else 20240520
version = int(sys.argv[5]) if len(sys.argv) > 5 else 1
bad = int(sys.argv[6]) if len(sys.argv) > 6 else -1
toks = [i % 50000 for i in range(ntok)]
if bad >= 0: toks[bad] = 60000
with open(name, "wb") as f:
    f.write(struct.pack("<256i", magic, version, count, *([0] * 253)))
    f.write(struct.pack("<%dH" % ntok, *toks))
EOF
}

fails=0
# expect_error DESCRIPTION NAME_IN_MESSAGE -- command...
expect_error() {
  local what=$1 name=$2; shift 3
  "$@" >"$d/out" 2>"$d/err"; local rc=$?
  local lines; lines=$(wc -l <"$d/err")
  if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q "^error: $name: " "$d/err"; then
    echo "FAIL $what: rc=$rc, $lines stderr lines:"; sed 's/^/    /' "$d/err"; fails=$((fails+1))
  else
    echo "ok   $what: $(cat "$d/err")"
  fi
}

shard "$d/good_000.bin" 1000 1000
shard "$d/good_001.bin" 1000 1000
out=$($cli "$d/good_*.bin" 4 64) || { echo "FAIL good shards rejected"; exit 1; }
echo "ok   good shards: $out"

shard "$d/magic.bin" 1000 1000 20240328
expect_error "wrong magic" "$d/magic.bin" -- $cli "$d/magic.bin" 4 64
shard "$d/version.bin" 1000 1000 20240520 2
expect_error "wrong version" "$d/version.bin" -- $cli "$d/version.bin" 4 64
shard "$d/long.bin" 1000 999
expect_error "header count > file" "$d/long.bin" -- $cli "$d/long.bin" 4 64
shard "$d/short.bin" 1000 1001
expect_error "header count < file" "$d/short.bin" -- $cli "$d/short.bin" 4 64
shard "$d/negative.bin" -5 0
expect_error "negative count" "$d/negative.bin" -- $cli "$d/negative.bin" 4 64
shard "$d/odd.bin" 1000 1000; printf 'x' >>"$d/odd.bin"
expect_error "odd byte count" "$d/odd.bin" -- $cli "$d/odd.bin" 4 64
head -c 100 "$d/good_000.bin" >"$d/tiny.bin"
expect_error "shorter than a header" "$d/tiny.bin" -- $cli "$d/tiny.bin" 4 64
: >"$d/empty.bin"
expect_error "empty file" "$d/empty.bin" -- $cli "$d/empty.bin" 4 64
mkdir "$d/dir.bin"
expect_error "a directory" "$d/dir.bin" -- $cli "$d/dir*.bin" 4 64
expect_error "glob matches nothing" "$d/nothing_\*.bin" -- $cli "$d/nothing_*.bin" 4 64
shard "$d/seq.bin" 64 64
expect_error "shorter than one sequence" "$d/seq.bin" -- $cli "$d/seq.bin" 4 64
shard "$d/batch.bin" 200 200   # 3 sequences of 65 tokens, batch wants 4
expect_error "shorter than one batch" "$d/batch.bin" -- $cli "$d/batch.bin" 4 64
expect_error "shorter than one global batch" "$d/good_\*.bin" -- $cli "$d/good_*.bin" 4 64 --world 8 --rank 0
# The bad token sits in the last sequence (tokens 896..960 for T=64), after good
# batches have been served. (A token in the unused tail past 960 is never read.)
shard "$d/token.bin" 1000 1000 20240520 1 950
expect_error "token id >= vocab" "$d/token.bin" -- $cli "$d/token.bin" 1 64
grep -q "token 950 " "$d/err" || { echo "FAIL the message should give the token's position"; fails=$((fails+1)); }
shard "$d/t_000.bin" 1000 1000; shard "$d/t_001.bin" 1000 1000 20240520 1 0
expect_error "bad token in 2nd shard, shuffled" "$d/t_001.bin" -- $cli "$d/t_*.bin" 2 16 --shuffle 1
expect_error "vocab smaller than the data" "$d/good_000.bin" -- $cli "$d/good_000.bin" 4 64 --vocab 100
expect_error "bad arguments" "$d/good_000.bin" -- $cli "$d/good_000.bin" 0 64
# One bad shard among good ones is named, not the glob.
shard "$d/mix_000.bin" 1000 1000; shard "$d/mix_001.bin" 1000 1000 7
expect_error "one bad shard among good" "$d/mix_001.bin" -- $cli "$d/mix_*.bin" 4 64

[ $fails -eq 0 ] || { echo "$fails bad-input cases misbehaved"; exit 1; }
echo "all bad-input cases give one error line naming the file"
