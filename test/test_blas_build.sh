#!/usr/bin/env bash
# The trainer runs on OpenBLAS's OpenMP build (its matmuls on the kernels' OpenMP threads; the
# pthread build made fp32 steps 2-4x slower here), however it was built:
#   - the Makefile looks for that build when the link runs, not when it is parsed: in a scratch
#     copy of the sources, a stand-in `setup` that makes the library appear during the same
#     `make setup train_gpt_cpu` (also under -j2) yields a binary linked against it;
#   - a binary linked without it (as on a fresh machine before `make setup`), and started with
#     the pthread build first on the library path, switches to the OpenMP build at run time and
#     says so in one line; with ZEROC_OPENBLAS=keep it keeps the pthread build and warns once;
#   - the header names the library, its kernels and its threading; the repository's own binary
#     loads the OpenMP build and prints no note;
#   - on a CPU with AVX-512 it runs OpenBLAS's AVX-512 kernels even where OpenBLAS chose others
#     (Debian's 0.3.21 gives AMD's Zen 5 its AVX2 "Haswell" ones: fp32 steps 1.7x slower), and an
#     OPENBLAS_CORETYPE the user set is kept.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
omp=/usr/lib/$arch/openblas-openmp pth=/usr/lib/$arch/openblas-pthread
for lib in $omp/libopenblas.so $pth/libopenblas.so.0; do
  [ -e $lib ] || { echo "skip: $lib is missing (make setup installs OpenBLAS's OpenMP and pthread builds)"; exit 77; }
done
make -s train_gpt_cpu || exit 1
new_scratch blas_build
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
$PYTHON test/zero_check.py shard $d/train.bin 2000 512 1
tiny="--layers 1 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2 --steps 1
      --val-every 0 --sample-every 0 --train-data $PWD/$d/train.bin"
export OMP_NUM_THREADS=2 # (the warning is about threads competing: it needs two)
unset OPENBLAS_CORETYPE   # OpenBLAS and the trainer choose the kernels (set again below, where checked)
runpath() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p;s/.*(RPATH).*\[\(.*\)\]/\1/p'; }
blas_row() { sed -n 's/^| BLAS *| \(.*[^ ]\) *|$/\1/p' "$1"; }

echo "== the repository's binary"
./train_gpt_cpu $tiny > $d/own.out 2>&1 || { cat $d/own.out; fail "train_gpt_cpu did not run"; }
echo "BLAS row: $(blas_row $d/own.out)"
blas_row $d/own.out | grep -Eq '^OpenBLAS [0-9.]+, [A-Za-z0-9]+ kernels, OpenMP build$' || fail "header does not name the OpenMP build"
grep -Eq '^(note|warning): .*OpenBLAS' $d/own.out && fail "a note about OpenBLAS from the repository's binary"
ldd ./train_gpt_cpu | grep "libopenblas.so.0 => $omp/" > /dev/null || fail "ldd: libopenblas.so.0 is not $omp's" # (not grep -q: with pipefail, ldd killed by SIGPIPE would fail it)

echo "== a fresh machine: the library appears while make runs (setup), with -j1 and -j2"
src=$d/src
mkdir -p $src/data $src/scripts
cp -r Makefile train_gpt_cpu.c *.h core zero run cpu $src/ && cp data/*.h $src/data/
# (the scratch builds at -O0: what they check is the link, not the code; each of the three was
# a 20-s -O3 compile of the whole trainer)
opt="OPT=-O0"
for j in 1 2; do
  fresh=$PWD/$d/fresh$j
  # the stand-in for scripts/setup.sh: a second later, the OpenMP build "is installed"
  printf 'sleep 1; mkdir -p %s && ln -s %s %s/openblas-openmp\n' "$fresh" "$omp" "$fresh" > $src/scripts/setup.sh
  rm -f $src/train_gpt_cpu
  make -s -C $src -j$j setup train_gpt_cpu BLAS_CANDIDATES="$fresh/openblas-openmp" "$opt" > $d/make$j.out 2>&1 \
    || { cat $d/make$j.out; fail "make -j$j setup train_gpt_cpu"; continue; }
  echo "-j$j: RUNPATH $(runpath $src/train_gpt_cpu)"
  [ "$(runpath $src/train_gpt_cpu)" = "$fresh/openblas-openmp" ] || fail "-j$j: not linked against the library setup installed"
done

echo "== relinked when the choice changes; a binary without the OpenMP build on its path"
before=$(stat -c %Y.%s $src/train_gpt_cpu 2>/dev/null)
sleep 1
make -s -C $src train_gpt_cpu BLAS_CANDIDATES=/nonexistent "$opt" > $d/make_none.out 2>&1 || { cat $d/make_none.out; fail "make"; }
[ "$(stat -c %Y.%s $src/train_gpt_cpu)" != "$before" ] || fail "not relinked when the OpenBLAS directory changed"
[ -z "$(runpath $src/train_gpt_cpu)" ] || fail "relinked binary still has RUNPATH $(runpath $src/train_gpt_cpu)"
[ -z "$(make -s -C $src train_gpt_cpu BLAS_CANDIDATES=/nonexistent "$opt")" ] || fail "make relinked again with nothing changed"
LD_LIBRARY_PATH=$pth $src/train_gpt_cpu $tiny > $d/switched.out 2>&1 || { cat $d/switched.out; fail "switched run failed"; }
echo "pthread build first on the path: $(grep OpenBLAS $d/switched.out | head -1)"
echo "  BLAS row: $(blas_row $d/switched.out)"
[ "$(grep -c 'OpenBLAS' $d/switched.out)" -eq 2 ] || fail "want one note and the header row"
grep -q "^note: OpenBLAS's pthread build was loaded; switched to its OpenMP build at run time" $d/switched.out || fail "no note"
grep -q "OpenMP build$" <<<"$(blas_row $d/switched.out)" || fail "did not switch to the OpenMP build"
ZEROC_OPENBLAS=keep LD_LIBRARY_PATH=$pth $src/train_gpt_cpu $tiny > $d/kept.out 2>&1 || { cat $d/kept.out; fail "kept run failed"; }
echo "ZEROC_OPENBLAS=keep: $(grep OpenBLAS $d/kept.out | head -1)"
echo "  BLAS row: $(blas_row $d/kept.out)"
grep -q "^warning: OpenBLAS is its pthread build, not the OpenMP one: .*install libopenblas0-openmp" $d/kept.out || fail "no warning"
grep -q "pthread build$" <<<"$(blas_row $d/kept.out)" || fail "header does not say pthread"
# under mpirun every rank switches; rank 0 alone says so
OMP_NUM_THREADS=1 LD_LIBRARY_PATH=$pth mpirun -x LD_LIBRARY_PATH -np 2 --oversubscribe $src/train_gpt_cpu $tiny \
  > $d/mpi.out 2>&1 || { cat $d/mpi.out; fail "2 ranks"; }
[ "$(grep -c '^note: OpenBLAS' $d/mpi.out)" -eq 1 ] || fail "2 ranks: want the note once"

echo "== the kernels: a CPU with AVX-512 gets OpenBLAS's AVX-512 ones, unless OPENBLAS_CORETYPE says"
kernels() { blas_row "$1" | sed -n 's/^OpenBLAS [^,]*, \([A-Za-z0-9]*\) kernels,.*/\1/p'; }
avx512=0
grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo &&
  grep -qw avx512dq /proc/cpuinfo && avx512=1
if [ $avx512 = 1 ]; then
  env -u OPENBLAS_CORETYPE ./train_gpt_cpu $tiny > $d/avx512.out 2>&1 || { cat $d/avx512.out; fail "run"; }
  # (what OpenBLAS chose by itself: OPENBLAS_VERBOSE=2 has it say so as it loads, and --plan
  # returns before the trainer looks)
  chose=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 ./train_gpt_cpu --plan --model d12 2>&1 | sed -n 's/^Core: //p' | head -1)
  echo "AVX-512 here; OpenBLAS chose ${chose:-?}; the trainer runs $(kernels $d/avx512.out)"
  grep -Eqx 'SkylakeX|Cooperlake|SapphireRapids' <<<"$(kernels $d/avx512.out)" || fail "AVX-512 CPU, kernels $(kernels $d/avx512.out)"
else
  echo "no AVX-512 here: the trainer runs $(kernels $d/own.out) (not checked)"
fi
OPENBLAS_CORETYPE=Haswell ./train_gpt_cpu $tiny > $d/haswell.out 2>&1 || { cat $d/haswell.out; fail "OPENBLAS_CORETYPE=Haswell run"; }
echo "OPENBLAS_CORETYPE=Haswell: $(kernels $d/haswell.out); $(grep -c '^note: OPENBLAS_CORETYPE' $d/haswell.out) note(s)"
[ "$(kernels $d/haswell.out)" = Haswell ] || fail "OPENBLAS_CORETYPE=Haswell not kept: $(kernels $d/haswell.out)"
if [ $avx512 = 1 ]; then # one note says what the choice leaves out; none where it leaves out nothing
  grep -q "^note: OPENBLAS_CORETYPE=Haswell keeps OpenBLAS's Haswell kernels, which leave out vector units this CPU has" \
    $d/haswell.out && [ "$(grep -c '^note:' $d/haswell.out)" = 1 ] || fail "no one note on OPENBLAS_CORETYPE=Haswell"
  OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=1 mpirun -x OPENBLAS_CORETYPE -np 2 ./train_gpt_cpu $tiny > $d/skx.out 2>&1 ||
    { cat $d/skx.out; fail "OPENBLAS_CORETYPE=SkylakeX, 2 ranks"; }
  grep -q '^note: OPENBLAS_CORETYPE' $d/skx.out && fail "a note on OPENBLAS_CORETYPE=SkylakeX"
else
  grep -q '^note: OPENBLAS_CORETYPE' $d/haswell.out && fail "a note on OPENBLAS_CORETYPE=Haswell without AVX-512"
fi
echo "$fails failures"
[ $fails -eq 0 ]
