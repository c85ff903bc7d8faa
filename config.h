// config.h: the trainer's options, their defaults, the command line, and their validation.
//
// Contract
//   - TrainConfig holds every option of a training run; config_defaults() fills it.
//   - config_parse() reads GNU long options (argv) into it; config_validate() checks that the
//     options fit each other and the model. Both print ONE line naming the culprit and return
//     -1 on bad input; the caller exits. --help prints every option with its default.
//   - The lr schedule lives here too: it is a pure function of the options and the step.
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
#include "gpt2.h"

enum { LR_CONSTANT, LR_LINEAR, LR_COSINE };

typedef struct {
    // model: --init FILE, or --model dNN, or the explicit shape
    const char *init_path;
    const char *model_name;
    GPT2Config model;
    // data
    const char *train_data, *val_data, *tokenizer_path;
    int shuffle;
    // batch: B sequences of T tokens per micro-step; total_batch tokens per optimizer step
    int batch, seq_len;
    long total_batch;
    int steps;
    // optimizer
    float lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    int lr_schedule, warmup;
    // evaluation, sampling, output
    int val_every, val_steps, sample_every, sample_len;
    uint64_t seed;
    const char *out_dir, *log_path, *dump_grads_path;
    int save_every;
    // data parallelism
    int zero_stage;       // 0-3, see zero.h
    float comm_timeout;   // seconds a collective may take before the job is aborted
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
    c->val_every = 25; c->val_steps = 10; c->sample_every = 50; c->sample_len = 64;
    c->seed = 1337;
    c->zero_stage = 0; c->comm_timeout = 300.0f;
}

static const char *const lr_schedule_names[] = {"constant", "linear", "cosine"};

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
           "                        gradients accumulate over the micro-steps (default B*T*processes)\n"
           "  --steps N             optimizer steps (default %d)\n",
           d.batch, d.seq_len, d.steps);
    printf("optimizer (AdamW):\n"
           "  --lr X                peak learning rate (default %g)\n"
           "  --lr-schedule S       constant | linear | cosine, after warmup (default %s)\n"
           "  --warmup N            linear warmup steps (default %d)\n"
           "  --min-lr-frac X       final lr as a fraction of the peak (default %g)\n"
           "  --weight-decay X      decoupled, on 2-D weights only (default %g)\n"
           "  --beta1 X --beta2 X --eps X   (defaults %g, %g, %g)\n"
           "  --grad-clip X         clip the global gradient norm to X; 0 = off (default %g)\n",
           d.lr, lr_schedule_names[d.lr_schedule], d.warmup, d.min_lr_frac, d.weight_decay,
           d.beta1, d.beta2, d.eps, d.grad_clip);
    printf("evaluation and output:\n"
           "  --val-every N         validate every N steps; 0 = never (default %d)\n"
           "  --val-steps N         batches per validation (default %d)\n"
           "  --sample-every N      print a sample every N steps; 0 = never (default %d)\n"
           "  --sample-len N        tokens per sample; 0 = no sampling (default %d)\n"
           "  --seed N              initialisation, shuffling and sampling (default %llu)\n"
           "  --out DIR             directory for checkpoints\n"
           "  --save-every N        write DIR/model_STEP.bin every N steps and at the end\n"
           "  --log FILE            JSON lines: one object per step and per validation\n"
           "  --dump-grads FILE     write the first step's gradients as a checkpoint-format file; for tests\n"
           "  --help                this text\n",
           d.val_every, d.val_steps, d.sample_every, d.sample_len, (unsigned long long)d.seed);
    printf("data parallelism (run under mpirun -np N):\n"
           "  --zero-stage S        0: replicate everything, all-reduce gradients; 1: partition the\n"
           "                        optimizer state; 2: and the gradients; 3: and the parameters (default %d)\n"
           "  --comm-timeout SEC    abort the job when a collective takes longer (default %g)\n",
           d.zero_stage, d.comm_timeout);
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

// Returns 0 to run, 1 when --help was printed, -1 on a bad option (one line printed).
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
        {"save-every", 1, 0, 0}, {"log", 1, 0, 0}, {"dump-grads", 1, 0, 0}, {"help", 0, 0, 0},
        {"zero-stage", 1, 0, 0}, {"comm-timeout", 1, 0, 0},
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
            int k = -1;
            for (int i = 0; i < 3; i++) if (!strcmp(a, lr_schedule_names[i])) k = i;
            if (k < 0) { fprintf(stderr, "error: --lr-schedule: '%s' is not constant, linear or cosine\n", a); return -1; }
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
        else if (!strcmp(o, "zero-stage")) r = config_int(o, a, 0, 3, &c->zero_stage);
        else if (!strcmp(o, "comm-timeout")) r = config_float(o, a, 0.001, 1e9, &c->comm_timeout);
        if (r) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "error: %s: unexpected argument (options are --name value)\n", argv[optind]);
        return -1;
    }
    int sources = (c->init_path != NULL) + (c->model_name != NULL) + shape_given;
    if (sources > 1) {
        fprintf(stderr, "error: --init, --model and --layers/--channels/--heads/--max-seq-len/--vocab-size "
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
    long per_micro = (long)c->batch * c->seq_len * world;
    if (c->total_batch == 0) c->total_batch = per_micro;
    if (c->total_batch % per_micro != 0) {
        fprintf(stderr, "error: --total-batch %ld is not a multiple of batch x seq-len x processes = %d x %d x %d = %ld\n",
                c->total_batch, c->batch, c->seq_len, world, per_micro);
        return -1;
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

#endif // CONFIG_H
