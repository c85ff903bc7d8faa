// config.h: the trainer's options, their defaults, the command line, and their validation.
//
// Contract
//   - TrainConfig holds every option of a training run; config_defaults() fills it.
//   - config_parse() reads GNU long options (argv) into it; config_validate() checks that the
//     options fit each other and the model. Both print ONE line naming the culprit and return
//     -1 on bad input; the caller exits. --help prints every option with its default.
//   - Every setting has a key (CK_*, named after its option) and a source: default, command line,
//     the --deepspeed file, or derived from other settings. config_parse() marks what the command
//     line gave; ds_config.h (the DeepSpeed JSON) reads the marks to resolve "auto" and to refuse
//     conflicts, and records what the file set; config_value() renders any key for the
//     resolved-configuration print (ds_config.h's config_print_resolved) and the JSON log.
//   - The lr schedule's options live here; the schedule itself is lr_at_step() in optimizer.h.
// Shared by both trainers (C11 and CUDA C++); no global state (getopt's own aside).
#ifndef CONFIG_H
#define CONFIG_H

#include <getopt.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "core/gpt2.h"

// lr schedules: ours (linear warmup, then constant / linear / cosine down to min_lr_frac) and
// DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR (optimizer.h has the formulas).
enum { LR_CONSTANT, LR_LINEAR, LR_COSINE, LR_DS_WARMUP, LR_DS_WARMUP_DECAY, LR_DS_WARMUP_COSINE, LR_NUM_SCHEDULES };
enum { LR_WARMUP_LOG, LR_WARMUP_LINEAR };          // warmup_type of DeepSpeed's schedules
enum { PRECISION_FP32, PRECISION_BF16, PRECISION_FP16, PRECISION_NUM }; // planner.h's order

// The precisions this trainer runs: all three on the CPU. The GPU trainer's kernels are
// compiled for one element type (as llm.c's): `make train_gpt PRECISION=BF16|FP16|FP32`
// defines GPU_PRECISION_<P> (none: BF16, the default), and the binary runs that precision only,
// by default (config_defaults) and as the one --precision it accepts (config_parse refuses the
// others at once, config_validate those a --deepspeed file asked for).
#ifdef __CUDACC__
#if defined(GPU_PRECISION_FP32) + defined(GPU_PRECISION_BF16) + defined(GPU_PRECISION_FP16) > 1
#error "define at most one of GPU_PRECISION_FP32, GPU_PRECISION_BF16, GPU_PRECISION_FP16"
#endif
#if defined(GPU_PRECISION_FP32)
#define CONFIG_GPU_PRECISION PRECISION_FP32
#define CONFIG_PRECISIONS "fp32 (this build)"
#define CONFIG_PRECISION_BUILDS "                        bf16, fp16: make train_gpt PRECISION=BF16 or FP16\n"
#elif defined(GPU_PRECISION_FP16)
#define CONFIG_GPU_PRECISION PRECISION_FP16
#define CONFIG_PRECISIONS "fp16 (this build)"
#define CONFIG_PRECISION_BUILDS "                        bf16, fp32: make train_gpt PRECISION=BF16 or FP32\n"
#else
#define CONFIG_GPU_PRECISION PRECISION_BF16
#define CONFIG_PRECISIONS "bf16 (this build)"
#define CONFIG_PRECISION_BUILDS "                        fp16, fp32: make train_gpt PRECISION=FP16 or FP32\n"
#endif
#define CONFIG_DEFAULT_PRECISION CONFIG_GPU_PRECISION
#else
#define CONFIG_PRECISIONS "fp32 | bf16 | fp16"
#define CONFIG_PRECISION_BUILDS ""
#define CONFIG_DEFAULT_PRECISION PRECISION_FP32
#endif

// DeepSpeed settings the trainer has no option for: recorded from the file, reported in the
// resolved configuration with whether the trainer honours them (ds_config.h), else unused.
enum {
    DSX_OVERLAP_COMM, DSX_REDUCE_BUCKET_SIZE, DSX_ALLGATHER_BUCKET_SIZE, DSX_CONTIGUOUS_GRADIENTS,
    DSX_REDUCE_SCATTER, DSX_ALLGATHER_PARTITIONS, DSX_PREFETCH_BUCKET_SIZE, DSX_PARAM_PERSISTENCE_THRESHOLD,
    DSX_MAX_LIVE_PARAMETERS, DSX_MAX_REUSE_DISTANCE, DSX_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE, DSX_SUB_GROUP_SIZE,
    DSX_OFFLOAD_OPTIMIZER_DEVICE, DSX_OFFLOAD_OPTIMIZER_PIN_MEMORY, DSX_OFFLOAD_PARAM_DEVICE,
    DSX_OFFLOAD_PARAM_PIN_MEMORY, DSX_WALL_CLOCK_BREAKDOWN, DSX_NUM
};
enum { DS_DEVICE_NONE, DS_DEVICE_CPU, DS_DEVICE_NVME }; // offload_*.device

// Keys of every setting, in --help's order; config_key_names[] has their option names.
enum {
    CK_INIT, CK_MODEL, CK_LAYERS, CK_CHANNELS, CK_HEADS, CK_MAX_SEQ_LEN, CK_VOCAB_SIZE,
    CK_TRAIN_DATA, CK_VAL_DATA, CK_TOKENIZER, CK_SHUFFLE,
    CK_BATCH, CK_SEQ_LEN, CK_TOTAL_BATCH, CK_GRAD_ACCUM, CK_STEPS,
    CK_LR, CK_LR_SCHEDULE, CK_WARMUP, CK_MIN_LR_FRAC, CK_WARMUP_MIN_LR, CK_WARMUP_TYPE, CK_LR_TOTAL_STEPS,
    CK_WARMUP_MIN_RATIO, CK_WEIGHT_DECAY, CK_BETA1, CK_BETA2, CK_EPS, CK_GRAD_CLIP,
    CK_PRECISION, CK_LOSS_SCALE, CK_INITIAL_SCALE_POWER, CK_LOSS_SCALE_WINDOW, CK_HYSTERESIS, CK_MIN_LOSS_SCALE,
    CK_CONSECUTIVE_HYSTERESIS, CK_ON_MIN_SCALE,
    CK_VAL_EVERY, CK_VAL_STEPS, CK_SAMPLE_EVERY, CK_SAMPLE_LEN, CK_SEED, CK_OUT, CK_SAVE_EVERY, CK_LOG,
    CK_DUMP_GRADS, CK_PRINT_EVERY, CK_RESUME,
    CK_ZERO_STAGE, CK_COMM_TIMEOUT, CK_DEEPSPEED, CK_STRICT,
    CK_DSX, // CK_DSX + DSX_*: the DeepSpeed-only settings
    CK_NUM = CK_DSX + DSX_NUM
};
static const char *const config_key_names[CK_NUM] = {
    "init", "model", "layers", "channels", "heads", "max-seq-len", "vocab-size",
    "train-data", "val-data", "tokenizer", "no-shuffle",
    "batch", "seq-len", "total-batch", "grad-accum", "steps",
    "lr", "lr-schedule", "warmup", "min-lr-frac", "warmup-min-lr", "warmup-type", "lr-total-steps",
    "warmup-min-ratio", "weight-decay", "beta1", "beta2", "eps", "grad-clip",
    "precision", "loss-scale", "initial-scale-power", "loss-scale-window", "hysteresis", "min-loss-scale",
    "consecutive-hysteresis", "on-min-scale",
    "val-every", "val-steps", "sample-every", "sample-len", "seed", "out", "save-every", "log",
    "dump-grads", "print-every", "resume",
    "zero-stage", "comm-timeout", "deepspeed", "strict",
    "zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size",
    "zero_optimization.allgather_bucket_size", "zero_optimization.contiguous_gradients",
    "zero_optimization.reduce_scatter", "zero_optimization.allgather_partitions",
    "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.stage3_max_live_parameters", "zero_optimization.stage3_max_reuse_distance",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save", "zero_optimization.sub_group_size",
    "zero_optimization.offload_optimizer.device", "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_param.device", "zero_optimization.offload_param.pin_memory",
    "wall_clock_breakdown"};

// Where a setting's value came from, and what the --deepspeed file said about it.
enum { CFG_SRC_DEFAULT, CFG_SRC_CLI, CFG_SRC_FILE, CFG_SRC_DERIVED };
enum { CFG_FILE_SILENT, CFG_FILE_AUTO, CFG_FILE_VALUE };

typedef struct {
    // model: --init FILE, or --model dNN, or the explicit shape
    const char *init_path;
    const char *model_name;
    GPT2Config model;
    // data
    const char *train_data, *val_data, *tokenizer_path;
    int shuffle;
    // batch: B sequences of T tokens per micro-step; total_batch tokens per optimizer step
    // = B * T * processes * grad_accum. grad_accum 0 until config_validate derives it.
    int batch, seq_len;
    long total_batch;
    int grad_accum;
    int steps;
    // optimizer
    float lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    int lr_schedule, warmup;
    // DeepSpeed's schedules: warmup from warmup_min_lr (WarmupLR, WarmupDecayLR) or from
    // warmup_min_ratio * lr (WarmupCosineLR), log or linear; they end at lr_total_steps (0: steps).
    float warmup_min_lr, warmup_min_ratio;
    int warmup_type, lr_total_steps;
    // precision and DeepSpeed's fp16 loss scaler (mixed_precision.h); the GPU trainer runs the
    // one it was compiled for
    int precision;
    float loss_scale, min_loss_scale;          // loss_scale 0: dynamic
    int initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis;
    int on_min_scale_skip;                     // overflow at min_loss_scale: 0 abort, 1 skip the step
    // evaluation, sampling, output
    int val_every, val_steps, sample_every, sample_len;
    uint64_t seed;
    const char *out_dir, *log_path, *dump_grads_path;
    const char *resume_path; // a sharded checkpoint (checkpoint.h) to continue from
    int save_every;
    int print_every;      // the step line on stdout every N steps (and the first and last)
    // data parallelism
    int zero_stage;       // 0-3, see zero.h
    float comm_timeout;   // seconds a collective may take before the job is aborted
    // --deepspeed FILE (ds_config.h) and what it set that has no option
    const char *ds_config_path;
    int ds_strict;        // --strict: unknown or unimplemented DeepSpeed keys are errors
    double ds_extra[DSX_NUM];
    // bookkeeping: where each setting came from (CFG_SRC_*), what the file said (CFG_FILE_*)
    // and under which key path (a string literal), and the world config_validate saw
    unsigned char source[CK_NUM], file_said[CK_NUM];
    const char *file_key[CK_NUM];
    int world;
} TrainConfig;

static inline void config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof(*c));
    // A small model that trains visibly on the embedded Brown corpus in a minute on two cores.
    c->model.num_layers = 4; c->model.channels = 256; c->model.num_heads = 4;
    c->model.max_seq_len = 256; c->model.vocab_size = 50257; c->model.padded_vocab_size = 50304;
    c->train_data = "data/brown_train_*.bin";
    c->val_data = "data/brown_val_*.bin";
    c->tokenizer_path = "data/gpt2_tokenizer.bin";
    c->shuffle = 1;
    c->batch = 8; c->seq_len = 64; c->total_batch = 0; c->steps = 100;
    c->lr = 1e-3f; c->min_lr_frac = 0.1f; c->weight_decay = 0.1f;
    c->beta1 = 0.9f; c->beta2 = 0.95f; c->eps = 1e-8f; c->grad_clip = 1.0f;
    c->lr_schedule = LR_COSINE; c->warmup = 10;
    c->warmup_min_lr = 0.0f; c->warmup_min_ratio = 0.0f; c->warmup_type = LR_WARMUP_LOG; c->lr_total_steps = 0;
    // DeepSpeed's defaults for the loss scaler
    c->precision = CONFIG_DEFAULT_PRECISION;
    c->loss_scale = 0.0f; c->initial_scale_power = 16; c->loss_scale_window = 1000; c->hysteresis = 2;
    c->min_loss_scale = 1.0f; c->consecutive_hysteresis = 0; c->on_min_scale_skip = 0;
    c->val_every = 25; c->val_steps = 10; c->sample_every = 50; c->sample_len = 64;
    c->seed = 1337;
    c->print_every = 1;
    c->zero_stage = 0; c->comm_timeout = 300.0f;
    c->world = 1;
}

static const char *const lr_schedule_names[LR_NUM_SCHEDULES] = {"constant", "linear", "cosine",
                                                                "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
static const char *const lr_warmup_type_names[2] = {"log", "linear"};
static const char *const precision_names[PRECISION_NUM] = {"fp32", "bf16", "fp16"};

#ifdef __CUDACC__
static inline int config_precision_implemented(int precision) { return precision == CONFIG_GPU_PRECISION; }
#else
static inline int config_precision_implemented(int precision) { (void)precision; return 1; }
#endif

// The one line for a precision this binary does not run; key and file: where a --deepspeed
// file asked for it (NULL: the command line). Only the GPU trainer refuses any.
static inline void config_precision_refused(int precision, const char *key, const char *file) {
    fprintf(stderr, "error: --precision %s%s%s%s%s%s: ", precision_names[precision], key ? " (" : "", key ? key : "",
            key ? " in " : "", key ? file : "", key ? ")" : "");
#ifdef __CUDACC__
    static const char *const make_names[PRECISION_NUM] = {"FP32", "BF16", "FP16"};
    fprintf(stderr, "this binary was built for %s (make train_gpt PRECISION=%s)\n", precision_names[CONFIG_GPU_PRECISION],
            make_names[precision]);
#else
    fprintf(stderr, "not implemented yet in this trainer\n");
#endif
}

static inline void config_help(const char *prog) {
    TrainConfig d;
    config_defaults(&d);
    printf("usage: %s [options]\n\n", prog);
    printf("model (one of):\n"
           "  --init FILE           start from an llm.c checkpoint (fp32, version 3)\n"
           "  --model NAME          GPT-2 from scratch: d12 (124M), d24 (350M), d36 (774M), d48 (1558M)\n"
           "  --layers N            explicit shape from scratch (default %d)\n"
           "  --channels N          (default %d)\n"
           "  --heads N             (default %d)\n"
           "  --max-seq-len N       (default %d)\n"
           "  --vocab-size N        (default %d; padded to a multiple of 128)\n",
           d.model.num_layers, d.model.channels, d.model.num_heads, d.model.max_seq_len, d.model.vocab_size);
    printf("data:\n"
           "  --train-data GLOB     token shards to train on (default %s)\n"
           "  --val-data GLOB       token shards to validate on (default %s)\n"
           "  --tokenizer FILE      for printing samples as text (default %s)\n"
           "  --no-shuffle          read sequences in file order (default: shuffled per epoch)\n",
           d.train_data, d.val_data, d.tokenizer_path);
    printf("batch and steps:\n"
           "  --batch B             sequences per micro-step per process (default %d)\n"
           "  --seq-len T           tokens per sequence (default %d)\n"
           "  --total-batch N       tokens per optimizer step, a multiple of B*T*processes;\n"
           "                        gradients accumulate over the micro-steps (default B*T*processes*G)\n"
           "  --grad-accum G        micro-steps per optimizer step; with --total-batch they must agree\n"
           "                        (default: --total-batch / (B*T*processes), else 1)\n"
           "  --steps N             optimizer steps (default %d)\n",
           d.batch, d.seq_len, d.steps);
    printf("optimizer (AdamW):\n"
           "  --lr X                peak learning rate (default %g)\n"
           "  --lr-schedule S       constant | linear | cosine after a linear warmup, or DeepSpeed's\n"
           "                        WarmupLR | WarmupDecayLR | WarmupCosineLR (default %s)\n"
           "  --warmup N            warmup steps (default %d)\n"
           "  --min-lr-frac X       final lr as a fraction of the peak; WarmupCosineLR's cos_min_ratio\n"
           "                        (default %g)\n"
           "  --warmup-min-lr X     WarmupLR, WarmupDecayLR: lr the warmup starts from (default %g)\n"
           "  --warmup-min-ratio X  WarmupCosineLR: warmup starts from X * lr (default %g)\n"
           "  --warmup-type T       DeepSpeed schedules' warmup: log | linear (default %s)\n"
           "  --lr-total-steps N    WarmupDecayLR, WarmupCosineLR: total_num_steps (default: --steps)\n"
           "  --weight-decay X      decoupled, on 2-D weights only (default %g)\n"
           "  --beta1 X --beta2 X --eps X   (defaults %g, %g, %g)\n"
           "  --grad-clip X         clip the global gradient norm to X; 0 = off (default %g)\n",
           d.lr, lr_schedule_names[d.lr_schedule], d.warmup, d.min_lr_frac, d.warmup_min_lr, d.warmup_min_ratio,
           lr_warmup_type_names[d.warmup_type], d.weight_decay, d.beta1, d.beta2, d.eps, d.grad_clip);
    printf("precision (DeepSpeed's fp16/bf16 settings):\n"
           "  --precision P         " CONFIG_PRECISIONS " (default %s): bf16/fp16 keep parameters,\n"
           "                        gradients, activations in 16 bits, fp32 master weights and Adam state\n"
           CONFIG_PRECISION_BUILDS
           "  --loss-scale X        fp16: a static loss scale; 0 = dynamic (default %g)\n"
           "  --initial-scale-power N  fp16 dynamic scale starts at 2^N (default %d)\n"
           "  --loss-scale-window N fp16: double the scale after N steps without overflow (default %d)\n"
           "  --hysteresis N        fp16: overflows tolerated before the scale halves (default %d)\n"
           "  --consecutive-hysteresis  fp16: refill the hysteresis on every good step\n"
           "  --min-loss-scale X    fp16: the dynamic scale's floor (default %g)\n"
           "  --on-min-scale A      fp16: overflow at the floor: abort | skip the step (default %s)\n",
           precision_names[d.precision], d.loss_scale, d.initial_scale_power, d.loss_scale_window, d.hysteresis,
           d.min_loss_scale, d.on_min_scale_skip ? "skip" : "abort");
    printf("evaluation and output:\n"
           "  --val-every N         validate every N steps; 0 = never (default %d)\n"
           "  --val-steps N         batches per validation (default %d)\n"
           "  --sample-every N      print a sample every N steps; 0 = never (default %d)\n"
           "  --sample-len N        tokens per sample; 0 = no sampling (default %d)\n"
           "  --seed N              initialisation, shuffling and sampling (default %llu)\n"
           "  --out DIR             directory for checkpoints: DIR/step_N/ (sharded, for --resume),\n"
           "                        DIR/latest, and DIR/model_N.bin (llm.c format), at the end\n"
           "  --save-every N        and every N steps\n"
           "  --resume PATH         continue from a checkpoint (DIR: its latest; or DIR/step_N), on\n"
           "                        any number of processes and any ZeRO stage; same options as before\n"
           "  --log FILE            JSON lines: one object per step and per validation\n"
           "  --dump-grads FILE     write the first step's gradients as a checkpoint-format file; for tests\n"
           "  --print-every N       print the step line every N steps, and the first and last (default 1)\n"
           "  --help                this text\n",
           d.val_every, d.val_steps, d.sample_every, d.sample_len, (unsigned long long)d.seed);
    printf("data parallelism (run under mpirun -np N):\n"
           "  --zero-stage S        0: replicate everything, all-reduce gradients; 1: partition the\n"
           "                        optimizer state; 2: and the gradients; 3: and the parameters (default %d)\n"
           "  --comm-timeout SEC    abort the job when a collective takes longer (default %g)\n",
           d.zero_stage, d.comm_timeout);
    printf("DeepSpeed configuration (docs/deepspeed_config.md):\n"
           "  --deepspeed FILE      read a DeepSpeed JSON config; its \"auto\" values take the options above,\n"
           "                        and an option that disagrees with a value in the file is an error\n"
           "  --strict              keys this trainer does not implement are errors, not warnings\n");
}

// Number parsing that rejects trailing junk and out-of-range values, naming the option.
static inline int config_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end); // accepts 5e5 as well as 500000
    if (errno || end == s || *end || v != floor(v) || v < lo || v > hi) {
        fprintf(stderr, "error: --%s: '%s' is not a whole number in [%ld, %ld]\n", opt, s, lo, hi);
        return -1;
    }
    *out = (long)v;
    return 0;
}
static inline int config_int(const char *opt, const char *s, long lo, long hi, int *out) {
    long v;
    if (config_long(opt, s, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}
static inline int config_float(const char *opt, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "error: --%s: '%s' is not a number in [%g, %g]\n", opt, s, lo, hi);
        return -1;
    }
    *out = (float)v;
    return 0;
}


static inline int config_choice(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++) if (!strcmp(s, names[i])) return i;
    return -1;
}

// The key of an option name (config_key_names), or -1.
static inline int config_key(const char *name) {
    for (int k = 0; k < CK_NUM; k++) if (!strcmp(name, config_key_names[k])) return k;
    return -1;
}
static inline void config_mark(TrainConfig *c, const char *name, int source) {
    int k = config_key(name);
    if (k >= 0) c->source[k] = (unsigned char)source;
}
static inline int config_given(const TrainConfig *c, int key) { return c->source[key] == CFG_SRC_CLI; }

// Returns 0 to run, 1 when --help was printed, -1 on a bad option (one line printed).
// Marks every option it reads as coming from the command line (c->source).
static inline int config_parse(TrainConfig *c, int argc, char **argv) {
    static const struct option opts[] = {
        {"init", 1, 0, 0}, {"model", 1, 0, 0}, {"layers", 1, 0, 0}, {"channels", 1, 0, 0},
        {"heads", 1, 0, 0}, {"max-seq-len", 1, 0, 0}, {"vocab-size", 1, 0, 0},
        {"train-data", 1, 0, 0}, {"val-data", 1, 0, 0}, {"tokenizer", 1, 0, 0}, {"no-shuffle", 0, 0, 0},
        {"batch", 1, 0, 0}, {"seq-len", 1, 0, 0}, {"total-batch", 1, 0, 0}, {"steps", 1, 0, 0},
        {"lr", 1, 0, 0}, {"lr-schedule", 1, 0, 0}, {"warmup", 1, 0, 0}, {"min-lr-frac", 1, 0, 0},
        {"weight-decay", 1, 0, 0}, {"beta1", 1, 0, 0}, {"beta2", 1, 0, 0}, {"eps", 1, 0, 0},
        {"grad-clip", 1, 0, 0}, {"val-every", 1, 0, 0}, {"val-steps", 1, 0, 0},
        {"sample-every", 1, 0, 0}, {"sample-len", 1, 0, 0}, {"seed", 1, 0, 0}, {"out", 1, 0, 0},
        {"save-every", 1, 0, 0}, {"log", 1, 0, 0}, {"dump-grads", 1, 0, 0}, {"help", 0, 0, 0}, {"resume", 1, 0, 0},
        {"zero-stage", 1, 0, 0}, {"comm-timeout", 1, 0, 0},
        {"grad-accum", 1, 0, 0}, {"warmup-min-lr", 1, 0, 0}, {"warmup-min-ratio", 1, 0, 0},
        {"warmup-type", 1, 0, 0}, {"lr-total-steps", 1, 0, 0}, {"precision", 1, 0, 0},
        {"loss-scale", 1, 0, 0}, {"initial-scale-power", 1, 0, 0}, {"loss-scale-window", 1, 0, 0},
        {"hysteresis", 1, 0, 0}, {"consecutive-hysteresis", 0, 0, 0}, {"min-loss-scale", 1, 0, 0},
        {"on-min-scale", 1, 0, 0}, {"print-every", 1, 0, 0}, {"deepspeed", 1, 0, 0}, {"strict", 0, 0, 0},
        {0, 0, 0, 0}};
    int shape_given = 0, idx, r = 0;
    optind = 1;
    opterr = 0;
    for (;;) {
        int ch = getopt_long(argc, argv, "", opts, &idx);
        if (ch == -1) break;
        if (ch != 0) {
            fprintf(stderr, "error: %s: unknown option or missing value (see --help)\n", argv[optind - 1]);
            return -1;
        }
        const char *o = opts[idx].name, *a = optarg;
        if (!strcmp(o, "help")) { config_help(argv[0]); return 1; }
        else if (!strcmp(o, "init")) c->init_path = a;
        else if (!strcmp(o, "model")) {
            c->model_name = a;
            if (gpt2_preset(a, &c->model)) {
                fprintf(stderr, "error: --model: unknown model '%s' (d12, d24, d36 or d48)\n", a);
                return -1;
            }
        }
        else if (!strcmp(o, "layers")) { r = config_int(o, a, 1, GPT2_MAX_LAYERS, &c->model.num_layers); shape_given = 1; }
        else if (!strcmp(o, "channels")) { r = config_int(o, a, 1, 1 << 16, &c->model.channels); shape_given = 1; }
        else if (!strcmp(o, "heads")) { r = config_int(o, a, 1, 1 << 12, &c->model.num_heads); shape_given = 1; }
        else if (!strcmp(o, "max-seq-len")) { r = config_int(o, a, 1, 1 << 20, &c->model.max_seq_len); shape_given = 1; }
        else if (!strcmp(o, "vocab-size")) {
            r = config_int(o, a, 1, 65536, &c->model.vocab_size);
            c->model.padded_vocab_size = (int)gpt2_round_up((size_t)c->model.vocab_size, 128);
            shape_given = 1;
        }
        else if (!strcmp(o, "train-data")) c->train_data = a;
        else if (!strcmp(o, "val-data")) c->val_data = a;
        else if (!strcmp(o, "tokenizer")) c->tokenizer_path = a;
        else if (!strcmp(o, "no-shuffle")) c->shuffle = 0;
        else if (!strcmp(o, "batch")) r = config_int(o, a, 1, 1 << 20, &c->batch);
        else if (!strcmp(o, "seq-len")) r = config_int(o, a, 1, 1 << 20, &c->seq_len);
        else if (!strcmp(o, "total-batch")) r = config_long(o, a, 1, 1L << 40, &c->total_batch);
        else if (!strcmp(o, "steps")) r = config_int(o, a, 0, 1 << 30, &c->steps);
        else if (!strcmp(o, "lr")) r = config_float(o, a, 0, 1e3, &c->lr);
        else if (!strcmp(o, "lr-schedule")) {
            int k = config_choice(a, lr_schedule_names, LR_NUM_SCHEDULES);
            if (k < 0) {
                fprintf(stderr, "error: --lr-schedule: '%s' is not constant, linear, cosine, WarmupLR, "
                                "WarmupDecayLR or WarmupCosineLR\n", a);
                return -1;
            }
            c->lr_schedule = k;
        }
        else if (!strcmp(o, "warmup")) r = config_int(o, a, 0, 1 << 30, &c->warmup);
        else if (!strcmp(o, "min-lr-frac")) r = config_float(o, a, 0, 1, &c->min_lr_frac);
        else if (!strcmp(o, "weight-decay")) r = config_float(o, a, 0, 1e3, &c->weight_decay);
        else if (!strcmp(o, "beta1")) r = config_float(o, a, 0, 0.999999, &c->beta1);
        else if (!strcmp(o, "beta2")) r = config_float(o, a, 0, 0.999999999, &c->beta2);
        else if (!strcmp(o, "eps")) r = config_float(o, a, 1e-30, 1, &c->eps);
        else if (!strcmp(o, "grad-clip")) r = config_float(o, a, 0, 1e30, &c->grad_clip);
        else if (!strcmp(o, "val-every")) r = config_int(o, a, 0, 1 << 30, &c->val_every);
        else if (!strcmp(o, "val-steps")) r = config_int(o, a, 0, 1 << 30, &c->val_steps);
        else if (!strcmp(o, "sample-every")) r = config_int(o, a, 0, 1 << 30, &c->sample_every);
        else if (!strcmp(o, "sample-len")) r = config_int(o, a, 0, 1 << 20, &c->sample_len);
        else if (!strcmp(o, "seed")) { long s; r = config_long(o, a, 0, 1L << 53, &s); c->seed = (uint64_t)s; }
        else if (!strcmp(o, "out")) c->out_dir = a;
        else if (!strcmp(o, "save-every")) r = config_int(o, a, 0, 1 << 30, &c->save_every);
        else if (!strcmp(o, "log")) c->log_path = a;
        else if (!strcmp(o, "dump-grads")) c->dump_grads_path = a;
        else if (!strcmp(o, "resume")) c->resume_path = a;
        else if (!strcmp(o, "zero-stage")) r = config_int(o, a, 0, 3, &c->zero_stage);
        else if (!strcmp(o, "comm-timeout")) r = config_float(o, a, 0.001, 1e9, &c->comm_timeout);
        else if (!strcmp(o, "grad-accum")) r = config_int(o, a, 1, 1 << 20, &c->grad_accum);
        else if (!strcmp(o, "warmup-min-lr")) r = config_float(o, a, 0, 1e3, &c->warmup_min_lr);
        else if (!strcmp(o, "warmup-min-ratio")) r = config_float(o, a, 0, 1, &c->warmup_min_ratio);
        else if (!strcmp(o, "warmup-type")) {
            if ((c->warmup_type = config_choice(a, lr_warmup_type_names, 2)) < 0) {
                fprintf(stderr, "error: --warmup-type: '%s' is not log or linear\n", a);
                return -1;
            }
        }
        else if (!strcmp(o, "lr-total-steps")) r = config_int(o, a, 1, 1 << 30, &c->lr_total_steps);
        else if (!strcmp(o, "precision")) {
            if ((c->precision = config_choice(a, precision_names, PRECISION_NUM)) < 0) {
                fprintf(stderr, "error: --precision: '%s' is not fp32, bf16 or fp16\n", a);
                return -1;
            }
            // refused here too, so that `--precision X --help` fails where X does not run (tests probe so)
            if (!config_precision_implemented(c->precision)) {
                config_precision_refused(c->precision, NULL, NULL);
                return -1;
            }
        }
        else if (!strcmp(o, "loss-scale")) r = config_float(o, a, 0, 1e38, &c->loss_scale);
        else if (!strcmp(o, "initial-scale-power")) r = config_int(o, a, -126, 127, &c->initial_scale_power);
        else if (!strcmp(o, "loss-scale-window")) r = config_int(o, a, 1, 1 << 30, &c->loss_scale_window);
        else if (!strcmp(o, "hysteresis")) r = config_int(o, a, 1, 1 << 30, &c->hysteresis);
        else if (!strcmp(o, "consecutive-hysteresis")) c->consecutive_hysteresis = 1;
        else if (!strcmp(o, "min-loss-scale")) r = config_float(o, a, 1e-38, 1e38, &c->min_loss_scale);
        else if (!strcmp(o, "on-min-scale")) {
            static const char *const actions[2] = {"abort", "skip"};
            if ((c->on_min_scale_skip = config_choice(a, actions, 2)) < 0) {
                fprintf(stderr, "error: --on-min-scale: '%s' is not abort or skip\n", a);
                return -1;
            }
        }
        else if (!strcmp(o, "print-every")) r = config_int(o, a, 1, 1 << 30, &c->print_every);
        else if (!strcmp(o, "deepspeed")) c->ds_config_path = a;
        else if (!strcmp(o, "strict")) c->ds_strict = 1;
        if (r) return -1;
        config_mark(c, o, CFG_SRC_CLI);
    }
    if (optind < argc) {
        fprintf(stderr, "error: %s: unexpected argument (options are --name value)\n", argv[optind]);
        return -1;
    }
    int sources = (c->init_path != NULL) + (c->model_name != NULL) + shape_given + (c->resume_path != NULL);
    if (sources > 1) {
        fprintf(stderr, "error: --resume, --init, --model and --layers/--channels/--heads/--max-seq-len/--vocab-size "
                        "each define the model; give only one of them\n");
        return -1;
    }
    return 0;
}

// Checks the options against each other and the model (known once --init's header is read).
// world: processes in the job. Fills total_batch when it was left to its default.
static inline int config_validate(TrainConfig *c, int world) {
    const char *why = gpt2_config_problem(&c->model);
    if (why) { fprintf(stderr, "error: model options: %s\n", why); return -1; }
    if (c->seq_len > c->model.max_seq_len) {
        fprintf(stderr, "error: --seq-len %d exceeds the model's max_seq_len %d\n", c->seq_len, c->model.max_seq_len);
        return -1;
    }
    c->world = world;
    long per_micro = (long)c->batch * c->seq_len * world;
    if (c->grad_accum > 0 && c->total_batch > 0 && c->total_batch != per_micro * c->grad_accum) {
        fprintf(stderr, "error: --total-batch %ld != batch x seq-len x processes x grad-accum = %d x %d x %d x %d = %ld\n",
                c->total_batch, c->batch, c->seq_len, world, c->grad_accum, per_micro * c->grad_accum);
        return -1;
    }
    if (c->total_batch == 0) {
        c->total_batch = per_micro * (c->grad_accum > 0 ? c->grad_accum : 1);
        c->source[CK_TOTAL_BATCH] = CFG_SRC_DERIVED;
    }
    if (c->total_batch % per_micro != 0) {
        fprintf(stderr, "error: --total-batch %ld is not a multiple of batch x seq-len x processes = %d x %d x %d = %ld\n",
                c->total_batch, c->batch, c->seq_len, world, per_micro);
        return -1;
    }
    if (c->total_batch / per_micro > (1L << 30)) {
        fprintf(stderr, "error: --total-batch %ld means %ld micro-steps per optimizer step (at most 2^30)\n",
                c->total_batch, c->total_batch / per_micro);
        return -1;
    }
    if (c->grad_accum == 0) {
        c->grad_accum = (int)(c->total_batch / per_micro);
        c->source[CK_GRAD_ACCUM] = CFG_SRC_DERIVED;
    }
    if (!config_precision_implemented(c->precision)) {
        const char *k = c->precision == PRECISION_BF16 ? "bf16.enabled" : "fp16.enabled";
        if (c->source[CK_PRECISION] == CFG_SRC_FILE) config_precision_refused(c->precision, k, c->ds_config_path);
        else config_precision_refused(c->precision, NULL, NULL);
        return -1;
    }
    if (c->lr_schedule == LR_DS_WARMUP_COSINE) {
        int w = c->warmup < 2 ? 2 : c->warmup, total = c->lr_total_steps > 0 ? c->lr_total_steps : c->steps;
        if (total == w) { // DeepSpeed divides by total_num_steps - warmup_num_steps
            fprintf(stderr, "error: WarmupCosineLR: total_num_steps %d equals warmup_num_steps %d (DeepSpeed divides "
                            "by their difference); set --lr-total-steps or --warmup\n", total, w);
            return -1;
        }
    }
    if (c->dump_grads_path && world > 1 && c->zero_stage > 0) {
        fprintf(stderr, "error: --dump-grads needs the whole gradient on one rank: use one process or --zero-stage 0\n");
        return -1;
    }
    if (c->save_every > 0 && !c->out_dir) {
        fprintf(stderr, "error: --save-every needs --out DIR\n");
        return -1;
    }
    return 0;
}

static inline int config_accum_steps(const TrainConfig *c, int world) {
    return (int)(c->total_batch / ((long)c->batch * c->seq_len * world));
}

// A setting's value for reports: CV_NUM (*num; integral ones are exact), CV_FLOAT (*num, a
// float option: print it with config_float_str), CV_BOOL (*num 0/1) or CV_STR (*str, NULL if
// unset). DeepSpeed-only settings the file did not set report DeepSpeed's default (ds_config.h
// knows it), so they come back as CV_NONE here.
enum { CV_NONE, CV_NUM, CV_FLOAT, CV_BOOL, CV_STR };
static inline int config_value(const TrainConfig *c, int key, double *num, const char **str) {
    *num = 0.0; *str = NULL;
    switch (key) {
    case CK_INIT: *str = c->init_path; return CV_STR;
    case CK_MODEL: *str = c->model_name; return CV_STR;
    case CK_LAYERS: *num = c->model.num_layers; return CV_NUM;
    case CK_CHANNELS: *num = c->model.channels; return CV_NUM;
    case CK_HEADS: *num = c->model.num_heads; return CV_NUM;
    case CK_MAX_SEQ_LEN: *num = c->model.max_seq_len; return CV_NUM;
    case CK_VOCAB_SIZE: *num = c->model.vocab_size; return CV_NUM;
    case CK_TRAIN_DATA: *str = c->train_data; return CV_STR;
    case CK_VAL_DATA: *str = c->val_data; return CV_STR;
    case CK_TOKENIZER: *str = c->tokenizer_path; return CV_STR;
    case CK_SHUFFLE: *num = !c->shuffle; return CV_BOOL; // the option is --no-shuffle
    case CK_BATCH: *num = c->batch; return CV_NUM;
    case CK_SEQ_LEN: *num = c->seq_len; return CV_NUM;
    case CK_TOTAL_BATCH: *num = (double)c->total_batch; return CV_NUM;
    case CK_GRAD_ACCUM: *num = c->grad_accum; return CV_NUM;
    case CK_STEPS: *num = c->steps; return CV_NUM;
    case CK_LR: *num = c->lr; return CV_FLOAT;
    case CK_LR_SCHEDULE: *str = lr_schedule_names[c->lr_schedule]; return CV_STR;
    case CK_WARMUP: *num = c->warmup; return CV_NUM;
    case CK_MIN_LR_FRAC: *num = c->min_lr_frac; return CV_FLOAT;
    case CK_WARMUP_MIN_LR: *num = c->warmup_min_lr; return CV_FLOAT;
    case CK_WARMUP_TYPE: *str = lr_warmup_type_names[c->warmup_type]; return CV_STR;
    case CK_LR_TOTAL_STEPS: *num = c->lr_total_steps > 0 ? c->lr_total_steps : c->steps; return CV_NUM;
    case CK_WARMUP_MIN_RATIO: *num = c->warmup_min_ratio; return CV_FLOAT;
    case CK_WEIGHT_DECAY: *num = c->weight_decay; return CV_FLOAT;
    case CK_BETA1: *num = c->beta1; return CV_FLOAT;
    case CK_BETA2: *num = c->beta2; return CV_FLOAT;
    case CK_EPS: *num = c->eps; return CV_FLOAT;
    case CK_GRAD_CLIP: *num = c->grad_clip; return CV_FLOAT;
    case CK_PRECISION: *str = precision_names[c->precision]; return CV_STR;
    case CK_LOSS_SCALE: *num = c->loss_scale; return CV_FLOAT;
    case CK_INITIAL_SCALE_POWER: *num = c->initial_scale_power; return CV_NUM;
    case CK_LOSS_SCALE_WINDOW: *num = c->loss_scale_window; return CV_NUM;
    case CK_HYSTERESIS: *num = c->hysteresis; return CV_NUM;
    case CK_MIN_LOSS_SCALE: *num = c->min_loss_scale; return CV_FLOAT;
    case CK_CONSECUTIVE_HYSTERESIS: *num = c->consecutive_hysteresis; return CV_BOOL;
    case CK_ON_MIN_SCALE: *str = c->on_min_scale_skip ? "skip" : "abort"; return CV_STR;
    case CK_VAL_EVERY: *num = c->val_every; return CV_NUM;
    case CK_VAL_STEPS: *num = c->val_steps; return CV_NUM;
    case CK_SAMPLE_EVERY: *num = c->sample_every; return CV_NUM;
    case CK_SAMPLE_LEN: *num = c->sample_len; return CV_NUM;
    case CK_SEED: *num = (double)c->seed; return CV_NUM;
    case CK_OUT: *str = c->out_dir; return CV_STR;
    case CK_SAVE_EVERY: *num = c->save_every; return CV_NUM;
    case CK_LOG: *str = c->log_path; return CV_STR;
    case CK_DUMP_GRADS: *str = c->dump_grads_path; return CV_STR;
    case CK_RESUME: *str = c->resume_path; return CV_STR;
    case CK_PRINT_EVERY: *num = c->print_every; return CV_NUM;
    case CK_ZERO_STAGE: *num = c->zero_stage; return CV_NUM;
    case CK_COMM_TIMEOUT: *num = c->comm_timeout; return CV_FLOAT;
    case CK_DEEPSPEED: *str = c->ds_config_path; return CV_STR;
    case CK_STRICT: *num = c->ds_strict; return CV_BOOL;
    default: break;
    }
    if (key >= CK_DSX && key < CK_NUM && c->source[key] == CFG_SRC_FILE) {
        *num = c->ds_extra[key - CK_DSX];
        int k = key - CK_DSX;
        int is_bool = k == DSX_OVERLAP_COMM || k == DSX_CONTIGUOUS_GRADIENTS || k == DSX_REDUCE_SCATTER ||
                      k == DSX_ALLGATHER_PARTITIONS || k == DSX_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE ||
                      k == DSX_OFFLOAD_OPTIMIZER_PIN_MEMORY || k == DSX_OFFLOAD_PARAM_PIN_MEMORY ||
                      k == DSX_WALL_CLOCK_BREAKDOWN;
        if (k == DSX_OFFLOAD_OPTIMIZER_DEVICE || k == DSX_OFFLOAD_PARAM_DEVICE) {
            static const char *const devices[3] = {"none", "cpu", "nvme"};
            int d = (int)*num;
            *str = devices[d >= 0 && d < 3 ? d : 0];
            return CV_STR;
        }
        return is_bool ? CV_BOOL : CV_NUM;
    }
    return CV_NONE;
}

// The shortest decimal that reads back as the same float (0.001f prints as 0.001).
static inline void config_float_str(char *buf, size_t n, double v) {
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if ((float)strtod(buf, NULL) == (float)v) return;
    }
}

#endif // CONFIG_H
