// trainer.h: one training run (options, model, data, the loop, reports, checkpoints, the
// sampler), written once for both trainers.
//
// Contract. The including file (train_gpt_cpu.c; train_gpt.cu) defines, before including:
//   GPT2: a struct with at least GPT2Config cfg; Zero z; int B, T; int *inputs, *targets (host
//     arrays of B*T); size_t bytes_activations
//   gpt2_build(m, cfg, B, T, rank, world, const ZeroOptions *, GPT2Recompute, ZeroBackend), gpt2_free(m)
//     (zero.h's options: the stage, the element type of parameters, gradients and activations,
//     the optimizer whose state arrays zero.h keeps, what is offloaded; gpt2.h's GPT2Recompute:
//     what the forward keeps for the backward)
//   gpt2_forward(m, inputs, targets, B, T, dloss) -> mean loss; gpt2_backward(m, B, T)
//     (both from model.h, over the trainer's kernels)
//   gpt2_pending_losses(m) -> the sum of the training micro-steps' mean losses that
//     gpt2_forward returned as 0 since the last call (a GPU keeps them on the device until
//     the step's end instead of waiting for each; the CPU trainer returns them at once: 0)
//   gpt2_grad_norm(m) -> global norm; gpt2_update(m, const OptStep *)
//   gpt2_logits_row(m, t) -> host pointer to the Vp logits of row 0, position t
//   gpt2_report(m, out, log): the trainer's own report at the end of the run (the GPU's kernel
//     profile), to rank 0's stdout and JSON log (NULL elsewhere, or without --log)
//   trainer_backend(Run *) -> ZeroBackend: this rank's collectives (the Run is declared here,
//     so the including file declares `static ZeroBackend trainer_backend(struct Run *r);` first)
// Processes come from mpirun: MPI is initialised before trainer_run() and is used here only to
// agree on setup and to end the job; every collective of training goes through the backend.
// The including file calls preempt_install() (job.h) first thing in main, before MPI_Init: from
// then on a stop signal stops the run cleanly after a step.
#ifndef TRAINER_H
#define TRAINER_H

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include "run/job.h"
#include "run/verdict.h"

// ----------------------------------------------------------------------------------------
// Parameters in and out: initialisation, model files, gradient dumps. Unit by unit through
// one host buffer (the backend copies), so a ZeRO-3 rank never holds the whole model and the
// parameters may live on a GPU.

static int gpt2_load_or_init(GPT2 *m, FILE *f, const char *path, int version, uint64_t seed) {
    Zero *z = &m->z;
    float *unit = (float *)xmalloc(zero_max_unit(z) * sizeof(float));
    int bad = 0;
    for (int u = 0; u < z->lay.num_units && !bad; u++) {
        size_t padded = gpt2_unit_padded(&z->lay, u);
        if (f) {
            memset(unit, 0, padded * sizeof(float));
            bad = gpt2_unit_file_io(f, &z->lay, u, unit, 0, version) != 0;
        } else {
            gpt2_init_unit(&z->lay, u, seed, unit);
        }
        zero_set_unit(z, u, unit); // 16-bit runs: the master weights exact, the parameters rounded
    }
    free(unit);
    if (bad) fprintf(stderr, "error: %s: read failed\n", path);
    return bad ? -1 : 0;
}

// The model as an llm.c file (fp32: in 16-bit runs, the 16-bit parameters the model computes
// with, widened). Every rank calls it (ZeRO-3 gathers each unit); rank 0 writes PATH.tmp and
// fsyncs it, and the caller renames it to PATH (once the checkpoint it belongs to is complete).
// -1 on every rank on failure (PATH.tmp removed), with "PATH: reason" in why (n bytes) on rank 0.
static int gpt2_save(GPT2 *m, const char *path, char *why, size_t n) {
    Zero *z = &m->z;
    CkptOut o;
    memset(&o, 0, sizeof(o));
    why[0] = 0;
    if (z->rank == 0 && ckpt_out_open(&o, path) == 0) {
        int32_t h[256];
        gpt2_fill_header(h, &m->cfg, 3);
        ckpt_out_write(&o, h, sizeof(h));
    }
    float *unit = (float *)xmalloc(zero_max_unit(z) * sizeof(float));
    zero_begin_forward(z, 0, 1);
    for (int u = 0; u < z->lay.num_units; u++) {
        const void *p = zero_params(z, u, -1);
        if (z->rank != 0 || !o.ok) continue;
        z->be.to_host(z->be.ctx, unit, p, gpt2_unit_padded(&z->lay, u), z->dtype);
        if (gpt2_unit_file_io(o.f, &z->lay, u, unit, 1, 3) != 0) ckpt_out_fail(&o);
    }
    free(unit);
    double ok = 1.0;
    if (z->rank == 0) {
        ok = ckpt_out_sync(&o) == 0;
        ckpt_out_why(&o, why, n);
    }
    zero_sum_doubles(z, &ok, 1);
    return ok == (double)z->world ? 0 : -1;
}

// The first step's gradient (of this run: after --resume, the step after the checkpoint's; every
// step's when the path has "%d", replaced by the step) in checkpoint format: the same header and tensor order as a model
// file, so any tool that reads models reads it (test/reference_gpt2.py does). Needs the whole
// gradient on this rank: one process, or ZeRO-0 (config_validate says so).
static int dump_grads(const char *path, GPT2 *m) {
    Zero *z = &m->z;
    FILE *f = gpt2_begin_checkpoint(path, &m->cfg, 3);
    int ok = f != NULL;
    float *unit = (float *)xmalloc(zero_max_unit(z) * sizeof(float));
    for (int u = 0; u < z->lay.num_units && ok; u++) {
        z->be.to_host(z->be.ctx, unit, zero_update_grads(z, u), zero_update_count(z, u), z->dtype);
        ok = gpt2_unit_file_io(f, &z->lay, u, unit, 1, 3) == 0;
    }
    free(unit);
    return f ? gpt2_end_checkpoint(f, path, ok) : -1;
}

// ----------------------------------------------------------------------------------------
// Sampling

static uint32_t rng_u32(uint64_t *s) { return (uint32_t)(gpt2_splitmix64(s) >> 32); }
static float rng_f32(uint64_t *s) { return (rng_u32(s) >> 8) / 16777216.0f; }

// Draws from softmax(logits[0..V)) at temperature 1. The sums are double: in float, a CDF of
// ~50k terms near 1 each moves in steps of ~0.004, so logits that differ in their last bit (the
// CPU's and the GPU's) picked different tokens every few draws; in double the draw depends on
// the logits' values, not on how the running sum happened to round.
static int sample_token(const float *logits, int V, float coin) {
    float maxv = -INFINITY;
    double sum = 0.0;
    for (int i = 0; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - maxv);
    double cdf = 0.0, r = coin * sum;
    for (int i = 0; i < V; i++) {
        cdf += exp((double)logits[i] - maxv);
        if (r < cdf) return i;
    }
    return V - 1;
}

// Generates len tokens after an end-of-text token; rank 0 prints them (as text when a
// tokenizer is loaded, as ids otherwise). Every rank runs it: under ZeRO-3 the forward
// needs everyone's shard, and the same rng keeps the ranks' contexts identical.
static void gpt2_sample(GPT2 *m, const Tokenizer *tok, int len, uint64_t *rng) {
    int eot = m->cfg.vocab_size == 50257 ? 50256 : m->cfg.vocab_size - 1, print = m->z.rank == 0;
    int *ctx = m->inputs, n = 1; // the context: at most m->T tokens, the oldest dropped first
    ctx[0] = eot;
    if (print) printf("sample: ");
    for (int i = 0; i < len; i++) {
        zero_begin_forward(&m->z, 0, 1);
        gpt2_forward(m, ctx, NULL, 1, n, 0.0f);
        const float *last = gpt2_logits_row(m, n - 1);
        int next = sample_token(last, m->cfg.vocab_size, rng_f32(rng));
        if (n == m->T) memmove(ctx, ctx + 1, (size_t)(--n) * sizeof(int));
        ctx[n++] = next;
        if (!print) continue;
        if (tok) tokenizer_print(tok, next, stdout);
        else printf("%d ", next);
        fflush(stdout);
    }
    if (print) printf("\n");
}
// The sampler's generator as gpt2_sample(len) leaves it (one draw per token): a run stopped by a
// signal skips its sample but saves the generator an uninterrupted run would have.
static void gpt2_sample_skip(uint64_t *rng, int len) {
    for (int i = 0; i < len; i++) (void)rng_u32(rng);
}

// ----------------------------------------------------------------------------------------
// A training run: everything main needs, in one place

typedef struct Run {
    TrainConfig cfg;
    int rank, world, accum;
    void *backend;       // the including trainer's communication state (trainer_backend)
    const ConfigBuild *build; // the precisions this binary runs (NULL: all: the CPU trainer)
    const PlanBackend *plan_backend; // how this trainer's backend lays out activations (planner.h)
    GPT2 model;
    DataLoader train, val;
    int have_val, have_tok;
    int first_step;      // 1, or the step after the checkpoint resumed from
    uint64_t sample_rng; // the sampler's generator: part of a checkpoint
    long applied;        // updates applied (Adam's t, the LR schedule's step): fp16 skips overflows
    LossScaler scaler;   // fp16's (mixed_precision.h); bf16 and fp32 run at scale 1
    Tokenizer tok;
    FILE *log;         // rank 0 only
    const char *blas;  // the including trainer's BLAS library, for the header (NULL: none)
    int nodes;         // hosts the job spans (job.h)
    Trace trace;       // this rank's timeline (--trace) and each step's times by kind (core/trace.h)
    Hang hang;         // this rank's flight recorder and side channel: a hang's verdict (run/verdict.h)
    FILE *trace_file;  // rank 0, with --trace
} Run;

// Setup failures are agreed on by all ranks, so that every rank exits cleanly together;
// failures once training runs are abrupt: MPI_Abort ends the job.
static int all_ok(int ok) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}
static void die(void) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1); // ends every rank (OpenMPI says so at length)
    MPI_Finalize();
    exit(1);
}

// The lowest rank for which ok is 0, or -1: the one that reports a failure every rank shares.
static int first_failure(int ok, int rank, int world) {
    int who = ok ? world : rank;
    MPI_Allreduce(MPI_IN_PLACE, &who, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return who == world ? -1 : who;
}

// Whether process pid of this host still runs (a zombie does not: it is dead, just not reaped).
static int process_alive(long pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512], state = 0;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = 0;
        const char *close = strrchr(buf, ')'); // "pid (comm) S ...": the comm may hold anything
        if (close && close[1] == ' ') state = close[2];
        fclose(f);
    }
    return state != 'Z' && state != 'X';
}

// NVMe offload: this rank's scratch directory under --nvme-path (DIR/zeroc-HOST-PID-rankR, into
// dir), after what a run should fail on before it starts: DIR is a writable directory whose
// filesystem has free what this host's ranks will keep there (the planner's bytes). Directories a
// run on this host left behind when it was killed (their process gone) are removed first. Every
// rank calls it; returns 0, or -1 after one line from the lowest failing rank.
static int nvme_prepare(Run *r, char *dir, size_t n) {
    const TrainConfig *c = &r->cfg;
    const char *base = c->nvme_path;
    char host[256] = "host", msg[600] = "";
    gethostname(host, sizeof(host) - 1);
    for (char *h = host; *h; h++) if (*h == '/' || *h == '-') *h = '_';
    int lrank, nlocal;
    job_local(MPI_COMM_WORLD, &lrank, &nlocal);
    struct stat st;
    int found = stat(base, &st) == 0, ok = found && S_ISDIR(st.st_mode);
    if (!ok) snprintf(msg, sizeof(msg), "--nvme-path %s: %s", base, found ? "not a directory" : strerror(errno));
    else if (access(base, W_OK | X_OK) != 0) {
        ok = 0;
        snprintf(msg, sizeof(msg), "--nvme-path %s: not writable (%s)", base, strerror(errno));
    }
    if (ok && lrank == 0) { // a killed run's leftovers: zeroc-HOST-PID-rankR whose PID is gone
        char prefix[300];
        snprintf(prefix, sizeof(prefix), "zeroc-%s-", host);
        DIR *d = opendir(base);
        for (struct dirent *e; d && (e = readdir(d));) {
            long pid;
            int rk;
            char tail[8];
            if (strncmp(e->d_name, prefix, strlen(prefix)) ||
                sscanf(e->d_name + strlen(prefix), "%ld-rank%d%1s", &pid, &rk, tail) != 2 || pid <= 0 || process_alive(pid))
                continue;
            char sub[4400], f[4700];
            snprintf(sub, sizeof(sub), "%s/%s", base, e->d_name);
            DIR *s2 = opendir(sub);
            for (struct dirent *g; s2 && (g = readdir(s2));)
                if (g->d_name[0] != '.' || (g->d_name[1] && strcmp(g->d_name, ".."))) {
                    snprintf(f, sizeof(f), "%s/%s", sub, g->d_name);
                    unlink(f);
                }
            if (s2) closedir(s2);
            if (rmdir(sub) == 0)
                printf("note: removed %s, NVMe scratch of a run that did not end cleanly (process %ld is gone)\n", sub, pid);
        }
        if (d) closedir(d);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // the bytes every rank of this host keeps there (all alike), against what its filesystem has free
    PlanInput in = planner_input_from_train_config(c, r->world, r->plan_backend);
    MemoryPlan plan;
    double here = (planner_plan(&in, &plan) == 0 ? plan.nvme_total : 0.0) * nlocal;
    struct statvfs fs;
    if (ok && statvfs(base, &fs) == 0 && fs.f_blocks > 0 && (double)fs.f_bavail * fs.f_frsize < here) { // (ramfs: no sizes)
        ok = 0;
        snprintf(msg, sizeof(msg), "--nvme-path %s: %.0f bytes free, but this host's ranks keep %.0f bytes there "
                 "(%.2f GB; --plan --offload-optimizer nvme shows them)", base, (double)fs.f_bavail * fs.f_frsize, here,
                 here / 1e9);
    }
    snprintf(dir, n, "%s/zeroc-%s-%ld-rank%d", base, host, (long)getpid(), r->rank);
    int who = first_failure(ok, r->rank, r->world);
    if (who == r->rank) fprintf(stderr, "error: %s\n", msg);
    return who < 0 ? 0 : -1;
}

// Options, model, data, log. Returns 0 to train, 1 to exit successfully (--help), -1 on error.
static int setup(Run *r, int argc, char **argv) {
    TrainConfig *c = &r->cfg;
    config_defaults(c);
    if (r->build) config_set_build(c, r->build);
    // Options are the same on every rank: only rank 0 reports what is wrong with them.
    int saved_stderr = dup(2);
    if (r->rank != 0 && !freopen("/dev/null", "w", stderr)) return -1;
    int rc = config_parse(c, argc, argv);
    if (rc == 0 && c->ds_config_path && ds_config_apply(c, c->ds_config_path, r->world, c->ds_strict)) rc = -1;
    if (rc == 0 && config_locate_defaults(c)) rc = -1;
    FILE *init = NULL;
    GPT2FileInfo info;
    CkptManifest *resume = c->resume_path ? (CkptManifest *)xmalloc(sizeof(CkptManifest)) : NULL;
    if (rc == 0 && c->init_path) {
        if ((init = gpt2_open_checkpoint(c->init_path, &info))) c->model = info.cfg;
        else rc = -1;
    }
    if (rc == 0 && resume) {
        if (ckpt_read_manifest(c->resume_path, resume) == 0) c->model = resume->cfg;
        else rc = -1;
    }
    if (rc == 0 && config_validate(c, r->world)) rc = -1;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    if (r->rank != 0 && rc == 1) rc = 1;
    if (rc != 0) { if (init) fclose(init); free(resume); return rc; }
    if (r->rank == 0 && c->ds_config_path) config_print_resolved(stdout, c);

    r->accum = config_accum_steps(c, r->world);
    if (c->nvme_host_cache_bytes < 0 || c->nvme_readahead_bytes < 0) { // auto: rank 0 settles them for all (the plan is everyone's)
        PlanInput in = planner_input_from_train_config(c, r->world, r->plan_backend);
        double b[2] = {c->nvme_host_cache_bytes, c->nvme_readahead_bytes};
        if (r->rank == 0) planner_nvme_auto(&in, r->world / (r->nodes > 0 ? r->nodes : 1), &b[0], &b[1]);
        MPI_Bcast(b, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (r->rank == 0 && c->nvme_host_cache_bytes < 0)
            printf("--nvme-host-cache auto: %.0f bytes (%.2f GB) of the optimizer state per rank in host memory\n", b[0], b[0] / 1e9);
        if (r->rank == 0 && c->nvme_readahead_bytes < 0)
            printf("--nvme-readahead auto: %.0f bytes (%.2f GB) of host memory per rank to read the next update into\n", b[1], b[1] / 1e9);
        c->nvme_host_cache_bytes = b[0]; c->nvme_readahead_bytes = b[1];
    }
    char nvme_dir[4500] = "";
    int nvme = c->offload_optimizer == LOC_NVME || c->offload_param == LOC_NVME;
    if (nvme && nvme_prepare(r, nvme_dir, sizeof(nvme_dir))) { if (init) fclose(init); free(resume); return -1; }
    ZeroOptions zo = config_zero_options(c); // (the planner's and the time model's too)
    zo.nvme_dir = nvme_dir;
    if (c->trace_path) MPI_Barrier(MPI_COMM_WORLD); // the ranks' trace clocks start together
    trace_init(&r->trace, r->rank, c->trace_path != NULL);
    ZeroBackend be = trainer_backend(r); // (after trace_init: a backend may set the trace's clock sync)
    char why[320];
    if (zero_pp_problem(&zo, &be, r->world, why, sizeof(why))) {
        if (r->rank == 0) fprintf(stderr, "error: %s\n", why);
        if (init) fclose(init);
        free(resume);
        return -1;
    }
    gpt2_build(&r->model, &c->model, c->batch, c->seq_len, r->rank, r->world, &zo, config_recompute(c), be);
    r->model.z.trace = &r->trace;
    if (r->rank == 0 && (r->model.z.qwz || r->model.z.hpz > 1 || r->model.z.qgz)) {
        const Zero *z = &r->model.z;
        char hp[32] = "off", qg[32] = "off";
        if (z->hpz > 1) snprintf(hp, sizeof(hp), "groups of %d", z->hpz);
        if (z->qgz) snprintf(qg, sizeof(qg), "int%d", z->qgz);
        printf("ZeRO++: qwZ %s, hpZ %s, qgZ %s; blocks of %zu; %d host%s x %d ranks\n", z->qwz ? "int8" : "off", hp, qg,
               z->block, r->world / z->per_host, r->world / z->per_host == 1 ? "" : "s", z->per_host);
    }
    hang_start(&r->hang, &r->model.z, MPI_COMM_WORLD, r->nodes, c->log_path, c->comm_timeout, c->check_collectives);
    if (r->rank == 0 && zero_store_nvme(&r->model.z.st) && !zero_store_nvme(&r->model.z.st)->direct)
        printf("note: --nvme-path %s does not take direct I/O (O_DIRECT; ramfs and older tmpfs do not): the NVMe files go through "
               "the page cache, which may keep them in memory\n", c->nvme_path);
    if (r->rank == 0 && r->model.z.be.unified && (c->offload_optimizer == LOC_HOST || c->offload_param == LOC_HOST))
        printf("note: --offload-optimizer %s / --offload-param %s: this trainer keeps every model state in host memory "
               "already, so cpu moves nothing%s\n", zero_offload_names[c->offload_optimizer], zero_offload_names[c->offload_param],
               c->offload_ratio < 1.0f ? "; --offload-ratio (Twin-Flow) has no device to keep a part on, so it changes "
                                         "nothing either" : "");
    // The delayed update's host part on a helper thread during the next forward and backward
    // (zero/update.h), unless the parameters are on NVMe or ZEROC_DELAYED_SYNC=1 (a test's switch:
    // the synchronous update, the same bits) says otherwise: one line says which.
    r->model.z.held_sync = getenv("ZEROC_DELAYED_SYNC") && !strcmp(getenv("ZEROC_DELAYED_SYNC"), "1");
    if (r->rank == 0 && c->offload_delayed_update)
        printf("delayed update: %s%s\n", zero_held_overlaps(&r->model.z)
               ? "the host's update runs on a helper thread during the next step's forward and backward"
               : r->model.z.held_sync ? "synchronous, after the next step's backward (ZEROC_DELAYED_SYNC=1)"
               : "synchronous, after the next step's backward (the parameters on NVMe are written back by the step's thread)",
               zero_held_overlaps(&r->model.z) && c->offload_optimizer == LOC_NVME
               ? ", its NVMe reads and writes too (the step's thread waits for them only after the backward)" : "");
    // (no read-ahead area then: zero/nvme_store.h's shape; the threaded update reads during the forward itself)
    if (r->rank == 0 && c->offload_delayed_update && c->offload_optimizer == LOC_NVME && c->nvme_readahead_bytes > 0 &&
        zero_held_threaded(r->model.z.where, 1))
        printf("note: --nvme-readahead %.0f: no read-ahead area with the delayed update on its helper thread (it reads "
               "during the forward and backward itself)\n", c->nvme_readahead_bytes);
    // On a device the host cannot address, its held gradients' copy to the host: asynchronous into
    // pinned memory, else (pageable: CUDA stages it) waited for when the update is held; one line says which.
    const Zero *hz = &r->model.z;
    if (r->rank == 0 && zero_held_overlaps(hz) && hz->held_host != hz->held)
        printf("delayed update: the held gradients' copy to the host %s\n", hz->held_async
               ? "is asynchronous (pinned memory), overlapped with the next forward"
               : "is synchronous (pageable host memory: --pin-memory overlaps it)");
    r->first_step = 1;
    r->sample_rng = c->seed ^ 0x5A3C1E;
    if (c->precision == ZC_FP16)
        loss_scaler_init(&r->scaler, c->loss_scale, c->initial_scale_power, c->loss_scale_window, c->hysteresis,
                         c->min_loss_scale, c->on_min_scale_skip); // config_parse checked the ranges
    else
        loss_scaler_init(&r->scaler, 1.0f, 0, 1, 1, 1.0f, 0); // a static scale of 1: nothing to do
    TrainerState st;
    int ok = resume ? ckpt_load(resume, &r->model.z, 1, NULL, NULL) == 0 && ckpt_read_state(resume, &st) == 0
                    : gpt2_load_or_init(&r->model, init, c->init_path, init ? info.version : 3, c->seed) == 0;
    if (init) fclose(init);
    if (!all_ok(ok)) { free(resume); return -1; }

    ok = dataloader_init(&r->train, c->train_data, c->batch, c->seq_len, r->rank, r->world, !c->no_shuffle, c->seed,
                         c->model.vocab_size) == 0;
    if (ok && resume) { // continue exactly where the checkpointed run was
        ok = dataloader_restore(&r->train, &st.train_data) == 0;
        r->first_step = (int)st.step + 1;
        r->sample_rng = st.sample_rng;
        r->applied = (long)st.adam_t;
        // the scale goes on where an fp16 run left it; from any other run it starts afresh
        if (c->precision == ZC_FP16 && !strcmp(resume->precision, "fp16")) r->scaler = st.scaler;
        if (r->rank == 0)
            printf("resuming from %s: step %ld, saved by %d ranks at ZeRO-%d\n", resume->dir, resume->step, resume->world,
                   resume->stage);
    }
    free(resume);
    if (!all_ok(ok)) return -1;
    r->have_val = c->val_every > 0 && c->val_steps > 0;
    ok = !r->have_val || dataloader_init(&r->val, c->val_data, c->batch, c->seq_len, r->rank, r->world, 0, c->seed,
                                         c->model.vocab_size) == 0;
    if (!all_ok(ok)) return -1;
    int sampling = c->sample_len > 0 && c->sample_every > 0;
    r->have_tok = sampling && c->tokenizer_path && tokenizer_init(&r->tok, c->tokenizer_path) == 0;
    if (r->rank == 0 && sampling && !r->have_tok && c->tokenizer_path) printf("(no tokenizer: samples print token ids)\n");
    if (r->rank == 0 && c->log_path && !(r->log = fopen(c->log_path, "w"))) {
        fprintf(stderr, "error: %s: cannot open log file\n", c->log_path);
        ok = 0;
    }
    if (r->log) config_log_resolved(r->log, c);
    if (r->rank == 0 && c->trace_path && !(r->trace_file = fopen(c->trace_path, "w"))) {
        fprintf(stderr, "error: %s: cannot open trace file\n", c->trace_path);
        ok = 0;
    }
    return all_ok(ok) ? 0 : -1;
}

// ----------------------------------------------------------------------------------------
// Reports: stdout for people, --log JSON lines for programs (rank 0 writes for all ranks)

static void print_header(const Run *r) {
    const TrainConfig *c = &r->cfg;
    const GPT2Config *g = &c->model;
    char shape[96], batch[96], opt[128];
    snprintf(shape, sizeof(shape), "L=%d C=%d NH=%d maxT=%d V=%d Vp=%d", g->num_layers, g->channels,
             g->num_heads, g->max_seq_len, g->vocab_size, g->padded_vocab_size);
    snprintf(batch, sizeof(batch), "B=%d T=%d x %d procs x %d accum = %ld tokens/step", c->batch, c->seq_len,
             r->world, r->accum, c->total_batch);
    if (c->lr_schedule < LR_DS_WARMUP) // ours: warmup, then down to min_lr_frac of the peak
        snprintf(opt, sizeof(opt), "lr %g %s warmup %d min %g wd %g clip %g", c->lr, lr_schedule_names[c->lr_schedule],
                 c->warmup, c->min_lr_frac, c->weight_decay, c->grad_clip);
    else // DeepSpeed's: their own parameters (the resolved configuration lists them all)
        snprintf(opt, sizeof(opt), "lr %g %s warmup %d (%s) wd %g clip %g", c->lr, lr_schedule_names[c->lr_schedule],
                 c->warmup, c->warmup_type == LR_WARMUP_LOG ? "log" : "linear", c->weight_decay, c->grad_clip);
    const char *model = c->init_path ? c->init_path : (c->model_name ? c->model_name : "from scratch");
    printf("+--------------------+-------------------------------------------------------+\n");
    printf("| %-18s | %-53s |\n", "model", model);
    printf("| %-18s | %-53s |\n", "shape", shape);
    printf("| %-18s | %-53zu |\n", "parameters", r->model.z.lay.num_params);
    printf("| %-18s | %-53s |\n", "train data", c->train_data);
    printf("| %-18s | %-53llu |\n", "train tokens", (unsigned long long)dataloader_num_tokens(&r->train));
    printf("| %-18s | %-53s |\n", "val data", r->have_val ? c->val_data : "(off)");
    printf("| %-18s | %-53s |\n", "batch", batch);
    printf("| %-18s | %-53d |\n", "steps", c->steps);
    char optname[32];
    snprintf(optname, sizeof(optname), "optimizer (%s)", optimizer_info(c->optimizer)->name);
    printf("| %-18s | %-53s |\n", optname, opt);
    printf("| %-18s | %-53d |\n", "zero stage", c->zero_stage);
    char prec[96];
    if (c->precision == ZC_FP16 && c->loss_scale > 0.0f)
        snprintf(prec, sizeof(prec), "fp16, static loss scale %g, fp32 master weights", c->loss_scale);
    else if (c->precision == ZC_FP16)
        snprintf(prec, sizeof(prec), "fp16, dynamic loss scale from 2^%d, fp32 master weights", c->initial_scale_power);
    else
        snprintf(prec, sizeof(prec), "%s", c->precision == ZC_BF16 ? "bf16, fp32 master weights" : "fp32");
    printf("| %-18s | %-53s |\n", "precision", prec);
    printf("| %-18s | %-53d |\n", "threads per rank", omp_get_max_threads());
    if (r->blas) printf("| %-18s | %-53s |\n", "BLAS", r->blas);
    printf("+--------------------+-------------------------------------------------------+\n");
}

// Every rank's n numbers, rank-major, on every rank: each fills its own slots of a zeroed
// vector and one sum over the ranks assembles them (so any backend's all-reduce gathers).
static double *gather_to_all(Run *r, const double *mine, int n, const size_t *mine_sizes) {
    double *all = (double *)calloc((size_t)n * r->world, sizeof(double));
    for (int k = 0; k < n; k++) all[(size_t)r->rank * n + k] = mine ? mine[k] : (double)mine_sizes[k];
    zero_sum_doubles(&r->model.z, all, n * r->world);
    return all;
}

// What every rank allocated, beside the planner's prediction and the textbook (planner.h).
static void report_memory(Run *r) {
    Zero *z = &r->model.z;
    double *all = gather_to_all(r, NULL, MEM_KINDS, z->mem);
    size_t twin_mine = zero_twin_bytes(&z->st); // Twin-Flow: the offloaded kinds' bytes kept on the device
    double *twin = gather_to_all(r, NULL, 1, &twin_mine);
    if (r->rank == 0) {
        PlanInput in = planner_input_from_train_config(&r->cfg, r->world, r->plan_backend);
        in.threads = omp_get_max_threads(); // rank 0's, as share_cores gave every rank
        in.zo.zeropp_per_host = z->per_host; // the hosts the backend found
        MemoryPlan plan;
        if (planner_plan(&in, &plan) == 0) planner_print_table_twin(stdout, &plan, all, r->world, twin);
        for (int q = 0; q < r->world && r->log; q++) {
            fprintf(r->log, "{\"event\":\"memory\",\"rank\":%d,\"world\":%d,\"zero_stage\":%d,\"num_params\":%zu,"
                            "\"padded_params\":%zu", q, r->world, z->stage, z->lay.num_params, z->lay.num_flat);
            double at[LOC_KINDS] = {0.0, 0.0, 0.0};
            for (int k = 0; k < MEM_KINDS; k++) {
                at[z->where[k]] += all[q * MEM_KINDS + k];
                if (zero_memory_name(z->optimizer, k)) fprintf(r->log, ",\"%s\":%.0f", zero_memory_name(z->optimizer, k), all[q * MEM_KINDS + k]);
            }
            at[z->where[MEM_MASTER]] -= twin[q];
            at[LOC_DEVICE] += twin[q];
            for (int l = 0; l < LOC_KINDS; l++) fprintf(r->log, ",\"%s\":%.0f", zero_location_names[l], at[l]);
            fprintf(r->log, ",\"optimizer_on_device\":%.0f", twin[q]);
            fprintf(r->log, ",\"where\":{");
            for (int k = 0, first = 1; k < MEM_KINDS; k++)
                if (zero_memory_name(z->optimizer, k)) {
                    fprintf(r->log, "%s\"%s\":\"%s\"", first ? "" : ",", zero_memory_name(z->optimizer, k),
                            zero_location_names[z->where[k]]);
                    first = 0;
                }
            fprintf(r->log, "}}\n");
        }
    }
    free(all);
    free(twin);
}

// Bytes each rank moved this step, per collective (ring model), beside the textbook figure.
// Each rank's bytes also split by where they went: inside its host, or across hosts (zero.h's
// comm_inside / comm_across), with the textbook's bytes across hosts beside them (ZeRO-3's 3 Psi,
// ZeRO++'s 0.75 Psi: zero_theory_across).
enum { COMM_INSIDE = ZC_NUM_COLLECTIVES, COMM_ACROSS, COMM_FIELDS };
static void report_comm(Run *r, int step) {
    Zero *z = &r->model.z;
    double mine[COMM_FIELDS];
    for (int k = 0; k < ZC_NUM_COLLECTIVES; k++) mine[k] = z->comm[k];
    mine[COMM_INSIDE] = z->comm_inside; mine[COMM_ACROSS] = z->comm_across;
    double *all = gather_to_all(r, mine, COMM_FIELDS, NULL);
    if (r->rank == 0) {
        for (int q = 0; q < r->world && r->log; q++) {
            double *x = all + q * COMM_FIELDS;
            fprintf(r->log, "{\"event\":\"comm\",\"step\":%d,\"rank\":%d,\"all_reduce\":%.0f,\"reduce_scatter\":%.0f,"
                            "\"all_gather\":%.0f,\"inside_host\":%.0f,\"across_hosts\":%.0f}\n", step, q, x[ZC_ALL_REDUCE],
                    x[ZC_REDUCE_SCATTER], x[ZC_ALL_GATHER], x[COMM_INSIDE], x[COMM_ACROSS]);
        }
        if (step == 1 && r->world > 1) {
            double total = all[0] + all[1] + all[2], mib = 1024.0 * 1024.0;
            printf("communication per rank in step 1, MiB: all_reduce %.2f, reduce_scatter %.2f, all_gather %.2f = %.2f "
                   "(textbook for one micro-step: %.2f)\n", all[0] / mib, all[1] / mib, all[2] / mib, total / mib,
                   zero_theory_comm(z->stage, (double)z->lay.num_params, r->world, (double)z->esize) / mib);
            int L = z->per_host, H = r->world / L;
            if (H > 1 || z->qwz || z->hpz > 1 || z->qgz) {
                double psi = (double)z->lay.num_params * (double)z->esize;
                printf("  of which inside the host %.2f, across hosts %.2f (%d host%s x %d ranks); textbook across hosts: "
                       "%.2f = %.2f Psi (Psi: the model's %zu-byte parameters; ZeRO-3 3 Psi, ZeRO++ 0.75 Psi, each x "
                       "(N-L)/N)\n", all[COMM_INSIDE] / mib, all[COMM_ACROSS] / mib, H, H == 1 ? "" : "s", L,
                       zero_theory_across(z) / mib, zero_theory_across(z) / psi, z->esize);
            }
        }
    }
    free(all);
}

// Page faults of this process so far (getrusage: minor + major). A step's count goes in the log
// (page_faults, rank 0's): memory a step maps and touches afresh instead of reusing, which costs
// most where a fault is a hypercall (a paravirtualised VM); in steady state it is near zero.
static long page_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt + ru.ru_majflt;
}

// Each process's peak resident memory (getrusage): what the planner's device total (the CPU
// trainer) or host total (the GPU trainer) is about, plus the program and its libraries.
static void report_peak_rss(Run *r) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss * 1024.0, *all = gather_to_all(r, &rss, 1, NULL), top = 0.0;
    for (int q = 0; q < r->world; q++) top = all[q] > top ? all[q] : top;
    if (r->rank == 0) {
        printf("peak resident memory: rank 0 %.3f GB, largest of %d ranks %.3f GB\n", all[0] / 1e9, r->world, top / 1e9);
        for (int q = 0; q < r->world && r->log; q++)
            fprintf(r->log, "{\"event\":\"peak_rss\",\"rank\":%d,\"bytes\":%.0f}\n", q, all[q]);
    }
    free(all);
}

// The step's times by kind (core/trace.h's categories, rank 0's): forward, backward and the
// optimizer on the step's thread, collectives in flight (comm_ms: the union of their spans) and
// the time the thread was blocked on them (exposed_comm_ms), data loading, and any other
// category a feature records (its thread's time as NAME_ms, its overlapped work as
// NAME_flight_ms). Without real completion times (the GPU without --trace) comm is null. NVMe's
// times are core/nvme.h's own (nvme_ms, exposed_io_ms: the step loop logs them).
static void log_step_times(FILE *f, const TraceStep *s, int comm_timed) {
    fprintf(f, ",\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"optim_ms\":%.3f", s->lane[TRACE_FORWARD] * 1e3,
            s->lane[TRACE_BACKWARD] * 1e3, s->lane[TRACE_OPTIMIZER] * 1e3);
    if (comm_timed) fprintf(f, ",\"comm_ms\":%.3f,\"exposed_comm_ms\":%.3f", s->flight[TRACE_COMM] * 1e3, s->lane[TRACE_WAIT] * 1e3);
    else fprintf(f, ",\"comm_ms\":null,\"exposed_comm_ms\":null");
    fprintf(f, ",\"data_ms\":%.3f", s->lane[TRACE_DATA] * 1e3);
    for (int k = TRACE_RECOMPUTE; k < TRACE_NUM_CATS; k++) {
        if (k == TRACE_OPTIMIZER || k == TRACE_COMM || k == TRACE_WAIT || k == TRACE_DATA || k == TRACE_NVME) continue;
        if (s->lane[k] > 0) fprintf(f, ",\"%s_ms\":%.3f", trace_cat_names[k], s->lane[k] * 1e3);
        if (s->flight[k] > 0) fprintf(f, ",\"%s_flight_ms\":%.3f", trace_cat_names[k], s->flight[k] * 1e3);
    }
}

// --trace: every rank's events to rank 0, one rank at a time, written there as one Chrome trace.
static void write_trace(Run *r) {
    if (!r->cfg.trace_path) return;
    size_t n = trace_packed_bytes(&r->trace); // < 2^31: at most TRACE_MAX_EVENTS events of 48 bytes
    char *mine = (char *)xmalloc(n);
    trace_pack(&r->trace, mine);
    if (r->trace.misnested) fprintf(stderr, "warning: rank %d: trace spans were not nested (an end without its begin, "
                                              "or deeper than %d); the file may show them wrongly\n", r->rank, TRACE_MAX_DEPTH);
    if (r->rank != 0) {
        long long len = (long long)n;
        MPI_Send(&len, 1, MPI_LONG_LONG, 0, 19, MPI_COMM_WORLD);
        MPI_Send(mine, (int)n, MPI_BYTE, 0, 20, MPI_COMM_WORLD);
        free(mine);
        return;
    }
    const TrainConfig *c = &r->cfg;
    char meta[512];
    snprintf(meta, sizeof(meta), "\"world\":%d,\"zero_stage\":%d,\"precision\":\"%s\",\"num_params\":%zu,\"layers\":%d,"
             "\"channels\":%d,\"batch\":%d,\"seq_len\":%d,\"grad_accum\":%d,\"steps\":%d", r->world, c->zero_stage,
             zc_dtype_names[c->precision], r->model.z.lay.num_params, c->model.num_layers, c->model.channels, c->batch,
             c->seq_len, r->accum, c->steps);
    FILE *f = r->trace_file;
    long long events = 0, dropped = 0;
    trace_write_begin(f);
    for (int q = 0; q < r->world; q++) {
        char *buf = mine;
        if (q > 0) {
            long long len;
            MPI_Recv(&len, 1, MPI_LONG_LONG, q, 19, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            buf = (char *)xmalloc((size_t)len);
            MPI_Recv(buf, (int)len, MPI_BYTE, q, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        TraceRank k;
        trace_unpack(buf, &k);
        trace_write_rank(f, &k, q == 0);
        events += k.h.nevents;
        dropped += k.h.dropped;
        free(k.ev);
        if (buf != mine) free(buf);
    }
    free(mine);
    int bad = trace_write_end(f, meta, dropped);
    bad |= fclose(f) != 0;
    r->trace_file = NULL;
    if (bad) fprintf(stderr, "error: %s: writing the trace failed\n", c->trace_path);
    else printf("trace: %s (%lld events from %d ranks%s; open it in https://ui.perfetto.dev or chrome://tracing)\n",
                c->trace_path, events, r->world, dropped ? ", some dropped: the buffer was full" : "");
}

static void format_eta(char *buf, size_t n, double seconds) {
    long s = (long)(seconds + 0.5);
    snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

// ----------------------------------------------------------------------------------------
// Training

// One optimizer step: accumulate gradients over the micro-steps, reduce them as zero.h
// schedules, clip, update. fp16 multiplies the loss by the loss scale, so that small gradients
// survive in 16 bits, and divides it out in the update; a step whose gradient overflowed on any
// rank is skipped on every rank (the global norm is then Inf or NaN everywhere: detecting it
// costs no extra collective), and the loss scaler decides what comes next.
typedef struct {
    float loss;  // averaged over the whole global batch
    float norm;  // of the true (unscaled) gradient
    float lr, scale;
    int skipped;
} StepResult;
static StepResult train_step(Run *r, int step) {
    const TrainConfig *c = &r->cfg;
    GPT2 *m = &r->model;
    int B = c->batch, T = c->seq_len;
    zero_begin_step(&m->z, step);
    // Each position's loss enters the objective with weight 1/(all positions of all ranks),
    // so summing the ranks' gradients gives the gradient of the global mean loss. Where the
    // division by the world size happens is DeepSpeed's prescale_gradients and
    // gradient_predivide_factor f (its engine's allreduce_bucket): prescaled, all of it before the
    // sum (folded into the loss's gradient, as always here); else 1/f before and f/world after
    // (post: it joins the loss scale's removal in the update and the norm). f = 1, DeepSpeed's
    // default, divides after the sum there and before it here: the same mean, bit for bit when
    // the world size is a power of two (scaling by a power of two commutes with rounding).
    float scale = r->scaler.scale, pre = (float)r->world, post = 1.0f;
    double f = ds_extra_value(c, DSX_GRADIENT_PREDIVIDE_FACTOR);
    if (ds_extra_value(c, DSX_PRESCALE_GRADIENTS) == 0.0 && f != 1.0 && f != (double)r->world) {
        pre = (float)f;
        post = (float)(f / r->world);
    }
    float dloss = scale / ((float)B * T * r->accum * pre);
    double loss = 0.0;
    Trace *tr = &r->trace;
    for (int micro = 0; micro < r->accum; micro++) {
        trace_set_micro(tr, micro);
        double s = trace_begin(tr, "data", TRACE_DATA, -1, 2.0 * B * T * sizeof(int));
        if (dataloader_next(&r->train, m->inputs, m->targets)) die();
        trace_end(tr, s);
        zero_begin_forward(&m->z, micro, r->accum);
        s = trace_begin(tr, "forward_pass", TRACE_FORWARD, -1, 0.0);
        loss += gpt2_forward(m, m->inputs, m->targets, B, T, dloss);
        trace_end(tr, s);
        s = trace_begin(tr, "backward_pass", TRACE_BACKWARD, -1, 0.0);
        gpt2_backward(m, B, T);
        trace_end(tr, s);
    }
    loss += gpt2_pending_losses(m);
    zero_sum_scalars(&m->z, &loss, 1);
    double opt = trace_begin(tr, "optimizer", TRACE_OPTIMIZER, -1, 0.0);
    float norm = gpt2_grad_norm(m); // of the scaled gradient
    if (c->dump_grads_path && r->rank == 0 && (step == r->first_step || strstr(c->dump_grads_path, "%d"))) {
        char path[4096]; // "%d" in the path: every step's, under its number
        const char *at = strstr(c->dump_grads_path, "%d");
        if (at) snprintf(path, sizeof(path), "%.*s%d%s", (int)(at - c->dump_grads_path), c->dump_grads_path, step, at + 2);
        else snprintf(path, sizeof(path), "%s", c->dump_grads_path);
        if (dump_grads(path, m)) die();
    }
    LrSchedule sched = config_lr_schedule(c);
    StepResult res = {(float)(loss / ((double)r->accum * r->world)), norm / scale * post, lr_at_step(&sched, (int)r->applied),
                      scale, 0};
    int action = c->precision == ZC_FP16 ? loss_scaler_update(&r->scaler, !isfinite(norm)) : ZC_STEP_APPLY;
    if (action == ZC_STEP_ABORT) {
        if (r->rank == 0) fprintf(stderr, "error: step %d: gradients overflowed at loss scale %g. %s\n", step, scale,
                                  loss_scaler_abort_advice());
        die();
    }
    res.skipped = action == ZC_STEP_SKIP;
    // The delayed parameter update (zero.h): the previous step's update, which the rule runs
    // during this step's forward and backward, lands now (after them: they used the parameters
    // from before it); this step's is held for the next (the first --offload-delay-warmup steps
    // are exact).
    OptStep held;
    if (zero_take_held(&m->z, &held)) gpt2_update(m, &held);
    if (res.skipped) { // no update, no optimizer state change, the schedule waits
        trace_instant(tr, "skipped step", TRACE_OPTIMIZER, -1, scale);
        trace_end(tr, opt);
        return res;
    }
    r->applied++;
    OptimizerHyper hyper = config_optimizer(c);
    OptStep upd = optimizer_step_begin(&hyper, res.lr, (int)r->applied, res.norm);
    upd.grad_scale /= scale;
    upd.grad_scale *= post;
    if (c->offload_delayed_update && step > c->offload_delay_warmup && step < c->steps) zero_hold(&m->z, &upd);
    else gpt2_update(m, &upd); // (the last step's update is not held: the run ends with every update applied)
    trace_end(tr, opt);
    return res;
}

// Mean loss over val_steps batches from the start of the validation set, spread over the
// ranks as the dataloader interleaves them: the same batches one process would see.
static float validate(Run *r) {
    GPT2 *m = &r->model;
    int steps = r->cfg.val_steps, per_rank = (steps + r->world - 1) / r->world;
    double t0 = trace_begin(&r->trace, "validation", TRACE_EVAL, -1, 0.0);
    dataloader_reset(&r->val);
    double sum = 0.0;
    for (int k = 0; k < per_rank; k++) {
        if (dataloader_next(&r->val, m->inputs, m->targets)) die();
        zero_begin_forward(&m->z, 0, 1);
        float l = gpt2_forward(m, m->inputs, m->targets, r->cfg.batch, r->cfg.seq_len, 0.0f);
        if (k * r->world + r->rank < steps) sum += l; // past the end: ran only for ZeRO-3's gathers
    }
    zero_sum_doubles(&m->z, &sum, 1);
    trace_end(&r->trace, t0);
    return (float)(sum / steps);
}

// A sharded checkpoint to resume from (checkpoint.h), and the model in llm.c's format; `latest`
// names the checkpoint once both are written. Returns 0, or -1 on every rank when the save
// failed (a full disk, say): then one line says where and why and what happens next (the run
// stops unless --on-save-error continue, and always after its final save), and nothing of this
// save is left behind; `latest` and the checkpoints before are untouched.
// A held update (the delayed parameter update) is applied first: a checkpoint holds every update
// of the steps before it, so that resuming from it continues as the run did after the save.
static int save(Run *r, int step, int final) {
    OptStep held;
    if (zero_take_held(&r->model.z, &held)) gpt2_update(&r->model, &held);
    const char *dir = r->cfg.out_dir;
    char path[4096], tmp[4104], why[CKPT_PATH + 256];
    TrainerState st;
    memset(&st, 0, sizeof(st));
    st.magic = CKPT_STATE_MAGIC;
    st.step = (uint64_t)step;
    st.adam_t = (uint64_t)r->applied;
    st.scaler = r->scaler;
    st.sample_rng = r->sample_rng;
    st.train_data = dataloader_state(&r->train);
    Zero *z = &r->model.z;
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    double t0 = trace_begin(&r->trace, "checkpoint", TRACE_CHECKPOINT, -1, 0.0);
    int bad = ckpt_save(dir, z, &r->cfg.model, &st, zc_dtype_names[r->cfg.precision], why, sizeof(why)) != 0 ||
              gpt2_save(&r->model, path, why, sizeof(why)) != 0 || ckpt_commit(dir, z, step, why, sizeof(why)) != 0;
    trace_end(&r->trace, t0);
    if (!bad) {
        if (r->rank == 0 && rename(tmp, path) != 0) fprintf(stderr, "warning: %s: %s\n", tmp, strerror(errno));
        if (r->rank == 0) printf("saved %s/step_%08d and %s\n", dir, step, path);
        return 0;
    }
    if (r->rank == 0) remove(tmp);
    ckpt_discard(dir, z, step);
    if (why[0]) { // the one rank that knows what failed says it
        char latest[CKPT_PATH + 16], name[64] = "";
        snprintf(latest, sizeof(latest), "%s/latest", dir);
        FILE *f = fopen(latest, "r");
        if (f && fscanf(f, "%63s", name) != 1) name[0] = 0;
        if (f) fclose(f);
        fprintf(stderr, "error: checkpoint of step %d not saved: %s; %s%s%s; %s\n", step, why, name[0] ? latest : dir,
                name[0] ? " still names " : " holds no checkpoint yet", name,
                r->cfg.on_save_error_continue && !final ? "training goes on without it (--on-save-error continue)"
                : final ? "stopping" : "stopping (--on-save-error continue would go on)");
        fflush(stderr);
    }
    return -1;
}

// --export CKPT OUT: the model of a sharded checkpoint as one llm.c file, unit by unit, so
// memory stays bounded by one unit (DeepSpeed's zero_to_fp32). No MPI: one process reads all.
typedef struct { FILE *f; ParamLayout lay; int version; } ExportCtx;
static int export_unit(int u, const float *unit, void *ctx) {
    ExportCtx *e = (ExportCtx *)ctx;
    return gpt2_unit_file_io(e->f, &e->lay, u, (float *)unit, 1, e->version);
}
static int export_main(int argc, char **argv) {
    int bf16 = argc == 5 && !strcmp(argv[4], "--bf16");
    if (argc != 4 && !bf16) { fprintf(stderr, "error: usage: %s --export CHECKPOINT_DIR OUT.bin [--bf16]\n", argv[0]); return 1; }
    CkptManifest *m = (CkptManifest *)xmalloc(sizeof(CkptManifest));
    int rc = 1;
    if (ckpt_read_manifest(argv[2], m) == 0) {
        ExportCtx e;
        gpt2_layout_init(&e.lay, &m->cfg, 1);
        e.version = bf16 ? 5 : 3;
        e.f = gpt2_begin_checkpoint(argv[3], &m->cfg, e.version);
        if (e.f) {
            int ok = ckpt_load(m, NULL, 0, export_unit, &e) == 0;
            if (gpt2_end_checkpoint(e.f, argv[3], ok) == 0 && ok) {
                printf("wrote %s from %s (step %ld, %d ranks)\n", argv[3], m->dir, m->step, m->world);
                rc = 0;
            }
        }
    }
    free(m);
    return rc;
}

// The whole run on this rank: MPI_Init is done, r->backend set. Returns the exit code.
static int trainer_run(Run *r, int argc, char **argv) {
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->world);
    r->nodes = job_nodes(MPI_COMM_WORLD);
    int rc = setup(r, argc, argv);
    if (rc != 0) return rc > 0 ? 0 : 1;
    const TrainConfig *c = &r->cfg;
    int lead = r->rank == 0;
    if (lead) job_check_hosts(r->nodes, c->comm_timeout);
    if (lead) print_header(r);
    report_memory(r);

    double flops_per_token = 6.0 * r->model.z.lay.num_params + 12.0 * c->model.num_layers * c->model.channels * c->seq_len;
    double total_ms = 0.0;
    int fp16 = c->precision == ZC_FP16;
    int done = r->first_step - 1; // the last step trained
    int failed = 0;               // a save failed: the run ends with exit code 1
    for (int step = r->first_step; step <= c->steps; step++) {
        trace_step_begin(&r->trace, step);
        long faults0 = page_faults();
        double t0 = now_seconds(), span = trace_begin(&r->trace, "step", TRACE_STEP, -1, 0.0);
        zero_nvme_stats(&r->model.z); // what validation, sampling or a save read is not this step's
        StepResult s = train_step(r, step);
        ZeroNvmeStats io = zero_nvme_stats(&r->model.z);
        trace_end(&r->trace, span);
        TraceStep times;
        trace_step_end(&r->trace, &times);
        float loss = s.loss, lr = s.lr, norm = s.norm;
        double ms = (now_seconds() - t0) * 1e3, tok_s = c->total_batch / (ms / 1e3);
        long faults = page_faults() - faults0;
        if (step > r->first_step) total_ms += ms; // the first step warms caches and thread pools
        if (lead) {
            char eta[32];
            int timed = step - r->first_step;
            format_eta(eta, sizeof(eta), (c->steps - step) * (timed > 0 ? total_ms / timed : ms) / 1e3);
            char scale[64] = "";
            if (fp16) snprintf(scale, sizeof(scale), " | scale %g, %ld skipped%s", s.scale, r->scaler.skipped,
                               s.skipped ? " (this one: overflow)" : "");
            char nvme[128] = "";
            if (zero_store_nvme(&r->model.z.st))
                snprintf(nvme, sizeof(nvme), " | nvme %.2f GB in %.2f out, %.0f ms busy, %.0f exposed, %.2f GB read ahead",
                         io.read / 1e9, io.written / 1e9, io.busy_ms, io.exposed_ms, io.ahead / 1e9);
            if (step % c->print_every == 0 || step == 1 || step == c->steps || s.skipped) // --print-every, steps_per_print
                printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %8.1f ms | %8.0f tok/s | %6.1f GFLOP/s | ETA %s%s%s\n",
                       step, c->steps, loss, lr, norm, ms, tok_s, tok_s * flops_per_token / 1e9, eta, scale, nvme);
            if (r->log) {
                char nrm[32] = "null"; // an overflowed gradient has no norm
                if (isfinite(norm)) snprintf(nrm, sizeof(nrm), "%.9g", norm);
                fprintf(r->log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%s,\"ms\":%.3f,\"tok_s\":%.1f",
                        step, loss, lr, nrm, ms, tok_s);
                log_step_times(r->log, &times, r->trace.comm_timed);
                fprintf(r->log, ",\"page_faults\":%ld", faults);
                if (fp16) fprintf(r->log, ",\"loss_scale\":%.17g,\"skipped\":%s", s.scale, s.skipped ? "true" : "false");
                if (zero_store_nvme(&r->model.z.st))
                    fprintf(r->log, ",\"nvme_read\":%.0f,\"nvme_write\":%.0f,\"nvme_ms\":%.3f,\"exposed_io_ms\":%.3f,\"nvme_ahead\":%.0f",
                            io.read, io.written, io.busy_ms, io.exposed_ms, io.ahead);
                fprintf(r->log, "}\n");
            }
        }
        report_comm(r, step);
        done = step;
        int last = step == c->steps;
        // A signal on any rank (job.h): every rank stops after this step, skipping its
        // validation and sample, and saves; --resume goes on from here bit for bit.
        int stop = !last && preempt_agree(&r->model.z) > 0;
        if (r->have_val && !stop && (step % c->val_every == 0 || last)) {
            float vl = validate(r);
            if (lead) printf("val loss %.6f\n", vl);
            if (lead && r->log) fprintf(r->log, "{\"step\":%d,\"val_loss\":%.9g}\n", step, vl);
        }
        if (c->sample_len > 0 && c->sample_every > 0 && (step % c->sample_every == 0 || last)) {
            double t1 = trace_begin(&r->trace, "sample", TRACE_EVAL, -1, 0.0);
            if (stop) gpt2_sample_skip(&r->sample_rng, c->sample_len);
            else gpt2_sample(&r->model, r->have_tok ? &r->tok : NULL, c->sample_len, &r->sample_rng);
            trace_end(&r->trace, t1);
        }
        // A failed save stops the run (--on-save-error stop), unless asked to go on; the last one
        // (at the end, or on a stop signal) fails the run either way.
        if (c->out_dir && ((c->save_every > 0 && step % c->save_every == 0) || last || stop) &&
            save(r, step, last || stop) != 0 && (!c->on_save_error_continue || last || stop))
            failed = stop = 1;
        if (r->log) fflush(r->log);
        if (stop) {
            if (lead && !failed) {
                int sig = preempt_signal();
                printf("stopping after step %d of %d: %s%s", step, c->steps, sig ? preempt_signal_name(sig) : "a signal",
                       sig ? " received" : " on another rank");
                if (c->out_dir) printf("; continue with --resume %s\n", c->out_dir);
                else printf(" (no --out: nothing saved)\n");
            }
            break;
        }
    }
    int timed = done - r->first_step;
    if (lead && timed > 0)
        printf("average step (after the first): %.1f ms, %.0f tok/s\n", total_ms / timed,
               c->total_batch / (total_ms / timed / 1e3));
    report_peak_rss(r);
    gpt2_report(&r->model, lead ? stdout : NULL, lead ? r->log : NULL);
    if (r->log) fclose(r->log);
    write_trace(r);
    trace_free(&r->trace);
    if (r->have_tok) tokenizer_free(&r->tok);
    dataloader_free(&r->train);
    if (r->have_val) dataloader_free(&r->val);
    hang_finish(&r->hang);
    gpt2_free(&r->model);
    return failed ? 1 : 0;
}

#endif // TRAINER_H
