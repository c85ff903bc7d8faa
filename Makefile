# zero.c build. `make` builds the CPU trainer; `make test` runs the whole suite.
CC       ?= gcc
ifeq ($(CC),cc)
CC       := gcc
endif
OPT      ?= -O3 -march=native
CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) -fopenmp -Wall -Wextra -Werror -I.
LDLIBS   := -lopenblas -lm
SANFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
HEADERS  := $(wildcard *.h)

.PHONY: all test bench setup clean
all: train_gpt_cpu

setup:
	bash scripts/setup.sh

train_gpt_cpu: train_gpt_cpu.c $(HEADERS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# The same trainer under AddressSanitizer + UndefinedBehaviorSanitizer, used by the test suite.
train_gpt_cpu_asan: train_gpt_cpu.c $(HEADERS)
	$(CC) $(filter-out -O3,$(CFLAGS)) $(SANFLAGS) $< -o $@ $(LDLIBS)

# Unit-test programs: test/foo.c -> test/bin/foo (normal) and test/bin/foo_asan (sanitized).
test/bin/%: test/%.c $(HEADERS)
	@mkdir -p test/bin
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
test/bin/%_asan: test/%.c $(HEADERS)
	@mkdir -p test/bin
	$(CC) $(filter-out -O3,$(CFLAGS)) $(SANFLAGS) $< -o $@ $(LDLIBS)

test: train_gpt_cpu train_gpt_cpu_asan
	bash test/run.sh

bench: train_gpt_cpu
	bash scripts/bench.sh

clean:
	rm -rf train_gpt_cpu train_gpt_cpu_asan test/bin test/out
