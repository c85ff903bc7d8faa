// web/planner_wasm.c: `train_gpt_cpu --plan` as a WebAssembly (WASI) program, for the planner page.
//
// The page runs this as a command, one instance per plan: argv is the command line the page's
// inputs make (the same option names as the trainer's), stdout carries --json and stderr the
// trainer's one-line errors, and the exit code says which. Everything the numbers depend on is
// the trainers' own code: run/planner.h's planner_main, run/timemodel.h through it, zero.h's
// placement and schedule, and the CPU trainer's PlanBackend (cpu/workspace.h), exactly as
// train_gpt_cpu.c hands it over. Nothing here parses options, so the page follows whatever the
// planner's command line becomes.
//
// argv[0] names the trainer whose plan it is, as the two binaries differ: "train_gpt" plans with
// the GPU trainer's PlanBackend (gpu/layout.h, its default bf16 build's), anything else with the
// CPU trainer's.
//
// `planner.wasm --ds-config FILE WORLD` is the one addition: it reads a DeepSpeed config with
// the trainer's parser (run/ds_config.h) and prints the plan options it resolves to, one
// "--name value" per line (see ds_options below), or the trainer's error line.
//
// 64-bit sizes. wasm32's size_t is 32 bits, and the planner counts parameters, elements and
// bytes in size_t: a 7B model, or a d48's activations at B=8, T=1024, would wrap. So the system
// headers come first, with the real size_t, and the project's headers after them see size_t as
// 64 bits (their arithmetic is then the x86-64 trainer's); what they hand to the C library is
// converted back, and the build traps (-fsanitize=implicit-integer-truncation, ...) where a value
// would not fit, which the page reports instead of a wrong number.
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
typedef unsigned long long zc_wasm_size_t;

// run/checkpoint.h (the planner reads a --resume manifest through it) publishes a checkpoint
// directory with renameat2's RENAME_EXCHANGE, which WASI lacks; the page never writes one.
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE 2
static int renameat2(int olddir, const char *from, int newdir, const char *to, unsigned flags) {
    (void)olddir, (void)from, (void)newdir, (void)to, (void)flags;
    errno = ENOSYS;
    return -1;
}
#endif

// The C library's functions that take a size_t by address, and the printf family, whose %zu
// would read 32 bits of a 64-bit argument: these wrappers turn %zu (%zd, %zx) into %llu (...).
// (a copy with each z length modifier made ll, or NULL when there is none: use fmt itself)
static char *zc_wasm_format(const char *f) {
    if (!strchr(f, 'z')) return NULL;
    char *buf = malloc(strlen(f) * 2 + 1), *o = buf;
    if (!buf) return NULL;
    for (const char *p = f; *p;) {
        if (*p != '%') { *o++ = *p++; continue; }
        *o++ = *p++;
        while (*p && strchr("-+ #0123456789.*", *p)) *o++ = *p++;
        if (*p == 'z') { *o++ = 'l', *o++ = 'l'; p++; }
        if (*p) *o++ = *p++;
    }
    *o = 0;
    return buf;
}
static int zc_wasm_vfprintf(FILE *f, const char *fmt, va_list ap) {
    char *ll = zc_wasm_format(fmt);
    int r = vfprintf(f, ll ? ll : fmt, ap);
    free(ll);
    return r;
}
static int zc_wasm_vsnprintf(char *s, zc_wasm_size_t n, const char *fmt, va_list ap) {
    char *ll = zc_wasm_format(fmt);
    int r = vsnprintf(s, (size_t)n, ll ? ll : fmt, ap);
    free(ll);
    return r;
}
static int zc_wasm_fprintf(FILE *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = zc_wasm_vfprintf(f, fmt, ap);
    va_end(ap);
    return r;
}
static int zc_wasm_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = zc_wasm_vfprintf(stdout, fmt, ap);
    va_end(ap);
    return r;
}
static int zc_wasm_snprintf(char *s, zc_wasm_size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = zc_wasm_vsnprintf(s, n, fmt, ap);
    va_end(ap);
    return r;
}
static ssize_t zc_wasm_getline(char **line, zc_wasm_size_t *cap, FILE *f) {
    size_t c = (size_t)*cap;
    ssize_t r = getline(line, &c, f);
    *cap = c;
    return r;
}
// (the planner reads the text, not the length: *len stays 0)
static FILE *zc_wasm_open_memstream(char **buf, zc_wasm_size_t *len) {
    static size_t ignored;
    *len = 0;
    return open_memstream(buf, &ignored);
}
#define vfprintf(...) zc_wasm_vfprintf(__VA_ARGS__)
#define vsnprintf(...) zc_wasm_vsnprintf(__VA_ARGS__)
#define fprintf(...) zc_wasm_fprintf(__VA_ARGS__)
#define printf(...) zc_wasm_printf(__VA_ARGS__)
#define snprintf(...) zc_wasm_snprintf(__VA_ARGS__)
#define getline(...) zc_wasm_getline(__VA_ARGS__)
#define open_memstream(...) zc_wasm_open_memstream(__VA_ARGS__)
#define size_t zc_wasm_size_t
// (functions declared with format(printf) still check %zu against the real size_t: the wrappers
// above print it right)
#pragma clang diagnostic ignored "-Wformat"
#include "run/planner.h"
#include "run/ds_config.h"
#include "cpu/gemm_bf16.h"
// cpu/workspace.h keeps element offsets in long, 32 bits here too: 64 bits for it alone (the
// headers above, which it includes, are in already; zero.h's unsigned long counters stay as they are)
#define long long long
#include "cpu/workspace.h"
#include "gpu/layout.h"
#undef long

static void ds_out(const char *name, const char *value) { printf("--%s\n%s\n", name, value); }

static int ds_options(const char *path, const char *world_s) {
    TrainConfig c;
    config_defaults(&c);
    int world = atoi(world_s);
    if (world < 1) world = 1;
    if (ds_config_apply(&c, path, world, 0)) return 1;
    char buf[64];
    ds_out("precision", zc_dtype_names[c.precision]);
    ds_out("optimizer", optimizer_names[c.optimizer]);
    snprintf(buf, sizeof(buf), "%d", c.zero_stage), ds_out("zero-stage", buf);
    snprintf(buf, sizeof(buf), "%d", c.batch), ds_out("batch", buf);
    snprintf(buf, sizeof(buf), "%d", c.grad_accum), ds_out("grad-accum", buf);
    ds_out("offload-optimizer", zero_offload_names[c.offload_optimizer]);
    ds_out("offload-param", zero_offload_names[c.offload_param]);
    GPT2Recompute r = config_recompute(&c);
    ds_out("recompute", gpt2_recompute_names[r.mode]);
    snprintf(buf, sizeof(buf), "%d", gpt2_recompute_every(r)), ds_out("recompute-every", buf);
    ds_out("cpu-checkpointing", r.host ? "on" : "off");
    return 0;
}

int main(int argc, char **argv) {
    int rc;
    if (argc == 4 && !strcmp(argv[1], "--ds-config")) rc = ds_options(argv[2], argv[3]);
    else if (!strcmp(argv[0], "train_gpt")) { // the GPU trainer's plan, as its default (bf16) build hands it over
        PlanBackend gpu = gpu_plan_backend(ZC_BF16);
        ConfigBuild build = gpu_config_build(ZC_BF16);
        rc = planner_main(argc, argv, &gpu, &build);
    } else rc = planner_main(argc, argv, &cpu_plan_backend, &config_cpu_build);
    fflush(NULL);
    return rc;
}
