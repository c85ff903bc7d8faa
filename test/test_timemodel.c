// Tests for run/timemodel.h that need no run: the ring model against values worked out by hand,
// zero.h's byte counts under the simulated backend against the layout's arithmetic, recompute
// and offload against their formulas, the simulated host, PCIe and NVMe lanes piece by piece
// against bytes / bandwidth, a description file written and read back, and the
// calibration recovering, from a log the model itself wrote, the efficiencies and bandwidth it
// was given.
#include "run/planner.h"

static int failures = 0, checks = 0;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)
static int close_to(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b) + 1e-15; }

static void ring_by_hand(void) {
    Hardware h;
    memset(&h, 0, sizeof(h));
    h.intra_bw = 100e9; h.intra_lat = 2e-6; h.inter_bw = 10e9; h.inter_lat = 5e-6;
    double M = 800e6;
    // one node of 8: 7 steps of 2 us + 800 MB x 7/8 at 100 GB/s = 14 us + 7 ms
    CHECK(close_to(tm_collective_seconds(&h, ZC_REDUCE_SCATTER, M, 8, 8), 7.014e-3, 1e-12), "RS, 8 in a node");
    CHECK(close_to(tm_collective_seconds(&h, ZC_ALL_GATHER, M, 8, 8), 7.014e-3, 1e-12), "AG, 8 in a node");
    CHECK(close_to(tm_collective_seconds(&h, ZC_ALL_REDUCE, M, 8, 8), 14.028e-3, 1e-12), "AR = RS + AG");
    // 4 nodes of 8: and then 3 steps of 5 us + the 100 MB share x 3/4 at 10 GB/s = 15 us + 7.5 ms
    CHECK(close_to(tm_collective_seconds(&h, ZC_REDUCE_SCATTER, M, 32, 8), 7.014e-3 + 7.515e-3, 1e-12), "RS, 4 nodes of 8");
    // 32 nodes of 1: 31 steps of 5 us + 800 MB x 31/32 at 10 GB/s
    CHECK(close_to(tm_collective_seconds(&h, ZC_ALL_GATHER, M, 32, 1), 155e-6 + 77.5e-3, 1e-12), "AG, 32 nodes of 1");
    CHECK(tm_collective_seconds(&h, ZC_ALL_REDUCE, M, 1, 8) == 0.0, "one rank: no communication");
    // with equal links and no latency the two levels move M(N-1)/N per rank, zero.h's count
    h.inter_bw = h.intra_bw; h.intra_lat = h.inter_lat = 0;
    CHECK(close_to(tm_collective_seconds(&h, ZC_ALL_GATHER, M, 64, 8), M * 63 / 64 / 100e9, 1e-12), "two levels = M(N-1)/N");
    // a shared device: 4 ranks on 2 cores move their bytes at half the rate
    h.shared = 1; h.cores = 2; h.intra_lat = 2e-6;
    CHECK(close_to(tm_collective_seconds(&h, ZC_ALL_GATHER, M, 4, 4), 6e-6 + M * 3 / 4 / 100e9 * 2, 1e-12), "4 ranks on 2 cores");
    CHECK(close_to(tm_collective_seconds(&h, ZC_ALL_GATHER, M, 2, 2), 2e-6 + M / 2 / 100e9, 1e-12), "2 ranks on 2 cores");
    // --network eth-100: 100 Gb/s per node, shared by its 8 GPUs
    Hardware a;
    timemodel_hardware("a100-80gb-sxm", &a);
    CHECK(timemodel_network("eth-100", &a, 8) == 0 && close_to(a.inter_bw, 12.5e9 / 8, 1e-12), "eth-100 per GPU %g", a.inter_bw);
    CHECK(timemodel_network("ib-400", &a, 8) == 0 && close_to(a.inter_bw, 50e9, 1e-12), "ib-400 per GPU %g", a.inter_bw);
}

static TimeInput small_run(int stage, int world, int precision) {
    TimeInput in;
    memset(&in, 0, sizeof(in));
    in.cfg.num_layers = 3; in.cfg.channels = 64; in.cfg.num_heads = 4; in.cfg.max_seq_len = 32;
    in.cfg.vocab_size = 1000; in.cfg.padded_vocab_size = 1024;
    in.zo.dtype = precision; in.zo.optimizer = OPT_ADAMW; in.zo.stage = stage; in.world = world;
    in.batch = 2; in.seq_len = 32; in.accum = 2;
    return in;
}

// zero.h's counts under the simulated backend, against the layout: stages 0-2 move 2P(N-1)/N
// elements per optimizer step (stage 2 reduce-scatters every micro-step), stage 3 less than 3P.
static void bytes_by_layout(void) {
    Hardware h;
    timemodel_hardware("a100-80gb-sxm", &h);
    for (int stage = 0; stage < 4; stage++) {
        TimeInput in = small_run(stage, 4, ZC_BF16);
        ParamLayout lay;
        gpt2_layout_init(&lay, &in.cfg, 4 * ZERO_ALIGN);
        double P = (double)lay.num_flat, e = 2.0, ring = P * e * 3 / 4;
        TimeResult r;
        CHECK(timemodel_step(&in, &h, &r, NULL) == 0, "stage %d runs", stage);
        double rs = stage >= 2 ? in.accum * ring : ring; // every micro-step from stage 2 on
        if (stage == 0) CHECK(r.bytes[ZC_ALL_REDUCE] == 2 * ring && r.bytes[ZC_REDUCE_SCATTER] == 0, "stage 0 bytes");
        else CHECK(r.bytes[ZC_REDUCE_SCATTER] == rs, "stage %d reduce-scatter %g vs %g", stage, r.bytes[ZC_REDUCE_SCATTER], rs);
        if (stage == 1 || stage == 2) CHECK(r.bytes[ZC_ALL_GATHER] == ring, "stage %d all-gather", stage);
        if (stage == 3) CHECK(r.bytes[ZC_ALL_GATHER] > ring && r.bytes[ZC_ALL_GATHER] < 2 * in.accum * ring,
                              "stage 3 all-gather %g", r.bytes[ZC_ALL_GATHER]);
        CHECK(r.fwd + r.bwd + r.optim <= r.step * (1 + 1e-12), "the step's parts fit in it");
        CHECK(r.exposed <= r.comm * (1 + 1e-9) + 1e-12, "exposed %g <= in flight %g", r.exposed, r.comm);
    }
}

// Recompute adds one layer forward per layer to the backward (one rank: no communication to
// shift); offload: the update on the host and its PCIe copies, the NVMe bytes of the streamed update.
static void recompute_and_offload(void) {
    Hardware h;
    timemodel_hardware("a100-80gb-sxm", &h);
    TimeInput in = small_run(0, 1, ZC_BF16);
    in.accum = 1;
    TimeResult a, b;
    timemodel_step(&in, &h, &a, NULL);
    in.recompute = 1;
    timemodel_step(&in, &h, &b, NULL);
    double B = in.batch, T = in.seq_len, C = in.cfg.channels, L = in.cfg.num_layers, N = B * T;
    size_t n[NUM_ACTIVATIONS];
    gpt2_activation_numels(&in.cfg, in.batch, in.seq_len, n);
    double acts = 0; // one layer's activations: 16-bit but the fp32 statistics, without the T x T probabilities
    for (int i = A_LN1; i <= A_RESIDUAL3; i++) if (i != A_ATT) acts += n[i] / L * (gpt2_activation_is_fp32(i) ? 4 : 2);
    double layer_fwd = (24 * N * C * C + 2 * B * T * T * C) / (312e12 * 0.75) + 2 * acts / (2.0e12 * 0.8);
    CHECK(close_to(b.bwd - a.bwd, L * layer_fwd, 1e-9), "recompute: +%g s, by hand %g", b.bwd - a.bwd, L * layer_fwd);
    // offload at stage 2 on 8 ranks: the update's 28 bytes per owned element at the host's bandwidth,
    // its 16-bit gradient down and parameter up PCIe
    in = small_run(2, 8, ZC_BF16);
    in.accum = 1;
    timemodel_step(&in, &h, &a, NULL);
    in.zo.offload_optimizer = LOC_HOST;
    timemodel_step(&in, &h, &b, NULL);
    ParamLayout lay;
    gpt2_layout_init(&lay, &in.cfg, 8 * ZERO_ALIGN);
    double owned = 0; // the elements this rank updates: its slice of each unit but frozen padding
    for (int u = 0; u < lay.num_units; u++) owned += (double)gpt2_unit_padded(&lay, u) / 8;
    double host = 28 * owned / (50e9 * 0.8), pcie = 2 * 2 * owned / 32e9;
    CHECK(b.offload > 0 && b.offload <= host + pcie + 1e-15 && b.offload >= 0.9 * (host + pcie),
          "offload %g s vs at most %g", b.offload, host + pcie);
    // on NVMe (one piece a unit here): the master weights and Adam's m and v of each unit's slice
    // read and written once a step, each transfer padded to 4096 bytes, at 3 GB/s
    in.zo.offload_optimizer = LOC_NVME;
    timemodel_step(&in, &h, &b, NULL);
    double io = 0;
    for (int u = 0; u < lay.num_units; u++) io += 3 * ceil(gpt2_unit_padded(&lay, u) / 8 * 4 / 4096.0) * 4096;
    CHECK(b.nvme_read == io && b.nvme_written == io, "NVMe bytes read %g, written %g vs %g", b.nvme_read,
          b.nvme_written, io);
    CHECK(close_to(b.nvme, 2 * io / 3e9, 1e-12), "nvme %g s vs %g", b.nvme, 2 * io / 3e9);
}

// The simulated host, copy stream and NVMe device (tm_backend), piece by piece: each transfer
// takes its bytes over its lane's bandwidth; a lane runs its transfers one after another, beside
// the clock; a wait holds the clock until the transfer ends.
static void lanes_by_formula(void) {
    Hardware h;
    timemodel_hardware("a100-80gb-sxm", &h); // PCIe 32 GB/s, host 50 GB/s at 80%, NVMe 3 GB/s
    TimeInput in = small_run(2, 8, ZC_BF16);
    TimeSim s;
    Zero z;
    memset(&s, 0, sizeof(s));
    memset(&z, 0, sizeof(z));
    z.nstate = 2; z.esize = 2; z.dtype = ZC_BF16; z.optimizer = OPT_ADAMW;
    s.hw = &h; s.in = &in; s.z = &z; s.share = 1.0;
    ZeroBackend be = tm_backend(&s);
    CHECK(!be.unified && be.host_update && be.nvme_sim, "a GPU's backend: host memory, copies, NVMe simulated");
    double n = 1 << 20, t0 = 0, start, end;
    // AdamW's update of a piece on the host: 28 bytes an element (fp32 weight, m, v read and written,
    // bf16 gradient read and parameter written) at 40 GB/s
    be.host_update(be.ctx, NULL, NULL, NULL, NULL, NULL, (size_t)n, ZC_BF16, 1);
    CHECK(close_to(s.now, 28 * n / 40e9, 1e-12), "host update of a piece: %g s vs %g", s.now, 28 * n / 40e9);
    CHECK(close_to(s.offload_s, s.now, 1e-12), "counted as offload");
    // a gradient piece down PCIe, waited for by the host
    t0 = s.now;
    be.host_wait(be.ctx, be.copy_to_host(be.ctx, NULL, NULL, (size_t)(2 * n)), "");
    CHECK(close_to(s.now - t0, 2 * n / 32e9, 1e-12), "copy down: %g s vs %g", s.now - t0, 2 * n / 32e9);
    // a parameter piece up, waited for by the compute stream: the clock moves at its next kernel
    t0 = s.now;
    be.device_wait(be.ctx, be.copy_to_device(be.ctx, NULL, NULL, (size_t)(2 * n)));
    CHECK(s.now == t0, "device_wait does not hold the host");
    tm_bytes(&s, 0.0);
    CHECK(close_to(s.now - t0, 2 * n / 32e9, 1e-12), "the next kernel after the copy up: %g s", s.now - t0);
    // NVMe: a piece of master weights read (4n bytes at 3 GB/s) while the host updates another:
    // the wait ends when the read does; a second read queued behind it ends a read later
    t0 = s.now;
    int r1 = be.nvme_sim->submit(be.nvme_sim->ctx, 4 * n, 0, &start, &end);
    CHECK(start == t0 && close_to(end - t0, 4 * n / 3e9, 1e-12), "NVMe read: %g s vs %g", end - t0, 4 * n / 3e9);
    int r2 = be.nvme_sim->submit(be.nvme_sim->ctx, 4 * n, 1, &start, &end);
    CHECK(close_to(end - t0, 8 * n / 3e9, 1e-12), "a write behind it ends at %g s vs %g", end - t0, 8 * n / 3e9);
    be.host_update(be.ctx, NULL, NULL, NULL, NULL, NULL, (size_t)n, ZC_BF16, 1);
    CHECK(!be.nvme_sim->done(be.nvme_sim->ctx, r1), "the read still in flight after the (shorter) update");
    be.nvme_sim->wait(be.nvme_sim->ctx, r1);
    CHECK(close_to(s.now - t0, 4 * n / 3e9, 1e-12), "waited until the read ended: %g s", s.now - t0);
    CHECK(be.nvme_sim->done(be.nvme_sim->ctx, r1) && !be.nvme_sim->done(be.nvme_sim->ctx, r2),
          "done: the read, not the write");
    free(s.nvme_done);
}

static void description_round_trip(void) {
    int n;
    const TmPreset *p = tm_presets(&n);
    for (int i = 0; i < n; i++) {
        Hardware a, b;
        p[i].fill(&a);
        char path[] = "/tmp/zeroc_hw_XXXXXX";
        int fd = mkstemp(path);
        FILE *f = fdopen(fd, "w");
        timemodel_hardware_write(f, &a);
        fclose(f);
        int rc = timemodel_hardware_read(path, &b);
        unlink(path);
        CHECK(rc == 0 && !strcmp(a.name, b.name) && !strcmp(a.source, b.source), "%s read back", p[i].name);
        for (int k = 0; k < TM_NKEYS && rc == 0; k++) {
            const char *x = (const char *)&a + tm_keys[k].off, *y = (const char *)&b + tm_keys[k].off;
            if (tm_keys[k].is_int) CHECK(*(const int *)x == *(const int *)y, "%s %s", p[i].name, tm_keys[k].key);
            else CHECK(close_to(*(const double *)y, *(const double *)x, 1e-5), "%s %s", p[i].name, tm_keys[k].key);
        }
    }
}

// A log as the trainer writes it, with the model's own times for `truth`: calibrating `got`
// (another description) on it.
static int calibrate_on_truth(const Hardware *truth, Hardware *got) {
    TimeInput in = small_run(3, 2, ZC_BF16);
    TimeResult r;
    timemodel_step(&in, truth, &r, NULL);
    char path[] = "/tmp/zeroc_log_XXXXXX";
    FILE *f = fdopen(mkstemp(path), "w");
    fprintf(f, "{\"event\":\"config\",\"world\":%d,\"settings\":{\"layers\":{\"value\":%d},\"channels\":{\"value\":%d},"
               "\"heads\":{\"value\":%d},\"max-seq-len\":{\"value\":%d},\"vocab-size\":{\"value\":%d},\"batch\":{\"value\":%d},"
               "\"seq-len\":{\"value\":%d},\"grad-accum\":{\"value\":%d},\"zero-stage\":{\"value\":%d},"
               "\"precision\":{\"value\":\"bf16\"},\"optimizer\":{\"value\":\"adamw\"}}}\n",
            in.world, in.cfg.num_layers, in.cfg.channels, in.cfg.num_heads, in.cfg.max_seq_len, in.cfg.vocab_size, in.batch,
            in.seq_len, in.accum, in.zo.stage);
    for (int step = 1; step <= 3; step++)
        fprintf(f, "{\"step\":%d,\"loss\":1,\"ms\":%.9f,\"fwd_ms\":%.9f,\"bwd_ms\":%.9f,\"optim_ms\":%.9f,\"comm_ms\":%.9f,"
                   "\"exposed_comm_ms\":%.9f}\n", step, r.step * 1e3 * (step == 1 ? 3 : 1), r.fwd * 1e3, r.bwd * 1e3,
                r.optim * 1e3, r.comm * 1e3, r.exposed * 1e3);
    fclose(f);
    int rc = timemodel_calibrate(path, got, NULL, NULL);
    unlink(path);
    return rc;
}

// Calibrating a description with other efficiencies gives truth's back; one whose bandwidth and
// peak are below what the run achieved gets them raised, at efficiency 1, and still loads.
static void calibration_recovers(void) {
    Hardware truth, got;
    timemodel_hardware("this-machine", &truth);
    truth.matmul_eff = 0.37; truth.mem_eff = 0.61; truth.intra_bw = truth.inter_bw = 2.5e9;
    got = truth;
    got.matmul_eff = 0.9; got.mem_eff = 0.2; got.intra_bw = got.inter_bw = 9e9;
    CHECK(calibrate_on_truth(&truth, &got) == 0, "calibration runs");
    CHECK(close_to(got.matmul_eff, truth.matmul_eff, 1e-6), "matmul efficiency %g vs %g", got.matmul_eff, truth.matmul_eff);
    CHECK(close_to(got.mem_eff, truth.mem_eff, 1e-6), "memory efficiency %g vs %g", got.mem_eff, truth.mem_eff);
    CHECK(close_to(got.intra_bw, truth.intra_bw, 1e-6), "MPI bandwidth %g vs %g", got.intra_bw, truth.intra_bw);

    got = truth; // figures at 0.8x of what the run reached: efficiencies of 1.25 fitted
    got.mem_bw = truth.mem_bw * truth.mem_eff * 0.8;
    got.peak[ZC_BF16] = truth.peak[ZC_BF16] * truth.matmul_eff * 0.8;
    CHECK(calibrate_on_truth(&truth, &got) == 0, "calibration with low figures runs");
    CHECK(got.mem_eff == 1.0 && got.matmul_eff == 1.0, "low figures: efficiencies %g, %g (want 1)", got.mem_eff, got.matmul_eff);
    CHECK(close_to(got.mem_bw, truth.mem_bw * truth.mem_eff, 1e-6), "raised bandwidth %g vs achieved %g", got.mem_bw,
          truth.mem_bw * truth.mem_eff);
    CHECK(close_to(got.peak[ZC_BF16], truth.peak[ZC_BF16] * truth.matmul_eff, 1e-6), "raised peak %g vs achieved %g",
          got.peak[ZC_BF16], truth.peak[ZC_BF16] * truth.matmul_eff);
    char path[] = "/tmp/zeroc_hw_XXXXXX";
    FILE *f = fdopen(mkstemp(path), "w");
    timemodel_hardware_write(f, &got);
    fclose(f);
    Hardware back;
    CHECK(timemodel_hardware(path, &back) == 0, "the raised description loads");
    unlink(path);
}

int main(void) {
    ring_by_hand();
    bytes_by_layout();
    recompute_and_offload();
    lanes_by_formula();
    description_round_trip();
    calibration_recovers();
    printf("%s: %d checks, %d failures\n", failures ? "FAILED" : "PASSED", checks, failures);
    return failures ? 1 : 0;
}
