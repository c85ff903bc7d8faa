// optimizer.h: AdamW and the learning-rate schedule, shared by both trainers.
//
// Contract
//   - adamw_element(): the update of one parameter, exactly torch.optim.AdamW's arithmetic
//     (decoupled decay first, then bias-corrected moments). Written once for host and device.
//   - AdamWStep: the per-step scalars (lr, bias corrections, clip scale), computed once per step
//     on the host by adamw_step_begin() so that kernels only do elementwise work.
//   - lr_at_step(): linear warmup, then constant / linear / cosine down to min_lr_frac; or one of
//     DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR with DeepSpeed's arithmetic and its
//     engine's step indexing (see lr_deepspeed()).
// No global state.
#ifndef OPTIMIZER_H
#define OPTIMIZER_H

#include <math.h>
#include "run/config.h"

#ifndef ZC_HD
#ifdef __CUDACC__
#define ZC_HD __host__ __device__
#else
#define ZC_HD
#endif
#endif

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2_sqrt; // 1 - beta1^t, sqrt(1 - beta2^t)
    float grad_scale; // multiplies every gradient: global-norm clipping (and loss-scale removal)
} AdamWStep;

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
// i = 0 values, which are equal. Here max_lr and lr_opt are --lr, min_lr --warmup-min-lr,
// min_ratio --warmup-min-ratio, cos_min --min-lr-frac, T --lr-total-steps (default --steps).
static inline double lr_deepspeed(const TrainConfig *c, int s) {
    int i = s - 1, w = c->warmup < 2 ? 2 : c->warmup;
    int total = c->lr_total_steps > 0 ? c->lr_total_steps : c->steps;
    double peak = c->lr, min_lr = c->warmup_min_lr;
    double g = c->warmup_type == LR_WARMUP_LINEAR ? (double)i / w : log((double)i + 1.0) / log((double)w);
    if (c->lr_schedule == LR_DS_WARMUP_COSINE) {
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
        if (c->lr_schedule == LR_DS_WARMUP_DECAY) {
            double span = total - w > 1 ? (double)(total - w) : 1.0;
            g = (double)(total - i) / span;
            if (g < 0.0) g = 0.0;
        }
    }
    return min_lr + (peak - min_lr) * g;
}

// Learning rate of update s (0-based): linear warmup to the peak over `warmup` steps, then the
// schedule from the peak down to min_lr_frac of it, reached at the last step; or DeepSpeed's.
static inline float lr_at_step(const TrainConfig *c, int s) {
    if (c->lr_schedule >= LR_DS_WARMUP) return (float)lr_deepspeed(c, s);
    if (s < c->warmup) return (float)((double)c->lr * (s + 1) / c->warmup);
    double peak = c->lr, min_lr = peak * c->min_lr_frac;
    int span = c->steps - c->warmup;
    double p = (double)(s - c->warmup) / (span > 1 ? span : 1);
    if (p > 1.0) p = 1.0;
    switch (c->lr_schedule) {
    case LR_LINEAR: return (float)(min_lr + (peak - min_lr) * (1.0 - p));
    case LR_COSINE: return (float)(min_lr + (peak - min_lr) * 0.5 * (1.0 + cos(3.141592653589793 * p)));
    default: return (float)peak;
    }
}

// t: the number of this update, counting from 1 (steps skipped for overflow do not count).
// grad_norm: global norm of the (unscaled) gradient; clipping applies when grad_clip > 0.
static inline AdamWStep adamw_step_begin(const TrainConfig *c, float lr, int t, float grad_norm) {
    AdamWStep s;
    s.lr = lr; s.beta1 = c->beta1; s.beta2 = c->beta2; s.eps = c->eps; s.weight_decay = c->weight_decay;
    s.bias_correction1 = (float)(1.0 - pow(c->beta1, t));
    s.bias_correction2_sqrt = (float)sqrt(1.0 - pow(c->beta2, t));
    s.grad_scale = 1.0f;
    if (c->grad_clip > 0.0f && grad_norm > c->grad_clip) s.grad_scale = c->grad_clip / grad_norm;
    return s;
}

// One parameter p with gradient g and moments m, v; decay is 0 or 1 for this element.
ZC_HD static inline void adamw_element(float *p, float *m, float *v, float g, const AdamWStep *s, int decay) {
    g *= s->grad_scale;
    float param = *p;
    if (decay) param *= 1.0f - s->lr * s->weight_decay;
    float mt = s->beta1 * *m + (1.0f - s->beta1) * g;
    float vt = s->beta2 * *v + (1.0f - s->beta2) * g * g;
    float denom = sqrtf(vt) / s->bias_correction2_sqrt + s->eps;
    param -= (s->lr / s->bias_correction1) * (mt / denom);
    *m = mt; *v = vt; *p = param;
}

#endif // OPTIMIZER_H
