#!/usr/bin/env bash
# dataloader.h semantics under AddressSanitizer + UBSan: file order, shuffling,
# distributed coverage, save/restore across epochs, and a 12 GB sparse shard set
# served without reading it into memory (see test/test_dataloader.c).
set -eu
cd "$(dirname "$0")/.."
make -s test/bin/test_dataloader_asan
test/bin/test_dataloader_asan
