// Tests for planner.h: the textbook numbers, exactly, and agreement with zero_init's real
// allocations at any world size (zero_init only allocates; no MPI needed for that).
//
//   test/bin/test_planner              run the checks; exit 0 when all pass
//   test/bin/test_planner plan ARGS    the planner's command line (planner_main), for the
//                                      shell test until `train_gpt_cpu --plan` exists
#include "run/planner.h"
#include "cpu/workspace.h" // the CPU trainer's activations and workspace (cpu_plan_backend)
#include <sys/stat.h>

// The textbook model-state bytes per rank in fp32 + Adam (parameters are their own master):
// 16P, 8P + 8P/N, 4P + 12P/N, 16P/N. Written here, apart from the planner, as its oracle.
static double zero_theory_model_states(int stage, double P, int N) {
    switch (stage) {
    case 0: return 16.0 * P;
    case 1: return 8.0 * P + 8.0 * P / N;
    case 2: return 4.0 * P + 12.0 * P / N;
    default: return 16.0 * P / N;
    }
}

static int failures = 0, checks = 0;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)

static int rel_eq(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

static PlanInput bare(double P, int precision, int optimizer, int stage, int world) {
    PlanInput in;
    planner_input_defaults(&in, &cpu_plan_backend);
    in.params_count = P;
    in.zo.dtype = precision;
    in.zo.optimizer = optimizer;
    in.zo.stage = stage;
    in.world = world;
    return in;
}

static PlanInput gpt(const GPT2Config *c, int precision, int stage, int world, int B, int T) {
    PlanInput in;
    planner_input_defaults(&in, &cpu_plan_backend);
    in.cfg = *c;
    in.zo.dtype = precision;
    in.zo.stage = stage;
    in.world = world;
    in.batch = B;
    in.seq_len = T;
    return in;
}

static MemoryPlan plan(const PlanInput *in) {
    MemoryPlan p;
    int rc = planner_plan(in, &p);
    CHECK(rc == 0, "planner_plan refused a good input: %s", planner_input_problem(in));
    return p;
}

// --- the textbook ---------------------------------------------------------------------

static void test_7b(void) {
    for (int prec = ZC_BF16; prec <= ZC_FP16; prec++) {
        PlanInput in = bare(7e9, prec, OPT_ADAMW, 0, 1);
        MemoryPlan p = plan(&in);
        // 7e9 x (2 + 2 + 12) = 112 GB, exactly
        CHECK(p.model_states == 112e9, "7B %s AdamW N=1: model states %.0f != 112e9", zc_dtype_names[prec], p.model_states);
        CHECK(p.device[MEM_PARAMS] == 14e9 && p.device[MEM_GRADS] == 14e9, "7B: params/grads 14 GB each");
        CHECK(p.device[MEM_MASTER] == 28e9 && p.device[MEM_STATE] == 28e9 && p.device[MEM_STATE + 1] == 28e9,
              "7B: master, m, v 28 GB each");
        CHECK(p.optimizer == 84e9, "7B: optimizer state 84 GB (K = 12)");
        CHECK(p.model_states_textbook == 112e9, "7B: textbook figure");
        CHECK(!p.buffers_known && !p.activations_known && p.total == 112e9, "7B bare count: buffers, activations unknown");
    }
    // with a shape (LLaMA2-7B: 32 layers, h 4096, 32 heads, s 4096, b 1): textbook activations
    PlanInput in = bare(7e9, ZC_BF16, OPT_ADAMW, 0, 1);
    in.shape_known = 1; in.cfg.num_layers = 32; in.cfg.channels = 4096; in.cfg.num_heads = 32;
    in.seq_len = 4096; in.batch = 1;
    MemoryPlan p = plan(&in);
    // by hand: s*b*h = 4096*1*4096 = 16,777,216; 34 + 5*32*4096/4096 = 194; x 194 = 3,254,779,904 per layer
    CHECK(p.act_textbook_layer == 3254779904.0, "7B layer activations %.0f", p.act_textbook_layer);
    CHECK(p.act_textbook == 32.0 * 3254779904.0 && p.device[MEM_ACTIVATIONS] == p.act_textbook, "7B 32 layers");
    CHECK(p.total == 112e9 + 32.0 * 3254779904.0, "7B total = states + activations");
}

static void test_stage_formulas(void) {
    const int worlds[] = {1, 2, 3, 4, 8, 64, 1000, 1024};
    const double Ps[] = {7e9, 1.5e9, 123456789.0};
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++)
        for (size_t k = 0; k < sizeof(Ps) / sizeof(Ps[0]); k++) {
            double P = Ps[k], N = worlds[w];
            // mixed precision AdamW: K = 12
            double want[4] = {16 * P, 2 * P + 2 * P + 12 * P / N, 2 * P + (2 + 12) * P / N, (2 + 2 + 12) * P / N};
            double s[4];
            for (int S = 0; S < 4; S++) {
                PlanInput in = bare(P, ZC_BF16, OPT_ADAMW, S, worlds[w]);
                MemoryPlan p = plan(&in);
                s[S] = p.model_states;
                CHECK(rel_eq(p.model_states, want[S], 1e-15), "bf16 P=%g N=%d S=%d: %.3f != %.3f", P, worlds[w], S,
                      p.model_states, want[S]);
                // fp32 AdamW (params are the master): 16P, 4P + 4P + 8P/N, 4P + 12P/N, 16P/N
                double want32[4] = {16 * P, 4 * P + 4 * P + 8 * P / N, 4 * P + 12 * P / N, 16 * P / N};
                PlanInput in32 = bare(P, ZC_F32, OPT_ADAMW, S, worlds[w]);
                MemoryPlan p32 = plan(&in32);
                CHECK(rel_eq(p32.model_states, want32[S], 1e-15) && p32.device[MEM_MASTER] == 0,
                      "fp32 P=%g N=%d S=%d: %.3f != %.3f", P, worlds[w], S, p32.model_states, want32[S]);
                CHECK(rel_eq(p32.model_states, zero_theory_model_states(S, P, worlds[w]), 1e-15),
                      "fp32 agrees with zero_theory_model_states");
            }
            CHECK(rel_eq(s[0] / s[3], N, 1e-12), "stage 3 = N x smaller (N=%d): %.6f", worlds[w], s[0] / s[3]);
            if (worlds[w] == 1024) {
                // the ZeRO paper's reductions for large N: 16/(4 + 12/N) -> 4, 16/(2 + 14/N) -> 8
                CHECK(s[0] / s[1] > 3.95 && s[0] / s[1] < 4.0, "stage 1 ~ 4x at N=1024: %.4f", s[0] / s[1]);
                CHECK(s[0] / s[2] > 7.8 && s[0] / s[2] < 8.0, "stage 2 ~ 8x at N=1024: %.4f", s[0] / s[2]);
                CHECK(s[0] / s[3] == 1024.0, "stage 3 = 1024x at N=1024");
            }
        }
}

static void test_optimizers(void) {
    double P = 1e9;
    struct { int prec, opt; double K, master; } cases[] = {
        {ZC_BF16, OPT_ADAMW, 12, 4}, {ZC_BF16, OPT_LION, 8, 4}, {ZC_BF16, OPT_SGD_MOMENTUM, 8, 4}, {ZC_BF16, OPT_SGD, 4, 4},
        {ZC_FP16, OPT_SGD_MOMENTUM, 8, 4}, {ZC_FP16, OPT_LION, 8, 4},
        {ZC_F32, OPT_ADAMW, 8, 0}, {ZC_F32, OPT_LION, 4, 0}, {ZC_F32, OPT_SGD_MOMENTUM, 4, 0}, {ZC_F32, OPT_SGD, 0, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        PlanInput in = bare(P, cases[i].prec, cases[i].opt, 0, 1);
        MemoryPlan p = plan(&in);
        double pg = cases[i].prec == ZC_F32 ? 8 : 4;
        CHECK(p.optimizer == cases[i].K * P && p.device[MEM_MASTER] == cases[i].master * P && p.model_states == (pg + cases[i].K) * P,
              "%s %s: K=%g expected, optimizer %.0f", zc_dtype_names[cases[i].prec],
              optimizer_info(cases[i].opt)->name, cases[i].K, p.optimizer);
        // stage 1 over 4 ranks: the optimizer state is divided by 4
        in.zo.stage = 1; in.world = 4;
        p = plan(&in);
        CHECK(p.optimizer == cases[i].K * P / 4, "%s %s stage 1 N=4", zc_dtype_names[cases[i].prec],
              optimizer_info(cases[i].opt)->name);
    }
}

static void test_offload(void) {
    for (int S = 1; S < 4; S++) {
        PlanInput in = bare(7e9, ZC_BF16, OPT_ADAMW, S, 8);
        MemoryPlan on = plan(&in);
        in.zo.offload_optimizer = LOC_HOST;
        MemoryPlan off = plan(&in);
        CHECK(off.optimizer == 0 && off.device[MEM_MASTER] == 0 && off.device[MEM_STATE] == 0 && off.device[MEM_STATE + 1] == 0,
              "offload S=%d: no optimizer bytes on the device", S);
        CHECK(off.host_optimizer == on.optimizer && off.host_total == on.optimizer, "offload S=%d: the host holds them", S);
        CHECK(off.model_states == on.device[MEM_PARAMS] + on.device[MEM_GRADS], "offload S=%d: device keeps p + g", S);
        CHECK(off.model_states + off.host_optimizer == on.model_states, "offload S=%d: nothing lost", S);
    }
}

// --- activations ----------------------------------------------------------------------

static void test_activations(void) {
    // the textbook per layer in 16-bit, by hand: s=1024 b=4 h=768 a=12 -> sbh = 3,145,728,
    // 34 + 5*12*1024/768 = 114, so 358,612,992 bytes
    CHECK(planner_textbook_layer_bytes(1024, 4, 768, 12, 2) == 358612992.0, "d12 layer textbook %.0f",
          planner_textbook_layer_bytes(1024, 4, 768, 12, 2));
    // fp32: sbh(66 + 9as/h) = 3145728 * (66 + 144) = 660,602,880
    CHECK(planner_textbook_layer_bytes(1024, 4, 768, 12, 4) == 660602880.0, "d12 layer textbook fp32");
    const char *names[] = {"d12", "d24", "d36", "d48"};
    for (int k = 0; k < 4; k++) {
        GPT2Config c;
        memset(&c, 0, sizeof(c)); // (gcc cannot see that a known name always fills it)
        CHECK(gpt2_preset(names[k], &c) == 0, "preset %s", names[k]);
        int B = 4, T = 1024;
        GPT2Recompute none = {RECOMPUTE_NONE, 1, 0}, full = {RECOMPUTE_FULL, 1, 0}, sel = {RECOMPUTE_SELECTIVE, 1, 0};
        size_t floats = cpu_activation_floats(&c, B, T, none, 0);
        PlanInput in = gpt(&c, ZC_F32, 0, 1, B, T);
        MemoryPlan p = plan(&in);
        CHECK(p.device[MEM_ACTIVATIONS] == 4.0 * floats, "%s fp32: activations %.0f != 4 x %zu", names[k],
              p.device[MEM_ACTIVATIONS], floats);
        double sbh = (double)T * B * c.channels;
        CHECK(p.act_textbook_layer == sbh * (66.0 + 9.0 * c.num_heads * T / c.channels), "%s fp32 textbook", names[k]);
        // 16-bit: a layer's tensors but the LayerNorm statistics (ln1, qkv, atty, att, residual2,
        // ln2, fch, fch_gelu, residual3: BT(C + 3C + C + C + C + 4C + 4C + C) + B NH T^2 elements)
        // at 2 bytes for every layer, plus two fp32 layer slots; all else stays fp32
        double l16 = (double)B * T * 16 * c.channels + (double)B * c.num_heads * T * T;
        in.zo.dtype = ZC_BF16;
        p = plan(&in);
        CHECK(p.device[MEM_ACTIVATIONS] == 4.0 * (floats - c.num_layers * l16) + 2.0 * c.num_layers * l16 + 4.0 * 2 * l16,
              "%s bf16 activations %.0f", names[k], p.device[MEM_ACTIVATIONS]);
        CHECK(p.act_textbook_layer == sbh * (34.0 + 5.0 * c.num_heads * T / c.channels), "%s bf16 textbook", names[k]);
        CHECK(p.act_textbook == c.num_layers * p.act_textbook_layer, "%s textbook x L", names[k]);
        // recompute keeps less, and the textbook's full recompute is L inputs + one layer, its
        // selective one L layers without the attention's s x s matrices: sbh 34 in 16 bits
        in.recompute = full;
        MemoryPlan r = plan(&in);
        CHECK(r.device[MEM_ACTIVATIONS] < p.device[MEM_ACTIVATIONS], "%s recompute keeps less", names[k]);
        CHECK(r.act_textbook == c.num_layers * 2.0 * sbh + p.act_textbook_layer, "%s textbook recompute", names[k]);
        in.recompute = sel;
        r = plan(&in);
        CHECK(r.act_textbook == c.num_layers * 34.0 * sbh, "%s textbook selective", names[k]);
        // 16-bit, full, by hand: every layer's output at 2 bytes (L checkpoints), and in fp32 one
        // layer's tensors and statistics, two of residual3 (the layer's input and output)
        double btc = (double)B * T * c.channels, one = l16 + 4.0 * B * T - btc; // a layer's but residual3, stats in
        in.recompute = full;
        r = plan(&in);
        CHECK(r.device[MEM_ACTIVATIONS] == 4.0 * (floats - c.num_layers * (l16 + 4.0 * B * T)) + 2.0 * c.num_layers * btc +
                                               4.0 * (one + 2 * btc),
              "%s bf16 full recompute %.0f", names[k], r.device[MEM_ACTIVATIONS]);
    }
    // recompute, by hand, for a tiny model in fp32: L=2 C=8 NH=2 Vp=128 B=1 T=4 (BT = 4)
    GPT2Config c = {4, 100, 128, 2, 2, 8};
    size_t BT = 4, L = 2, C = 8, NH = 2, T = 4, Vp = 128;
    size_t one_layer = BT * C + 2 * BT + BT * 3 * C + BT * C + NH * T * T + BT * C + BT * C + 2 * BT + 2 * BT * 4 * C;
    size_t kept = BT * C /*encoded*/ + L * BT * C /*residual3*/ + one_layer + BT * C + 2 * BT /*lnf*/ + BT * Vp + BT
                  + BT * C + BT * C + BT * 4 * C + BT * 3 * C;
    PlanInput in = gpt(&c, ZC_F32, 0, 1, 1, 4);
    GPT2Recompute full = {RECOMPUTE_FULL, 1, 0}, none = {RECOMPUTE_NONE, 1, 0};
    in.recompute = full;
    MemoryPlan r = plan(&in);
    CHECK(r.device[MEM_ACTIVATIONS] == 4.0 * kept, "tiny recompute: %.0f != %zu", r.device[MEM_ACTIVATIONS], 4 * kept);
    in.recompute = none;
    r = plan(&in);
    CHECK(r.device[MEM_ACTIVATIONS] == 4.0 * (kept - one_layer + L * one_layer), "tiny without recompute");
    // selective keeps qkv, residual2, fch and residual3 of every layer, one layer of the rest
    size_t sel_kept = L * (BT * 3 * C + BT * C + BT * 4 * C), sel_one = one_layer - (BT * 3 * C + BT * C + BT * 4 * C);
    in.recompute.mode = RECOMPUTE_SELECTIVE;
    r = plan(&in);
    CHECK(r.device[MEM_ACTIVATIONS] == 4.0 * (kept - one_layer + sel_kept + sel_one), "tiny selective: %.0f",
          r.device[MEM_ACTIVATIONS]);
    // full every 2 layers of 4: residual3 of the two segments' last layers and one in between;
    // two layers of the rest
    GPT2Config c4 = c;
    c4.num_layers = 4;
    in = gpt(&c4, ZC_F32, 0, 1, 1, 4);
    in.recompute.mode = RECOMPUTE_FULL;
    in.recompute.every = 2;
    r = plan(&in);
    size_t k2 = kept - L * BT * C + 3 * BT * C - one_layer + 2 * one_layer;
    CHECK(r.device[MEM_ACTIVATIONS] == 4.0 * k2, "tiny full every 2: %.0f != %zu", r.device[MEM_ACTIVATIONS], 4 * k2);
    // the textbook: ceil(L/K) inputs + K layers
    CHECK(r.act_textbook == 2 * 4.0 * BT * C + 2 * r.act_textbook_layer, "textbook every 2: %.0f", r.act_textbook);
}

// --- agreement with zero_init ---------------------------------------------------------

static void *t_alloc(void *ctx, size_t n) { (void)ctx; return calloc(n ? n : 1, 1); }
static void t_free(void *ctx, void *p) { (void)ctx; free(p); }

static void test_zero_init_agreement(void) {
    ZeroBackend be;
    memset(&be, 0, sizeof(be));
    be.alloc = t_alloc;
    be.free = t_free;
    GPT2Config shapes[] = {
        {16, 512, 512, 2, 2, 32},   // the shell test's tiny model
        {64, 1000, 1024, 3, 4, 48}, // odd sizes: padding everywhere
        {32, 50257, 50304, 1, 1, 8},
    };
    const int worlds[] = {1, 2, 3, 4, 7, 8, 64, 1024};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++)
            for (int S = 0; S < 4; S++) {
                int N = worlds[w];
                Zero z, zb;
                ZeroOptions o32 = zero_options(S, ZC_F32, OPT_ADAMW), o16 = zero_options(S, ZC_BF16, OPT_ADAMW);
                zero_init(&z, &shapes[s], N - 1, N, &o32, be); // the last rank: all ranks allocate alike
                zero_init(&zb, &shapes[s], N - 1, N, &o16, be);
                PlanInput in = gpt(&shapes[s], ZC_F32, S, N, 2, shapes[s].max_seq_len);
                MemoryPlan p = plan(&in);
                for (int k = 0; k < MEM_ACTIVATIONS; k++)
                    CHECK(p.device[k] == (double)z.mem[k], "shape %zu N=%d S=%d: %s plan %.0f != zero_init %zu", s, N, S,
                          zero_memory_name(OPT_ADAMW, k), p.device[k], z.mem[k]);
                double F = (double)z.lay.num_flat;
                CHECK(p.padded_params == F && p.num_params == (double)z.lay.num_params, "parameter counts");
                // the fp32 stage formulas hold exactly on the padded P
                CHECK(p.model_states == zero_theory_model_states(S, F, N), "shape %zu N=%d S=%d: %.0f != formula %.0f",
                      s, N, S, p.model_states, zero_theory_model_states(S, F, N));
                // and in 16-bit mixed precision: 2F + 2F + 12F/N etc., exactly (F is a multiple of N)
                in.zo.dtype = ZC_BF16;
                MemoryPlan b = plan(&in);
                double want = planner_textbook_states(S, 2, 2, 12, F, N);
                CHECK(b.model_states == want && fmod(F, N) == 0, "bf16 shape %zu N=%d S=%d: %.0f != %.0f", s, N, S,
                      b.model_states, want);
                CHECK(b.device[MEM_BUFFERS] == p.device[MEM_BUFFERS] / 2, "bf16 buffers are 16-bit");
                for (int k = 0; k < MEM_ACTIVATIONS; k++)
                    CHECK(b.device[k] == (double)zb.mem[k], "bf16 shape %zu N=%d S=%d: %s plan %.0f != zero_init %zu", s, N, S,
                          zero_memory_name(OPT_ADAMW, k), b.device[k], zb.mem[k]);
                zero_free(&z);
                zero_free(&zb);
            }
}

// --- offload and NVMe: the planner's bytes per location equal zero_init's, and the files' ----

static void *t_host_alloc(void *ctx, size_t n, int pinned) {
    (void)ctx; (void)pinned;
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1)) return NULL;
    memset(p, 0, n);
    return p;
}
static void t_host_free(void *ctx, void *p, int pinned) { (void)ctx; (void)pinned; free(p); }
static void t_fatal(void *ctx, const char *msg) { (void)ctx; printf("FAIL: zero_init: %s\n", msg); exit(1); }
static void *t_alloc_aligned(void *ctx, size_t n) { return t_host_alloc(ctx, n, 0); }

static double file_bytes(const char *dir, const char *name) {
    char path[700];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (double)st.st_size : -1.0;
}

static void test_nvme_agreement(void) {
    char root[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/zeroc_planner_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(root) != NULL, "mkdtemp %s", root);
    GPT2Config shapes[] = {{16, 512, 512, 2, 2, 32}, {64, 1000, 1024, 3, 4, 48}};
    static const char *const names[] = {"params.bin", "grads.bin", "master.bin", "state0.bin", "state1.bin"};
    int cases = 0;
    for (size_t sh = 0; sh < 2; sh++)
        for (int unified = 0; unified < 2; unified++)
            for (int N = 1; N <= 3; N++)
                for (int S = 1; S <= 3; S++)
                    for (int opt = 0; opt < OPT_NUM; opt++)
                        for (int oo = LOC_HOST; oo <= LOC_NVME; oo++)
                            for (int op = LOC_DEVICE; op <= (S == 3 ? LOC_NVME : LOC_DEVICE); op++)
                                for (int shape2 = 0; shape2 < 2; shape2++) {
            int dtype = (cases % 3 == 0) ? ZC_F32 : (cases % 3 == 1) ? ZC_BF16 : ZC_FP16;
            int nbuf = shape2 ? 5 : 2;
            size_t piece = shape2 ? (size_t)1 << 20 : 2048;
            char dir[600];
            snprintf(dir, sizeof(dir), "%s/c%d", root, cases++);
            ZeroBackend be;
            memset(&be, 0, sizeof(be));
            be.alloc = unified ? t_alloc_aligned : t_alloc;
            be.free = t_free;
            be.host_alloc = t_host_alloc;
            be.host_free = t_host_free;
            be.fatal = t_fatal;
            be.unified = unified;
            ZeroOptions o = zero_options(S, dtype, opt);
            o.offload_optimizer = oo; o.offload_param = op;
            o.nvme_dir = dir; o.nvme_buffers = nbuf; o.nvme_piece = piece; o.nvme_threads = 2; o.nvme_block = 1 << 16;
            Zero z;
            zero_init(&z, &shapes[sh], N - 1, N, &o, be);
            PlanInput in = gpt(&shapes[sh], dtype, S, N, 2, 16);
            in.zo.optimizer = opt; in.zo.offload_optimizer = oo; in.zo.offload_param = op;
            in.zo.nvme_buffers = nbuf; in.zo.nvme_piece = piece;
            if (!unified) in.backend = NULL; // (a trainer whose compute memory is not the host's)
            MemoryPlan p = plan(&in);
            char what[300];
            snprintf(what, sizeof(what), "shape %zu %s N=%d S=%d %s %s optimizer %s params %s nbuf %d piece %zu", sh,
                     unified ? "unified" : "device", N, S, zc_dtype_names[dtype], optimizer_names[opt],
                     zero_location_names[oo], zero_location_names[op], nbuf, piece);
            for (int k = 0; k < MEM_ACTIVATIONS; k++) {
                CHECK(p.bytes[k] == (double)z.mem[k] && p.where[k] == z.where[k], "%s: %s plan %.0f at %s, zero_init %zu at %s",
                      what, zero_memory_name(opt, k) ? zero_memory_name(opt, k) : "-", p.bytes[k],
                      zero_location_names[p.where[k]], z.mem[k], zero_location_names[z.where[k]]);
                if (k < MEM_BUFFERS && z.where[k] == LOC_NVME && z.mem[k]) { // the file on disk, and its bounds
                    double e = k == MEM_PARAMS ? zc_dtype_size(dtype) : 4.0, shard = (double)zero_shard_size(&z);
                    CHECK(file_bytes(dir, names[k]) == p.nvme[k], "%s: %s's file is %.0f bytes, planned %.0f", what,
                          names[k], file_bytes(dir, names[k]), p.nvme[k]);
                    CHECK(p.nvme[k] >= e * shard && p.nvme[k] < e * shard + z.lay.num_units * 4096.0,
                          "%s: %s: %.0f bytes for %.0f elements", what, names[k], p.nvme[k], shard);
                }
            }
            // staging by hand for two placements: the unified backend's optimizer on NVMe (nbuf sets of
            // master + state pieces), a device's optimizer in host memory (2 + 2 whole unit slices)
            double e = zc_dtype_size(dtype), nst = optimizer_info(opt)->slices;
            size_t slice = zero_max_unit(&z) / N;
            if (unified && oo == LOC_NVME && op == LOC_DEVICE && piece == 2048)
                CHECK(p.bytes[MEM_STAGING] == nbuf * 2048.0 * 4 * (1 + nst), "%s: staging %.0f", what, p.bytes[MEM_STAGING]);
            if (!unified && oo == LOC_HOST && op == LOC_DEVICE)
                CHECK(p.bytes[MEM_STAGING] == 4.0 * slice * e, "%s: staging %.0f", what, p.bytes[MEM_STAGING]);
            zero_free(&z);
            struct stat st;
            CHECK(stat(dir, &st) != 0, "%s: zero_free left %s behind", what, dir);
        }
    CHECK(cases > 400, "%d cases", cases);
    rmdir(root);
}

// The trainer's own configuration path: options -> TrainConfig -> PlanInput -> plan equals
// zero_init's allocations plus the activations gpt2_build allocates (4 bytes per float).
static void test_from_train_config(void) {
    ZeroBackend be;
    memset(&be, 0, sizeof(be));
    be.alloc = t_alloc;
    be.free = t_free;
    char *argv[] = {(char *)"train", (char *)"--layers", (char *)"3", (char *)"--channels", (char *)"48",
                    (char *)"--heads", (char *)"4", (char *)"--vocab-size", (char *)"1000", (char *)"--max-seq-len",
                    (char *)"32", (char *)"--seq-len", (char *)"24", (char *)"--batch", (char *)"3", (char *)"--zero-stage",
                    (char *)"3", NULL};
    TrainConfig c;
    config_defaults(&c);
    int rc = config_parse(&c, 17, argv);
    CHECK(rc == 0 && config_validate(&c, 4) == 0, "config_parse");
    PlanInput in = planner_input_from_train_config(&c, 4, &cpu_plan_backend);
    MemoryPlan p = plan(&in);
    Zero z;
    ZeroOptions zo = config_zero_options(&c); // as the trainer makes it
    zero_init(&z, &c.model, 1, 4, &zo, be);
    z.mem[MEM_ACTIVATIONS] = cpu_activation_floats(&c.model, c.batch, c.seq_len, config_recompute(&c), 0) * sizeof(float);
    // (fp32's workspace: the fp32 matmuls' scratch, at the threads the plan assumed)
    z.mem[MEM_WORKSPACE] = cpu_f32_matmul_scratch_bytes(&c.model, c.batch, c.seq_len, planner_threads(&in));
    double actual[4 * MEM_KINDS];
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < MEM_KINDS; k++) {
            CHECK(q > 0 || p.device[k] == (double)z.mem[k], "from TrainConfig: %s", zero_memory_name(OPT_ADAMW, k));
            actual[q * MEM_KINDS + k] = (double)z.mem[k];
        }
    zero_free(&z);
    // the table beside the allocations: "=" when they match, DIFFERS (naming the rank) when not
    char buf[16384];
    FILE *f = tmpfile();
    planner_print_table(f, &p, actual, 4);
    rewind(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strstr(buf, "every kind on every rank matches exactly") && !strstr(buf, "DIFFERS"), "matching table:\n%s", buf);
    actual[2 * MEM_KINDS + MEM_BUFFERS] += 4;
    f = tmpfile();
    planner_print_table(f, &p, actual, 4);
    rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strstr(buf, "DIFFERS (rank 2)") && strstr(buf, "MISMATCH"), "mismatching table:\n%s", buf);
}

static void test_d12_world_1024(void) {
    GPT2Config c;
    gpt2_preset("d12", &c);
    PlanInput in = gpt(&c, ZC_BF16, 3, 1024, 4, 1024);
    MemoryPlan p = plan(&in);
    CHECK(p.num_params == 124475904.0, "d12 has 124,475,904 parameters (padded vocab rows included): %.0f", p.num_params);
    CHECK(fmod(p.padded_params, 1024.0 * ZERO_ALIGN) == 0 && p.padded_params >= p.num_params, "d12 padded for 1024 ranks");
    CHECK(p.model_states == 16.0 * p.padded_params / 1024, "d12 stage 3 over 1024 ranks: 16P/N");
}

static void test_bad_inputs(void) {
    PlanInput in = bare(1e9, ZC_BF16, OPT_ADAMW, 4, 1);
    MemoryPlan p;
    CHECK(planner_plan(&in, &p) != 0 && planner_input_problem(&in), "stage 4 refused");
    in = bare(1e9, ZC_BF16, OPT_ADAMW, 0, 0);
    CHECK(planner_plan(&in, &p) != 0, "world 0 refused");
    GPT2Config c = {16, 512, 512, 2, 3, 32};
    in = gpt(&c, ZC_F32, 0, 1, 1, 16);
    CHECK(planner_plan(&in, &p) != 0, "channels not a multiple of heads refused");
    c.num_heads = 2;
    in = gpt(&c, ZC_F32, 0, 1, 1, 17);
    CHECK(planner_plan(&in, &p) != 0, "seq-len beyond max_seq_len refused");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "plan")) return planner_main(argc - 1, argv + 1, &cpu_plan_backend, &config_cpu_build);
    test_7b();
    test_stage_formulas();
    test_optimizers();
    test_offload();
    test_activations();
    test_zero_init_agreement();
    test_nvme_agreement();
    test_from_train_config();
    test_d12_world_1024();
    test_bad_inputs();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
