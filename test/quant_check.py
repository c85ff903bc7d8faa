# The numpy reference for core/quant.h (test_quant.sh): ZeRO++'s block-wise symmetric quantization
# written again from the contract's formulas, block by block, in numpy's float32 arithmetic
# (each operation IEEE-rounded, as the C code's), compared with quant_cli's files byte for byte,
# on both of quant.h's host paths: the SIMD one (AVX-512 where compiled in) and the scalar one.
import os, subprocess, sys
import numpy as np

cli, work = sys.argv[1], sys.argv[2]
PATHS = (("simd", []), ("scalar", ["--scalar"]))
shown = []
rng = np.random.default_rng(11)
fails = 0

def bf16_round(x):  # float32 -> bf16 bits, nearest even; NaN -> quiet NaN of the same sign
    u = x.view(np.uint32).astype(np.uint64)
    nan = np.isnan(x)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r

def widen(raw, dtype):
    if dtype == "fp32": return raw.view(np.float32).copy()
    if dtype == "bf16": return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw.view(np.float16).astype(np.float32)

def narrow(x, dtype):
    if dtype == "fp32": return x.astype(np.float32).tobytes()
    if dtype == "bf16": return bf16_round(x).tobytes()
    return x.astype(np.float16).tobytes()

def reference(x, block, bits, acc):
    qmax = np.float32(7 if bits == 4 else 127)
    n = len(x); nb = (n + block - 1) // block
    scales = np.zeros(nb, np.float32); q = np.zeros(n, np.int64)
    with np.errstate(all="ignore"):
        for b in range(nb):
            xb = x[b * block:(b + 1) * block]
            if not np.all(np.isfinite(xb)): scales[b] = np.nan; continue
            s = np.float32(np.max(np.abs(xb))) / qmax
            scales[b] = s
            if s > 0: q[b * block:(b + 1) * block] = np.clip(np.rint(xb / s), -qmax, qmax).astype(np.int64)
        sx = np.repeat(scales, block)[:n]
        deq = (q.astype(np.float32) * sx).astype(np.float32)
        accd = (acc + deq).astype(np.float32)
    if bits == 8: codes = q.astype(np.int8).tobytes()
    else:
        nib = (q & 0xF).astype(np.uint8)
        if n % 2: nib = np.append(nib, np.uint8(0))
        codes = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()
    return scales.tobytes() + codes, deq, accd, scales

def case(name, raw, dtype, block, bits):
    for path, flag in PATHS: one_case(f"{name} [{path}]", flag, raw, dtype, block, bits)

def one_case(name, flag, raw, dtype, block, bits):
    global fails
    x = widen(raw, dtype)
    acc = rng.standard_normal(len(x)).astype(np.float32)
    p = lambda s: os.path.join(work, s)
    raw.tofile(p("in")); acc.tofile(p("acc"))
    r = subprocess.run([cli, *flag, dtype, str(block), str(bits), p("in"), p("acc"), p("msg"), p("deq"), p("out")],
                       capture_output=True, text=True)
    if r.returncode: print(f"FAIL {name}: quant_cli: {r.stderr.strip()}"); fails += 1; return
    if not flag and not shown: shown.append(1); print("quant_cli's SIMD path here:", r.stdout.strip().split(", ")[-1])
    msg, deq, accd, scales = reference(x, block, bits, acc)
    got_msg = open(p("msg"), "rb").read(); got_deq = open(p("deq"), "rb").read(); got_acc = open(p("out"), "rb").read()
    bad = []
    if got_msg != msg: bad.append("message")
    if got_deq != narrow(deq, dtype): bad.append("dequantized")
    if got_acc != accd.tobytes(): bad.append("dequantize_add")
    if bad: bad = [", ".join(bad) + " differ from numpy's"]
    # the contract's bound, for finite blocks: |x' - x| <= scale/2 (1 + 2^-14) + 2^-142
    fin = np.repeat(np.isfinite(scales), block)[:len(x)]
    lim = np.repeat(scales, block)[:len(x)].astype(np.float64) / 2 * (1 + 2.0 ** -14) + 2.0 ** -142
    err = np.abs(deq.astype(np.float64) - x.astype(np.float64))
    if np.any(err[fin] > lim[fin]): bad.append(f"an error beyond the bound (by {np.max(err[fin] - lim[fin]):.3g})")
    if bad: print(f"FAIL {name}: {'; '.join(bad)}"); fails += 1
    else:
        worst = np.max(err[fin] / np.where(lim[fin] > 0, lim[fin], 1)) if fin.any() else 0
        print(f"ok   {name}: {len(x)} elements, {len(msg)} message bytes, bit-identical to numpy; "
              f"worst error {worst:.3f} of the bound")

for dtype in ("fp32", "bf16", "fp16"):
    for bits in (8, 4):
        # 2048 (the default, a short last block), 64, 40 (not a multiple of the 16 lanes), and
        # the odd 7 and 17 (int4 blocks starting mid-byte); n odd for 17 (a padding nibble)
        for block in (2048, 64, 40, 7, 17):
            n = {2048: 5000, 64: 5000, 40: 1000, 7: 333, 17: 1001}[block]
            x = (rng.standard_normal(n) * np.exp(rng.uniform(-6, 3, n))).astype(np.float32)
            if dtype == "bf16": raw = bf16_round(x)
            elif dtype == "fp16": raw = x.astype(np.float16)
            else: raw = x
            case(f"{dtype} int{bits} block {block}", raw, dtype, block, bits)

# Edge cases, fp32: all-zero blocks, ties of rint (x / scale = k + 1/2 exactly), the largest
# magnitude at either sign, subnormals, and blocks holding Inf and NaN (scale NaN: all NaN).
block = 8
edge = np.array([0, 0, 0, 0, 0, 0, 0, 0,                      # a zero block: scale 0, codes 0
                 127, 0.5, 1.5, 2.5, -0.5, -1.5, -126.5, 3,   # scale 1: ties go to even
                 -7, 3.5, 2.5, 0.5, 1.5, -2.5, 6.5, 4.5,      # int4 scale 1 likewise
                 1e-45, -3e-45, 1e-44, 0, 0, 0, 0, 2e-45,     # subnormals
                 1, 2, np.inf, 3, 4, 5, 6, 7,                 # Inf: the block's scale is NaN
                 1, np.nan, 3, 4, 5, 6, 7, 8,                 # NaN likewise
                 -1e38, 3e38, 1, 2, 3, 4, 5, 6, 7], np.float32)
for bits in (8, 4): case(f"edge cases int{bits}", edge, "fp32", block, bits)
# The same edge cases as 16-bit inputs (their Inf and NaN; subnormals flush to 0 in bf16's
# rounding here but stay fp16 subnormals), in blocks of 32 (two SIMD vectors, the second full)
# and of 8; and tiny scales, so that dequantized values are subnormal in the 16-bit outputs.
tiny = (rng.standard_normal(96) * 1e-41).astype(np.float32)
tiny16 = (rng.standard_normal(96) * 1e-6).astype(np.float16)
for bits in (8, 4):
    for blk in (32, 8):
        case(f"edge cases bf16 int{bits} block {blk}", bf16_round(edge), "bf16", blk, bits)
        with np.errstate(all="ignore"): e16 = edge.astype(np.float16)
        case(f"edge cases fp16 int{bits} block {blk}", e16, "fp16", blk, bits)
    case(f"subnormal scales fp32 int{bits}", tiny, "fp32", 32, bits)
    case(f"subnormal scales bf16 int{bits}", bf16_round(tiny * np.float32(1e4)), "bf16", 32, bits)
    case(f"subnormal outputs fp16 int{bits}", tiny16, "fp16", 32, bits)
# a big vector through the OpenMP path
big = rng.standard_normal(1 << 20).astype(np.float32)
case("fp32 int8 block 2048, 2^20 elements (threads)", big, "fp32", 2048, 8)
case("bf16 int4 block 2048, 2^20 elements (threads)", bf16_round(big), "bf16", 2048, 4)
sys.exit(1 if fails else 0)
