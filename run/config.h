// config.h: the options of everything that takes options (the trainer, `--plan`, `--plan --time`)
// as ONE table, and everything that follows from it: the defaults, --help, the command line,
// range checks, the checks across options, the values and the resolved-configuration report.
//
// Contract
//   - CONFIG_ROWS is the table: one row per option (its name, key, who takes it, type, field of
//     TrainConfig, default, accepted range or choices, help text, and the DeepSpeed key that sets
//     it, if one does). It is expanded into the keys (CK_<KEY>, in the rows' order) and into
//     config_options(). A row's `uses` (CU_*) says who takes it: the trainer; --plan, because the
//     option changes the memory plan or the step time (the same meaning, range and errors as the
//     trainer's); or --plan alone (--world, --params, --time, --hardware, --json, --fit, ...).
//     Adding an option is adding a row (and its field); a few rows have a hook for what a range
//     cannot say (config_hook: --model's presets, say).
//   - config_defaults() fills a TrainConfig from the table; config_help() prints the rows a
//     program takes; config_parse() (the trainer) and config_parse_as() (either program) read GNU
//     long options through it, range-checking each value, with one line naming the option on
//     error (also for an option the other program takes, not this one); config_value() reads any
//     setting back for reports; ds_config.h reads the DeepSpeed keys through it (ds_option).
//   - config_locate_defaults() finds the defaults that name files (the data, the tokenizer:
//     relative paths) next to the program when the working directory has none of them, or says
//     in one line where it looked.
//   - config_validate() checks what no single row can: options against each other and against
//     the model (known once --init's header is read), for the trainer and --plan alike (a check
//     of an option --plan does not take, --nvme-path's, is the trainer's only). Both print ONE
//     line naming the culprit and return -1 on bad input; the caller exits.
//   - Every setting has a key (CK_*, its row; CK_DSX + DSX_* for the DeepSpeed settings that have
//     no option, CONFIG_DS_ROWS) and a source: default, command line, the --deepspeed file, or
//     derived from other settings. config_parse() marks what the command line gave; ds_config.h
//     reads the marks to resolve "auto" and to refuse conflicts, and records what the file set.
//   - config_print_resolved() prints every setting a run has, its value and its source (default,
//     command line, the file, derived), what "auto" became, and for DeepSpeed's settings without
//     an option what this trainer does about them; config_log_resolved() the same as one JSON
//     line for the --log: {"event":"config","deepspeed":FILE,"world":N,"settings":{"lr":{"value":
//     0.001,"source":"default","file_key":"optimizer.params.lr","auto":true},...}}.
//   - The build: which precisions this binary runs (the GPU trainer's kernels are compiled for
//     one) is the trainer's to say (ConfigBuild, config_set_build); the default is every
//     precision (the CPU trainer).
//   - config_lr_schedule() and config_optimizer() hand the lr schedule's and the optimizer's
//     settings to optimizer.h, which knows no options; config_zero_options() hands ZeRO's
//     (zero/store.h's ZeroOptions) to the trainer, the planner and the time model: its one copy.
// Shared by both trainers (C11 and CUDA C++); no global state (getopt's own aside). Uses cJSON
// (the --log's line).
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
#include <cjson/cJSON.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "mixed_precision.h"
#include "zero/location.h"
#include "zero/store.h"

// DeepSpeed settings the trainer has no option for: recorded from the file, reported in the
// resolved configuration with whether the trainer honours them, else unused. One row each:
// DS_ROW(KEY, key path, type, DeepSpeed's default, what this trainer does); DSX_KEY is the key.
enum { DSX_T_BOOL, DSX_T_SIZE, DSX_T_REAL }; // REAL: a number > 0
#define CONFIG_DS_ROWS \
    DS_ROW(OVERLAP_COMM, "zero_optimization.overlap_comm", DSX_T_BOOL, 0, \
           "honoured as true: each unit's collective runs under the next unit's compute (false is ignored)") \
    DS_ROW(REDUCE_BUCKET_SIZE, "zero_optimization.reduce_bucket_size", DSX_T_SIZE, 5e8, \
           "not used: a bucket is one unit (the embeddings, a layer, the final LayerNorm)") \
    DS_ROW(ALLGATHER_BUCKET_SIZE, "zero_optimization.allgather_bucket_size", DSX_T_SIZE, 5e8, \
           "not used: parameters are all-gathered one unit at a time") \
    DS_ROW(CONTIGUOUS_GRADIENTS, "zero_optimization.contiguous_gradients", DSX_T_BOOL, 1, \
           "honoured as true: gradients live in one flat buffer (false is ignored)") \
    DS_ROW(REDUCE_SCATTER, "zero_optimization.reduce_scatter", DSX_T_BOOL, 1, \
           "honoured as true: stages 1-3 reduce-scatter (false, an all-reduce, is ignored)") \
    DS_ROW(ALLGATHER_PARTITIONS, "zero_optimization.allgather_partitions", DSX_T_BOOL, 1, \
           "honoured as true: one all-gather per unit (false is ignored)") \
    DS_ROW(PREFETCH_BUCKET_SIZE, "zero_optimization.stage3_prefetch_bucket_size", DSX_T_SIZE, 5e7, \
           "not used: stage 3 prefetches exactly one unit ahead") \
    DS_ROW(PARAM_PERSISTENCE_THRESHOLD, "zero_optimization.stage3_param_persistence_threshold", DSX_T_SIZE, 1e5, \
           "not used: every unit is partitioned, none persists") \
    DS_ROW(MAX_LIVE_PARAMETERS, "zero_optimization.stage3_max_live_parameters", DSX_T_SIZE, 1e9, \
           "not used: at most the embeddings, the final LayerNorm and two layers are gathered at once") \
    DS_ROW(MAX_REUSE_DISTANCE, "zero_optimization.stage3_max_reuse_distance", DSX_T_SIZE, 1e9, \
           "not used: a layer is released after its forward and gathered again for its backward") \
    DS_ROW(GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE, "zero_optimization.stage3_gather_16bit_weights_on_model_save", \
           DSX_T_BOOL, 0, "checkpoints always hold the whole model, gathered (what true asks for)") \
    DS_ROW(SUB_GROUP_SIZE, "zero_optimization.sub_group_size", DSX_T_SIZE, 1e9, \
           "not used: each rank updates its whole shard at once") \
    DS_ROW(WALL_CLOCK_BREAKDOWN, "wall_clock_breakdown", DSX_T_BOOL, 0, \
           "not implemented: true is ignored (the step line and the log have each step's time)") \
    DS_ROW(PARAM_BUFFER_COUNT, "zero_optimization.offload_param.buffer_count", DSX_T_SIZE, 5, \
           "not used: one pool of --nvme-buffers sets (offload_optimizer.buffer_count) serves both streams") \
    DS_ROW(MAX_IN_CPU, "zero_optimization.offload_param.max_in_cpu", DSX_T_SIZE, 1e9, \
           "not used: a shard on NVMe is read unit by unit into one host slice per gather buffer, " \
           "nothing cached beyond") \
    DS_ROW(AIO_SINGLE_SUBMIT, "aio.single_submit", DSX_T_BOOL, 0, \
           "not used: each I/O thread submits its requests one at a time (pread/pwrite)") \
    DS_ROW(AIO_OVERLAP_EVENTS, "aio.overlap_events", DSX_T_BOOL, 1, \
           "honoured as true: reads ahead and writes behind overlap the update (false is ignored)") \
    DS_ROW(PARTITION_ACTIVATIONS, "activation_checkpointing.partition_activations", DSX_T_BOOL, 0, \
           "nothing to partition: DeepSpeed splits activations that model-parallel ranks hold in duplicate; " \
           "with data parallelism alone each rank's activations are its own micro-batch's, held once") \
    DS_ROW(CONTIGUOUS_MEMORY_OPTIMIZATION, "activation_checkpointing.contiguous_memory_optimization", DSX_T_BOOL, 0, \
           "honoured as true: the kept inputs live in one preallocated block (false is ignored)") \
    DS_ROW(NUMBER_CHECKPOINTS, "activation_checkpointing.number_checkpoints", DSX_T_SIZE, 0, \
           "full recompute keeps N layer inputs: --recompute-every ceil(L/N) (0 here: DeepSpeed's null, " \
           "every layer's)") \
    DS_ROW(SYNCHRONIZE_CHECKPOINT_BOUNDARY, "activation_checkpointing.synchronize_checkpoint_boundary", DSX_T_BOOL, 0, \
           "not needed: checkpoint copies are ordered by events (GPU) or synchronous (CPU); true changes nothing") \
    DS_ROW(PROFILE, "activation_checkpointing.profile", DSX_T_BOOL, 0, \
           "not implemented: true is ignored (the step line and the log have each step's time)") \
    DS_ROW(PRESCALE_GRADIENTS, "prescale_gradients", DSX_T_BOOL, 0, \
           "honoured: true divides each gradient by the world size before the sum over ranks; false by " \
           "gradient_predivide_factor before it and by world size / factor after (as DeepSpeed's engine)") \
    DS_ROW(GRADIENT_PREDIVIDE_FACTOR, "gradient_predivide_factor", DSX_T_REAL, 1, \
           "honoured (prescale_gradients false): 1 and the world size divide before the sum (folded into the loss's " \
           "gradient), others split the division around it; every choice is the mean over ranks up to rounding") \
    DS_ROW(ZERO_ALLOW_UNTESTED_OPTIMIZER, "zero_allow_untested_optimizer", DSX_T_BOOL, 0, \
           "nothing to allow: ZeRO runs every optimizer this trainer has (optimizer.h)") \
    DS_ROW(FP16_AUTO_CAST, "fp16.auto_cast", DSX_T_BOOL, 0, \
           "nothing to cast: DeepSpeed casts floating-point inputs only, and this model's inputs are token ids") \
    DS_ROW(AIO_USE_GDS, "aio.use_gds", DSX_T_BOOL, 0, \
           "NVMe files are read and written with direct I/O: in the CPU trainer straight into the memory it computes " \
           "in (what true asks for), in the GPU trainer through host buffers (true warns there)") \
    DS_ROW(AIO_INTRA_OP_PARALLELISM, "aio.intra_op_parallelism", DSX_T_SIZE, 1, \
           "not used: --aio-threads x --aio-queue-depth requests run at once")
#define DS_ROW(key, ...) DSX_##key,
enum { CONFIG_DS_ROWS DSX_NUM };
#undef DS_ROW

// Who takes an option (a row's `uses`): the trainer (CU_TRAIN); --plan, because the option
// changes the memory plan (CU_MEM) or the predicted step time (CU_TIME); --plan alone, a setting
// of the planner itself (CU_PLAN); and, for --plan, only together with --time (CU_WITH_TIME).
enum { CU_TRAIN = 1, CU_MEM = 2, CU_TIME = 4, CU_PLAN = 8, CU_WITH_TIME = 16 };
#define CU_PLANNED (CU_MEM | CU_TIME | CU_PLAN) // the rows --plan takes

// The options, one row each, in --help's order. A row is one of
//   CO_NUM(name, KEY, uses, OT_INT|OT_LONG|OT_U64|OT_FLOAT|OT_COUNT, field, default, lo, hi, section, arg, help,
//          DeepSpeed key, what a DeepSpeed error expects)
//   CO_STR(name, KEY, uses, field, default, section, arg, help, DeepSpeed key)
//   CO_FLAG(name, KEY, uses, field, section, help, DeepSpeed key)
//   CO_CHOICE(name, KEY, uses, field, default index, names, count, section, arg, help, DeepSpeed key, expects)
// where name is the option (--name), CK_KEY its key, uses who takes it (CU_*), field the member
// of TrainConfig it sets, section --help's heading on the first row of a section, and help its text
// (lines after the first start with "\n"). The list is expanded twice: the keys (CK_*, below) and
// the table (config_options()), so a key's number is its row's place, kept by the compiler.
#define CONFIG_ROWS \
    CO_STR("init", INIT, CU_TRAIN | CU_MEM | CU_TIME, init_path, NULL, "model (one of)", "FILE", \
           "start from an llm.c checkpoint (fp32, version 3)", NULL) \
    CO_STR("model", MODEL, CU_TRAIN | CU_MEM | CU_TIME, model_name, NULL, NULL, "NAME", \
           "GPT-2 from scratch: d12 (124M), d24 (350M), d36 (774M), d48 (1558M)", NULL) \
    CO_NUM("layers", LAYERS, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, model.num_layers, 4, 1, GPT2_MAX_LAYERS, NULL, "N", \
           "explicit shape from scratch", NULL, NULL) \
    CO_NUM("channels", CHANNELS, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, model.channels, 256, 1, 1 << 16, NULL, \
           "N", "width", NULL, NULL) \
    CO_NUM("heads", HEADS, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, model.num_heads, 4, 1, 1 << 12, NULL, \
           "N", "attention heads", NULL, NULL) \
    CO_NUM("max-seq-len", MAX_SEQ_LEN, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, model.max_seq_len, 256, 1, 1 << 20, \
           NULL, "N", "positions (wpe's rows)", NULL, NULL) \
    CO_NUM("vocab-size", VOCAB_SIZE, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, model.vocab_size, 50257, 1, 65536, \
           NULL, "N", "padded to a multiple of 128", NULL, NULL) \
    CO_STR("train-data", TRAIN_DATA, CU_TRAIN, train_data, "data/brown_train_*.bin", "data", "GLOB", \
           "token shards to train on (the data and tokenizer defaults: from the\n" \
           "working directory, else next to the program)", NULL) \
    CO_STR("val-data", VAL_DATA, CU_TRAIN, val_data, "data/brown_val_*.bin", NULL, "GLOB", \
           "token shards to validate on", NULL) \
    CO_STR("tokenizer", TOKENIZER, CU_TRAIN, tokenizer_path, "data/gpt2_tokenizer.bin", NULL, "FILE", \
           "for printing samples as text", NULL) \
    CO_FLAG("no-shuffle", SHUFFLE, CU_TRAIN, no_shuffle, NULL, \
            "read sequences in file order (default: shuffled per epoch)", NULL) \
    CO_NUM("batch", BATCH, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, batch, 8, 1, 1 << 20, "batch and steps", "B", \
           "sequences per micro-step per process", "train_micro_batch_size_per_gpu", NULL) \
    CO_NUM("seq-len", SEQ_LEN, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, seq_len, 64, 1, 1 << 20, NULL, "T", \
           "tokens per sequence", NULL, NULL) \
    CO_NUM("total-batch", TOTAL_BATCH, CU_TRAIN | CU_TIME, OT_LONG, total_batch, 0, 1, 1099511627776.0, NULL, "N", \
           "tokens per optimizer step, a multiple of B*T*processes;\n" \
           "gradients accumulate over the micro-steps (0: B*T*processes*G)", NULL, NULL) \
    CO_NUM("grad-accum", GRAD_ACCUM, CU_TRAIN | CU_TIME, OT_INT, grad_accum, 0, 1, 1 << 20, NULL, "G", \
           "micro-steps per optimizer step; with --total-batch they must agree\n" \
           "(0: --total-batch / (B*T*processes), else 1)", "gradient_accumulation_steps", NULL) \
    CO_NUM("steps", STEPS, CU_TRAIN, OT_INT, steps, 100, 0, 1 << 30, NULL, "N", "optimizer steps", NULL, NULL) \
    CO_CHOICE("optimizer", OPTIMIZER, CU_TRAIN | CU_MEM | CU_TIME, optimizer, OPT_ADAMW, optimizer_names, OPT_NUM, \
              "optimizer", "O", "adamw | lion | sgd-momentum | sgd | lamb (optimizer.h)", NULL, NULL) \
    CO_NUM("lr", LR, CU_TRAIN, OT_FLOAT, lr, 1e-3f, 0, 1e3, NULL, "X", "peak learning rate", \
           "optimizer.params.lr", NULL) \
    CO_CHOICE("lr-schedule", LR_SCHEDULE, CU_TRAIN, lr_schedule, LR_COSINE, lr_schedule_names, LR_NUM_SCHEDULES, NULL, \
              "S", "constant | linear | cosine after a linear warmup, or DeepSpeed's\n" \
              "WarmupLR | WarmupDecayLR | WarmupCosineLR", NULL, NULL) \
    CO_NUM("warmup", WARMUP, CU_TRAIN, OT_INT, warmup, 10, 0, 1 << 30, NULL, "N", "warmup steps", \
           "scheduler.params.warmup_num_steps", NULL) \
    CO_NUM("min-lr-frac", MIN_LR_FRAC, CU_TRAIN, OT_FLOAT, min_lr_frac, 0.1f, 0, 1, NULL, "X", \
           "final lr as a fraction of the peak; WarmupCosineLR's cos_min_ratio", \
           "scheduler.params.cos_min_ratio", NULL) \
    CO_NUM("warmup-min-lr", WARMUP_MIN_LR, CU_TRAIN, OT_FLOAT, warmup_min_lr, 0, 0, 1e3, NULL, "X", \
           "WarmupLR, WarmupDecayLR: lr the warmup starts from", "scheduler.params.warmup_min_lr", NULL) \
    CO_CHOICE("warmup-type", WARMUP_TYPE, CU_TRAIN, warmup_type, LR_WARMUP_LOG, lr_warmup_type_names, 2, NULL, "T", \
              "DeepSpeed schedules' warmup: log | linear", "scheduler.params.warmup_type", "\"log\" or \"linear\"") \
    CO_NUM("lr-total-steps", LR_TOTAL_STEPS, CU_TRAIN, OT_INT, lr_total_steps, 0, 1, 1 << 30, NULL, "N", \
           "WarmupDecayLR, WarmupCosineLR: total_num_steps (0: --steps)", "scheduler.params.total_num_steps", NULL) \
    CO_NUM("warmup-min-ratio", WARMUP_MIN_RATIO, CU_TRAIN, OT_FLOAT, warmup_min_ratio, 0, 0, 1, NULL, "X", \
           "WarmupCosineLR: warmup starts from X * lr", "scheduler.params.warmup_min_ratio", NULL) \
    CO_NUM("weight-decay", WEIGHT_DECAY, CU_TRAIN, OT_FLOAT, weight_decay, 0.1f, 0, 1e3, NULL, "X", \
           "on 2-D weights only (decoupled; SGD's is L2, as torch's)", "optimizer.params.weight_decay", NULL) \
    CO_NUM("beta1", BETA1, CU_TRAIN, OT_FLOAT, beta1, 0.9f, 0, 0.999999, NULL, "X", "AdamW, Lion, LAMB", NULL, NULL) \
    CO_NUM("beta2", BETA2, CU_TRAIN, OT_FLOAT, beta2, 0.95f, 0, 0.999999999, NULL, "X", "AdamW, Lion, LAMB", NULL, NULL) \
    CO_NUM("eps", EPS, CU_TRAIN, OT_FLOAT, eps, 1e-8f, 1e-30, 1, NULL, "X", "AdamW, LAMB", "optimizer.params.eps", NULL) \
    CO_CHOICE("bias-correction", BIAS_CORRECTION, CU_TRAIN, bias_correction, 1, config_off_on_names, 2, \
              NULL, "on|off", "AdamW, LAMB: divide the moments by 1 - beta^t (on, torch's) or not (off:\n" \
              "DeepSpeed's optimizer.params.bias_correction false, BERT's configs)", NULL, NULL) \
    CO_NUM("momentum", MOMENTUM, CU_TRAIN, OT_FLOAT, momentum, 0.9f, 0, 0.999999, NULL, "X", "sgd-momentum", \
           "optimizer.params.momentum", NULL) \
    CO_NUM("max-coeff", MAX_COEFF, CU_TRAIN, OT_FLOAT, max_coeff, 10.0f, 0, 1e30, NULL, "X", \
           "LAMB: the trust ratio |w|/|update| clamped to at most X (DeepSpeed's default)", \
           "optimizer.params.max_coeff", NULL) \
    CO_NUM("min-coeff", MIN_COEFF, CU_TRAIN, OT_FLOAT, min_coeff, 0.01f, 0, 1e30, NULL, "X", \
           "LAMB: ... and at least X (DeepSpeed's default)", "optimizer.params.min_coeff", NULL) \
    CO_NUM("grad-clip", GRAD_CLIP, CU_TRAIN, OT_FLOAT, grad_clip, 1.0f, 0, 1e30, NULL, "X", \
           "clip the global gradient norm to X; 0 = off", "gradient_clipping", NULL) \
    CO_CHOICE("precision", PRECISION, CU_TRAIN | CU_MEM | CU_TIME, precision, ZC_F32, zc_dtype_names, ZC_NUM_DTYPES, \
              "precision (DeepSpeed's fp16/bf16 settings)", "P", \
              "fp32 | bf16 | fp16: bf16/fp16 keep parameters, gradients, activations\n" \
              "in 16 bits, fp32 master weights and optimizer state", NULL, NULL) \
    CO_NUM("loss-scale", LOSS_SCALE, CU_TRAIN, OT_FLOAT, loss_scale, 0, 0, 1e38, NULL, "X", \
           "fp16: a static loss scale; 0 = dynamic", "fp16.loss_scale", NULL) \
    CO_NUM("initial-scale-power", INITIAL_SCALE_POWER, CU_TRAIN, OT_INT, initial_scale_power, 16, -126, 127, \
           NULL, "N", "fp16 dynamic scale starts at 2^N", "fp16.initial_scale_power", NULL) \
    CO_NUM("loss-scale-window", LOSS_SCALE_WINDOW, CU_TRAIN, OT_INT, loss_scale_window, 1000, 1, 1 << 30, NULL, "N", \
           "fp16: double the scale after N steps without overflow", "fp16.loss_scale_window", NULL) \
    CO_NUM("hysteresis", HYSTERESIS, CU_TRAIN, OT_INT, hysteresis, 2, 1, 1 << 30, NULL, "N", \
           "fp16: overflows tolerated before the scale halves", "fp16.hysteresis", NULL) \
    CO_NUM("min-loss-scale", MIN_LOSS_SCALE, CU_TRAIN, OT_FLOAT, min_loss_scale, 1, 1e-38, 1e38, NULL, "X", \
           "fp16: the dynamic scale's floor", "fp16.min_loss_scale", NULL) \
    CO_FLAG("consecutive-hysteresis", CONSECUTIVE_HYSTERESIS, CU_TRAIN, consecutive_hysteresis, NULL, \
            "fp16: refill the hysteresis on every good step", "fp16.consecutive_hysteresis") \
    CO_CHOICE("on-min-scale", ON_MIN_SCALE, CU_TRAIN, on_min_scale_skip, 0, config_on_min_scale_names, 2, NULL, "A", \
              "fp16: overflow at the floor: abort | skip the step", NULL, NULL) \
    CO_CHOICE("recompute", RECOMPUTE, CU_TRAIN | CU_MEM | CU_TIME, recompute, RECOMPUTE_NONE, gpt2_recompute_names, \
              NUM_RECOMPUTE, "activation recompute (DeepSpeed's activation_checkpointing)", "R", \
              "none | full | selective: less memory, bit-identical results;\n" \
              "full keeps each layer's input and recomputes the layer in its\n" \
              "backward; selective keeps the matmuls' outputs and recomputes\n" \
              "the LayerNorms, attention and GELU", NULL, NULL) \
    CO_NUM("recompute-every", RECOMPUTE_EVERY, CU_TRAIN | CU_MEM, OT_INT, recompute_every, 1, 1, \
           GPT2_MAX_LAYERS, NULL, "K", "full: keep every K-th layer's input, recompute K layers at a\n" \
           "time (sqrt(L) schedules; for GPT-2, K = 1 keeps the fewest bytes)", NULL, NULL) \
    CO_FLAG("cpu-checkpointing", CPU_CHECKPOINTING, CU_TRAIN | CU_MEM, cpu_checkpointing, NULL, \
            "full: the GPU trainer keeps the inputs in pinned host memory\n" \
            "(the CPU trainer's are there already)", "activation_checkpointing.cpu_checkpointing") \
    CO_NUM("val-every", VAL_EVERY, CU_TRAIN, OT_INT, val_every, 25, 0, 1 << 30, "evaluation and output", "N", \
           "validate every N steps; 0 = never", NULL, NULL) \
    CO_NUM("val-steps", VAL_STEPS, CU_TRAIN, OT_INT, val_steps, 10, 0, 1 << 30, NULL, "N", "batches per validation", \
           NULL, NULL) \
    CO_NUM("sample-every", SAMPLE_EVERY, CU_TRAIN, OT_INT, sample_every, 50, 0, 1 << 30, NULL, "N", \
           "print a sample every N steps; 0 = never", NULL, NULL) \
    CO_NUM("sample-len", SAMPLE_LEN, CU_TRAIN, OT_INT, sample_len, 64, 0, 1 << 20, NULL, "N", \
           "tokens per sample; 0 = no sampling", NULL, NULL) \
    CO_NUM("seed", SEED, CU_TRAIN, OT_U64, seed, 1337, 0, 9007199254740992.0, NULL, "N", \
           "initialisation, shuffling and sampling", NULL, NULL) \
    CO_STR("out", OUT, CU_TRAIN, out_dir, NULL, NULL, "DIR", \
           "directory for checkpoints: DIR/step_N/ (sharded, for --resume),\n" \
           "DIR/latest, and DIR/model_N.bin (llm.c format), at the end", NULL) \
    CO_NUM("save-every", SAVE_EVERY, CU_TRAIN, OT_INT, save_every, 0, 0, 1 << 30, NULL, "N", "and every N steps", \
           NULL, NULL) \
    CO_CHOICE("on-save-error", ON_SAVE_ERROR, CU_TRAIN, on_save_error_continue, 0, config_on_save_error_names, \
              2, NULL, "A", "a save that fails (disk full...): stop the run (exit 1) | continue\n" \
              "without it; either way `latest` keeps naming the last good one", NULL, NULL) \
    CO_STR("log", LOG, CU_TRAIN, log_path, NULL, NULL, "FILE", \
           "JSON lines: one object per step and per validation", NULL) \
    CO_STR("trace", TRACE, CU_TRAIN | CU_TIME | CU_WITH_TIME, trace_path, NULL, NULL, "FILE", \
           "a timeline of every rank (Chrome trace JSON: open it in Perfetto or\n" \
           "chrome://tracing): units' forward and backward, collectives, waits,\n" \
           "the optimizer, data loading, checkpoints (--plan --time: the predicted one)", NULL) \
    CO_FLAG("profile-kernels", PROFILE_KERNELS, CU_TRAIN, profile_kernels, NULL, \
            "GPU trainer: time every kernel with CUDA events and print one table\n" \
            "(calls, ms and % of the step, TFLOP/s, GB/s) after the run", NULL) \
    CO_NUM("peak-tflops", PEAK_TFLOPS, CU_TRAIN, OT_FLOAT, peak_tflops, 0, 0, 1e6, NULL, "X", \
           "the GPU's matmul peak for that table (0: its datasheet's, if known)", NULL, NULL) \
    CO_NUM("peak-gbps", PEAK_GBPS, CU_TRAIN, OT_FLOAT, peak_gbps, 0, 0, 1e6, NULL, "X", \
           "the GPU's memory bandwidth for that table, GB/s", NULL, NULL) \
    CO_STR("dump-grads", DUMP_GRADS, CU_TRAIN, dump_grads_path, NULL, NULL, "FILE", \
           "write the first step's gradients (this run's first, after --resume)\n" \
           "as a checkpoint-format file, or every step's if FILE has %d\n" \
           "(replaced by the step); for tests", NULL) \
    CO_NUM("print-every", PRINT_EVERY, CU_TRAIN, OT_INT, print_every, 1, 1, 1 << 30, NULL, "N", \
           "print the step line every N steps, and the first and last", "steps_per_print", NULL) \
    CO_STR("resume", RESUME, CU_TRAIN | CU_MEM | CU_TIME, resume_path, NULL, NULL, "PATH", \
           "continue from a checkpoint (DIR: its latest; or DIR/step_N), on\n" \
           "any number of processes and any ZeRO stage; same options as before", NULL) \
    CO_NUM("zero-stage", ZERO_STAGE, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, zero_stage, 0, 0, 3, \
           "data parallelism (run under mpirun -np N)", "S", \
           "0: replicate everything, all-reduce gradients; 1: partition the\n" \
           "optimizer state; 2: and the gradients; 3: and the parameters", "zero_optimization.stage", "0, 1, 2 or 3") \
    CO_CHOICE("offload-optimizer", OFFLOAD_OPTIMIZER, CU_TRAIN | CU_MEM | CU_TIME, offload_optimizer, LOC_DEVICE, \
              zero_offload_names, LOC_KINDS, NULL, "D", \
              "none | cpu | nvme: the fp32 master weights and optimizer state live in\n" \
              "host memory and are updated there (ZeRO-Offload; stages 1-3)", \
              "zero_optimization.offload_optimizer.device", "\"none\", \"cpu\" or \"nvme\"") \
    CO_NUM("offload-ratio", OFFLOAD_RATIO, CU_TRAIN | CU_MEM, OT_FLOAT, offload_ratio, 1, 0, 1, NULL, "R", \
           "Twin-Flow, with --offload-optimizer cpu: the fraction of each rank's\n" \
           "optimizer shard (to the nearest whole unit) kept and updated on the host;\n" \
           "the rest stays on the GPU and updates there at the same time", \
           "zero_optimization.offload_optimizer.ratio", NULL) \
    CO_FLAG("offload-delayed-update", OFFLOAD_DELAYED_UPDATE, CU_TRAIN | CU_MEM, offload_delayed_update, NULL, \
            "with --offload-optimizer cpu or nvme: step i's update is applied\n" \
            "after step i+1's forward and backward, which use the parameters from\n" \
            "before it (ZeRO-Offload's delayed parameter update; changes the result)", NULL) \
    CO_NUM("offload-delay-warmup", OFFLOAD_DELAY_WARMUP, CU_TRAIN, OT_INT, offload_delay_warmup, 40, 0, 1 << 30, NULL, \
           "N", "exact steps before the delayed update starts", NULL, NULL) \
    CO_CHOICE("offload-param", OFFLOAD_PARAM, CU_TRAIN | CU_MEM | CU_TIME, offload_param, LOC_DEVICE, zero_offload_names, \
              LOC_KINDS, NULL, "D", "none | cpu | nvme: stage 3's 16-bit parameter shard lives in host memory", \
              "zero_optimization.offload_param.device", "\"none\", \"cpu\" or \"nvme\"") \
    CO_NUM("zeropp-qwz", ZEROPP_QWZ, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, zeropp_qwz, 0, 0, 1, NULL, "0|1", \
           "ZeRO++ qwZ (stage 3): parameter all-gathers send\n" \
           "int8 blocks (an fp32 scale per --zeropp-block elements);\n" \
           "the owner keeps its own shard exact", NULL, NULL) \
    CO_NUM("zeropp-hpz", ZEROPP_HPZ, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, zeropp_hpz, 1, 1, 1 << 20, NULL, "G", \
           "ZeRO++ hpZ (stage 3): from the forward's all-gather\n" \
           "keep a secondary parameter shard over groups of G consecutive\n" \
           "ranks (a host's), so the backward re-gathers inside the host;\n" \
           "G divides the ranks per host (1: off)", NULL, NULL) \
    CO_NUM("zeropp-qgz", ZEROPP_QGZ, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, zeropp_qgz, 0, 0, 8, NULL, "0|4|8", \
           "ZeRO++ qgZ (stages 2, 3): gradients reduced by a\n" \
           "hierarchical all-to-all of int4 (4) or int8 (8) blocks, inside\n" \
           "the host then across hosts, summed in fp32 at each level (0: off)", NULL, NULL) \
    CO_NUM("zeropp-block", ZEROPP_BLOCK, CU_TRAIN | CU_MEM | CU_TIME, OT_INT, zeropp_block, 2048, 2, 1 << 24, NULL, "N", \
           "ZeRO++: elements per quantization block (even: int4\n" \
           "codes pack two a byte)", NULL, NULL) \
    CO_FLAG("pin-memory", PIN_MEMORY, CU_TRAIN, pin_memory, NULL, \
            "offloaded host memory is page-locked (DeepSpeed's pin_memory)", \
            "zero_optimization.offload_optimizer.pin_memory") \
    CO_STR("nvme-path", NVME_PATH, CU_TRAIN, nvme_path, NULL, NULL, "DIR", \
           "with nvme offload: each rank's files go in a directory of its own\n" \
           "under DIR (made at the start, removed at a clean exit)", "zero_optimization.offload_optimizer.nvme_path") \
    CO_NUM("nvme-buffers", NVME_BUFFERS, CU_TRAIN | CU_MEM, OT_INT, nvme_buffers, 4, 2, 16, NULL, "N", \
           "host buffer sets the NVMe update streams through: N - 2 pieces\n" \
           "read ahead while one updates and one is written behind", \
           "zero_optimization.offload_optimizer.buffer_count", NULL) \
    CO_NUM("nvme-buffer-size", NVME_BUFFER_SIZE, CU_TRAIN | CU_MEM, OT_LONG, nvme_buffer_size, 16777216, 2048, \
           1099511627776.0, NULL, "N", "elements per piece streamed to and from NVMe (rounded up to\n" \
           "a multiple of 2048; host memory grows with it)", "zero_optimization.offload_param.buffer_size", NULL) \
    CO_STR("nvme-host-cache", NVME_HOST_CACHE, CU_TRAIN | CU_MEM, nvme_host_cache, NULL, NULL, "BYTES", \
           "with --offload-optimizer nvme: keep BYTES of the optimizer state in host\n" \
           "memory (the last units' slices), the rest on NVMe; auto: what the plan\n" \
           "leaves of this machine's available memory, less a margin", NULL) \
    CO_STR("nvme-readahead", NVME_READAHEAD, CU_TRAIN | CU_MEM, nvme_readahead, NULL, NULL, "BYTES", \
           "with --offload-optimizer nvme: BYTES of host memory the next update's\n" \
           "first pieces are read into during the forward and backward; auto:\n" \
           "what the plan leaves (with --nvme-host-cache auto too: half each)", NULL) \
    CO_NUM("aio-threads", AIO_THREADS, CU_TRAIN, OT_INT, aio_threads, 1, 1, 32, NULL, "N", \
           "NVMe I/O: threads x queue depth requests run at once (at most 32)", "aio.thread_count", NULL) \
    CO_NUM("aio-queue-depth", AIO_QUEUE_DEPTH, CU_TRAIN, OT_INT, aio_queue_depth, 8, 1, 32, NULL, "N", \
           "NVMe I/O: requests per thread", "aio.queue_depth", NULL) \
    CO_NUM("aio-block-size", AIO_BLOCK_SIZE, CU_TRAIN, OT_LONG, aio_block_size, 1048576, 4096, 1073741824.0, NULL, \
           "BYTES", "NVMe I/O: bytes per request (a multiple of 4096)", "aio.block_size", NULL) \
    CO_NUM("comm-timeout", COMM_TIMEOUT, CU_TRAIN, OT_FLOAT, comm_timeout, 300, 0.001, 1e9, NULL, "SEC", \
           "abort the job when a collective takes longer", NULL, NULL) \
    CO_FLAG("check-collectives", CHECK_COLLECTIVES, CU_TRAIN, check_collectives, NULL, \
            "before each collective, check that every rank starts the same one\n" \
            "(number, operation, unit, bytes, type)", NULL) \
    CO_STR("deepspeed", DEEPSPEED, CU_TRAIN | CU_MEM | CU_TIME, ds_config_path, NULL, \
           "DeepSpeed configuration (docs/deepspeed_config.md)", "FILE", \
           "read a DeepSpeed JSON config; its \"auto\" values take the options above,\n" \
           "and an option that disagrees with a value in the file is an error", NULL) \
    CO_FLAG("strict", STRICT, CU_TRAIN | CU_MEM | CU_TIME, ds_strict, NULL, \
            "keys this trainer does not implement are errors, not warnings", NULL) \
    CO_FLAG("plan", PLAN, CU_PLAN, plan.on, \
            "memory and step-time plan (--plan; with the options above that change either)", \
            "print each rank's memory for the run these options describe, and\n" \
            "exit: nothing is allocated (run/planner.h); `--plan --help` lists them", NULL) \
    CO_NUM("world", WORLD, CU_PLAN, OT_INT, world, 1, 1, 1 << 24, NULL, "N", \
           "ranks, any number (a run's: mpirun's -np)", NULL, NULL) \
    CO_NUM("params", PARAMS, CU_PLAN, OT_COUNT, plan.params, 0, 1, 1e16, NULL, "P", \
           "a bare parameter count (7e9, 124M, 1.5B) instead of a GPT-2 shape:\n" \
           "textbook formulas; with --layers, --channels and --heads a textbook\n" \
           "activation estimate", NULL, NULL) \
    CO_NUM("threads", THREADS, CU_PLAN, OT_INT, plan.threads, 0, 1, 1 << 16, NULL, "N", \
           "the CPU trainer's OpenMP threads per rank (0: OMP_NUM_THREADS, else\n" \
           "this machine's cores / --world), which size its bf16 matmul scratch", NULL, NULL) \
    CO_FLAG("json", JSON, CU_PLAN, plan.json, NULL, \
            "one JSON object, bytes per rank (by kind, and by where they live)", NULL) \
    CO_NUM("fit", FIT, CU_PLAN, OT_COUNT, plan.fit, 0, 1, 1e16, NULL, "BYTES", \
           "the largest of a ladder of GPT-2-shaped models (GPT-2's, then GPT-3's\n" \
           "sizes) whose device bytes per rank fit in BYTES (80e9, 80G)", NULL, NULL) \
    CO_FLAG("time", TIME, CU_PLAN, plan.time, NULL, \
            "also predict the step time from the schedule zero.h runs (run/timemodel.h)", NULL) \
    CO_STR("hardware", HARDWARE, CU_PLAN | CU_WITH_TIME, plan.hardware, "this-machine", NULL, "H", \
           "a100-80gb-sxm | h100-80gb-sxm | this-machine | FILE.json", NULL) \
    CO_NUM("gpus-per-node", GPUS_PER_NODE, CU_PLAN | CU_WITH_TIME, OT_INT, plan.per_node, 0, 1, 1 << 20, NULL, "G", \
           "ranks per node (0: the description's devices per node)", NULL, NULL) \
    CO_STR("network", NETWORK, CU_PLAN | CU_WITH_TIME, plan.network, NULL, NULL, "NET", \
           "ib-400 (400 Gb/s InfiniBand per GPU) | eth-100 (100 Gb/s Ethernet per node)", NULL) \
    CO_STR("calibrate", CALIBRATE, CU_PLAN, plan.calibrate, NULL, NULL, "LOG", \
           "print --hardware's description fitted to a run's --log (fwd/bwd/optim/comm)", NULL) \
    CO_FLAG("partitions", PARTITIONS, CU_PLAN, plan.partitions, NULL, \
            "zero.h's partition map for --world: each unit's slices by rank, and what\n" \
            "a rank keeps of each unit at stages 0-3, in bytes (a GPT-2 shape)", NULL)

// Keys of every setting: the options' rows, then the DeepSpeed-only settings.
#define CO_NUM(name, key, ...) CK_##key,
#define CO_STR(name, key, ...) CK_##key,
#define CO_FLAG(name, key, ...) CK_##key,
#define CO_CHOICE(name, key, ...) CK_##key,
enum {
    CONFIG_ROWS
    CK_OPTIONS,             // the table's rows end here
    CK_DSX = CK_OPTIONS,    // CK_DSX + DSX_*: the DeepSpeed-only settings
    CK_NUM = CK_DSX + DSX_NUM
};
#undef CO_NUM
#undef CO_STR
#undef CO_FLAG
#undef CO_CHOICE

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
    int reductions;             // runs optimizers with per-tensor reductions (optimizer.h: LAMB)
    int host_compute;           // computes in host memory (the CPU trainer): NVMe's direct I/O lands
                                // where it computes, which is what GPUDirect Storage (aio.use_gds) asks
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
    float max_coeff, min_coeff; // LAMB's trust-ratio clamp
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
    // ZeRO++ (zero.h): qwZ on/off, hpZ's group of ranks (1: off), qgZ's bits (0: off), the quantization block
    int zeropp_qwz, zeropp_hpz, zeropp_qgz, zeropp_block;
    float offload_ratio;  // Twin-Flow: the part of an offloaded (cpu) optimizer shard on the host (1: all)
    int offload_delayed_update, offload_delay_warmup; // the delayed parameter update, after that many exact steps
    // NVMe (zero/store.h's ZeroOptions): the directory under which each rank makes its own, the buffer
    // sets and the piece (elements) the update streams through, the I/O pool (threads x queue
    // depth requests at once) and bytes per request
    const char *nvme_path;
    int nvme_buffers;
    long nvme_buffer_size;
    const char *nvme_host_cache;   // --nvme-host-cache as given: bytes or "auto"
    double nvme_host_cache_bytes;  // ... as bytes (config_validate; -1: auto, for the trainer to settle)
    const char *nvme_readahead;    // --nvme-readahead as given: bytes or "auto"
    double nvme_readahead_bytes;   // ... as bytes (as nvme_host_cache_bytes)
    int aio_threads, aio_queue_depth;
    long aio_block_size;
    float comm_timeout;   // seconds a collective may take before the job is aborted
    int check_collectives; // --check-collectives: compare each collective's fingerprint across ranks first (run/verdict.h)
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
    int world;            // --plan's --world sets it before config_validate
    const ConfigBuild *build;
    int program;          // whose options config_parse read: CU_TRAIN (the trainer) or CU_PLAN (--plan)
    // --plan's own settings (planner.h): --plan, --time, --json, --threads, --gpus-per-node, --params
    // (a bare count, 0: the GPT-2 shape), --fit (bytes, 0: none), --hardware, --network, --calibrate,
    // --partitions
    struct {
        int on, time, json, threads, per_node, partitions;
        double params, fit;
        const char *hardware, *network, *calibrate;
    } plan;
} TrainConfig;

// ----------------------------------------------------------------------------------------
// The table

enum { OT_INT, OT_LONG, OT_U64, OT_FLOAT, OT_STR, OT_FLAG, OT_CHOICE, OT_COUNT };
typedef struct {
    const char *name;        // --name; also the setting's name in reports and the JSON log
    int uses;                // CU_*: who takes it (the trainer, --plan)
    int type;                // OT_*: OT_FLAG takes no value and sets the field to 1; OT_COUNT is a double
                             // read as 7e9, 124M, 1.5B, 2T (k, M, B or G, T)
    size_t offset;           // of the field in TrainConfig (int, long, uint64_t, float, double or const char *)
    double def;              // default (numbers, flags, a choice's index)
    const char *def_str;     // default of a string option (NULL: unset)
    double lo, hi;           // accepted range of a number
    const char *const *choices; int nchoices; // OT_CHOICE: the field holds the index
    const char *section;     // --help's heading, on the first row of a section
    const char *arg;         // --help's name for the value
    const char *help;        // --help's text (lines after the first start with "\n")
    const char *ds_key;      // the DeepSpeed key that sets this option one to one, or NULL
    const char *ds_expect;   // what a DeepSpeed error says is expected, when not the range
} ConfigOption;

static const char *const config_on_min_scale_names[2] = {"abort", "skip"};
static const char *const config_off_on_names[2] = {"off", "on"};
static const char *const config_on_save_error_names[2] = {"stop", "continue"};

#define CO_F(field) offsetof(TrainConfig, field)
#define CO_NUM(name, key, uses, type, field, def, lo, hi, section, arg, help, ds, expect) \
    {name, uses, type, CO_F(field), def, NULL, lo, hi, NULL, 0, section, arg, help, ds, expect},
#define CO_STR(name, key, uses, field, def, section, arg, help, ds) \
    {name, uses, OT_STR, CO_F(field), 0, def, 0, 0, NULL, 0, section, arg, help, ds, NULL},
#define CO_FLAG(name, key, uses, field, section, help, ds) \
    {name, uses, OT_FLAG, CO_F(field), 0, NULL, 0, 1, NULL, 0, section, NULL, help, ds, NULL},
#define CO_CHOICE(name, key, uses, field, def, names, n, section, arg, help, ds, expect) \
    {name, uses, OT_CHOICE, CO_F(field), def, NULL, 0, 0, names, n, section, arg, help, ds, expect},
static inline const ConfigOption *config_options(void) {
    static const ConfigOption t[CK_OPTIONS] = {CONFIG_ROWS};
    return t;
}
#undef CO_F
#undef CO_NUM
#undef CO_STR
#undef CO_FLAG
#undef CO_CHOICE

// The DeepSpeed-only settings: key path, type, DeepSpeed's default, what this trainer does.
typedef struct {
    const char *path;     // key path (a literal: c->file_key keeps it)
    int type;             // DSX_T_*
    double ds_default;    // DeepSpeed's default
    const char *ours;     // what this trainer does about it
} DsExtra;
static inline const DsExtra *ds_extras(void) {
#define DS_ROW(key, path, type, def, ours) {path, type, def, ours},
    static const DsExtra t[DSX_NUM] = {CONFIG_DS_ROWS};
#undef DS_ROW
    return t;
}

// A setting's name: the option's, or the DeepSpeed key path of a DeepSpeed-only setting.
static inline const char *config_key_name(int key) {
    return key < CK_OPTIONS ? config_options()[key].name : ds_extras()[key - CK_DSX].path;
}

// Does the program that parsed c (the trainer or --plan) take the option?
static inline int config_takes(const TrainConfig *c, int key) {
    int uses = config_options()[key].uses;
    return c->program == CU_TRAIN ? (uses & CU_TRAIN) != 0 : (uses & CU_PLANNED) != 0;
}

// What a range cannot say: --model's presets, the padded vocabulary, the precisions this binary
// runs. Called after the value is stored; -1 after printing one line.
static inline void config_precision_refused(const TrainConfig *c, int precision, const char *key, const char *file);
static inline int config_precision_implemented(const TrainConfig *c, int precision) {
    return c->build ? (c->build->precisions >> precision) & 1u : 1;
}
static inline int config_hook(TrainConfig *c, int key, const char *a) {
    switch (key) {
    case CK_MODEL:
        if (gpt2_preset(a, &c->model) == 0) return 0;
        fprintf(stderr, "error: --model: unknown model '%s' (d12, d24, d36 or d48)\n", a);
        return -1;
    case CK_VOCAB_SIZE:
        c->model.padded_vocab_size = (int)gpt2_round_up((size_t)c->model.vocab_size, 128);
        return 0;
    case CK_PRECISION: // refused here too, so that `--precision X --help` fails where X does not run (tests probe so)
        if (config_precision_implemented(c, c->precision)) return 0;
        config_precision_refused(c, c->precision, NULL, NULL);
        return -1;
    default: return 0;
    }
}

static inline void *config_field(TrainConfig *c, int key) { return (char *)c + config_options()[key].offset; }
static inline const void *config_cfield(const TrainConfig *c, int key) { return (const char *)c + config_options()[key].offset; }

// ----------------------------------------------------------------------------------------
// Defaults and the build

static const ConfigBuild config_cpu_build = {(1u << ZC_F32) | (1u << ZC_BF16) | (1u << ZC_FP16), ZC_F32, {NULL, NULL, NULL}, "", 0, 1, 1};

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
        case OT_COUNT: *(double *)f = o->def; break;
        case OT_STR: *(const char **)f = o->def_str; break;
        }
    }
    config_hook(c, CK_VOCAB_SIZE, NULL);
    c->build = &config_cpu_build;
    c->program = CU_TRAIN;
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
// DeepSpeed-only settings the file did not set report DeepSpeed's default (ds_extra_value),
// so they come back as CV_NONE here.
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
        case OT_COUNT: *num = *(const double *)f; return CV_NUM;
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
        return ds_extras()[k].type == DSX_T_BOOL ? CV_BOOL : CV_NUM;
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

// The rows the program takes (the trainer's: every row, --plan's own under their heading;
// --plan's: CU_PLANNED), each section's heading before its first row shown.
static inline void config_help(const TrainConfig *defaults, int program) {
    const char *section = NULL, *shown = NULL;
    for (int k = 0; k < CK_OPTIONS; k++) {
        const ConfigOption *o = &config_options()[k];
        if (o->section) section = o->section;
        if (program != CU_TRAIN && !(o->uses & CU_PLANNED)) continue;
        if (section != shown) printf("\n%s:\n", shown = section);
        char lead[48], def[64] = "";
        snprintf(lead, sizeof(lead), "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        double num;
        const char *str;
        int kind = config_value(defaults, k, &num, &str);
        if (o->type == OT_STR) { if (str) snprintf(def, sizeof(def), " (default %s)", str); }
        else if (o->type == OT_FLAG || (o->type == OT_COUNT && num == 0.0)) {}
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
// "7e9", "124M", "1.5B", "2T": a count (k, M, B or G, T), rounded to a whole number.
static inline int config_count(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end), mult = 1.0;
    if (end != s && *end && !end[1]) {
        switch (*end) {
        case 'k': case 'K': mult = 1e3; end++; break;
        case 'm': case 'M': mult = 1e6; end++; break;
        case 'b': case 'B': case 'g': case 'G': mult = 1e9; end++; break;
        case 't': case 'T': mult = 1e12; end++; break;
        default: break;
        }
    }
    v *= mult;
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "error: --%s: '%s' is not a count in [%g, %g] (e.g. 7e9, 124M, 1.5B)\n", opt, s, lo, hi);
        return -1;
    }
    *out = floor(v + 0.5);
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
    case OT_COUNT: r = config_count(o->name, a, o->lo, o->hi, (double *)f); break;
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
    return config_hook(c, key, a);
}

// Reads the command line of `program` (CU_TRAIN: the trainer; CU_PLAN: --plan) through the rows
// it takes: one line naming an option that is the other program's. Returns 0 to go on, 1 for
// --help (printed by the caller: config_help), -1 on a bad option (one line printed). Marks every
// option it reads as coming from the command line (c->source).
static inline int config_parse_as(TrainConfig *c, int argc, char **argv, int program) {
    struct option opts[CK_OPTIONS + 2];
    for (int k = 0; k < CK_OPTIONS; k++) {
        opts[k].name = config_options()[k].name;
        opts[k].has_arg = config_options()[k].type == OT_FLAG ? 0 : 1;
        opts[k].flag = NULL;
        opts[k].val = 0;
    }
    memset(&opts[CK_OPTIONS], 0, 2 * sizeof(opts[0]));
    opts[CK_OPTIONS].name = "help";
    c->program = program;
    const char *see = program == CU_TRAIN ? "--help" : "--plan --help";
    int idx;
    optind = 1;
    opterr = 0;
    for (;;) {
        int ch = getopt_long(argc, argv, "", opts, &idx);
        if (ch == -1) break;
        if (ch != 0) {
            fprintf(stderr, "error: %s: unknown option or missing value (see %s)\n", argv[optind - 1], see);
            return -1;
        }
        if (idx == CK_OPTIONS) return 1;
        if (!config_takes(c, idx)) {
            if (program == CU_TRAIN)
                fprintf(stderr, "error: --%s: only with --plan (see --plan --help)\n", opts[idx].name);
            else fprintf(stderr, "error: --%s: not a --plan option: it changes neither the memory nor the step time "
                                 "(see --plan --help)\n", opts[idx].name);
            return -1;
        }
        if (config_set(c, idx, optarg)) return -1;
        c->source[idx] = CFG_SRC_CLI;
    }
    if (optind < argc) {
        fprintf(stderr, "error: %s: unexpected argument (options are --name value)\n", argv[optind]);
        return -1;
    }
    int shape_given = 0, bare = c->plan.params > 0; // a bare count's shape describes only its activations
    for (int k = CK_LAYERS; k <= CK_VOCAB_SIZE; k++) shape_given |= config_given(c, k);
    int sources = (c->init_path != NULL) + (c->model_name != NULL) + (shape_given && !bare) + (c->resume_path != NULL);
    if (sources > 1) {
        fprintf(stderr, "error: --resume, --init, --model and --layers/--channels/--heads/--max-seq-len/--vocab-size "
                        "each define the model; give only one of them\n");
        return -1;
    }
    if (bare && sources) {
        fprintf(stderr, "error: --params and --resume/--init/--model each define the model; give only one of them\n");
        return -1;
    }
    return 0;
}

// The trainer's command line (config_parse_as), printing --help.
static inline int config_parse(TrainConfig *c, int argc, char **argv) {
    TrainConfig defaults = *c;
    int rc = config_parse_as(c, argc, argv, CU_TRAIN);
    if (rc == 1) {
        printf("usage: %s [options]\n", argv[0]);
        config_help(&defaults, CU_TRAIN);
    }
    return rc;
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

// ZeRO++'s settings against the stage and the world. Ranks per host are the backend's to know:
// zero/pp_setup.h's zero_pp_problem checks those once the job runs (and --plan's --gpus-per-node).
static inline int config_validate_zeropp(const TrainConfig *c, int world) {
    if (c->zeropp_qwz && c->zero_stage != 3) {
        fprintf(stderr, "error: --zeropp-qwz 1 needs --zero-stage 3 (it quantizes stage 3's parameter all-gather; "
                        "--zero-stage is %d)\n", c->zero_stage);
        return -1;
    }
    if (c->zeropp_hpz > 1 && c->zero_stage != 3) {
        fprintf(stderr, "error: --zeropp-hpz %d needs --zero-stage 3 (its secondary shard is of stage 3's partitioned "
                        "parameters; --zero-stage is %d)\n", c->zeropp_hpz, c->zero_stage);
        return -1;
    }
    if (c->zeropp_qgz != 0 && c->zeropp_qgz != 4 && c->zeropp_qgz != 8) {
        fprintf(stderr, "error: --zeropp-qgz %d: expected 0 (off), 4 or 8 (bits per gradient element)\n", c->zeropp_qgz);
        return -1;
    }
    if (c->zeropp_qgz && c->zero_stage < 2) {
        fprintf(stderr, "error: --zeropp-qgz %d needs --zero-stage 2 or 3 (it replaces their gradient reduce-scatter; "
                        "--zero-stage is %d)\n", c->zeropp_qgz, c->zero_stage);
        return -1;
    }
    if (c->zeropp_block % 2) {
        fprintf(stderr, "error: --zeropp-block %d is odd: int4 codes pack two a byte, so a block must be even\n",
                c->zeropp_block);
        return -1;
    }
    if (c->zeropp_hpz > 1 && world % c->zeropp_hpz) {
        fprintf(stderr, "error: --zeropp-hpz %d does not divide the %d ranks (hpZ's groups are G consecutive ranks of "
                        "a host)\n", c->zeropp_hpz, world);
        return -1;
    }
    if (c->zeropp_hpz > 1 && c->program == CU_PLAN && c->plan.per_node > 0 && c->plan.per_node % c->zeropp_hpz) {
        fprintf(stderr, "error: --zeropp-hpz %d does not divide --gpus-per-node %d (hpZ's group stays inside a host)\n",
                c->zeropp_hpz, c->plan.per_node);
        return -1;
    }
    return 0;
}

// An NVMe host-memory budget (--nvme-host-cache, --nvme-readahead): bytes, or auto (-1, for the
// trainer to settle); one line naming the option when it is not a byte count or is set without
// the optimizer on NVMe.
static inline int config_nvme_budget(const TrainConfig *c, const char *opt, const char *given, const char *why, double *bytes) {
    *bytes = 0;
    if (!given) return 0;
    char *e = NULL;
    double v = strcmp(given, "auto") ? strtod(given, &e) : -1.0;
    if (e && (e == given || *e || !(v >= 0.0 && v < 1e18))) {
        fprintf(stderr, "error: %s %s: not a byte count or auto\n", opt, given);
        return -1;
    }
    if (v != 0.0 && c->offload_optimizer != LOC_NVME) {
        fprintf(stderr, "error: %s %s needs --offload-optimizer nvme (%s)\n", opt, given, why);
        return -1;
    }
    *bytes = v < 0.0 ? -1.0 : floor(v);
    return 0;
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
    if (optimizer_reductions(c->optimizer) && c->build && !c->build->reductions) { // (--plan's too: planner_main)
        fprintf(stderr, "error: --optimizer %s needs a per-tensor reduction pass before its update, which this GPU "
                        "trainer does not have yet: use train_gpt_cpu\n", optimizer_names[c->optimizer]);
        return -1;
    }
    if (c->optimizer == OPT_LAMB && c->min_coeff > c->max_coeff) {
        fprintf(stderr, "error: --min-coeff %g is above --max-coeff %g (LAMB's trust ratio is clamped between them)\n",
                c->min_coeff, c->max_coeff);
        return -1;
    }
    if (c->offload_param != LOC_DEVICE && c->zero_stage != 3) {
        fprintf(stderr, "error: --offload-param %s needs --zero-stage 3 (only stage 3 partitions the parameters)\n",
                zero_offload_names[c->offload_param]);
        return -1;
    }
    if (c->offload_ratio < 1.0f && c->offload_optimizer != LOC_HOST) {
        fprintf(stderr, "error: --offload-ratio %g (offload_optimizer.ratio) needs --offload-optimizer cpu (Twin-Flow splits the "
                        "optimizer state between the host and the GPU; here it is %s)\n", c->offload_ratio,
                c->offload_optimizer == LOC_NVME ? "on NVMe" : "not offloaded");
        return -1;
    }
    if (c->offload_delayed_update && c->offload_optimizer == LOC_DEVICE) {
        fprintf(stderr, "error: --offload-delayed-update needs --offload-optimizer cpu or nvme (the update it "
                        "delays is the host's; here the optimizer is not offloaded)\n");
        return -1;
    }
    if (c->offload_ratio < 1.0f && c->offload_param != LOC_DEVICE) {
        fprintf(stderr, "error: --offload-ratio %g (offload_optimizer.ratio) needs the parameters on the GPU (without "
                        "--offload-param): the GPU's part of the update writes them there\n", c->offload_ratio);
        return -1;
    }
    if ((c->offload_optimizer == LOC_NVME || c->offload_param == LOC_NVME) && !c->nvme_path && config_takes(c, CK_NVME_PATH)) {
        fprintf(stderr, "error: --offload-%s nvme needs --nvme-path DIR (DeepSpeed's nvme_path)\n",
                c->offload_optimizer == LOC_NVME ? "optimizer" : "param");
        return -1;
    }
    if (config_validate_zeropp(c, world)) return -1;
    if (config_nvme_budget(c, "--nvme-host-cache", c->nvme_host_cache, "it keeps part of the optimizer state NVMe would hold",
                           &c->nvme_host_cache_bytes) ||
        config_nvme_budget(c, "--nvme-readahead", c->nvme_readahead, "it reads ahead the optimizer state NVMe holds",
                           &c->nvme_readahead_bytes))
        return -1;
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
    h.max_coeff = c->max_coeff; h.min_coeff = c->min_coeff;
    return h;
}

// ----------------------------------------------------------------------------------------
// The settings zero.h needs, in its own terms: the ONE place ZeroOptions (zero/store.h) is made
// from the options, for the trainer's zero_init, the memory planner and the step-time model alike
// (planner.h's PlanInput and timemodel.h's TimeInput hold it whole). A new ZeRO option is a row, a
// ZeroOptions field and a line here. Left to the caller: nvme_dir (the rank's own directory, made
// at start) and zeropp_per_host (0: the backend's hosts; --plan sets --gpus-per-node's). An "auto"
// host tier (-1, until the trainer settles it) counts as none.
static inline ZeroOptions config_zero_options(const TrainConfig *c) {
    ZeroOptions o = zero_options(c->zero_stage, c->precision, c->optimizer);
    o.offload_optimizer = c->offload_optimizer; o.offload_param = c->offload_param; o.pin_memory = c->pin_memory;
    o.delayed_update = c->offload_delayed_update;
    o.twin_device = 1.0 - (double)c->offload_ratio;
    o.nvme_buffers = c->nvme_buffers; o.nvme_piece = (size_t)c->nvme_buffer_size;
    o.nvme_threads = c->aio_threads * c->aio_queue_depth; o.nvme_block = (size_t)c->aio_block_size;
    o.nvme_host_cache = c->nvme_host_cache_bytes > 0 ? (size_t)c->nvme_host_cache_bytes : 0; // (auto: planner_nvme_auto)
    o.nvme_readahead = c->nvme_readahead_bytes > 0 ? (size_t)c->nvme_readahead_bytes : 0;
    o.zeropp_qwz = c->zeropp_qwz; o.zeropp_hpz = c->zeropp_hpz; o.zeropp_qgz = c->zeropp_qgz;
    o.zeropp_block = c->zeropp_block;
    return o;
}

// ----------------------------------------------------------------------------------------
// The resolved configuration: every setting, its value and where it came from

// a, b and c into buf, printable (keys and paths come from files and users: no control bytes reach
// the terminal); long ones are cut at n - 1 bytes.
static inline void ds_cat(char *buf, size_t n, const char *a, const char *b, const char *c) {
    const char *parts[3] = {a, b, c};
    size_t k = 0;
    for (int i = 0; i < 3; i++)
        for (const char *p = parts[i]; p && *p && k + 1 < n; p++)
            buf[k++] = (unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f ? '?' : *p;
    buf[k] = 0;
}
// A setting's current value as text ("0.001", "8", "cosine", "true").
static inline const char *config_value_str(const TrainConfig *c, int key, char *buf, size_t n) {
    double num;
    const char *str;
    switch (config_value(c, key, &num, &str)) {
    case CV_STR: snprintf(buf, n, "%s", str ? str : "(none)"); break;
    case CV_FLOAT: config_float_str(buf, n, num); break;
    case CV_BOOL: snprintf(buf, n, "%s", num != 0.0 ? "true" : "false"); break;
    case CV_NUM: snprintf(buf, n, "%.15g", num); break;
    default: snprintf(buf, n, "?"); break;
    }
    return buf;
}

// The settings a run reports: the trainer's rows (not --plan's own) and the DeepSpeed-only ones.
static inline int config_reported(int key) { return key >= CK_OPTIONS || (config_options()[key].uses & CU_TRAIN); }

static inline const char *config_source_name(const TrainConfig *c, int key) {
    int s = c->source[key];
    int shape = key >= CK_LAYERS && key <= CK_VOCAB_SIZE;
    if (shape && s == CFG_SRC_DEFAULT && c->init_path) return "derived";   // from the checkpoint
    if (shape && s == CFG_SRC_DEFAULT && c->model_name) return "derived";  // from --model
    return s == CFG_SRC_CLI ? "command line" : s == CFG_SRC_FILE ? "file" : s == CFG_SRC_DERIVED ? "derived" : "default";
}

// The DeepSpeed-only setting k's value: the file's, else DeepSpeed's default.
static inline double ds_extra_value(const TrainConfig *c, int k) {
    if (c->source[CK_DSX + k] == CFG_SRC_FILE) return c->ds_extra[k];
    if (k == DSX_OVERLAP_COMM) return c->zero_stage == 3; // DeepSpeed turns it on for stage 3
    return ds_extras()[k].ds_default;
}

// One row per setting: its option, value, source (the file's name when it came from the file)
// and the file's key (with "auto" when the file said so); then DeepSpeed's settings that have no
// option, with what this trainer does about each.
static inline void config_print_resolved(FILE *f, const TrainConfig *c) {
    const char *file = c->ds_config_path;
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file;
    char val[CK_NUM][48], src[CK_NUM][48];
    int wv = 5, ws = 6;
    for (int k = 0; k < CK_NUM; k++) {
        if (!config_reported(k)) continue;
        const char *s = config_source_name(c, k);
        if (k < CK_DSX) {
            config_value_str(c, k, val[k], sizeof(val[k]));
            if (c->source[k] == CFG_SRC_FILE && base) s = base;
        } else {
            int e = k - CK_DSX, t = ds_extras()[e].type;
            double v = ds_extra_value(c, e);
            if (t == DSX_T_BOOL) snprintf(val[k], sizeof(val[k]), "%s", v != 0.0 ? "true" : "false");
            else snprintf(val[k], sizeof(val[k]), "%.15g", v);
            s = c->source[k] == CFG_SRC_FILE && base ? base
                : c->file_said[k] == CFG_FILE_AUTO ? "\"auto\": DeepSpeed default" : "DeepSpeed default";
        }
        ds_cat(src[k], sizeof(src[k]), s, NULL, NULL);
        int lv = (int)strlen(val[k]), ls = (int)strlen(src[k]);
        if (lv > wv && lv <= 40) wv = lv;
        if (ls > ws) ws = ls;
    }
    fprintf(f, "resolved configuration (%s%s, %d process%s):\n", file ? "--deepspeed " : "no --deepspeed file",
            file ? file : "", c->world, c->world == 1 ? "" : "es");
    fprintf(f, "  %-24s %-*s %-*s %s\n", "option", wv, "value", ws, "source", "DeepSpeed key");
    for (int k = 0; k < CK_DSX; k++) {
        if (!config_reported(k)) continue;
        char opt[40];
        snprintf(opt, sizeof(opt), "--%s", config_key_name(k));
        fprintf(f, "  %-24s %-*s %-*s %s%s\n", opt, wv, val[k], ws, src[k],
                c->file_said[k] != CFG_FILE_SILENT ? c->file_key[k] : "",
                c->file_said[k] == CFG_FILE_AUTO ? " = \"auto\"" : "");
    }
    fprintf(f, "  %-59s %-*s %-*s %s\n", "DeepSpeed setting without an option", wv, "value", ws, "source",
            "what this trainer does");
    for (int k = CK_DSX; k < CK_NUM; k++)
        fprintf(f, "  %-59s %-*s %-*s %s\n", config_key_name(k), wv, val[k], ws, src[k], ds_extras()[k - CK_DSX].ours);
}

static inline void config_log_resolved(FILE *f, const TrainConfig *c) {
    cJSON *o = cJSON_CreateObject(), *s = cJSON_CreateObject();
    if (!o || !s) { cJSON_Delete(o); cJSON_Delete(s); return; }
    cJSON_AddStringToObject(o, "event", "config");
    if (c->ds_config_path) cJSON_AddStringToObject(o, "deepspeed", c->ds_config_path);
    else cJSON_AddNullToObject(o, "deepspeed");
    cJSON_AddNumberToObject(o, "world", c->world);
    for (int k = 0; k < CK_NUM; k++) {
        if (!config_reported(k)) continue;
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        double num;
        const char *str;
        int kind = config_value(c, k, &num, &str);
        if (k >= CK_DSX) {
            int t = ds_extras()[k - CK_DSX].type;
            num = ds_extra_value(c, k - CK_DSX);
            kind = t == DSX_T_BOOL ? CV_BOOL : CV_NUM;
        }
        char buf[40];
        if (kind == CV_FLOAT) { config_float_str(buf, sizeof(buf), num); num = strtod(buf, NULL); }
        if (kind == CV_STR && str) cJSON_AddStringToObject(e, "value", str);
        else if (kind == CV_BOOL) cJSON_AddBoolToObject(e, "value", num != 0.0);
        else if (kind == CV_NUM || kind == CV_FLOAT) cJSON_AddNumberToObject(e, "value", num);
        else cJSON_AddNullToObject(e, "value");
        const char *src = config_source_name(c, k);
        if (k >= CK_DSX && c->source[k] != CFG_SRC_FILE) src = "DeepSpeed default";
        cJSON_AddStringToObject(e, "source", src);
        if (c->file_said[k] != CFG_FILE_SILENT) {
            cJSON_AddStringToObject(e, "file_key", c->file_key[k]);
            cJSON_AddBoolToObject(e, "auto", c->file_said[k] == CFG_FILE_AUTO);
        }
        cJSON_AddItemToObject(s, config_key_name(k), e);
    }
    cJSON_AddItemToObject(o, "settings", s);
    char *text = cJSON_PrintUnformatted(o);
    if (text) fprintf(f, "%s\n", text);
    cJSON_free(text);
    cJSON_Delete(o);
}

#endif // CONFIG_H
