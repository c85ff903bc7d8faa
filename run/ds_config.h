// ds_config.h: --deepspeed FILE.json: DeepSpeed configuration files for both trainers.
//
// Contract
//   int ds_config_apply(TrainConfig *c, const char *path, int world, int strict)
//     Reads the DeepSpeed JSON config at `path` (parsed by cJSON) into c. Call it after
//     config_parse(), which marked in c->source[] the options the command line gave, and before
//     config_validate(). world: processes in the job. strict (--strict): everything in the file
//     this trainer does not honour is an error instead of a warning. Returns 0, or -1 after
//     printing ONE line "error: FILE: key.path: what is wrong" (or "error: FILE: ..." for the
//     file itself: missing, too big, not JSON with line and column). Warnings ("warning: FILE:
//     ...", one line each) go to stderr and do not stop it. Records, for every setting the file
//     mentions, its key path, whether it said "auto", and the source (c->source, c->file_said,
//     c->file_key), so that the resolved configuration can say where each value came from.
//   int ds_config_apply_text(TrainConfig *c, const char *name, const char *text, size_t len,
//                            int world, int strict)
//     The same from memory (name is used in messages only): the fuzz target's entry point.
//   The resolved configuration (every setting, its value and source, what "auto" became, and
//   for DeepSpeed's ZeRO tuning keys whether this trainer honours them) is config.h's, with the
//   options: config_print_resolved() and config_log_resolved(); so is the table of the DeepSpeed
//   settings that have no option (CONFIG_DS_ROWS, ds_extras()).
//
// Semantics (docs/deepspeed_config.md has the table):
//   - A value in the file wins over the default. The command line overrides the file only where
//     the file says "auto" (or leaves the key out: a missing key is "auto"); a command-line
//     option that disagrees with a value in the file is an error naming both.
//   - train_batch_size counts sequences: train_batch_size * --seq-len = --total-batch (tokens);
//     train_micro_batch_size_per_gpu = --batch; gradient_accumulation_steps = --grad-accum.
//     train_batch_size = micro * accumulation * world, resolved by DeepSpeed's rules (ds_batch):
//     any two determine the third, train_batch_size alone means accumulation 1, the micro batch
//     alone accumulation 1; the command line's defaults never outrank the file.
//   - Unknown keys: a warning naming each (error with strict); at the top level a key DeepSpeed does
//     not read either (a program's own, kept in the same file) is ignored with a "note:" line, as
//     DeepSpeed ignores it, unless it is within two edits of a key DeepSpeed reads (a likely typo:
//     a warning naming that key). Wrong types or values: an error
//     naming the key path. Values this trainer cannot honour that change the result (another
//     optimizer or scheduler, amsgrad, ...) are errors; those that change only speed or memory
//     (offload, bucket sizes, ...) are recorded and reported (offload and wall_clock_breakdown
//     with a warning, an error with strict).
//   - Duplicate keys are an error, as in DeepSpeed (which refuses them when loading the file).
// No global state; compiles as C11 and as C++ (nvcc includes it). Link with -lcjson.
#ifndef DS_CONFIG_H
#define DS_CONFIG_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>
#include <math.h>
#include <cjson/cJSON.h>
#include "run/config.h"

#define DS_MAX_FILE_BYTES (1 << 20) // a DeepSpeed config is a few KB; anything this big is not one

typedef struct {
    TrainConfig *c;
    const char *file;  // the name in messages
    int world, strict;
} DsCtx;

enum { DS_ABSENT, DS_AUTO, DS_VALUE, DS_ERROR };

// ---------------------------------------------------------------------------------------------
// Messages: one line each, naming the file and the key path.

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline void ds_error(const DsCtx *x, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: %s: ", x->file);
    if (path) fprintf(stderr, "%s: ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// Something the trainer does not honour: a warning, or with strict an error (returns -1).
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int ds_unhonoured(const DsCtx *x, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: %s: %s: ", x->strict ? "error" : "warning", x->file, path);
    vfprintf(stderr, fmt, ap);
    fputs(x->strict ? " (--strict)\n" : "\n", stderr);
    va_end(ap);
    return x->strict ? -1 : 0;
}

static inline void ds_join(char *buf, size_t n, const char *prefix, const char *key) {
    ds_cat(buf, n, prefix, prefix && *prefix ? "." : "", key ? key : "?");
}

// A JSON value as a message shows it: 5, 0.001, "text", true, null, an object, an array.
static inline const char *ds_describe(const cJSON *v, char *buf, size_t n) {
    if (!v) snprintf(buf, n, "nothing");
    else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.10g", v->valuedouble);
    else if (cJSON_IsTrue(v)) snprintf(buf, n, "true");
    else if (cJSON_IsFalse(v)) snprintf(buf, n, "false");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else if (cJSON_IsObject(v)) snprintf(buf, n, "an object");
    else if (cJSON_IsArray(v)) snprintf(buf, n, "an array");
    else if (cJSON_IsString(v)) {
        char s[48];
        ds_join(s, sizeof(s), NULL, v->valuestring);
        snprintf(buf, n, "\"%s%s\"", s, strlen(v->valuestring) >= sizeof(s) - 1 ? "..." : "");
    } else snprintf(buf, n, "an unreadable value");
    return buf;
}

static inline int ds_is_auto(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "auto"); }

// The last component of a key path: "optimizer.params.lr" -> "lr".
static inline const char *ds_leaf(const char *path) {
    const char *d = strrchr(path, '.');
    return d ? d + 1 : path;
}

// ---------------------------------------------------------------------------------------------
// Reading one key of an object (path is the literal key path; its last component is the key).

// A number in [lo, hi] (whole: an integer, written 8 or 8.0 or 2e8). expect: what the error
// says is expected, or NULL for "a number in [lo, hi]".
static inline int ds_number(const DsCtx *x, const cJSON *obj, const char *path, double lo, double hi, int whole,
                            const char *expect, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, ds_leaf(path));
    if (!v) return DS_ABSENT;
    if (ds_is_auto(v)) return DS_AUTO;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!cJSON_IsNumber(v) || !(d >= lo && d <= hi) || (whole && d != floor(d))) {
        char got[80], exp[96];
        if (!expect) {
            snprintf(exp, sizeof(exp), "%s in [%.10g, %.10g] or \"auto\"", whole ? "a whole number" : "a number", lo, hi);
            expect = exp;
        }
        ds_error(x, path, "expected %s, got %s", expect, ds_describe(v, got, sizeof(got)));
        return DS_ERROR;
    }
    *out = d;
    return DS_VALUE;
}

static inline int ds_boolean(const DsCtx *x, const cJSON *obj, const char *path, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, ds_leaf(path));
    if (!v) return DS_ABSENT;
    if (ds_is_auto(v)) return DS_AUTO;
    if (!cJSON_IsBool(v)) {
        char got[80];
        ds_error(x, path, "expected true, false or \"auto\", got %s", ds_describe(v, got, sizeof(got)));
        return DS_ERROR;
    }
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return DS_VALUE;
}

// One of names[] (exact, or ignoring case when nocase). expect: the error's list of choices.
static inline int ds_choice(const DsCtx *x, const cJSON *obj, const char *path, const char *const *names, int n,
                            int nocase, const char *expect, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, ds_leaf(path));
    if (!v) return DS_ABSENT;
    if (ds_is_auto(v)) return DS_AUTO;
    for (int i = 0; cJSON_IsString(v) && i < n; i++)
        if (nocase ? !strcasecmp(v->valuestring, names[i]) : !strcmp(v->valuestring, names[i])) {
            *out = i;
            return DS_VALUE;
        }
    char got[80];
    ds_error(x, path, "expected %s, got %s", expect, ds_describe(v, got, sizeof(got)));
    return DS_ERROR;
}

// An object (absent is fine: NULL); anything else is an error.
static inline int ds_object(const DsCtx *x, const cJSON *obj, const char *path, const cJSON **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, ds_leaf(path));
    *out = NULL;
    if (!v) return DS_ABSENT;
    if (!cJSON_IsObject(v)) {
        char got[80];
        ds_error(x, path, "expected an object, got %s", ds_describe(v, got, sizeof(got)));
        return DS_ERROR;
    }
    *out = v;
    return DS_VALUE;
}

// Keys of obj not in known[]: a warning naming each (error with strict). Returns -1 on error.
static inline int ds_known_keys(const DsCtx *x, const cJSON *obj, const char *prefix, const char *const *known, int n) {
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
        int k = 0;
        while (k < n && strcmp(it->string, known[k])) k++;
        if (k < n) continue;
        char path[160];
        ds_join(path, sizeof(path), prefix, it->string);
        if (ds_unhonoured(x, path, "unknown key, or one this trainer does not implement; ignored")) return -1;
    }
    return 0;
}

// Edit distance (insertions, deletions, substitutions; case ignored) between two keys, up to
// 63 characters each (longer: 99): how far an unknown key is from a known one.
static inline int ds_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

// The top level's keys this trainer does not read (known[] are those it does). Each is one of:
//   - DeepSpeed's own (deepspeed/runtime/config.py reads it): a feature this trainer does not
//     implement: a warning (an error with strict), as for unknown keys in a section;
//   - within 2 edits of a key DeepSpeed reads (1 for keys of 5 letters or fewer): likely a typo: a
//     warning that names the key it is near (an error with strict);
//   - anything else: not DeepSpeed's (a program's own setting kept in the same file, such as
//     DeepSpeedExamples' ImageNet "cuda_visible_devices"). DeepSpeed ignores such top-level keys
//     without a word, and so does this trainer, with a note (an error with strict).
static inline int ds_top_keys(const DsCtx *x, const cJSON *root, const char *const *known, int n) {
    static const char *const deepspeed[] = {
        "managed_gradient_accumulation", "dump_state", "disable_allgather", "seq_parallel_communication_data_type",
        "gradient_allreduce_op", "sparse_gradients", "comms_logger", "tensorboard", "wandb", "csv_monitor", "comet",
        "amp", "graph_harvesting", "zero_force_ds_cpu_optimizer", "flops_profiler", "memory_breakdown", "eigenvalue",
        "use_data_before_expert_parallelism", "hybrid_engine", "pipeline", "checkpoint", "data_types",
        "dataloader_drop_last", "log_level", "nebula", "datastates", "weight_quantization", "timers",
        "expert_parallel", "elasticity", "quantize_training", "vocabulary_size", "bfloat16", "zero_enabled"};
    const int nd = (int)(sizeof(deepspeed) / sizeof(deepspeed[0]));
    for (const cJSON *it = root->child; it; it = it->next) {
        int k = 0;
        while (k < n && strcmp(it->string, known[k])) k++;
        if (k < n) continue;
        for (k = 0; k < nd && strcmp(it->string, deepspeed[k]); k++) {}
        char path[160];
        ds_join(path, sizeof(path), NULL, it->string);
        if (k < nd) {
            if (ds_unhonoured(x, path, "a DeepSpeed setting this trainer does not implement; ignored")) return -1;
            continue;
        }
        const char *near = NULL;
        int best = strlen(it->string) <= 5 ? 2 : 3;
        for (k = 0; k < n + nd; k++) {
            const char *cand = k < n ? known[k] : deepspeed[k - n];
            int dist = ds_distance(it->string, cand);
            if (dist < best) { best = dist; near = cand; }
        }
        if (near) {
            if (ds_unhonoured(x, path, "unknown key (did you mean %s?); ignored", near)) return -1;
        } else if (x->strict) {
            return ds_unhonoured(x, path, "not a DeepSpeed key");
        } else {
            fprintf(stderr, "note: %s: %s: not a DeepSpeed key; ignored (as DeepSpeed ignores it)\n", x->file, path);
        }
    }
    return 0;
}

// Duplicate keys anywhere in the tree: DeepSpeed refuses them, and which one wins is otherwise
// a guess. Sorts each object's names (qsort) so that a big object costs n log n.
static inline int ds_name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}
static inline int ds_no_duplicates(const DsCtx *x, const cJSON *v, const char *prefix) {
    int n = 0;
    for (const cJSON *it = v->child; it; it = it->next) n++;
    if (cJSON_IsObject(v) && n > 1) {
        const char **names = (const char **)malloc(sizeof(char *) * (size_t)n);
        if (!names) { ds_error(x, NULL, "out of memory"); return -1; }
        int i = 0;
        for (const cJSON *it = v->child; it; it = it->next) names[i++] = it->string;
        qsort(names, (size_t)n, sizeof(char *), ds_name_cmp);
        for (i = 1; i < n && strcmp(names[i - 1], names[i]); i++) {}
        if (i < n) {
            char path[160];
            ds_join(path, sizeof(path), prefix, names[i]);
            free(names);
            ds_error(x, path, "duplicate key");
            return -1;
        }
        free(names);
    }
    int idx = 0;
    for (const cJSON *it = v->child; it; it = it->next, idx++) {
        if (!cJSON_IsObject(it) && !cJSON_IsArray(it)) continue;
        char path[160];
        if (cJSON_IsObject(v)) ds_join(path, sizeof(path), prefix, it->string);
        else {
            char index[16];
            snprintf(index, sizeof(index), "[%d]", idx);
            ds_cat(path, sizeof(path), prefix, index, NULL);
        }
        if (ds_no_duplicates(x, it, path)) return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Settling a file value against the command line.

// The file says "auto" (or leaves the key out, which is the same): the command line or default stays.
static inline void ds_auto(const DsCtx *x, int key, const char *path) {
    x->c->file_said[key] = CFG_FILE_AUTO;
    x->c->file_key[key] = path;
}

// The file gives a value for key. equal: it is the setting's current value. A command-line
// value that differs is a conflict; otherwise the caller stores the value, now from the file.
static inline int ds_settle(const DsCtx *x, int key, const char *path, const char *file_value, int equal) {
    TrainConfig *c = x->c;
    if (config_given(c, key) && !equal) {
        char cli[64];
        ds_error(x, path, "the file says %s but the command line says --%s %s; they conflict (make it \"auto\" "
                          "in the file to take the command line's value)",
                 file_value, config_key_name(key), config_value_str(c, key, cli, sizeof(cli)));
        return -1;
    }
    c->source[key] = CFG_SRC_FILE;
    c->file_said[key] = CFG_FILE_VALUE;
    c->file_key[key] = path;
    return 0;
}

static inline int ds_float_key(const DsCtx *x, const cJSON *obj, const char *path, int key, double lo, double hi,
                               float *field) {
    double v;
    int st = ds_number(x, obj, path, lo, hi, 0, NULL, &v);
    if (st == DS_ERROR) return -1;
    if (st == DS_AUTO) ds_auto(x, key, path);
    if (st != DS_VALUE) return 0;
    char s[40];
    config_float_str(s, sizeof(s), v);
    if (ds_settle(x, key, path, s, (float)v == *field)) return -1;
    *field = (float)v;
    return 0;
}

static inline int ds_long_key(const DsCtx *x, const cJSON *obj, const char *path, int key, double lo, double hi,
                              const char *expect, long *field) {
    double v;
    int st = ds_number(x, obj, path, lo, hi, 1, expect, &v);
    if (st == DS_ERROR) return -1;
    if (st == DS_AUTO) ds_auto(x, key, path);
    if (st != DS_VALUE) return 0;
    char s[40];
    snprintf(s, sizeof(s), "%.15g", v);
    if (ds_settle(x, key, path, s, (long)v == *field)) return -1;
    *field = (long)v;
    return 0;
}

static inline int ds_int_key(const DsCtx *x, const cJSON *obj, const char *path, int key, double lo, double hi,
                             const char *expect, int *field) {
    long v = *field; // (the range keeps it an int)
    int r = ds_long_key(x, obj, path, key, lo, hi, expect, &v);
    *field = (int)v;
    return r;
}

static inline int ds_bool_key(const DsCtx *x, const cJSON *obj, const char *path, int key, int *field) {
    int v = 0, st = ds_boolean(x, obj, path, &v);
    if (st == DS_ERROR) return -1;
    if (st == DS_AUTO) ds_auto(x, key, path);
    if (st != DS_VALUE) return 0;
    if (ds_settle(x, key, path, v ? "true" : "false", v == (*field != 0))) return -1;
    *field = v;
    return 0;
}

static inline int ds_choice_key(const DsCtx *x, const cJSON *obj, const char *path, int key,
                                const char *const *names, int n, const char *expect, int *field) {
    int v = 0, st = ds_choice(x, obj, path, names, n, 0, expect, &v);
    if (st == DS_ERROR) return -1;
    if (st == DS_AUTO) ds_auto(x, key, path);
    if (st != DS_VALUE) return 0;
    char s[64];
    snprintf(s, sizeof(s), "\"%s\"", names[v]);
    if (ds_settle(x, key, path, s, v == *field)) return -1;
    *field = v;
    return 0;
}

// A non-empty string (a path), kept in c->ds_text: the parsed file is freed when reading ends.
static inline int ds_string_key(const DsCtx *x, const cJSON *obj, const char *path, int key, const char **field) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, ds_leaf(path));
    if (!v) return 0;
    if (ds_is_auto(v)) { ds_auto(x, key, path); return 0; }
    TrainConfig *c = x->c;
    size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    if (!n || memchr(v->valuestring, '\n', n)) {
        char got[80];
        ds_error(x, path, "expected a path (a non-empty string), got %s", ds_describe(v, got, sizeof(got)));
        return -1;
    }
    if (c->ds_text_used + n + 1 > sizeof(c->ds_text)) { ds_error(x, path, "longer than %zu bytes", sizeof(c->ds_text) - 1); return -1; }
    char q[96];
    snprintf(q, sizeof(q), "\"%.80s%s\"", v->valuestring, n > 80 ? "..." : "");
    if (ds_settle(x, key, path, q, *field && !strcmp(*field, v->valuestring))) return -1;
    char *dst = c->ds_text + c->ds_text_used;
    memcpy(dst, v->valuestring, n + 1);
    c->ds_text_used += n + 1;
    *field = dst;
    return 0;
}

// An option's DeepSpeed key (its row's ds_key, read from obj, the object that holds it), read as
// its row says: type, range or choices, and what the error says is expected.
static inline int ds_option(const DsCtx *x, const cJSON *obj, int key) {
    const ConfigOption *o = &config_options()[key];
    void *f = config_field(x->c, key);
    switch (o->type) {
    case OT_FLOAT: return ds_float_key(x, obj, o->ds_key, key, o->lo, o->hi, (float *)f);
    case OT_INT: return ds_int_key(x, obj, o->ds_key, key, o->lo, o->hi, o->ds_expect, (int *)f);
    case OT_LONG: return ds_long_key(x, obj, o->ds_key, key, o->lo, o->hi, o->ds_expect, (long *)f);
    case OT_STR: return ds_string_key(x, obj, o->ds_key, key, (const char **)f);
    case OT_FLAG: return ds_bool_key(x, obj, o->ds_key, key, (int *)f);
    case OT_CHOICE: return ds_choice_key(x, obj, o->ds_key, key, o->choices, o->nchoices, o->ds_expect, (int *)f);
    default: ds_error(x, o->ds_key, "no DeepSpeed reader for this option's type"); return -1;
    }
}

// ---------------------------------------------------------------------------------------------
// The DeepSpeed-only settings: what DeepSpeed does by default, and what this trainer does.

// Reads DeepSpeed-only key k from obj (whose key path ends in the table's last component).
static inline int ds_extra_key(const DsCtx *x, const cJSON *obj, int k, const char *path_override) {
    const DsExtra *e = &ds_extras()[k];
    const char *path = path_override ? path_override : e->path;
    TrainConfig *c = x->c;
    int key = CK_DSX + k, st, b = 0;
    double v = 0.0;
    if (e->type == DSX_T_BOOL) { st = ds_boolean(x, obj, path, &b); v = b; }
    else if (e->type == DSX_T_REAL) st = ds_number(x, obj, path, 1e-30, 1e30, 0, "a number > 0 or \"auto\"", &v);
    else st = ds_number(x, obj, path, 0, 9007199254740992.0, 1, NULL, &v);
    if (st == DS_ERROR) return -1;
    if (st == DS_AUTO) ds_auto(x, key, path);
    if (st != DS_VALUE) return 0;
    c->ds_extra[k] = v;
    c->source[key] = CFG_SRC_FILE;
    c->file_said[key] = CFG_FILE_VALUE;
    c->file_key[key] = path;
    if ((k == DSX_WALL_CLOCK_BREAKDOWN || k == DSX_PROFILE) && b)
        return ds_unhonoured(x, path, "true: not implemented in this trainer; ignored");
    if (k == DSX_AIO_USE_GDS && b && !(c->build && c->build->host_compute)) // false, or a CPU trainer: what happens
        return ds_unhonoured(x, path, "true: GPUDirect Storage is not implemented; NVMe I/O goes through host "
                                      "buffers; ignored");
    return 0;
}

// A "enabled": true anywhere inside v (DeepSpeed's feature sections switch their parts so).
static inline int ds_enabled_inside(const cJSON *v) {
    for (const cJSON *it = v ? v->child : NULL; it; it = it->next) {
        if (it->string && !strcmp(it->string, "enabled") && cJSON_IsTrue(it)) return 1;
        if ((cJSON_IsObject(it) || cJSON_IsArray(it)) && ds_enabled_inside(it)) return 1;
    }
    return 0;
}
// A DeepSpeed feature this trainer does not implement, at obj's key path's last component.
// error 1: it changes the result: an error when it is on (an object with "enabled": true inside,
// or any other value but false/null); switched off it asks for what happens anyway: silent.
// error 0: it changes only speed or memory, or is the launcher's: a warning when on.
static inline int ds_feature(const DsCtx *x, const cJSON *obj, const char *path, const char *what, int error) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, ds_leaf(path));
    if (!v || cJSON_IsFalse(v) || cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == 1.0)) return 0; // 1: one rank, off
    if (cJSON_IsObject(v) && !ds_enabled_inside(v) && cJSON_GetObjectItemCaseSensitive(v, "enabled")) return 0;
    if (cJSON_IsObject(v) && !ds_enabled_inside(v) && !strcmp(path, "compression_training")) return 0;
    if (error) {
        ds_error(x, path, "%s: not implemented in this trainer", what);
        return -1;
    }
    return ds_unhonoured(x, path, "%s: not implemented in this trainer; ignored", what);
}

// Top-level settings of the engine: gradient averaging over ranks, DeepSpeed's checks, the
// collectives' element type, and DeepSpeed's features this trainer does not have.
static inline int ds_engine(const DsCtx *x, const cJSON *root) {
    TrainConfig *c = x->c;
    if (ds_extra_key(x, root, DSX_PRESCALE_GRADIENTS, NULL) || ds_extra_key(x, root, DSX_GRADIENT_PREDIVIDE_FACTOR, NULL) ||
        ds_extra_key(x, root, DSX_ZERO_ALLOW_UNTESTED_OPTIMIZER, NULL)) return -1;
    // the collectives run in the training precision: a matching request is silent
    static const char *const dtypes[] = {"fp32", "bf16", "fp16"};
    int dt = 0, st = ds_choice(x, root, "communication_data_type", dtypes, 3, 1, "\"fp32\", \"bf16\" or \"fp16\"", &dt);
    if (st == DS_ERROR) return -1;
    int ours = c->precision == ZC_BF16 ? 1 : c->precision == ZC_FP16 ? 2 : 0;
    if (st == DS_VALUE && dt != ours &&
        ds_unhonoured(x, "communication_data_type", "\"%s\": not implemented; the collectives run in the training "
                      "precision, %s", dtypes[dt], dtypes[ours])) return -1;
    static const struct { const char *key, *what; int error; } features[] = {
        {"compression_training", "DeepSpeed Compression (quantization, pruning, layer reduction)", 1},
        {"data_efficiency", "data efficiency (curriculum learning, random-LTD)", 1},
        {"curriculum_learning", "curriculum learning", 1},
        {"progressive_layer_drop", "progressive layer drop", 1},
        {"sparse_attention", "sparse attention", 1},
        {"torch_autocast", "torch.autocast mixed precision (use fp16 or bf16)", 1},
        // the autotuner picks the micro batch (so the batch) and the stage by experiments; DeepSpeed's
        // engine given "enabled": true profiles and stops after end_profile_step + 1 steps
        {"autotuning", "DeepSpeed's autotuner (it chooses the micro batch, accumulation and ZeRO stage by running "
                       "experiments; autotuning.enabled false trains the file as written)", 1},
        {"tensor_parallel", "tensor parallelism (data parallelism only)", 0},
        {"sequence_parallel_size", "sequence parallelism (data parallelism only)", 0},
        {"compile", "torch.compile / DeepCompile", 0},
    };
    for (size_t i = 0; i < sizeof(features) / sizeof(features[0]); i++)
        if (ds_feature(x, root, features[i].key, features[i].what, features[i].error)) return -1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The sections

static inline int ds_optimizer(const DsCtx *x, const cJSON *root) {
    TrainConfig *c = x->c;
    const cJSON *opt, *params = NULL;
    if (ds_object(x, root, "optimizer", &opt) == DS_ERROR) return -1;
    if (!opt) return 0; // no optimizer section: DeepSpeed would use the program's own: ours
    static const char *const keys[] = {"type", "params"};
    if (ds_known_keys(x, opt, "optimizer", keys, 2)) return -1;
    // DeepSpeed's type names (it lower-cases them), from optimizer.h's table: AdamW, Adam, Lion,
    // and torch's SGD, which is sgd-momentum when params.momentum > 0 (torch's default is 0)
    const char *types[2 * OPT_NUM];
    int kinds[2 * OPT_NUM], ntypes = 0;
    for (int k = 0; k < OPT_NUM; k++)
        for (int i = 0; i < 2; i++)
            if (optimizer_info(k)->ds_types[i]) { types[ntypes] = optimizer_info(k)->ds_types[i]; kinds[ntypes++] = k; }
    int type = 0, st = ds_choice(x, opt, "optimizer.type", types, ntypes, 1,
                                 "\"AdamW\", \"Adam\", \"Lion\", \"SGD\" or \"Lamb\" (others are not implemented in this trainer)", &type);
    if (st == DS_ERROR) return -1;
    if (ds_object(x, opt, "optimizer.params", &params) == DS_ERROR) return -1;
    int kind = st == DS_VALUE ? kinds[type] : c->optimizer, is_adam = st == DS_VALUE && !strcmp(types[type], "Adam");
    if (kind == OPT_SGD && params) { // the momentum decides which of the two
        double mu = 0.0;
        if (ds_number(x, params, "optimizer.params.momentum", 0, 0.999999, 0, NULL, &mu) == DS_ERROR) return -1;
        if (mu > 0.0) kind = OPT_SGD_MOMENTUM;
    }
    if (st == DS_AUTO) ds_auto(x, CK_OPTIMIZER, "optimizer.type");
    if (st == DS_VALUE) {
        char tv[48];
        snprintf(tv, sizeof(tv), "\"%s\" (%s)", types[type], optimizer_info(kind)->name);
        if (ds_settle(x, CK_OPTIMIZER, "optimizer.type", tv, c->optimizer == kind)) return -1;
        c->optimizer = kind;
    }
    if (!params) return 0;
    // the params the optimizer takes (optimizer.h says which hyperparameters it reads), and for
    // DeepSpeed's Adam its flags, for torch's SGD the two it has that are not implemented here
    unsigned uses = optimizer_info(kind)->uses;
    int sgd = kind == OPT_SGD || kind == OPT_SGD_MOMENTUM;
    const char *pkeys[12];
    int np = 0;
    pkeys[np++] = "lr"; pkeys[np++] = "weight_decay";
    if (uses & OPT_USES_BETAS) pkeys[np++] = "betas";
    if (uses & OPT_USES_EPS) pkeys[np++] = "eps";
    if (uses & OPT_USES_MOMENTUM || sgd) pkeys[np++] = "momentum";
    if (kind == OPT_ADAMW) { pkeys[np++] = "adam_w_mode"; pkeys[np++] = "torch_adam"; pkeys[np++] = "bias_correction"; pkeys[np++] = "amsgrad"; }
    if (sgd) { pkeys[np++] = "dampening"; pkeys[np++] = "nesterov"; }
    if (kind == OPT_LAMB) { // DeepSpeed's FusedLamb's arguments
        pkeys[np++] = "bias_correction"; pkeys[np++] = "max_coeff"; pkeys[np++] = "min_coeff";
        pkeys[np++] = "eps_inside_sqrt"; pkeys[np++] = "max_grad_norm"; pkeys[np++] = "amsgrad";
    }
    if (ds_known_keys(x, params, "optimizer.params", pkeys, np)) return -1;
    if (ds_option(x, params, CK_LR) || ds_option(x, params, CK_WEIGHT_DECAY)) return -1;
    if ((uses & OPT_USES_EPS) && ds_option(x, params, CK_EPS)) return -1;
    if ((uses & OPT_USES_MOMENTUM) && ds_option(x, params, CK_MOMENTUM)) return -1;
    if (sgd) {
        double v = 0.0;
        int flag = 0;
        if ((st = ds_number(x, params, "optimizer.params.dampening", 0, 1, 0, NULL, &v)) == DS_ERROR) return -1;
        if (st == DS_VALUE && v != 0.0) {
            ds_error(x, "optimizer.params.dampening", "only 0 is implemented in this trainer");
            return -1;
        }
        if ((st = ds_boolean(x, params, "optimizer.params.nesterov", &flag)) == DS_ERROR) return -1;
        if (st == DS_VALUE && flag) {
            ds_error(x, "optimizer.params.nesterov", "true is not implemented in this trainer");
            return -1;
        }
        return 0;
    }
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(params, "betas");
    if (ds_is_auto(betas)) {
        ds_auto(x, CK_BETA1, "optimizer.params.betas");
        ds_auto(x, CK_BETA2, "optimizer.params.betas");
    } else if (betas) {
        char got[80];
        if (!cJSON_IsArray(betas) || cJSON_GetArraySize(betas) != 2 || !cJSON_IsNumber(betas->child) ||
            !cJSON_IsNumber(betas->child->next)) {
            ds_error(x, "optimizer.params.betas", "expected [beta1, beta2] (two numbers) or \"auto\", got %s",
                     ds_describe(betas, got, sizeof(got)));
            return -1;
        }
        const double hi[2] = {0.999999, 0.999999999};
        float *field[2] = {&c->beta1, &c->beta2};
        const cJSON *b = betas->child;
        for (int i = 0; i < 2; i++, b = b->next) {
            double v = b->valuedouble;
            char path[40], s[40];
            snprintf(path, sizeof(path), "optimizer.params.betas[%d]", i);
            if (!(v >= 0.0 && v <= hi[i])) {
                ds_error(x, path, "expected a number in [0, %.10g], got %s", hi[i], ds_describe(b, got, sizeof(got)));
                return -1;
            }
            config_float_str(s, sizeof(s), v);
            if (ds_settle(x, CK_BETA1 + i, "optimizer.params.betas", s, (float)v == *field[i])) return -1;
            *field[i] = (float)v;
        }
    }
    if (kind == OPT_LAMB) {
        int flag = 0;
        double v = 0.0;
        if (ds_bool_key(x, params, "optimizer.params.bias_correction", CK_BIAS_CORRECTION, &c->bias_correction)) return -1;
        if (ds_option(x, params, CK_MAX_COEFF) || ds_option(x, params, CK_MIN_COEFF)) return -1;
        if ((st = ds_boolean(x, params, "optimizer.params.eps_inside_sqrt", &flag)) == DS_ERROR) return -1;
        if (st == DS_VALUE && flag) {
            ds_error(x, "optimizer.params.eps_inside_sqrt", "true is not implemented in this trainer (eps is added to sqrt(v))");
            return -1;
        }
        if ((st = ds_boolean(x, params, "optimizer.params.amsgrad", &flag)) == DS_ERROR) return -1;
        if (st == DS_VALUE && flag) {
            ds_error(x, "optimizer.params.amsgrad", "true is not implemented (nor in DeepSpeed's FusedLamb)");
            return -1;
        }
        if ((st = ds_number(x, params, "optimizer.params.max_grad_norm", 0, 1e30, 0, NULL, &v)) == DS_ERROR) return -1;
        if (st == DS_VALUE && v != 0.0) {
            ds_error(x, "optimizer.params.max_grad_norm", "the optimizer's own clipping is not implemented in this "
                                                          "trainer; use gradient_clipping");
            return -1;
        }
        return 0;
    }
    if (kind != OPT_ADAMW) return 0;
    int flag = 0;
    if ((st = ds_boolean(x, params, "optimizer.params.torch_adam", &flag)) == DS_ERROR) return -1;
    if (ds_bool_key(x, params, "optimizer.params.bias_correction", CK_BIAS_CORRECTION, &c->bias_correction)) return -1;
    if ((st = ds_boolean(x, params, "optimizer.params.amsgrad", &flag)) == DS_ERROR) return -1;
    if (st == DS_VALUE && flag) {
        ds_error(x, "optimizer.params.amsgrad", "true is not implemented in this trainer");
        return -1;
    }
    // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false, which makes weight decay an L2 term
    if ((st = ds_boolean(x, params, "optimizer.params.adam_w_mode", &flag)) == DS_ERROR) return -1;
    if (st == DS_VALUE && !flag && is_adam && c->weight_decay != 0.0f) {
        ds_error(x, "optimizer.params.adam_w_mode", "false (Adam with L2 weight decay) is not implemented in this "
                                                    "trainer; use AdamW, or weight_decay 0");
        return -1;
    }
    return 0;
}

static inline int ds_scheduler(const DsCtx *x, const cJSON *root) {
    TrainConfig *c = x->c;
    const cJSON *sch, *params = NULL;
    if (ds_object(x, root, "scheduler", &sch) == DS_ERROR) return -1;
    if (!sch) return 0; // no scheduler: --lr-schedule
    static const char *const keys[] = {"type", "params"};
    if (ds_known_keys(x, sch, "scheduler", keys, 2)) return -1;
    static const char *const types[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
    const char *expect = "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\" (others are not implemented in "
                         "this trainer)";
    int type = 0, st = ds_choice(x, sch, "scheduler.type", types, 3, 0, expect, &type);
    if (st == DS_ERROR) return -1;
    if (st != DS_VALUE) {
        ds_error(x, "scheduler.type", "expected %s, got %s", expect, st == DS_AUTO ? "\"auto\"" : "nothing");
        return -1;
    }
    int kind = LR_DS_WARMUP + type;
    char s[40];
    snprintf(s, sizeof(s), "\"%s\"", types[type]);
    if (ds_settle(x, CK_LR_SCHEDULE, "scheduler.type", s, c->lr_schedule == kind)) return -1;
    c->lr_schedule = kind;
    if (ds_object(x, sch, "scheduler.params", &params) == DS_ERROR) return -1;
    if (!params) return 0;
    // DeepSpeed passes params to the scheduler's constructor: a name it does not take is an error there
    static const char *const warm[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                                       "last_batch_iteration", "total_num_steps"};
    static const char *const cosine[] = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
                                         "warmup_type", "last_batch_iteration"};
    const char *const *names = kind == LR_DS_WARMUP_COSINE ? cosine : warm;
    int n = kind == LR_DS_WARMUP ? 5 : 6;
    for (const cJSON *it = params->child; it; it = it->next) {
        int k = 0;
        while (k < n && strcmp(it->string, names[k])) k++;
        if (k == n) {
            char path[160];
            ds_join(path, sizeof(path), "scheduler.params", it->string);
            ds_error(x, path, "not a parameter of %s (DeepSpeed would refuse it too)", types[type]);
            return -1;
        }
    }
    double v;
    if ((st = ds_number(x, params, "scheduler.params.last_batch_iteration", -1, -1, 1,
                        "-1 (resuming a schedule is not implemented)", &v)) == DS_ERROR) return -1;
    if (ds_option(x, params, CK_WARMUP) || ds_option(x, params, CK_WARMUP_TYPE)) return -1;
    if (kind != LR_DS_WARMUP && ds_option(x, params, CK_LR_TOTAL_STEPS)) return -1;
    if (kind == LR_DS_WARMUP_COSINE) return ds_option(x, params, CK_WARMUP_MIN_RATIO) || ds_option(x, params, CK_MIN_LR_FRAC);
    if (ds_option(x, params, CK_WARMUP_MIN_LR)) return -1;
    // warmup_max_lr is the peak, --lr, like optimizer.params.lr: as in DeepSpeed the scheduler's wins
    float before = c->lr;
    int from_opt = c->source[CK_LR] == CFG_SRC_FILE;
    if (ds_float_key(x, params, "scheduler.params.warmup_max_lr", CK_LR, 0, 1e3, &c->lr)) return -1;
    if (from_opt && c->lr != before) {
        char a[40], b[40];
        config_float_str(a, sizeof(a), before);
        config_float_str(b, sizeof(b), c->lr);
        fprintf(stderr, "warning: %s: optimizer.params.lr %s is overridden by scheduler.params.warmup_max_lr %s "
                        "(as DeepSpeed does)\n", x->file, a, b);
    }
    if (from_opt && c->file_said[CK_LR] == CFG_FILE_AUTO) { // lr from optimizer, warmup_max_lr "auto": keep lr's
        c->file_said[CK_LR] = CFG_FILE_VALUE;
        c->file_key[CK_LR] = "optimizer.params.lr";
    }
    return 0;
}

static inline int ds_precision(const DsCtx *x, const cJSON *root) {
    TrainConfig *c = x->c;
    const cJSON *fp16, *bf16;
    if (ds_object(x, root, "fp16", &fp16) == DS_ERROR || ds_object(x, root, "bf16", &bf16) == DS_ERROR) return -1;
    static const char *const fkeys[] = {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                                        "hysteresis", "consecutive_hysteresis", "min_loss_scale", "auto_cast"};
    static const char *const bkeys[] = {"enabled", "bf16_master_weights_and_grads", "bf16_optimizer_states"};
    if (ds_known_keys(x, fp16, "fp16", fkeys, 8) || ds_known_keys(x, bf16, "bf16", bkeys, 3)) return -1;
    if (fp16 && ds_extra_key(x, fp16, DSX_FP16_AUTO_CAST, NULL)) return -1;
    // 16-bit master weights or optimizer state: another result; false is what happens here
    static const char *const b16[] = {"bf16.bf16_master_weights_and_grads", "bf16.bf16_optimizer_states"};
    for (int i = 0; bf16 && i < 2; i++) {
        int on = 0, st = ds_boolean(x, bf16, b16[i], &on);
        if (st == DS_ERROR) return -1;
        if (st == DS_VALUE && on) {
            ds_error(x, b16[i], "true is not implemented in this trainer (master weights and optimizer state are fp32)");
            return -1;
        }
    }
    int fe = 0, be = 0, fs = DS_ABSENT, bs = DS_ABSENT;
    if (fp16 && (fs = ds_boolean(x, fp16, "fp16.enabled", &fe)) == DS_ERROR) return -1;
    if (bf16 && (bs = ds_boolean(x, bf16, "bf16.enabled", &be)) == DS_ERROR) return -1;
    if (fs == DS_VALUE && fe && bs == DS_VALUE && be) {
        ds_error(x, "bf16.enabled", "fp16.enabled and bf16.enabled are both true; enable one of them");
        return -1;
    }
    int want = -1;
    const char *path = NULL;
    if (fs == DS_VALUE && fe) { want = ZC_FP16; path = "fp16.enabled"; }
    else if (bs == DS_VALUE && be) { want = ZC_BF16; path = "bf16.enabled"; }
    else if (fs == DS_VALUE && bs == DS_VALUE) { want = ZC_F32; path = "fp16.enabled"; }
    else if (fs == DS_VALUE && c->precision == ZC_FP16) { want = ZC_F32; path = "fp16.enabled"; }
    else if (bs == DS_VALUE && c->precision == ZC_BF16) { want = ZC_F32; path = "bf16.enabled"; }
    if (want >= 0) {
        char s[80];
        snprintf(s, sizeof(s), "%s (%s)", want == ZC_F32 ? "false" : "true", zc_dtype_names[want]);
        if (ds_settle(x, CK_PRECISION, path, s, c->precision == want)) return -1;
        c->precision = want;
    } else if (fs == DS_AUTO || bs == DS_AUTO) ds_auto(x, CK_PRECISION, fs == DS_AUTO ? "fp16.enabled" : "bf16.enabled");
    if (!fp16) return 0;
    static const int keys[] = {CK_LOSS_SCALE, CK_INITIAL_SCALE_POWER, CK_LOSS_SCALE_WINDOW, CK_HYSTERESIS,
                               CK_CONSECUTIVE_HYSTERESIS, CK_MIN_LOSS_SCALE};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (ds_option(x, fp16, keys[i])) return -1;
    return 0;
}

// ZeRO++'s keys (zero.h): zero_quantized_weights (--zeropp-qwz), zero_hpz_partition_size
// (--zeropp-hpz), zero_quantized_gradients (true: --zeropp-qgz 4, DeepSpeed's int4; a command
// line's 8 agrees with true).
static inline int ds_zeropp(const DsCtx *x, const cJSON *z) {
    TrainConfig *c = x->c;
    if (ds_bool_key(x, z, "zero_optimization.zero_quantized_weights", CK_ZEROPP_QWZ, &c->zeropp_qwz)) return -1;
    if (ds_int_key(x, z, "zero_optimization.zero_hpz_partition_size", CK_ZEROPP_HPZ, 1, 1 << 20, NULL, &c->zeropp_hpz))
        return -1;
    const char *path = "zero_optimization.zero_quantized_gradients";
    int v = 0, st = ds_boolean(x, z, path, &v);
    if (st == DS_ERROR) return -1;
    if (st == DS_AUTO) ds_auto(x, CK_ZEROPP_QGZ, path);
    if (st != DS_VALUE) return 0;
    if (ds_settle(x, CK_ZEROPP_QGZ, path, v ? "true" : "false", v == (c->zeropp_qgz != 0))) return -1;
    if (!v) c->zeropp_qgz = 0;
    else if (!c->zeropp_qgz) c->zeropp_qgz = 4;
    return 0;
}

static inline int ds_zero(const DsCtx *x, const cJSON *root) {
    const cJSON *z, *oo = NULL, *op = NULL;
    if (ds_object(x, root, "zero_optimization", &z) == DS_ERROR) return -1;
    if (!z) return 0;
    static const char *const keys[] = {"stage", "overlap_comm", "reduce_bucket_size", "allgather_bucket_size",
                                       "contiguous_gradients", "reduce_scatter", "allgather_partitions",
                                       "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                                       "stage3_max_live_parameters", "stage3_max_reuse_distance",
                                       "stage3_gather_16bit_weights_on_model_save",
                                       "stage3_gather_fp16_weights_on_model_save", // DeepSpeed's older name
                                       "sub_group_size", "offload_optimizer", "offload_param",
                                       "gather_16bit_weights_on_model_save", // (and DeepSpeed's newest name)
                                       "zenflow", "zero_quantized_weights", "zero_hpz_partition_size",
                                       "zero_quantized_gradients"};
    if (ds_known_keys(x, z, "zero_optimization", keys, 21)) return -1;
    if (ds_feature(x, z, "zero_optimization.zenflow", "ZenFlow's stale, top-k updates (they change the result)", 1))
        return -1;
    if (ds_option(x, z, CK_ZERO_STAGE)) return -1;
    if (ds_zeropp(x, z)) return -1;
    for (int k = DSX_OVERLAP_COMM; k <= DSX_SUB_GROUP_SIZE; k++) {
        const char *alias = NULL;
        if (k == DSX_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE &&
            !cJSON_GetObjectItemCaseSensitive(z, "stage3_gather_16bit_weights_on_model_save") &&
            cJSON_GetObjectItemCaseSensitive(z, "stage3_gather_fp16_weights_on_model_save"))
            alias = "zero_optimization.stage3_gather_fp16_weights_on_model_save";
        if (k == DSX_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE && !alias &&
            !cJSON_GetObjectItemCaseSensitive(z, "stage3_gather_16bit_weights_on_model_save") &&
            cJSON_GetObjectItemCaseSensitive(z, "gather_16bit_weights_on_model_save"))
            alias = "zero_optimization.gather_16bit_weights_on_model_save";
        if (ds_extra_key(x, z, k, alias)) return -1;
    }
    // the offload sections (fast_init, pipeline*: accepted, not used; docs/deepspeed_config.md; ratio: Twin-Flow)
    static const char *const okeys[] = {"device", "pin_memory", "nvme_path", "buffer_count", "fast_init", "pipeline",
                                        "pipeline_read", "pipeline_write", "ratio"};
    static const char *const pkeys[] = {"device", "pin_memory", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu"};
    if (ds_object(x, z, "zero_optimization.offload_optimizer", &oo) == DS_ERROR) return -1;
    if (ds_known_keys(x, oo, "zero_optimization.offload_optimizer", okeys, 9)) return -1;
    if (oo && (ds_option(x, oo, CK_OFFLOAD_OPTIMIZER) || ds_option(x, oo, CK_PIN_MEMORY) ||
               ds_option(x, oo, CK_NVME_PATH) || ds_option(x, oo, CK_NVME_BUFFERS) || ds_option(x, oo, CK_OFFLOAD_RATIO)))
        return -1;
    if (ds_object(x, z, "zero_optimization.offload_param", &op) == DS_ERROR) return -1;
    if (ds_known_keys(x, op, "zero_optimization.offload_param", pkeys, 6)) return -1;
    if (op && (ds_option(x, op, CK_OFFLOAD_PARAM) || ds_option(x, op, CK_NVME_BUFFER_SIZE) ||
               ds_extra_key(x, op, DSX_PARAM_BUFFER_COUNT, NULL) || ds_extra_key(x, op, DSX_MAX_IN_CPU, NULL))) return -1;
    // one --nvme-path for all NVMe files: offload_param's nvme_path settles against it
    const cJSON *np = op ? cJSON_GetObjectItemCaseSensitive(op, "nvme_path") : NULL;
    if (np && !ds_is_auto(np)) {
        TrainConfig *c = x->c;
        if (c->source[CK_NVME_PATH] == CFG_SRC_FILE) {
            if (!cJSON_IsString(np) || !c->nvme_path || strcmp(np->valuestring, c->nvme_path)) {
                ds_error(x, "zero_optimization.offload_param.nvme_path", "differs from offload_optimizer.nvme_path: this "
                         "trainer keeps all NVMe files under one path");
                return -1;
            }
        } else if (ds_string_key(x, op, "zero_optimization.offload_param.nvme_path", CK_NVME_PATH, &c->nvme_path)) {
            return -1;
        }
    }
    // one --pin-memory for all offloaded memory: offload_param's pin_memory settles against it
    int pin = 0, st = op ? ds_boolean(x, op, "zero_optimization.offload_param.pin_memory", &pin) : DS_ABSENT;
    if (st == DS_ERROR) return -1;
    if (st == DS_VALUE) {
        TrainConfig *c = x->c;
        if (c->source[CK_PIN_MEMORY] == CFG_SRC_FILE && pin != c->pin_memory) {
            ds_error(x, "zero_optimization.offload_param.pin_memory", "%s, but offload_optimizer.pin_memory is %s: this "
                     "trainer pins all offloaded memory or none", pin ? "true" : "false", c->pin_memory ? "true" : "false");
            return -1;
        }
        if (c->source[CK_PIN_MEMORY] != CFG_SRC_FILE) {
            if (ds_settle(x, CK_PIN_MEMORY, "zero_optimization.offload_param.pin_memory", pin ? "true" : "false",
                          pin == c->pin_memory)) return -1;
            c->pin_memory = pin;
        }
    }
    return 0;
}

// aio: the NVMe I/O pool (block_size, queue_depth, thread_count are options; the rest recorded).
static inline int ds_aio(const DsCtx *x, const cJSON *root) {
    const cJSON *a;
    if (ds_object(x, root, "aio", &a) == DS_ERROR) return -1;
    if (!a) return 0;
    static const char *const keys[] = {"block_size", "queue_depth", "thread_count", "single_submit", "overlap_events",
                                       "use_gds", "intra_op_parallelism"};
    if (ds_known_keys(x, a, "aio", keys, 7)) return -1;
    return ds_option(x, a, CK_AIO_BLOCK_SIZE) || ds_option(x, a, CK_AIO_QUEUE_DEPTH) || ds_option(x, a, CK_AIO_THREADS) ||
           ds_extra_key(x, a, DSX_AIO_SINGLE_SUBMIT, NULL) || ds_extra_key(x, a, DSX_AIO_OVERLAP_EVENTS, NULL) ||
           ds_extra_key(x, a, DSX_AIO_USE_GDS, NULL) || ds_extra_key(x, a, DSX_AIO_INTRA_OP_PARALLELISM, NULL);
}

// activation_checkpointing. In DeepSpeed the model's code decides what to checkpoint (it calls
// deepspeed.checkpointing.checkpoint) and this section configures how; this model checkpoints
// every layer (or every K-th: number_checkpoints), so the section turns full recompute on unless
// the command line chose a --recompute. number_checkpoints may be null (DeepSpeed's default).
static inline int ds_activation_checkpointing(const DsCtx *x, const cJSON *root) {
    TrainConfig *c = x->c;
    const cJSON *ac;
    if (ds_object(x, root, "activation_checkpointing", &ac) == DS_ERROR) return -1;
    if (!ac) return 0;
    static const char *const keys[] = {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                                       "number_checkpoints", "synchronize_checkpoint_boundary", "profile"};
    if (ds_known_keys(x, ac, "activation_checkpointing", keys, 6)) return -1;
    for (int k = DSX_PARTITION_ACTIVATIONS; k <= DSX_PROFILE; k++) {
        if (k == DSX_NUMBER_CHECKPOINTS && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ac, "number_checkpoints"))) continue;
        if (ds_extra_key(x, ac, k, NULL)) return -1;
    }
    if (c->source[CK_DSX + DSX_NUMBER_CHECKPOINTS] == CFG_SRC_FILE && c->ds_extra[DSX_NUMBER_CHECKPOINTS] < 1) {
        ds_error(x, "activation_checkpointing.number_checkpoints", "expected a whole number >= 1, null or \"auto\", got 0");
        return -1;
    }
    if (ds_option(x, ac, CK_CPU_CHECKPOINTING)) return -1;
    if (!config_given(c, CK_RECOMPUTE)) {
        c->recompute = RECOMPUTE_FULL;
        c->source[CK_RECOMPUTE] = CFG_SRC_DERIVED;
        c->file_said[CK_RECOMPUTE] = CFG_FILE_VALUE;
        c->file_key[CK_RECOMPUTE] = "activation_checkpointing";
    }
    return 0;
}

// train_batch_size (sequences) = micro batch x accumulation x world, resolved as DeepSpeed's
// DeepSpeedConfig._set_batch_related_parameters and _batch_assertion do (deepspeed/runtime/config.py):
//   all three known: checked;  two known: the third derived with floor division (train / micro /
//   world, train / world / accumulation, or micro x accumulation x world);  train_batch_size alone:
//   accumulation 1, micro = train / world;  micro alone: accumulation 1;  then every one must be
//   >= 1 and train == micro x accumulation x world, else an error (DeepSpeed's assertion).
// What is "known": a number in the file; else a value the user typed on the command line (--batch,
// --grad-accum, --total-batch in tokens); else, for the micro batch only, --batch's default where
// the file says "auto" (the program's value, as Hugging Face fills "auto" in). The command line's
// defaults never outrank the file. Neither train_batch_size nor the micro batch known (DeepSpeed
// refuses that): the micro batch is --batch's default, left to config_validate.
static inline int ds_batch(const DsCtx *x, const cJSON *root) {
    TrainConfig *c = x->c;
    double tb = 0, mb = 0, ga = 0;
    int st_tb = ds_number(x, root, "train_batch_size", 1, 1099511627776.0, 1, NULL, &tb);
    if (st_tb == DS_ERROR) return -1;
    int st_mb = ds_number(x, root, "train_micro_batch_size_per_gpu", 1, 1 << 20, 1, NULL, &mb);
    if (st_mb == DS_ERROR) return -1;
    int st_ga = ds_number(x, root, "gradient_accumulation_steps", 1, 1 << 20, 1, NULL, &ga);
    if (st_ga == DS_ERROR) return -1;
    if (st_tb == DS_AUTO) ds_auto(x, CK_TOTAL_BATCH, "train_batch_size");
    if (st_mb == DS_AUTO) ds_auto(x, CK_BATCH, "train_micro_batch_size_per_gpu");
    if (st_ga == DS_AUTO) ds_auto(x, CK_GRAD_ACCUM, "gradient_accumulation_steps");
    long long T = c->seq_len, W = x->world;
    char s[64];
    // each value from the file against the command line's, if the user typed one
    if (st_mb == DS_VALUE) {
        snprintf(s, sizeof(s), "%.0f", mb);
        if (ds_settle(x, CK_BATCH, "train_micro_batch_size_per_gpu", s, c->batch == (int)mb)) return -1;
    }
    if (st_ga == DS_VALUE) {
        snprintf(s, sizeof(s), "%.0f", ga);
        if (ds_settle(x, CK_GRAD_ACCUM, "gradient_accumulation_steps", s, c->grad_accum == (int)ga)) return -1;
    }
    if (st_tb == DS_VALUE) {
        snprintf(s, sizeof(s), "%.0f sequences (x --seq-len %lld = %.0f tokens)", tb, T, tb * (double)T);
        if (ds_settle(x, CK_TOTAL_BATCH, "train_batch_size", s, (double)c->total_batch == tb * (double)T)) return -1;
    }
    int kb = st_mb == DS_VALUE || config_given(c, CK_BATCH) || st_mb == DS_AUTO;
    int kg = st_ga == DS_VALUE || config_given(c, CK_GRAD_ACCUM);
    int kt = st_tb == DS_VALUE || config_given(c, CK_TOTAL_BATCH);
    if (!kt && !kb && st_ga != DS_VALUE) return 0; // DeepSpeed would refuse: --batch's default, config_validate
    long long m = st_mb == DS_VALUE ? (long long)mb : c->batch;
    long long g = st_ga == DS_VALUE ? (long long)ga : c->grad_accum;
    long long tt = st_tb == DS_VALUE ? (long long)tb * T : c->total_batch; // tokens
    // names for messages: the file's key, or the option that gave the value
    const char *nm = st_mb == DS_VALUE ? "train_micro_batch_size_per_gpu" : "--batch";
    const char *ng = st_ga == DS_VALUE ? "gradient_accumulation_steps" : "--grad-accum";
    const char *nt = st_tb == DS_VALUE ? "train_batch_size" : "--total-batch / --seq-len";
    if (kt && tt % T != 0) {
        ds_error(x, "train_batch_size", "--total-batch %lld is not a multiple of --seq-len %lld", tt, T);
        return -1;
    }
    long long tbs = tt / T; // sequences
    if (kt && kb && kg) {
        if (tbs != m * g * W) {
            ds_error(x, NULL, "%s %lld != %s %lld x %s %lld x world size %lld = %lld", nt, tbs, nm, m,
                     ng, g, W, m * g * W);
            return -1;
        }
    } else if (kt && kb) { // accumulation = train / micro / world
        if (tbs % (m * W) != 0) {
            ds_error(x, NULL, "%s %lld is not a multiple of %s %lld x world size %lld = %lld, so "
                     "gradient_accumulation_steps cannot be whole", nt, tbs, nm, m, W, m * W);
            return -1;
        }
        g = tbs / (m * W);
        if (g > (1 << 30)) {
            ds_error(x, NULL, "%s %lld means %lld accumulation steps (at most 2^30)", nt, tbs, g);
            return -1;
        }
        c->source[CK_GRAD_ACCUM] = CFG_SRC_DERIVED;
    } else if (kt) { // micro = train / world / accumulation (accumulation 1 unless known)
        if (!kg) { g = 1; c->source[CK_GRAD_ACCUM] = CFG_SRC_DERIVED; }
        if (tbs % (g * W) != 0 || tbs / (g * W) > (1 << 20)) {
            if (kg) ds_error(x, NULL, "%s %lld is not a multiple of %s %lld x world size %lld = %lld with a "
                             "quotient in [1, 1048576], so train_micro_batch_size_per_gpu cannot be derived", nt, tbs,
                             ng, g, W, g * W);
            else ds_error(x, NULL, "%s %lld alone (accumulation 1) is not a multiple of world size %lld with a quotient "
                          "in [1, 1048576], so train_micro_batch_size_per_gpu cannot be derived", nt, tbs, W);
            return -1;
        }
        m = tbs / (g * W);
        c->source[CK_BATCH] = CFG_SRC_DERIVED;
    } else { // the total follows from the micro batch and accumulation (1 unless known)
        if (!kg) { g = 1; c->source[CK_GRAD_ACCUM] = CFG_SRC_DERIVED; }
        tbs = m * g * W;
        if (tbs * T > (1LL << 40)) {
            ds_error(x, NULL, "%s %lld x %s %lld x world size %lld x --seq-len %lld is over 2^40 "
                     "tokens per step", nm, m, ng, g, W, T);
            return -1;
        }
        c->source[CK_TOTAL_BATCH] = CFG_SRC_DERIVED;
    }
    c->batch = (int)m;
    c->grad_accum = (int)g;
    c->total_batch = (long)(tbs * T);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Entry points

static inline int ds_config_apply_text(TrainConfig *c, const char *name, const char *text, size_t len, int world,
                                       int strict) {
    DsCtx x;
    x.c = c; x.file = name; x.world = world < 1 ? 1 : world; x.strict = strict;
    if (len > DS_MAX_FILE_BYTES) {
        ds_error(&x, NULL, "%zu bytes is too big for a DeepSpeed config (at most %d)", len, DS_MAX_FILE_BYTES);
        return -1;
    }
    const char *nul = (const char *)memchr(text, 0, len);
    if (nul) {
        ds_error(&x, NULL, "not a JSON text: a NUL byte at offset %zu", (size_t)(nul - text));
        return -1;
    }
    // cJSON wants the terminating NUL inside the length it is given (to refuse trailing text)
    char *buf = (char *)malloc(len + 1);
    if (!buf) { ds_error(&x, NULL, "out of memory"); return -1; }
    memcpy(buf, text, len);
    buf[len] = 0;
    size_t skip = len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? 3 : 0; // a UTF-8 byte order mark
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf + skip, len + 1 - skip, &end, 1);
    if (!root) {
        size_t pos = end && end >= buf + skip ? (size_t)(end - buf) : skip;
        if (pos > len) pos = len;
        int line = 1, col = 1;
        for (size_t i = 0; i < pos; i++) {
            if (buf[i] == '\n') { line++; col = 1; }
            else col++;
        }
        char near[24];
        size_t k = 0;
        for (size_t i = pos; i < len && k < sizeof(near) - 1 && buf[i] != '\n'; i++)
            near[k++] = (unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f ? '?' : buf[i];
        near[k] = 0;
        if (pos >= len || !k) ds_error(&x, NULL, "not valid JSON: unexpected end at line %d, column %d", line, col);
        else ds_error(&x, NULL, "not valid JSON at line %d, column %d, near '%s'", line, col, near);
        free(buf);
        return -1;
    }
    free(buf);
    int rc = -1;
    char got[80];
    if (!cJSON_IsObject(root)) {
        ds_error(&x, NULL, "expected a JSON object at the top level, got %s", ds_describe(root, got, sizeof(got)));
        goto done;
    }
    if (ds_no_duplicates(&x, root, "")) goto done;
    {
        static const char *const keys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                           "gradient_accumulation_steps", "gradient_clipping", "steps_per_print",
                                           "wall_clock_breakdown", "fp16", "bf16", "optimizer", "scheduler",
                                           "zero_optimization", "aio", "activation_checkpointing",
                                           "prescale_gradients", "gradient_predivide_factor",
                                           "zero_allow_untested_optimizer", "communication_data_type",
                                           "compression_training", "data_efficiency", "curriculum_learning",
                                           "progressive_layer_drop", "sparse_attention", "torch_autocast", "autotuning",
                                           "tensor_parallel", "sequence_parallel_size", "compile"};
        if (ds_top_keys(&x, root, keys, 27)) goto done;
    }
    if (ds_option(&x, root, CK_GRAD_CLIP) || ds_option(&x, root, CK_PRINT_EVERY)) goto done;
    if (ds_extra_key(&x, root, DSX_WALL_CLOCK_BREAKDOWN, NULL)) goto done;
    if (ds_optimizer(&x, root) || ds_scheduler(&x, root) || ds_precision(&x, root) || ds_zero(&x, root) ||
        ds_aio(&x, root) || ds_activation_checkpointing(&x, root) || ds_batch(&x, root) || ds_engine(&x, root)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

// Reads and applies the file at path; c->ds_config_path names it in the resolved configuration.
static inline int ds_config_apply(TrainConfig *c, const char *path, int world, int strict) {
    DsCtx x;
    x.c = c; x.file = path; x.world = world; x.strict = strict;
    c->ds_config_path = path;
    FILE *f = fopen(path, "rb");
    if (!f) { ds_error(&x, NULL, "cannot open (%s)", strerror(errno)); return -1; }
    char *buf = (char *)malloc(DS_MAX_FILE_BYTES + 1);
    if (!buf) { fclose(f); ds_error(&x, NULL, "out of memory"); return -1; }
    size_t n = fread(buf, 1, DS_MAX_FILE_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad) { ds_error(&x, NULL, "read failed (is it a directory?)"); rc = -1; }
    else rc = ds_config_apply_text(c, path, buf, n, world, strict);
    free(buf);
    return rc;
}

#endif // DS_CONFIG_H
