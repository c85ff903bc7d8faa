// config.h: the trainer's options as ONE table, and everything that follows from it: the
// defaults, --help, the command line, range checks, the values for reports.
//
// Contract
//   - config_options() is the table: one row per option (its name, type, field of TrainConfig,
//     default, accepted range or choices, help text, and the DeepSpeed key that sets it, if
//     one does). config_defaults() fills a TrainConfig from it; config_help() prints it;
//     config_parse() reads GNU long options through it, range-checking each value with one line
//     naming the option on error; config_value() reads any option back for reports; ds_config.h
//     reads the DeepSpeed keys through it (ds_option). Adding an option is adding a row (and its
//     field); a few rows have a hook for what a range cannot say (--model's presets, say).
//   - config_locate_defaults() finds the defaults that name files (the data, the tokenizer:
//     relative paths) next to the program when the working directory has none of them, or says
//     in one line where it looked.
//   - config_validate() checks what no single row can: options against each other and against
//     the model (known once --init's header is read). Both print ONE line naming the culprit
//     and return -1 on bad input; the caller exits.
//   - Every setting has a key (CK_*, its row) and a source: default, command line, the
//     --deepspeed file, or derived from other settings. config_parse() marks what the command
//     line gave; ds_config.h reads the marks to resolve "auto" and to refuse conflicts, and
//     records what the file set.
//   - The build: which precisions this binary runs (the GPU trainer's kernels are compiled for
//     one) is the trainer's to say (ConfigBuild, config_set_build); the default is every
//     precision (the CPU trainer).
//   - config_lr_schedule() and config_optimizer() hand the lr schedule's and the optimizer's
//     settings to optimizer.h, which knows no options.
// Shared by both trainers (C11 and CUDA C++); no global state (getopt's own aside).
#ifndef CONFIG_H
#define CONFIG_H

#include <getopt.h>
#include <glob.h>
#include <unistd.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "mixed_precision.h"
#include "zero/location.h"

// DeepSpeed settings the trainer has no option for: recorded from the file, reported in the
// resolved configuration with whether the trainer honours them (ds_config.h), else unused.
enum {
    DSX_OVERLAP_COMM, DSX_REDUCE_BUCKET_SIZE, DSX_ALLGATHER_BUCKET_SIZE, DSX_CONTIGUOUS_GRADIENTS,
    DSX_REDUCE_SCATTER, DSX_ALLGATHER_PARTITIONS, DSX_PREFETCH_BUCKET_SIZE, DSX_PARAM_PERSISTENCE_THRESHOLD,
    DSX_MAX_LIVE_PARAMETERS, DSX_MAX_REUSE_DISTANCE, DSX_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE, DSX_SUB_GROUP_SIZE,
    DSX_WALL_CLOCK_BREAKDOWN, DSX_PARAM_BUFFER_COUNT, DSX_MAX_IN_CPU, DSX_AIO_SINGLE_SUBMIT, DSX_AIO_OVERLAP_EVENTS,
    DSX_PARTITION_ACTIVATIONS, DSX_CONTIGUOUS_MEMORY_OPTIMIZATION, DSX_NUMBER_CHECKPOINTS,
    DSX_SYNCHRONIZE_CHECKPOINT_BOUNDARY, DSX_PROFILE, DSX_PRESCALE_GRADIENTS, DSX_GRADIENT_PREDIVIDE_FACTOR,
    DSX_ZERO_ALLOW_UNTESTED_OPTIMIZER, DSX_FP16_AUTO_CAST, DSX_AIO_USE_GDS, DSX_AIO_INTRA_OP_PARALLELISM, DSX_NUM
};

// Keys of every setting: the options' rows in --help's order, then the DeepSpeed-only settings.
enum {
    CK_INIT, CK_MODEL, CK_LAYERS, CK_CHANNELS, CK_HEADS, CK_MAX_SEQ_LEN, CK_VOCAB_SIZE,
    CK_TRAIN_DATA, CK_VAL_DATA, CK_TOKENIZER, CK_SHUFFLE,
    CK_BATCH, CK_SEQ_LEN, CK_TOTAL_BATCH, CK_GRAD_ACCUM, CK_STEPS,
    CK_OPTIMIZER, CK_LR, CK_LR_SCHEDULE, CK_WARMUP, CK_MIN_LR_FRAC, CK_WARMUP_MIN_LR, CK_WARMUP_TYPE, CK_LR_TOTAL_STEPS,
    CK_WARMUP_MIN_RATIO, CK_WEIGHT_DECAY, CK_BETA1, CK_BETA2, CK_EPS, CK_BIAS_CORRECTION, CK_MOMENTUM, CK_GRAD_CLIP,
    CK_PRECISION, CK_LOSS_SCALE, CK_INITIAL_SCALE_POWER, CK_LOSS_SCALE_WINDOW, CK_HYSTERESIS, CK_MIN_LOSS_SCALE,
    CK_CONSECUTIVE_HYSTERESIS, CK_ON_MIN_SCALE,
    CK_RECOMPUTE, CK_RECOMPUTE_EVERY, CK_CPU_CHECKPOINTING,
    CK_VAL_EVERY, CK_VAL_STEPS, CK_SAMPLE_EVERY, CK_SAMPLE_LEN, CK_SEED, CK_OUT, CK_SAVE_EVERY, CK_ON_SAVE_ERROR, CK_LOG, CK_TRACE,
    CK_PROFILE_KERNELS, CK_PEAK_TFLOPS, CK_PEAK_GBPS,
    CK_DUMP_GRADS, CK_PRINT_EVERY, CK_RESUME,
    CK_ZERO_STAGE, CK_OFFLOAD_OPTIMIZER, CK_OFFLOAD_PARAM, CK_PIN_MEMORY, CK_NVME_PATH, CK_NVME_BUFFERS,
    CK_NVME_BUFFER_SIZE, CK_AIO_THREADS, CK_AIO_QUEUE_DEPTH, CK_AIO_BLOCK_SIZE, CK_COMM_TIMEOUT, CK_DEEPSPEED, CK_STRICT,
    CK_OPTIONS,             // the table's rows end here
    CK_DSX = CK_OPTIONS,    // CK_DSX + DSX_*: the DeepSpeed-only settings
    CK_NUM = CK_DSX + DSX_NUM
};

// Where a setting's value came from, and what the --deepspeed file said about it.
enum { CFG_SRC_DEFAULT, CFG_SRC_CLI, CFG_SRC_FILE, CFG_SRC_DERIVED };
enum { CFG_FILE_SILENT, CFG_FILE_AUTO, CFG_FILE_VALUE };

// Which precisions this binary runs. The CPU trainer runs all three; the GPU trainer's kernels
// are compiled for one element type (as llm.c's) and it says so with config_set_build.
typedef struct {
    unsigned precisions;        // bit (1 << ZC_*) for each precision this binary runs
    int default_precision;
    const char *refusal[ZC_NUM_DTYPES]; // what to say of each precision it does not run (NULL: a default)
    const char *help_note;      // --help's line on the precisions of other builds ("" for none)
    int kernel_profiler;        // --profile-kernels times this binary's kernels (the GPU trainer's)
} ConfigBuild;

typedef struct TrainConfig {
    // model: --init FILE, or --model dNN, or the explicit shape
    const char *init_path;
    const char *model_name;
    GPT2Config model;
    // data
    const char *train_data, *val_data, *tokenizer_path;
    int no_shuffle;
    char located[3][4096];  // defaults found next to the program (config_locate_defaults)
    // batch: B sequences of T tokens per micro-step; total_batch tokens per optimizer step
    // = B * T * processes * grad_accum. grad_accum 0 until config_validate derives it.
    int batch, seq_len;
    long total_batch;
    int grad_accum;
    int steps;
    // optimizer (optimizer.h) and its lr schedule
    int optimizer;
    float lr, min_lr_frac, weight_decay, beta1, beta2, eps, momentum, grad_clip;
    int bias_correction;  // AdamW: 1 (torch's) divides the moments by 1 - beta^t, 0 does not (DeepSpeed's false)
    int lr_schedule, warmup;
    // DeepSpeed's schedules: warmup from warmup_min_lr (WarmupLR, WarmupDecayLR) or from
    // warmup_min_ratio * lr (WarmupCosineLR), log or linear; they end at lr_total_steps (0 until
    // config_validate makes it --steps).
    float warmup_min_lr, warmup_min_ratio;
    int warmup_type, lr_total_steps;
    // precision (ZC_*) and DeepSpeed's fp16 loss scaler (mixed_precision.h)
    int precision;
    float loss_scale, min_loss_scale;          // loss_scale 0: dynamic
    int initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis;
    int on_min_scale_skip;                     // overflow at min_loss_scale: 0 abort, 1 skip the step
    // activation recompute (gpt2.h's GPT2Recompute): none, full or selective; full keeps every
    // recompute_every-th layer's input; cpu_checkpointing: the GPU trainer keeps them in host memory
    int recompute, recompute_every, cpu_checkpointing;
    // evaluation, sampling, output
    int val_every, val_steps, sample_every, sample_len;
    uint64_t seed;
    const char *out_dir, *log_path, *dump_grads_path;
    const char *trace_path;  // --trace: every rank's timeline, one Chrome-trace file (core/trace.h)
    int profile_kernels;     // --profile-kernels: the GPU kernels' device times, one table (gpu/profile.cuh)
    float peak_tflops, peak_gbps; // the card's peaks for that table's % columns (0: its datasheet's, if known)
    const char *resume_path; // a sharded checkpoint (checkpoint.h) to continue from
    int save_every;
    int on_save_error_continue; // a failed save: 0 stop the run, 1 warn and go on
    int print_every;      // the step line on stdout every N steps (and the first and last)
    // data parallelism
    int zero_stage;       // 0-3, see zero.h
    int offload_optimizer, offload_param; // where they live: zero/location.h's LOC_* (LOC_DEVICE: not offloaded)
    int pin_memory;       // offloaded host memory page-locked
    // NVMe (zero/store.h's ZeroOptions): the directory under which each rank makes its own, the buffer
    // sets and the piece (elements) the update streams through, the I/O pool (threads x queue
    // depth requests at once) and bytes per request
    const char *nvme_path;
    int nvme_buffers;
    long nvme_buffer_size;
    int aio_threads, aio_queue_depth;
    long aio_block_size;
    float comm_timeout;   // seconds a collective may take before the job is aborted
    // --deepspeed FILE (ds_config.h) and what it set that has no option
    const char *ds_config_path;
    int ds_strict;        // --strict: unknown or unimplemented DeepSpeed keys are errors
    double ds_extra[DSX_NUM];
    char ds_text[4096];   // the file's string values that options point to (nvme_path)
    size_t ds_text_used;
    // bookkeeping: where each setting came from (CFG_SRC_*), what the file said (CFG_FILE_*)
    // and under which key path (a string literal), the world config_validate saw, the build
    unsigned char source[CK_NUM], file_said[CK_NUM];
    const char *file_key[CK_NUM];
    int world;
    const ConfigBuild *build;
} TrainConfig;

// ----------------------------------------------------------------------------------------
// The table

enum { OT_INT, OT_LONG, OT_U64, OT_FLOAT, OT_STR, OT_FLAG, OT_CHOICE };
typedef struct {
    const char *name;        // --name; also the setting's name in reports and the JSON log
    int type;                // OT_*: OT_FLAG takes no value and sets the field to 1
    size_t offset;           // of the field in TrainConfig (int, long, uint64_t, float or const char *)
    double def;              // default (numbers, flags, a choice's index)
    const char *def_str;     // default of a string option (NULL: unset)
    double lo, hi;           // accepted range of a number
    const char *const *choices; int nchoices; // OT_CHOICE: the field holds the index
    const char *section;     // --help's heading, on the first row of a section
    const char *arg;         // --help's name for the value
    const char *help;        // --help's text (lines after the first start with "\n")
    const char *ds_key;      // the DeepSpeed key that sets this option one to one, or NULL
    const char *ds_expect;   // what a DeepSpeed error says is expected, when not the range
    int (*hook)(struct TrainConfig *c, const char *arg); // after the value is stored: more checks or
                                                           // effects; -1 after printing one line
} ConfigOption;

static inline int config_hook_model(TrainConfig *c, const char *a) {
    if (gpt2_preset(a, &c->model) == 0) return 0;
    fprintf(stderr, "error: --model: unknown model '%s' (d12, d24, d36 or d48)\n", a);
    return -1;
}
static inline int config_hook_vocab(TrainConfig *c, const char *a) {
    (void)a;
    c->model.padded_vocab_size = (int)gpt2_round_up((size_t)c->model.vocab_size, 128);
    return 0;
}
static inline void config_precision_refused(const TrainConfig *c, int precision, const char *key, const char *file);
static inline int config_precision_implemented(const TrainConfig *c, int precision) {
    return c->build ? (c->build->precisions >> precision) & 1u : 1;
}
// refused here too, so that `--precision X --help` fails where X does not run (tests probe so)
static inline int config_hook_precision(TrainConfig *c, const char *a) {
    (void)a;
    if (config_precision_implemented(c, c->precision)) return 0;
    config_precision_refused(c, c->precision, NULL, NULL);
    return -1;
}

static const char *const config_on_min_scale_names[2] = {"abort", "skip"};
static const char *const config_off_on_names[2] = {"off", "on"};
static const char *const config_on_save_error_names[2] = {"stop", "continue"};

#define CO_F(field) offsetof(TrainConfig, field)
#define CO_NUM(name, type, field, def, lo, hi, section, arg, help, ds, expect) \
    {name, type, CO_F(field), def, NULL, lo, hi, NULL, 0, section, arg, help, ds, expect, NULL}
#define CO_STR(name, field, def, section, arg, help) {name, OT_STR, CO_F(field), 0, def, 0, 0, NULL, 0, section, arg, help, NULL, NULL, NULL}
#define CO_FLAG(name, field, section, help, ds) {name, OT_FLAG, CO_F(field), 0, NULL, 0, 1, NULL, 0, section, NULL, help, ds, NULL, NULL}
#define CO_CHOICE(name, field, def, names, n, section, arg, help, ds, expect) \
    {name, OT_CHOICE, CO_F(field), def, NULL, 0, 0, names, n, section, arg, help, ds, expect, NULL}

static inline const ConfigOption *config_options(void) {
    static const ConfigOption t[CK_OPTIONS] = {
        {"init", OT_STR, CO_F(init_path), 0, NULL, 0, 0, NULL, 0, "model (one of)", "FILE",
         "start from an llm.c checkpoint (fp32, version 3)", NULL, NULL, NULL},
        {"model", OT_STR, CO_F(model_name), 0, NULL, 0, 0, NULL, 0, NULL, "NAME",
         "GPT-2 from scratch: d12 (124M), d24 (350M), d36 (774M), d48 (1558M)", NULL, NULL, config_hook_model},
        CO_NUM("layers", OT_INT, model.num_layers, 4, 1, GPT2_MAX_LAYERS, NULL, "N", "explicit shape from scratch", NULL, NULL),
        CO_NUM("channels", OT_INT, model.channels, 256, 1, 1 << 16, NULL, "N", "width", NULL, NULL),
        CO_NUM("heads", OT_INT, model.num_heads, 4, 1, 1 << 12, NULL, "N", "attention heads", NULL, NULL),
        CO_NUM("max-seq-len", OT_INT, model.max_seq_len, 256, 1, 1 << 20, NULL, "N", "positions (wpe's rows)", NULL, NULL),
        {"vocab-size", OT_INT, CO_F(model.vocab_size), 50257, NULL, 1, 65536, NULL, 0, NULL, "N",
         "padded to a multiple of 128", NULL, NULL, config_hook_vocab},
        CO_STR("train-data", train_data, "data/brown_train_*.bin", "data", "GLOB",
               "token shards to train on (the data and tokenizer defaults: from the\n"
               "working directory, else next to the program)"),
        CO_STR("val-data", val_data, "data/brown_val_*.bin", NULL, "GLOB", "token shards to validate on"),
        CO_STR("tokenizer", tokenizer_path, "data/gpt2_tokenizer.bin", NULL, "FILE", "for printing samples as text"),
        CO_FLAG("no-shuffle", no_shuffle, NULL, "read sequences in file order (default: shuffled per epoch)", NULL),
        CO_NUM("batch", OT_INT, batch, 8, 1, 1 << 20, "batch and steps", "B", "sequences per micro-step per process",
               "train_micro_batch_size_per_gpu", NULL),
        CO_NUM("seq-len", OT_INT, seq_len, 64, 1, 1 << 20, NULL, "T", "tokens per sequence", NULL, NULL),
        CO_NUM("total-batch", OT_LONG, total_batch, 0, 1, 1099511627776.0, NULL, "N",
               "tokens per optimizer step, a multiple of B*T*processes;\n"
               "gradients accumulate over the micro-steps (0: B*T*processes*G)", NULL, NULL),
        CO_NUM("grad-accum", OT_INT, grad_accum, 0, 1, 1 << 20, NULL, "G",
               "micro-steps per optimizer step; with --total-batch they must agree\n"
               "(0: --total-batch / (B*T*processes), else 1)", "gradient_accumulation_steps", NULL),
        CO_NUM("steps", OT_INT, steps, 100, 0, 1 << 30, NULL, "N", "optimizer steps", NULL, NULL),
        CO_CHOICE("optimizer", optimizer, OPT_ADAMW, optimizer_names, OPT_NUM, "optimizer", "O",
                  "adamw | lion | sgd-momentum | sgd (optimizer.h)", NULL, NULL),
        CO_NUM("lr", OT_FLOAT, lr, 1e-3f, 0, 1e3, NULL, "X", "peak learning rate", "optimizer.params.lr", NULL),
        CO_CHOICE("lr-schedule", lr_schedule, LR_COSINE, lr_schedule_names, LR_NUM_SCHEDULES, NULL, "S",
                  "constant | linear | cosine after a linear warmup, or DeepSpeed's\n"
                  "WarmupLR | WarmupDecayLR | WarmupCosineLR", NULL, NULL),
        CO_NUM("warmup", OT_INT, warmup, 10, 0, 1 << 30, NULL, "N", "warmup steps", "scheduler.params.warmup_num_steps", NULL),
        CO_NUM("min-lr-frac", OT_FLOAT, min_lr_frac, 0.1f, 0, 1, NULL, "X",
               "final lr as a fraction of the peak; WarmupCosineLR's cos_min_ratio", "scheduler.params.cos_min_ratio", NULL),
        CO_NUM("warmup-min-lr", OT_FLOAT, warmup_min_lr, 0, 0, 1e3, NULL, "X",
               "WarmupLR, WarmupDecayLR: lr the warmup starts from", "scheduler.params.warmup_min_lr", NULL),
        CO_CHOICE("warmup-type", warmup_type, LR_WARMUP_LOG, lr_warmup_type_names, 2, NULL, "T",
                  "DeepSpeed schedules' warmup: log | linear", "scheduler.params.warmup_type", "\"log\" or \"linear\""),
        CO_NUM("lr-total-steps", OT_INT, lr_total_steps, 0, 1, 1 << 30, NULL, "N",
               "WarmupDecayLR, WarmupCosineLR: total_num_steps (0: --steps)", "scheduler.params.total_num_steps", NULL),
        CO_NUM("warmup-min-ratio", OT_FLOAT, warmup_min_ratio, 0, 0, 1, NULL, "X",
               "WarmupCosineLR: warmup starts from X * lr", "scheduler.params.warmup_min_ratio", NULL),
        CO_NUM("weight-decay", OT_FLOAT, weight_decay, 0.1f, 0, 1e3, NULL, "X",
               "on 2-D weights only (decoupled; SGD's is L2, as torch's)", "optimizer.params.weight_decay", NULL),
        CO_NUM("beta1", OT_FLOAT, beta1, 0.9f, 0, 0.999999, NULL, "X", "AdamW, Lion", NULL, NULL),
        CO_NUM("beta2", OT_FLOAT, beta2, 0.95f, 0, 0.999999999, NULL, "X", "AdamW, Lion", NULL, NULL),
        CO_NUM("eps", OT_FLOAT, eps, 1e-8f, 1e-30, 1, NULL, "X", "AdamW", "optimizer.params.eps", NULL),
        CO_CHOICE("bias-correction", bias_correction, 1, config_off_on_names, 2, NULL, "on|off",
                  "AdamW: divide the moments by 1 - beta^t (on, torch's) or not (off:\n"
                  "DeepSpeed's optimizer.params.bias_correction false, BERT's configs)", NULL, NULL),
        CO_NUM("momentum", OT_FLOAT, momentum, 0.9f, 0, 0.999999, NULL, "X", "sgd-momentum", "optimizer.params.momentum", NULL),
        CO_NUM("grad-clip", OT_FLOAT, grad_clip, 1.0f, 0, 1e30, NULL, "X", "clip the global gradient norm to X; 0 = off",
               "gradient_clipping", NULL),
        {"precision", OT_CHOICE, CO_F(precision), ZC_F32, NULL, 0, 0, zc_dtype_names, ZC_NUM_DTYPES,
         "precision (DeepSpeed's fp16/bf16 settings)", "P",
         "fp32 | bf16 | fp16: bf16/fp16 keep parameters, gradients, activations\n"
         "in 16 bits, fp32 master weights and optimizer state", NULL, NULL, config_hook_precision},
        CO_NUM("loss-scale", OT_FLOAT, loss_scale, 0, 0, 1e38, NULL, "X", "fp16: a static loss scale; 0 = dynamic",
               "fp16.loss_scale", NULL),
        CO_NUM("initial-scale-power", OT_INT, initial_scale_power, 16, -126, 127, NULL, "N",
               "fp16 dynamic scale starts at 2^N", "fp16.initial_scale_power", NULL),
        CO_NUM("loss-scale-window", OT_INT, loss_scale_window, 1000, 1, 1 << 30, NULL, "N",
               "fp16: double the scale after N steps without overflow", "fp16.loss_scale_window", NULL),
        CO_NUM("hysteresis", OT_INT, hysteresis, 2, 1, 1 << 30, NULL, "N", "fp16: overflows tolerated before the scale halves",
               "fp16.hysteresis", NULL),
        CO_NUM("min-loss-scale", OT_FLOAT, min_loss_scale, 1, 1e-38, 1e38, NULL, "X", "fp16: the dynamic scale's floor",
               "fp16.min_loss_scale", NULL),
        CO_FLAG("consecutive-hysteresis", consecutive_hysteresis, NULL, "fp16: refill the hysteresis on every good step",
                "fp16.consecutive_hysteresis"),
        CO_CHOICE("on-min-scale", on_min_scale_skip, 0, config_on_min_scale_names, 2, NULL, "A",
                  "fp16: overflow at the floor: abort | skip the step", NULL, NULL),
        CO_CHOICE("recompute", recompute, RECOMPUTE_NONE, gpt2_recompute_names, NUM_RECOMPUTE,
                  "activation recompute (DeepSpeed's activation_checkpointing)", "R",
                  "none | full | selective: less memory, bit-identical results;\n"
                  "full keeps each layer's input and recomputes the layer in its\n"
                  "backward; selective keeps the matmuls' outputs and recomputes\n"
                  "the LayerNorms, attention and GELU", NULL, NULL),
        CO_NUM("recompute-every", OT_INT, recompute_every, 1, 1, GPT2_MAX_LAYERS, NULL, "K",
               "full: keep every K-th layer's input, recompute K layers at a\n"
               "time (sqrt(L) schedules; for GPT-2, K = 1 keeps the fewest bytes)", NULL, NULL),
        CO_FLAG("cpu-checkpointing", cpu_checkpointing, NULL,
                "full: the GPU trainer keeps the inputs in pinned host memory\n"
                "(the CPU trainer's are there already)", "activation_checkpointing.cpu_checkpointing"),
        CO_NUM("val-every", OT_INT, val_every, 25, 0, 1 << 30, "evaluation and output", "N", "validate every N steps; 0 = never",
               NULL, NULL),
        CO_NUM("val-steps", OT_INT, val_steps, 10, 0, 1 << 30, NULL, "N", "batches per validation", NULL, NULL),
        CO_NUM("sample-every", OT_INT, sample_every, 50, 0, 1 << 30, NULL, "N", "print a sample every N steps; 0 = never",
               NULL, NULL),
        CO_NUM("sample-len", OT_INT, sample_len, 64, 0, 1 << 20, NULL, "N", "tokens per sample; 0 = no sampling", NULL, NULL),
        CO_NUM("seed", OT_U64, seed, 1337, 0, 9007199254740992.0, NULL, "N", "initialisation, shuffling and sampling", NULL,
               NULL),
        CO_STR("out", out_dir, NULL, NULL, "DIR",
               "directory for checkpoints: DIR/step_N/ (sharded, for --resume),\n"
               "DIR/latest, and DIR/model_N.bin (llm.c format), at the end"),
        CO_NUM("save-every", OT_INT, save_every, 0, 0, 1 << 30, NULL, "N", "and every N steps", NULL, NULL),
        CO_CHOICE("on-save-error", on_save_error_continue, 0, config_on_save_error_names, 2, NULL, "A",
                  "a save that fails (disk full...): stop the run (exit 1) | continue\n"
                  "without it; either way `latest` keeps naming the last good one", NULL, NULL),
        CO_STR("log", log_path, NULL, NULL, "FILE", "JSON lines: one object per step and per validation"),
        CO_STR("trace", trace_path, NULL, NULL, "FILE",
               "a timeline of every rank (Chrome trace JSON: open it in Perfetto or\n"
               "chrome://tracing): units' forward and backward, collectives, waits,\n"
               "the optimizer, data loading, checkpoints"),
        CO_FLAG("profile-kernels", profile_kernels, NULL,
                "GPU trainer: time every kernel with CUDA events and print one table\n"
                "(calls, ms and % of the step, TFLOP/s, GB/s) after the run", NULL),
        CO_NUM("peak-tflops", OT_FLOAT, peak_tflops, 0, 0, 1e6, NULL, "X",
               "the GPU's matmul peak for that table (0: its datasheet's, if known)", NULL, NULL),
        CO_NUM("peak-gbps", OT_FLOAT, peak_gbps, 0, 0, 1e6, NULL, "X", "the GPU's memory bandwidth for that table, GB/s", NULL,
               NULL),
        CO_STR("dump-grads", dump_grads_path, NULL, NULL, "FILE",
               "write the first step's gradients as a checkpoint-format file; for tests"),
        CO_NUM("print-every", OT_INT, print_every, 1, 1, 1 << 30, NULL, "N",
               "print the step line every N steps, and the first and last", "steps_per_print", NULL),
        CO_STR("resume", resume_path, NULL, NULL, "PATH",
               "continue from a checkpoint (DIR: its latest; or DIR/step_N), on\n"
               "any number of processes and any ZeRO stage; same options as before"),
        CO_NUM("zero-stage", OT_INT, zero_stage, 0, 0, 3, "data parallelism (run under mpirun -np N)", "S",
               "0: replicate everything, all-reduce gradients; 1: partition the\n"
               "optimizer state; 2: and the gradients; 3: and the parameters", "zero_optimization.stage", "0, 1, 2 or 3"),
        CO_CHOICE("offload-optimizer", offload_optimizer, 0, zero_offload_names, LOC_KINDS, NULL, "D",
                  "none | cpu | nvme: the fp32 master weights and optimizer state live in\n"
                  "host memory and are updated there (ZeRO-Offload; stages 1-3)",
                  "zero_optimization.offload_optimizer.device", "\"none\", \"cpu\" or \"nvme\""),
        CO_CHOICE("offload-param", offload_param, 0, zero_offload_names, LOC_KINDS, NULL, "D",
                  "none | cpu | nvme: stage 3's 16-bit parameter shard lives in host memory",
                  "zero_optimization.offload_param.device", "\"none\", \"cpu\" or \"nvme\""),
        CO_FLAG("pin-memory", pin_memory, NULL, "offloaded host memory is page-locked (DeepSpeed's pin_memory)",
                "zero_optimization.offload_optimizer.pin_memory"),
        {"nvme-path", OT_STR, CO_F(nvme_path), 0, NULL, 0, 0, NULL, 0, NULL, "DIR",
         "with nvme offload: each rank's files go in a directory of its own\n"
         "under DIR (made at the start, removed at a clean exit)", "zero_optimization.offload_optimizer.nvme_path",
         NULL, NULL},
        CO_NUM("nvme-buffers", OT_INT, nvme_buffers, 4, 2, 16, NULL, "N",
               "host buffer sets the NVMe update streams through: N - 2 pieces\n"
               "read ahead while one updates and one is written behind",
               "zero_optimization.offload_optimizer.buffer_count", NULL),
        CO_NUM("nvme-buffer-size", OT_LONG, nvme_buffer_size, 16777216, 2048, 1099511627776.0, NULL, "N",
               "elements per piece streamed to and from NVMe (rounded up to\n"
               "a multiple of 2048; host memory grows with it)", "zero_optimization.offload_param.buffer_size", NULL),
        CO_NUM("aio-threads", OT_INT, aio_threads, 1, 1, 32, NULL, "N",
               "NVMe I/O: threads x queue depth requests run at once (at most 32)", "aio.thread_count", NULL),
        CO_NUM("aio-queue-depth", OT_INT, aio_queue_depth, 8, 1, 32, NULL, "N", "NVMe I/O: requests per thread",
               "aio.queue_depth", NULL),
        CO_NUM("aio-block-size", OT_LONG, aio_block_size, 1048576, 4096, 1073741824.0, NULL, "BYTES",
               "NVMe I/O: bytes per request (a multiple of 4096)", "aio.block_size", NULL),
        CO_NUM("comm-timeout", OT_FLOAT, comm_timeout, 300, 0.001, 1e9, NULL, "SEC",
               "abort the job when a collective takes longer", NULL, NULL),
        CO_STR("deepspeed", ds_config_path, NULL, "DeepSpeed configuration (docs/deepspeed_config.md)", "FILE",
               "read a DeepSpeed JSON config; its \"auto\" values take the options above,\n"
               "and an option that disagrees with a value in the file is an error"),
        CO_FLAG("strict", ds_strict, NULL, "keys this trainer does not implement are errors, not warnings", NULL),
    };
    return t;
}
#undef CO_F
#undef CO_NUM
#undef CO_STR
#undef CO_FLAG
#undef CO_CHOICE

// A setting's name: the option's, or the DeepSpeed key path of a DeepSpeed-only setting.
static inline const char *config_key_name(int key) {
    static const char *const dsx[DSX_NUM] = {
        "zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size",
        "zero_optimization.allgather_bucket_size", "zero_optimization.contiguous_gradients",
        "zero_optimization.reduce_scatter", "zero_optimization.allgather_partitions",
        "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold",
        "zero_optimization.stage3_max_live_parameters", "zero_optimization.stage3_max_reuse_distance",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save", "zero_optimization.sub_group_size",
        "wall_clock_breakdown", "zero_optimization.offload_param.buffer_count", "zero_optimization.offload_param.max_in_cpu",
        "aio.single_submit", "aio.overlap_events", "activation_checkpointing.partition_activations",
        "activation_checkpointing.contiguous_memory_optimization", "activation_checkpointing.number_checkpoints",
        "activation_checkpointing.synchronize_checkpoint_boundary", "activation_checkpointing.profile",
        "prescale_gradients", "gradient_predivide_factor", "zero_allow_untested_optimizer", "fp16.auto_cast",
        "aio.use_gds", "aio.intra_op_parallelism"};
    return key < CK_OPTIONS ? config_options()[key].name : dsx[key - CK_DSX];
}

static inline void *config_field(TrainConfig *c, int key) { return (char *)c + config_options()[key].offset; }
static inline const void *config_cfield(const TrainConfig *c, int key) { return (const char *)c + config_options()[key].offset; }

// ----------------------------------------------------------------------------------------
// Defaults and the build

static const ConfigBuild config_cpu_build = {(1u << ZC_F32) | (1u << ZC_BF16) | (1u << ZC_FP16), ZC_F32, {NULL, NULL, NULL}, "", 0};

static inline void config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof(*c));
    for (int k = 0; k < CK_OPTIONS; k++) {
        const ConfigOption *o = &config_options()[k];
        void *f = config_field(c, k);
        switch (o->type) {
        case OT_INT: case OT_FLAG: case OT_CHOICE: *(int *)f = (int)o->def; break;
        case OT_LONG: *(long *)f = (long)o->def; break;
        case OT_U64: *(uint64_t *)f = (uint64_t)o->def; break;
        case OT_FLOAT: *(float *)f = (float)o->def; break;
        case OT_STR: *(const char **)f = o->def_str; break;
        }
    }
    config_hook_vocab(c, NULL);
    c->world = 1;
    c->build = &config_cpu_build;
}
// The GPU trainer's: which precisions it runs, and its default.
static inline void config_set_build(TrainConfig *c, const ConfigBuild *b) {
    c->build = b;
    c->precision = b->default_precision;
}

// The one line for a precision this binary does not run; key and file: where a --deepspeed
// file asked for it (NULL: the command line).
static inline void config_precision_refused(const TrainConfig *c, int precision, const char *key, const char *file) {
    fprintf(stderr, "error: --precision %s%s%s%s%s%s: ", zc_dtype_names[precision], key ? " (" : "", key ? key : "",
            key ? " in " : "", key ? file : "", key ? ")" : "");
    const char *why = c->build ? c->build->refusal[precision] : NULL;
    fprintf(stderr, "%s\n", why ? why : "not implemented yet in this trainer");
}

// ----------------------------------------------------------------------------------------
// Values for reports: CV_NUM (*num; integral ones are exact), CV_FLOAT (*num, a float option:
// print it with config_float_str), CV_BOOL (*num 0/1) or CV_STR (*str, NULL if unset).
// DeepSpeed-only settings the file did not set report DeepSpeed's default (ds_config.h knows
// it), so they come back as CV_NONE here.
enum { CV_NONE, CV_NUM, CV_FLOAT, CV_BOOL, CV_STR };
static inline int config_value(const TrainConfig *c, int key, double *num, const char **str) {
    *num = 0.0; *str = NULL;
    if (key < CK_OPTIONS) {
        const ConfigOption *o = &config_options()[key];
        const void *f = config_cfield(c, key);
        switch (o->type) {
        case OT_INT: *num = *(const int *)f; return CV_NUM;
        case OT_LONG: *num = (double)*(const long *)f; return CV_NUM;
        case OT_U64: *num = (double)*(const uint64_t *)f; return CV_NUM;
        case OT_FLOAT: *num = *(const float *)f; return CV_FLOAT;
        case OT_FLAG: *num = *(const int *)f != 0; return CV_BOOL;
        case OT_CHOICE: {
            int i = *(const int *)f;
            *str = i >= 0 && i < o->nchoices ? o->choices[i] : "?";
            return CV_STR;
        }
        default: *str = *(const char *const *)f; return CV_STR;
        }
    }
    if (key < CK_NUM && c->source[key] == CFG_SRC_FILE) {
        int k = key - CK_DSX;
        *num = c->ds_extra[k];
        int is_bool = k == DSX_OVERLAP_COMM || k == DSX_CONTIGUOUS_GRADIENTS || k == DSX_REDUCE_SCATTER ||
                      k == DSX_ALLGATHER_PARTITIONS || k == DSX_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE ||
                      k == DSX_WALL_CLOCK_BREAKDOWN || k == DSX_AIO_SINGLE_SUBMIT || k == DSX_AIO_OVERLAP_EVENTS ||
                      k == DSX_PARTITION_ACTIVATIONS || k == DSX_CONTIGUOUS_MEMORY_OPTIMIZATION ||
                      k == DSX_SYNCHRONIZE_CHECKPOINT_BOUNDARY || k == DSX_PROFILE || k == DSX_PRESCALE_GRADIENTS ||
                      k == DSX_ZERO_ALLOW_UNTESTED_OPTIMIZER || k == DSX_FP16_AUTO_CAST || k == DSX_AIO_USE_GDS;
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

// ----------------------------------------------------------------------------------------
// --help

static inline void config_help(const TrainConfig *defaults, const char *prog) {
    printf("usage: %s [options]\n", prog);
    for (int k = 0; k < CK_OPTIONS; k++) {
        const ConfigOption *o = &config_options()[k];
        if (o->section) printf("\n%s:\n", o->section);
        char lead[48], def[64] = "";
        snprintf(lead, sizeof(lead), "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        double num;
        const char *str;
        int kind = config_value(defaults, k, &num, &str);
        if (o->type == OT_STR) { if (str) snprintf(def, sizeof(def), " (default %s)", str); }
        else if (o->type == OT_FLAG) {}
        else if (kind == CV_FLOAT) { char b[40]; config_float_str(b, sizeof(b), num); snprintf(def, sizeof(def), " (default %s)", b); }
        else if (kind == CV_STR) snprintf(def, sizeof(def), " (default %s)", str);
        else snprintf(def, sizeof(def), " (default %.15g)", num);
        // the help text's first line with the default, its continuation lines indented under it
        const char *nl = strchr(o->help, '\n');
        printf("  %-24s %.*s%s\n", lead, nl ? (int)(nl - o->help) : (int)strlen(o->help), o->help, def);
        for (const char *p = nl; p; p = strchr(p + 1, '\n')) {
            const char *e = strchr(p + 1, '\n');
            printf("  %-24s %.*s\n", "", e ? (int)(e - p - 1) : (int)strlen(p + 1), p + 1);
        }
        if (k == CK_PRECISION && defaults->build && defaults->build->help_note && *defaults->build->help_note)
            printf("  %-24s %s\n", "", defaults->build->help_note);
    }
    printf("  %-24s this text\n", "--help");
}

// ----------------------------------------------------------------------------------------
// The command line

// Number parsing that rejects trailing junk and out-of-range values, naming the option.
static inline int config_long(const char *opt, const char *s, double lo, double hi, long *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end); // accepts 5e5 as well as 500000
    if (errno || end == s || *end || v != floor(v) || v < lo || v > hi) {
        fprintf(stderr, "error: --%s: '%s' is not a whole number in [%.0f, %.0f]\n", opt, s, lo, hi);
        return -1;
    }
    *out = (long)v;
    return 0;
}
static inline int config_int(const char *opt, const char *s, double lo, double hi, int *out) {
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

// The key of an option or setting name, or -1.
static inline int config_key(const char *name) {
    for (int k = 0; k < CK_NUM; k++) if (!strcmp(name, config_key_name(k))) return k;
    return -1;
}
static inline int config_given(const TrainConfig *c, int key) { return c->source[key] == CFG_SRC_CLI; }

// Stores one option's value from its text (NULL for a flag), checked against its row.
static inline int config_set(TrainConfig *c, int key, const char *a) {
    const ConfigOption *o = &config_options()[key];
    void *f = config_field(c, key);
    int r = 0;
    switch (o->type) {
    case OT_INT: r = config_int(o->name, a, o->lo, o->hi, (int *)f); break;
    case OT_LONG: r = config_long(o->name, a, o->lo, o->hi, (long *)f); break;
    case OT_U64: { long v; r = config_long(o->name, a, o->lo, o->hi, &v); if (!r) *(uint64_t *)f = (uint64_t)v; break; }
    case OT_FLOAT: r = config_float(o->name, a, o->lo, o->hi, (float *)f); break;
    case OT_STR: *(const char **)f = a; break;
    case OT_FLAG: *(int *)f = 1; break;
    case OT_CHOICE: {
        int i = config_choice(a, o->choices, o->nchoices);
        if (i < 0) {
            fprintf(stderr, "error: --%s: '%s' is not ", o->name, a);
            for (int j = 0; j < o->nchoices; j++)
                fprintf(stderr, "%s%s", j == 0 ? "" : j == o->nchoices - 1 ? " or " : ", ", o->choices[j]);
            fputc('\n', stderr);
            return -1;
        }
        *(int *)f = i;
        break;
    }
    }
    if (r) return -1;
    return o->hook ? o->hook(c, a) : 0;
}

// Returns 0 to run, 1 when --help was printed, -1 on a bad option (one line printed).
// Marks every option it reads as coming from the command line (c->source).
static inline int config_parse(TrainConfig *c, int argc, char **argv) {
    static struct option opts[CK_OPTIONS + 2];
    for (int k = 0; k < CK_OPTIONS; k++) {
        opts[k].name = config_options()[k].name;
        opts[k].has_arg = config_options()[k].type == OT_FLAG ? 0 : 1;
        opts[k].flag = NULL;
        opts[k].val = 0;
    }
    opts[CK_OPTIONS].name = "help";
    opts[CK_OPTIONS + 1].name = NULL;
    TrainConfig defaults = *c;
    int idx;
    optind = 1;
    opterr = 0;
    for (;;) {
        int ch = getopt_long(argc, argv, "", opts, &idx);
        if (ch == -1) break;
        if (ch != 0) {
            fprintf(stderr, "error: %s: unknown option or missing value (see --help)\n", argv[optind - 1]);
            return -1;
        }
        if (idx == CK_OPTIONS) { config_help(&defaults, argv[0]); return 1; }
        if (config_set(c, idx, optarg)) return -1;
        c->source[idx] = CFG_SRC_CLI;
    }
    if (optind < argc) {
        fprintf(stderr, "error: %s: unexpected argument (options are --name value)\n", argv[optind]);
        return -1;
    }
    int shape_given = 0;
    for (int k = CK_LAYERS; k <= CK_VOCAB_SIZE; k++) shape_given |= config_given(c, k);
    int sources = (c->init_path != NULL) + (c->model_name != NULL) + shape_given + (c->resume_path != NULL);
    if (sources > 1) {
        fprintf(stderr, "error: --resume, --init, --model and --layers/--channels/--heads/--max-seq-len/--vocab-size "
                        "each define the model; give only one of them\n");
        return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------------------
// Defaults that name files

static inline int config_matches(const char *pattern) {
    glob_t g;
    int found = glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}
// A default data or tokenizer path (relative) that matches nothing from the working directory is
// looked for in the program's directory (that of /proc/self/exe), and taken from there when it
// is found. A default set of training shards (or validation shards, when validation is on) found
// in neither place is an error naming both (-1, one line); a default tokenizer found in neither is a
// note naming both (when sampling is on), and the path becomes NULL: samples print token ids.
// Options given on the command line are left as they are.
static inline int config_locate_defaults(TrainConfig *c) {
    static const int keys[3] = {CK_TRAIN_DATA, CK_VAL_DATA, CK_TOKENIZER};
    char dir[4096];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
    dir[n > 0 ? n : 0] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    for (int i = 0; i < 3; i++) {
        int k = keys[i];
        const char **path = (const char **)config_field(c, k);
        if (c->source[k] != CFG_SRC_DEFAULT || !*path || (*path)[0] == '/' || config_matches(*path)) continue;
        int fits = snprintf(c->located[i], sizeof(c->located[i]), "%s/%s", dir, *path) < (int)sizeof(c->located[i]);
        if (fits && dir[0] && config_matches(c->located[i])) { *path = c->located[i]; continue; }
        if (k == CK_VAL_DATA && (c->val_every == 0 || c->val_steps == 0)) continue;
        int sampling = c->sample_len > 0 && c->sample_every > 0;
        if (k == CK_TOKENIZER && !sampling) continue;
        char cwd[4096];
        if (!getcwd(cwd, sizeof(cwd))) snprintf(cwd, sizeof(cwd), "(unknown)");
        fprintf(stderr, "%s: %s (the default --%s) matches nothing in the working directory %s, nor next to the "
                        "program in %s; %s%s\n", k == CK_TOKENIZER ? "note" : "error", *path, config_key_name(k), cwd,
                dir[0] ? dir : "(unknown)", k == CK_TOKENIZER ? "samples print token ids" : "give --",
                k == CK_TOKENIZER ? "" : config_key_name(k));
        if (k != CK_TOKENIZER) return -1;
        *path = NULL;
    }
    return 0;
}

// ----------------------------------------------------------------------------------------
// What no single row can check

// Recompute's options against each other and the model. activation_checkpointing's
// number_checkpoints N (a DeepSpeed file's) keeps N layer inputs: every ceil(L/N)-th layer's.
static inline int config_validate_recompute(TrainConfig *c) {
    int L = c->model.num_layers, full = c->recompute == RECOMPUTE_FULL;
    const char *mode = gpt2_recompute_names[c->recompute];
    if (c->source[CK_DSX + DSX_NUMBER_CHECKPOINTS] == CFG_SRC_FILE && full) {
        double n = c->ds_extra[DSX_NUMBER_CHECKPOINTS];
        int every = n < 1 ? 1 : (int)ceil(L / n);
        if (config_given(c, CK_RECOMPUTE_EVERY) && c->recompute_every != every) {
            fprintf(stderr, "error: --recompute-every %d conflicts with the --deepspeed file's "
                            "activation_checkpointing.number_checkpoints %.0f (of the model's %d layers' inputs: every %d)\n",
                    c->recompute_every, n, L, every);
            return -1;
        }
        c->recompute_every = every;
        c->source[CK_RECOMPUTE_EVERY] = CFG_SRC_DERIVED;
    }
    if (c->recompute_every > 1 && !full) {
        fprintf(stderr, "error: --recompute-every %d needs --recompute full (it is %s)\n", c->recompute_every, mode);
        return -1;
    }
    if (c->recompute_every > L) {
        fprintf(stderr, "error: --recompute-every %d exceeds the model's %d layers\n", c->recompute_every, L);
        return -1;
    }
    if (c->cpu_checkpointing && !full) {
        fprintf(stderr, "error: --cpu-checkpointing (activation_checkpointing.cpu_checkpointing) moves full recompute's "
                        "checkpoints to host memory: it needs --recompute full (it is %s)\n", mode);
        return -1;
    }
    return 0;
}
static inline GPT2Recompute config_recompute(const TrainConfig *c) {
    GPT2Recompute r;
    r.mode = c->recompute; r.every = c->recompute_every; r.host = c->cpu_checkpointing;
    return r;
}

// Checks the options against each other and the model (known once --init's header is read).
// world: processes in the job. Fills total_batch, grad_accum and lr_total_steps when they were
// left to their defaults.
static inline int config_validate(TrainConfig *c, int world) {
    const char *why = gpt2_config_problem(&c->model);
    if (why) { fprintf(stderr, "error: model options: %s\n", why); return -1; }
    if (c->seq_len > c->model.max_seq_len) {
        fprintf(stderr, "error: --seq-len %d exceeds the model's max_seq_len %d\n", c->seq_len, c->model.max_seq_len);
        return -1;
    }
    if (c->profile_kernels && !(c->build && c->build->kernel_profiler)) {
        fprintf(stderr, "error: --profile-kernels times GPU kernels: it is the GPU trainer's (train_gpt); this binary "
                        "has none (time the CPU trainer's step with --trace)\n");
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
    if (c->lr_total_steps == 0) {
        c->lr_total_steps = c->steps;
        c->source[CK_LR_TOTAL_STEPS] = CFG_SRC_DERIVED;
    }
    if (!config_precision_implemented(c, c->precision)) {
        const char *k = c->precision == ZC_BF16 ? "bf16.enabled" : "fp16.enabled";
        if (c->source[CK_PRECISION] == CFG_SRC_FILE) config_precision_refused(c, c->precision, k, c->ds_config_path);
        else config_precision_refused(c, c->precision, NULL, NULL);
        return -1;
    }
    if (c->lr_schedule == LR_DS_WARMUP_COSINE) {
        int w = c->warmup < 2 ? 2 : c->warmup, total = c->lr_total_steps;
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
    if (c->offload_optimizer != LOC_DEVICE && c->zero_stage == 0) {
        fprintf(stderr, "error: --offload-optimizer %s needs --zero-stage 1, 2 or 3 (ZeRO-Offload moves the optimizer "
                        "state a stage partitions)\n", zero_offload_names[c->offload_optimizer]);
        return -1;
    }
    if (c->offload_param != LOC_DEVICE && c->zero_stage != 3) {
        fprintf(stderr, "error: --offload-param %s needs --zero-stage 3 (only stage 3 partitions the parameters)\n",
                zero_offload_names[c->offload_param]);
        return -1;
    }
    if (c->offload_param != LOC_DEVICE && c->offload_optimizer == LOC_DEVICE) {
        fprintf(stderr, "error: --offload-param %s needs --offload-optimizer cpu or nvme (the update that writes the "
                        "offloaded parameters runs where the optimizer state is)\n", zero_offload_names[c->offload_param]);
        return -1;
    }
    if ((c->offload_optimizer == LOC_NVME || c->offload_param == LOC_NVME) && !c->nvme_path) {
        fprintf(stderr, "error: --offload-%s nvme needs --nvme-path DIR (DeepSpeed's nvme_path)\n",
                c->offload_optimizer == LOC_NVME ? "optimizer" : "param");
        return -1;
    }
    if (c->aio_block_size % 4096) {
        fprintf(stderr, "error: --aio-block-size %ld is not a multiple of 4096 (direct I/O's alignment)\n", c->aio_block_size);
        return -1;
    }
    if (c->aio_threads * c->aio_queue_depth > 32) {
        fprintf(stderr, "error: --aio-threads %d x --aio-queue-depth %d = %d requests at once; at most 32\n",
                c->aio_threads, c->aio_queue_depth, c->aio_threads * c->aio_queue_depth);
        return -1;
    }
    if (c->save_every > 0 && !c->out_dir) {
        fprintf(stderr, "error: --save-every needs --out DIR\n");
        return -1;
    }
    return config_validate_recompute(c);
}

static inline int config_accum_steps(const TrainConfig *c, int world) {
    return (int)(c->total_batch / ((long)c->batch * c->seq_len * world));
}

// ----------------------------------------------------------------------------------------
// The settings optimizer.h needs, in its own terms

static inline LrSchedule config_lr_schedule(const TrainConfig *c) {
    LrSchedule s;
    s.kind = c->lr_schedule; s.lr = c->lr; s.warmup = c->warmup; s.min_lr_frac = c->min_lr_frac; s.steps = c->steps;
    s.warmup_min_lr = c->warmup_min_lr; s.warmup_min_ratio = c->warmup_min_ratio; s.warmup_type = c->warmup_type;
    s.total_steps = c->lr_total_steps > 0 ? c->lr_total_steps : c->steps;
    return s;
}
static inline OptimizerHyper config_optimizer(const TrainConfig *c) {
    OptimizerHyper h;
    h.kind = c->optimizer; h.beta1 = c->beta1; h.beta2 = c->beta2; h.eps = c->eps; h.weight_decay = c->weight_decay;
    h.momentum = c->momentum; h.grad_clip = c->grad_clip; h.bias_correction = c->bias_correction;
    return h;
}

#endif // CONFIG_H
