// optimizer.h: the optimizers (AdamW, Lion, SGD, LAMB) as elementwise updates over fp32 state
// slices, and the learning-rate schedules. Shared by both trainers.
//
// Contract
//   - An optimizer is one row of optimizer_table(): its name (--optimizer), the DeepSpeed type
//     names that select it, and the fp32 state it keeps per parameter as `slices`: arrays laid out
//     like the parameters, named (AdamW: m and v; Lion: m; SGD with momentum: the momentum
//     buffer; plain SGD: none). Bytes of state per parameter: 4 x slices. What partitions,
//     places and schedules those slices is ZeRO's business (zero.h): it keeps `slices` fp32
//     arrays it does not interpret. Mixed precision's fp32 master weights are ZeRO's too, not
//     an optimizer's.
//   - OptimizerHyper: the hyperparameters; optimizer_step_begin() turns them, the step's lr, the
//     update count and the global gradient norm into OptStep, the per-step scalars (bias
//     corrections, the clip scale), computed once on the host so that kernels only do
//     elementwise work.
//   - optimizer_element(): the update of one parameter, written once for host and device
//     (ZC_HD), dispatching on the kind; adamw_element, lion_element, sgd_element are the same
//     updates for loops that dispatch once outside (the CPU's, which then vectorise).
//       AdamW: torch.optim.AdamW's arithmetic (decoupled decay first, then bias-corrected moments);
//         without bias correction (DeepSpeed's bias_correction: false) p -= lr m / (sqrt(v) + eps).
//       Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
//         c = b1 m + (1 - b1) g;  p = p (1 - lr wd) - lr sign(c);  m = b2 m + (1 - b2) g.
//       SGD (torch.optim.SGD, dampening 0, not Nesterov): g += wd p;  with momentum mu:
//         buf = mu buf + g, g = buf;  p -= lr g.
//       LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), with DeepSpeed's
//         FusedLamb arithmetic (csrc/lamb): m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//         u = m / (sqrt(v) + eps) + wd p   (uncorrected moments; p before this update);
//         p -= step_size * trust * u,  step_size = lr sqrt(1 - b2^t) / (1 - b1^t) (lr without
//         bias correction), trust = clamp(|p| / |u|, min_coeff, max_coeff) over the WHOLE tensor,
//         and 1 when either norm is 0 (DeepSpeed's defaults: max_coeff 10, min_coeff 0.01).
//   - Per-tensor reductions (optimizer_reductions() > 0: LAMB's 2, sum p^2 and sum u^2). The
//     element update then needs numbers about the whole tensor it belongs to, and under ZeRO a
//     tensor's elements are spread over the ranks' shards (and, offloaded, over pieces streamed
//     from NVMe): this is what makes LAMB (and Adafactor-style factored optimizers, LARS) harder
//     under ZeRO than AdamW, whose update of an element reads that element alone. So such an
//     optimizer declares R sums per tensor, and its update is two passes: optimizer_reduce_element()
//     adds one element's terms (from the state before the update, which it does not write), ZeRO
//     (zero.h) sums them over its shard per tensor and then over the ranks (one all-reduce of
//     R x tensors doubles per step), optimizer_trust() turns a tensor's sums into its factor, and
//     the element update runs with OptStep.lamb_lr = step_size x that factor for the tensor.
//     `decay` (0 or 1) says whether this element takes weight decay (2-D weights do; biases and
//     LayerNorm parameters do not): the caller knows the tensors, this header does not.
//   - LrSchedule + lr_at_step(): linear warmup, then constant / linear / cosine down to
//     min_lr_frac; or DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR with DeepSpeed's
//     arithmetic and its engine's step indexing (see lr_deepspeed()).
// Depends on nothing above it (no ZeRO, no options, no command line). No global state.
#ifndef OPTIMIZER_H
#define OPTIMIZER_H

#include <math.h>

#ifndef ZC_HD
#ifdef __CUDACC__
#define ZC_HD __host__ __device__
#else
#define ZC_HD
#endif
#endif

// ----------------------------------------------------------------------------------------
// The optimizers

enum { OPT_ADAMW, OPT_LION, OPT_SGD_MOMENTUM, OPT_SGD, OPT_LAMB, OPT_NUM };
#define OPT_MAX_SLICES 2
#define OPT_MAX_REDUCTIONS 2
static const char *const optimizer_names[OPT_NUM] = {"adamw", "lion", "sgd-momentum", "sgd", "lamb"}; // --optimizer
// Which hyperparameters of OptimizerHyper an optimizer reads (besides the lr and weight decay).
enum { OPT_USES_BETAS = 1, OPT_USES_EPS = 2, OPT_USES_MOMENTUM = 4, OPT_USES_TRUST = 8 };

typedef struct {
    const char *name;                          // optimizer_names[kind]
    const char *ds_types[2];                   // DeepSpeed's optimizer.type values (matched ignoring case)
    unsigned uses;                             // OPT_USES_*
    int slices;                                // fp32 state arrays per parameter
    const char *slice_names[OPT_MAX_SLICES];   // as logged and planned ("adam_m", ...)
    const char *slice_labels[OPT_MAX_SLICES];  // for people ("Adam m", ...)
} OptimizerInfo;

static inline const OptimizerInfo *optimizer_table(void) {
    static const OptimizerInfo t[OPT_NUM] = {
        {"adamw", {"AdamW", "Adam"}, OPT_USES_BETAS | OPT_USES_EPS, 2, {"adam_m", "adam_v"}, {"Adam m", "Adam v"}},
        {"lion", {"Lion", NULL}, OPT_USES_BETAS, 1, {"lion_m", NULL}, {"Lion m", NULL}},
        {"sgd-momentum", {NULL, NULL}, OPT_USES_MOMENTUM, 1, {"momentum", NULL}, {"momentum buffer", NULL}},
        {"sgd", {"SGD", NULL}, 0, 0, {NULL, NULL}, {NULL, NULL}}, // DeepSpeed's "SGD" with momentum > 0: sgd-momentum
        {"lamb", {"Lamb", NULL}, OPT_USES_BETAS | OPT_USES_EPS | OPT_USES_TRUST, 2, {"lamb_m", "lamb_v"},
         {"LAMB m", "LAMB v"}},
    };
    return t;
}
static inline const OptimizerInfo *optimizer_info(int kind) { return &optimizer_table()[kind]; }
// Sums per tensor an optimizer's update needs before it runs (0: none; LAMB: sum p^2, sum u^2).
static inline int optimizer_reductions(int kind) { return kind == OPT_LAMB ? 2 : 0; }

typedef struct {
    int kind;                         // OPT_*
    float beta1, beta2, eps, weight_decay;
    float momentum;                   // sgd-momentum's mu
    float grad_clip;                  // clip the global gradient norm to this; 0: off
    int bias_correction;              // AdamW: 1 divides the moments by 1 - beta^t (torch's); 0 does not
                                      // (DeepSpeed's Adam with bias_correction false); LAMB: the same
    float max_coeff, min_coeff;       // LAMB: the trust ratio's clamp (DeepSpeed's max_coeff, min_coeff)
} OptimizerHyper;

// The per-step scalars every element of one update shares.
typedef struct {
    int kind;
    float lr, beta1, beta2, eps, weight_decay, momentum;
    float bias_correction1, bias_correction2_sqrt; // AdamW: 1 - beta1^t, sqrt(1 - beta2^t); both 1 without
                                                   // bias correction (dividing by 1 is exact: the same element update)
    float grad_scale; // multiplies every gradient: global-norm clipping (and loss-scale removal)
    float max_coeff, min_coeff; // LAMB: the trust ratio's clamp
    float lamb_step;  // LAMB: lr sqrt(1 - beta2^t) / (1 - beta1^t) (lr without bias correction)
    float lamb_lr;    // LAMB: lamb_step x the trust ratio of the tensor being updated (set per tensor)
} OptStep;

// t: the number of this update, counting from 1 (steps skipped for overflow do not count).
// grad_norm: global norm of the (unscaled) gradient; clipping applies when grad_clip > 0.
static inline OptStep optimizer_step_begin(const OptimizerHyper *h, float lr, int t, float grad_norm) {
    OptStep s;
    s.kind = h->kind;
    s.lr = lr; s.beta1 = h->beta1; s.beta2 = h->beta2; s.eps = h->eps; s.weight_decay = h->weight_decay;
    s.momentum = h->momentum;
    s.bias_correction1 = h->bias_correction ? (float)(1.0 - pow(h->beta1, t)) : 1.0f;
    s.bias_correction2_sqrt = h->bias_correction ? (float)sqrt(1.0 - pow(h->beta2, t)) : 1.0f;
    s.grad_scale = 1.0f;
    if (h->grad_clip > 0.0f && grad_norm > h->grad_clip) s.grad_scale = h->grad_clip / grad_norm;
    s.max_coeff = h->max_coeff; s.min_coeff = h->min_coeff;
    s.lamb_step = lr * s.bias_correction2_sqrt / s.bias_correction1; // (both 1 without bias correction)
    s.lamb_lr = s.lamb_step;
    return s;
}

// LAMB's trust ratio of one tensor from its sums over all ranks (sum p^2, sum u^2), as
// DeepSpeed's FusedLamb: |p| / |u| clamped to [min_coeff, max_coeff], 1 when either norm is 0.
static inline float optimizer_trust(const OptStep *s, const double *sums) {
    double w = sqrt(sums[0]), u = sqrt(sums[1]);
    if (w == 0.0 || u == 0.0) return 1.0f;
    double r = w / u;
    if (r > s->max_coeff) r = s->max_coeff;
    if (r < s->min_coeff) r = s->min_coeff;
    return (float)r;
}
// The step with tensor-level numbers in place for the elements of one tensor (sums: its R sums
// over all ranks): LAMB's lamb_lr = lamb_step x trust; other optimizers' step unchanged.
static inline OptStep optimizer_step_for_tensor(const OptStep *s, const double *sums) {
    OptStep t = *s;
    if (s->kind == OPT_LAMB) t.lamb_lr = s->lamb_step * optimizer_trust(s, sums);
    return t;
}

// The element updates' arithmetic, one IEEE operation at a time. On the GPU each is an
// explicitly rounded intrinsic, so that nvcc never fuses a product and a sum into one FMA (its
// default): the device's bits are then those of a host compiled without contraction, and the GPU
// trainer's update gives the same bits on the device or offloaded to the host (optimizer_engine.h).
#if defined(__CUDA_ARCH__)
#define OPT_MUL(a, b) __fmul_rn((a), (b))
#define OPT_ADD(a, b) __fadd_rn((a), (b))
#define OPT_SUB(a, b) __fsub_rn((a), (b))
#define OPT_DIV(a, b) __fdiv_rn((a), (b))
#define OPT_SQRT(a) __fsqrt_rn(a)
#else
#define OPT_MUL(a, b) ((a) * (b))
#define OPT_ADD(a, b) ((a) + (b))
#define OPT_SUB(a, b) ((a) - (b))
#define OPT_DIV(a, b) ((a) / (b))
#define OPT_SQRT(a) sqrtf(a)
#endif

// One parameter p with gradient g; m, v its state (unused ones may be NULL); decay 0 or 1.
ZC_HD static inline void adamw_element(const OptStep *s, float *p, float *m, float *v, float g, int decay) {
    g = OPT_MUL(g, s->grad_scale);
    float param = *p;
    if (decay) param = OPT_MUL(param, OPT_SUB(1.0f, OPT_MUL(s->lr, s->weight_decay)));
    float mt = OPT_ADD(OPT_MUL(s->beta1, *m), OPT_MUL(OPT_SUB(1.0f, s->beta1), g));
    float vt = OPT_ADD(OPT_MUL(s->beta2, *v), OPT_MUL(OPT_MUL(OPT_SUB(1.0f, s->beta2), g), g));
    float denom = OPT_ADD(OPT_DIV(OPT_SQRT(vt), s->bias_correction2_sqrt), s->eps);
    param = OPT_SUB(param, OPT_MUL(OPT_DIV(s->lr, s->bias_correction1), OPT_DIV(mt, denom)));
    *m = mt; *v = vt; *p = param;
}
ZC_HD static inline void lion_element(const OptStep *s, float *p, float *m, float g, int decay) {
    g = OPT_MUL(g, s->grad_scale);
    float param = *p;
    if (decay) param = OPT_MUL(param, OPT_SUB(1.0f, OPT_MUL(s->lr, s->weight_decay)));
    float c = OPT_ADD(OPT_MUL(s->beta1, *m), OPT_MUL(OPT_SUB(1.0f, s->beta1), g));
    param = OPT_SUB(param, OPT_MUL(s->lr, c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f)));
    *m = OPT_ADD(OPT_MUL(s->beta2, *m), OPT_MUL(OPT_SUB(1.0f, s->beta2), g));
    *p = param;
}
// buf: the momentum buffer, or NULL for plain SGD.
ZC_HD static inline void sgd_element(const OptStep *s, float *p, float *buf, float g, int decay) {
    g = OPT_MUL(g, s->grad_scale);
    float param = *p;
    if (decay) g = OPT_ADD(g, OPT_MUL(s->weight_decay, param));
    if (buf) { g = OPT_ADD(g, OPT_MUL(s->momentum, *buf)); *buf = g; }
    *p = OPT_SUB(param, OPT_MUL(s->lr, g));
}
// LAMB's direction u for one element, and its new moments (not stored: the reduction pass and
// the update pass both call this, and must agree to the bit).
ZC_HD static inline float lamb_direction(const OptStep *s, float p, float m, float v, float g, int decay, float *mt,
                                         float *vt) {
    g = OPT_MUL(g, s->grad_scale);
    *mt = OPT_ADD(OPT_MUL(s->beta1, m), OPT_MUL(OPT_SUB(1.0f, s->beta1), g));
    *vt = OPT_ADD(OPT_MUL(s->beta2, v), OPT_MUL(OPT_MUL(OPT_SUB(1.0f, s->beta2), g), g));
    float u = OPT_DIV(*mt, OPT_ADD(OPT_SQRT(*vt), s->eps));
    if (decay) u = OPT_ADD(u, OPT_MUL(s->weight_decay, p));
    return u;
}
ZC_HD static inline void lamb_element(const OptStep *s, float *p, float *m, float *v, float g, int decay) {
    float mt, vt, u = lamb_direction(s, *p, *m, *v, g, decay, &mt, &vt);
    *p = OPT_SUB(*p, OPT_MUL(s->lamb_lr, u));
    *m = mt; *v = vt;
}
// The per-tensor terms of one element (optimizer_reductions() of them), from the state before
// the update: LAMB's p^2 and u^2, in double (a float's square is exact there).
ZC_HD static inline void optimizer_reduce_element(const OptStep *s, float p, const float *s0, const float *s1, float g,
                                                  int decay, double *terms) {
    float mt, vt, u = lamb_direction(s, p, *s0, *s1, g, decay, &mt, &vt);
    (void)mt; (void)vt;
    terms[0] = (double)p * (double)p;
    terms[1] = (double)u * (double)u;
}
ZC_HD static inline void optimizer_element(const OptStep *s, float *p, float *s0, float *s1, float g, int decay) {
    switch (s->kind) {
    case OPT_LION: lion_element(s, p, s0, g, decay); break;
    case OPT_SGD_MOMENTUM: sgd_element(s, p, s0, g, decay); break;
    case OPT_SGD: sgd_element(s, p, (float *)0, g, decay); break;
    case OPT_LAMB: lamb_element(s, p, s0, s1, g, decay); break;
    default: adamw_element(s, p, s0, s1, g, decay); break;
    }
}

// ----------------------------------------------------------------------------------------
// Learning-rate schedules

// ours (linear warmup, then constant / linear / cosine down to min_lr_frac) and DeepSpeed's
// WarmupLR, WarmupDecayLR, WarmupCosineLR
enum { LR_CONSTANT, LR_LINEAR, LR_COSINE, LR_DS_WARMUP, LR_DS_WARMUP_DECAY, LR_DS_WARMUP_COSINE, LR_NUM_SCHEDULES };
enum { LR_WARMUP_LOG, LR_WARMUP_LINEAR }; // warmup_type of DeepSpeed's schedules
static const char *const lr_schedule_names[LR_NUM_SCHEDULES] = {"constant", "linear", "cosine",
                                                                "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
static const char *const lr_warmup_type_names[2] = {"log", "linear"};

typedef struct {
    int kind;                // LR_*
    float lr;                // the peak (DeepSpeed's warmup_max_lr, or lr_opt for the cosine)
    int warmup;              // warmup steps
    float min_lr_frac;       // ours: the final lr as a fraction of the peak; WarmupCosineLR's cos_min_ratio
    int steps;               // ours: the step the decay reaches min_lr_frac
    float warmup_min_lr;     // WarmupLR, WarmupDecayLR: where the warmup starts
    float warmup_min_ratio;  // WarmupCosineLR: warmup starts from this times lr
    int warmup_type;         // LR_WARMUP_LOG or LR_WARMUP_LINEAR
    int total_steps;         // WarmupDecayLR, WarmupCosineLR: total_num_steps
} LrSchedule;

// DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py), with W = max(2, warmup_num_steps),
// T = total_num_steps, and i the scheduler's last_batch_iteration:
//   warmup (i < W):   log: g = log(i + 1) / log(W)     linear: g = i / W
//   WarmupLR:         lr = min_lr + (max_lr - min_lr) * (i < W ? g : 1)
//   WarmupDecayLR:    the same, with g = max(0, (T - i) / max(1, T - W)) once i >= W
//   WarmupCosineLR:   lr = lr_opt * ratio, ratio = min_ratio + g * (1 - min_ratio) in warmup, then
//                     max(0, cos_min + (1 - cos_min) * (1 + cos(pi * (i - W + 1) / (T - W))) / 2)
//                     (no clamp at T: past it DeepSpeed's cosine rises again, and so does this)
// Indexing as DeepSpeed's engine drives them: the scheduler is built with i = -1, which sets the
// lr of the first update (min_lr for WarmupLR and WarmupDecayLR, 0 for WarmupCosineLR), and it
// steps once after each applied update (not after an fp16 overflow skip). So update s (0-based,
// counting applied updates) runs with i = s - 1: the first two updates both use the i = -1 and
// i = 0 values, which are equal.
static inline double lr_deepspeed(const LrSchedule *c, int s) {
    int i = s - 1, w = c->warmup < 2 ? 2 : c->warmup;
    int total = c->total_steps;
    double peak = c->lr, min_lr = c->warmup_min_lr;
    double g = c->warmup_type == LR_WARMUP_LINEAR ? (double)i / w : log((double)i + 1.0) / log((double)w);
    if (c->kind == LR_DS_WARMUP_COSINE) {
        if (i < 0) return 0.0;
        double r0 = c->warmup_min_ratio, cmin = c->min_lr_frac;
        if (i < w) return peak * (r0 + g * (1.0 - r0));
        double x = (1.0 + cos(3.141592653589793 * (double)(i - w + 1) / (double)(total - w))) / 2.0;
        double ratio = cmin + (1.0 - cmin) * x;
        return peak * (ratio > 0.0 ? ratio : 0.0);
    }
    if (i < 0) return min_lr;
    if (i >= w) {
        g = 1.0;
        if (c->kind == LR_DS_WARMUP_DECAY) {
            double span = total - w > 1 ? (double)(total - w) : 1.0;
            g = (double)(total - i) / span;
            if (g < 0.0) g = 0.0;
        }
    }
    return min_lr + (peak - min_lr) * g;
}

// Learning rate of update s (0-based): linear warmup to the peak over `warmup` steps, then the
// schedule from the peak down to min_lr_frac of it, reached at the last step; or DeepSpeed's.
static inline float lr_at_step(const LrSchedule *c, int s) {
    if (c->kind >= LR_DS_WARMUP) return (float)lr_deepspeed(c, s);
    if (s < c->warmup) return (float)((double)c->lr * (s + 1) / c->warmup);
    double peak = c->lr, min_lr = peak * c->min_lr_frac;
    int span = c->steps - c->warmup;
    double p = (double)(s - c->warmup) / (span > 1 ? span : 1);
    if (p > 1.0) p = 1.0;
    switch (c->kind) {
    case LR_LINEAR: return (float)(min_lr + (peak - min_lr) * (1.0 - p));
    case LR_COSINE: return (float)(min_lr + (peak - min_lr) * 0.5 * (1.0 + cos(3.141592653589793 * p)));
    default: return (float)peak;
    }
}

#endif // OPTIMIZER_H
