#!/usr/bin/env bash
# dataloader.h semantics under AddressSanitizer + UBSan: file order, shuffling,
# distributed coverage, save/restore across epochs, and a 12 GB sparse shard set
# served without reading it into memory (see test/test_dataloader.c).
set -eu
cd "$(dirname "$0")/.."
make -s test/bin/test_dataloader_asan
test/bin/test_dataloader_asan

# train_gpt.cu includes the same headers through nvcc, i.e. as C++: they must
# compile warning-free as C++ and behave the same.
if command -v g++ >/dev/null; then
  . test/lib.sh; new_scratch data_loader # (this run's own builds)
  g++ -x c++ -std=c++17 -O1 -Wall -Wextra -Werror -I. test/test_dataloader.c -o $d/test_dataloader_cxx
  g++ -x c++ -std=c++17 -O1 -Wall -Wextra -Werror -I. test/tokenizer_roundtrip.c -o $d/tokenizer_roundtrip_cxx
  $d/test_dataloader_cxx 2>/dev/null
  $d/tokenizer_roundtrip_cxx facts data/gpt2_tokenizer.bin
fi
