#!/usr/bin/env bash
# ZeRO-Infinity: the optimizer state (and at stage 3 the parameters) in files under --nvme-path,
# streamed with direct I/O (zero.h, core/nvme.h).
#   1. NVMe = memory, bit for bit (losses, gradient norms, the checkpoint's weights and optimizer
#      state), 2 ranks of the CPU trainer: bf16 and fp32 at stages 1-3 (stage 3 with the parameters
#      on NVMe too), fp16 at stage 2; small pieces (2048 elements) and 2 or 5 buffer sets, so the
#      read-ahead and write-behind wrap around many times a step; three of them also with a
#      read-ahead area (--nvme-readahead: part of the pieces, and all of them), whose reads
#      count in the log's nvme_ahead (without one: exactly the first --nvme-buffers pieces). The scratch directories are gone
#      after a clean exit; the memory log's nvme bytes equal the planner's (--plan --json) and
#      the files' sizes while it runs. offload_param alone (stage 3, bf16 and fp32, on NVMe and on
#      the host: here a note that it moves nothing) equals memory too, planned to the byte.
#      Across the step boundary at stage 3 (4 layers): NVMe = memory, and the parameter bytes read
#      per step equal a model of the gather schedule's less what the update leaves in the gather
#      slots (also with 3 layers and 2 micro-steps); with writes slowed down (a test knob), so
#      that a parameter read not waiting for its unit's write in flight reads stale bytes.
#   1b. The host tier (--nvme-host-cache): budgets part (~40% of the optimizer state) and all,
#      bf16 ZeRO-1, fp32 ZeRO-3 with parameters on NVMe, fp16 ZeRO-2: bit for bit equal to memory
#      as above (the update reads the next step's first pieces ahead across the step boundary in
#      every NVMe run); the NVMe bytes fall by the cached share, the planner's nvme and staging
#      equal the memory log's, all cached reads nothing (the part run with a read-ahead area
#      too); both budgets auto, and the read-ahead alone, run and log the bytes they allocate; a
#      bad budget is one line.
#   2. The GPU trainer on the CUDA emulator (host staging between NVMe and the device), 2 ranks:
#      bf16 ZeRO-2, fp16 ZeRO-3 with parameters on NVMe, fp32 ZeRO-1 (and again with a host tier and
#      a read-ahead area: fewer bytes read, some of them ahead): equal to no offload.
#   3. Resume across placements: saved with NVMe, resumed in memory, and the reverse (to another
#      path): the resumed steps equal the uninterrupted run's.
#   4. kill -9 mid-run (ZeRO-3 with the parameters on NVMe, a host tier and the next update's reads
#      ahead into a read-ahead area: the update's writes drain behind the next step, so the kill
#      lands during some), then --resume: the checkpoint loads, the killed run's scratch
#      directories are removed (a note says so), and the resumed steps equal the uninterrupted run's.
#   5. Faults, each one line naming the path and a non-zero exit: a missing --nvme-path, a file
#      given for it, a read-only filesystem, a filesystem without the planned bytes free (a 1 MB
#      tmpfs in a private mount namespace); a file deleted, and one truncated, under a running job.
#      A ramfs (no O_DIRECT; tmpfs takes it since Linux 6.6) runs with a note, bitwise the same.
#   6. A DeepSpeed file with offload_optimizer/offload_param on nvme, buffer_count, buffer_size and
#      an aio section runs as given and equals the command line's run; one with only offload_param
#      runs with the optimizer in memory and equals the run without offload.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX # see test_gpu_emu.sh
fi
make -s train_gpt_cpu test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_fp16 test/bin/train_gpt_emu_fp32 || { echo "FAIL: build"; exit 1; }
d=$(mktemp -d "${TMPDIR:-/tmp}/test_nvme.XXXXXX"); trap 'pkill -9 -f "$d/" 2>/dev/null; rm -rf "$d"' EXIT
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
model="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
run="--seq-len 16 --batch 2 --val-every 0 --sample-every 0 --train-data $d/train.bin --seed 3"
common="$model $run"
cpu() { timeout 300 mpirun -np 2 --oversubscribe ./train_gpt_cpu "$@"; }
emu() { local p=$1; shift; timeout 600 mpirun -np 2 --oversubscribe test/bin/train_gpt_emu_$p "$@"; }
losses() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
. test/lib.sh
steps() { log_steps "$1"; } # loss, lr, grad_norm (and the fp16 scaler's state)
same_steps() { local a b; a=$(steps "$1"); b=$(steps "$2"); [ -n "$a" ] && [ "$a" = "$b" ]; }
same_ckpt() { # every file of two --out directories
  local f ok=1
  for f in $(cd "$1" && ls model_*.bin step_*/*.bin 2>/dev/null); do cmp -s "$1/$f" "$2/$f" || { ok=0; echo "  differs: $f"; }; done
  [ -n "$(ls "$1"/step_* 2>/dev/null)" ] && [ $ok = 1 ]
}
mkdir -p $d/nvme

echo "== 1. CPU trainer: NVMe = memory, bit for bit"
# the last field: --nvme-readahead's bytes (a piece of master + 2 state arrays is 24576 bytes here)
for cfg in "bf16 1 none 2 0" "bf16 2 none 5 1e9" "bf16 3 nvme 2 60000" "fp32 1 none 5 0" "fp32 2 none 2 0" "fp32 3 nvme 5 0" \
           "fp16 2 none 3 30000"; do
  set -- $cfg; p=$1; s=$2; op=$3; nb=$4; ra=$5
  k=${p}_$s
  cpu $common --steps 5 --precision $p --zero-stage $s --out $d/m_$k --log $d/m_$k.jsonl > $d/m_$k.out 2>&1 \
    || { tail -3 $d/m_$k.out; fail "$k in memory"; continue; }
  cpu $common --steps 5 --precision $p --zero-stage $s --offload-optimizer nvme --offload-param $op --nvme-path $d/nvme \
    --nvme-buffers $nb --nvme-buffer-size 2048 --nvme-readahead $ra --out $d/n_$k --log $d/n_$k.jsonl > $d/n_$k.out 2>&1 \
    || { tail -3 $d/n_$k.out; fail "$k on NVMe"; continue; }
  # the next update's first nbuf pieces (one per buffer set) read ahead, each array's padded to 4096:
  # a read starts once the write that frees its set is done, so on a busy machine a step may read
  # fewer (the first j pieces, j < nbuf) before its update begins, never others
  if [ $ra = 0 ]; then
    $PYTHON - $d/n_$k.jsonl $nb <<'PY' || fail "$k: nvme_ahead is not the first $nb pieces"
import json, sys
C, V, T, W, piece, nb = 32, 512, 16, 2, 2048, int(sys.argv[2])
units = [(V * C + T * C) // W] + [(12 * C * C + 13 * C) // W] * 2 + [2 * C // W]  # a rank's slices
pieces = [min(piece, n - lo) for n in units for lo in range(0, n, piece)]
ahead = [3 * sum((n * 4 + 4095) // 4096 * 4096 for n in pieces[:j]) for j in range(nb + 1)]  # master, 2 moments
got = [r["nvme_ahead"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r and "nvme_ahead" in r]
assert got[0] == 0 and all(g in ahead for g in got) and ahead[nb] in got[1:], (got, ahead)
PY
  fi
  if [ $ra != 0 ]; then # the reads started ahead: some, and never more than the update read
    $PYTHON - $d/n_$k.jsonl <<'PY' || fail "$k: nvme_ahead out of range"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"nvme_ahead"' in l]
assert s and sum(r["nvme_ahead"] for r in s) > 0 and all(0 <= r["nvme_ahead"] <= r["nvme_read"] for r in s), s
PY
  fi
  grep -q "plan vs allocated: every kind on every rank matches exactly" $d/n_$k.out || fail "$k: plan and allocation differ"
  grep -q '"master":"nvme"' $d/n_$k.jsonl || fail "$k: the memory log does not put the master weights on NVMe"
  [ $op = nvme ] && { grep -q '"params":"nvme"' $d/n_$k.jsonl || fail "$k: parameters not on NVMe"; }
  grep -q '"nvme_read":[1-9]' $d/n_$k.jsonl && grep -q '"exposed_io_ms"' $d/n_$k.jsonl || fail "$k: no NVMe traffic in the step log"
  if same_steps $d/m_$k.jsonl $d/n_$k.jsonl && same_ckpt $d/m_$k $d/n_$k; then
    echo "ok   $p ZeRO-$s (parameters on $op, $nb buffer sets, read-ahead $ra bytes): losses, norms, weights and optimizer state identical"
  else fail "$k: NVMe differs from memory"; diff <(steps $d/m_$k.jsonl) <(steps $d/n_$k.jsonl) | head -4; fi
done
# offload_param alone (the optimizer stays in memory; DeepSpeed takes it): the parameters on NVMe,
# or on the host (which moves nothing here, and says so), equal to section 1's memory runs
for cfg in "bf16 nvme" "fp32 nvme" "bf16 cpu" "fp32 cpu"; do
  set -- $cfg; p=$1; op=$2; k=${p}_3
  cpu $common --steps 5 --precision $p --zero-stage 3 --offload-param $op --nvme-path $d/nvme --nvme-buffers 3 \
    --nvme-buffer-size 2048 --out $d/p_${k}_$op --log $d/p_${k}_$op.jsonl > $d/p_${k}_$op.out 2>&1 \
    || { tail -3 $d/p_${k}_$op.out; fail "$k parameters alone on $op"; continue; }
  grep -q "plan vs allocated: every kind on every rank matches exactly" $d/p_${k}_$op.out || fail "$k $op alone: plan and allocation differ"
  grep -q '"master":"device"' $d/p_${k}_$op.jsonl || fail "$k $op alone: the optimizer left the device"
  if [ $op = nvme ]; then grep -q '"params":"nvme"' $d/p_${k}_$op.jsonl && grep -q '"nvme_read":[1-9]' $d/p_${k}_$op.jsonl \
    || fail "$k: parameters alone not on NVMe"
  else grep -q "offload-param cpu: this trainer keeps every model state in host memory already, so cpu moves nothing" \
    $d/p_${k}_$op.out || fail "$k: no note that --offload-param cpu moves nothing here"; fi
  if same_steps $d/m_$k.jsonl $d/p_${k}_$op.jsonl && same_ckpt $d/m_$k $d/p_${k}_$op; then
    echo "ok   $p ZeRO-3, parameters alone on $op (optimizer in memory): losses, norms, weights and optimizer state identical"
  else fail "$k: parameters alone on $op differ from memory"; diff <(steps $d/m_$k.jsonl) <(steps $d/p_${k}_$op.jsonl) | head -4; fi
done
# across the step boundary at stage 3 (4 layers, so that the next forward reads some layers back while
# the update's last parameter writes still drain): NVMe = memory; the parameter reads per step are
# the gather schedule's, less what the update left in the slots. The schedule's model (gathers.py):
# the slots (embeddings; final LayerNorm; layers by parity), the forward's order (every unit) and
# the backward's (the head, the final LayerNorm, the layers down), a read wherever a slot does not
# hold the unit asked for; after an update only the unit the slot was asked for first before it is
# still there. Each unit's slice is padded to 4096 bytes. Also 3 layers (the last layer in the
# other slot) with 2 micro-steps (the second forward finds the first layers from the backward).
# The parameters-alone run slows every write by 50 ms (core/nvme.h's ZEROC_NVME_WRITE_DELAY_MS) with
# 5 buffer sets: the last layer's last writes are still in flight when the next forward reads it,
# so a read that did not wait for its unit's writes (zero_nvme_prefetch) reads stale bytes and the
# run differs from memory.
cat > $d/gathers.py <<'PY'
import json, sys
log, L, G = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
C, V, T, W = 32, 512, 16, 2
def pad(n):  # a rank's slice of a unit of n bf16 elements, in bytes padded to 4096
    return (((n + W - 1) // W * 2 + 4095) // 4096) * 4096
F = L + 1
size = {u: pad(V * C + T * C) if u == 0 else pad(2 * C) if u == F else pad(12 * C * C + 13 * C) for u in range(F + 1)}
slot = lambda u: "embed" if u == 0 else "final" if u == F else u % 2
held, first, want = {}, {}, []
for step in range(4):
    read = 0
    for micro in range(G):
        for u in list(range(F + 1)) + [0] + [F] + list(range(L, 0, -1)):  # forward (and the head), backward
            first.setdefault(slot(u), u)
            if held.get(slot(u)) != u: read += size[u]; held[slot(u)] = u
    want.append(read)
    held, first = {q: u for q, u in first.items()}, {}  # the update: what each slot was asked for first
got = [r["nvme_read"] for r in map(json.loads, open(log)) if "loss" in r and "nvme_read" in r]
assert got == want, (got, want)
PY
m4="--layers 4 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 $run --steps 4 --precision bf16 --zero-stage 3"
s4="--nvme-path $d/nvme --nvme-buffer-size 2048"
cpu $m4 --out $d/m4 --log $d/m4.jsonl > $d/m4.out 2>&1 || fail "4 layers in memory"
cpu $m4 $s4 --offload-optimizer nvme --offload-param nvme --nvme-buffers 2 --nvme-readahead 60000 --out $d/n4 \
  --log $d/n4.jsonl > $d/n4.out 2>&1 || fail "4 layers on NVMe"
ZEROC_NVME_WRITE_DELAY_MS=50 cpu $m4 $s4 --offload-param nvme --nvme-buffers 5 --out $d/p4 --log $d/p4.jsonl > $d/p4.out 2>&1 \
  || fail "4 layers, parameters on NVMe"
cpu ${m4/--layers 4/--layers 3} --total-batch 128 $s4 --offload-param nvme --nvme-buffers 2 --log $d/p3.jsonl > $d/p3.out 2>&1 \
  || fail "3 layers, 2 micro-steps, parameters on NVMe"
$PYTHON $d/gathers.py $d/p4.jsonl 4 1 && $PYTHON $d/gathers.py $d/p3.jsonl 3 2; r=$?
for k in n4 p4 p3; do grep -q "plan vs allocated: every kind on every rank matches exactly" $d/$k.out || r=1; done
if [ $r = 0 ] && same_steps $d/m4.jsonl $d/n4.jsonl && same_ckpt $d/m4 $d/n4 && same_steps $d/m4.jsonl $d/p4.jsonl \
  && same_ckpt $d/m4 $d/p4; then
  echo "ok   bf16 ZeRO-3, 4 layers, optimizer and parameters on NVMe, and parameters alone: identical to memory; parameter bytes"
  echo "     read per step (and with 3 layers, 2 micro-steps) = the gather schedule's less what the update left in the slots"
else fail "4 layers at stage 3: NVMe differs from memory, the plan from the allocation, or the reads from the schedule"; fi
left=$(ls $d/nvme); [ -z "$left" ] && echo "ok   the scratch directories are removed at a clean exit" || fail "left behind: $left"
# the planner's nvme bytes (the files, slices padded to 4096) = the memory log's
for cfg in "bf16 3 nvme" "fp32 1 none"; do
  set -- $cfg
  want=$(./train_gpt_cpu --plan $model --seq-len 16 --batch 2 --world 2 --precision $1 --zero-stage $2 \
         --offload-optimizer nvme --offload-param $3 --json | $PYTHON -c 'import json,sys; print(int(json.load(sys.stdin)["nvme"]))')
  got=$(grep '"event":"memory"' $d/n_$1_$2.jsonl | head -1 | $PYTHON -c 'import json,sys; print(int(json.load(sys.stdin)["nvme"]))')
  [ -n "$want" ] && [ "$want" = "$got" ] && echo "ok   $1 ZeRO-$2: the planner's nvme bytes ($want) = the memory log's" \
    || fail "$1 ZeRO-$2: planner nvme $want, memory log $got"
done

echo "== 1b. the host tier: part and all of the optimizer state in host memory"
mem_json() { grep '"event":"memory"' "$1" | head -1 | $PYTHON -c "import json,sys; m=json.load(sys.stdin); print(int(m['nvme']), int(m['$2']))"; }
plan_json() { ./train_gpt_cpu --plan $model --seq-len 16 --batch 2 --world 2 "$@" --json | $PYTHON -c \
  'import json,sys; p=json.load(sys.stdin); print(int(p["nvme"]), int(p["staging"]))'; }
for cfg in "bf16 1 none" "fp32 3 nvme" "fp16 2 none"; do
  set -- $cfg; p=$1; s=$2; op=$3; k=${p}_$s
  [ -d $d/m_$k ] || continue
  for hc in 100000 1e9; do
    o="--precision $p --zero-stage $s --offload-optimizer nvme --offload-param $op --nvme-buffer-size 2048"
    [ $hc = 100000 ] && o="$o --nvme-readahead 50000"
    cpu $common --steps 5 $o --nvme-path $d/nvme --nvme-buffers 3 --nvme-host-cache $hc --out $d/c_${k}_$hc \
      --log $d/c_${k}_$hc.jsonl > $d/c_${k}_$hc.out 2>&1 || { tail -3 $d/c_${k}_$hc.out; fail "$k host tier $hc"; continue; }
    grep -q "plan vs allocated: every kind on every rank matches exactly" $d/c_${k}_$hc.out || fail "$k $hc: plan and allocation differ"
    got=$(mem_json $d/c_${k}_$hc.jsonl staging); want=$(plan_json $o --nvme-buffers 3 --nvme-host-cache $hc)
    [ "$got" = "$want" ] || fail "$k $hc: the memory log's nvme, staging ($got) differ from the planner's ($want)"
    base=$(mem_json $d/n_$k.jsonl staging | cut -d' ' -f1); now=${got% *}
    rd=$(grep -o '"nvme_read":[0-9]*' $d/c_${k}_$hc.jsonl | cut -d: -f2 | paste -sd+ | bc)
    if [ $hc = 1e9 ] && [ $op = none ]; then [ "$rd" = 0 ] && [ "$now" = 0 ] || fail "$k all cached: NVMe still read $rd bytes, files $now"
    else [ "$now" -lt "$base" ] && [ "$now" -gt 0 ] || fail "$k cached: files $now bytes against $base without the tier"; fi
    if same_steps $d/m_$k.jsonl $d/c_${k}_$hc.jsonl && same_ckpt $d/m_$k $d/c_${k}_$hc; then
      echo "ok   $p ZeRO-$s, host tier $hc bytes$([ $hc = 100000 ] && echo ' and read-ahead 50000'): NVMe files $now bytes (without: $base), identical to memory"
    else fail "$k host tier $hc: differs from memory"; fi
  done
done
# auto budgets: the bytes each line states are the ones allocated (the memory log's staging = the
# plan's without them + both figures; a tiny model: the host tier takes it all and leaves the
# read-ahead nothing to read; the read-ahead alone: the update's every piece, 14 of 24576 bytes)
base=$(plan_json --precision bf16 --zero-stage 1 --offload-optimizer nvme --nvme-buffer-size 2048 | cut -d' ' -f2)
for a in "--nvme-host-cache auto --nvme-readahead auto" "--nvme-readahead auto"; do
  k=c_auto$(echo $a | grep -o cache); rm -f $d/$k.jsonl
  cpu $common --steps 5 --precision bf16 --zero-stage 1 --offload-optimizer nvme --nvme-path $d/nvme --nvme-buffer-size 2048 \
    $a --log $d/$k.jsonl > $d/$k.out 2>&1 || fail "$a"
  auto() { grep -o "^--nvme-$1 auto: [0-9]* bytes" $d/$k.out | cut -d' ' -f3; }
  hc=$(auto host-cache); ra=$(auto readahead); st=$(mem_json $d/$k.jsonl staging | cut -d' ' -f2)
  [ -n "$ra" ] && [ -n "$st" ] && [ "$st" = $((base + ${hc:-0} + ra)) ] && same_steps $d/m_bf16_1.jsonl $d/$k.jsonl \
    && { [ -n "$hc" ] || [ "$ra" = $((14 * 24576)) ]; } && grep -q "plan vs allocated: every kind on every rank matches exactly" $d/$k.out \
    && echo "ok   $a: ${hc:+host tier $hc and }read-ahead $ra bytes, as allocated (staging $st = $base + them), identical to memory" \
    || fail "$a: host tier ${hc:-none}, read-ahead ${ra:-?} bytes logged; staging $st, $base without them"
done
for opt in host-cache readahead; do
  for bad in "12x|not a byte count" "1e30|not a byte count"; do
    ./train_gpt_cpu $common --steps 1 --offload-optimizer nvme --zero-stage 1 --nvme-path $d/nvme --nvme-$opt ${bad%|*} > $d/f.out 2>&1
    [ $? -ne 0 ] && [ "$(grep -c '^error' $d/f.out)" = 1 ] && grep -q "^error: --nvme-$opt .*${bad#*|}" $d/f.out \
      && echo "ok   --nvme-$opt ${bad%|*}: $(grep '^error' $d/f.out)" || fail "--nvme-$opt ${bad%|*} accepted"
  done
  ./train_gpt_cpu $common --steps 1 --zero-stage 1 --nvme-$opt 1000 > $d/f.out 2>&1
  [ $? -ne 0 ] && [ "$(grep -c '^error' $d/f.out)" = 1 ] && grep -q "^error: --nvme-$opt 1000 needs --offload-optimizer nvme" $d/f.out \
    && echo "ok   --nvme-$opt without NVMe: one line" || fail "--nvme-$opt without NVMe accepted"
done

echo "== 2. GPU trainer (emulated): NVMe = memory"
# the last: fp32 ZeRO-1 again with a host tier and a read-ahead area (its no-offload run reused)
for cfg in "bf16 2 none" "fp16 3 nvme" "fp32 1 none" "fp32 1 none tier"; do
  set -- $cfg; p=$1; s=$2; op=$3; t=$p${4:+_$4} x=()
  [ -n "${4:-}" ] && x=(--nvme-host-cache 100000 --nvme-readahead 50000)
  [ -n "${4:-}" ] || emu $p $common --steps 4 --zero-stage $s --log $d/gm_$p.jsonl > $d/gm_$p.out 2>&1 ||
    { tail -3 $d/gm_$p.out; fail "emu $p"; continue; }
  emu $p $common --steps 4 --zero-stage $s --offload-optimizer nvme --offload-param $op --nvme-path $d/nvme --pin-memory \
    --nvme-buffer-size 2048 "${x[@]}" --log $d/gn_$t.jsonl > $d/gn_$t.out 2>&1 || { tail -3 $d/gn_$t.out; fail "emu $t NVMe"; continue; }
  grep -q "plan vs allocated: every kind on every rank matches exactly" $d/gn_$t.out || fail "emu $t: plan and allocation differ"
  same_steps $d/gm_$p.jsonl $d/gn_$t.jsonl && echo "ok   emulated GPU $t ZeRO-$s (parameters on $op): identical to no offload" \
    || { fail "emu $t: NVMe differs"; diff <(steps $d/gm_$p.jsonl) <(steps $d/gn_$t.jsonl) | head -4; }
done
# the host tier's share is not read; the area's pieces are read during the forward and backward
field() { grep '"loss"' "$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2 | tr '\n' ' '; }
r_all=$(field $d/gn_fp32.jsonl nvme_read) r_tier=$(field $d/gn_fp32_tier.jsonl nvme_read)
a_tier=$(field $d/gn_fp32_tier.jsonl nvme_ahead)
$PYTHON - "$r_all" "$r_tier" "$a_tier" <<'EOF' && echo "ok   emulated GPU, host tier: $r_tier bytes read a step against $r_all; ahead $a_tier" ||
import sys
full, tier, ahead = ([int(v) for v in a.split()] for a in sys.argv[1:4])
assert len(full) == len(tier) == 4 and all(0 < t < f for t, f in zip(tier, full)), (full, tier)
assert all(a > 0 for a in ahead[1:]), ahead
EOF
  fail "emulated GPU, host tier: reads $r_tier against $r_all, ahead $a_tier"

echo "== 3. resume across placements"
nv="--offload-optimizer nvme --offload-param nvme --nvme-buffer-size 2048"
cpu $common --steps 6 --precision bf16 --zero-stage 3 --log $d/full.jsonl > $d/full.out 2>&1 || fail "uninterrupted run"
for first in nvme memory; do
  o1=(); o2=($nv --nvme-path $d/nvme2); [ $first = nvme ] && { o1=($nv --nvme-path $d/nvme); o2=(); }
  mkdir -p $d/nvme2
  cpu $common --steps 3 --precision bf16 --zero-stage 3 "${o1[@]}" --out $d/rs_$first > $d/rs_$first.out 2>&1 || fail "save ($first)"
  cpu $run --steps 6 --precision bf16 --zero-stage 3 "${o2[@]}" --resume $d/rs_$first --log $d/rr_$first.jsonl > $d/rr_$first.out 2>&1 \
    || { tail -3 $d/rr_$first.out; fail "resume ($first)"; continue; }
  a=$(steps $d/full.jsonl | tail -3); b=$(steps $d/rr_$first.jsonl)
  [ -n "$b" ] && [ "$a" = "$b" ] && echo "ok   saved with the state on $first, resumed $([ $first = nvme ] && echo in memory || echo on NVMe): steps 4-6 bit for bit" \
    || { fail "resume from $first"; echo "$a"; echo "$b"; }
done

echo "== 4. kill -9 mid-run, then --resume"
long="$run --precision bf16 --zero-stage 3 $nv --nvme-path $d/nvme --nvme-host-cache 100000 --nvme-readahead 50000"
cpu $common --steps 120 --precision bf16 --zero-stage 3 --log $d/k_full.jsonl > /dev/null 2>&1 || fail "uninterrupted run (4)"
cpu $model $long --steps 120 --out $d/killed --save-every 2 --log $d/k1.jsonl > $d/k1.out 2>&1 &
pid=$!
for i in $(seq 600); do [ "$(losses $d/k1.jsonl)" -ge 7 ] && break; sleep 0.05; done
pkill -9 -f "train_gpt_cpu.*$d/killed" ; wait $pid 2>/dev/null
for i in $(seq 200); do pgrep -f "train_gpt_cpu.*$d/killed" > /dev/null || break; sleep 0.05; done # gone, as a requeued job's are
n=$(ls $d/nvme | wc -l)
[ "$n" = 2 ] || fail "the killed run left $n scratch directories (expected its 2)"
cpu $long --steps 120 --resume $d/killed --log $d/k2.jsonl > $d/k2.out 2>&1 || { tail -3 $d/k2.out; fail "resume after kill -9"; }
grep -c "note: removed .*NVMe scratch of a run that did not end cleanly" $d/k2.out | grep -qx 2 || fail "the stale scratch directories were not reported removed"
step=$(grep -o 'resuming from .*: step [0-9]*' $d/k2.out | grep -o '[0-9]*$')
a=$(steps $d/k_full.jsonl | tail -n +$((step + 1))); b=$(steps $d/k2.jsonl)
[ -n "$step" ] && [ -n "$b" ] && [ "$a" = "$b" ] && [ -z "$(ls $d/nvme)" ] \
  && echo "ok   killed after step $(losses $d/k1.jsonl), resumed from step $step: the rest bit for bit; scratch rebuilt and removed" \
  || fail "resume after kill -9 differs (step ${step:-?}) or left files: $(ls $d/nvme)"

echo "== 5. faults: one line naming the path, a non-zero exit"
expect_fail() { # NAME PATTERN, then the command
  local name=$1 pat=$2; shift 2
  "$@" > $d/f.out 2>&1; local rc=$?
  local lines; lines=$(grep -c '^error' $d/f.out)
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -q "^error.*$pat" $d/f.out; then echo "ok   $name: $(grep '^error' $d/f.out | cut -c1-150)"
  else fail "$name: rc $rc, $lines error lines"; head -5 $d/f.out; fi
}
nvrun="$common --steps 2 --precision bf16 --zero-stage 1 --offload-optimizer nvme"
expect_fail "missing directory" "$d/none: No such file" cpu $nvrun --nvme-path $d/none
touch $d/afile
expect_fail "a file, not a directory" "$d/afile: not a directory" cpu $nvrun --nvme-path $d/afile
expect_fail "no --nvme-path" "needs --nvme-path" cpu $nvrun
if unshare -m true 2>/dev/null; then
  mkdir -p $d/ro $d/small $d/tmpfs
  expect_fail "read-only filesystem" "$d/ro: not writable" unshare -m bash -c \
    "mount -t tmpfs -o ro,size=1m none $d/ro && exec timeout 300 mpirun -np 2 --oversubscribe ./train_gpt_cpu $nvrun --nvme-path $d/ro"
  expect_fail "full filesystem" "$d/small: [0-9]* bytes free, but this host's ranks keep [0-9]* bytes" unshare -m bash -c \
    "mount -t tmpfs -o size=64k none $d/small && exec timeout 300 mpirun -np 2 --oversubscribe ./train_gpt_cpu $nvrun --nvme-path $d/small"
  unshare -m bash -c "mount -t ramfs none $d/tmpfs && exec timeout 300 mpirun -np 2 --oversubscribe ./train_gpt_cpu \
    $common --steps 5 --precision bf16 --zero-stage 1 --offload-optimizer nvme --nvme-path $d/tmpfs --nvme-buffer-size 2048 \
    --out $d/t_tmpfs --log $d/t_tmpfs.jsonl" > $d/t_tmpfs.out 2>&1 || fail "ramfs run"
  grep -q "note: --nvme-path $d/tmpfs does not take direct I/O" $d/t_tmpfs.out && same_steps $d/m_bf16_1.jsonl $d/t_tmpfs.jsonl \
    && echo "ok   ramfs (no O_DIRECT): a note, and the same result through the page cache" || fail "ramfs fallback"
else
  echo "skip read-only, full and ramfs cases: no private mount namespace here (unshare -m)"
fi
for how in deleted truncated; do
  cpu $common --steps 100000 --precision bf16 --zero-stage 2 --offload-optimizer nvme --nvme-path $d/nvme --log $d/u_$how.jsonl \
    --out $d/u_$how --save-every 2 > $d/u_$how.out 2>&1 &
  pid=$!
  for i in $(seq 600); do [ "$(losses $d/u_$how.jsonl)" -ge 5 ] && break; sleep 0.05; done
  f=$(ls $d/nvme/zeroc-*-rank1/state0.bin 2>/dev/null | head -1)
  if [ -z "$f" ]; then fail "$how: no state file to spoil"; kill -9 $pid; wait $pid 2>/dev/null; continue; fi
  [ $how = deleted ] && rm -f "$f" || truncate -s 4096 "$f"
  ( sleep 60; kill -9 $pid 2>/dev/null ) & guard=$!
  wait $pid; rc=$?
  kill $guard 2>/dev/null
  n=$(grep -c '^error' $d/u_$how.out)
  if [ $rc -ne 0 ] && [ $rc -ne 137 ] && [ "$n" = 1 ] && grep -q "^error: rank 1: NVMe offload: $f: .*$how under the running job" $d/u_$how.out; then
    echo "ok   a state file $how under the running job: $(grep '^error' $d/u_$how.out | cut -c1-140)"
  else fail "$how: rc $rc, $n error lines"; tail -3 $d/u_$how.out; fi
  # the last checkpoint is untouched and loads
  cpu $run --steps $(($(cat $d/u_$how/latest 2>/dev/null | grep -o '[0-9]*$' | sed 's/^0*//') + 1)) --precision bf16 --zero-stage 2 \
    --resume $d/u_$how > $d/u2_$how.out 2>&1 && echo "ok   and its last checkpoint resumes" || { fail "$how: the last checkpoint does not resume"; tail -3 $d/u2_$how.out; }
  rm -rf $d/nvme/*
done

echo "== 6. a DeepSpeed file with NVMe offload"
cat > $d/ds.json <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$d/nvme", "pin_memory": true, "buffer_count": 3, "fast_init": false},
   "offload_param": {"device": "nvme", "nvme_path": "$d/nvme", "pin_memory": true, "buffer_count": 5, "buffer_size": 4096,
                     "max_in_cpu": 1e9}},
 "aio": {"block_size": 65536, "queue_depth": 4, "thread_count": 2, "single_submit": false, "overlap_events": true}}
EOF
cpu $common --steps 5 --deepspeed $d/ds.json --log $d/ds.jsonl > $d/ds.out 2>&1 || { tail -3 $d/ds.out; fail "DeepSpeed file"; }
cpu $common --steps 5 --precision bf16 --zero-stage 3 --offload-optimizer nvme --offload-param nvme --pin-memory --nvme-path $d/nvme \
  --nvme-buffers 3 --nvme-buffer-size 4096 --aio-block-size 65536 --aio-queue-depth 4 --aio-threads 2 --log $d/cli.jsonl > /dev/null 2>&1 \
  || fail "the same from the command line"
grep -q '"nvme-buffers":{"value":3,"source":"file"' $d/ds.jsonl && grep -q '"aio-threads":{"value":2' $d/ds.jsonl \
  && ! grep -q "^warning" $d/ds.out && same_steps $d/ds.jsonl $d/cli.jsonl && same_steps $d/ds.jsonl $d/n_bf16_3.jsonl 2>/dev/null; r=$?
# (the file's run also equals section 1's memory run at stage 3: offload changes nothing)
same_steps $d/ds.jsonl $d/m_bf16_3.jsonl && [ $r = 0 ] && echo "ok   the file's nvme_path, buffer_count, buffer_size and aio settings are honoured, no warnings, same losses" \
  || { fail "DeepSpeed NVMe file"; grep -E "^(warning|error)" $d/ds.out | head -3; }

# a file with only offload_param (DeepSpeed's ZeRO-3 parameter offload with the optimizer on the device)
cat > $d/dsp.json <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3,
   "offload_param": {"device": "nvme", "nvme_path": "$d/nvme", "pin_memory": true, "buffer_count": 5, "buffer_size": 4096}}}
EOF
cpu $common --steps 5 --deepspeed $d/dsp.json --log $d/dsp.jsonl > $d/dsp.out 2>&1 || { tail -3 $d/dsp.out; fail "DeepSpeed file with offload_param alone"; }
grep -q '"offload-param":{"value":"nvme","source":"file"' $d/dsp.jsonl && grep -q '"offload-optimizer":{"value":"none"' $d/dsp.jsonl \
  && grep -q '"params":"nvme"' $d/dsp.jsonl && grep -q '"master":"device"' $d/dsp.jsonl && ! grep -q "^warning" $d/dsp.out \
  && same_steps $d/dsp.jsonl $d/m_bf16_3.jsonl \
  && echo "ok   a file with only offload_param: parameters on NVMe, optimizer in memory, no warnings, same losses as in memory" \
  || { fail "DeepSpeed file with offload_param alone"; grep -E "^(warning|error)" $d/dsp.out | head -3; grep -o '"offload-[a-z]*":{[^}]*}' $d/dsp.jsonl; }

echo "$fails failed"
[ $fails = 0 ]
