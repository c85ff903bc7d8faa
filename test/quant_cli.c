// quant_cli: core/quant.h on files, for test_quant.sh's numpy reference.
//   quant_cli [--scalar] DTYPE BLOCK BITS IN ACC OUT_MSG OUT_DEQ OUT_ACC
// --scalar: core/quant.h's scalar loops instead of its SIMD path (the same bytes are expected).
// IN: n elements of DTYPE (fp32/bf16/fp16, raw little-endian); ACC: n fp32.
// Writes the message (zq_quantize), its dequantized values in DTYPE (zq_dequantize) and
// ACC + the dequantized values in fp32 (zq_dequantize_add).
#include <stdio.h>
#include <stdlib.h>
#include "core/quant.h"

static void *slurp(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "quant_cli: cannot open %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END); *bytes = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
    void *p = malloc(*bytes + 1);
    if (fread(p, 1, *bytes, f) != *bytes) { fprintf(stderr, "quant_cli: cannot read %s\n", path); exit(2); }
    fclose(f);
    return p;
}
static void spit(const char *path, const void *p, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f)) { fprintf(stderr, "quant_cli: cannot write %s\n", path); exit(2); }
}
int main(int argc, char **argv) {
    int path = ZQ_SIMD;
    if (argc > 1 && !strcmp(argv[1], "--scalar")) { path = ZQ_SCALAR; argc--; argv++; }
    if (argc != 9) { fprintf(stderr, "usage: quant_cli [--scalar] DTYPE BLOCK BITS IN ACC OUT_MSG OUT_DEQ OUT_ACC\n"); return 2; }
    int dtype = -1;
    for (int t = 0; t < ZC_NUM_DTYPES; t++) if (!strcmp(argv[1], zc_dtype_names[t])) dtype = t;
    size_t block = (size_t)atol(argv[2]);
    int bits = atoi(argv[3]);
    if (dtype < 0 || block == 0 || (bits != 4 && bits != 8)) { fprintf(stderr, "quant_cli: bad arguments\n"); return 2; }
    size_t in_bytes, acc_bytes, es = zc_dtype_size(dtype);
    void *in = slurp(argv[4], &in_bytes);
    float *acc = (float *)slurp(argv[5], &acc_bytes);
    size_t n = in_bytes / es;
    if (acc_bytes != n * sizeof(float)) { fprintf(stderr, "quant_cli: ACC holds %zu bytes, not %zu\n", acc_bytes, n * 4); return 2; }
    size_t mb = zq_bytes(n, block, bits);
    void *msg = malloc(mb + 1);
    memset(msg, 0xAB, mb); // every byte of the message must be written
    zq_quantize_path(msg, in, n, dtype, block, bits, path);
    void *deq = malloc(n * es + 1);
    zq_dequantize_path(deq, dtype, NULL, msg, n, block, bits, path);
    zq_dequantize_path(NULL, ZC_F32, acc, msg, n, block, bits, path);
    spit(argv[6], msg, mb);
    spit(argv[7], deq, n * es);
    spit(argv[8], acc, n * sizeof(float));
    printf("n %zu block %zu bits %d: %zu message bytes, %s path\n", n, block, bits, mb,
           path == ZQ_SCALAR ? "scalar" : zq_simd_path());
    free(in); free(acc); free(msg); free(deq);
    return 0;
}
