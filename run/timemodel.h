// run/timemodel.h: how long one training step takes, here or on machines we do not have,
// predicted by running zero.h's own schedule against a simulated backend.
//
// Contract
//   The run (TimeInput): a GPT-2 shape, precision, optimizer, ZeRO stage, world size N and ranks
//   per node, micro-batch B x T, micro-steps per optimizer step, activation recompute, and where
//   the optimizer state and its update live (the device, the host, NVMe).
//   The machine (Hardware): per device, the dense matmul peak of each precision and the memory
//   bandwidth, and the fractions of both the kernels reach (stated with each description, or
//   calibrated); per device and direction, the bandwidth of the links inside a node and across
//   nodes, and the latency of one ring step on each; devices per node; for offload, PCIe, host
//   memory and NVMe bandwidth per device; and two properties of CPU machines: `shared` (the
//   ranks of a node share one device: its cores, memory bandwidth and links) and `inline_comm`
//   (a collective's data is moved by the threads that wait for it, as MPI does on CPUs: no
//   overlap with compute).
//   Built in (timemodel_hardware): a100-80gb-sxm and h100-80gb-sxm from public specifications,
//   this-machine measured and calibrated on this project's machine (tm_presets says what is
//   specified, assumed, measured and fitted). A FILE.json with the keys timemodel_hardware_write
//   prints describes any other; timemodel_calibrate fits one from a measured run's --log.
//   Networks (timemodel_network): ib-400 (one 400 Gb/s InfiniBand port per device) and eth-100
//   (one 100 Gb/s Ethernet port per node), replacing a description's links across nodes.
//
//   How (timemodel_step): zero_init builds rank 0's Zero over a simulated ZeroBackend whose
//   memory is never touched, and the trainer's calls are replayed in their order (tm_forward,
//   tm_backward and tm_train_step mirror core/model.h and run/trainer.h: the one piece written
//   twice; test_timemodel compares the collectives it produces, one by one, with a real run's
//   --trace). zero.h then starts, waits for and counts every collective exactly as in training.
//   All ranks do the same work, so rank 0 stands for all. Between the calls the simulated clock
//   advances by each unit's kernels:
//     matmuls and attention, FLOPs / (peak x matmul efficiency): a layer's forward
//       24 B T C^2 + 2 B T^2 C (causal attention computes half of the T x T products), its
//       backward twice that (a recomputed layer its forward once more); the tied LM head
//       2 B T C Vp forward and twice that backward;
//     everything else, bytes / (memory bandwidth x memory efficiency): twice a layer's
//       activations forward and four times backward (gpt2_activation_numels, without the T x T
//       probabilities), 3 B T Vp elements for the loss, the embeddings' and the final LayerNorm's
//       reads and writes, what zero.h asks of the backend (zeroing buckets, adding received
//       slices), the update (zero_update_bytes_per_element per element this rank owns) and the
//       gradient norm's read;
//     collectives, the ring model on two levels (tm_collective_seconds): inside a node of g ranks
//       a reduce-scatter or all-gather of M bytes moves M(g-1)/g per rank in g-1 steps; across n
//       nodes each rank's M/g share then moves (n-1)/n of it in n-1 steps; an all-reduce is both;
//       each step costs its level's latency. Per rank that is M(N-1)/N, zero.h's count. On a GPU
//       the collectives run one after another on their own stream beside the kernels, and the
//       clock waits only where zero.h waits; with inline_comm the waiting thread does the work.
//     offload: zero_init places every kind where the options say (Twin-Flow's split too; not the
//       delayed update), so zero/store.h's stores and zero/update.h's streamed update run their
//       own schedule (pieces, fetches ahead, writes behind, waits) over simulated lanes
//       (tm_backend; no memory is touched, no file made): a device with a host link (pcie_bw > 0)
//       has host memory beside it and one copy stream, each copy bytes / pcie_bw after the ones
//       before it, the host waiting for it (host_wait) or the compute stream (device_wait: the
//       next kernel or collective starts after it); without one (a CPU machine) the backend is
//       unified, as the CPU trainer's. The host's update of a piece: its bytes (as the device's)
//       at host_bw x memory efficiency. NVMe (core/nvme.h's NvmeSim, under zero/nvme_store.h): one
//       lane, each transfer bytes / nvme_bw after the ones before it and not before it was
//       handed, beside the clock (reads ahead during the forward and backward, writes behind),
//       a wait holding the clock until it ends; with NVMe a step is run first, so that the one
//       predicted starts as a run's later steps do (reads ahead across the boundary, writes of
//       the last update still draining, gather slots kept). offload: seconds of the host's
//       update and the copies; nvme: the step's bytes read and written (counted as the trainer's
//       log counts them) at nvme_bw.
//     ZeRO++ (TimeInput's zeropp_*; a host is a node): its collectives are zero/pp.h's own, so
//       their bytes are zero.h's count, split inside the node and across nodes. A group
//       all-gather of M bytes over m members, gn of them per node, is the ring above over m ranks
//       gn per node (hpZ's group inside a node: only the inside link); an all-to-all of `bytes` to
//       each of m members sends (gn - 1) of them over the inside link and m - gn across, one
//       latency per level used (tm_all_to_all_seconds). Quantizing reads the elements and writes
//       the message; dequantizing (and adding) reads the message (and the sums) and writes.
//     shared devices: a rank's compute and memory time scale with the ranks on the node (they
//       share the cores); a collective's with max(1, ranks on the node / cores).
//   A Trace (core/trace.h) on the simulated clock records it all, so a prediction has the step
//   log's own terms (fwd, bwd, optim, comm in flight, exposed comm), and timemodel_trace writes
//   the timeline a run's --trace would.
// C11 and C++; no global state. Uses cJSON (descriptions, calibration logs).
#ifndef TIMEMODEL_H
#define TIMEMODEL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "core/trace.h"
#include "zero.h"

typedef struct {
    GPT2Config cfg;
    ZeroOptions zo;        // ZeRO's settings, as the trainer hands them to zero_init (run/config.h's
                           // config_zero_options): stage, dtype, optimizer, ZeRO++, offload and NVMe's
                           // buffers (the delayed update: not modelled)
    int world, per_node;   // per_node 0: the hardware's devices per node
    int batch, seq_len, accum, recompute;
} TimeInput;

typedef struct {
    char name[96];
    double peak[ZC_NUM_DTYPES];     // dense matmul FLOP/s of one device, by precision (ZC_F32, ZC_BF16, ZC_FP16)
    double mem_bw;                  // bytes/s of one device's memory
    double matmul_eff, mem_eff;     // the fractions of peak and bandwidth the kernels reach
    double intra_bw, intra_lat;     // inside a node: bytes/s per device, one direction; seconds per ring step
    double inter_bw, inter_lat;     // across nodes, the same
    double launch_lat;              // seconds of the issuing thread per collective it starts
    int per_node, cores;            // devices per node; a shared device's cores
    int shared, inline_comm;        // see the contract
    double pcie_bw, host_bw, nvme_bw; // per device: host link, host memory for the update, NVMe
    char source[400];               // where the numbers come from
} Hardware;

// ----------------------------------------------------------------------------------------
// Descriptions

#define TM_GBIT (1e9 / 8)
// An NVIDIA SXM GPU of a DGX/HGX-like node: 8 per node, NVLink inside it, one 400 Gb/s InfiniBand
// NDR port per GPU across nodes; peaks dense (no sparsity).
static inline void tm_gpu(Hardware *h, const char *name, double fp32, double bf16, double hbm, double nvlink, double pcie,
                          const char *specs) {
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->peak[ZC_F32] = fp32; h->peak[ZC_BF16] = h->peak[ZC_FP16] = bf16;
    h->mem_bw = hbm;
    h->matmul_eff = 0.75; h->mem_eff = 0.8;
    h->intra_bw = nvlink / 2; h->intra_lat = 5e-6;     // NVLink's figure counts both directions
    h->inter_bw = 400 * TM_GBIT; h->inter_lat = 10e-6;
    h->launch_lat = 5e-6;
    h->per_node = 8;
    h->pcie_bw = pcie; h->host_bw = 50e9; h->nvme_bw = 3e9;
    snprintf(h->source, sizeof(h->source), "specifications: %s; assumed: 75%% of peak in matmuls, 80%% of bandwidth "
             "elsewhere, 5/10 us per ring step, 5 us to launch a collective, 50 GB/s of host memory and 3 GB/s of NVMe "
             "per GPU", specs);
}
static inline void tm_preset_a100(Hardware *h) {
    tm_gpu(h, "a100-80gb-sxm", 19.5e12, 312e12, 2.0e12, 600e9, 32e9,
           "peaks (dense), HBM2e 2.0 TB/s, NVLink 600 GB/s, PCIe 4.0 x16");
}
static inline void tm_preset_h100(Hardware *h) {
    tm_gpu(h, "h100-80gb-sxm", 67e12, 989e12, 3.35e12, 900e9, 64e9,
           "peaks (dense), HBM3 3.35 TB/s, NVLink 900 GB/s, PCIe 5.0 x16");
}
// This project's machine: 2 cores of an AMD EPYC (Zen 4). Peaks measured by `make bench`
// (VDPBF16PS and FMA with operands in registers); the matmul efficiency, the memory bandwidth
// (at efficiency 1: the run moved AdamW's bytes faster than make bench's in-place figure of
// 46-93 GB/s) and the MPI bandwidth fitted by timemodel_calibrate to one run
// (`scripts/measure.sh timemodel`, 2026-11-24: 2 ranks, ZeRO-3, d12 bf16 B=4 T=64; docs/scaling.md);
// the disk measured with direct I/O. `--calibrate` fits them again to any run's log.
static inline void tm_preset_this_machine(Hardware *h) {
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "this-machine");
    h->peak[ZC_F32] = 230e9; h->peak[ZC_BF16] = 455e9; h->peak[ZC_FP16] = 230e9; // fp16 computes in fp32 here
    h->mem_bw = 74.7e9;
    h->matmul_eff = 0.765; h->mem_eff = 1.0;
    h->intra_bw = 2.64e9; h->intra_lat = 10e-6;
    h->inter_bw = 2.64e9; h->inter_lat = 10e-6;
    h->launch_lat = 5e-6;
    h->per_node = 1 << 20; h->cores = 2;
    h->shared = 1; h->inline_comm = 1;
    h->pcie_bw = 0; h->host_bw = 60e9; h->nvme_bw = 0.9e9;
    snprintf(h->source, sizeof(h->source), "measured (make bench): peaks; fitted to one run (scripts/measure.sh timemodel, "
             "2026-11-24): matmul efficiency, memory and MPI bandwidth; assumed: 10 us per ring step");
}

typedef struct { const char *name; void (*fill)(Hardware *); } TmPreset;
static inline const TmPreset *tm_presets(int *n) {
    static const TmPreset p[] = {{"a100-80gb-sxm", tm_preset_a100}, {"h100-80gb-sxm", tm_preset_h100},
                                 {"this-machine", tm_preset_this_machine}};
    *n = (int)(sizeof(p) / sizeof(p[0]));
    return p;
}

// The keys of a description file, in order, with where each lives.
typedef struct { const char *key; size_t off; int is_int; } TmKey;
#define TM_D(f) offsetof(Hardware, f)
static const TmKey tm_keys[] = {
    {"peak_flops_fp32", TM_D(peak) + ZC_F32 * sizeof(double), 0}, {"peak_flops_bf16", TM_D(peak) + ZC_BF16 * sizeof(double), 0},
    {"peak_flops_fp16", TM_D(peak) + ZC_FP16 * sizeof(double), 0}, {"memory_bandwidth", TM_D(mem_bw), 0},
    {"matmul_efficiency", TM_D(matmul_eff), 0}, {"memory_efficiency", TM_D(mem_eff), 0},
    {"intra_node_bandwidth", TM_D(intra_bw), 0}, {"intra_node_latency", TM_D(intra_lat), 0},
    {"inter_node_bandwidth", TM_D(inter_bw), 0}, {"inter_node_latency", TM_D(inter_lat), 0},
    {"collective_launch_latency", TM_D(launch_lat), 0},
    {"devices_per_node", TM_D(per_node), 1}, {"cores", TM_D(cores), 1}, {"shared", TM_D(shared), 1},
    {"inline_comm", TM_D(inline_comm), 1}, {"pcie_bandwidth", TM_D(pcie_bw), 0}, {"host_bandwidth", TM_D(host_bw), 0},
    {"nvme_bandwidth", TM_D(nvme_bw), 0}};
#undef TM_D
#define TM_NKEYS ((int)(sizeof(tm_keys) / sizeof(tm_keys[0])))

static inline void timemodel_hardware_write(FILE *f, const Hardware *h) {
    fprintf(f, "{\n  \"name\": \"%s\",\n", h->name);
    for (int k = 0; k < TM_NKEYS; k++) {
        const char *p = (const char *)h + tm_keys[k].off;
        if (tm_keys[k].is_int) fprintf(f, "  \"%s\": %d,\n", tm_keys[k].key, *(const int *)p);
        else fprintf(f, "  \"%s\": %.6g,\n", tm_keys[k].key, *(const double *)p);
    }
    fprintf(f, "  \"source\": ");
    trace_json_string(f, h->source);
    fprintf(f, "\n}\n");
}

// A description file: every key above, "name", optionally "source". Returns 0, or -1 after one
// line naming the file and the key.
static inline int timemodel_hardware_read(const char *path, Hardware *h) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "error: --hardware %s: no such description (built in: a100-80gb-sxm, h100-80gb-sxm, "
                              "this-machine) and no such file\n", path); return -1; }
    char buf[16384];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    if (!o || !cJSON_IsObject(o)) { cJSON_Delete(o); fprintf(stderr, "error: --hardware %s: not a JSON object\n", path); return -1; }
    memset(h, 0, sizeof(*h));
    int bad = 0;
    for (cJSON *e = o->child; e && !bad; e = e->next) {
        int k = 0;
        while (k < TM_NKEYS && strcmp(tm_keys[k].key, e->string)) k++;
        if (!strcmp(e->string, "name") || !strcmp(e->string, "source")) {
            if (!cJSON_IsString(e)) { fprintf(stderr, "error: --hardware %s: \"%s\" must be a string\n", path, e->string); bad = 1; }
            else if (e->string[0] == 'n') snprintf(h->name, sizeof(h->name), "%s", e->valuestring);
            else snprintf(h->source, sizeof(h->source), "%s", e->valuestring);
        } else if (k == TM_NKEYS) {
            fprintf(stderr, "error: --hardware %s: unknown key \"%s\"\n", path, e->string); bad = 1;
        } else if (!cJSON_IsNumber(e) || e->valuedouble < 0 || (tm_keys[k].is_int && e->valuedouble != floor(e->valuedouble))) {
            fprintf(stderr, "error: --hardware %s: \"%s\" must be a %snumber >= 0\n", path, e->string,
                    tm_keys[k].is_int ? "whole " : ""); bad = 1;
        } else if (tm_keys[k].is_int) *(int *)((char *)h + tm_keys[k].off) = (int)e->valuedouble;
        else *(double *)((char *)h + tm_keys[k].off) = e->valuedouble;
    }
    for (int k = 0; k < TM_NKEYS && !bad; k++)
        if (!cJSON_GetObjectItemCaseSensitive(o, tm_keys[k].key)) {
            fprintf(stderr, "error: --hardware %s: \"%s\" is missing\n", path, tm_keys[k].key); bad = 1;
        }
    if (!bad && !cJSON_GetObjectItemCaseSensitive(o, "name")) snprintf(h->name, sizeof(h->name), "%s", path);
    const char *why = NULL;
    if (!bad && (h->peak[ZC_F32] <= 0 || h->peak[ZC_BF16] <= 0 || h->peak[ZC_FP16] <= 0)) why = "the peaks must be positive";
    else if (!bad && (h->mem_bw <= 0 || h->intra_bw <= 0 || h->inter_bw <= 0)) why = "bandwidths must be positive";
    else if (!bad && (h->matmul_eff <= 0 || h->matmul_eff > 1 || h->mem_eff <= 0 || h->mem_eff > 1)) why = "efficiencies must be in (0, 1]";
    else if (!bad && (h->per_node < 1 || (h->shared && h->cores < 1))) why = "devices_per_node (and cores, when shared) must be at least 1";
    if (why) { fprintf(stderr, "error: --hardware %s: %s\n", path, why); bad = 1; }
    cJSON_Delete(o);
    return bad ? -1 : 0;
}

// NAME (built in) or FILE.json.
static inline int timemodel_hardware(const char *name, Hardware *h) {
    int n;
    const TmPreset *p = tm_presets(&n);
    for (int i = 0; i < n; i++) if (!strcmp(name, p[i].name)) { p[i].fill(h); return 0; }
    return timemodel_hardware_read(name, h);
}

// --network: the links across nodes. ib-400: one 400 Gb/s InfiniBand NDR port per device;
// eth-100: one 100 Gb/s Ethernet port per node, shared by its devices.
static inline int timemodel_network(const char *name, Hardware *h, int per_node) {
    if (!strcmp(name, "ib-400")) { h->inter_bw = 400 * TM_GBIT; h->inter_lat = 10e-6; }
    else if (!strcmp(name, "eth-100")) { h->inter_bw = 100 * TM_GBIT / per_node; h->inter_lat = 30e-6; }
    else { fprintf(stderr, "error: --network: '%s' is not ib-400 or eth-100\n", name); return -1; }
    char add[64];
    snprintf(add, sizeof(add), " + %s", name);
    if (strlen(h->name) + strlen(add) < sizeof(h->name)) strcat(h->name, add);
    return 0;
}

// ----------------------------------------------------------------------------------------
// The ring model

// Ranks per node the run uses.
static inline int tm_per_node(const TimeInput *in, const Hardware *hw) {
    int g = in->per_node > 0 ? in->per_node : hw->per_node;
    return g < in->world ? g : in->world;
}

// Seconds of one collective (ZC_*) of M bytes (the whole buffer: what an all-reduce reduces, a
// reduce-scatter scatters, an all-gather gathers) over `world` ranks, g per node.
static inline double tm_collective_seconds(const Hardware *hw, int kind, double M, int world, int g) {
    if (world <= 1) return 0.0;
    if (g < 1) g = 1;
    if (g > world) g = world;
    int n = world / g;
    double slow = hw->shared && hw->cores > 0 && g > hw->cores ? (double)g / hw->cores : 1.0; // ranks sharing cores
    double t = 0.0;
    if (g > 1) t += (g - 1) * hw->intra_lat + M * (g - 1) / g / hw->intra_bw * slow;
    if (n > 1) t += (n - 1) * hw->inter_lat + M / g * (n - 1) / n / hw->inter_bw * slow;
    return kind == ZC_ALL_REDUCE ? 2.0 * t : t;
}

// An all-to-all: `bytes` to each of m members, gn of them per node (ZeRO++'s qgZ).
static inline double tm_all_to_all_seconds(const Hardware *hw, double bytes, int m, int gn) {
    if (m <= 1) return 0.0;
    if (gn < 1) gn = 1;
    if (gn > m) gn = m;
    double slow = hw->shared && hw->cores > 0 && gn > hw->cores ? (double)gn / hw->cores : 1.0;
    double t = 0.0;
    if (gn > 1) t += hw->intra_lat + bytes * (gn - 1) / hw->intra_bw * slow;
    if (m > gn) t += hw->inter_lat + bytes * (m - gn) / hw->inter_bw * slow;
    return t;
}

// ----------------------------------------------------------------------------------------
// The simulated backend

#define TM_HANDLES 4096
typedef struct {
    const Hardware *hw;
    const TimeInput *in;
    Zero *z;
    int per_node;
    double share;              // the fraction of a device this rank computes with
    double now, comm_free;     // the rank's clock; when the collectives' stream is free
    double done[TM_HANDLES], work[TM_HANDLES], lat[TM_HANDLES];
    int next;
    // offload: the copy stream (PCIe, one lane: when it is free, each copy's end), when the compute
    // stream may run again (a device_wait's copy), NVMe's lane and each transfer's end
    double pcie_free, copy_done[TM_HANDLES], device_ready, nvme_free, *nvme_done;
    int next_copy, nvme_count, nvme_cap;
    NvmeSim nvme;
    int phase;                 // TM_PHASE_*: what the clock's time is charged to
    // seconds, at the description's efficiencies and bandwidths
    double matmul_s, memory_s, memory_opt_s, memory_out_s, comm_s, comm_lat_s, comm_out_s, comm_out_lat_s, comm_opt_s,
           comm_opt_lat_s, offload_s, launch_s;
    double flops;
} TimeSim;
enum { TM_PHASE_OTHER, TM_PHASE_PASS, TM_PHASE_OPT };

static inline double tm_clock(void *ctx) { return ((TimeSim *)ctx)->now; }

// The compute stream waits for the copies it was told to (device_wait).
static inline void tm_device(TimeSim *s) { if (s->now < s->device_ready) s->now = s->device_ready; }
static inline void tm_flops(TimeSim *s, double flops) {
    tm_device(s);
    double t = flops / (s->hw->peak[s->in->zo.dtype] * s->hw->matmul_eff * s->share);
    s->flops += flops;
    s->matmul_s += t;
    s->now += t;
}
static inline void tm_bytes(TimeSim *s, double bytes) {
    tm_device(s);
    double t = bytes / (s->hw->mem_bw * s->hw->mem_eff * s->share);
    s->memory_s += t;
    if (s->phase == TM_PHASE_OPT) s->memory_opt_s += t;
    if (s->phase == TM_PHASE_OTHER) s->memory_out_s += t;
    s->now += t;
}

// Collective work: where it is charged (for calibration) and, inline, done now.
static inline void tm_comm_charge(TimeSim *s, double work, double lat) {
    s->comm_s += work; s->comm_lat_s += lat;
    if (s->phase == TM_PHASE_OTHER) { s->comm_out_s += work; s->comm_out_lat_s += lat; }
    if (s->phase == TM_PHASE_OPT) { s->comm_opt_s += work; s->comm_opt_lat_s += lat; }
}
// kind -1: an all-to-all of M bytes to each member. m members, gn per node.
static inline int tm_issue_group(TimeSim *s, int kind, double M, int m, int gn) {
    s->now += s->hw->launch_lat; // the issuing thread's call
    s->launch_s += s->hw->launch_lat;
    int h = s->next;
    s->next = (s->next + 1) % TM_HANDLES;
    Hardware nolat = *s->hw;
    nolat.intra_lat = nolat.inter_lat = 0.0;
    if (kind < 0) {
        s->work[h] = tm_all_to_all_seconds(s->hw, M, m, gn);
        s->lat[h] = s->work[h] - tm_all_to_all_seconds(&nolat, M, m, gn);
    } else {
        s->work[h] = tm_collective_seconds(s->hw, kind, M, m, gn);
        s->lat[h] = s->work[h] - tm_collective_seconds(&nolat, kind, M, m, gn);
    }
    if (!s->hw->inline_comm) {
        double start = s->now > s->comm_free ? s->now : s->comm_free;
        if (start < s->device_ready) start = s->device_ready; // (after the copies the stream waits for)
        s->done[h] = s->comm_free = start + s->work[h];
        tm_comm_charge(s, s->work[h], s->lat[h]);
    }
    return h;
}
static inline int tm_issue(TimeSim *s, int kind, double M) { return tm_issue_group(s, kind, M, s->in->world, s->per_node); }
static inline int tm_all_reduce(void *ctx, void *buf, size_t n, int dtype) {
    (void)buf;
    return tm_issue((TimeSim *)ctx, ZC_ALL_REDUCE, (double)n * zc_dtype_size(dtype));
}
static inline int tm_reduce_scatter(void *ctx, void *send, void *recv, size_t n, int dtype) {
    (void)send; (void)recv;
    TimeSim *s = (TimeSim *)ctx;
    return tm_issue(s, ZC_REDUCE_SCATTER, (double)n * s->in->world * zc_dtype_size(dtype));
}
static inline int tm_all_gather(void *ctx, const void *send, void *recv, size_t n, int dtype) {
    (void)send; (void)recv;
    TimeSim *s = (TimeSim *)ctx;
    return tm_issue(s, ZC_ALL_GATHER, (double)n * s->in->world * zc_dtype_size(dtype));
}
static inline double tm_wait(void *ctx, int h, const char *what) {
    (void)what;
    TimeSim *s = (TimeSim *)ctx;
    if (s->hw->inline_comm) { // the waiting thread moves the data
        tm_comm_charge(s, s->work[h], s->lat[h]);
        s->now += s->work[h];
        return s->now;
    }
    if (s->done[h] > s->now) s->now = s->done[h];
    return s->done[h];
}
static inline void tm_set_step(void *ctx, int step) { (void)ctx; (void)step; }
static inline void tm_progress(void *ctx) { (void)ctx; }
static inline void tm_sum_doubles(void *ctx, double *x, int n) { // blocking, after the collectives issued
    (void)x;
    TimeSim *s = (TimeSim *)ctx;
    Hardware nolat = *s->hw;
    nolat.intra_lat = nolat.inter_lat = 0.0;
    double M = n * sizeof(double), w = tm_collective_seconds(s->hw, ZC_ALL_REDUCE, M, s->in->world, s->per_node);
    tm_comm_charge(s, w, w - tm_collective_seconds(&nolat, ZC_ALL_REDUCE, M, s->in->world, s->per_node));
    if (!s->hw->inline_comm && s->comm_free > s->now) s->now = s->comm_free;
    s->now += w;
}
// zero_init's memory: never read or written, so one address stands for every buffer.
static inline void *tm_alloc(void *ctx, size_t bytes) {
    (void)ctx; (void)bytes;
    static char nowhere[64];
    return nowhere;
}
static inline void tm_free(void *ctx, void *p) { (void)ctx; (void)p; }
static inline void tm_zero(void *ctx, void *p, size_t bytes) { (void)p; tm_bytes((TimeSim *)ctx, (double)bytes); }
static inline void tm_add(void *ctx, void *dst, const void *src, size_t n, int dtype) {
    (void)dst; (void)src;
    tm_bytes((TimeSim *)ctx, 3.0 * n * zc_dtype_size(dtype));
}
static inline void tm_to_host(void *ctx, float *host, const void *src, size_t n, int dtype) {
    (void)ctx; (void)host; (void)src; (void)n; (void)dtype;
}
static inline void tm_from_host(void *ctx, void *dst, const float *host, size_t n, int dtype) {
    (void)ctx; (void)dst; (void)host; (void)n; (void)dtype;
}
// The bytes an update of n elements moves: an optimizer with per-tensor reductions (LAMB) reads
// the gradient, weights and state once more before its update (zero.h's reduction pass; the
// backend here has no reduce: charged here).
static inline double tm_update_bytes(const TimeSim *s, size_t n, int dtype) {
    double bytes = zero_update_bytes_per_element(s->z) * n;
    if (optimizer_reductions(s->z->optimizer) > 0)
        bytes += (4.0 + 4.0 * s->z->nstate + (double)zc_dtype_size(dtype)) * n;
    return bytes;
}
// The update of n elements on the device.
static inline void tm_update(void *ctx, const OptStep *step, float *p, float *const *state, const void *g, void *p16,
                             size_t n, int dtype, int decay) {
    (void)step; (void)p; (void)state; (void)g; (void)p16; (void)decay;
    TimeSim *s = (TimeSim *)ctx;
    tm_bytes(s, tm_update_bytes(s, n, dtype));
}
// ... and on the host (the streamed update's pieces), at the host's bandwidth.
static inline void tm_host_update(void *ctx, const OptStep *step, float *p, float *const *state, const void *g,
                                  void *p16, size_t n, int dtype, int decay) {
    (void)step; (void)p; (void)state; (void)g; (void)p16; (void)decay;
    TimeSim *s = (TimeSim *)ctx;
    double t = tm_update_bytes(s, n, dtype) / (s->hw->host_bw * s->hw->mem_eff * s->share);
    s->offload_s += t;
    s->now += t;
}
// Host memory (never touched) and the copy stream: each copy on the one PCIe lane after the
// ones before it and after what the compute stream was handed (the clock), at pcie_bw.
static inline void *tm_host_alloc(void *ctx, size_t bytes, int pinned) { (void)pinned; return tm_alloc(ctx, bytes); }
static inline void tm_host_free(void *ctx, void *p, int pinned) { (void)ctx; (void)p; (void)pinned; }
static inline int tm_copy(TimeSim *s, size_t bytes) {
    double start = s->now > s->pcie_free ? s->now : s->pcie_free, t = (double)bytes / s->hw->pcie_bw;
    int h = s->next_copy;
    s->next_copy = (s->next_copy + 1) % TM_HANDLES;
    s->copy_done[h] = s->pcie_free = start + t;
    s->offload_s += t;
    return h;
}
static inline int tm_copy_to_host(void *ctx, void *host, const void *src, size_t bytes) {
    (void)host; (void)src;
    return tm_copy((TimeSim *)ctx, bytes);
}
static inline int tm_copy_to_device(void *ctx, void *dst, const void *host, size_t bytes) {
    (void)dst; (void)host;
    return tm_copy((TimeSim *)ctx, bytes);
}
static inline void tm_host_wait(void *ctx, int copy, const char *what) {
    (void)what;
    TimeSim *s = (TimeSim *)ctx;
    if (s->now < s->copy_done[copy]) s->now = s->copy_done[copy];
}
static inline void tm_device_wait(void *ctx, int copy) {
    TimeSim *s = (TimeSim *)ctx;
    if (s->device_ready < s->copy_done[copy]) s->device_ready = s->copy_done[copy];
}
// NVMe (core/nvme.h's NvmeSim): one lane at nvme_bw (shared by a node's ranks on a shared
// device), each transfer after the ones before it (reads and writes in the order handed) and
// not before it was handed; a wait holds the clock until it ends.
static inline int tm_nvme_submit(void *ctx, double bytes, int writing, double *start, double *done) {
    (void)writing;
    TimeSim *s = (TimeSim *)ctx;
    if (s->nvme_count == s->nvme_cap) {
        s->nvme_cap = s->nvme_cap ? 2 * s->nvme_cap : 1024;
        s->nvme_done = (double *)realloc(s->nvme_done, (size_t)s->nvme_cap * sizeof(double));
        if (!s->nvme_done) { fprintf(stderr, "error: the step-time model: out of memory\n"); exit(1); }
    }
    *start = s->now > s->nvme_free ? s->now : s->nvme_free;
    *done = s->nvme_free = *start + bytes / (s->hw->nvme_bw * s->share);
    s->nvme_done[s->nvme_count] = *done;
    return s->nvme_count++;
}
static inline void tm_nvme_wait(void *ctx, int ticket) {
    TimeSim *s = (TimeSim *)ctx;
    if (s->now < s->nvme_done[ticket]) s->now = s->nvme_done[ticket];
}
static inline int tm_nvme_done(void *ctx, int ticket) {
    TimeSim *s = (TimeSim *)ctx;
    return s->nvme_done[ticket] <= s->now;
}

// ZeRO++ (zero/backend.h): a node is a host; a group's members and how many share a node.
static inline int tm_host_size(void *ctx) { return ((TimeSim *)ctx)->per_node; }
static inline void tm_group_shape(const TimeSim *s, int group, int g, int *m, int *gn) {
    int world = s->in->world, L = s->per_node;
    if (group == ZB_WORLD) { *m = world; *gn = L; return; }
    if (group == ZB_INNER) { *m = g; *gn = g < L ? g : L; return; }
    *m = world / g; *gn = g >= L ? 1 : L / g; // ranks r % g + k g: L / g of them on each node
}
static inline int tm_group_all_gather(void *ctx, int group, int g, const void *send, void *recv, size_t bytes) {
    (void)send; (void)recv;
    TimeSim *s = (TimeSim *)ctx;
    int m, gn;
    tm_group_shape(s, group, g, &m, &gn);
    return tm_issue_group(s, ZC_ALL_GATHER, (double)bytes * m, m, gn);
}
static inline int tm_group_all_to_all(void *ctx, int group, int g, const void *send, void *recv, size_t bytes) {
    (void)send; (void)recv;
    TimeSim *s = (TimeSim *)ctx;
    int m, gn;
    tm_group_shape(s, group, g, &m, &gn);
    return tm_issue_group(s, -1, (double)bytes, m, gn);
}
static inline void tm_quantize(void *ctx, void *msg, const void *src, size_t n, int dtype, size_t block, int bits) {
    (void)msg; (void)src;
    tm_bytes((TimeSim *)ctx, (double)n * zc_dtype_size(dtype) + (double)zq_bytes(n, block, bits));
}
static inline void tm_dequantize(void *ctx, void *dst, int dtype, const void *msg, size_t n, size_t block, int bits) {
    (void)dst; (void)msg;
    tm_bytes((TimeSim *)ctx, (double)n * zc_dtype_size(dtype) + (double)zq_bytes(n, block, bits));
}
static inline void tm_dequantize_add(void *ctx, float *acc, const void *msg, size_t n, size_t block, int bits) {
    (void)acc; (void)msg;
    tm_bytes((TimeSim *)ctx, 8.0 * n + (double)zq_bytes(n, block, bits));
}
static inline void tm_convert(void *ctx, void *dst, int dst_dtype, const void *src, int src_dtype, size_t n) {
    (void)dst; (void)src;
    tm_bytes((TimeSim *)ctx, (double)n * (zc_dtype_size(dst_dtype) + zc_dtype_size(src_dtype)));
}

static inline void tm_fatal(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "error: the step-time model: %s\n", msg);
    exit(1);
}
// A device with a host link (pcie_bw > 0: a GPU) has host memory and copies beside it; without
// one (a CPU machine) the backend is unified, as the CPU trainer's: offloading to the host moves
// nothing. The host's update and NVMe are simulated (zero/backend.h's host_update, nvme_sim).
static inline ZeroBackend tm_backend(TimeSim *s) {
    ZeroBackend be;
    memset(&be, 0, sizeof(be));
    be.ctx = s; be.all_reduce = tm_all_reduce; be.reduce_scatter = tm_reduce_scatter; be.all_gather = tm_all_gather;
    be.wait = tm_wait; be.set_step = tm_set_step; be.progress = tm_progress; be.sum_doubles = tm_sum_doubles;
    be.alloc = tm_alloc; be.free = tm_free; be.zero = tm_zero; be.add = tm_add; be.to_host = tm_to_host;
    be.from_host = tm_from_host; be.update = tm_update; be.fatal = tm_fatal;
    be.unified = !(s->hw->pcie_bw > 0);
    if (!be.unified) {
        be.host_alloc = tm_host_alloc; be.host_free = tm_host_free; be.copy_to_host = tm_copy_to_host;
        be.copy_to_device = tm_copy_to_device; be.host_wait = tm_host_wait; be.device_wait = tm_device_wait;
    }
    be.host_update = tm_host_update;
    s->nvme.ctx = s; s->nvme.submit = tm_nvme_submit; s->nvme.wait = tm_nvme_wait; s->nvme.done = tm_nvme_done;
    be.nvme_sim = &s->nvme;
    be.host_size = tm_host_size; be.group_all_gather = tm_group_all_gather; be.group_all_to_all = tm_group_all_to_all;
    be.quantize = tm_quantize; be.dequantize = tm_dequantize; be.dequantize_add = tm_dequantize_add; be.convert = tm_convert;
    return be;
}

// ----------------------------------------------------------------------------------------
// The work of each unit (one micro-step of B x T on this rank)

typedef struct { double flops, bytes; } TmWork;
typedef struct { TmWork embed_fwd, embed_bwd, layer_fwd, layer_bwd, final_fwd, final_bwd, head_fwd, head_bwd; } TmCosts;
static inline TmWork tm_work(double flops, double bytes) { TmWork w = {flops, bytes}; return w; }

static inline TmCosts tm_costs(const TimeInput *in) {
    const GPT2Config *c = &in->cfg;
    double B = in->batch, T = in->seq_len, N = B * T, C = c->channels, L = c->num_layers, Vp = c->padded_vocab_size;
    double e = in->zo.dtype == ZC_F32 ? 4.0 : 2.0;
    size_t n[NUM_ACTIVATIONS];
    gpt2_activation_numels(c, in->batch, in->seq_len, n);
    double layer_bytes = 0.0; // one layer's activations, at their element sizes, without the T x T probabilities
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (gpt2_activation_is_layered(i) && i != A_ATT) layer_bytes += n[i] / L * (gpt2_activation_is_fp32(i) ? 4.0 : e);
    TmCosts k;
    double lf = 24.0 * N * C * C + 2.0 * B * T * T * C;
    k.layer_fwd = tm_work(lf, 2.0 * layer_bytes);
    k.layer_bwd = tm_work(2.0 * lf, 4.0 * layer_bytes);
    k.embed_fwd = tm_work(0.0, 3.0 * N * C * e);      // a row of wte and of wpe read, the sum written
    k.embed_bwd = tm_work(0.0, 4.0 * N * C * e);      // the gradient read, added into two rows
    k.final_fwd = tm_work(0.0, 2.0 * N * C * e);
    k.final_bwd = tm_work(0.0, 4.0 * N * C * e);
    k.head_fwd = tm_work(2.0 * N * C * Vp, 3.0 * N * Vp * e); // the logits written, read and their gradient written
    k.head_bwd = tm_work(4.0 * N * C * Vp, 0.0);
    return k;
}
static inline void tm_run(TimeSim *s, TmWork w) {
    if (w.flops > 0) tm_flops(s, w.flops);
    if (w.bytes > 0) tm_bytes(s, w.bytes);
}

// The passes, hook by hook in core/model.h's order (the storage hooks are zero.h's calls).
static inline void tm_forward(TimeSim *s, Zero *z, const TmCosts *k) {
    Trace *tr = z->trace;
    int L = s->in->cfg.num_layers, F = gpt2_unit_of_layer(L);
    double t = trace_begin(tr, "forward", TRACE_FORWARD, UNIT_EMBED, 0.0);
    zero_params(z, UNIT_EMBED, gpt2_unit_of_layer(0));
    tm_run(s, k->embed_fwd);
    trace_end(tr, t);
    for (int l = 0; l < L; l++) {
        int u = gpt2_unit_of_layer(l);
        t = trace_begin(tr, "forward", TRACE_FORWARD, u, 0.0);
        zero_params(z, u, u + 1);
        tm_run(s, k->layer_fwd);
        trace_end(tr, t);
    }
    t = trace_begin(tr, "forward", TRACE_FORWARD, F, 0.0);
    zero_params(z, F, -1);
    tm_run(s, k->final_fwd);
    trace_end(tr, t);
    t = trace_begin(tr, "lm_head", TRACE_FORWARD, UNIT_EMBED, 0.0);
    zero_params(z, UNIT_EMBED, -1);
    tm_run(s, k->head_fwd);
    trace_end(tr, t);
}
static inline void tm_backward(TimeSim *s, Zero *z, const TmCosts *k) {
    Trace *tr = z->trace;
    int L = s->in->cfg.num_layers, F = gpt2_unit_of_layer(L);
    double t = trace_begin(tr, "lm_head", TRACE_BACKWARD, UNIT_EMBED, 0.0);
    zero_params(z, UNIT_EMBED, -1);
    zero_grads(z, UNIT_EMBED);
    zero_params(z, F, gpt2_unit_of_layer(L - 1));
    zero_grads(z, F);
    tm_run(s, k->head_bwd);
    trace_end(tr, t);
    t = trace_begin(tr, "backward", TRACE_BACKWARD, F, 0.0);
    tm_run(s, k->final_bwd);
    zero_grads_done(z, F);
    trace_end(tr, t);
    for (int l = L - 1; l >= 0; l--) {
        int u = gpt2_unit_of_layer(l);
        t = trace_begin(tr, "backward", TRACE_BACKWARD, u, 0.0);
        zero_params(z, u, l > 0 ? u - 1 : -1);
        zero_grads(z, u);
        if (s->in->recompute) {
            double r = trace_begin(tr, "recompute", TRACE_RECOMPUTE, u, 0.0);
            tm_run(s, k->layer_fwd);
            trace_end(tr, r);
        }
        tm_run(s, k->layer_bwd);
        zero_grads_done(z, u);
        trace_end(tr, t);
    }
    t = trace_begin(tr, "backward", TRACE_BACKWARD, UNIT_EMBED, 0.0);
    tm_run(s, k->embed_bwd);
    zero_grads_done(z, UNIT_EMBED);
    trace_end(tr, t);
    zero_end_backward(z);
}
// One optimizer step in run/trainer.h's order (train_step).
static inline void tm_train_step(TimeSim *s, Zero *z) {
    Trace *tr = z->trace;
    TmCosts k = tm_costs(s->in);
    zero_begin_step(z, 1);
    for (int micro = 0; micro < s->in->accum; micro++) {
        trace_set_micro(tr, micro);
        zero_begin_forward(z, micro, s->in->accum);
        s->phase = TM_PHASE_PASS;
        double t = trace_begin(tr, "forward_pass", TRACE_FORWARD, -1, 0.0);
        tm_forward(s, z, &k);
        trace_end(tr, t);
        t = trace_begin(tr, "backward_pass", TRACE_BACKWARD, -1, 0.0);
        tm_backward(s, z, &k);
        trace_end(tr, t);
        s->phase = TM_PHASE_OTHER;
    }
    double loss = 0.0;
    zero_sum_scalars(z, &loss, 1);
    s->phase = TM_PHASE_OPT;
    double t = trace_begin(tr, "optimizer", TRACE_OPTIMIZER, -1, 0.0);
    double grads = 0.0; // the gradient norm reads what this rank updates
    for (int u = 0; u < z->lay.num_units; u++) grads += (double)zero_update_count(z, u) * z->esize;
    tm_bytes(s, grads);
    zero_global_grad_norm(z, 0.0);
    OptStep step;
    memset(&step, 0, sizeof(step));
    zero_update(z, &step);
    tm_device(s); // (the step ends when the device has run what it was handed)
    trace_end(tr, t);
    s->phase = TM_PHASE_OTHER;
}

// ----------------------------------------------------------------------------------------
// The prediction

typedef struct {
    double step, fwd, bwd, optim, comm, exposed;   // seconds: the step log's terms
    double matmul, memory, comm_work, offload, nvme; // seconds of each kind of work (comm_work: summed; offload: the
                                                   // host's update and PCIe copies; nvme: the step's bytes on NVMe)
    double nvme_read, nvme_written;                // bytes per step, counted as the trainer's log counts them
    double launch;                                 // seconds starting collectives
    double bytes[ZC_NUM_COLLECTIVES];              // per rank per step, zero.h's count
    double bytes_inside, bytes_across, theory_across; // of all of them: inside a node, across nodes; the ZeRO++ paper's across
    double flops, tokens;                          // this rank's matmul FLOPs; tokens per step, all ranks
    double model_flops;                            // 6P + 12 L C T per token, all ranks: for MFU
    int per_node;
    // for calibration: seconds charged by phase (at the description's efficiencies)
    double memory_opt, memory_out, comm_lat, comm_out, comm_out_lat, comm_opt, comm_opt_lat;
} TimeResult;

// The seconds and FLOPs counted so far forgotten (a step run first only to set the next one up).
static inline void tm_uncount(TimeSim *s) {
    s->matmul_s = s->memory_s = s->memory_opt_s = s->memory_out_s = s->comm_s = s->comm_lat_s = s->comm_out_s = 0.0;
    s->comm_out_lat_s = s->comm_opt_s = s->comm_opt_lat_s = s->offload_s = s->launch_s = s->flops = 0.0;
}

// One message naming what is wrong with the input, or NULL.
static inline const char *timemodel_problem(const TimeInput *in, const Hardware *hw) {
    const char *why = gpt2_config_problem(&in->cfg);
    if (why) return why;
    if (in->seq_len > in->cfg.max_seq_len) return "the sequence length exceeds the model's max_seq_len";
    if (in->world < 1 || in->batch < 1 || in->seq_len < 1 || in->accum < 1) return "world, batch, seq-len and grad-accum must be positive";
    if (in->world % tm_per_node(in, hw)) return "the world size must be a multiple of the ranks per node (--gpus-per-node)";
    int opt = in->zo.offload_optimizer, par = in->zo.stage == 3 ? in->zo.offload_param : LOC_DEVICE;
    if ((opt != LOC_DEVICE || par != LOC_DEVICE) && hw->host_bw <= 0)
        return "offload needs the description's host_bandwidth";
    if ((opt == LOC_NVME || par == LOC_NVME) && hw->nvme_bw <= 0)
        return "NVMe offload needs the description's nvme_bandwidth";
    return NULL;
}

// Predicts one optimizer step. trace: a Trace to record the simulated timeline into (recording,
// or not), or NULL. Returns 0, or -1 when timemodel_problem objects.
static inline int timemodel_step(const TimeInput *in, const Hardware *hw, TimeResult *out, Trace *trace) {
    memset(out, 0, sizeof(*out));
    if (timemodel_problem(in, hw)) return -1;
    TimeSim *s = (TimeSim *)calloc(1, sizeof(TimeSim));
    Zero *z = (Zero *)calloc(1, sizeof(Zero));
    s->hw = hw;
    s->in = in;
    s->z = z;
    s->per_node = tm_per_node(in, hw);
    s->share = hw->shared ? 1.0 / s->per_node : 1.0;
    Trace local;
    Trace *tr = trace ? trace : &local;
    if (!trace) trace_init(tr, 0, 0);
    trace_set_clock(tr, tm_clock, s);
    ZeroOptions zo = in->zo; // placed as given (the stores simulated: tm_backend); not the delayed update
    zo.delayed_update = 0;
    zo.zeropp_per_host = s->per_node;
    zero_init(z, &in->cfg, 0, in->world, &zo, tm_backend(s));
    z->trace = tr;
    // with NVMe a step first, so that the predicted one is like every step after a run's first:
    // its update's first reads started ahead, the last writes of the one before still draining,
    // the gather slots holding what that update kept
    int steps = zero_on_nvme(z->where) ? 2 : 1;
    double t = 0.0;
    for (int k = 1; k <= steps; k++) {
        if (k == steps) tm_uncount(s);
        zero_nvme_stats(z);
        trace_step_begin(tr, k);
        t = trace_begin(tr, "step", TRACE_STEP, -1, 0.0);
        tm_train_step(s, z);
        out->step = trace_end(tr, t);
        if (k < steps) { TraceStep skip; trace_step_end(tr, &skip); }
    }
    ZeroNvmeStats io = zero_nvme_stats(z);
    out->nvme_read = io.read; out->nvme_written = io.written;
    TraceStep ts;
    trace_step_end(tr, &ts);
    out->fwd = ts.lane[TRACE_FORWARD];
    out->bwd = ts.lane[TRACE_BACKWARD];
    out->optim = ts.lane[TRACE_OPTIMIZER];
    out->comm = ts.flight[TRACE_COMM];
    out->exposed = ts.lane[TRACE_WAIT];
    out->matmul = s->matmul_s;
    out->memory = s->memory_s;
    out->comm_work = s->comm_s;
    out->offload = s->offload_s;
    out->nvme = hw->nvme_bw > 0 ? (io.read + io.written) / (hw->nvme_bw * s->share) : 0.0;
    out->launch = s->launch_s;
    for (int k = 0; k < ZC_NUM_COLLECTIVES; k++) out->bytes[k] = z->comm[k];
    out->bytes_inside = z->comm_inside; out->bytes_across = z->comm_across;
    out->theory_across = zero_theory_across(z) * in->accum;
    out->flops = s->flops;
    out->tokens = (double)in->batch * in->seq_len * in->accum * in->world;
    out->model_flops = out->tokens * (6.0 * z->lay.num_params + 12.0 * in->cfg.num_layers * in->cfg.channels * in->seq_len);
    out->per_node = s->per_node;
    out->memory_opt = s->memory_opt_s;
    out->memory_out = s->memory_out_s;
    out->comm_lat = s->comm_lat_s;
    out->comm_out = s->comm_out_s; out->comm_out_lat = s->comm_out_lat_s;
    out->comm_opt = s->comm_opt_s; out->comm_opt_lat = s->comm_opt_lat_s;
    zero_free(z);
    if (!trace) trace_free(tr);
    free(z);
    free(s->nvme_done);
    free(s);
    return 0;
}

// The simulated rank's timeline as a --trace file would hold it (one rank: all do the same).
static inline int timemodel_trace(const char *path, const TimeInput *in, const Hardware *hw, const char *meta) {
    Trace tr;
    trace_init(&tr, 0, 1);
    TimeResult r;
    if (timemodel_step(in, hw, &r, &tr)) { trace_free(&tr); return -1; }
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "error: --trace %s: cannot open\n", path); trace_free(&tr); return -1; }
    size_t n = trace_packed_bytes(&tr);
    char *buf = (char *)malloc(n);
    trace_pack(&tr, buf);
    TraceRank k;
    trace_unpack(buf, &k);
    trace_write_begin(f);
    trace_write_rank(f, &k, 1);
    int bad = trace_write_end(f, meta, k.h.dropped);
    bad |= fclose(f) != 0;
    free(k.ev);
    free(buf);
    trace_free(&tr);
    if (bad) fprintf(stderr, "error: --trace %s: writing failed\n", path);
    return bad ? -1 : 0;
}

// ----------------------------------------------------------------------------------------
// Reports

static inline double tm_peak_total(const TimeInput *in, const Hardware *hw) {
    // the devices the run computes on: one each, or the node's one device shared by its ranks
    return hw->peak[in->zo.dtype] * (hw->shared ? (double)in->world / tm_per_node(in, hw) : in->world);
}

static const char *const tm_optimizer_at[LOC_KINDS] = {"the device", "the host", "NVMe (via the host)"};
static inline void timemodel_print(FILE *f, const TimeInput *in, const Hardware *hw, const TimeResult *r) {
    const double ms = 1e3, mib = 1048576.0;
    int g = r->per_node, nodes = in->world / g;
    fprintf(f, "step time, predicted (run/timemodel.h) on %s: %d rank%s, %d per node (%d node%s)\n", hw->name, in->world,
            in->world == 1 ? "" : "s", g, nodes, nodes == 1 ? "" : "s");
    fprintf(f, "  numbers   %s\n", hw->source);
    fprintf(f, "  run       %s, ZeRO stage %d, %d micro-step%s of B=%d x T=%d per rank, recompute %s, optimizer on %s\n",
            zc_dtype_names[in->zo.dtype], in->zo.stage, in->accum, in->accum == 1 ? "" : "s", in->batch, in->seq_len,
            in->recompute ? "on" : "off",
            tm_optimizer_at[in->zo.offload_optimizer]);
    fprintf(f, "  %-34s %10.2f ms\n", "forward (incl. its waits)", r->fwd * ms);
    fprintf(f, "  %-34s %10.2f ms\n", "backward (incl. its waits)", r->bwd * ms);
    fprintf(f, "  %-34s %10.2f ms\n", "optimizer (norm, update, gathers)", r->optim * ms);
    fprintf(f, "  %-34s %10.2f ms   (%.0f tokens/s, %.1f%% MFU)\n", "= STEP", r->step * ms, r->tokens / r->step,
            100.0 * r->model_flops / r->step / tm_peak_total(in, hw));
    fprintf(f, "  work: matmuls %.2f ms, memory-bound %.2f ms, collectives %.2f ms%s", r->matmul * ms, r->memory * ms,
            r->comm_work * ms, hw->inline_comm ? " (done by the compute threads)" : "");
    if (in->zo.offload_optimizer != LOC_DEVICE || in->zo.offload_param != LOC_DEVICE)
        fprintf(f, ", offload %.2f ms", r->offload * ms);
    if (r->nvme_read + r->nvme_written > 0)
        fprintf(f, ", NVMe %.2f ms (%.2f MiB read, %.2f MiB written)", r->nvme * ms, r->nvme_read / mib,
                r->nvme_written / mib);
    fprintf(f, "\n  communication per rank: all_reduce %.2f MiB, reduce_scatter %.2f MiB, all_gather %.2f MiB\n",
            r->bytes[ZC_ALL_REDUCE] / mib, r->bytes[ZC_REDUCE_SCATTER] / mib, r->bytes[ZC_ALL_GATHER] / mib);
    if (in->world > g)
        fprintf(f, "  of which inside a node %.2f MiB, across nodes %.2f MiB (textbook across: %.2f MiB; ZeRO++ %s)\n",
                r->bytes_inside / mib, r->bytes_across / mib, r->theory_across / mib,
                in->zo.zeropp_qwz || in->zo.zeropp_hpz > 1 || in->zo.zeropp_qgz ? "on" : "off");
    fprintf(f, "  collectives in flight %.2f ms, compute waiting for them %.2f ms", r->comm * ms, r->exposed * ms);
    if (r->comm > 0) fprintf(f, ": overlap %.0f%%", 100.0 * (1.0 - r->exposed / r->comm));
    fprintf(f, "\n");
}

// The prediction's members of a JSON object (no braces): step_ms and the breakdown.
static inline void timemodel_json(FILE *f, const TimeInput *in, const Hardware *hw, const TimeResult *r) {
    fprintf(f, "\"hardware\":");
    trace_json_string(f, hw->name);
    fprintf(f, ",\"per_node\":%d,\"grad_accum\":%d,\"offload\":\"%s\",\"step_ms\":%.6g,\"fwd_ms\":%.6g,\"bwd_ms\":%.6g,"
               "\"optim_ms\":%.6g,\"comm_ms\":%.6g,\"exposed_comm_ms\":%.6g,\"matmul_ms\":%.6g,\"memory_ms\":%.6g,"
               "\"comm_work_ms\":%.6g,\"offload_ms\":%.6g,\"nvme_ms\":%.6g,\"nvme_read\":%.17g,\"nvme_write\":%.17g,"
               "\"all_reduce_bytes\":%.17g,"
               "\"reduce_scatter_bytes\":%.17g,\"all_gather_bytes\":%.17g,\"inside_bytes\":%.17g,\"across_bytes\":%.17g,\"textbook_across_bytes\":%.17g,\"tokens_per_s\":%.6g,\"mfu\":%.6g",
            r->per_node, in->accum, zero_offload_names[in->zo.offload_optimizer],
            r->step * 1e3, r->fwd * 1e3, r->bwd * 1e3, r->optim * 1e3, r->comm * 1e3, r->exposed * 1e3, r->matmul * 1e3,
            r->memory * 1e3, r->comm_work * 1e3, r->offload * 1e3, r->nvme * 1e3, r->nvme_read, r->nvme_written,
            r->bytes[ZC_ALL_REDUCE],
            r->bytes[ZC_REDUCE_SCATTER], r->bytes[ZC_ALL_GATHER], r->bytes_inside, r->bytes_across, r->theory_across,
            r->tokens / r->step,
            r->model_flops / r->step / tm_peak_total(in, hw));
}

// ----------------------------------------------------------------------------------------
// Calibration: a description's efficiencies (and, where the compute threads do the
// communication, its link bandwidth) from one measured run's --log.

// The run a log describes (its "config" event) and its mean step times after the first.
typedef struct { double ms, fwd, bwd, optim, comm, exposed; int steps; } TmMeasured;

static inline double tm_setting(const cJSON *settings, const char *key, int *ok) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(settings, key);
    const cJSON *v = s ? cJSON_GetObjectItemCaseSensitive(s, "value") : NULL;
    if (!v || !cJSON_IsNumber(v)) { *ok = 0; return 0.0; }
    return v->valuedouble;
}
static inline const char *tm_setting_str(const cJSON *settings, const char *key) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(settings, key);
    const cJSON *v = s ? cJSON_GetObjectItemCaseSensitive(s, "value") : NULL;
    return v && cJSON_IsString(v) ? v->valuestring : NULL;
}

// Returns 0, or -1 after one line naming the log and what it lacks.
static inline int timemodel_read_log(const char *path, TimeInput *in, TmMeasured *m) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "error: --calibrate %s: cannot open\n", path); return -1; }
    memset(in, 0, sizeof(*in));
    memset(m, 0, sizeof(*m));
    int have_config = 0, seen = 0, ok = 1;
    const char *why = NULL;
    char *line = NULL;
    size_t cap = 0;
    while (ok && getline(&line, &cap, f) > 0) {
        cJSON *o = cJSON_Parse(line);
        if (!o) continue;
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (ev && cJSON_IsString(ev) && !strcmp(ev->valuestring, "config")) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "settings");
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "world");
            in->world = w && cJSON_IsNumber(w) ? (int)w->valuedouble : 0;
            GPT2Config *c = &in->cfg;
            c->num_layers = (int)tm_setting(st, "layers", &ok);
            c->channels = (int)tm_setting(st, "channels", &ok);
            c->num_heads = (int)tm_setting(st, "heads", &ok);
            c->max_seq_len = (int)tm_setting(st, "max-seq-len", &ok);
            c->vocab_size = (int)tm_setting(st, "vocab-size", &ok);
            c->padded_vocab_size = (int)gpt2_round_up((size_t)c->vocab_size, 128);
            in->batch = (int)tm_setting(st, "batch", &ok);
            in->seq_len = (int)tm_setting(st, "seq-len", &ok);
            in->accum = (int)tm_setting(st, "grad-accum", &ok);
            in->zo.stage = (int)tm_setting(st, "zero-stage", &ok);
            const char *p = tm_setting_str(st, "precision"), *o2 = tm_setting_str(st, "optimizer");
            in->zo.dtype = -1;
            for (int k = 0; p && k < ZC_NUM_DTYPES; k++) if (!strcmp(p, zc_dtype_names[k])) in->zo.dtype = k;
            in->zo.optimizer = -1;
            for (int k = 0; o2 && k < OPT_NUM; k++) if (!strcmp(o2, optimizer_names[k])) in->zo.optimizer = k;
            if (in->zo.dtype < 0 || in->zo.optimizer < 0 || in->world < 1) ok = 0;
            have_config = 1;
        } else if (!ev && cJSON_GetObjectItemCaseSensitive(o, "loss")) {
            const cJSON *x[6] = {cJSON_GetObjectItemCaseSensitive(o, "ms"), cJSON_GetObjectItemCaseSensitive(o, "fwd_ms"),
                                 cJSON_GetObjectItemCaseSensitive(o, "bwd_ms"), cJSON_GetObjectItemCaseSensitive(o, "optim_ms"),
                                 cJSON_GetObjectItemCaseSensitive(o, "comm_ms"),
                                 cJSON_GetObjectItemCaseSensitive(o, "exposed_comm_ms")};
            int all = 1;
            for (int k = 0; k < 6; k++) all &= x[k] && cJSON_IsNumber(x[k]);
            if (!all) { why = "step entries without fwd_ms ... exposed_comm_ms (a log from an older trainer?)"; ok = 0; }
            else if (seen++ > 0) { // the first step warms caches and thread pools
                m->ms += x[0]->valuedouble; m->fwd += x[1]->valuedouble; m->bwd += x[2]->valuedouble;
                m->optim += x[3]->valuedouble; m->comm += x[4]->valuedouble; m->exposed += x[5]->valuedouble;
                m->steps++;
            }
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    if (ok && !have_config) { why = "no {\"event\":\"config\"} line (write it with --log)"; ok = 0; }
    else if (!ok && !why) why = "its config event lacks the model shape, batch, stage, precision or world";
    if (ok && m->steps < 1) { why = "fewer than two steps (the first is not timed)"; ok = 0; }
    if (!ok) { fprintf(stderr, "error: --calibrate %s: %s\n", path, why); return -1; }
    double n = m->steps;
    m->ms /= n; m->fwd /= n; m->bwd /= n; m->optim /= n; m->comm /= n; m->exposed /= n;
    return 0;
}

// Fits hw's matmul and memory efficiencies (and, with inline_comm, the link bandwidth inside a
// node; an efficiency that would exceed 1 raises the peak or the bandwidth instead) so that the model reproduces the run's compute and its communication: the optimizer's
// time less its communication gives the memory efficiency (the update only moves bytes), the
// passes' compute time the matmul efficiency, the exposed communication the bandwidth. The
// model is linear in the inverse of each, so this is exact for the run it is fitted to.
static inline int timemodel_calibrate(const char *log_path, Hardware *hw, TimeInput *in_out, TmMeasured *m_out) {
    TimeInput in;
    TmMeasured m;
    if (timemodel_read_log(log_path, &in, &m)) return -1;
    in.per_node = 0;
    const char *why = timemodel_problem(&in, hw);
    if (why) { fprintf(stderr, "error: --calibrate %s: %s\n", log_path, why); return -1; }
    Hardware base = *hw;
    base.matmul_eff = base.mem_eff = 1.0;
    TimeResult r;
    timemodel_step(&in, &base, &r, NULL);
    double ms = 1e-3, bw_scale = 1.0; // the fitted bandwidth / the description's
    if (hw->inline_comm && in.world > 1) {
        double wire = r.comm_work - r.comm_lat; // seconds moving bytes at the description's bandwidth
        double meas = m.exposed * ms - r.comm_lat;
        if (wire <= 0 || meas <= 0) why = "its exposed communication is not above the model's latencies";
        else bw_scale = wire / meas;
    }
    // the waits inside the optimizer and outside the passes, as the model has them at that bandwidth
    double opt_comm = r.comm_opt_lat + (r.comm_opt - r.comm_opt_lat) / bw_scale;
    double out_comm = r.comm_out_lat + (r.comm_out - r.comm_out_lat) / bw_scale;
    double opt = m.optim * ms - opt_comm;
    // the passes' and the update's own time, less starting their collectives
    double compute = (m.fwd + m.bwd + m.optim - m.exposed) * ms + out_comm - r.launch;
    double mem_eff = 0.0, matmul_eff = 0.0;
    if (!why && opt <= 0) why = "its optimizer time is not above its communication";
    if (!why) mem_eff = r.memory_opt / opt;
    double memory = r.memory - r.memory_out; // inside the passes and the optimizer, as measured
    if (!why && compute - memory / mem_eff <= 0) why = "its compute time is all memory-bound in the model";
    if (!why) matmul_eff = r.matmul / (compute - memory / mem_eff);
    // A sanity bound, not a physical one: the passes' memory term is the model's, so the matmul
    // efficiency fitted from what is left can pass 1 on the machine the description was measured
    // on (1.55 on this project's idle 2-core VM, 2026-11-27, for the default model at ZeRO-3).
    if (!why && (mem_eff > 2.0 || matmul_eff > 2.0))
        why = "the fitted efficiencies are more than twice the description's peaks: are they this machine's?";
    if (why) { fprintf(stderr, "error: --calibrate %s: %s\n", log_path, why); return -1; }
    // Above 1: the run beat the description's peak or bandwidth, whose figure was low (this
    // machine's measured bandwidth swings from 46 to 93 GB/s between runs): the figure becomes
    // what the run achieved, at an efficiency of 1.
    if (mem_eff > 1.0) { hw->mem_bw *= mem_eff; mem_eff = 1.0; }
    if (matmul_eff > 1.0) { hw->peak[in.zo.dtype] *= matmul_eff; matmul_eff = 1.0; }
    hw->mem_eff = mem_eff;
    hw->matmul_eff = matmul_eff;
    if (hw->inline_comm && in.world > 1) { hw->intra_bw *= bw_scale; hw->inter_bw *= bw_scale; }
    size_t used = strlen(hw->source);
    if (used + 1 < sizeof(hw->source))
        snprintf(hw->source + used, sizeof(hw->source) - used, "; calibrated on %s (N=%d, stage %d, %s, L=%d C=%d, B=%d T=%d, "
                 "%d steps)", log_path, in.world, in.zo.stage, zc_dtype_names[in.zo.dtype], in.cfg.num_layers, in.cfg.channels,
                 in.batch, in.seq_len, m.steps);
    if (in_out) *in_out = in;
    if (m_out) *m_out = m;
    return 0;
}

#endif // TIMEMODEL_H
