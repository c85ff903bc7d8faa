// planner.h: where the memory of training goes, per rank, before anything is allocated.
//
// Contract
//   - PlanInput describes a run: a model, a precision, an optimizer, a ZeRO stage, a world
//     size N (any N: 1024 is fine, nothing is allocated), a micro-batch B and sequence length
//     T, activation recompute (none, full every K layers, selective; full's checkpoints in host
//     memory or not), what is offloaded (host or NVMe), and the trainer
//     (PlanBackend: how its backend lays out activations and what workspace it needs; each
//     trainer hands over its own, so that this header knows no backend).
//   - The model is either
//       a GPT-2 shape (--model dNN or --layers/--channels/--heads/--vocab-size/--max-seq-len):
//         EXACT. The parameter count P is the padded flat layout the trainer allocates
//         (gpt2_layout_init with align N*ZERO_ALIGN; zero.h's slice arithmetic), buffers are
//         zero_init's, activations and workspace are the trainer's own (PlanBackend's functions:
//         cpu/workspace.h's for the CPU trainer, gpu/layout.h's for the GPU trainer).
//         planner_plan() for the trainer's configuration equals the bytes it allocates.
//       or a bare parameter count (--params 7e9): TEXTBOOK. Model states by the formulas
//         below on P as given; buffers unknown; activations by the Korthikanti et al. 2022
//         per-layer estimate when --layers, --channels and --heads are given, else unknown.
//   - planner_plan() fills a MemoryPlan: bytes per rank by kind (zero.h's MEM_* kinds: params,
//     grads, master, the optimizer's state arrays (adam_m, adam_v for AdamW), buffers,
//     activations, workspace), on the device and on the host.
//     Doubles hold exact integers (up to 2^53 bytes); textbook divisions by N may be fractional.
//   - planner_print_table() prints it for people (optionally beside what the trainer's ranks
//     really allocated); planner_print_json() as one JSON object (keys params, grads, master,
//     the state arrays by name, optimizer, model_states, buffers, activations, workspace, total:
//     device bytes per rank; "kinds" lists the memory kinds in order; "host" holds what lives in
//     host memory). Unknown amounts are null and not in total.
//   - planner_main(argc, argv, backend) is the command line (`train_gpt_cpu --plan ...`): GNU
//     long options, --help; a bad option prints one line naming it and returns non-zero. An
//     argument "--plan" is accepted and ignored, so a trainer can hand over its argv unchanged.
//     With --time it also predicts the step time (run/timemodel.h) on --hardware, and --json
//     gains step_ms and its breakdown; --calibrate LOG prints a description fitted to a run.
//
// Bytes per parameter (P parameters, N ranks; "K" = optimizer state bytes per parameter: the
// master weights and 4 bytes per state array of optimizer.h's table):
//                      params grads  master  state   K
//   fp32  AdamW           4     4      0     4+4     8   (the fp32 params are the master copy)
//   fp32  Lion            4     4      0     4       4
//   fp32  SGD+momentum    4     4      0     4       4
//   fp32  SGD             4     4      0     -       0
//   16-bit AdamW          2     2      4     4+4    12   (bf16 or fp16 mixed precision)
//   16-bit Lion           2     2      4     4       8
//   16-bit SGD+momentum   2     2      4     4       8
//   16-bit SGD            2     2      4     -       4
//   stage 0: (p+g+K)P   stage 1: pP + gP + KP/N   stage 2: pP + (g+K)P/N   stage 3: (p+g+K)P/N
//   With --offload-optimizer the K bytes (master, m, v) live in host memory, not on the device.
//
// Activations (elements from gpt2_activation_numels, the list the trainer allocates), as the
//   trainer's backend lays them out (PlanBackend.activation_bytes):
//   CPU trainer (cpu/workspace.h): fp32: 4 bytes each. 16-bit: the per-layer tensors (all but
//   the LayerNorm statistics) at 2 bytes for every layer plus two fp32 layer slots the CPU
//   kernels compute in; everything else (statistics, logits, losses, the backward's (B,T,...)
//   scratch) fp32.
//   GPU trainer (gpu/layout.h): every tensor at its element size (2 bytes in bf16/fp16, 4 in
//   fp32) but the fp32 statistics and losses, each tensor 256-byte aligned.
//   Recompute (gpt2.h; each backend lays out what it keeps and its scratch, and the planner
//   takes the bytes from it): full every K keeps ceil(L/K) layer inputs and the last layer's
//   output and K layers' worth of scratch; selective keeps each layer's qkv, residual2, fch and
//   output and one layer of the rest; the rest (final LayerNorm, logits, losses, backward
//   scratch) as without recompute. The GPU trainer's cpu_checkpointing keeps full's
//   checkpoints in host memory (two on the device, in transit).
//   Textbook, one layer, s = T, b = B, h = C, a = heads: 16-bit sbh(34 + 5as/h) bytes, of which
//   sbh(2 + as/h) are 1-byte dropout masks; in fp32 the 2-byte elements double: sbh(66 + 9as/h).
//   With full recompute the textbook keeps each checkpointed layer's input (2sbh in 16-bit, 4sbh
//   in fp32) plus K layers' full activations; with selective recompute (Korthikanti et al.) each
//   layer keeps all but the attention's s x s matrices: sbh 34 (16-bit), sbh 66 (fp32).
//
// Buffers (at the parameter precision): stages 2, 3: a gradient bucket
//   for the embeddings, the final LayerNorm and two for layers, and reduce-scatter receive
//   slices (one embedding slice, two layer slices); stage 3 also gather buffers of the same
//   unit sizes as the buckets. As zero_init allocates them.
// Workspace (16-bit runs of the CPU trainer, whose kernels compute in fp32): fp32 views of the
//   units being computed, fp32 gradient accumulators, bf16 matmul operands (cpu/workspace.h).
//   The GPU trainer's kernels read 16 bits directly: none.
//
// All functions static inline; no global state (getopt's own aside). C11 and C++.
#ifndef PLANNER_H
#define PLANNER_H

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "core/gpt2.h"
#include "zero.h"
#include "run/config.h"
#include "run/timemodel.h"

// What the planner needs from a trainer's backend: how it lays out the activations and how much
// workspace it needs beyond the model states, in bytes (dtype: ZC_*; threads: the CPU trainer's
// OpenMP threads per rank), and how the table names them. Each trainer hands over its own.
typedef struct {
    // device bytes of the activations; *host: those the trainer keeps in host memory instead
    double (*activation_bytes)(const GPT2Config *c, int B, int T, int dtype, GPT2Recompute r, double *host);
    double (*workspace_bytes)(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads);
    const char *activation_formula[ZC_NUM_DTYPES]; // the table's formula column, per precision
    const char *recompute_formula[ZC_NUM_DTYPES];  // ... with recompute
    const char *workspace_label[ZC_NUM_DTYPES];
    const char *workspace_formula;
    int default_precision;                       // the trainer's own default
    int unified;                                 // its compute memory is the host's: nothing is offloaded
} PlanBackend;

typedef struct {
    GPT2Config cfg;        // the GPT-2 shape (ignored for model states when params_count > 0)
    const char *model_name;// "d12" etc. or NULL, for the printout only
    double params_count;   // > 0: a bare parameter count P; model states by the textbook
    int shape_known;       // with params_count: cfg.num_layers/channels/num_heads are given
    int precision;         // ZC_F32, ZC_BF16, ZC_FP16
    int optimizer;         // optimizer.h's OPT_*
    int zero_stage;        // 0-3
    int world;             // N ranks
    int batch, seq_len;    // micro-batch B and sequence length T
    GPT2Recompute recompute; // activation recompute (gpt2.h): none, full every K layers, selective
    int offload_optimizer; // zero/location.h's LOC_*: where the master weights and optimizer state live (LOC_DEVICE: none)
    int offload_param;     // LOC_*: where stage 3's parameter shard lives
    int nvme_buffers;      // NVMe: buffer sets and the piece in elements (zero/store.h's ZeroOptions; 0: its defaults)
    size_t nvme_piece;
    int threads;           // the CPU trainer's OpenMP threads per rank (its matmul scratch);
                           // 0: as it picks them with all ranks on this machine (planner_threads)
    const PlanBackend *backend; // the trainer's activations and workspace (NULL: unknown)
} PlanInput;

typedef struct {
    PlanInput in;
    int exact;                     // 1: GPT-2 layout arithmetic; 0: textbook on a bare count
    double num_params;             // P as the model defines it
    double padded_params;          // P as laid out for N ranks (= num_params for a bare count)
    double bytes_param, bytes_grad, bytes_master; // per parameter
    double bytes_state[OPT_MAX_SLICES];           // per parameter, each of the optimizer's state arrays
    int where[MEM_KINDS];          // zero/location.h's LOC_*: where each kind lives
    double bytes[MEM_KINDS];       // bytes per rank of each kind, wherever it lives
    double device[MEM_KINDS];      // ... of those on the device (0 elsewhere); host[], nvme[] likewise
    double host[MEM_KINDS];
    double nvme[MEM_KINDS];
    int buffers_known, activations_known, workspace_known;
    double model_states, optimizer, total;          // device; total = states + known buffers/acts
    double host_optimizer, host_total;              // host memory: the offloaded states and the staging
    double nvme_optimizer, nvme_total;              // NVMe: the states kept in files
    double model_states_textbook;  // the stage formula on the unpadded P, all of it wherever it lives
    double act_textbook_layer;     // Korthikanti per layer, at the plan's precision (0 if unknown)
    double act_textbook;           // L layers' worth (full: inputs + K layers; selective: L x sbh 34)
} MemoryPlan;

// ----------------------------------------------------------------------------------------
// Inputs

// The trainer's defaults (config_defaults): a plan with no options describes what
// `train_gpt_cpu` (or `train_gpt`, in the precision it was built for) with no options would
// allocate on one rank.
static inline void planner_input_defaults(PlanInput *in, const PlanBackend *backend) {
    TrainConfig d;
    config_defaults(&d);
    memset(in, 0, sizeof(*in));
    in->cfg = d.model;
    in->backend = backend;
    in->precision = backend ? backend->default_precision : d.precision;
    in->optimizer = d.optimizer;
    in->zero_stage = d.zero_stage;
    in->world = 1;
    in->batch = d.batch;
    in->seq_len = d.seq_len;
    in->recompute = config_recompute(&d);
    in->nvme_buffers = d.nvme_buffers;
    in->nvme_piece = (size_t)d.nvme_buffer_size;
}

// The plan of a training run the trainer is about to make.
static inline PlanInput planner_input_from_train_config(const TrainConfig *c, int world, const PlanBackend *backend) {
    PlanInput in;
    planner_input_defaults(&in, backend);
    in.cfg = c->model;
    in.model_name = c->model_name;
    in.zero_stage = c->zero_stage;
    in.world = world;
    in.batch = c->batch;
    in.seq_len = c->seq_len;
    in.precision = c->precision;
    in.optimizer = c->optimizer;
    in.offload_optimizer = c->offload_optimizer;
    in.offload_param = c->offload_param;
    in.recompute = config_recompute(c);
    in.nvme_buffers = c->nvme_buffers;
    in.nvme_piece = (size_t)c->nvme_buffer_size;
    return in;
}

// The CPU trainer's OpenMP threads per rank, for `ranks_here` ranks on this machine: the user's
// OMP_NUM_THREADS if set, else the cores this process may run on, shared (train_gpt_cpu.c's
// share_cores uses it; the planner too, assuming all its ranks run here).
static inline int cpu_threads_per_rank(int ranks_here) {
#ifdef _OPENMP
    if (getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
    int t = omp_get_num_procs() / ranks_here;
#else
    int t = (int)(sysconf(_SC_NPROCESSORS_ONLN) / ranks_here);
#endif
    return t < 1 ? 1 : t;
}
static inline int planner_threads(const PlanInput *in) { return in->threads > 0 ? in->threads : cpu_threads_per_rank(in->world); }

// One message naming what is wrong with the input, or NULL.
static inline const char *planner_input_problem(const PlanInput *in) {
    if (in->precision < 0 || in->precision >= ZC_NUM_DTYPES) return "precision must be fp32, bf16 or fp16";
    if (in->optimizer < 0 || in->optimizer >= OPT_NUM) return "optimizer must be adamw, lion, sgd-momentum or sgd";
    if (in->zero_stage < 0 || in->zero_stage > 3) return "zero stage must be 0, 1, 2 or 3";
    if (in->world < 1) return "world size must be at least 1";
    if (in->batch < 1 || in->seq_len < 1) return "batch and sequence length must be positive";
    if (in->offload_optimizer != LOC_DEVICE && in->zero_stage == 0)
        return "--offload-optimizer needs --zero-stage 1, 2 or 3 (ZeRO-Offload moves the state a stage partitions)";
    if (in->offload_param != LOC_DEVICE && in->zero_stage != 3)
        return "--offload-param needs --zero-stage 3 (only stage 3 partitions the parameters)";
    if (in->params_count != in->params_count || in->params_count < 0) return "the parameter count must be positive";
    if (in->params_count > 0) {
        if (in->shape_known) {
            if (in->cfg.num_layers < 1 || in->cfg.channels < 1 || in->cfg.num_heads < 1)
                return "layers, channels and heads must be positive";
            if (in->cfg.channels % in->cfg.num_heads) return "channels must be a multiple of heads";
        }
        return NULL;
    }
    const char *why = gpt2_config_problem(&in->cfg);
    if (why) return why;
    if (in->seq_len > in->cfg.max_seq_len) return "the sequence length exceeds the model's max_seq_len";
    return NULL;
}

// ----------------------------------------------------------------------------------------
// The pieces

// Bytes per parameter of each model state (see the table at the top): the optimizer's state
// arrays come from optimizer.h's table.
static inline void planner_bytes_per_param(int precision, int optimizer, double *p, double *g, double *master,
                                           double state[OPT_MAX_SLICES]) {
    int mixed = precision != ZC_F32;
    *p = *g = mixed ? 2.0 : 4.0;
    *master = mixed ? 4.0 : 0.0;
    for (int k = 0; k < OPT_MAX_SLICES; k++) state[k] = k < optimizer_info(optimizer)->slices ? 4.0 : 0.0;
}
static inline double planner_state_bytes(const MemoryPlan *p) {
    double K = 0.0;
    for (int k = 0; k < OPT_MAX_SLICES; k++) K += p->bytes_state[k];
    return K;
}

// Korthikanti et al. 2022, one transformer layer without recompute: 16-bit elements
// 16sbh + 2as^2b (at elem_bytes each) and 1-byte dropout masks 2sbh + as^2b.
// elem_bytes = 2 gives sbh(34 + 5as/h); 4 gives sbh(66 + 9as/h).
static inline double planner_textbook_layer_bytes(double s, double b, double h, double a, double elem_bytes) {
    return elem_bytes * (16.0 * s * b * h + 2.0 * a * s * s * b) + (2.0 * s * b * h + a * s * s * b);
}

// The textbook model-state formula for a stage (bytes per parameter p, g and K; P, N).
static inline double planner_textbook_states(int stage, double p, double g, double K, double P, double N) {
    switch (stage) {
    case 0: return (p + g + K) * P;
    case 1: return p * P + g * P + K * P / N;
    case 2: return p * P + (g + K) * P / N;
    default: return (p + g + K) * P / N;
    }
}

// ----------------------------------------------------------------------------------------
// The plan

// Fills *out. Returns 0, or -1 when the input is unusable (planner_input_problem says why).
static inline int planner_plan(const PlanInput *in, MemoryPlan *out) {
    memset(out, 0, sizeof(*out));
    if (planner_input_problem(in)) return -1;
    MemoryPlan *p = out;
    p->in = *in;
    planner_bytes_per_param(in->precision, in->optimizer, &p->bytes_param, &p->bytes_grad, &p->bytes_master,
                            p->bytes_state);
    int S = in->zero_stage;
    // where each kind lives: as zero.h places them for this trainer (a bare count models a GPU)
    ZeroOptions zo = zero_options(S, in->precision, in->optimizer);
    zo.offload_optimizer = in->offload_optimizer; zo.offload_param = in->offload_param;
    zo.nvme_buffers = in->nvme_buffers; zo.nvme_piece = in->nvme_piece;
    int unified = in->params_count > 0 || !in->backend ? 0 : in->backend->unified;
    zero_placement(&zo, unified, p->where);
    if (p->where[MEM_MASTER] != LOC_DEVICE || p->where[MEM_PARAMS] != LOC_DEVICE)
        p->bytes_master = 4.0; // a streamed update keeps fp32 weights even in fp32
    double N = in->world, K = p->bytes_master + planner_state_bytes(p);
    double elem = in->precision == ZC_F32 ? 4.0 : 2.0;
    double *dev = p->bytes;
    if (in->params_count > 0) { // textbook on a bare count
        double P = in->params_count;
        p->exact = 0;
        p->num_params = p->padded_params = P;
        dev[MEM_PARAMS] = p->bytes_param * (S == 3 ? P / N : P);
        dev[MEM_GRADS] = p->bytes_grad * (S >= 2 ? P / N : P);
        double opt_elems = S == 0 ? P : P / N;
        dev[MEM_MASTER] = p->bytes_master * opt_elems;
        for (int k = 0; k < OPT_MAX_SLICES; k++) dev[MEM_STATE + k] = p->bytes_state[k] * opt_elems;
        p->buffers_known = 0;
        p->activations_known = in->shape_known;
    } else { // exact: the trainer's layout, zero.h's partition
        Zero z;
        memset(&z, 0, sizeof(z));
        z.stage = S; z.rank = 0; z.world = in->world;
        z.esize = zc_dtype_size(in->precision); z.nstate = optimizer_info(in->optimizer)->slices;
        memcpy(z.where, p->where, sizeof(z.where));
        gpt2_layout_init(&z.lay, &in->cfg, (size_t)in->world * ZERO_ALIGN);
        zero_store_shape(&z.st, &z.lay, z.where, 0, in->world, z.esize, z.nstate);
        zero_store_pieces(&z.st, &zo);
        double full = (double)z.lay.num_flat, shard = (double)zero_shard_size(&z);
        p->exact = 1;
        p->num_params = (double)z.lay.num_params;
        p->padded_params = full;
        dev[MEM_PARAMS] = p->bytes_param * (S == 3 ? shard : full);
        dev[MEM_GRADS] = p->bytes_grad * (S >= 2 ? shard : full);
        double opt_elems = S == 0 ? full : shard;
        dev[MEM_MASTER] = p->bytes_master * opt_elems;
        for (int k = 0; k < OPT_MAX_SLICES; k++) dev[MEM_STATE + k] = p->bytes_state[k] * opt_elems;
        for (int k = MEM_PARAMS; k < MEM_BUFFERS; k++) // a file on NVMe: its slices padded (zero/store.h)
            if (p->where[k] == LOC_NVME && dev[k] > 0) dev[k] = (double)zero_nvme_file_bytes(&z.st, k);
        dev[MEM_BUFFERS] = p->bytes_param * (double)zero_buffer_floats(&z, unified);
        dev[MEM_STAGING] = (double)zero_staging_bytes(&z.st, unified);
        p->buffers_known = 1;
        if (in->backend) { // the trainer's own layout
            dev[MEM_ACTIVATIONS] = in->backend->activation_bytes(&in->cfg, in->batch, in->seq_len, in->precision,
                                                                 in->recompute, &dev[MEM_HOST_ACTIVATIONS]);
            dev[MEM_WORKSPACE] = in->backend->workspace_bytes(&z.lay, &in->cfg, in->batch, in->seq_len, in->precision,
                                                              planner_threads(in));
            p->activations_known = p->workspace_known = 1;
        } // else no trainer named: its workspace is unknown, the activations the textbook's (below)
    }
    p->model_states_textbook = planner_textbook_states(S, p->bytes_param, p->bytes_grad, K, p->num_params, N);
    if (p->activations_known) {
        double s = in->seq_len, b = in->batch, h = in->cfg.channels, a = in->cfg.num_heads, L = in->cfg.num_layers;
        p->act_textbook_layer = planner_textbook_layer_bytes(s, b, h, a, elem);
        double K = gpt2_recompute_every(in->recompute);
        if (in->recompute.mode == RECOMPUTE_FULL)
            p->act_textbook = ceil(L / K) * elem * s * b * h + K * p->act_textbook_layer;
        else if (in->recompute.mode == RECOMPUTE_SELECTIVE)
            p->act_textbook = L * planner_textbook_layer_bytes(s, b, h, 0.0, elem);
        else
            p->act_textbook = L * p->act_textbook_layer;
        if (!p->exact || !in->backend) dev[MEM_ACTIVATIONS] = p->act_textbook;
    }
    if (p->exact && !in->backend) p->activations_known = 1; // the textbook's, below
    for (int k = 0; k < MEM_KINDS; k++) {
        double *at = p->where[k] == LOC_HOST ? p->host : p->where[k] == LOC_NVME ? p->nvme : p->device;
        at[k] = dev[k];
    }
    p->optimizer = p->host_optimizer = p->nvme_optimizer = 0.0;
    for (int k = MEM_MASTER; k < MEM_BUFFERS; k++) {
        p->optimizer += p->device[k];
        p->host_optimizer += p->host[k];
        p->nvme_optimizer += p->nvme[k];
    }
    p->model_states = p->device[MEM_PARAMS] + p->device[MEM_GRADS] + p->optimizer;
    p->total = p->host_total = p->nvme_total = 0.0;
    for (int k = 0; k < MEM_KINDS; k++) { p->total += p->device[k]; p->host_total += p->host[k]; p->nvme_total += p->nvme[k]; }
    return 0;
}

// ----------------------------------------------------------------------------------------
// Printing

// "off", "full, every layer", "full, every 2 layers, checkpoints in host memory", "selective".
static inline const char *planner_recompute_name(char *buf, size_t n, GPT2Recompute r) {
    int K = gpt2_recompute_every(r);
    if (r.mode != RECOMPUTE_FULL) snprintf(buf, n, "%s", r.mode == RECOMPUTE_SELECTIVE ? "selective" : "off");
    else if (K == 1) snprintf(buf, n, "full, every layer%s", r.host ? ", checkpoints in host memory" : "");
    else snprintf(buf, n, "full, every %d layers%s", K, r.host ? ", checkpoints in host memory" : "");
    return buf;
}
// The textbook's activations of L layers with this recompute.
static inline const char *planner_textbook_formula(GPT2Recompute r, int precision) {
    int fp32 = precision == ZC_F32;
    if (r.mode == RECOMPUTE_SELECTIVE) return fp32 ? "L sbh 66" : "L sbh 34";
    if (r.mode == RECOMPUTE_FULL && gpt2_recompute_every(r) > 1) return fp32 ? "4sbh L/K + K layers" : "2sbh L/K + K layers";
    if (r.mode == RECOMPUTE_FULL) return fp32 ? "4sbhL + one layer" : "2sbhL + one layer";
    return fp32 ? "L sbh(66+9as/h)" : "L sbh(34+5as/h)";
}

// 1234567 -> "1,234,567" (whole bytes; a fractional textbook value is rounded for the table).
static inline const char *planner_commas(char *buf, size_t n, double v) {
    char digits[64];
    snprintf(digits, sizeof(digits), "%.0f", v < 0 ? -v : v);
    size_t len = strlen(digits), j = 0;
    if (v < 0 && j + 1 < n) buf[j++] = '-';
    for (size_t i = 0; i < len && j + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && j + 1 < n) buf[j++] = ',';
        if (j + 1 < n) buf[j++] = digits[i];
    }
    buf[j] = 0;
    return buf;
}

// Decimal units: 1 kB = 1e3 bytes, 1 MB = 1e6, 1 GB = 1e9, 1 TB = 1e12.
static inline const char *planner_human(char *buf, size_t n, double v) {
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    double x = v;
    while (fabs(x) >= 1000.0 && u < 5) { x /= 1000.0; u++; }
    if (u == 0) snprintf(buf, n, "%.0f B", x);
    else snprintf(buf, n, "%.2f %s", x, units[u]);
    return buf;
}

// "2P", "12P/N", "0".
static inline const char *planner_term(char *buf, size_t n, double k, int partitioned) {
    if (k == 0.0) snprintf(buf, n, "0");
    else snprintf(buf, n, "%gP%s", k, partitioned ? "/N" : "");
    return buf;
}

// The stage's textbook formula with this precision's numbers, e.g. "2P + 2P + 12P/N".
static inline const char *planner_states_formula(char *buf, size_t n, const MemoryPlan *p) {
    double a = p->bytes_param, g = p->bytes_grad, K = p->bytes_master + planner_state_bytes(p);
    switch (p->in.zero_stage) {
    case 0: snprintf(buf, n, "(%g + %g + %g)P = %gP", a, g, K, a + g + K); break;
    case 1: snprintf(buf, n, "%gP + %gP + %gP/N", a, g, K); break;
    case 2: snprintf(buf, n, "%gP + (%g + %g)P/N", a, g, K); break;
    default: snprintf(buf, n, "(%g + %g + %g)P/N", a, g, K); break;
    }
    return buf;
}

static inline const char *planner_mode_name(int precision) {
    return precision == ZC_F32 ? "fp32" : precision == ZC_BF16 ? "bf16 mixed precision" : "fp16 mixed precision";
}

// One row: label, formula, where it lives ("" for a total), bytes (NULL = unknown), and with
// `actual` what the ranks allocated of the kinds in `kinds` (a bit mask over zero.h's MEM_* kinds;
// 0: nothing to compare).
static inline void planner_row(FILE *f, const char *label, const char *formula, const char *where, const double *bytes,
                               const double *actual, int actual_ranks, unsigned kinds) {
    char b1[64], b2[32];
    if (bytes) fprintf(f, "  %-38s %-24s %-6s %19s %11s", label, formula, where, planner_commas(b1, sizeof(b1), *bytes),
                       planner_human(b2, sizeof(b2), *bytes));
    else fprintf(f, "  %-38s %-24s %-6s %19s %11s", label, formula, where, "unknown", "-");
    if (actual && kinds) {
        int mismatch = -1;
        double got0 = 0.0;
        for (int q = 0; q < actual_ranks; q++) {
            double got = 0.0;
            for (int k = 0; k < MEM_KINDS; k++) if (kinds & (1u << k)) got += actual[q * MEM_KINDS + k];
            if (q == 0) got0 = got;
            if (mismatch < 0 && (!bytes || got != *bytes)) mismatch = q;
        }
        fprintf(f, " %19s  %s", planner_commas(b1, sizeof(b1), got0),
                mismatch < 0 ? (actual_ranks > 1 ? "= all ranks" : "=") : "DIFFERS");
        if (mismatch >= 0 && actual_ranks > 1) fprintf(f, " (rank %d)", mismatch);
    }
    fprintf(f, "\n");
}
#define PLANNER_KIND(k) (1u << (k))

// The table. actual: NULL, or actual_ranks x MEM_KINDS bytes the ranks really allocated
// (rank-major, zero.h's kinds, as report_memory gathers them): printed beside the plan with
// "=" where every rank matches.
static inline void planner_print_table(FILE *f, const MemoryPlan *p, const double *actual, int actual_ranks) {
    const PlanInput *in = &p->in;
    const GPT2Config *c = &in->cfg;
    char b1[64], b2[64], fm[64];
    const char *pn = zc_dtype_names[in->precision];
    int S = in->zero_stage;
    fprintf(f, "memory plan per rank (1 GB = 1e9 bytes; P = parameters, N = ranks)\n");
    if (p->exact) {
        fprintf(f, "  model     GPT-2%s%s: L=%d C=%d NH=%d V=%d (Vp %d) maxT=%d\n", in->model_name ? " " : "",
                in->model_name ? in->model_name : "", c->num_layers, c->channels, c->num_heads, c->vocab_size,
                c->padded_vocab_size, c->max_seq_len);
        fprintf(f, "  P         %s as laid out (units padded to N*%d elements), %s real parameters\n",
                planner_commas(b1, sizeof(b1), p->padded_params), ZERO_ALIGN, planner_commas(b2, sizeof(b2), p->num_params));
    } else {
        fprintf(f, "  model     a bare parameter count: textbook formulas");
        if (in->shape_known) fprintf(f, "; activations from L=%d h=%d a=%d", c->num_layers, c->channels, c->num_heads);
        double v = p->num_params;
        fprintf(f, "\n  P         %s parameters (%.2f %s)\n", planner_commas(b1, sizeof(b1), v),
                v >= 1e12 ? v / 1e12 : v >= 1e9 ? v / 1e9 : v >= 1e6 ? v / 1e6 : v / 1e3,
                v >= 1e12 ? "trillion" : v >= 1e9 ? "billion" : v >= 1e6 ? "million" : "thousand");
    }
    fprintf(f, "  training  %s, %s, ZeRO stage %d, N = %d ranks\n", planner_mode_name(in->precision),
            in->optimizer == OPT_ADAMW ? "AdamW" : in->optimizer == OPT_LION ? "Lion"
            : in->optimizer == OPT_SGD_MOMENTUM ? "SGD with momentum" : "plain SGD",
            S, in->world);
    char rn[80];
    fprintf(f, "            micro-batch B = %d, T = %d, activation recompute %s, optimizer state on the %s, "
               "parameters on the %s\n", in->batch, in->seq_len, planner_recompute_name(rn, sizeof(rn), in->recompute),
            zero_location_names[p->where[MEM_MASTER]], zero_location_names[p->where[MEM_PARAMS]]);
    fprintf(f, "\n  %-38s %-24s %-6s %19s %11s", "per rank", "formula", "where", "bytes", "size");
    if (actual) fprintf(f, " %19s", actual_ranks > 1 ? "allocated (rank 0)" : "allocated");
    fprintf(f, "\n");
    const double *d = p->bytes;
    const double *A = actual;
    int R = actual_ranks;
    double K = p->bytes_master + planner_state_bytes(p);
    unsigned OPT = PLANNER_KIND(MEM_MASTER);
    for (int k = 0; k < OPT_MAX_SLICES; k++) OPT |= PLANNER_KIND(MEM_STATE + k);
    const OptimizerInfo *oi = optimizer_info(in->optimizer);
#define W(k) zero_location_names[p->where[k]]
    char lab[80];
    snprintf(lab, sizeof(lab), "parameters (%s)", pn);
    planner_row(f, lab, planner_term(fm, sizeof(fm), p->bytes_param, S == 3), W(MEM_PARAMS), &d[MEM_PARAMS], A, R,
                PLANNER_KIND(MEM_PARAMS));
    snprintf(lab, sizeof(lab), "gradients (%s)", pn);
    planner_row(f, lab, planner_term(fm, sizeof(fm), p->bytes_grad, S >= 2), W(MEM_GRADS), &d[MEM_GRADS], A, R,
                PLANNER_KIND(MEM_GRADS));
    planner_row(f, p->bytes_master == 0.0 ? "master weights (none: params are fp32)" : "optimizer: master weights (fp32)",
                planner_term(fm, sizeof(fm), p->bytes_master, S > 0), W(MEM_MASTER), &d[MEM_MASTER], A, R,
                PLANNER_KIND(MEM_MASTER));
    if (oi->slices == 0) fprintf(f, "  %-38s\n", "optimizer: (plain SGD keeps no state)");
    for (int k = 0; k < oi->slices; k++) {
        snprintf(lab, sizeof(lab), "optimizer: %s (fp32)", oi->slice_labels[k]);
        planner_row(f, lab, planner_term(fm, sizeof(fm), p->bytes_state[k], S > 0), W(MEM_STATE + k), &d[MEM_STATE + k],
                    A, R, PLANNER_KIND(MEM_STATE + k));
    }
    double opt_all = p->optimizer + p->host_optimizer + p->nvme_optimizer, states = d[MEM_PARAMS] + d[MEM_GRADS] + opt_all;
    planner_row(f, "= optimizer state", planner_term(fm, sizeof(fm), K, S > 0), W(MEM_MASTER), &opt_all, A, R, OPT);
    planner_row(f, "= MODEL STATES", planner_states_formula(fm, sizeof(fm), p), "", &states, A, R,
                PLANNER_KIND(MEM_PARAMS) | PLANNER_KIND(MEM_GRADS) | OPT);
    planner_row(f, !p->buffers_known ? "ZeRO buffers"
                   : S == 3 ? "ZeRO buffers (buckets, recv, gathers)"
                   : S == 2 ? "ZeRO buffers (buckets, recv slices)" : "ZeRO buffers (none below stage 2)",
                p->buffers_known ? "zero_init's units" : "not modelled", W(MEM_BUFFERS),
                p->buffers_known ? &d[MEM_BUFFERS] : NULL, A, R, PLANNER_KIND(MEM_BUFFERS));
    if (p->bytes[MEM_STAGING] > 0.0)
        planner_row(f, p->where[MEM_MASTER] == LOC_NVME || p->where[MEM_PARAMS] == LOC_NVME
                           ? "staging (offload, NVMe buffer sets)" : "staging (offload: 2+2 pieces)",
                    "zero_staging_bytes", W(MEM_STAGING), &d[MEM_STAGING], A, R, PLANNER_KIND(MEM_STAGING));
    int rc = in->recompute.mode != RECOMPUTE_NONE;
    if (p->exact && rc) snprintf(lab, sizeof(lab), "activations (recompute %s)", gpt2_recompute_names[in->recompute.mode]);
    else snprintf(lab, sizeof(lab), "activations (%s%s)", p->exact ? "this trainer" : "textbook", rc ? ", recompute" : "");
    planner_row(f, lab, p->exact && in->backend ? (rc ? in->backend->recompute_formula : in->backend->activation_formula)[in->precision]
                 : planner_textbook_formula(in->recompute, in->precision), W(MEM_ACTIVATIONS),
                p->activations_known ? &d[MEM_ACTIVATIONS] : NULL, A, R, PLANNER_KIND(MEM_ACTIVATIONS));
    if (d[MEM_HOST_ACTIVATIONS] > 0.0) // cpu_checkpointing: the kept layer inputs, pinned
        planner_row(f, "activations: checkpoints (pinned)", "cpu_checkpointing", W(MEM_HOST_ACTIVATIONS),
                    &d[MEM_HOST_ACTIVATIONS], A, R, PLANNER_KIND(MEM_HOST_ACTIVATIONS));
    planner_row(f, in->backend ? in->backend->workspace_label[in->precision] : "workspace",
                p->workspace_known ? in->backend->workspace_formula : "not modelled", W(MEM_WORKSPACE),
                p->workspace_known ? &d[MEM_WORKSPACE] : NULL, A, R, PLANNER_KIND(MEM_WORKSPACE));
#undef W
    const double *tot[LOC_KINDS] = {&p->total, &p->host_total, &p->nvme_total};
    const char *tlab[LOC_KINDS] = {"= TOTAL on the device", "= TOTAL in host memory", "= TOTAL on NVMe"};
    for (int loc = 0; loc < LOC_KINDS; loc++) {
        unsigned kinds = 0;
        for (int k = 0; k < MEM_KINDS; k++) if (p->where[k] == loc) kinds |= 1u << k;
        if (loc != LOC_DEVICE && *tot[loc] == 0.0) continue;
        snprintf(lab, sizeof(lab), "%s%s", tlab[loc],
                 loc == LOC_DEVICE && !(p->buffers_known && p->activations_known && p->workspace_known) ? " (known parts)" : "");
        planner_row(f, lab, "", zero_location_names[loc], tot[loc], A, R, kinds);
    }
    fprintf(f, "\n  textbook, for comparison\n");
    planner_row(f, p->exact ? "model states, unpadded P" : "model states (all of them)",
                planner_states_formula(fm, sizeof(fm), p), "", &p->model_states_textbook, NULL, 0, 0);
    if (p->activations_known) {
        planner_row(f, "activations of one layer", in->precision == ZC_F32 ? "sbh(66 + 9as/h)" : "sbh(34 + 5as/h)", "",
                    &p->act_textbook_layer, NULL, 0, 0);
        planner_row(f, in->recompute.mode == RECOMPUTE_FULL ? "activations, kept inputs + K layers"
                       : in->recompute.mode == RECOMPUTE_SELECTIVE ? "activations, L layers less attention's"
                                                                   : "activations, L layers",
                    rc ? planner_textbook_formula(in->recompute, in->precision) : "L x the above",
                    "", &p->act_textbook, NULL, 0, 0);
    } else {
        fprintf(f, "  activations: unknown (give --layers, --channels and --heads with --params)\n");
    }
    if (actual) {
        int all = 1;
        for (int q = 0; q < actual_ranks; q++)
            for (int k = 0; k < MEM_KINDS; k++) all = all && actual[q * MEM_KINDS + k] == d[k];
        fprintf(f, "  plan vs allocated: %s\n", all ? "every kind on every rank matches exactly" : "MISMATCH (see DIFFERS)");
    }
}

// A byte count in JSON: an integer when it is one, null when unknown.
static inline void planner_json_num(FILE *f, const char *key, double v, int known) {
    if (!known) fprintf(f, "\"%s\":null", key);
    else if (v == floor(v) && fabs(v) < 9.007199254740992e15) fprintf(f, "\"%s\":%.0f", key, v);
    else fprintf(f, "\"%s\":%.6f", key, v);
}

// more: members to add to the object (the time model's), or NULL.
static inline void planner_print_json(FILE *f, const MemoryPlan *p, const char *more) {
    const PlanInput *in = &p->in;
    const GPT2Config *c = &in->cfg;
    fprintf(f, "{\"input\":{\"model\":");
    if (!p->exact) fprintf(f, "\"params\"");
    else if (in->model_name) fprintf(f, "\"%s\"", in->model_name);
    else fprintf(f, "\"gpt2\"");
    if (p->exact || in->shape_known)
        fprintf(f, ",\"num_layers\":%d,\"channels\":%d,\"num_heads\":%d", c->num_layers, c->channels, c->num_heads);
    if (p->exact)
        fprintf(f, ",\"vocab_size\":%d,\"padded_vocab_size\":%d,\"max_seq_len\":%d", c->vocab_size,
                c->padded_vocab_size, c->max_seq_len);
    fprintf(f, ",\"precision\":\"%s\",\"optimizer\":\"%s\",\"zero_stage\":%d,\"world\":%d,\"batch\":%d,\"seq_len\":%d,"
               "\"recompute\":\"%s\",\"recompute_every\":%d,\"cpu_checkpointing\":%s,"
               "\"offload_optimizer\":\"%s\",\"offload_param\":\"%s\"},",
            zc_dtype_names[in->precision], optimizer_info(in->optimizer)->name, in->zero_stage, in->world,
            in->batch, in->seq_len, gpt2_recompute_names[in->recompute.mode], gpt2_recompute_every(in->recompute),
            in->recompute.host ? "true" : "false", zero_location_names[in->offload_optimizer],
            zero_location_names[in->offload_param]);
    fprintf(f, "\"exact\":%s,", p->exact ? "true" : "false");
    planner_json_num(f, "num_params", p->num_params, 1); fputc(',', f);
    planner_json_num(f, "padded_params", p->padded_params, 1); fputc(',', f);
    const OptimizerInfo *oi = optimizer_info(in->optimizer);
    fprintf(f, "\"bytes_per_param\":{\"params\":%g,\"grads\":%g,\"master\":%g", p->bytes_param, p->bytes_grad,
            p->bytes_master);
    for (int k = 0; k < oi->slices; k++) fprintf(f, ",\"%s\":%g", oi->slice_names[k], p->bytes_state[k]);
    fprintf(f, ",\"K\":%g},\"kinds\":[", p->bytes_master + planner_state_bytes(p));
    for (int k = 0, first = 1; k < MEM_KINDS; k++)
        if (zero_memory_name(in->optimizer, k)) { fprintf(f, "%s\"%s\"", first ? "" : ",", zero_memory_name(in->optimizer, k)); first = 0; }
    fprintf(f, "],");
    fprintf(f, "\"where\":{");
    for (int k = 0, first = 1; k < MEM_KINDS; k++)
        if (zero_memory_name(in->optimizer, k)) {
            fprintf(f, "%s\"%s\":\"%s\"", first ? "" : ",", zero_memory_name(in->optimizer, k), zero_location_names[p->where[k]]);
            first = 0;
        }
    fprintf(f, "},");
    for (int k = 0; k < MEM_KINDS; k++) { // each kind's bytes, wherever it lives
        if (!zero_memory_name(in->optimizer, k)) continue;
        int known = k == MEM_BUFFERS || k == MEM_STAGING ? p->buffers_known : k == MEM_WORKSPACE ? p->workspace_known
                    : k == MEM_ACTIVATIONS || k == MEM_HOST_ACTIVATIONS ? p->activations_known : 1;
        planner_json_num(f, zero_memory_name(in->optimizer, k), p->bytes[k], known);
        fputc(',', f);
    }
    double opt_all = p->optimizer + p->host_optimizer + p->nvme_optimizer; // wherever it lives
    planner_json_num(f, "optimizer", opt_all, 1); fputc(',', f);
    planner_json_num(f, "model_states", p->bytes[MEM_PARAMS] + p->bytes[MEM_GRADS] + opt_all, 1);
    fputc(',', f);
    planner_json_num(f, "device", p->total, 1); fputc(',', f); // by where the bytes live (known parts)
    planner_json_num(f, "host", p->host_total, 1); fputc(',', f);
    planner_json_num(f, "nvme", p->nvme_total, 1); fputc(',', f);
    planner_json_num(f, "total", p->total + p->host_total + p->nvme_total, 1); fputc(',', f);
    planner_json_num(f, "model_states_textbook", p->model_states_textbook, 1); fputc(',', f);
    planner_json_num(f, "activations_textbook_per_layer", p->act_textbook_layer, p->activations_known); fputc(',', f);
    planner_json_num(f, "activations_textbook", p->act_textbook, p->activations_known);
    const char *unknown[3] = {p->buffers_known ? NULL : "buffers", p->workspace_known ? NULL : "workspace",
                              p->activations_known ? NULL : "activations"};
    fprintf(f, ",\"total_excludes\":[");
    for (int i = 0, first = 1; i < 3; i++)
        if (unknown[i]) { fprintf(f, "%s\"%s\"", first ? "" : ",", unknown[i]); first = 0; }
    fprintf(f, "]%s%s}\n", more ? "," : "", more ? more : "");
}

// ----------------------------------------------------------------------------------------
// --fit BYTES: the largest model of a ladder of GPT-2-shaped models (GPT-2's four, then the
// GPT-3 paper's sizes, which are the same architecture scaled, and a few between) whose bytes on
// the device fit, at the plan's precision, optimizer, stage, world, offload, batch and sequence.

typedef struct { const char *name; int L, C, NH; } PlanShape;
static const PlanShape planner_ladder[] = {
    {"d12 (GPT-2 124M)", 12, 768, 12},   {"d24 (GPT-2 350M)", 24, 1024, 16},   {"d36 (GPT-2 774M)", 36, 1280, 20},
    {"d48 (GPT-2 1.5B)", 48, 1600, 25},  {"GPT-3 2.7B", 32, 2560, 32},          {"GPT-3 6.7B", 32, 4096, 32},
    {"GPT-3 13B", 40, 5120, 40},         {"20B (L44 C6144)", 44, 6144, 48},     {"30B (L48 C7168)", 48, 7168, 56},
    {"40B (L48 C8192)", 48, 8192, 64},   {"65B (L80 C8192)", 80, 8192, 64},     {"100B (L80 C10240)", 80, 10240, 80},
    {"GPT-3 175B", 96, 12288, 96}};
static inline int planner_fit(const PlanInput *base, double bytes, int json) {
    int n = (int)(sizeof(planner_ladder) / sizeof(planner_ladder[0])), best = -1;
    if (!json)
        printf("models that fit in %.3g GB on the device per rank (%s, %s, ZeRO-%d, N = %d, optimizer on the %s, "
               "parameters on the %s, B = %d, T = %d):\n  %-22s %16s %16s %16s  %s\n", bytes / 1e9,
               planner_mode_name(base->precision), optimizer_info(base->optimizer)->name, base->zero_stage, base->world,
               zero_location_names[base->offload_optimizer], zero_location_names[base->offload_param], base->batch,
               base->seq_len, "model", "parameters", "device bytes", "host bytes", "fits");
    else printf("{\"fit_bytes\":%.0f,\"models\":[", bytes);
    for (int i = 0; i < n; i++) {
        PlanInput in = *base;
        in.params_count = 0;
        in.model_name = planner_ladder[i].name;
        in.cfg.num_layers = planner_ladder[i].L; in.cfg.channels = planner_ladder[i].C; in.cfg.num_heads = planner_ladder[i].NH;
        in.cfg.vocab_size = 50257; in.cfg.padded_vocab_size = 50304;
        in.cfg.max_seq_len = in.seq_len > 1024 ? in.seq_len : 1024;
        MemoryPlan p;
        if (planner_plan(&in, &p)) continue;
        int fits = p.total <= bytes;
        if (fits) best = i;
        if (json) printf("%s{\"model\":\"%s\",\"num_params\":%.0f,\"device\":%.0f,\"host\":%.0f,\"fits\":%s}", i ? "," : "",
                         planner_ladder[i].name, p.num_params, p.total, p.host_total, fits ? "true" : "false");
        else printf("  %-22s %16.0f %16.0f %16.0f  %s\n", planner_ladder[i].name, p.num_params, p.total, p.host_total,
                    fits ? "yes" : "no");
    }
    if (json) printf("],\"largest\":%s%s%s}\n", best < 0 ? "null" : "\"", best < 0 ? "" : planner_ladder[best].name,
                     best < 0 ? "" : "\"");
    else printf("largest that fits: %s\n", best < 0 ? "none" : planner_ladder[best].name);
    return 0;
}

// ----------------------------------------------------------------------------------------
// The command line

static inline void planner_help(FILE *f, const char *prog, const PlanBackend *backend) {
    PlanInput d;
    planner_input_defaults(&d, backend);
    fprintf(f,
            "usage: %s --plan [options]    print each rank's memory for a training run; allocates nothing\n\n"
            "model (one of; default: the trainer's default model, L=%d C=%d NH=%d):\n"
            "  --model NAME          d12 (124M), d24 (350M), d36 (774M), d48 (1558M): exact, the trainer's layout\n"
            "  --layers N --channels N --heads N --vocab-size N --max-seq-len N\n"
            "                        an explicit GPT-2 shape (unset ones take the trainer's defaults): exact\n"
            "  --params P            a bare parameter count (7e9, 124M, 1.5B): textbook formulas; add\n"
            "                        --layers, --channels and --heads for a textbook activation estimate\n"
            "run:\n"
            "  --precision P         fp32 | bf16 | fp16 (16-bit = mixed precision, fp32 master weights) (default %s)\n"
            "  --optimizer O         adamw | lion | sgd-momentum | sgd (default adamw)\n"
            "  --zero-stage S        0-3 (default %d)\n"
            "  --world N             ranks, any number (default 1)\n"
            "  --batch B             micro-batch per rank (default %d)\n"
            "  --seq-len T           tokens per sequence (default %d; at most --max-seq-len for GPT-2 shapes)\n"
            "  --recompute R         activation recompute: none | full (keep each layer's input, recompute\n"
            "                        the layer in its backward) | selective (keep the matmuls' outputs)\n"
            "  --recompute-every K   full: keep every K-th layer's input, recompute K layers at a time\n"
            "  --cpu-checkpointing   full: the GPU trainer keeps the inputs in host memory\n"
            "  --offload-optimizer D none | cpu | nvme: the master weights and optimizer state off the device\n"
            "                        (stages 1-3; a bare --params count models a GPU, the trainers as they run)\n"
            "  --offload-param D     none | cpu | nvme: stage 3's parameter shard off the device\n"
            "  --nvme-buffers N      with nvme: host buffer sets the update streams through (default %d)\n"
            "  --nvme-buffer-size N  with nvme: elements per streamed piece (default %zu)\n"
            "  --threads N           the CPU trainer's OpenMP threads per rank, which size its bf16 matmul\n"
            "                        scratch (default: OMP_NUM_THREADS, else this machine's cores / --world)\n"
            "step time (run/timemodel.h; GPT-2 shapes):\n"
            "  --time                predict the step time from the schedule zero.h runs\n"
            "  --hardware H          a100-80gb-sxm | h100-80gb-sxm | this-machine | FILE.json (default this-machine)\n"
            "  --gpus-per-node G     ranks per node (default: the description's devices per node)\n"
            "  --network NET         ib-400 (400 Gb/s InfiniBand per GPU) | eth-100 (100 Gb/s Ethernet per node)\n"
            "  --grad-accum A        micro-steps per optimizer step (default 1)\n"
            "  --trace FILE          the predicted timeline of one step, as the trainer's --trace writes it\n"
            "  --calibrate LOG       print --hardware's description fitted to a run's --log (fwd/bwd/optim/comm)\n"
            "output:\n"
            "  --json                one JSON object, bytes per rank (by kind, and by where they live)\n"
            "  --fit BYTES           the largest of a ladder of GPT-2-shaped models (GPT-2's, then GPT-3's sizes)\n"
            "                        whose device bytes per rank fit in BYTES (80e9, 80G), with these settings\n"
            "  --help                this text\n"
            "sizes are bytes per rank; the table's human units are decimal (1 GB = 1e9 bytes)\n",
            prog, d.cfg.num_layers, d.cfg.channels, d.cfg.num_heads, zc_dtype_names[d.precision], d.zero_stage,
            d.batch, d.seq_len, d.nvme_buffers, d.nvme_piece);
}

// "7e9", "124M", "1.5B", "2T" -> a count (bytes for --fit: 80e9, 80G). Returns 0, or -1 after
// printing one line naming the option.
static inline int planner_parse_count(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1.0;
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
    if (errno || end == s || *end || !(v >= 1.0 && v <= 1e16)) {
        fprintf(stderr, "error: %s: '%s' is not a count in [1, 1e16] (e.g. 7e9, 124M, 1.5B)\n", opt, s);
        return -1;
    }
    *out = floor(v + 0.5);
    return 0;
}

static inline int planner_pick(const char *opt, const char *a, const char *const *names, int n, int *out) {
    for (int i = 0; i < n; i++) if (!strcmp(a, names[i])) { *out = i; return 0; }
    fprintf(stderr, "error: --%s: '%s' is not one of", opt, a);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s %s", i ? (i == n - 1 ? " or" : ",") : "", names[i]);
    fprintf(stderr, "\n");
    return -1;
}

// ----------------------------------------------------------------------------------------
// --time: the step time (run/timemodel.h) of the planned run

typedef struct {
    int time;
    const char *hardware, *network, *trace, *calibrate;
    int per_node, accum;
} TimeOptions;

// One of the time options (name o, value a); 0, or -1 after one line.
static inline int planner_time_option(TimeOptions *t, const char *o, const char *a) {
    if (!strcmp(o, "time")) t->time = 1;
    else if (!strcmp(o, "hardware")) t->hardware = a;
    else if (!strcmp(o, "network")) t->network = a;
    else if (!strcmp(o, "trace")) t->trace = a;
    else if (!strcmp(o, "calibrate")) t->calibrate = a;
    else if (!strcmp(o, "gpus-per-node")) return config_int(o, a, 1, 1 << 20, &t->per_node);
    else if (!strcmp(o, "grad-accum")) return config_int(o, a, 1, 1 << 20, &t->accum);
    return 0;
}
// A time option without --time: one line naming it (returns 1), else 0.
static inline int planner_time_given(const TimeOptions *t) {
    const char *given = strcmp(t->hardware, "this-machine") ? "--hardware" : t->network ? "--network" : t->trace ? "--trace"
                        : t->per_node ? "--gpus-per-node" : t->accum != 1 ? "--grad-accum" : NULL;
    if (given) fprintf(stderr, "error: %s: only with --time (the step-time prediction)\n", given);
    return given != NULL;
}

// --calibrate LOG: the description fitted to the run, on stdout; the fit on stderr.
static inline int planner_calibrate(const TimeOptions *t) {
    Hardware hw;
    if (timemodel_hardware(t->hardware, &hw)) return 1;
    TimeInput in;
    TmMeasured m;
    if (timemodel_calibrate(t->calibrate, &hw, &in, &m)) return 1;
    TimeResult r;
    timemodel_step(&in, &hw, &r, NULL);
    fprintf(stderr, "calibrated on %s: matmuls at %.1f%% of peak, memory at %.1f%% of bandwidth%s; the run measured %.1f ms "
                    "per step (fwd %.1f, bwd %.1f, optim %.1f, exposed comm %.1f), the model now says %.1f (%.1f, %.1f, %.1f, %.1f)\n",
            t->calibrate, 100 * hw.matmul_eff, 100 * hw.mem_eff, hw.inline_comm && in.world > 1 ? ", MPI's links fitted too" : "",
            m.ms, m.fwd, m.bwd, m.optim, m.exposed, r.step * 1e3, r.fwd * 1e3, r.bwd * 1e3, r.optim * 1e3, r.exposed * 1e3);
    timemodel_hardware_write(stdout, &hw);
    return 0;
}

static inline int planner_time(const PlanInput *in, const MemoryPlan *p, const TimeOptions *t, int json) {
    if (in->params_count > 0) {
        fprintf(stderr, "error: --time: needs a GPT-2 shape (--model, or --layers/--channels/--heads), not --params\n");
        return 1;
    }
    Hardware hw;
    if (timemodel_hardware(t->hardware, &hw)) return 1;
    TimeInput ti = {in->cfg, in->precision, in->optimizer, in->zero_stage, in->world, t->per_node,
                    in->batch, in->seq_len, t->accum, in->recompute.mode != RECOMPUTE_NONE, in->offload_optimizer};
    if (t->network && timemodel_network(t->network, &hw, tm_per_node(&ti, &hw))) return 1;
    const char *why = timemodel_problem(&ti, &hw);
    if (why) { fprintf(stderr, "error: --time: %s\n", why); return 1; }
    TimeResult r;
    timemodel_step(&ti, &hw, &r, NULL);
    if (t->trace) {
        char meta[256];
        snprintf(meta, sizeof(meta), "\"predicted\":true,\"hardware\":\"%s\",\"world\":%d,\"zero_stage\":%d,\"precision\":\"%s\"",
                 hw.name, ti.world, ti.stage, zc_dtype_names[ti.precision]);
        if (timemodel_trace(t->trace, &ti, &hw, meta)) return 1;
    }
    if (json) {
        char *more = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&more, &len);
        timemodel_json(m, &ti, &hw, &r);
        fclose(m);
        planner_print_json(stdout, p, more);
        free(more);
    } else {
        planner_print_table(stdout, p, NULL, 0);
        printf("\n");
        timemodel_print(stdout, &ti, &hw, &r);
    }
    return 0;
}

// Returns the process exit code: 0 (plan printed, or --help), 1 (bad options: one line on stderr).
static inline int planner_main(int argc, char **argv, const PlanBackend *backend) {
    static const struct option opts[] = {
        {"model", 1, 0, 0}, {"layers", 1, 0, 0}, {"channels", 1, 0, 0}, {"heads", 1, 0, 0},
        {"vocab-size", 1, 0, 0}, {"max-seq-len", 1, 0, 0}, {"seq-len", 1, 0, 0}, {"params", 1, 0, 0},
        {"precision", 1, 0, 0}, {"optimizer", 1, 0, 0}, {"zero-stage", 1, 0, 0}, {"world", 1, 0, 0},
        {"batch", 1, 0, 0}, {"recompute", 1, 0, 0}, {"offload-optimizer", 1, 0, 0}, {"offload-param", 1, 0, 0},
        {"recompute-every", 1, 0, 0}, {"cpu-checkpointing", 0, 0, 0}, {"nvme-buffers", 1, 0, 0}, {"nvme-buffer-size", 1, 0, 0}, {"json", 0, 0, 0},
        {"threads", 1, 0, 0}, {"fit", 1, 0, 0}, {"help", 0, 0, 0}, {"plan", 0, 0, 0},
        {"time", 0, 0, 0}, {"hardware", 1, 0, 0}, {"gpus-per-node", 1, 0, 0}, {"network", 1, 0, 0}, {"grad-accum", 1, 0, 0},
        {"trace", 1, 0, 0}, {"calibrate", 1, 0, 0}, {0, 0, 0, 0}};
    double fit = 0.0;
    PlanInput in;
    planner_input_defaults(&in, backend);
    int json = 0, shape_given = 0, idx, r = 0, max_seq_given = 0, lch = 0; // lch: bits for --layers/--channels/--heads
    const char *model_name = NULL;
    TimeOptions to = {0, "this-machine", NULL, NULL, NULL, 0, 1};
    optind = 1;
    opterr = 0;
    for (;;) {
        int ch = getopt_long(argc, argv, "", opts, &idx);
        if (ch == -1) break;
        if (ch != 0) {
            fprintf(stderr, "error: %s: unknown option or missing value (see --plan --help)\n", argv[optind - 1]);
            return 1;
        }
        const char *o = opts[idx].name, *a = optarg;
        if (!strcmp(o, "help")) { planner_help(stdout, argv[0], backend); return 0; }
        else if (!strcmp(o, "plan")) continue;
        else if (!strcmp(o, "json")) json = 1;
        else if (!strcmp(o, "recompute")) r = planner_pick(o, a, gpt2_recompute_names, NUM_RECOMPUTE, &in.recompute.mode);
        else if (!strcmp(o, "recompute-every")) r = config_int(o, a, 1, GPT2_MAX_LAYERS, &in.recompute.every);
        else if (!strcmp(o, "cpu-checkpointing")) in.recompute.host = 1;
        else if (!strcmp(o, "offload-optimizer")) r = planner_pick(o, a, zero_offload_names, LOC_KINDS, &in.offload_optimizer);
        else if (!strcmp(o, "offload-param")) r = planner_pick(o, a, zero_offload_names, LOC_KINDS, &in.offload_param);
        else if (!strcmp(o, "model")) {
            model_name = a;
            if (gpt2_preset(a, &in.cfg)) {
                fprintf(stderr, "error: --model: unknown model '%s' (d12, d24, d36 or d48)\n", a);
                return 1;
            }
        }
        else if (!strcmp(o, "layers")) { r = config_int(o, a, 1, GPT2_MAX_LAYERS, &in.cfg.num_layers); shape_given = 1; lch |= 1; }
        else if (!strcmp(o, "channels")) { r = config_int(o, a, 1, 1 << 16, &in.cfg.channels); shape_given = 1; lch |= 2; }
        else if (!strcmp(o, "heads")) { r = config_int(o, a, 1, 1 << 12, &in.cfg.num_heads); shape_given = 1; lch |= 4; }
        else if (!strcmp(o, "max-seq-len")) { r = config_int(o, a, 1, 1 << 20, &in.cfg.max_seq_len); shape_given = 1; max_seq_given = 1; }
        else if (!strcmp(o, "vocab-size")) {
            r = config_int(o, a, 1, 65536, &in.cfg.vocab_size);
            in.cfg.padded_vocab_size = (int)gpt2_round_up((size_t)in.cfg.vocab_size, 128);
            shape_given = 1;
        }
        else if (!strcmp(o, "seq-len")) r = config_int(o, a, 1, 1 << 20, &in.seq_len);
        else if (!strcmp(o, "params")) r = planner_parse_count("--params", a, &in.params_count);
        else if (!strcmp(o, "precision")) r = planner_pick(o, a, zc_dtype_names, ZC_NUM_DTYPES, &in.precision);
        else if (!strcmp(o, "optimizer")) r = planner_pick(o, a, optimizer_names, OPT_NUM, &in.optimizer);
        else if (!strcmp(o, "zero-stage")) r = config_int(o, a, 0, 3, &in.zero_stage);
        else if (!strcmp(o, "world")) r = config_int(o, a, 1, 1 << 24, &in.world);
        else if (!strcmp(o, "batch")) r = config_int(o, a, 1, 1 << 20, &in.batch);
        else if (!strcmp(o, "threads")) r = config_int(o, a, 1, 1 << 16, &in.threads);
        else if (!strcmp(o, "nvme-buffers") || !strcmp(o, "nvme-buffer-size")) { // as the trainer's rows say
            int size = !strcmp(o, "nvme-buffer-size");
            const ConfigOption *row = &config_options()[size ? CK_NVME_BUFFER_SIZE : CK_NVME_BUFFERS];
            long v = 0;
            r = config_long(o, a, row->lo, row->hi, &v);
            if (size) in.nvme_piece = (size_t)v; else in.nvme_buffers = (int)v;
        }
        else if (!strcmp(o, "fit")) r = planner_parse_count("--fit", a, &fit);
        else r = planner_time_option(&to, o, a);
        if (r) return 1;
    }
    if (optind < argc) {
        fprintf(stderr, "error: %s: unexpected argument (options are --name value)\n", argv[optind]);
        return 1;
    }
    if (model_name && shape_given) {
        fprintf(stderr, "error: --model and --layers/--channels/--heads/--max-seq-len/--vocab-size each define the model; "
                        "give only one of them\n");
        return 1;
    }
    if (in.params_count > 0 && model_name) {
        fprintf(stderr, "error: --params and --model each define the model; give only one of them\n");
        return 1;
    }
    in.model_name = model_name;
    if (in.params_count > 0) {
        // With a bare count, the shape options only describe the activations: all three or none.
        if (lch != 0 && lch != 7) {
            fprintf(stderr, "error: --params: give --layers, --channels and --heads together (for activations) or none\n");
            return 1;
        }
        in.shape_known = lch == 7;
        if (shape_given && !max_seq_given) in.cfg.max_seq_len = in.seq_len;
    } else if (in.seq_len > in.cfg.max_seq_len && fit == 0.0) { // (--fit sets its ladder's max_seq_len)
        fprintf(stderr, "error: --seq-len %d exceeds the model's max_seq_len %d (give --max-seq-len)\n", in.seq_len,
                in.cfg.max_seq_len);
        return 1;
    }
    if (fit > 0 && in.seq_len > in.cfg.max_seq_len) in.cfg.max_seq_len = in.seq_len;
    const char *why = planner_input_problem(&in);
    if (why) { fprintf(stderr, "error: %s%s\n", why[0] == '-' ? "" : "model options: ", why); return 1; }
    if (in.recompute.every > 1 && in.recompute.mode != RECOMPUTE_FULL) {
        fprintf(stderr, "error: --recompute-every %d needs --recompute full\n", in.recompute.every);
        return 1;
    }
    if (in.recompute.host && in.recompute.mode != RECOMPUTE_FULL) {
        fprintf(stderr, "error: --cpu-checkpointing needs --recompute full\n");
        return 1;
    }
    if ((in.params_count == 0 || in.shape_known) && in.recompute.every > in.cfg.num_layers) {
        fprintf(stderr, "error: --recompute-every %d exceeds the model's %d layers\n", in.recompute.every, in.cfg.num_layers);
        return 1;
    }
    if (to.calibrate) return planner_calibrate(&to);
    if (fit > 0) {
        if (to.time) { fprintf(stderr, "error: --time: not with --fit (one model at a time)\n"); return 1; }
        if (planner_time_given(&to)) return 1;
        return planner_fit(&in, fit, json);
    }
    MemoryPlan p;
    planner_plan(&in, &p);
    if (!to.time) {
        if (planner_time_given(&to)) return 1;
        if (json) planner_print_json(stdout, &p, NULL);
        else planner_print_table(stdout, &p, NULL, 0);
        return 0;
    }
    return planner_time(&in, &p, &to, json);
}

#endif // PLANNER_H
