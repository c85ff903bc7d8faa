// web/planner_wasm.c: `train_gpt_cpu --plan` as a WebAssembly (WASI) program, for the planner page.
//
// The page runs this as a command, one instance per plan: argv is the command line the page's
// inputs make (the same option names as the trainer's), stdout carries --json and stderr the
// trainer's one-line errors, and the exit code says which. Everything the numbers depend on is
// the trainers' own code: run/planner.h's planner_main, run/timemodel.h through it, zero.h's
// placement and schedule, and the CPU trainer's PlanBackend (cpu/workspace.h), exactly as
// train_gpt_cpu.c hands it over. Nothing here parses options, so the page follows whatever the
// planner's command line becomes.
//
// `planner.wasm --ds-config FILE WORLD` is the one addition: it reads a DeepSpeed config with
// the trainer's parser (run/ds_config.h) and prints the plan options it resolves to, one
// "--name value" per line (see ds_options below), or the trainer's error line.
#include "cpu/workspace.h"
#include "run/ds_config.h"

static void ds_out(const char *name, const char *value) { printf("--%s\n%s\n", name, value); }

static int ds_options(const char *path, const char *world_s) {
    TrainConfig c;
    config_defaults(&c);
    int world = atoi(world_s);
    if (world < 1) world = 1;
    if (ds_config_apply(&c, path, world, 0)) return 1;
    char buf[64];
    ds_out("precision", zc_dtype_names[c.precision]);
    ds_out("optimizer", optimizer_names[c.optimizer]);
    snprintf(buf, sizeof(buf), "%d", c.zero_stage), ds_out("zero-stage", buf);
    snprintf(buf, sizeof(buf), "%d", c.batch), ds_out("batch", buf);
    snprintf(buf, sizeof(buf), "%d", c.grad_accum), ds_out("grad-accum", buf);
    ds_out("offload-optimizer", config_offload_names[c.offload_optimizer]);
    ds_out("offload-param", config_offload_names[c.offload_param]);
    GPT2Recompute r = config_recompute(&c);
    ds_out("recompute", gpt2_recompute_names[r.mode]);
    return 0;
}

int main(int argc, char **argv) {
    int rc;
    if (argc == 4 && !strcmp(argv[1], "--ds-config")) rc = ds_options(argv[2], argv[3]);
    else rc = planner_main(argc, argv, &cpu_plan_backend);
    fflush(NULL);
    return rc;
}
