// checkpoint.h: sharded, crash-safe training checkpoints with exact resume and resharding.
//
// Contract
//   A checkpoint is a directory DIR/step_NNNNNNNN/ holding
//     model_rankRRRRR.bin  each rank's slice of every unit's parameters (fp32 master weights)
//     optim_rankRRRRR.bin  each rank's slice of the optimizer's state arrays, unit by unit
//                          (optimizer.h's slices in order: AdamW's m then v; Lion's m; ...)
//     state.bin            the step, Adam's update count, the sampling rng, the dataloader
//                          position, the fp16 loss scaler
//     manifest.json        model shape, world size, stage, precision, optimizer, and every file's
//                          size and checksum (FNV-1a over 64-bit words)
//   and DIR/latest names the newest complete one. A rank's slice of unit u is the r-th of N
//   equal parts of the unit padded to N*ZERO_ALIGN elements (zero.h), whatever the stage, so the
//   files depend on the world size but not on the stage: resuming under another stage is free,
//   and resuming on another world size reassembles each unit from the old slices (resharding).
//   Weights are apart from the moments: reading the model (export) never reads optimizer state.
//
//   Crash safety: a checkpoint is written into DIR/step_NNNNNNNN.tmp/ (every file fsync'd, the
//   manifest after all rank files), and only once it is complete (ckpt_commit) renamed to
//   step_NNNNNNNN (replacing an older one of the same step) and named by `latest`, which is
//   replaced last; what needs disk space is written before anything visible changes. A process
//   killed at any moment leaves `latest` naming a complete checkpoint.
//   Failed saves (a full disk, say): ckpt_save and ckpt_commit return -1 on every rank, with
//   "PATH: reason" of the first failure in `why` on one rank (the lowest that failed) and empty
//   elsewhere; they print nothing, so that the caller can say it in one line. ckpt_discard then
//   removes the unfinished step directory: `latest` and the checkpoints before are untouched.
//
//   Loading reads unit by unit, so memory stays bounded by one unit (plus the slices this rank
//   keeps), verifies sizes and checksums, and never writes. Errors print one line naming the
//   file and return -1. The optimizer state is read into the same optimizer only (a manifest
//   without "optimizer" is AdamW's, as written before the field existed).
//   The model states are reached through zero.h's slice interface (zero_get_slice,
//   zero_set_unit, zero_get_state_slice, zero_set_state_unit): this file knows the format, not
//   where a stage keeps what.
// Collectives go through ZeroBackend (sum_doubles), so both trainers share this file.
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "core/gpt2.h"
#include "zero.h"
#include "dataloader.h"

#define CKPT_SHARD_MAGIC 20241122
#define CKPT_STATE_MAGIC 0x32305453434F525AULL // "ZROCST02": with the loss scaler
#define CKPT_PATH 4096

// What besides the model states a resumed run needs to continue bit for bit.
typedef struct {
    uint64_t magic;
    uint64_t step;        // optimizer steps completed
    uint64_t adam_t;      // updates Adam has applied (bias correction, LR schedule): fp16 skips some
    LossScaler scaler;    // fp16's dynamic loss scale and its counters (unused otherwise)
    uint64_t sample_rng;  // the sampler's generator
    DataLoaderState train_data;
} TrainerState;

// Paths are built with this, not snprintf directly: one place to say that a path longer than
// CKPT_PATH is cut (and then fails to open, naming itself), and no truncation warnings.
static inline void ckpt_fmt(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

// --- checksummed files --------------------------------------------------------------------

typedef struct { uint64_t h, bytes; } Checksum;
static inline void ckpt_sum_init(Checksum *c) { c->h = 0xcbf29ce484222325ull; c->bytes = 0; }
// FNV-1a over little-endian 64-bit words (n is a multiple of 8 in every file here)
static inline void ckpt_sum(Checksum *c, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        c->h = (c->h ^ w) * 0x100000001b3ull;
    }
    c->bytes += n;
}

// A file written under PATH.tmp; err: errno of the first failure (0: none).
typedef struct { FILE *f; char path[CKPT_PATH], tmp[CKPT_PATH + 8]; Checksum sum; int ok, err; } CkptOut;

static inline int ckpt_out_fail(CkptOut *o) {
    if (o->ok) { o->ok = 0; o->err = errno ? errno : EIO; }
    return -1;
}
static inline int ckpt_out_open(CkptOut *o, const char *path) {
    ckpt_fmt(o->path, sizeof(o->path), "%s", path);
    ckpt_fmt(o->tmp, sizeof(o->tmp), "%s.tmp", path);
    ckpt_sum_init(&o->sum);
    o->ok = 1;
    o->err = 0;
    o->f = fopen(o->tmp, "wb");
    return o->f ? 0 : ckpt_out_fail(o);
}
static inline void ckpt_out_write(CkptOut *o, const void *p, size_t n) {
    if (o->ok && fwrite(p, 1, n, o->f) != n) ckpt_out_fail(o);
    ckpt_sum(&o->sum, p, n);
}
// Makes the file durable under its temporary name, or removes it.
static inline int ckpt_out_sync(CkptOut *o) {
    if (!o->f) return -1;
    if (o->ok && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0)) ckpt_out_fail(o);
    if (fclose(o->f) != 0) ckpt_out_fail(o);
    o->f = NULL;
    if (!o->ok) remove(o->tmp);
    return o->ok ? 0 : -1;
}
// ... and then under its final name.
static inline int ckpt_out_close(CkptOut *o) {
    if (ckpt_out_sync(o) != 0) return -1;
    if (rename(o->tmp, o->path) != 0) { ckpt_out_fail(o); remove(o->tmp); return -1; }
    return 0;
}
// why = "PATH: reason" of a failed file, unless it already names an earlier failure.
static inline void ckpt_out_why(const CkptOut *o, char *why, size_t n) {
    if (!o->ok && !why[0]) ckpt_fmt(why, n, "%s: %s", o->path, strerror(o->err));
}
static inline void ckpt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

// --- names --------------------------------------------------------------------------------

static inline void ckpt_step_dir(char *buf, size_t n, const char *dir, long step) {
    ckpt_fmt(buf, n, "%s/step_%08ld", dir, step);
}
// where a step's checkpoint is written until ckpt_commit
static inline void ckpt_step_tmp(char *buf, size_t n, const char *dir, long step) {
    ckpt_fmt(buf, n, "%s/step_%08ld.tmp", dir, step);
}
// Removes a step directory and the files in it (it holds no directories). Missing is fine.
static inline void ckpt_remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    char file[CKPT_PATH + 300];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        ckpt_fmt(file, sizeof(file), "%s/%s", path, e->d_name);
        unlink(file);
    }
    closedir(d);
    rmdir(path);
}
static inline void ckpt_rank_file(char *buf, size_t n, const char *step_dir, const char *kind, int rank) {
    ckpt_fmt(buf, n, "%s/%s_rank%05d.bin", step_dir, kind, rank);
}

static inline void ckpt_shard_header(int32_t h[256], const GPT2Config *c, int kind, int rank, int world) {
    gpt2_fill_header(h, c, 3);
    h[0] = CKPT_SHARD_MAGIC; h[1] = 1; // version 1; h[2..7] the model shape as in a model file
    h[8] = kind; h[9] = rank; h[10] = world;
}

// --- saving -------------------------------------------------------------------------------

// Every rank calls it. The model states are read through the backend's to_host, one slice at
// a time, so they may live on a GPU. Writes DIR/step_N.tmp/ (ckpt_commit makes it the
// checkpoint); -1 on every rank on failure, `why` (n bytes) filled on the lowest failing rank.
static inline int ckpt_save(const char *dir, Zero *z, const GPT2Config *cfg, const TrainerState *st,
                            const char *precision, char *why, size_t why_n) {
    char step_dir[CKPT_PATH], path[CKPT_PATH];
    ckpt_step_tmp(step_dir, sizeof(step_dir), dir, (long)st->step);
    why[0] = 0;
    double ok = 1.0;
    if (z->rank == 0) {
        mkdir(dir, 0755);
        ckpt_remove_dir(step_dir); // what a save killed midway left
        if (mkdir(step_dir, 0755) != 0) {
            ckpt_fmt(why, why_n, "%s: cannot create the checkpoint directory: %s", step_dir, strerror(errno));
            ok = 0.0;
        }
    }
    zero_sum_doubles(z, &ok, 1); // also a barrier: the directory exists for everyone
    if (ok < z->world) return -1;

    // This rank's two files. The slices are the same for every stage (see the contract).
    int32_t h[256];
    CkptOut model, optim;
    ckpt_rank_file(path, sizeof(path), step_dir, "model", z->rank);
    int bad = ckpt_out_open(&model, path);
    ckpt_rank_file(path, sizeof(path), step_dir, "optim", z->rank);
    bad |= ckpt_out_open(&optim, path);
    if (!bad) {
        ckpt_shard_header(h, cfg, 0, z->rank, z->world);
        ckpt_out_write(&model, h, sizeof(h));
        ckpt_shard_header(h, cfg, 1, z->rank, z->world);
        ckpt_out_write(&optim, h, sizeof(h));
        float *host = (float *)malloc(zero_max_unit(z) / z->world * sizeof(float)); // the largest slice
        for (int u = 0; u < z->lay.num_units && host; u++) { // through the host, one slice at a time
            size_t n = zero_slice(z, u);
            zero_get_slice(z, u, host); // fp32: the master weights in mixed precision
            ckpt_out_write(&model, host, n * sizeof(float));
            for (int k = 0; k < z->nstate; k++) {
                zero_get_state_slice(z, k, u, host);
                ckpt_out_write(&optim, host, n * sizeof(float));
            }
        }
        if (!host) { errno = ENOMEM; ckpt_out_fail(&model); }
        free(host);
    }
    bad |= ckpt_out_close(&model) | ckpt_out_close(&optim);
    ckpt_out_why(&model, why, why_n);
    ckpt_out_why(&optim, why, why_n);

    // Rank 0 learns every file's size and checksum (as 32-bit halves: doubles carry them
    // exactly), and every rank who failed.
    int W = z->world;
    double *info = (double *)calloc((size_t)W * 7, sizeof(double));
    double *mine = info + (size_t)z->rank * 7;
    mine[0] = (double)model.sum.bytes; mine[1] = (double)(model.sum.h >> 32); mine[2] = (double)(model.sum.h & 0xffffffffu);
    mine[3] = (double)optim.sum.bytes; mine[4] = (double)(optim.sum.h >> 32); mine[5] = (double)(optim.sum.h & 0xffffffffu);
    mine[6] = bad ? 1.0 : 0.0;
    zero_sum_doubles(z, info, W * 7);
    int first_bad = -1;
    for (int q = W - 1; q >= 0; q--) if (info[(size_t)q * 7 + 6] != 0.0) first_bad = q;
    if (first_bad != z->rank) why[0] = 0;
    bad = 0;
    if (z->rank == 0 && first_bad < 0) {
        CkptOut so, mo;
        ckpt_fmt(path, sizeof(path), "%s/state.bin", step_dir);
        bad = ckpt_out_open(&so, path);
        if (!bad) ckpt_out_write(&so, st, sizeof(*st));
        bad |= ckpt_out_close(&so);
        ckpt_out_why(&so, why, why_n);
        ckpt_fmt(path, sizeof(path), "%s/manifest.json", step_dir);
        bad |= ckpt_out_open(&mo, path);
        if (!bad) {
            char line[512];
            int k = snprintf(line, sizeof(line),
                "{\n  \"format\": \"zero.c checkpoint\", \"version\": 1, \"step\": %llu,\n"
                "  \"world\": %d, \"zero_stage\": %d, \"precision\": \"%s\", \"optimizer\": \"%s\",\n"
                "  \"model\": {\"max_seq_len\": %d, \"vocab_size\": %d, \"padded_vocab_size\": %d, "
                "\"num_layers\": %d, \"num_heads\": %d, \"channels\": %d},\n"
                "  \"state\": {\"file\": \"state.bin\", \"bytes\": %zu, \"fnv1a64\": \"%016llx\"},\n  \"files\": [\n",
                (unsigned long long)st->step, W, z->stage, precision, optimizer_info(z->optimizer)->name, cfg->max_seq_len, cfg->vocab_size,
                cfg->padded_vocab_size, cfg->num_layers, cfg->num_heads, cfg->channels, sizeof(*st),
                (unsigned long long)so.sum.h);
            ckpt_out_write(&mo, line, (size_t)k);
            for (int q = 0; q < W; q++) {
                const double *x = info + (size_t)q * 7;
                for (int kind = 0; kind < 2; kind++) {
                    unsigned long long hsum = ((unsigned long long)x[kind * 3 + 1] << 32) | (unsigned long long)x[kind * 3 + 2];
                    k = snprintf(line, sizeof(line), "    {\"file\": \"%s_rank%05d.bin\", \"bytes\": %.0f, \"fnv1a64\": \"%016llx\"}%s\n",
                                 kind ? "optim" : "model", q, x[kind * 3], hsum, (q == W - 1 && kind == 1) ? "" : ",");
                    ckpt_out_write(&mo, line, (size_t)k);
                }
            }
            ckpt_out_write(&mo, "  ]\n}\n", 6);
        }
        bad |= ckpt_out_close(&mo);
        ckpt_out_why(&mo, why, why_n);
        ckpt_fsync_dir(step_dir);
    }
    free(info);
    double fine = (first_bad < 0 && !bad) ? 1.0 : 0.0;
    zero_sum_doubles(z, &fine, 1);
    return fine == (double)W ? 0 : -1;
}

// Every rank calls it after ckpt_save succeeded (and whatever else belongs to the step was
// written): rank 0 moves DIR/step_N.tmp to DIR/step_N and points `latest` at it. The new
// `latest` is written first, under a temporary name, so that a full disk fails before anything
// visible changes; renames need no space. -1 on every rank on failure (`why` on rank 0).
static inline int ckpt_commit(const char *dir, Zero *z, long step, char *why, size_t why_n) {
    double ok = 1.0;
    why[0] = 0;
    if (z->rank == 0) {
        char tmp[CKPT_PATH], final[CKPT_PATH], path[CKPT_PATH], name[64];
        CkptOut lo;
        ckpt_fmt(path, sizeof(path), "%s/latest", dir);
        int k = snprintf(name, sizeof(name), "step_%08ld\n", step);
        if (ckpt_out_open(&lo, path) == 0) ckpt_out_write(&lo, name, (size_t)k);
        if (ckpt_out_sync(&lo) != 0) ok = 0.0;
        ckpt_out_why(&lo, why, why_n);
        ckpt_step_tmp(tmp, sizeof(tmp), dir, step);
        ckpt_step_dir(final, sizeof(final), dir, step);
        // a complete older checkpoint of the same step (a rerun) is swapped out and removed
        if (ok == 1.0 && rename(tmp, final) != 0) {
            int err = errno;
            if ((err == ENOTEMPTY || err == EEXIST) && renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0)
                ckpt_remove_dir(tmp);
            else {
                ckpt_fmt(why, why_n, "%s: cannot rename to %s: %s", tmp, final, strerror(err));
                ok = 0.0;
            }
        }
        if (ok == 1.0 && rename(lo.tmp, lo.path) != 0) {
            ckpt_fmt(why, why_n, "%s: cannot rename to %s: %s", lo.tmp, lo.path, strerror(errno));
            ok = 0.0;
        }
        if (ok != 1.0) remove(lo.tmp);
        ckpt_fsync_dir(dir);
    }
    zero_sum_doubles(z, &ok, 1);
    return ok == (double)z->world ? 0 : -1;
}

// After a failed save: rank 0 removes DIR/step_N.tmp, whatever it holds. Every rank calls it.
static inline void ckpt_discard(const char *dir, Zero *z, long step) {
    char tmp[CKPT_PATH];
    ckpt_step_tmp(tmp, sizeof(tmp), dir, step);
    double done = 1.0;
    if (z->rank == 0) ckpt_remove_dir(tmp);
    zero_sum_doubles(z, &done, 1); // no rank writes there again before it is gone
}

// --- reading ------------------------------------------------------------------------------

typedef struct {
    char dir[CKPT_PATH];  // the step directory
    GPT2Config cfg;
    int world, stage;
    long step;
    char precision[16];
    int optimizer;        // optimizer.h's kind: whose state the optim files hold
    Checksum want_model[4096], want_optim[4096]; // per old rank
    Checksum want_state;
} CkptManifest;

static inline int ckpt_json_int(const cJSON *o, const char *key, const char *path, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) { fprintf(stderr, "error: %s: manifest has no number \"%s\"\n", path, key); return -1; }
    *out = (long)v->valuedouble;
    return 0;
}
static inline int ckpt_json_sum(const cJSON *o, const char *path, Checksum *c) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bytes"), *h = cJSON_GetObjectItemCaseSensitive(o, "fnv1a64");
    if (!cJSON_IsNumber(b) || !cJSON_IsString(h)) { fprintf(stderr, "error: %s: a file entry lacks bytes or fnv1a64\n", path); return -1; }
    c->bytes = (uint64_t)b->valuedouble;
    c->h = strtoull(h->valuestring, NULL, 16);
    return 0;
}

// PATH is a checkpoint directory (then its `latest` is used) or one step directory.
static inline int ckpt_read_manifest(const char *path, CkptManifest *m) {
    memset(m, 0, sizeof(*m));
    char latest[CKPT_PATH + 16], mpath[CKPT_PATH + 32];
    ckpt_fmt(latest, sizeof(latest), "%s/latest", path);
    FILE *lf = fopen(latest, "r");
    if (lf) {
        char name[256] = "";
        int got = fscanf(lf, "%255s", name);
        fclose(lf);
        if (got != 1 || strncmp(name, "step_", 5) != 0) { fprintf(stderr, "error: %s: not a checkpoint pointer\n", latest); return -1; }
        ckpt_fmt(m->dir, sizeof(m->dir), "%s/%s", path, name);
    } else {
        ckpt_fmt(m->dir, sizeof(m->dir), "%s", path);
    }
    ckpt_fmt(mpath, sizeof(mpath), "%s/manifest.json", m->dir);
    FILE *f = fopen(mpath, "rb");
    if (!f) { fprintf(stderr, "error: %s: no checkpoint here (no manifest.json, no latest)\n", path); return -1; }
    char *text = (char *)malloc(1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    int bad = 0;
    long v[6], world = 0, stage = 0, step = 0, version = 0;
    const cJSON *model = j ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
    const cJSON *files = j ? cJSON_GetObjectItemCaseSensitive(j, "files") : NULL;
    const cJSON *prec = j ? cJSON_GetObjectItemCaseSensitive(j, "precision") : NULL;
    const cJSON *state = j ? cJSON_GetObjectItemCaseSensitive(j, "state") : NULL;
    const cJSON *opt = j ? cJSON_GetObjectItemCaseSensitive(j, "optimizer") : NULL;
    if (!j || !cJSON_IsObject(model) || !cJSON_IsArray(files) || !cJSON_IsString(prec) || !cJSON_IsObject(state)) {
        fprintf(stderr, "error: %s: not a zero.c manifest\n", mpath);
        cJSON_Delete(j);
        return -1;
    }
    static const char *const keys[6] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "channels"};
    for (int i = 0; i < 6 && !bad; i++) bad = ckpt_json_int(model, keys[i], mpath, &v[i]);
    bad = bad || ckpt_json_int(j, "version", mpath, &version) || ckpt_json_int(j, "world", mpath, &world) ||
          ckpt_json_int(j, "zero_stage", mpath, &stage) || ckpt_json_int(j, "step", mpath, &step) ||
          ckpt_json_sum(state, mpath, &m->want_state);
    if (!bad && (version != 1 || world < 1 || world > 4096 || cJSON_GetArraySize(files) != 2 * world)) {
        fprintf(stderr, "error: %s: version %ld, world %ld, %d files: not a checkpoint this program wrote\n", mpath,
                version, world, cJSON_GetArraySize(files));
        bad = 1;
    }
    if (!bad) {
        m->cfg.max_seq_len = (int)v[0]; m->cfg.vocab_size = (int)v[1]; m->cfg.padded_vocab_size = (int)v[2];
        m->cfg.num_layers = (int)v[3]; m->cfg.num_heads = (int)v[4]; m->cfg.channels = (int)v[5];
        m->world = (int)world; m->stage = (int)stage; m->step = step;
        snprintf(m->precision, sizeof(m->precision), "%s", prec->valuestring);
        m->optimizer = -1;
        for (int k = 0; k < OPT_NUM; k++)
            if (!opt || (cJSON_IsString(opt) && !strcmp(opt->valuestring, optimizer_info(k)->name))) { m->optimizer = k; break; }
        if (m->optimizer < 0) { fprintf(stderr, "error: %s: unknown optimizer in the manifest\n", mpath); bad = 1; }
        const char *why = gpt2_config_problem(&m->cfg);
        if (why) { fprintf(stderr, "error: %s: bad model shape: %s\n", mpath, why); bad = 1; }
        for (int q = 0; q < m->world && !bad; q++)
            bad = ckpt_json_sum(cJSON_GetArrayItem(files, 2 * q), mpath, &m->want_model[q]) ||
                  ckpt_json_sum(cJSON_GetArrayItem(files, 2 * q + 1), mpath, &m->want_optim[q]);
    }
    cJSON_Delete(j);
    return bad ? -1 : 0;
}

// Opens the old ranks' files of one kind and checks their headers and sizes.
static inline int ckpt_open_rank_files(const CkptManifest *m, const char *kind, FILE **fs, const Checksum *want) {
    char path[CKPT_PATH + 64];
    for (int q = 0; q < m->world; q++) {
        ckpt_rank_file(path, sizeof(path), m->dir, kind, q);
        fs[q] = fopen(path, "rb");
        int32_t h[256];
        struct stat sb;
        if (!fs[q] || fstat(fileno(fs[q]), &sb) != 0) { fprintf(stderr, "error: %s: missing\n", path); return -1; }
        if ((uint64_t)sb.st_size != want[q].bytes) {
            fprintf(stderr, "error: %s: %lld bytes, the manifest says %llu (truncated?)\n", path, (long long)sb.st_size,
                    (unsigned long long)want[q].bytes);
            return -1;
        }
        if (fread(h, sizeof(int32_t), 256, fs[q]) != 256 || h[0] != CKPT_SHARD_MAGIC || h[9] != q || h[10] != m->world) {
            fprintf(stderr, "error: %s: not rank %d of %d of this checkpoint\n", path, q, m->world);
            return -1;
        }
        const GPT2Config *c = &m->cfg;
        if (h[2] != c->max_seq_len || h[3] != c->vocab_size || h[4] != c->num_layers || h[5] != c->num_heads ||
            h[6] != c->channels || h[7] != c->padded_vocab_size) {
            fprintf(stderr, "error: %s: holds a model of another shape (L=%d C=%d NH=%d) than the manifest's (L=%d C=%d NH=%d)\n",
                    path, h[4], h[6], h[5], c->num_layers, c->channels, c->num_heads);
            return -1;
        }
    }
    return 0;
}

// Fills this rank's model states from the checkpoint (any world size, any stage), unit by
// unit. with_optimizer = 0 reads the weights only. unit_cb, when given, receives each whole
// unit's parameters (real elements first, then zeros) instead: the exporter's way in.
static inline int ckpt_load(const CkptManifest *m, Zero *z, int with_optimizer,
                            int (*unit_cb)(int u, const float *unit, void *ctx), void *cb_ctx) {
    if (with_optimizer && z && m->optimizer != z->optimizer) {
        fprintf(stderr, "error: %s: holds the state of optimizer %s; this run's is %s (resume with --optimizer %s)\n",
                m->dir, optimizer_info(m->optimizer)->name, optimizer_info(z->optimizer)->name,
                optimizer_info(m->optimizer)->name);
        return -1;
    }
    ParamLayout old;
    gpt2_layout_init(&old, &m->cfg, (size_t)m->world * ZERO_ALIGN);
    const ParamLayout *lay = z ? &z->lay : &old;
    int W = m->world, nk = with_optimizer ? 1 + optimizer_info(m->optimizer)->slices : 1, bad = 0;
    FILE **model = (FILE **)calloc((size_t)W, sizeof(FILE *)), **optim = (FILE **)calloc((size_t)W, sizeof(FILE *));
    Checksum *got_m = (Checksum *)calloc((size_t)W, sizeof(Checksum)), *got_o = (Checksum *)calloc((size_t)W, sizeof(Checksum));
    size_t maxu = 0;
    for (int u = 0; u < old.num_units; u++) {
        size_t a = gpt2_unit_padded(&old, u), b = gpt2_unit_padded(lay, u);
        maxu = a > maxu ? a : maxu; maxu = b > maxu ? b : maxu;
    }
    float *unit = (float *)calloc(maxu * (1 + OPT_MAX_SLICES), sizeof(float)); // params and state of one unit
    bad = ckpt_open_rank_files(m, "model", model, m->want_model) ||
          (with_optimizer && ckpt_open_rank_files(m, "optim", optim, m->want_optim));
    for (int q = 0; q < W && !bad; q++) {
        int32_t h[256];
        ckpt_sum_init(&got_m[q]); ckpt_sum_init(&got_o[q]);
        ckpt_shard_header(h, &m->cfg, 0, q, W);
        ckpt_sum(&got_m[q], h, sizeof(h));
        ckpt_shard_header(h, &m->cfg, 1, q, W);
        ckpt_sum(&got_o[q], h, sizeof(h));
    }
    for (int u = 0; u < old.num_units && !bad; u++) {
        size_t s = gpt2_unit_padded(&old, u) / W, real = old.unit_numel[u];
        for (int q = 0; q < W && !bad; q++) { // reassemble the unit from the old ranks' slices
            for (int k = 0; k < nk && !bad; k++) { // the weights, then each state array
                float *dst = unit + k * maxu + q * s;
                bad |= fread(dst, sizeof(float), s, k ? optim[q] : model[q]) != s;
                ckpt_sum(k ? &got_o[q] : &got_m[q], dst, s * sizeof(float));
            }
        }
        for (int k = 0; k < nk; k++) // the new layout may pad more: zero past the real elements
            memset(unit + k * maxu + real, 0, (maxu - real) * sizeof(float));
        if (bad) { fprintf(stderr, "error: %s: read failed in unit %d\n", m->dir, u); break; }
        if (unit_cb) { bad = unit_cb(u, unit, cb_ctx); continue; }
        // keep what this rank keeps under its own stage and world size (zero.h decides; through
        // the backend: its memory may be a GPU's)
        zero_set_unit(z, u, unit); // parameters (rounded in mixed precision) and master weights
        for (int k = 1; k < nk; k++) zero_set_state_unit(z, k - 1, u, unit + k * maxu);
    }
    for (int q = 0; q < W && !bad; q++) {
        char path[CKPT_PATH + 64];
        if (got_m[q].h != m->want_model[q].h) { ckpt_rank_file(path, sizeof(path), m->dir, "model", q); bad = 1; }
        else if (with_optimizer && got_o[q].h != m->want_optim[q].h) { ckpt_rank_file(path, sizeof(path), m->dir, "optim", q); bad = 1; }
        if (bad) fprintf(stderr, "error: %s: checksum mismatch (the file is damaged)\n", path);
    }
    for (int q = 0; q < W; q++) { if (model[q]) fclose(model[q]); if (optim[q]) fclose(optim[q]); }
    free(model); free(optim); free(got_m); free(got_o); free(unit);
    return bad ? -1 : 0;
}

static inline int ckpt_read_state(const CkptManifest *m, TrainerState *st) {
    char path[CKPT_PATH + 16];
    ckpt_fmt(path, sizeof(path), "%s/state.bin", m->dir);
    FILE *f = fopen(path, "rb");
    Checksum c;
    ckpt_sum_init(&c);
    int ok = f && fread(st, sizeof(*st), 1, f) == 1;
    if (f) fclose(f);
    if (ok) ckpt_sum(&c, st, sizeof(*st));
    if (!ok || st->magic != CKPT_STATE_MAGIC || c.h != m->want_state.h) {
        fprintf(stderr, "error: %s: missing, truncated or damaged\n", path);
        return -1;
    }
    return 0;
}

#endif // CHECKPOINT_H
