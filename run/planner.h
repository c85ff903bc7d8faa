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
//   - planner_input_from_train_config() makes a plan's input from the one settings struct
//     (TrainConfig), and planner_time_input() the time model's: the trainer's report and --plan
//     both come through them. --nvme-host-cache auto and --nvme-readahead auto are settled by
//     planner_nvme_auto (this machine's available memory less the plan; the trainer's rank 0
//     asks it for all ranks).
//   - planner_main(argc, argv, backend, build) is the command line (`train_gpt_cpu --plan ...`): the
//     option table's rows that --plan takes (config.h: every trainer option that changes the
//     memory or the step time, with the trainer's meaning, ranges and errors, and --plan's own),
//     read by config_parse_as, the model taken from --init's header or --resume's manifest as the
//     trainer takes it, a --deepspeed file applied for --world ranks, and checked by the trainer's
//     config_validate; a bad option prints one line naming it and returns non-zero. An argument
//     "--plan" is accepted and ignored, so a trainer can hand over its argv unchanged.
//     With --time it also predicts the step time (run/timemodel.h) on --hardware, and --json
//     gains step_ms and its breakdown; --calibrate LOG prints a description fitted to a run.
//   - planner_print_partitions() (--partitions, GPT-2 shapes) prints zero.h's partition map for
//     --world: each unit's elements, padding and slice, where every rank's slice starts in the
//     flat buffer (zero_slice_begin), what a rank keeps whole or as slices at stages 0-3 and the
//     bytes of each unit on a rank, whose totals are planner_plan()'s model states per stage.
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
#include "run/checkpoint.h"
#include "run/config.h"
#include "run/ds_config.h"
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
    ZeroOptions zo;        // ZeRO's settings, as the trainer hands them to zero_init (config_zero_options):
                           // stage, dtype (the precision), optimizer, offload, Twin-Flow, the delayed
                           // update, NVMe's pieces and host tier, ZeRO++; zeropp_per_host: the ranks
                           // per host qgZ's levels use (0 or not dividing world: every rank on one host)
    int world;             // N ranks
    int batch, seq_len;    // micro-batch B and sequence length T
    GPT2Recompute recompute; // activation recompute (gpt2.h): none, full every K layers, selective
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
    double twin_device;            // Twin-Flow: bytes of the offloaded kinds kept on the device (in device[])
    double nvme_optimizer, nvme_total;              // NVMe: the states kept in files
    double model_states_textbook;  // the stage formula on the unpadded P, all of it wherever it lives
    double act_textbook_layer;     // Korthikanti per layer, at the plan's precision (0 if unknown)
    double act_textbook;           // L layers' worth (full: inputs + K layers; selective: L x sbh 34)
    double nvme_cache, nvme_readahead; // of the staging: NVMe's host tier and read-ahead area as allocated,
    double staging_held;           // and the delayed update's (new parameters, the held gradients' host copy)
} MemoryPlan;

// ----------------------------------------------------------------------------------------
// Inputs

// The plan of a run the settings describe, the trainer's or --plan's (c->plan: a bare count, the
// threads), on `world` ranks: the one place a plan's input is made from the settings.
static inline PlanInput planner_input_from_train_config(const TrainConfig *c, int world, const PlanBackend *backend) {
    PlanInput in;
    memset(&in, 0, sizeof(in));
    in.cfg = c->model;
    in.model_name = c->model_name;
    in.params_count = c->plan.params;
    in.shape_known = c->plan.params > 0 && config_given(c, CK_LAYERS) && config_given(c, CK_CHANNELS) &&
                     config_given(c, CK_HEADS);
    in.zo = config_zero_options(c);
    in.zo.zeropp_per_host = c->plan.per_node;
    in.world = world;
    in.batch = c->batch;
    in.seq_len = c->seq_len;
    in.recompute = config_recompute(c);
    in.threads = c->plan.threads;
    in.backend = backend;
    return in;
}
// ... and of its step time (after config_validate: grad_accum is known).
static inline TimeInput planner_time_input(const TrainConfig *c) {
    TimeInput ti;
    memset(&ti, 0, sizeof(ti));
    ti.cfg = c->model;
    ti.zo = config_zero_options(c);
    ti.world = c->world; ti.per_node = c->plan.per_node;
    ti.batch = c->batch; ti.seq_len = c->seq_len; ti.accum = c->grad_accum; ti.recompute = c->recompute != RECOMPUTE_NONE;
    return ti;
}

// The trainer's defaults (config_defaults): a plan with no options describes what
// `train_gpt_cpu` (or `train_gpt`, in the precision it was built for) with no options would
// allocate on one rank.
static inline void planner_input_defaults(PlanInput *in, const PlanBackend *backend) {
    TrainConfig d;
    config_defaults(&d);
    if (backend) d.precision = backend->default_precision;
    *in = planner_input_from_train_config(&d, 1, backend);
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
    if (in->zo.dtype < 0 || in->zo.dtype >= ZC_NUM_DTYPES) return "precision must be fp32, bf16 or fp16";
    if (in->zo.optimizer < 0 || in->zo.optimizer >= OPT_NUM) return "optimizer must be adamw, lion, sgd-momentum or sgd";
    if (in->zo.stage < 0 || in->zo.stage > 3) return "zero stage must be 0, 1, 2 or 3";
    if (in->world < 1) return "world size must be at least 1";
    if (in->batch < 1 || in->seq_len < 1) return "batch and sequence length must be positive";
    if (in->zo.offload_optimizer != LOC_DEVICE && in->zo.stage == 0)
        return "--offload-optimizer needs --zero-stage 1, 2 or 3 (ZeRO-Offload moves the state a stage partitions)";
    if (in->zo.offload_param != LOC_DEVICE && in->zo.stage != 3)
        return "--offload-param needs --zero-stage 3 (only stage 3 partitions the parameters)";
    if (!(in->zo.twin_device >= 0.0 && in->zo.twin_device <= 1.0)) return "--offload-ratio must be between 0 and 1";
    if (in->zo.twin_device > 0.0 && in->zo.offload_optimizer != LOC_HOST)
        return "--offload-ratio (Twin-Flow) needs --offload-optimizer cpu";
    if (in->zo.delayed_update && in->zo.offload_optimizer == LOC_DEVICE)
        return "--offload-delayed-update needs --offload-optimizer cpu or nvme";
    if (in->zo.twin_device > 0.0 && in->zo.offload_param != LOC_DEVICE)
        return "--offload-ratio (Twin-Flow) needs the parameters on the device (no --offload-param)";
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
    planner_bytes_per_param(in->zo.dtype, in->zo.optimizer, &p->bytes_param, &p->bytes_grad, &p->bytes_master,
                            p->bytes_state);
    int S = in->zo.stage;
    // where each kind lives: as zero.h places them for this trainer (a bare count models a GPU)
    ZeroOptions zo = in->zo;
    if (!(zo.zeropp_per_host > 0 && in->world % zo.zeropp_per_host == 0)) zo.zeropp_per_host = in->world;
    int unified = in->params_count > 0 || !in->backend ? 0 : in->backend->unified;
    zero_placement(&zo, unified, p->where);
    if (p->where[MEM_MASTER] != LOC_DEVICE || p->where[MEM_PARAMS] != LOC_DEVICE)
        p->bytes_master = 4.0; // a streamed update keeps fp32 weights even in fp32
    double N = in->world, K = p->bytes_master + planner_state_bytes(p);
    double elem = in->zo.dtype == ZC_F32 ? 4.0 : 2.0;
    double *dev = p->bytes;
    if (in->params_count > 0) { // textbook on a bare count
        double P = in->params_count;
        p->exact = 0;
        p->num_params = p->padded_params = P;
        dev[MEM_PARAMS] = p->bytes_param * (S == 3 ? P / N : P);
        dev[MEM_GRADS] = p->bytes_grad * ((S >= 2 ? P / N : P) + (in->zo.delayed_update ? P / N : 0.0));
        double opt_elems = S == 0 ? P : P / N;
        dev[MEM_MASTER] = p->bytes_master * opt_elems;
        for (int k = 0; k < OPT_MAX_SLICES; k++) dev[MEM_STATE + k] = p->bytes_state[k] * opt_elems;
        if (S == 3 && N > 1 && in->zo.zeropp_hpz > 1) dev[MEM_HPZ] = p->bytes_param * P / in->zo.zeropp_hpz; // hpZ: 2 Psi / G
        p->buffers_known = 0;
        p->activations_known = in->shape_known;
        if (p->where[MEM_MASTER] == LOC_HOST) p->twin_device = in->zo.twin_device * K * opt_elems;
    } else { // exact: the trainer's layout, zero.h's partition
        Zero z;
        memset(&z, 0, sizeof(z));
        z.stage = S; z.rank = 0; z.world = in->world;
        z.esize = zc_dtype_size(in->zo.dtype); z.nstate = optimizer_info(in->zo.optimizer)->slices;
        z.optimizer = in->zo.optimizer; // (an optimizer's per-tensor sums are among the buffers)
        memcpy(z.where, p->where, sizeof(z.where));
        gpt2_layout_init(&z.lay, &in->cfg, (size_t)in->world * ZERO_ALIGN);
        z.dtype = in->zo.dtype;
        zero_pp_setup(&z, &zo); // ZeRO++'s buffers (in zero_buffer_floats) and hpZ's shard
        zero_store_shape(&z.st, &z.lay, z.where, 0, in->world, z.esize, z.nstate);
        zero_store_pieces(&z.st, &zo);
        ZeroNvme nv; // (the NVMe store's sizes: buffer sets, host tier, read-ahead)
        zero_nvme_shape(&z.st, &nv, &zo);
        double full = (double)z.lay.num_flat, shard = (double)zero_shard_size(&z);
        p->exact = 1;
        p->num_params = (double)z.lay.num_params;
        p->padded_params = full;
        dev[MEM_PARAMS] = p->bytes_param * (S == 3 ? shard : full);
        dev[MEM_GRADS] = p->bytes_grad * ((S >= 2 ? shard : full) + (in->zo.delayed_update ? shard : 0.0));
        double opt_elems = S == 0 ? full : shard;
        dev[MEM_MASTER] = p->bytes_master * opt_elems;
        for (int k = 0; k < OPT_MAX_SLICES; k++) dev[MEM_STATE + k] = p->bytes_state[k] * opt_elems;
        for (int k = MEM_PARAMS; k < MEM_BUFFERS; k++) // a file on NVMe: its slices padded (zero/store.h)
            if (p->where[k] == LOC_NVME && dev[k] > 0) dev[k] = (double)zero_nvme_file_bytes(&z.st, k);
        dev[MEM_BUFFERS] = p->bytes_param * (double)zero_buffer_floats(&z, unified);
        dev[MEM_HPZ] = p->bytes_param * (double)zero_hpz_elems(&z);
        p->staging_held = (double)zero_held_staging_bytes(&z.st, unified, in->zo.delayed_update);
        dev[MEM_STAGING] = (double)zero_staging_bytes(&z.st, unified) + p->staging_held;
        p->nvme_cache = (double)zero_nvme_cache_bytes(&nv, &z.st);
        p->nvme_readahead = (double)zero_nvme_area_bytes(&nv, &z.st);
        p->twin_device = (double)zero_twin_bytes(&z.st);
        p->buffers_known = 1;
        if (in->backend) { // the trainer's own layout
            dev[MEM_ACTIVATIONS] = in->backend->activation_bytes(&in->cfg, in->batch, in->seq_len, in->zo.dtype,
                                                                 in->recompute, &dev[MEM_HOST_ACTIVATIONS]);
            dev[MEM_WORKSPACE] = in->backend->workspace_bytes(&z.lay, &in->cfg, in->batch, in->seq_len, in->zo.dtype,
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
    if (p->twin_device > 0.0) // Twin-Flow: each offloaded kind's device part, by its bytes per element
        for (int k = MEM_MASTER; k < MEM_BUFFERS; k++) {
            double part = K > 0.0 ? p->twin_device * (k == MEM_MASTER ? p->bytes_master : p->bytes_state[k - MEM_STATE]) / K : 0.0;
            p->host[k] -= part;
            p->device[k] += part;
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
    switch (p->in.zo.stage) {
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
// adj (per rank, or NULL) times sign is added to each rank's actual sum (Twin-Flow's device part of
// the offloaded kinds, which counts where the kinds' location does not say).
static inline void planner_row_adj(FILE *f, const char *label, const char *formula, const char *where, const double *bytes,
                                   const double *actual, int actual_ranks, unsigned kinds, const double *adj, double sign) {
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
            if (adj) got += sign * adj[q];
            if (q == 0) got0 = got;
            if (mismatch < 0 && (!bytes || got != *bytes)) mismatch = q;
        }
        fprintf(f, " %19s  %s", planner_commas(b1, sizeof(b1), got0),
                mismatch < 0 ? (actual_ranks > 1 ? "= all ranks" : "=") : "DIFFERS");
        if (mismatch >= 0 && actual_ranks > 1) fprintf(f, " (rank %d)", mismatch);
    }
    fprintf(f, "\n");
}
static inline void planner_row(FILE *f, const char *label, const char *formula, const char *where, const double *bytes,
                               const double *actual, int actual_ranks, unsigned kinds) {
    planner_row_adj(f, label, formula, where, bytes, actual, actual_ranks, kinds, NULL, 0.0);
}
#define PLANNER_KIND(k) (1u << (k))

// The table. actual: NULL, or actual_ranks x MEM_KINDS bytes the ranks really allocated
// (rank-major, zero.h's kinds, as report_memory gathers them): printed beside the plan with
// "=" where every rank matches.
// actual_twin: NULL, or each rank's bytes of the offloaded kinds it keeps on the device (Twin-Flow).
static inline void planner_print_table_twin(FILE *f, const MemoryPlan *p, const double *actual, int actual_ranks,
                                            const double *actual_twin) {
    const PlanInput *in = &p->in;
    const GPT2Config *c = &in->cfg;
    char b1[64], b2[64], fm[64];
    const char *pn = zc_dtype_names[in->zo.dtype];
    int S = in->zo.stage;
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
    fprintf(f, "  training  %s, %s, ZeRO stage %d, N = %d ranks\n", planner_mode_name(in->zo.dtype),
            in->zo.optimizer == OPT_ADAMW ? "AdamW" : in->zo.optimizer == OPT_LION ? "Lion"
            : in->zo.optimizer == OPT_SGD_MOMENTUM ? "SGD with momentum" : in->zo.optimizer == OPT_LAMB ? "LAMB" : "plain SGD",
            S, in->world);
    char rn[80];
    fprintf(f, "            micro-batch B = %d, T = %d, activation recompute %s, optimizer state on the %s, "
               "parameters on the %s\n", in->batch, in->seq_len, planner_recompute_name(rn, sizeof(rn), in->recompute),
            zero_location_names[p->where[MEM_MASTER]], zero_location_names[p->where[MEM_PARAMS]]);
    if (p->twin_device > 0.0)
        fprintf(f, "            Twin-Flow: offload ratio %g, %s bytes of the optimizer state (%.1f%%) stay on the device "
                   "and update there\n", 1.0 - in->zo.twin_device, planner_commas(b1, sizeof(b1), p->twin_device),
                100.0 * p->twin_device / (p->optimizer + p->host_optimizer));
    fprintf(f, "\n  %-38s %-24s %-6s %19s %11s", "per rank", "formula", "where", "bytes", "size");
    if (actual) fprintf(f, " %19s", actual_ranks > 1 ? "allocated (rank 0)" : "allocated");
    fprintf(f, "\n");
    const double *d = p->bytes;
    const double *A = actual;
    int R = actual_ranks;
    double K = p->bytes_master + planner_state_bytes(p);
    unsigned OPT = PLANNER_KIND(MEM_MASTER);
    for (int k = 0; k < OPT_MAX_SLICES; k++) OPT |= PLANNER_KIND(MEM_STATE + k);
    const OptimizerInfo *oi = optimizer_info(in->zo.optimizer);
#define W(k) zero_location_names[p->where[k]]
    char lab[80];
    snprintf(lab, sizeof(lab), "parameters (%s)", pn);
    planner_row(f, lab, planner_term(fm, sizeof(fm), p->bytes_param, S == 3), W(MEM_PARAMS), &d[MEM_PARAMS], A, R,
                PLANNER_KIND(MEM_PARAMS));
    // (the delayed update's held gradients: a second gradient shard, zero/update.h's zero_held_alloc)
    snprintf(lab, sizeof(lab), in->zo.delayed_update ? "gradients (%s) + held shard" : "gradients (%s)", pn);
    char fh[32];
    planner_term(fm, sizeof(fm), p->bytes_grad, S >= 2);
    if (in->zo.delayed_update)
        snprintf(fm + strlen(fm), sizeof(fm) - strlen(fm), " + %s", planner_term(fh, sizeof(fh), p->bytes_grad, 1));
    planner_row(f, lab, fm, W(MEM_GRADS), &d[MEM_GRADS], A, R, PLANNER_KIND(MEM_GRADS));
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
                   : S == 2 ? "ZeRO buffers (buckets, recv slices)"
                   : optimizer_reductions(in->zo.optimizer) ? "ZeRO buffers (LAMB's per-tensor sums)" : "ZeRO buffers (none below stage 2)",
                p->buffers_known ? "zero_init's units" : "not modelled", W(MEM_BUFFERS),
                p->buffers_known ? &d[MEM_BUFFERS] : NULL, A, R, PLANNER_KIND(MEM_BUFFERS));
    // staging: NVMe's buffer sets (and host tier, read-ahead area), or the offloaded update's 2+2 pieces; and
    // the delayed update's new parameters (and beside a GPU, its held gradients' host copy: zero/update.h)
    int held = p->staging_held > 0.0, two = p->bytes[MEM_STAGING] > p->staging_held;
    if (p->bytes[MEM_STAGING] > 0.0)
        planner_row(f, p->where[MEM_MASTER] == LOC_NVME || p->where[MEM_PARAMS] == LOC_NVME
                           ? (p->nvme_cache > 0 ? "staging (NVMe buffers, host tier)"
                              : p->nvme_readahead > 0 ? "staging (NVMe buffers, read-ahead)"
                              : "staging (offload, NVMe buffer sets)")
                           : held && two ? "staging (2+2, delayed: params, grads)"
                           : held ? "staging (delayed update's new params)"
                           : "staging (offload: 2+2 pieces)",
                    held ? "zero_(held_)staging" : "zero_staging_bytes", W(MEM_STAGING), &d[MEM_STAGING], A, R,
                    PLANNER_KIND(MEM_STAGING));
    if (p->bytes[MEM_HPZ] > 0.0) // ZeRO++ hpZ's secondary parameter shard
        planner_row(f, "hpZ secondary shard", "p P / G", W(MEM_HPZ), &d[MEM_HPZ], A, R, PLANNER_KIND(MEM_HPZ));
    int rc = in->recompute.mode != RECOMPUTE_NONE;
    if (p->exact && rc) snprintf(lab, sizeof(lab), "activations (recompute %s)", gpt2_recompute_names[in->recompute.mode]);
    else snprintf(lab, sizeof(lab), "activations (%s%s)", p->exact ? "this trainer" : "textbook", rc ? ", recompute" : "");
    planner_row(f, lab, p->exact && in->backend ? (rc ? in->backend->recompute_formula : in->backend->activation_formula)[in->zo.dtype]
                 : planner_textbook_formula(in->recompute, in->zo.dtype), W(MEM_ACTIVATIONS),
                p->activations_known ? &d[MEM_ACTIVATIONS] : NULL, A, R, PLANNER_KIND(MEM_ACTIVATIONS));
    if (d[MEM_HOST_ACTIVATIONS] > 0.0) // cpu_checkpointing: the kept layer inputs, pinned
        planner_row(f, "activations: checkpoints (pinned)", "cpu_checkpointing", W(MEM_HOST_ACTIVATIONS),
                    &d[MEM_HOST_ACTIVATIONS], A, R, PLANNER_KIND(MEM_HOST_ACTIVATIONS));
    planner_row(f, in->backend ? in->backend->workspace_label[in->zo.dtype] : "workspace",
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
        int twin = p->twin_device > 0.0 && A && actual_twin;
        double sign = loc == LOC_DEVICE ? 1.0 : loc == p->where[MEM_MASTER] ? -1.0 : 0.0;
        planner_row_adj(f, lab, "", zero_location_names[loc], tot[loc], A, R, kinds, twin ? actual_twin : NULL, sign);
    }
    if (p->twin_device > 0.0) {
        double planned = p->twin_device;
        if (A && actual_twin) {
            fprintf(f, "  %-38s %-24s %-6s %19s %11s", "  of which optimizer state (Twin-Flow)", "(1 - ratio) of it", "device",
                    planner_commas(b1, sizeof(b1), planned), planner_human(b2, sizeof(b2), planned));
            int same = 1;
            for (int q = 0; q < R; q++) same = same && actual_twin[q] == planned;
            fprintf(f, " %19s  %s\n", planner_commas(b1, sizeof(b1), actual_twin[0]), same ? (R > 1 ? "= all ranks" : "=") : "DIFFERS");
        } else {
            planner_row(f, "  of which optimizer state (Twin-Flow)", "(1 - ratio) of it", "device", &planned, NULL, 0, 0);
        }
    }
    fprintf(f, "\n  textbook, for comparison\n");
    planner_row(f, p->exact ? "model states, unpadded P" : "model states (all of them)",
                planner_states_formula(fm, sizeof(fm), p), "", &p->model_states_textbook, NULL, 0, 0);
    if (p->activations_known) {
        planner_row(f, "activations of one layer", in->zo.dtype == ZC_F32 ? "sbh(66 + 9as/h)" : "sbh(34 + 5as/h)", "",
                    &p->act_textbook_layer, NULL, 0, 0);
        planner_row(f, in->recompute.mode == RECOMPUTE_FULL ? "activations, kept inputs + K layers"
                       : in->recompute.mode == RECOMPUTE_SELECTIVE ? "activations, L layers less attention's"
                                                                   : "activations, L layers",
                    rc ? planner_textbook_formula(in->recompute, in->zo.dtype) : "L x the above",
                    "", &p->act_textbook, NULL, 0, 0);
    } else {
        fprintf(f, "  activations: unknown (give --layers, --channels and --heads with --params)\n");
    }
    if (actual) {
        int all = 1;
        for (int q = 0; q < actual_ranks; q++)
            for (int k = 0; k < MEM_KINDS; k++) all = all && actual[q * MEM_KINDS + k] == d[k];
        for (int q = 0; q < actual_ranks && actual_twin; q++) all = all && actual_twin[q] == p->twin_device;
        fprintf(f, "  plan vs allocated: %s\n", all ? "every kind on every rank matches exactly" : "MISMATCH (see DIFFERS)");
    }
}
static inline void planner_print_table(FILE *f, const MemoryPlan *p, const double *actual, int actual_ranks) {
    planner_print_table_twin(f, p, actual, actual_ranks, NULL);
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
               "\"offload_optimizer\":\"%s\",\"offload_param\":\"%s\",\"offload_ratio\":%.9g},",
            zc_dtype_names[in->zo.dtype], optimizer_info(in->zo.optimizer)->name, in->zo.stage, in->world,
            in->batch, in->seq_len, gpt2_recompute_names[in->recompute.mode], gpt2_recompute_every(in->recompute),
            in->recompute.host ? "true" : "false", zero_location_names[in->zo.offload_optimizer],
            zero_location_names[in->zo.offload_param], 1.0 - in->zo.twin_device);
    fprintf(f, "\"exact\":%s,", p->exact ? "true" : "false");
    planner_json_num(f, "optimizer_on_device", p->twin_device, 1); fputc(',', f); // Twin-Flow's device part
    planner_json_num(f, "num_params", p->num_params, 1); fputc(',', f);
    planner_json_num(f, "padded_params", p->padded_params, 1); fputc(',', f);
    const OptimizerInfo *oi = optimizer_info(in->zo.optimizer);
    fprintf(f, "\"bytes_per_param\":{\"params\":%g,\"grads\":%g,\"master\":%g", p->bytes_param, p->bytes_grad,
            p->bytes_master);
    for (int k = 0; k < oi->slices; k++) fprintf(f, ",\"%s\":%g", oi->slice_names[k], p->bytes_state[k]);
    fprintf(f, ",\"K\":%g},\"kinds\":[", p->bytes_master + planner_state_bytes(p));
    for (int k = 0, first = 1; k < MEM_KINDS; k++)
        if (zero_memory_name(in->zo.optimizer, k)) { fprintf(f, "%s\"%s\"", first ? "" : ",", zero_memory_name(in->zo.optimizer, k)); first = 0; }
    fprintf(f, "],");
    fprintf(f, "\"where\":{");
    for (int k = 0, first = 1; k < MEM_KINDS; k++)
        if (zero_memory_name(in->zo.optimizer, k)) {
            fprintf(f, "%s\"%s\":\"%s\"", first ? "" : ",", zero_memory_name(in->zo.optimizer, k), zero_location_names[p->where[k]]);
            first = 0;
        }
    fprintf(f, "},");
    for (int k = 0; k < MEM_KINDS; k++) { // each kind's bytes, wherever it lives
        if (!zero_memory_name(in->zo.optimizer, k)) continue;
        int known = k == MEM_BUFFERS || k == MEM_STAGING ? p->buffers_known : k == MEM_WORKSPACE ? p->workspace_known
                    : k == MEM_ACTIVATIONS || k == MEM_HOST_ACTIVATIONS ? p->activations_known : 1;
        planner_json_num(f, zero_memory_name(in->zo.optimizer, k), p->bytes[k], known);
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
               planner_mode_name(base->zo.dtype), optimizer_info(base->zo.optimizer)->name, base->zo.stage, base->world,
               zero_location_names[base->zo.offload_optimizer], zero_location_names[base->zo.offload_param], base->batch,
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
// --partitions: zero.h's partition map of the planned model and world, for every stage: each
// unit's elements, its padding and every rank's slice (where it starts in the flat buffer), then
// which kinds a rank keeps whole and which only as its slices at each stage, and the bytes of
// each unit a rank holds (every rank the same amount: the slices are equal). The ZeRO paper's
// Figure 1, exact; scripts/plot.py --partitions draws it.

// "embeddings (wte, wpe)", "layer 3", "final layernorm".
static inline const char *planner_unit_name(char *buf, size_t n, const ParamLayout *lay, int u) {
    if (u == UNIT_EMBED) snprintf(buf, n, "embeddings (wte, wpe)");
    else if (u == gpt2_final_unit(lay)) snprintf(buf, n, "final layernorm");
    else snprintf(buf, n, "layer %d", u - 1);
    return buf;
}

static inline int planner_print_partitions(FILE *f, const PlanInput *base) {
    if (base->params_count > 0 || base->zo.offload_optimizer != LOC_DEVICE || base->zo.offload_param != LOC_DEVICE) {
        fprintf(stderr, "error: --partitions: needs a GPT-2 shape (--model, or --layers/--channels/--heads) and no "
                        "--offload-* (the slices are the same wherever they live)\n");
        return 1;
    }
    Zero z;
    memset(&z, 0, sizeof(z));
    z.world = base->world;
    gpt2_layout_init(&z.lay, &base->cfg, (size_t)base->world * ZERO_ALIGN);
    const ParamLayout *lay = &z.lay;
    int N = base->world, U = lay->num_units, show = N < 8 ? N : 4; // ranks with a column: all, or the first 3 and the last
    char b[6][40], name[64];
    fprintf(f, "partition map (zero.h): %d units, N = %d ranks; each unit padded to a multiple of N x ZERO_ALIGN = %zu elements.\n"
               "Rank r's slice of a unit: its elements [r x S, (r+1) x S), S = padded / N; every rank has a slice of every unit.\n"
               "\"rank r from\": where rank r's slice starts in the flat parameter buffer (elements); the padding ends the unit.\n",
            U, N, lay->align);
    fprintf(f, "  %-26s %13s %13s %11s %9s", "unit", "elements", "padded", "slice S", "padding");
    for (int i = 0; i < show; i++) {
        char h[32];
        snprintf(h, sizeof(h), "rank %d from", i < 3 || show == N ? i : N - 1);
        fprintf(f, " %14s", h);
    }
    fprintf(f, "\n");
    size_t tot_n = 0, tot_pad = 0;
    for (int u = 0; u < U; u++) {
        size_t padded = gpt2_unit_padded(lay, u), S = padded / (size_t)N;
        tot_n += lay->unit_numel[u]; tot_pad += padded;
        fprintf(f, "  %3d %-22s %13s %13s %11s %9s", u, planner_unit_name(name, sizeof(name), lay, u),
                planner_commas(b[0], sizeof(b[0]), (double)lay->unit_numel[u]), planner_commas(b[1], sizeof(b[1]), (double)padded),
                planner_commas(b[2], sizeof(b[2]), (double)S),
                planner_commas(b[3], sizeof(b[3]), (double)(padded - lay->unit_numel[u])));
        for (int i = 0; i < show; i++) {
            z.rank = i < 3 || show == N ? i : N - 1;
            fprintf(f, " %14s", planner_commas(b[4], sizeof(b[4]), (double)zero_slice_begin(&z, u)));
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  %3s %-22s %13s %13s %11s %9s\n", "=", "all units", planner_commas(b[0], sizeof(b[0]), (double)tot_n),
            planner_commas(b[1], sizeof(b[1]), (double)tot_pad), planner_commas(b[2], sizeof(b[2]), (double)(tot_pad / (size_t)N)),
            planner_commas(b[3], sizeof(b[3]), (double)(tot_pad - tot_n)));
    if (show < N) fprintf(f, "  (ranks 3 to %d: every slice starts S after the rank before's)\n", N - 2);

    // What each stage keeps whole and what as slices, with the planner's bytes per element.
    MemoryPlan p[4];
    for (int s = 0; s < 4; s++) {
        PlanInput in = *base;
        in.zo.stage = s;
        if (planner_plan(&in, &p[s])) return 1;
    }
    const OptimizerInfo *oi = optimizer_info(base->zo.optimizer);
    double K = p[0].bytes_master + planner_state_bytes(&p[0]);
    char kdesc[160] = "";
    size_t o = 0;
    if (p[0].bytes_master > 0) o += (size_t)snprintf(kdesc + o, sizeof(kdesc) - o, "master %g", p[0].bytes_master);
    for (int k = 0; k < oi->slices && o < sizeof(kdesc); k++)
        o += (size_t)snprintf(kdesc + o, sizeof(kdesc) - o, "%s%s %g", o ? " + " : "", oi->slice_names[k], p[0].bytes_state[k]);
    fprintf(f, "\nwhat every rank keeps (%s, %s; bytes per element: parameters %g, gradients %g, optimizer state %g%s%s):\n",
            planner_mode_name(base->zo.dtype), oi->name, p[0].bytes_param, p[0].bytes_grad, K, o ? " = " : "", kdesc);
    fprintf(f, "  %-7s %-16s %-16s %s\n", "stage", "parameters", "gradients", "optimizer state");
    for (int s = 0; s < 4; s++)
        fprintf(f, "  %-7d %-16s %-16s %s\n", s, s >= 3 ? "its slices" : "whole units", s >= 2 ? "its slices" : "whole units",
                s >= 1 ? "its slices" : "whole units");

    fprintf(f, "\nmodel-state bytes of each unit on one rank (every rank holds the same amount, of its own slices)\n");
    fprintf(f, "  %-26s %15s %15s %15s %15s\n", "unit", "stage 0", "stage 1", "stage 2", "stage 3");
    double sum[4] = {0, 0, 0, 0}, kind[3][4] = {{0}};
    for (int u = 0; u <= U; u++) {
        if (u < U) fprintf(f, "  %3d %-22s", u, planner_unit_name(name, sizeof(name), lay, u));
        else fprintf(f, "  %3s %-22s", "=", "MODEL STATES");
        for (int s = 0; s < 4; s++) {
            if (u == U) { fprintf(f, " %15s", planner_commas(b[0], sizeof(b[0]), sum[s])); continue; }
            double full = (double)gpt2_unit_padded(lay, u), S = full / N;
            double Ks = p[s].bytes_master + planner_state_bytes(&p[s]);
            double k3[3] = {p[s].bytes_param * (s >= 3 ? S : full), p[s].bytes_grad * (s >= 2 ? S : full), Ks * (s >= 1 ? S : full)};
            double v = k3[0] + k3[1] + k3[2];
            for (int k = 0; k < 3; k++) kind[k][s] += k3[k];
            sum[s] += v;
            fprintf(f, " %15s", planner_commas(b[0], sizeof(b[0]), v));
        }
        fprintf(f, "\n");
    }
    const char *kn[3] = {"parameters", "gradients", "optimizer state"};
    for (int k = 0; k < 3; k++) {
        fprintf(f, "      %-22s", kn[k]);
        for (int s = 0; s < 4; s++) fprintf(f, " %15s", planner_commas(b[0], sizeof(b[0]), kind[k][s]));
        fprintf(f, "\n");
    }
    return 0;
}

// ----------------------------------------------------------------------------------------
// The command line

// --plan --help: the rows --plan takes (config_help), the trainer's in its words.
static inline void planner_help(const TrainConfig *defaults, const char *prog) {
    printf("usage: %s --plan [options]    print each rank's memory for a training run; allocates nothing\n"
           "(the trainer's options that change the memory or the step time, with the trainer's meaning and\n"
           "checks, and the plan's own, last; a GPT-2 shape is exact, as the trainer lays it out, a bare\n"
           "--params count gets the textbook's formulas)\n", prog);
    config_help(defaults, CU_PLAN);
    printf("\nsizes are bytes per rank; the table's human units are decimal (1 GB = 1e9 bytes)\n");
}

// --plan's settings after its command line: the model (a checkpoint's, or a bare count's), the
// --deepspeed file (for --world ranks), the trainer's checks of the options against each other
// (config_validate, with the trainer's lines), then the plan's own. 0, or -1 after one line.
static inline int planner_settle(TrainConfig *c) {
    if (c->ds_config_path && ds_config_apply(c, c->ds_config_path, c->world, c->ds_strict)) return -1;
    if (c->init_path) { // as the trainer reads it: the header's shape
        GPT2FileInfo info;
        FILE *f = gpt2_open_checkpoint(c->init_path, &info);
        if (!f) return -1;
        fclose(f);
        c->model = info.cfg;
    }
    if (c->resume_path) {
        CkptManifest *m = (CkptManifest *)malloc(sizeof(CkptManifest));
        int ok = m && ckpt_read_manifest(c->resume_path, m) == 0;
        if (ok) c->model = m->cfg;
        free(m);
        if (!ok) return -1;
    }
    if (c->plan.params > 0) { // a bare count: the shape, all of it or none, describes the activations
        int lch = config_given(c, CK_LAYERS) + config_given(c, CK_CHANNELS) + config_given(c, CK_HEADS);
        if (lch != 0 && lch != 3) {
            fprintf(stderr, "error: --params: give --layers, --channels and --heads together (for activations) or none\n");
            return -1;
        }
        if (!config_given(c, CK_MAX_SEQ_LEN)) c->model.max_seq_len = c->seq_len;
        if (lch == 0) c->model.num_layers = GPT2_MAX_LAYERS; // unknown: the rows' largest, so --recompute-every passes
    }
    if (c->plan.fit > 0 && c->seq_len > c->model.max_seq_len) c->model.max_seq_len = c->seq_len; // the ladder's own
    if (config_validate(c, c->world)) return -1;
    if (c->plan.fit > 0 && c->plan.time) {
        fprintf(stderr, "error: --time: not with --fit (one model at a time)\n");
        return -1;
    }
    for (int k = 0; k < CK_OPTIONS && !c->plan.time && !c->plan.calibrate; k++)
        if ((config_options()[k].uses & CU_WITH_TIME) && config_given(c, k)) {
            fprintf(stderr, "error: --%s: only with --time (the step-time prediction)\n", config_key_name(k));
            return -1;
        }
    return 0;
}

// ----------------------------------------------------------------------------------------
// --time: the step time (run/timemodel.h) of the planned run

// --calibrate LOG: the description fitted to the run, on stdout; the fit on stderr.
static inline int planner_calibrate(const TrainConfig *c) {
    Hardware hw;
    if (timemodel_hardware(c->plan.hardware, &hw)) return 1;
    TimeInput in;
    TmMeasured m;
    if (timemodel_calibrate(c->plan.calibrate, &hw, &in, &m)) return 1;
    TimeResult r;
    timemodel_step(&in, &hw, &r, NULL);
    fprintf(stderr, "calibrated on %s: matmuls at %.1f%% of peak, memory at %.1f%% of bandwidth%s; the run measured %.1f ms "
                    "per step (fwd %.1f, bwd %.1f, optim %.1f, exposed comm %.1f), the model now says %.1f (%.1f, %.1f, %.1f, %.1f)\n",
            c->plan.calibrate, 100 * hw.matmul_eff, 100 * hw.mem_eff, hw.inline_comm && in.world > 1 ? ", MPI's links fitted too" : "",
            m.ms, m.fwd, m.bwd, m.optim, m.exposed, r.step * 1e3, r.fwd * 1e3, r.bwd * 1e3, r.optim * 1e3, r.exposed * 1e3);
    timemodel_hardware_write(stdout, &hw);
    return 0;
}

static inline int planner_time(const TrainConfig *c, const MemoryPlan *p) {
    if (c->plan.params > 0) {
        fprintf(stderr, "error: --time: needs a GPT-2 shape (--model, or --layers/--channels/--heads), not --params\n");
        return 1;
    }
    Hardware hw;
    if (timemodel_hardware(c->plan.hardware, &hw)) return 1;
    TimeInput ti = planner_time_input(c);
    if (c->plan.network && timemodel_network(c->plan.network, &hw, tm_per_node(&ti, &hw))) return 1;
    const char *why = timemodel_problem(&ti, &hw);
    if (why) { fprintf(stderr, "error: --time: %s\n", why); return 1; }
    TimeResult r;
    timemodel_step(&ti, &hw, &r, NULL);
    if (c->trace_path) {
        char meta[256];
        snprintf(meta, sizeof(meta), "\"predicted\":true,\"hardware\":\"%s\",\"world\":%d,\"zero_stage\":%d,\"precision\":\"%s\"",
                 hw.name, ti.world, ti.zo.stage, zc_dtype_names[ti.zo.dtype]);
        if (timemodel_trace(c->trace_path, &ti, &hw, meta)) return 1;
    }
    if (c->plan.json) {
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

// --nvme-host-cache auto and --nvme-readahead auto (*cache, *ahead: bytes, or < 0 for auto,
// settled here): per rank, what this machine's available memory (/proc/meminfo's MemAvailable)
// leaves after nlocal ranks' plans with the budgets given (auto: 0) and a margin (a fifth of
// MemTotal, at least 4 GiB: other processes grow too), in whole 256 MiB (so that ranks reading
// it apart agree); 0 where the memory is unknown. Both auto: the host tier takes half of it (a
// byte there saves a read and a write each step) and the read-ahead the rest (a byte there hides
// a read behind the forward and backward), unless the delayed update runs on its helper thread
// (no read-ahead area: the host tier takes it all); each then cut to what the store allocates of
// it (its log line and the plan state the allocation).
static inline double planner_memory_left(const PlanInput *in, int nlocal) {
    MemoryPlan p;
    if (planner_plan(in, &p) != 0) return 0.0;
    int unified = in->backend && in->backend->unified;
    double used = p.host_total + (unified ? p.total : 0.0), avail = -1.0, total = -1.0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        double kb;
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) avail = kb * 1024.0;
        if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) total = kb * 1024.0;
    }
    if (f) fclose(f);
    if (avail < 0.0 || total < 0.0 || nlocal < 1) return 0.0;
    double margin = total / 5.0 > 4294967296.0 ? total / 5.0 : 4294967296.0;
    double left = (avail - margin) / nlocal - used, unit = 268435456.0;
    return left > unit ? floor(left / unit) * unit : 0.0;
}
static inline void planner_nvme_auto(const PlanInput *in, int nlocal, double *cache, double *ahead) {
    PlanInput base = *in;
    base.zo.nvme_host_cache = *cache > 0.0 ? (size_t)*cache : 0;
    base.zo.nvme_readahead = *ahead > 0.0 ? (size_t)*ahead : 0;
    if (!(*cache < 0.0) && !(*ahead < 0.0)) return;
    double left = planner_memory_left(&base, nlocal), unit = 268435456.0;
    // (the delayed update on its helper thread has no read-ahead area: zero/nvme_store.h's shape)
    int where[MEM_KINDS];
    zero_placement(&in->zo, in->backend && in->backend->unified, where);
    int split = *cache < 0.0 && *ahead < 0.0 && !zero_held_threaded(where, in->zo.delayed_update);
    double half = split ? floor(left / 2.0 / unit) * unit : left;
    int cache_auto = *cache < 0.0, ahead_auto = *ahead < 0.0;
    if (cache_auto) { *cache = half; left -= half; }
    if (ahead_auto) *ahead = left;
    // what the store takes of those budgets (whole pieces; the read-ahead at most the pieces before the
    // host tier's): the figures logged and planned are the allocation's (the same shape again)
    MemoryPlan p;
    base.zo.nvme_host_cache = (size_t)*cache; base.zo.nvme_readahead = (size_t)*ahead;
    if (planner_plan(&base, &p) != 0 || !p.exact) return;
    if (cache_auto) *cache = p.nvme_cache;
    if (ahead_auto) *ahead = p.nvme_readahead;
}

// Returns the process exit code: 0 (plan printed, or --help), 1 (bad options: one line on stderr).
// build: the binary's (run/config.h's ConfigBuild; NULL: the CPU trainer's), so that a plan
// refuses and warns as that binary's training runs do (the GPU trainer: LAMB, aio.use_gds), but
// in every precision: the GPU trainer runs each in a build of its own, and a plan describes them all.
static inline int planner_main(int argc, char **argv, const PlanBackend *backend, const ConfigBuild *build) {
    TrainConfig c;
    config_defaults(&c);
    ConfigBuild any_precision;
    if (build) {
        any_precision = *build;
        any_precision.precisions = (1u << ZC_F32) | (1u << ZC_BF16) | (1u << ZC_FP16);
        config_set_build(&c, &any_precision);
    }
    if (backend) c.precision = backend->default_precision;
    TrainConfig defaults = c;
    int rc = config_parse_as(&c, argc, argv, CU_PLAN);
    if (rc == 1) { planner_help(&defaults, argv[0]); return 0; }
    if (rc || planner_settle(&c)) return 1;
    if (c.plan.calibrate) return planner_calibrate(&c);
    PlanInput in = planner_input_from_train_config(&c, c.world, backend);
    double cache = c.nvme_host_cache_bytes, ahead = c.nvme_readahead_bytes; // (auto: < 0)
    planner_nvme_auto(&in, c.world, &cache, &ahead); // (all on this machine)
    in.zo.nvme_host_cache = (size_t)cache; in.zo.nvme_readahead = (size_t)ahead;
    const char *why = planner_input_problem(&in);
    if (why) { fprintf(stderr, "error: %s%s\n", why[0] == '-' ? "" : "model options: ", why); return 1; }
    if (c.plan.partitions) {
        if (c.plan.time || c.plan.fit > 0 || c.plan.json) {
            fprintf(stderr, "error: --partitions: not with --time, --fit or --json\n");
            return 1;
        }
        return planner_print_partitions(stdout, &in);
    }
    if (c.plan.fit > 0) return planner_fit(&in, c.plan.fit, c.plan.json);
    MemoryPlan p;
    planner_plan(&in, &p);
    if (c.plan.time) return planner_time(&c, &p);
    if (c.plan.json) planner_print_json(stdout, &p, NULL);
    else planner_print_table(stdout, &p, NULL, 0);
    return 0;
}

#endif // PLANNER_H
