#!/usr/bin/env bash
# The layering of the code (README's map; ../shared/DESIGN.md section 1): every #include points
# down or sideways within its folder, never up, and the two backends never include each other.
#   1 precision and the model description: mixed_precision.h, core/gpt2.h, core/model.h (the
#     passes, over the trainer's kernels and hooks), dataloader.h, data/tokenizer.h; and the
#     timeline every layer above records into, core/trace.h, and the flight recorder of the
#     collectives zero.h starts, core/flight.h
#   2 the optimizer: core/optimizer.h, core/optimizer_engine.h (its CPU engine); the direct
#     I/O that zero.h keeps NVMe files with: core/nvme.h; ZeRO++'s quantized format: core/quant.h
#   3 ZeRO: zero/location.h (where a state can live: the one encoding the options use too),
#     zero/backend.h (the seam a backend fills), zero/store.h (where state lives), zero/nvme_store.h
#     (its NVMe store), zero/state.h (what a rank keeps), zero/pp_setup.h (ZeRO++'s setup),
#     zero/update.h (the update's walks), zero.h (the schedule)
#   4 the run: run/*.h
#   5 the backends: cpu/*, gpu/*
#   6 the trainers: train_gpt_cpu.c, train_gpt.cu; and the planner page's program, web/planner_wasm.c
# Also: the root holds exactly the project's card (no stray header), and the model description
# and the optimizer name no backend and no option.
set -uo pipefail
cd "$(dirname "$0")/.."
$PYTHON - <<'PY'
import glob, os, re, sys
def layer(path):
    if path in ("mixed_precision.h", "core/gpt2.h", "core/model.h", "dataloader.h", "data/tokenizer.h", "core/trace.h", "core/flight.h"): return 1
    if path in ("core/optimizer.h", "core/optimizer_engine.h", "core/nvme.h", "core/quant.h"): return 2
    if path == "zero.h" or path.startswith("zero/"): return 3
    if path.startswith("run/"): return 4
    if path.startswith(("cpu/", "gpu/")): return 5
    if path in ("train_gpt_cpu.c", "train_gpt.cu", "web/planner_wasm.c"): return 6
    return None
files = ["mixed_precision.h", "zero.h", "dataloader.h", "train_gpt_cpu.c", "train_gpt.cu", "web/planner_wasm.c"] + \
        sorted(glob.glob("core/*.h") + glob.glob("zero/*.h") + glob.glob("run/*.h") + glob.glob("cpu/*.h") + glob.glob("gpu/*.h") +
               glob.glob("gpu/*.cuh") + glob.glob("data/*.h"))
fails = 0
edges = 0
for f in files:
    lf = layer(f)
    if lf is None:
        print(f"FAIL {f}: in no layer (add it to test/test_layers.sh's map)"); fails += 1; continue
    for n, line in enumerate(open(f), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m: continue
        inc = m.group(1)
        li = layer(inc)
        edges += 1
        if li is None:
            print(f"FAIL {f}:{n}: includes {inc}, which is in no layer"); fails += 1
        elif li > lf or (li == lf and lf in (4, 5) and inc.split("/")[0] != f.split("/")[0]):
            print(f"FAIL {f}:{n} (layer {lf}) includes {inc} (layer {li}): an include that points up or across"); fails += 1
# the root: exactly the card
card = {"Makefile", "README.md", "train_gpt.cu", "train_gpt_cpu.c", "zero.h", "mixed_precision.h", "dataloader.h",
        "data", "scripts", "test", "docs", "core", "zero", "run", "cpu", "gpu", "web", "examples"}
tracked = {p.split("/")[0] for p in os.popen("git ls-files").read().split() if not p.startswith(".")}
for extra in sorted(tracked - card):
    print(f"FAIL the root holds {extra}, which is not on the project's card"); fails += 1
# the lower layers name no backend and no option
for f, words in [("core/gpt2.h", r"\b(gemm_bf16|cublas|nccl|MPI_|cuda[A-Z]|TrainConfig)\b"),
                 ("core/model.h", r"\b(gemm_bf16|cublas|nccl|MPI_|TrainConfig|zero_(?!fill))\w*"),
                 ("core/optimizer.h", r"\b(TrainConfig|config_|zero_|Zero\b|MPI_|cuda)"),
                 ("core/optimizer_engine.h", r"\b(TrainConfig|config_|zero_|Zero\b|MPI_|cuda)"),
                 ("core/nvme.h", r"\b(TrainConfig|config_|zero_|Zero\b|MPI_|cuda|optimizer)"),
                 ("zero.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/store.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/backend.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/nvme_store.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/state.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/pp_setup.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/update.h", r"\b(TrainConfig|config_|adam|Adam|MPI_|cuda[A-Z]|nccl)"),
                 ("zero/location.h", r"\b(TrainConfig|config_|zero_init|Zero\b|MPI_|cuda|nccl)"),
                 ("core/trace.h", r"\b(TrainConfig|config_|zero_|Zero\b|MPI_|cuda|nccl|gemm_bf16)"),
                 ("core/flight.h", r"\b(TrainConfig|config_|zero_|Zero\b|MPI_|cuda|nccl|socket)")]:
    code = re.sub(r"//[^\n]*", "", open(f).read())  # comments may explain
    for m in re.finditer(words, code):
        print(f"FAIL {f}: names {m.group(0)!r}"); fails += 1
print(f"{len(files)} files, {edges} includes checked: {fails} failures")
sys.exit(1 if fails else 0)
PY
