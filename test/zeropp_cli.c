// zeropp_cli: zero.h's ZeRO++ collectives on known data, over MPI, for test_zeropp.sh's numpy check.
//   mpirun -np N zeropp_cli DIR PRECISION STAGE QWZ HPZ QGZ BLOCK
// Every rank sets the same parameters (a pseudo-random function of unit and index, magnitudes
// spread over blocks) and, at stage 3, gathers every unit for a forward: it writes what arrived
// (DIR/gather_R_U.f32, widened) and rank 0 what the ranks hold (DIR/param_U.f32, the parameters in
// the element type, widened). Then each rank fills each unit's gradient bucket with its own
// values (DIR/grad_R_U.f32, widened), reduces them as the backward does, and writes the summed
// slice it owns (DIR/sum_R_U.f32). Hosts: the backend's (ZERO_HOST_ID).
#include "cpu/mpi_backend.h"

// (the trainer's parts of the backend's header that this program does not use)
static void (*const unused_[])(void) = {(void (*)(void))mpi_handle_errors, (void (*)(void))mpi_heap_report,
                                        (void (*)(void))mpi_heap_huge_pages, (void (*)(void))mpi_keep_heap,
                                        (void (*)(void))xcalloc_floats};

static float value(unsigned u, unsigned i, unsigned salt) { // in [-1, 1) times a block-dependent magnitude
    unsigned x = u * 2654435761u ^ (i + 0x9E3779B9u) * 40503u ^ salt * 2246822519u;
    x ^= x >> 15; x *= 0x2c1b3c6dU; x ^= x >> 12; x *= 0x297a2d39U; x ^= x >> 15;
    float r = (float)(x & 0xFFFFFF) / 8388608.0f - 1.0f;
    return r * ldexpf(1.0f, (int)((i / 97 + u) % 9) - 4);
}
static void write_f32(const char *dir, const char *name, int a, int b, const void *p, size_t n, int dtype) {
    char path[4096];
    if (a >= 0) snprintf(path, sizeof(path), "%s/%s_%d_%d.f32", dir, name, a, b);
    else snprintf(path, sizeof(path), "%s/%s_%d.f32", dir, name, b);
    float *w = (float *)malloc(n * sizeof(float));
    zc_widen(w, p, n, dtype);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(w, sizeof(float), n, f) != n) { fprintf(stderr, "error: cannot write %s\n", path); exit(1); }
    fclose(f);
    free(w);
}

int main(int argc, char **argv) {
    if (argc != 8) { fprintf(stderr, "usage: zeropp_cli DIR PRECISION STAGE QWZ HPZ QGZ BLOCK\n"); return 2; }
    (void)unused_;
    MPI_Init(&argc, &argv);
    static MpiBackend b;
    b.comm = MPI_COMM_WORLD;
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.world);
    b.nodes = 1; b.timeout = 120;
    MPI_Op_create(mpi_sum_bf16, 1, &b.sum16[ZC_BF16]);
    MPI_Op_create(mpi_sum_fp16, 1, &b.sum16[ZC_FP16]);
    mpi_find_hosts(&b);
    const char *dir = argv[1];
    int dtype = !strcmp(argv[2], "bf16") ? ZC_BF16 : !strcmp(argv[2], "fp16") ? ZC_FP16 : ZC_F32;
    ZeroOptions o = zero_options(atoi(argv[3]), dtype, OPT_ADAMW);
    o.zeropp_qwz = atoi(argv[4]); o.zeropp_hpz = atoi(argv[5]); o.zeropp_qgz = atoi(argv[6]); o.zeropp_block = atoi(argv[7]);
    ZeroBackend be = mpi_backend(&b);
    char why[320];
    if (zero_pp_problem(&o, &be, b.world, why, sizeof(why))) { fprintf(stderr, "error: %s\n", why); return 1; }
    GPT2Config cfg = {16, 200, 256, 2, 2, 48};
    static Zero z;
    zero_init(&z, &cfg, b.rank, b.world, &o, be);
    int U = z.lay.num_units;
    size_t maxu = zero_max_unit(&z);
    float *host = (float *)malloc(maxu * sizeof(float));
    for (int u = 0; u < U; u++) {
        size_t pad = gpt2_unit_padded(&z.lay, u);
        for (size_t i = 0; i < pad; i++) host[i] = value((unsigned)u, (unsigned)i, 0);
        zero_set_unit(&z, u, host);
        if (b.rank == 0) { // what the ranks hold: the values in the element type
            void *p = malloc(pad * z.esize);
            zc_narrow(p, host, pad, dtype);
            write_f32(dir, "param", -1, u, p, pad, dtype);
            free(p);
        }
    }
    zero_begin_step(&z, 0);
    zero_begin_forward(&z, 0, 1);
    if (z.stage == 3)
        for (int u = 0; u < U; u++) write_f32(dir, "gather", b.rank, u, zero_params(&z, u, -1), gpt2_unit_padded(&z.lay, u), dtype);
    for (int u = U - 1; u >= 0; u--) { // the backward's order
        size_t pad = gpt2_unit_padded(&z.lay, u);
        if (z.stage == 3) zero_params(&z, u, -1);
        void *g = zero_grads(&z, u);
        for (size_t i = 0; i < pad; i++) host[i] = value((unsigned)u, (unsigned)i, 1 + (unsigned)b.rank);
        zc_narrow(g, host, pad, dtype);
        write_f32(dir, "grad", b.rank, u, g, pad, dtype);
        zero_grads_done(&z, u);
    }
    zero_end_backward(&z);
    for (int u = 0; u < U; u++) write_f32(dir, "sum", b.rank, u, zero_update_grads(&z, u), zero_slice(&z, u), dtype);
    free(host);
    zero_free(&z);
    mpi_free_groups(&b);
    MPI_Finalize();
    return 0;
}
