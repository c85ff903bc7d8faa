// Fuzz target for --deepspeed FILE.json: the input's bytes are the config file's contents, fed
// through ds_config_apply_text (cJSON, then every section), config_validate, the LR schedule and
// both resolved-configuration reports.
//
// Built two ways (as test/fuzz_dataloader.c):
//   make fuzz                          clang -fsanitize=fuzzer,address,undefined -DZERO_LIBFUZZER;
//                                      crashing inputs land in test/fuzz_regressions/ds_config/
//   make test/bin/fuzz_ds_config_asan  gcc + sanitizers with the replay main() below, which the
//                                      suite runs over test/fuzz_regressions/ds_config/ and the
//                                      seeds (test/test_ds_config_fuzz_regressions.sh)
// The input is plain JSON, so seeds are ordinary configs (test/ds_configs/, examples/).
// The command-line side varies with a hash of the input: processes 1-4, --strict, and which of
// --lr, --batch, --total-batch, --grad-accum, --zero-stage, --precision, --lr-schedule were
// "given" (marked as command-line values), so conflicts and "auto" take every path.
//
// Beyond "no crash, no sanitizer report", it checks what must hold whenever a config is
// accepted: the batch identity, a finite non-negative lr at every step, a JSON log line that
// cJSON reads back, and a key path recorded for everything the file set.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // open_memstream
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "run/ds_config.h"
#include "core/optimizer.h"

static FILE *sink(void) {
    static FILE *f = NULL;
    if (!f) f = fopen("/dev/null", "w");
    if (!f) abort();
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = 1469598103934665603ULL; // FNV-1a
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ULL;
    TrainConfig c;
    config_defaults(&c);
    c.model.num_layers = 2; c.model.channels = 32; c.model.num_heads = 2; c.model.max_seq_len = 16;
    c.model.vocab_size = 512; c.model.padded_vocab_size = 512;
    c.seq_len = 16;
    c.steps = 1 + (int)((h >> 20) % 300);
    int world = 1 + (int)(h & 3), strict = (int)((h >> 2) & 1);
    // options "given on the command line", with values that sometimes agree with a file's
    if (h & (1u << 3)) { c.lr = 0.001f; c.source[CK_LR] = CFG_SRC_CLI; }
    if (h & (1u << 4)) { c.batch = 4; c.source[CK_BATCH] = CFG_SRC_CLI; }
    if (h & (1u << 5)) { c.total_batch = 16L * 4 * world * 2; c.source[CK_TOTAL_BATCH] = CFG_SRC_CLI; }
    if (h & (1u << 6)) { c.grad_accum = 2; c.source[CK_GRAD_ACCUM] = CFG_SRC_CLI; }
    if (h & (1u << 7)) { c.zero_stage = 2; c.source[CK_ZERO_STAGE] = CFG_SRC_CLI; }
    if (h & (1u << 8)) { c.precision = (int)((h >> 9) % 3); c.source[CK_PRECISION] = CFG_SRC_CLI; }
    if (h & (1u << 11)) { c.lr_schedule = (int)((h >> 12) % LR_NUM_SCHEDULES); c.source[CK_LR_SCHEDULE] = CFG_SRC_CLI; }
    if (h & (1u << 15)) { c.warmup = (int)((h >> 16) % 20); c.source[CK_WARMUP] = CFG_SRC_CLI; }
    c.ds_config_path = "fuzz.json";

    if (ds_config_apply_text(&c, "fuzz.json", (const char *)data, size, world, strict) != 0) return 0;
    for (int k = 0; k < CK_NUM; k++)
        if (c.file_said[k] != CFG_FILE_SILENT && !c.file_key[k]) abort();
    if (config_validate(&c, world) != 0) return 0;
    if (c.total_batch != (long)c.batch * c.seq_len * world * c.grad_accum) abort();
    if (c.grad_accum != config_accum_steps(&c, world)) abort();
    int last = c.steps + 5;
    LrSchedule sched = config_lr_schedule(&c);
    for (int s = 0; s <= last; s++) {
        float lr = lr_at_step(&sched, s);
        if (!isfinite(lr) || lr < 0.0f) abort();
    }
    if (!isfinite(lr_at_step(&sched, 1 << 30))) abort();
    config_print_resolved(sink(), &c);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) abort();
    config_log_resolved(m, &c);
    fclose(m);
    cJSON *back = cJSON_Parse(text);
    if (!back || !cJSON_GetObjectItemCaseSensitive(back, "settings")) abort();
    cJSON_Delete(back);
    free(text);
    return 0;
}

#include "fuzz_replay.h" // main() for replaying inputs in the suite
