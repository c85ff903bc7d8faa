// Compile-only check that ds_config.h (with config.h and optimizer.h) is valid CUDA C++ with no
// warnings, the way train_gpt.cu will include it. Built by test/test_ds_config.sh when nvcc
// exists; it needs no GPU.
#include <stdio.h>
#include "run/ds_config.h"
#include "core/optimizer.h"

int host_side(const char *path) {
    TrainConfig c;
    config_defaults(&c);
    if (ds_config_apply(&c, path, 2, 0) != 0 || config_validate(&c, 2) != 0) return -1;
    config_print_resolved(stdout, &c);
    config_log_resolved(stdout, &c);
    LrSchedule sched = config_lr_schedule(&c);
    return (int)(1000.0f * lr_at_step(&sched, 3));
}
